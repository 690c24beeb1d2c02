//! The chaos workload: each worker adds and reads at random levels through
//! one node and, a few times a second across all workers, ends the epoch
//! of one of the reset keys at a random level: a reset (`DEL`), a SET to a
//! value, or an EXPIRE a fraction of a second ahead. Every operation goes
//! into the history with its outcome, as the thin client reports it.
//!
//! Those go to the last `reset_keys` keys only: the checker's bounds on a
//! key weaken after a reset (and vanish after one whose outcome is
//! unknown), so the other keys keep the full-strength checks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::wire::{Change, Presence, Ttl, When};
use tally_net::{Client, ClientError, Consistency};

use crate::checker::{Kind, Op, Outcome};

/// What the workers do.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    /// Counters touched.
    pub keys: usize,
    /// How many of them (the last ones) also get resets.
    pub reset_keys: usize,
    /// Resets per second, all workers together.
    pub resets_per_second: f64,
    /// Concurrent workers.
    pub workers: usize,
    /// The changes of an epoch made: `reset`, `set`, `expire`.
    pub changes: &'static [&'static str],
    /// The levels operations take.
    pub levels: &'static [Consistency],
}

impl Workload {
    /// The keys that get resets.
    pub(crate) fn reset_range(&self) -> std::ops::Range<usize> {
        self.keys - self.reset_keys.min(self.keys)..self.keys
    }

    /// The mean time between one worker's resets, if it resets at all.
    fn reset_interval(&self) -> Option<Duration> {
        let per_worker = self.resets_per_second / self.workers.max(1) as f64;
        (per_worker > 0.0 && !self.reset_range().is_empty())
            .then(|| Duration::from_secs_f64(1.0 / per_worker))
    }

    /// The next operation: a reset, SET or EXPIRE of a reset key if one
    /// is due (an EXPIRE's `at_ns` is its time to live here), else an add
    /// (60%) or a read of any key.
    fn choose(&self, rng: &mut SmallRng, reset_due: bool) -> (usize, Kind, Consistency) {
        let cl = self.levels[rng.random_range(0..self.levels.len())];
        if reset_due && !self.reset_range().is_empty() && !self.changes.is_empty() {
            let kind = match self.changes[rng.random_range(0..self.changes.len())] {
                "set" => Kind::Set(rng.random_range(-1_000..=1_000)),
                "expire" => Kind::Expire {
                    at_ns: rng.random_range(200..=1_500) * 1_000_000,
                },
                _ => Kind::Reset,
            };
            return (rng.random_range(self.reset_range()), kind, cl);
        }
        let key = rng.random_range(0..self.keys);
        let kind = if rng.random_bool(0.6) {
            let d = rng.random_range(-5..=10);
            Kind::Add(if d == 0 { 1 } else { d })
        } else {
            Kind::Read
        };
        (key, kind, cl)
    }
}

/// A jittered wait around `mean`, so the workers' resets do not march in step.
fn jittered(rng: &mut SmallRng, mean: Duration) -> Duration {
    mean.mul_f64(rng.random_range(0.5..1.5))
}

/// The wall clock, ms since the Unix epoch.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The counter of key index `k`.
pub(crate) fn key_name(k: usize) -> Vec<u8> {
    format!("chaos:{k}").into_bytes()
}

/// What the history records of a result: certainly not applied, or
/// unknown (which the client error says, adds and resets alike).
fn outcome(result: &Result<i64, ClientError>) -> Outcome {
    match result {
        Ok(v) => Outcome::Ok(*v),
        Err(e) if e.outcome() == tally_net::Outcome::NotApplied => Outcome::Fail,
        Err(_) => Outcome::Unknown,
    }
}

