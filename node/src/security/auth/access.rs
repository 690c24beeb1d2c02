//! Who may do what: the rules, apart from any I/O.
//!
//! A user has a [`Role`]; each request needs a level ([`Need`]); a role
//! allows the levels up to its own. Reads (gets, scans, `tally status`)
//! need `Read`; anything that changes counters needs `Write`; what changes
//! the cluster or its files (repair, ring changes, cleanup, fold,
//! snapshots) needs `Admin`, as do the RESP commands Redis calls
//! dangerous ([`DANGEROUS`]). Logging in needs nothing.

use std::net::IpAddr;
use std::time::Duration;

use tally_net::wire::ClientOp;

use crate::base::commands;
pub use crate::config::auth::Role;

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

/// The RESP commands only an administrator runs: those of Redis' `@dangerous`
/// ACL category that Tally serves (wiping databases, whole-keyspace walks,
/// the server's settings and state), as `command` or `command|subcommand`.
/// `SCRIPT FLUSH` is not `@dangerous` in Redis, but here it drops every
/// user's cached scripts on every node.
pub const DANGEROUS: &[&str] = &[
    "flushall",
    "flushdb",
    "keys",
    "swapdb",
    "info",
    "config",
    "script|flush",
];

/// Commands whose first argument names a subcommand, as Redis names it in
/// ACL rules and errors (`script|flush`).
const CONTAINERS: &[&str] = &["script", "config", "client", "command"];

/// What a RESP command (lowercase `name`, then its arguments `rest`)
/// needs: [`DANGEROUS`] and Redis' `admin` flag ask for an administrator;
/// otherwise Redis' own flags say it (`no-auth`, `write`); an unknown
/// command needs a login, to be told it is unknown.
pub fn resp_need(name: &str, rest: &[Vec<u8>]) -> Need {
    let dangerous = || {
        DANGEROUS.contains(&name)
            || (CONTAINERS.contains(&name) && DANGEROUS.contains(&acl_name(name, rest).as_str()))
    };
    match commands::find(name) {
        Some(c) if c.flags.contains(&"no-auth") => Need::Nothing,
        Some(c) if c.flags.contains(&"admin") || dangerous() => Need::Admin,
        Some(c) if c.flags.contains(&"write") => Need::Write,
        _ => Need::Read,
    }
}

/// A RESP command's name as Redis' ACL errors give it: `name`, or
/// `name|subcommand` for a container whose subcommand looks like one.
pub fn acl_name(name: &str, rest: &[Vec<u8>]) -> String {
    let sub = rest.first().filter(|s| {
        CONTAINERS.contains(&name)
            && (1..=32).contains(&s.len())
            && s.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    });
    match sub {
        Some(sub) => format!(
            "{name}|{}",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        ),
        None => name.to_string(),
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
            ("flushall", Need::Admin),
            ("nosuchcommand", Need::Read),
        ] {
            assert_eq!(resp_need(name, &[]), need, "{name}");
        }
    }

    #[test]
    fn dangerous_commands_need_admin() {
        let words = |line: &str| -> Vec<Vec<u8>> {
            line.split_whitespace()
                .map(|w| w.as_bytes().to_vec())
                .collect()
        };
        let need = |line: &str| {
            let w = words(line);
            let name = String::from_utf8_lossy(&w[0]).to_ascii_lowercase();
            (resp_need(&name, &w[1..]), acl_name(&name, &w[1..]))
        };
        let admin = |n: &str| (Need::Admin, n.to_string());
        assert_eq!(need("flushall"), admin("flushall"));
        assert_eq!(need("FLUSHALL ASYNC"), admin("flushall"));
        assert_eq!(need("flushdb sync"), admin("flushdb"));
        assert_eq!(need("script flush"), admin("script|flush"));
        assert_eq!(need("SCRIPT FLUSH ASYNC"), admin("script|flush"));
        assert_eq!(need("keys *"), admin("keys"));
        assert_eq!(need("swapdb 0 1"), admin("swapdb"));
        assert_eq!(need("info"), admin("info"));
        assert_eq!(need("config get maxmemory"), admin("config|get"));
        assert_eq!(need("config"), admin("config"));
        // Not dangerous: other script subcommands, the connection's own settings.
        assert_eq!(need("script load x"), (Need::Read, "script|load".into()));
        assert_eq!(need("script kill"), (Need::Read, "script|kill".into()));
        assert_eq!(
            need("client setname x"),
            (Need::Read, "client|setname".into())
        );
        assert_eq!(need("dbsize"), (Need::Read, "dbsize".into()));
        assert_eq!(need("scan 0"), (Need::Read, "scan".into()));
        // A subcommand that is not a word is not echoed back.
        assert_eq!(need("script fl\u{0}sh").1, "script");
        assert_eq!(need("get flush").1, "get");
        // Every dangerous name is a command Tally serves, without keys, so
        // the pipeline's group of keyed commands (which a writer's commands
        // take without this check) never holds one.
        for name in DANGEROUS {
            let command = name.split('|').next().unwrap_or_default();
            let found = commands::find(command);
            assert!(found.is_some_and(|c| c.keys.0 == 0), "{name}: {found:?}");
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
