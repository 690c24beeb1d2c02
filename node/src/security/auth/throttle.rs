//! Failed logins, limited per client address and per user name across
//! every connection and port (on top of each connection's own delay,
//! `access::penalty`): a guesser with many connections gets no more
//! guesses than one with a single connection.
//!
//! Each address and each user name has a bucket of failures: [`ADDRESS`]
//! and [`USER`] say how many it holds and how fast it refills. A login
//! whose address or user has an empty bucket is refused without checking
//! its password (no hashing: a flood costs the node nothing), so while a
//! user is guessed at, its own logins are refused too until the guessing
//! stops: the price of limiting guesses per user (connections already
//! logged in are not touched). Loopback clients have no address bucket: a
//! local proxy speaks for many clients. A name that is no user has its
//! bucket too, so answers do not tell which names exist. Buckets are kept
//! for at most [`KEYS_MAX`] keys; past that, new ones share one bucket.
//!
//! Pure: the time is passed in.

use std::collections::HashMap;
use std::net::IpAddr;

use tally_world::Instant;

/// How many failures a bucket holds, and how many it gets back a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Failures in a row before the bucket is empty.
    pub burst: u32,
    /// Failures given back each second.
    pub per_second: u32,
}

/// An address's failures: a burst of 20, then 2 a second.
pub const ADDRESS: Budget = Budget {
    burst: 20,
    per_second: 2,
};
/// A user's failures: a burst of 10, then 1 a second.
pub const USER: Budget = Budget {
    burst: 10,
    per_second: 1,
};
/// Most buckets kept, of each kind.
pub const KEYS_MAX: usize = 10_000;

/// A bucket's level, in thousandths of a failure.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: u64,
    at: Instant,
}

impl Bucket {
    fn full(budget: Budget, now: Instant) -> Bucket {
        Bucket {
            level: u64::from(budget.burst) * 1000,
            at: now,
        }
    }

    fn refill(&mut self, budget: Budget, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.at).as_millis());
        let gained = ms
            .unwrap_or(u64::MAX)
            .saturating_mul(u64::from(budget.per_second));
        self.level = self
            .level
            .saturating_add(gained)
            .min(u64::from(budget.burst) * 1000);
        self.at = now;
    }
}

/// Buckets of one kind (addresses or user names).
#[derive(Debug)]
struct Buckets<K> {
    budget: Budget,
    keys: HashMap<K, Bucket>,
    /// Shared by the keys past [`KEYS_MAX`].
    others: Bucket,
}

impl<K: std::hash::Hash + Eq + Clone> Buckets<K> {
    fn new(budget: Budget, now: Instant) -> Self {
        Buckets {
            budget,
            keys: HashMap::new(),
            others: Bucket::full(budget, now),
        }
    }

    /// `key`'s bucket, refilled to `now`.
    fn get(&mut self, key: &K, now: Instant) -> &mut Bucket {
        if !self.keys.contains_key(key) && self.keys.len() >= KEYS_MAX {
            let budget = self.budget;
            self.keys.retain(|_, b| {
                b.refill(budget, now);
                b.level < u64::from(budget.burst) * 1000
            });
        }
        let bucket = if self.keys.contains_key(key) || self.keys.len() < KEYS_MAX {
            let fresh = Bucket::full(self.budget, now);
            self.keys.entry(key.clone()).or_insert(fresh)
        } else {
            &mut self.others
        };
        bucket.refill(self.budget, now);
        bucket
    }
}

/// Why a login was not tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// Too many failures from the client's address lately.
    Address,
    /// Too many failures for the user lately.
    User,
}

/// The node's failed logins, per address and per user name.
#[derive(Debug)]
pub struct Throttle {
    addresses: Buckets<IpAddr>,
    users: Buckets<String>,
}

impl Throttle {
    /// No failures yet.
    pub fn new(now: Instant) -> Throttle {
        Throttle {
            addresses: Buckets::new(ADDRESS, now),
            users: Buckets::new(USER, now),
        }
    }

