//! Who may do what: the rules, apart from any I/O.
//!
//! A user has a [`Role`]; each request needs a level ([`Need`]); a role
//! allows the levels up to its own. Reads (gets, scans, `tally status`)
//! need `Read`; anything that changes counters needs `Write`; what changes
//! the cluster or its files (repair, ring changes, cleanup, fold,
//! snapshots) needs `Admin`. Logging in needs nothing.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tally_net::wire::ClientOp;

use crate::resp::commands;

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads only.
    ReadOnly,
    /// Reads and writes of counters.
    ReadWrite,
    /// Everything, the cluster's operations too.
    Admin,
}

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// Nothing: logging in, leaving.
    Nothing,
    /// A logged-in user.
    Read,
    /// A user who may change counters.
    Write,
    /// An administrator.
    Admin,
}

impl Role {
    /// Whether this role allows what `need` asks.
    pub fn allows(self, need: Need) -> bool {
        match need {
            Need::Nothing | Need::Read => true,
            Need::Write => self >= Role::ReadWrite,
            Need::Admin => self == Role::Admin,
        }
    }

    /// Its name in configs and messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::ReadOnly => "readonly",
            Role::ReadWrite => "readwrite",
            Role::Admin => "admin",
        }
    }
}

/// What a native request needs.
pub fn native_need(op: &ClientOp) -> Need {
    match op {
        ClientOp::Auth { .. } => Need::Nothing,
        ClientOp::Ping
        | ClientOp::Get { .. }
        | ClientOp::GetRow { .. }
        | ClientOp::GetCell { .. }
        | ClientOp::Status
        | ClientOp::UniqueCount { .. }
        | ClientOp::UniqueContains { .. }
        | ClientOp::Scan { .. } => Need::Read,
        ClientOp::Add { .. }
        | ClientOp::AddOnce { .. }
        | ClientOp::Reset { .. }
        | ClientOp::UniqueAdd { .. }
        | ClientOp::Change { .. } => Need::Write,
        ClientOp::Repair { .. }
        | ClientOp::Decommission { .. }
        | ClientOp::RemoveNode { .. }
        | ClientOp::Cleanup
        | ClientOp::Fold
        | ClientOp::Snapshot(_) => Need::Admin,
    }
}

/// What a RESP command (lowercase name) needs: Redis' own flags say it
/// (`no-auth`, `write`); an unknown command needs a login, to be told it
/// is unknown.
pub fn resp_need(name: &str) -> Need {
    match commands::find(name) {
        Some(c) if c.flags.contains(&"no-auth") => Need::Nothing,
        Some(c) if c.flags.contains(&"write") => Need::Write,
        _ => Need::Read,
    }
}

/// How long a connection waits before hearing that its `failures`-th
/// wrong password in a row was wrong: 100 ms, doubling, at most 5 s. A
/// guesser gets a handful of tries a second per connection, and each
/// connection costs it one of the node's client slots.
pub fn penalty(failures: u32) -> Duration {
    let doubled = 100u64.saturating_mul(1 << failures.saturating_sub(1).min(16));
    Duration::from_millis(doubled.min(5_000))
}

/// Whether a client at `peer` is served: without users (and with
/// protected mode on) only loopback clients are, as Redis' protected mode.
pub fn admits(has_users: bool, protected_mode: bool, peer: IpAddr) -> bool {
    has_users || !protected_mode || peer.is_loopback() || is_mapped_loopback(peer)
}

fn is_mapped_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        IpAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::{Consistency, WireKey};

    #[test]
    fn roles_allow_their_level_and_below() {
        let table = [
            (Role::ReadOnly, [true, true, false, false]),
            (Role::ReadWrite, [true, true, true, false]),
            (Role::Admin, [true, true, true, true]),
        ];
        for (role, want) in table {
            let got = [Need::Nothing, Need::Read, Need::Write, Need::Admin].map(|n| role.allows(n));
            assert_eq!(got, want, "{role:?}");
        }
    }

    #[test]
    fn requests_need_what_they_change() {
        let key = WireKey::new(b"k", b"");
        let cl = Consistency::Quorum;
        let auth = ClientOp::Auth {
            user: "u".into(),
            password: "p".into(),
        };
        assert_eq!(native_need(&auth), Need::Nothing);
        assert_eq!(
            native_need(&ClientOp::Get {
                key: key.clone(),
                cl
            }),
            Need::Read
        );
        assert_eq!(native_need(&ClientOp::Status), Need::Read);
        let add = ClientOp::Add { key, delta: 1, cl };
        assert_eq!(native_need(&add), Need::Write);
        assert_eq!(native_need(&ClientOp::Fold), Need::Admin);
        for (name, need) in [
            ("auth", Need::Nothing),
            ("hello", Need::Nothing),
            ("quit", Need::Nothing),
            ("get", Need::Read),
            ("ping", Need::Read),
            ("scan", Need::Read),
            ("eval_ro", Need::Read),
            ("incr", Need::Write),
            ("set", Need::Write),
            ("del", Need::Write),
            ("flushall", Need::Write),
            ("nosuchcommand", Need::Read),
        ] {
            assert_eq!(resp_need(name), need, "{name}");
        }
    }

    #[test]
    fn failed_logins_wait_longer_each_time_up_to_five_seconds() {
        let ms = |n| penalty(n).as_millis();
        assert_eq!([ms(1), ms(2), ms(3), ms(4)], [100, 200, 400, 800]);
        assert_eq!(ms(7), 5_000);
        assert_eq!(ms(u32::MAX), 5_000);
    }

    #[test]
    fn protected_mode_serves_loopback_only() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        assert!(admits(false, true, ip("127.0.0.1")));
        assert!(admits(false, true, ip("127.8.9.10")));
        assert!(admits(false, true, ip("::1")));
        assert!(admits(false, true, ip("::ffff:127.0.0.1")));
        assert!(!admits(false, true, ip("10.0.0.5")));
        assert!(!admits(false, true, ip("::ffff:10.0.0.5")));
        assert!(admits(true, true, ip("10.0.0.5")), "users configured");
        assert!(admits(false, false, ip("10.0.0.5")), "protected mode off");
    }
}
