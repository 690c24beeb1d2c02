//! Expiring counters over RESP: `EXPIRE`, `PEXPIRE`, `EXPIREAT`,
//! `PEXPIREAT` (with `NX`, `XX`, `GT`, `LT`), `PERSIST`, `TTL`, `PTTL`,
//! `EXPIRETIME`, `PEXPIRETIME`. A key is a partition, named by the first
//! kind it holds (`generic::kind`): its counter (the empty column) when it
//! has one, else every column of it (a hash), as Redis expires a hash
//! whole, else its unique counter (a set), whose deadline is its count's
//! (see `crate::cluster::unique`), else its string or sorted set, whose
//! deadline is part of its agreed value (see `registers`). An `EXPIRE`
//! or `PERSIST` is one leader-side change of the key's row
//! (`Node::expire`), or an agreed change of the string (or sorted set)
//! where the row has nothing; `TTL`, `PTTL`,
//! `EXPIRETIME`, `PEXPIRETIME` read the key (its counter, its row, its
//! count). Columns made after an `EXPIRE` do not take its deadline (see
//! `crate::cluster::write::expire`). The deadline is wall-clock time, read
//! here when the command arrives (see `docs/counters.md` on clock skew).

use std::sync::Arc;

use tally_engine::{Cell, now_ms};
use tally_net::wire::{Consistency, When, WireKey};

use super::counters::wire_err;
use super::proto::Reply;
use super::registers;
use super::session::arity;
use crate::node::Node;

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let now = now_ms();
    let reply = match (name, rest.len()) {
        ("expire" | "pexpire" | "expireat" | "pexpireat", n) if n >= 2 => {
            match expire_args(name, &rest[1], &rest[2..], now) {
                Ok((at_ms, only)) => expire(node, cl, &rest[0], at_ms, only).await,
                Err(e) => e,
            }
        }
        ("persist", 1) => expire(node, cl, &rest[0], 0, When::Always).await,
        ("ttl" | "pttl" | "expiretime" | "pexpiretime", 1) => {
            match deadline(node, cl, &rest[0]).await {
                Ok(d) => Reply::Int(time_reply(name, d, now)),
                Err(e) => e,
            }
        }
        (
            "expire" | "pexpire" | "expireat" | "pexpireat" | "persist" | "ttl" | "pttl"
            | "expiretime" | "pexpiretime",
            _,
        ) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// A key's deadline as the time commands see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// No such key (never written, reset, or expired).
    Absent,
    /// Live, with no deadline.
    Never,
    /// Live until this wall-clock ms.
    At(u64),
}

