//! Settable counters over RESP: `SET` (with `NX`, `XX`, `GET`, `EX`, `PX`,
//! `EXAT`, `PXAT`, `KEEPTTL`), `SETNX`, `SETEX`, `PSETEX`, `GETSET`,
//! `GETDEL`, `GETEX`, `MSET` (and `INCRBYFLOAT`, by a module of its
//! own). Their integer values are counters, each set as
//! a change of the counter's epoch (see `write::change`); `MSET` is one
//! change per key, not atomic together. A `SET` of any other value stores
//! a string instead, through agreement (`registers`), and so does every
//! `SET` at `SERIAL`. A hash's fields are `hashes`'.

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Change, Changed, Consistency, Presence, Ttl, When, WireKey};

use super::counters::wire_err;
use super::proto::Reply;
use super::registers;
use super::session::arity;
use crate::base::compare::Compare;
use crate::node::Node;

/// What a SET asks for, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SetArgs {
    /// The change.
    pub change: Change,
    /// Whether to answer the value before (`GET`).
    pub get: bool,
}

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let now = now_ms();
    let reply = match (name, rest.len()) {
        ("set", n) if n >= 2 => match set_opts(&rest[2..], now) {
            Ok(o) => match counter_arg(node, cl, &rest[0], &rest[1]) {
                Ok(value) if o.compare.is_none() => {
                    set(node, cl, &rest[0], b"", o.counter(value)).await
                }
                // Not an integer, or a condition on a string's value: a
                // string (refused until the cluster has enabled agreement).
                _ => set_string(node, &rest[0], o.string(&rest[1])).await,
            },
            Err(e) => e,
        },
        ("setnx", 2) => match counter_arg(node, cl, &rest[0], &rest[1]) {
            Ok(value) => {
                let change = set_change(value, Ttl::Clear, Presence::Absent);
                applied(node.change(&key(&rest[0], b""), change, cl).await)
            }
            Err(_) => {
                let s = string(&rest[1], Ttl::Clear, Presence::Absent, false);
                match set_string(node, &rest[0], s).await {
                    Reply::Simple(_) => Reply::Int(1),
                    Reply::Bulk(None) => Reply::Int(0),
                    other => other,
                }
            }
        },
        ("setex" | "psetex", 3) => match ttl_arg(name, &rest[1], now) {
            Ok(ttl) => match counter_arg(node, cl, &rest[0], &rest[2]) {
                Ok(v) => {
                    let change = set_change(v, ttl, Presence::Any);
                    set(node, cl, &rest[0], b"", SetArgs { change, get: false }).await
                }
                Err(_) => {
                    let s = string(&rest[2], ttl, Presence::Any, false);
                    set_string(node, &rest[0], s).await
                }
            },
            Err(e) => e,
        },
        ("getset", 2) => match counter_arg(node, cl, &rest[0], &rest[1]) {
            Ok(value) => {
                let change = set_change(value, Ttl::Clear, Presence::Any);
                set(node, cl, &rest[0], b"", SetArgs { change, get: true }).await
            }
            Err(_) => {
                let s = string(&rest[1], Ttl::Clear, Presence::Any, true);
                set_string(node, &rest[0], s).await
            }
        },
        ("getdel", 1) => getdel(node, cl, &rest[0]).await,
        ("getex", n) if n >= 1 => match getex_args(&rest[1..], now) {
            Ok(None) => super::counters::get(node, cl, &rest[0], b"").await,
            Ok(Some(at_ms)) => getex(node, cl, &rest[0], at_ms).await,
            Err(e) => e,
        },
        ("mset", n) if n >= 2 && n % 2 == 0 => mset(node, cl, rest).await,
        ("incrbyfloat", 2) => {
            super::floats::incr_by_float(node, cl, (&rest[0], b""), &rest[1]).await
        }
        (
            "set" | "setnx" | "setex" | "psetex" | "getset" | "getdel" | "getex" | "mset"
            | "incrbyfloat",
            _,
        ) => arity(name),
        _ => return None,
    };
    Some(reply)
}

