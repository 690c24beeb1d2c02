//! Who may do what: the rules, apart from any I/O.
//!
//! A user has a [`Role`]; each request needs a level ([`Need`], for RESP
//! the command table's); a role allows the levels up to its own. Reads (gets, scans, `tally status`)
//! need `Read`; anything that changes counters needs `Write`; what changes
//! the cluster or its files (repair, ring changes, cleanup, fold,
//! snapshots) needs `Admin`, as do the RESP commands Redis calls
//! dangerous (`base::commands` says which). Logging in needs nothing.
//! `authorize` is the one decision for every RESP command.

use std::net::IpAddr;
use std::time::Duration;

use tally_net::wire::ClientOp;

use super::Refusal;
use crate::base::commands;
pub use crate::config::auth::Role;

/// What a request needs: the command table's typed level, shared with
/// the native protocol's requests.
pub use crate::base::commands::Need;

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
        ClientOp::Auth { .. } | ClientOp::Hello { .. } => Need::Nothing,
        ClientOp::Ping
        | ClientOp::Get { .. }
        | ClientOp::GetRow { .. }
        | ClientOp::GetCell { .. }
        | ClientOp::Status
        | ClientOp::Versions
        | ClientOp::UniqueCount { .. }
        | ClientOp::UniqueContains { .. }
        | ClientOp::Scan { .. }
        | ClientOp::GetString { .. } => Need::Read,
        ClientOp::Add { .. }
        | ClientOp::AddOnce { .. }
        | ClientOp::Reset { .. }
        | ClientOp::UniqueAdd { .. }
        | ClientOp::Change { .. }
        | ClientOp::SetString { .. } => Need::Write,
        ClientOp::Repair { .. }
        | ClientOp::Decommission { .. }
        | ClientOp::RemoveNode { .. }
        | ClientOp::Cleanup
        | ClientOp::Fold
        | ClientOp::Snapshot(_) => Need::Admin,
        // Unwrapped before it is checked (`client::server`); the strictest
        // need were it not.
        ClientOp::Serial { .. } => Need::Admin,
    }
}

/// Commands whose first argument names a subcommand, as Redis names it in
/// ACL rules and errors (`script|flush`).
const CONTAINERS: &[&str] = &["script", "config", "client", "command"];

/// Whether a login of `role` (`None`: not logged in) may run the RESP
/// command `c` (`None`: one the table does not know) with the arguments
/// `rest`. Every RESP path asks this, and only this: a command alone, a
/// pipeline's group, a transaction's commands as they are queued and as
/// `EXEC` runs them. What a command needs is the table's: its [`Need`],
/// more for an administrator's subcommand (`commands::need`); an unknown
/// command needs a login, to be told it is unknown.
pub(crate) fn authorize(
    role: Option<Role>,
    c: Option<&commands::Command>,
    rest: &[Vec<u8>],
) -> Result<(), Refusal> {
    permits(role, c.map_or(Need::Read, |c| commands::need(c, rest)))
}

/// Whether a login of `role` (`None`: not logged in) may do what `need`
/// asks: a native request's, or a RESP command's (by [`authorize`]).
pub fn permits(role: Option<Role>, need: Need) -> Result<(), Refusal> {
    match role {
        _ if need == Need::Nothing => Ok(()),
        None => Err(Refusal::NoAuth),
        Some(role) if role.allows(need) => Ok(()),
        Some(role) => Err(Refusal::NoPerm(role)),
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

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split_whitespace()
            .map(|w| w.as_bytes().to_vec())
            .collect()
    }

    /// The least a login needs for [`authorize`] to let it run `line`,
    /// checking each refusal on the way.
    fn needs(line: &str) -> Need {
        let w = words(line);
        let name = String::from_utf8_lossy(&w[0]).to_ascii_lowercase();
        let c = commands::find(&name);
        let rest = &w[1..];
        if authorize(None, c, rest).is_ok() {
            return Need::Nothing;
        }
        assert_eq!(authorize(None, c, rest), Err(Refusal::NoAuth), "{line}");
        for (role, need) in [
            (Role::ReadOnly, Need::Read),
            (Role::ReadWrite, Need::Write),
            (Role::Admin, Need::Admin),
        ] {
            match authorize(Some(role), c, rest) {
                Ok(()) => return need,
                Err(r) => assert_eq!(r, Refusal::NoPerm(role), "{line}"),
            }
        }
        panic!("{line}: not even an administrator may run it")
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
            assert_eq!(needs(name), need, "{name}");
        }
    }

    #[test]
    fn dangerous_commands_need_admin() {
        let need = |line: &str| {
            let w = words(line);
            let name = String::from_utf8_lossy(&w[0]).to_ascii_lowercase();
            (needs(line), acl_name(&name, &w[1..]))
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
        // A read-only login reads, and is refused every write, whatever
        // the case or arguments.
        for line in ["GET a", "mget a b", "HGET h f", "SCARD s", "TTL a", "PING"] {
            assert!(needs(line) <= Need::Read, "{line}");
        }
        for line in [
            "INCR a",
            "incrby a 2",
            "DECR a",
            "HINCRBY h f 1",
            "SADD s x",
            "SET a 1",
            "EXPIRE a 9",
            "DEL a",
            "LPUSH l x",
        ] {
            assert_eq!(needs(line), Need::Write, "{line}");
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