/// One client: operations through one node until told to stop;
/// moves on to the next node when its node cannot be reached (down, or
/// gone from the ring).
pub(crate) async fn worker(
    id: usize,
    addrs: Vec<SocketAddr>,
    workload: Workload,
    seed: u64,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut node = id % addrs.len();
    let mut client: Option<Client> = None;
    let mut history = Vec::new();
    let now = |t: Instant| u64::try_from(t.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
    let interval = workload.reset_interval();
    let mut next_reset = interval.map(|i| started + jittered(&mut rng, i));
    while !stop.load(Ordering::Acquire) {
        let c = match &client {
            Some(c) if !c.is_closed() => c,
            _ => match super::secure::dial(addrs[node], Duration::from_secs(5)).await {
                Ok(c) => client.insert(c),
                Err(_) => {
                    // Down, or gone from the ring: try the next node.
                    node = (node + 1) % addrs.len();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let due = next_reset.is_some_and(|t| Instant::now() >= t);
        if let (true, Some(i)) = (due, interval) {
            next_reset = Some(Instant::now() + jittered(&mut rng, i));
        }
        let (key, mut kind, cl) = workload.choose(&mut rng, due);
        let invoke = Instant::now();
        let result = match &mut kind {
            Kind::Add(d) => c.add(&key_name(key), b"", *d, cl).await,
            Kind::Read => c.get(&key_name(key), b"", cl).await,
            Kind::Reset => c.reset(&key_name(key), b"", cl).await.map(|()| 0),
            Kind::Set(value) => {
                let set = Change::Set {
                    value: *value,
                    ttl: Ttl::Clear,
                    only: Presence::Any,
                };
                c.change(&key_name(key), b"", set, cl).await.map(|_| 0)
            }
            Kind::Expire { at_ns } => {
                let ttl_ns = *at_ns;
                *at_ns = now(invoke).saturating_add(ttl_ns);
                let expire = Change::Expire {
                    at_ms: wall_ms().saturating_add(ttl_ns / 1_000_000),
                    only: When::Always,
                };
                let done = c.change(&key_name(key), b"", expire, cl).await;
                done.map(|d| i64::from(d.applied))
            }
        };
        if matches!(result, Err(ClientError::Closed(_))) {
            client = None;
        }
        history.push(Op {
            process: id,
            key,
            kind,
            cl,
            node,
            invoke_ns: now(invoke),
            complete_ns: now(Instant::now()),
            outcome: outcome(&result),
        });
    }
    history
}

#[cfg(test)]
mod tests {
    use tally_net::wire::{ErrorKind, WireError};

    use super::*;

    fn workload(keys: usize, reset_keys: usize) -> Workload {
        Workload {
            keys,
            reset_keys,
            resets_per_second: 4.0,
            workers: 8,
            changes: crate::chaos::CHANGES,
            levels: &[Consistency::One, Consistency::Quorum, Consistency::All],
        }
    }

    #[test]
    fn resets_go_to_the_reset_keys_at_every_level() {
        let w = workload(8, 2);
        assert_eq!(w.reset_range(), 6..8);
        assert_eq!(w.reset_interval(), Some(Duration::from_secs(2)));
        let mut rng = SmallRng::seed_from_u64(1);
        let mut levels = std::collections::BTreeSet::new();
        let mut kinds = std::collections::HashSet::new();
        for _ in 0..300 {
            let (key, kind, cl) = w.choose(&mut rng, true);
            assert!(
                matches!(kind, Kind::Reset | Kind::Set(_) | Kind::Expire { .. }),
                "{kind:?}"
            );
            assert!(w.reset_range().contains(&key), "reset of key {key}");
            levels.insert(cl.to_string());
            kinds.insert(std::mem::discriminant(&kind));
        }
        assert_eq!(levels.len(), 3, "{levels:?}");
        assert_eq!(kinds.len(), 3, "resets, SETs and EXPIREs");
        for _ in 0..300 {
            let (key, kind, _) = w.choose(&mut rng, false);
            assert_ne!(kind, Kind::Reset);
            assert!(key < 8);
        }
    }

    #[test]
    fn no_reset_keys_or_no_rate_means_no_resets() {
        let mut rng = SmallRng::seed_from_u64(2);
        let none = workload(4, 0);
        assert_eq!(none.reset_interval(), None);
        assert_ne!(none.choose(&mut rng, true).1, Kind::Reset);
        let idle = Workload {
            resets_per_second: 0.0,
            ..workload(4, 1)
        };
        assert_eq!(idle.reset_interval(), None);
        // More reset keys than keys: all of them.
        assert_eq!(workload(3, 9).reset_range(), 0..3);
    }

    #[test]
    fn a_reset_that_may_have_landed_is_unknown() {
        assert_eq!(outcome(&Ok(0)), Outcome::Ok(0));
        let unavailable = WireError::not_applied(ErrorKind::Unavailable, "down");
        assert_eq!(
            outcome(&Err(ClientError::Server(unavailable))),
            Outcome::Fail
        );
        let timeout = WireError::unknown(ErrorKind::Timeout, "slow");
        assert_eq!(
            outcome(&Err(ClientError::Server(timeout))),
            Outcome::Unknown
        );
        assert_eq!(
            outcome(&Err(ClientError::Closed("reset by peer".into()))),
            Outcome::Unknown
        );
    }
}