/// What `TTL`, `PTTL`, `EXPIRETIME` or `PEXPIRETIME` answer for `d` at
/// `now_ms`: -2 for no key, -1 for no deadline, as Redis does; `TTL`
/// rounds to the nearest second.
pub(crate) fn time_reply(name: &str, d: Deadline, now_ms: u64) -> i64 {
    let at = match d {
        Deadline::Absent => return -2,
        Deadline::Never => return -1,
        Deadline::At(at) => at,
    };
    let left = at.saturating_sub(now_ms);
    let v = match name {
        "ttl" => (left + 500) / 1000,
        "pttl" => left,
        "expiretime" => at / 1000,
        _ => at,
    };
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The deadline (ms since the Unix epoch, at least 1) and condition of an
/// `EXPIRE`-family command `name` with time argument `time` and options
/// `opts`, at `now_ms`; Redis' errors otherwise. A deadline at or before
/// now makes the key absent at once, as Redis deletes it.
pub(crate) fn expire_args(
    name: &str,
    time: &[u8],
    opts: &[Vec<u8>],
    now_ms: u64,
) -> Result<(u64, When), Reply> {
    let t = super::counters::int_arg(time)?;
    let invalid = || Reply::err(format!("ERR invalid expire time in '{name}' command"));
    let ms = match name {
        "expire" | "expireat" => t.checked_mul(1000).ok_or_else(invalid)?,
        _ => t,
    };
    let at = match name {
        "expire" | "pexpire" => i64::try_from(now_ms)
            .ok()
            .and_then(|now| now.checked_add(ms))
            .ok_or_else(invalid)?,
        _ => ms,
    };
    let at_ms = u64::try_from(at).unwrap_or(0).max(1);
    Ok((at_ms, expire_when(opts)?))
}

/// The condition `NX`, `XX`, `GT` or `LT` of an `EXPIRE`, as Redis checks them.
fn expire_when(opts: &[Vec<u8>]) -> Result<When, Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for o in opts {
        match o.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                return Err(Reply::err(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(o)
                )));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(Reply::err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(match (nx, xx, gt, lt) {
        (true, ..) => When::NoDeadline,
        (_, _, true, _) => When::Later,
        (_, true, _, true) => When::SoonerThanOne,
        (_, _, _, true) => When::Sooner,
        (_, true, ..) => When::HasDeadline,
        _ => When::Always,
    })
}

/// Gives `key` the deadline `at_ms` (0: none) if `only` allows; answers 1
/// if anything changed. One leader-side change of the key's row
/// (`cluster::write::expire`): the leader catches up on the row, then
/// gives the deadline to the first kind the key holds (its counter when it
/// has one, else each live column of its hash, else its unique counter's
/// count) and replicates the cells it changed in one round.
///
/// A key the row change found nothing to expire in may hold a string:
/// then the string's deadline is changed, agreed (`registers::expire`).
async fn expire(node: &Arc<Node>, cl: Consistency, key: &[u8], at_ms: u64, only: When) -> Reply {
    let applied = match node.expire(key, (at_ms, only), cl).await {
        Ok(false) => registers::expire(node, key, at_ms, only).await,
        other => other,
    };
    match applied {
        Ok(applied) => Reply::Int(i64::from(applied)),
        Err(e) => wire_err(&e),
    }
}

/// `key`'s deadline: its counter's when it has one, else its first live
/// column's, else its unique counter's, else its string's (or sorted
/// set's). A read, not a write: it reads the counter, then the row, then
/// the count, each at `cl`, then the registers (a key written between two
/// of them may answer as the next kind it holds).
async fn deadline(node: &Arc<Node>, cl: Consistency, key: &[u8]) -> Result<Deadline, Reply> {
    let now = now_ms();
    let cell = node
        .get_cell(&WireKey::new(key, b""), cl)
        .await
        .map_err(|e| wire_err(&e))?;
    if cell.live(now) {
        return Ok(deadline_of(&cell));
    }
    let row = node
        .get_row_cells(key, cl)
        .await
        .map_err(|e| wire_err(&e))?;
    if let Some(c) = row.values().find(|c| c.live(now)) {
        return Ok(deadline_of(c));
    }
    let count = node
        .unique_count_cell(key, cl)
        .await
        .map_err(|e| wire_err(&e))?;
    if count.live(now) {
        return Ok(deadline_of(&count));
    }
    let string = registers::get_value(node, key)
        .await
        .map_err(|e| wire_err(&e))?;
    Ok(match string.map(|r| r.at_ms) {
        None => Deadline::Absent,
        Some(0) => Deadline::Never,
        Some(at) => Deadline::At(at),
    })
}

/// A live cell's deadline.
pub(crate) fn deadline_of(c: &Cell) -> Deadline {
    match c.epoch().expiry.at_ms {
        0 => Deadline::Never,
        at => Deadline::At(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn opts(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    fn err_text(r: Result<(u64, When), Reply>) -> String {
        match r {
            Err(Reply::Error(e)) => e,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn deadlines_are_relative_or_absolute_in_seconds_or_ms() {
        let at = |name, t: &str| expire_args(name, t.as_bytes(), &[], NOW).unwrap().0;
        assert_eq!(at("expire", "10"), NOW + 10_000);
        assert_eq!(at("pexpire", "10"), NOW + 10);
        assert_eq!(at("expireat", "1800000000"), 1_800_000_000_000);
        assert_eq!(at("pexpireat", "1800000000123"), 1_800_000_000_123);
        // Zero, negative and past deadlines make the key absent at once.
        assert_eq!(at("expire", "0"), NOW);
        assert!(at("expire", "-5") < NOW);
        assert_eq!(at("expireat", "-1"), 1);
        assert_eq!(at("pexpireat", "0"), 1, "never 0, which means no deadline");
    }

    #[test]
    fn bad_times_and_options_get_redis_errors() {
        let e =
            |name, t: &str, o: &[&str]| err_text(expire_args(name, t.as_bytes(), &opts(o), NOW));
        assert_eq!(
            e("expire", "ten", &[]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            e("expire", &i64::MAX.to_string(), &[]),
            "ERR invalid expire time in 'expire' command"
        );
        assert_eq!(
            e("pexpire", &(i64::MAX - 5).to_string(), &[]),
            "ERR invalid expire time in 'pexpire' command"
        );
        assert_eq!(
            e("expire", "5", &["NX", "XX"]),
            "ERR NX and XX, GT or LT options at the same time are not compatible"
        );
        assert_eq!(
            e("expire", "5", &["gt", "lt"]),
            "ERR GT and LT options at the same time are not compatible"
        );
        assert_eq!(e("expire", "5", &["soon"]), "ERR Unsupported option soon");
    }

    #[test]
    fn options_map_to_conditions() {
        let when = |o: &[&str]| expire_args("expire", b"5", &opts(o), NOW).unwrap().1;
        assert_eq!(when(&[]), When::Always);
        assert_eq!(when(&["nx"]), When::NoDeadline);
        assert_eq!(when(&["XX"]), When::HasDeadline);
        assert_eq!(when(&["GT"]), When::Later);
        assert_eq!(when(&["xx", "gt"]), When::Later);
        assert_eq!(when(&["LT"]), When::Sooner);
        assert_eq!(when(&["lt", "xx"]), When::SoonerThanOne);
    }

    #[test]
    fn time_replies_follow_redis() {
        let at = Deadline::At(NOW + 1_499);
        assert_eq!(time_reply("ttl", at, NOW), 1);
        assert_eq!(time_reply("ttl", Deadline::At(NOW + 1_500), NOW), 2);
        assert_eq!(time_reply("pttl", at, NOW), 1_499);
        assert_eq!(
            time_reply("expiretime", at, NOW),
            ((NOW + 1_499) / 1000) as i64
        );
        assert_eq!(time_reply("pexpiretime", at, NOW), (NOW + 1_499) as i64);
        for name in ["ttl", "pttl", "expiretime", "pexpiretime"] {
            assert_eq!(time_reply(name, Deadline::Absent, NOW), -2);
            assert_eq!(time_reply(name, Deadline::Never, NOW), -1);
        }
    }
}