fn key(partition: &[u8], column: &[u8]) -> WireKey {
    WireKey::new(partition, column)
}

pub(super) fn set_change(value: i64, ttl: Ttl, only: Presence) -> Change {
    Change::Set { value, ttl, only }
}

/// A `SET` of the string `value`.
pub(crate) fn string(value: &[u8], ttl: Ttl, only: Presence, get: bool) -> registers::SetString {
    registers::SetString {
        value: value.to_vec(),
        ttl,
        only,
        get,
        compare: None,
    }
}

/// `GETDEL`: the counter's value, deleting it; else the key's string,
/// taking it.
async fn getdel(node: &Arc<Node>, cl: Consistency, key: &[u8]) -> Reply {
    let a = SetArgs {
        change: Change::Delete,
        get: true,
    };
    match set(node, cl, key, b"", a).await {
        Reply::Bulk(None) => string_reply(registers::take(node, key).await),
        other => other,
    }
}

/// `GETEX` with a deadline (`at_ms`, 0: none): the counter's value, giving
/// it the deadline; else the key's string, giving it the deadline.
async fn getex(node: &Arc<Node>, cl: Consistency, key: &[u8], at_ms: u64) -> Reply {
    let change = Change::Expire {
        at_ms,
        only: When::Always,
    };
    match set(node, cl, key, b"", SetArgs { change, get: true }).await {
        Reply::Bulk(None) => string_reply(registers::get_and_expire(node, key, at_ms).await),
        other => other,
    }
}

/// A string read or taken, as a reply.
fn string_reply(r: Result<Option<Vec<u8>>, tally_net::wire::WireError>) -> Reply {
    match r {
        Ok(v) => v.map_or(Reply::NIL, Reply::bulk),
        Err(e) => wire_err(&e),
    }
}

/// A value to set: a 64-bit integer, or a clear error.
pub(crate) fn value_arg(a: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| {
            Reply::err(
                "ERR value is not an integer or out of range (Tally counters hold 64-bit integers)",
            )
        })
}

/// A `SET`-family value of `key` as a counter's: an integer, except at
/// `SERIAL`, where every value is stored as a string (agreed: what a
/// linearizable counter starts from), and of a key this node saw hold a
/// string, which the value replaces, as in Redis (`Node::holds_string_here`).
fn counter_arg(node: &Node, cl: Consistency, key: &[u8], a: &[u8]) -> Result<i64, Reply> {
    match cl {
        Consistency::Serial => Err(Reply::NIL),
        _ if node.holds_string_here(key, b"") => Err(Reply::NIL),
        _ => value_arg(a),
    }
}

/// The deadline of `SETEX`/`PSETEX`: a positive time from now.
pub(crate) fn ttl_arg(name: &str, a: &[u8], now_ms: u64) -> Result<Ttl, Reply> {
    let t = super::counters::int_arg(a)?;
    let unit = if name == "setex" { "EX" } else { "PX" };
    deadline(unit, t, now_ms).map_err(|()| invalid_time(name))
}

fn invalid_time(name: &str) -> Reply {
    Reply::err(format!("ERR invalid expire time in '{name}' command"))
}

/// The deadline `unit t` (`EX`, `PX`, `EXAT`, `PXAT`) gives at `now_ms`:
/// the time must be positive and the deadline within range, as Redis
/// requires of `SET`.
fn deadline(unit: &str, t: i64, now_ms: u64) -> Result<Ttl, ()> {
    if t <= 0 {
        return Err(());
    }
    let ms = match unit {
        "EX" | "EXAT" => t.checked_mul(1000).ok_or(())?,
        _ => t,
    };
    let at = match unit {
        "EX" | "PX" => i64::try_from(now_ms)
            .ok()
            .and_then(|now| now.checked_add(ms))
            .ok_or(())?,
        _ => ms,
    };
    Ok(Ttl::At(u64::try_from(at).map_err(|_| ())?))
}

/// `SET`'s options, parsed: the same for a counter and a string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SetOpts {
    only: Presence,
    ttl: Ttl,
    get: bool,
    /// `IFEQ` and its kin: only a string is compared.
    pub(crate) compare: Option<Compare>,
}