    /// Whether a login of `user` from `addr` may be tried now.
    pub fn may_try(
        &mut self,
        addr: Option<IpAddr>,
        user: &str,
        now: Instant,
    ) -> Result<(), Limited> {
        if let Some(a) = counted(addr)
            && self.addresses.get(&a, now).level < 1000
        {
            return Err(Limited::Address);
        }
        if self.users.get(&user.to_string(), now).level < 1000 {
            return Err(Limited::User);
        }
        Ok(())
    }

    /// Counts a failed login of `user` from `addr`.
    pub fn failed(&mut self, addr: Option<IpAddr>, user: &str, now: Instant) {
        if let Some(a) = counted(addr) {
            let b = self.addresses.get(&a, now);
            b.level = b.level.saturating_sub(1000);
        }
        let b = self.users.get(&user.to_string(), now);
        b.level = b.level.saturating_sub(1000);
    }
}

/// The address whose failures count: none for loopback clients.
fn counted(addr: Option<IpAddr>) -> Option<IpAddr> {
    addr.map(|a| a.to_canonical()).filter(|a| !a.is_loopback())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::time::Duration;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn an_address_gets_its_burst_then_two_failures_a_second() {
        let t0 = Instant::now();
        let mut t = Throttle::new(t0);
        let a = ip("10.0.0.5");
        for i in 0..20 {
            // A different user each time: only the address limits.
            let user = format!("u{i}");
            assert_eq!(t.may_try(a, &user, t0), Ok(()), "failure {i}");
            t.failed(a, &user, t0);
        }
        assert_eq!(t.may_try(a, "new", t0), Err(Limited::Address));
        assert_eq!(
            t.may_try(ip("10.0.0.6"), "new", t0),
            Ok(()),
            "another address"
        );
        assert_eq!(
            t.may_try(ip("::ffff:10.0.0.5"), "new", t0),
            Err(Limited::Address)
        );
        let later = t0 + Duration::from_millis(500);
        assert_eq!(t.may_try(a, "new", later), Ok(()), "one back after 500 ms");
        t.failed(a, "new", later);
        assert_eq!(t.may_try(a, "new", later), Err(Limited::Address));
        // Loopback clients are not limited by address.
        for _ in 0..100 {
            t.failed(ip("127.0.0.1"), "x", t0);
        }
        assert_eq!(t.may_try(ip("127.0.0.1"), "y", t0), Ok(()));
    }

    #[test]
    fn a_user_gets_its_burst_then_one_failure_a_second_from_any_address() {
        let t0 = Instant::now();
        let mut t = Throttle::new(t0);
        for i in 0..10 {
            let addr = ip(&format!("10.0.1.{i}"));
            assert_eq!(t.may_try(addr, "app", t0), Ok(()));
            t.failed(addr, "app", t0);
        }
        assert_eq!(t.may_try(ip("10.9.9.9"), "app", t0), Err(Limited::User));
        assert_eq!(t.may_try(None, "app", t0), Err(Limited::User));
        assert_eq!(t.may_try(ip("10.9.9.9"), "other", t0), Ok(()));
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(t.may_try(None, "app", t1), Ok(()));
        // Refilled, but never past the burst.
        let much_later = t0 + Duration::from_secs(3600);
        for _ in 0..10 {
            t.failed(None, "app", much_later);
        }
        assert_eq!(t.may_try(None, "app", much_later), Err(Limited::User));
    }

    #[test]
    fn names_past_the_limit_share_one_bucket() {
        let t0 = Instant::now();
        let mut t = Throttle::new(t0);
        for i in 0..KEYS_MAX {
            t.failed(None, &format!("n{i}"), t0);
        }
        // No bucket is full again, so new names share the others' bucket.
        for _ in 0..USER.burst {
            t.failed(None, "fresh-1", t0);
        }
        assert_eq!(t.may_try(None, "fresh-2", t0), Err(Limited::User));
        assert_eq!(t.users.keys.len(), KEYS_MAX);
        // Once buckets are full again, they are forgotten for new names.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(t.may_try(None, "fresh-3", later), Ok(()));
        assert!(t.users.keys.len() <= 1, "{}", t.users.keys.len());
    }
}
