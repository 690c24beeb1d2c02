//! `RENAME`, `RENAMENX` and `COPY` of a counter, a string or a sorted set:
//! the value and its deadline are written to the destination, then (for a
//! rename) the source is deleted. Two keys are two partitions, so these are two
//! changes one after the other, not one atomic step as in Redis: a crash
//! between them leaves both keys, never neither. A string moves through
//! agreement; its source is deleted only if it still holds what was
//! copied, so a change made meanwhile is kept. A counter written where a
//! string is becomes that string (as an integer `SET` does); a string
//! written over a counter replaces it (as a string `SET` does). A sorted
//! set moves as a string does, agreed, replacing what the destination
//! held. A list is refused.

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Change, Consistency, Presence, Register, Ttl, WireKey};

use super::counters::wire_err;
use super::proto::Reply;
use super::registers;
use super::strings::{set_change, set_string, string};
use crate::base::{fields, zset};
use crate::node::Node;

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    Some(match (name, rest.len()) {
        ("rename", 2) => rename(node, cl, &rest[0], &rest[1], false).await,
        ("renamenx", 2) => rename(node, cl, &rest[0], &rest[1], true).await,
        ("copy", n) if n >= 2 => copy(node, cl, rest).await,
        ("rename" | "renamenx" | "copy", _) => super::session::arity(name),
        _ => return None,
    })
}

/// What a key holds that can be copied.
enum Value {
    /// A counter's value and deadline.
    Counter(i64, Ttl),
    /// A string and its deadline.
    String(Register),
    /// A sorted set's register (its members and deadline).
    ZSet(Register),
}

/// `RENAME src dst`, or `RENAMENX` (`nx`).
async fn rename(node: &Arc<Node>, cl: Consistency, src: &[u8], dst: &[u8], nx: bool) -> Reply {
    let value = match source(node, cl, src, "RENAME").await {
        Ok(Some(v)) => v,
        Ok(None) => return Reply::err("ERR no such key"),
        Err(e) => return e,
    };
    let done = |moved: bool| match nx {
        true => Reply::Int(i64::from(moved)),
        false => Reply::Simple("OK"),
    };
    if src == dst {
        return done(false);
    }
    match place(node, cl, dst, &value, nx).await {
        Ok(true) => {}
        Ok(false) => return done(false),
        Err(e) => return e,
    }
    let deleted = match value {
        Value::Counter(..) => node
            .change(&WireKey::new(src, b""), Change::Delete, cl)
            .await
            .map(|_| ()),
        Value::String(copied) | Value::ZSet(copied) => {
            node.agree(src, move |registers, now| {
                let same = registers.get(&copied.column, now) == Some(&copied);
                let mut next = registers.clone();
                if same {
                    next.remove(&copied.column);
                }
                Ok((next, ()))
            })
            .await
        }
    };
    match deleted {
        Ok(()) => done(true),
        Err(e) => wire_err(&e),
    }
}

/// `COPY src dst [REPLACE]`: 1 if copied, 0 if `src` holds nothing or
/// `dst` holds something (without `REPLACE`).
async fn copy(node: &Arc<Node>, cl: Consistency, rest: &[Vec<u8>]) -> Reply {
    let mut replace = false;
    for opt in &rest[2..] {
        match opt.to_ascii_uppercase().as_slice() {
            b"REPLACE" => replace = true,
            b"DB" => return Reply::err("ERR COPY to another database is not supported"),
            _ => return Reply::err("ERR syntax error"),
        }
    }
    let (src, dst) = (&rest[0], &rest[1]);
    if src == dst {
        return Reply::err("ERR source and destination objects are the same");
    }
    let value = match source(node, cl, src, "COPY").await {
        Ok(Some(v)) => v,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    match place(node, cl, dst, &value, !replace).await {
        Ok(copied) => Reply::Int(i64::from(copied)),
        Err(e) => e,
    }
}

/// What `key` holds: its live counter (read at `cl`), else its string or
/// sorted set (agreed); a list is refused.
async fn source(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
    what: &str,
) -> Result<Option<Value>, Reply> {
    let cell = node
        .get_cell(&WireKey::new(key, b""), cl)
        .await
        .map_err(|e| wire_err(&e))?;
    if cell.live(now_ms()) {
        if cell.is_list() {
            return Err(Reply::err(format!("ERR {what} of a list is not supported")));
        }
        let value = cell
            .value()
            .map_err(|_| Reply::err("ERR the counter's value overflows 64 bits"))?;
        let ttl = match super::expiry::deadline_of(&cell) {
            super::expiry::Deadline::At(at) => Ttl::At(at),
            _ => Ttl::Clear,
        };
        return Ok(Some(Value::Counter(value, ttl)));
    }
    let own = registers::get_value(node, key)
        .await
        .map_err(|e| wire_err(&e))?;
    Ok(own.map(|r| match r.column == zset::COLUMN {
        true => Value::ZSet(r),
        false => Value::String(r),
    }))
}

/// Writes `value` to `dst` (only where it holds nothing, with
/// `only_absent`): whether it did.
async fn place(
    node: &Arc<Node>,
    cl: Consistency,
    dst: &[u8],
    value: &Value,
    only_absent: bool,
) -> Result<bool, Reply> {
    let only = match only_absent {
        true => Presence::Absent,
        false => Presence::Any,
    };
    let (value, ttl) = match value {
        Value::ZSet(r) => return place_zset(node, cl, dst, r, only_absent).await,
        Value::String(r) => (r.value.clone(), ttl_of(r)),
        Value::Counter(v, ttl) => {
            // A counter goes as a string where `dst` holds a string.
            let held = registers::get(node, dst).await.map_err(|e| wire_err(&e))?;
            if held.is_none() {
                let change = set_change(*v, *ttl, only);
                let done = node
                    .change(&WireKey::new(dst, b""), change, cl)
                    .await
                    .map_err(|e| wire_err(&e))?;
                return Ok(done.applied);
            }
            (v.to_string().into_bytes(), *ttl)
        }
    };
    match set_string(node, dst, string(&value, ttl, only, false)).await {
        Reply::Simple(_) => Ok(true),
        Reply::Bulk(None) => Ok(false),
        e => Err(e),
    }
}

/// Writes the sorted set `r` to `dst`, agreed, replacing whatever `dst`
/// holds (a live counter reset first, at `QUORUM`, as a string `SET`
/// resets one), or only where it holds nothing (`only_absent`): whether
/// it did.
async fn place_zset(
    node: &Arc<Node>,
    cl: Consistency,
    dst: &[u8],
    r: &Register,
    only_absent: bool,
) -> Result<bool, Reply> {
    let key = WireKey::new(dst, b"");
    let counter = node.get_cell(&key, cl).await.map_err(|e| wire_err(&e))?;
    if counter.live(now_ms()) {
        if only_absent {
            return Ok(false);
        }
        node.reset(&key, Consistency::Quorum)
            .await
            .map_err(|e| wire_err(&e))?;
    }
    let r = r.clone();
    node.agree(dst, move |registers, now| {
        if only_absent && fields::holds_any(registers, now) {
            return Ok((registers.clone(), false));
        }
        let mut next = fields::clear(registers, now).0;
        next.put(r.clone());
        Ok((next, true))
    })
    .await
    .map_err(|e| wire_err(&e))
}

/// A string's deadline, as a `SET` gives it.
fn ttl_of(r: &Register) -> Ttl {
    match r.at_ms {
        0 => Ttl::Clear,
        at => Ttl::At(at),
    }
}