impl SetOpts {
    /// The SET of a counter to `value`.
    fn counter(&self, value: i64) -> SetArgs {
        SetArgs {
            change: set_change(value, self.ttl, self.only),
            get: self.get,
        }
    }

    /// The SET of a string to `value`.
    pub(crate) fn string(self, value: &[u8]) -> registers::SetString {
        registers::SetString {
            compare: self.compare,
            ..string(value, self.ttl, self.only, self.get)
        }
    }
}

/// `SET`'s options after the key and value: Redis' rules and errors (one
/// of `NX`, `XX` and the value conditions at most).
pub(crate) fn set_opts(opts: &[Vec<u8>], now_ms: u64) -> Result<SetOpts, Reply> {
    let syntax = || Reply::err("ERR syntax error");
    let mut only = Presence::Any;
    let mut compare: Option<Compare> = None;
    let mut ttl: Option<Ttl> = None;
    let mut get = false;
    let mut i = 0;
    while i < opts.len() {
        let word = opts[i].to_ascii_uppercase();
        let conditioned = only != Presence::Any || compare.is_some();
        match word.as_slice() {
            b"NX" | b"XX" if conditioned => return Err(syntax()),
            b"NX" => only = Presence::Absent,
            b"XX" => only = Presence::Live,
            b"GET" => get = true,
            b"KEEPTTL" if ttl.is_some() => return Err(syntax()),
            b"KEEPTTL" => ttl = Some(Ttl::Keep),
            b"EX" | b"PX" | b"EXAT" | b"PXAT" => {
                let (Some(t), None) = (opts.get(i + 1), ttl) else {
                    return Err(syntax());
                };
                let t = super::counters::int_arg(t)?;
                let unit = std::str::from_utf8(&word).unwrap_or_default();
                ttl = Some(deadline(unit, t, now_ms).map_err(|()| invalid_time("set"))?);
                i += 1;
            }
            _ => match opts.get(i + 1).and_then(|arg| Compare::parse(&word, arg)) {
                Some(_) if conditioned => return Err(syntax()),
                Some(c) => {
                    compare = Some(c.map_err(Reply::err)?);
                    i += 1;
                }
                None => return Err(syntax()),
            },
        }
        i += 1;
    }
    Ok(SetOpts {
        only,
        ttl: ttl.unwrap_or(Ttl::Clear),
        get,
        compare,
    })
}

/// `GETEX`'s options: `None` for a plain read, else the deadline to give
/// (0: none, `PERSIST`).
pub(crate) fn getex_args(opts: &[Vec<u8>], now_ms: u64) -> Result<Option<u64>, Reply> {
    let syntax = || Reply::err("ERR syntax error");
    match opts {
        [] => Ok(None),
        [p] if p.eq_ignore_ascii_case(b"persist") => Ok(Some(0)),
        [unit, t] => {
            let unit = String::from_utf8_lossy(unit).to_ascii_uppercase();
            if !matches!(unit.as_str(), "EX" | "PX" | "EXAT" | "PXAT") {
                return Err(syntax());
            }
            let t = super::counters::int_arg(t)?;
            match deadline(&unit, t, now_ms) {
                Ok(Ttl::At(at_ms)) => Ok(Some(at_ms)),
                _ => Err(invalid_time("getex")),
            }
        }
        _ => Err(syntax()),
    }
}

/// `SET key value ...` of a string (`value` is not an integer, or it has
/// a condition on a string's value, or the level is `SERIAL`), agreed
/// (`registers`); answers as Redis does. A live counter at the key is
/// replaced, as Redis' `SET` replaces any value ([`over_counter`]). The
/// counter is looked for at `ONE` (the nearest replica, this node where
/// it is one), whatever the connection's level: the check is one of
/// kind, and no read would see a counter another node is starting at the
/// same moment (see `registers`).
pub(super) async fn set_string(
    node: &Arc<Node>,
    key: &[u8],
    mut set: registers::SetString,
) -> Reply {
    if set.value.len() > registers::STRING_BYTES_MAX {
        return Reply::err(format!(
            "ERR string exceeds maximum allowed size ({} bytes)",
            registers::STRING_BYTES_MAX
        ));
    }
    let counter = match node.get_cell(&self::key(key, b""), Consistency::One).await {
        Ok(c) => crate::base::convert::live_value(&c, now_ms())
            .ok()
            .flatten(),
        Err(e) => return wire_err(&e),
    };
    if let Some(v) = counter {
        if let Some(reply) = over_counter(node, key, &set, v).await {
            return reply;
        }
        // The key existed (XX holds): the string takes the counter's place.
        set.only = Presence::Any;
    }
    let get = set.get;
    match registers::set(node, key, set).await {
        Ok(done) if get => match counter {
            Some(v) => Reply::bulk(v.to_string()),
            None => done.before.map_or(Reply::NIL, Reply::bulk),
        },
        Ok(done) if done.applied => Reply::Simple("OK"),
        Ok(_) => Reply::NIL,
        Err(e) => wire_err(&e),
    }
}

/// A string `SET` of a key that holds a live counter of value `v`: `NX`
/// answers as Redis does (nil, or the value with `GET`) and changes
/// nothing; a condition on a string's value (`IFEQ` and its kin) is
/// refused, a counter having no string to compare; any other resets the
/// counter (at `QUORUM`), and `None` says to go on and agree the string.
/// Two steps, not one: an add between them starts a counter beside the
/// string (the limit stated in `registers`).
async fn over_counter(
    node: &Arc<Node>,
    key: &[u8],
    set: &registers::SetString,
    v: i64,
) -> Option<Reply> {
    if set.compare.is_some() {
        return Some(Reply::err(
            "WRONGTYPE the key holds a counter, which has no string to compare",
        ));
    }
    if set.only == Presence::Absent {
        return Some(match set.get {
            true => Reply::bulk(v.to_string()),
            false => Reply::NIL,
        });
    }
    match node.reset(&self::key(key, b""), Consistency::Quorum).await {
        Ok(()) => None,
        Err(e) => Some(wire_err(&e)),
    }
}

/// Runs a change and answers as `SET` does: the value before with `GET`,
/// else OK, or nil when its condition failed.
async fn set(
    node: &Arc<Node>,
    cl: Consistency,
    partition: &[u8],
    column: &[u8],
    a: SetArgs,
) -> Reply {
    let key = key(partition, column);
    let done = match a.get {
        true => node.change_reading(&key, a.change, cl).await,
        false => node.change(&key, a.change, cl).await,
    };
    match done {
        Ok(done) if a.get => done
            .before
            .map_or(Reply::NIL, |v| Reply::bulk(v.to_string())),
        Ok(done) if done.applied => Reply::Simple("OK"),
        Ok(_) => Reply::NIL,
        Err(e) => wire_err(&e),
    }
}

fn applied(done: Result<Changed, tally_net::wire::WireError>) -> Reply {
    match done {
        Ok(done) => Reply::Int(i64::from(done.applied)),
        Err(e) => wire_err(&e),
    }
}

/// `MSET k v [k v ...]`: one key after another, an integer as a counter,
/// anything else as a string.
async fn mset(node: &Arc<Node>, cl: Consistency, rest: &[Vec<u8>]) -> Reply {
    for pair in rest.chunks(2) {
        let reply = match value_arg(&pair[1]) {
            Ok(value) => {
                let change = set_change(value, Ttl::Clear, Presence::Any);
                match node.change(&key(&pair[0], b""), change, cl).await {
                    Ok(_) => continue,
                    Err(e) => wire_err(&e),
                }
            }
            Err(_) => {
                let s = string(&pair[1], Ttl::Clear, Presence::Any, false);
                set_string(node, &pair[0], s).await
            }
        };
        if reply.is_error() {
            return reply;
        }
    }
    Reply::Simple("OK")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    /// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`,
    /// after the key, of a counter.
    fn set_args(value: &[u8], opts: &[Vec<u8>], now_ms: u64) -> Result<SetArgs, Reply> {
        let o = set_opts(opts, now_ms)?;
        Ok(o.counter(value_arg(value)?))
    }

    fn parse(line: &str) -> Result<SetArgs, String> {
        let words: Vec<Vec<u8>> = line.split(' ').map(|w| w.as_bytes().to_vec()).collect();
        set_args(&words[0], &words[1..], NOW).map_err(|e| match e {
            Reply::Error(e) => e,
            other => format!("{other:?}"),
        })
    }

    fn change(value: i64, ttl: Ttl, only: Presence) -> Change {
        set_change(value, ttl, only)
    }

    #[test]
    fn set_options_follow_redis() {
        let ok = |line, c, get| assert_eq!(parse(line), Ok(SetArgs { change: c, get }), "{line}");
        ok("5", change(5, Ttl::Clear, Presence::Any), false);
        ok("-5 nx", change(-5, Ttl::Clear, Presence::Absent), false);
        ok("5 XX GET", change(5, Ttl::Clear, Presence::Live), true);
        ok(
            "5 EX 10",
            change(5, Ttl::At(NOW + 10_000), Presence::Any),
            false,
        );
        ok(
            "5 px 10 NX",
            change(5, Ttl::At(NOW + 10), Presence::Absent),
            false,
        );
        ok(
            "5 EXAT 1800000000",
            change(5, Ttl::At(1_800_000_000_000), Presence::Any),
            false,
        );
        ok(
            "5 PXAT 1800000000001",
            change(5, Ttl::At(1_800_000_000_001), Presence::Any),
            false,
        );
        ok("5 KEEPTTL", change(5, Ttl::Keep, Presence::Any), false);
    }

    #[test]
    fn bad_set_input_gets_clear_errors() {
        let integers =
            "ERR value is not an integer or out of range (Tally counters hold 64-bit integers)";
        for line in ["hello", "1.5", "99999999999999999999", "", "5 ex 10x"] {
            let want = if line.ends_with("10x") {
                "ERR value is not an integer or out of range"
            } else {
                integers
            };
            assert_eq!(parse(line).unwrap_err(), want, "{line:?}");
        }
        for line in [
            "5 NX XX",
            "5 EX 10 PX 5",
            "5 EX 10 KEEPTTL",
            "5 EX",
            "5 SOON",
            "5 KEEPTTL EX 4",
        ] {
            assert_eq!(parse(line).unwrap_err(), "ERR syntax error", "{line}");
        }
        for line in [
            "5 EX 0",
            "5 EX -1",
            "5 PX 0",
            &format!("5 EX {}", i64::MAX),
            &format!("5 PX {}", i64::MAX),
        ] {
            assert_eq!(
                parse(line).unwrap_err(),
                "ERR invalid expire time in 'set' command",
                "{line}"
            );
        }
    }

    #[test]
    fn setex_and_getex_times_must_be_positive() {
        assert_eq!(ttl_arg("setex", b"3", NOW), Ok(Ttl::At(NOW + 3_000)));
        assert_eq!(ttl_arg("psetex", b"3", NOW), Ok(Ttl::At(NOW + 3)));
        assert!(ttl_arg("setex", b"0", NOW).is_err());
        assert!(ttl_arg("psetex", b"-3", NOW).is_err());
        let words =
            |l: &str| -> Vec<Vec<u8>> { l.split(' ').map(|w| w.as_bytes().to_vec()).collect() };
        assert_eq!(getex_args(&[], NOW), Ok(None));
        assert_eq!(
            getex_args(&words("PERSIST"), NOW),
            Ok(Some(0)),
            "no deadline"
        );
        assert_eq!(getex_args(&words("ex 2"), NOW), Ok(Some(NOW + 2_000)));
        assert!(getex_args(&words("EX 0"), NOW).is_err());
        assert!(getex_args(&words("EX 1 PX 2"), NOW).is_err());
        assert!(getex_args(&words("SOON 1"), NOW).is_err());
    }
}
