//! The counter commands: `INCR`, `INCRBY`, `DECR`, `DECRBY`, `GET`,
//! `MGET`, and on a partition's columns `HINCRBY`, `HGET`, `HGETALL`,
//! `HDEL` (`EXISTS` and `DEL`, on keys of every kind, are `generic`'s).
//! Each runs at the connection's level (`CLIENT CONSISTENCY`, QUORUM by
//! default) through this node as coordinator; the keys of one `MGET` are
//! read at once.

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};

use super::join::join_all;
use super::proto::Reply;
use super::session::arity;
use crate::base::convert;
use crate::node::Node;

/// Most keys of one `MGET` read at once.
const READS_AT_ONCE: usize = 256;

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("incr", 1) => add(node, cl, &rest[0], b"", Ok(1)).await,
        ("decr", 1) => add(node, cl, &rest[0], b"", Ok(-1)).await,
        ("incrby", 2) => add(node, cl, &rest[0], b"", int_arg(&rest[1])).await,
        ("decrby", 2) => {
            let delta = int_arg(&rest[1]).and_then(|d| {
                d.checked_neg()
                    .ok_or_else(|| Reply::err("ERR decrement would overflow"))
            });
            add(node, cl, &rest[0], b"", delta).await
        }
        ("hincrby", 3) => add(node, cl, &rest[0], &rest[1], int_arg(&rest[2])).await,
        ("get", 1) => get(node, cl, &rest[0], b"").await,
        ("hget", 2) => get(node, cl, &rest[0], &rest[1]).await,
        ("mget", n) if n >= 1 => {
            let mut items = Vec::with_capacity(n);
            for keys in rest.chunks(READS_AT_ONCE) {
                items.extend(join_all(keys.iter().map(|k| get(node, cl, k, b""))).await);
            }
            // As Redis: a key of another kind (a list) is nil in an MGET.
            for item in &mut items {
                if matches!(item, Reply::Error(e) if e == WRONGTYPE) {
                    *item = Reply::NIL;
                }
            }
            match items.iter().find(|r| r.is_error()) {
                Some(e) => e.clone(),
                None => Reply::Array(items),
            }
        }
        ("hdel", n) if n >= 2 => delete(node, cl, rest[1..].iter().map(|f| key(&rest[0], f))).await,
        ("hgetall", 1) => match node.get_row(&rest[0], cl).await {
            Ok(row) => Reply::Map(
                row.into_iter()
                    .map(|(col, v)| (Reply::bulk(col), Reply::bulk(v.to_string())))
                    .collect(),
            ),
            Err(e) => read_err(&e),
        },
        ("incrbyfloat" | "hincrbyfloat", _) => Reply::err(format!(
            "ERR {} is not supported: Tally counts integers (use INCRBY)",
            name.to_ascii_uppercase()
        )),
        (
            "incr" | "decr" | "incrby" | "decrby" | "hincrby" | "get" | "hget" | "mget" | "hdel"
            | "hgetall",
            _,
        ) => arity(name),
        _ => return None,
    };
    Some(reply)
}

pub(crate) fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Reply::err("ERR value is not an integer or out of range"))
}

fn key(partition: &[u8], column: &[u8]) -> WireKey {
    WireKey::new(partition, column)
}

/// Redis' error for a command on a key of the other kind.
pub(crate) use crate::base::refusal::WRONGTYPE;

/// A write's error, in Redis' words where Redis has them.
pub(crate) fn wire_err(e: &WireError) -> Reply {
    match e.kind {
        ErrorKind::Overflow => Reply::err("ERR increment or decrement would overflow"),
        ErrorKind::WrongType => Reply::err(WRONGTYPE),
        _ => Reply::err(format!("ERR {e}")),
    }
}

/// A read's error: an overflow is the value's, not an increment's.
fn read_err(e: &WireError) -> Reply {
    match e.kind {
        ErrorKind::Overflow => Reply::err(format!("ERR {}", e.message)),
        _ => wire_err(e),
    }
}

async fn add(
    node: &Arc<Node>,
    cl: Consistency,
    partition: &[u8],
    column: &[u8],
    delta: Result<i64, Reply>,
) -> Reply {
    let delta = match delta {
        Ok(d) => d,
        Err(r) => return r,
    };
    match node.add(&key(partition, column), delta, cl).await {
        Ok(v) => Reply::Int(v),
        Err(e) => wire_err(&e),
    }
}

pub(crate) async fn get(
    node: &Arc<Node>,
    cl: Consistency,
    partition: &[u8],
    column: &[u8],
) -> Reply {
    match node.get_cell(&key(partition, column), cl).await {
        Ok(c) => match convert::live_value(&c, now_ms()) {
            Ok(Some(v)) => Reply::bulk(v.to_string()),
            Ok(None) => Reply::NIL,
            Err(e) => read_err(&e),
        },
        Err(e) => read_err(&e),
    }
}

/// Resets each of `keys` that is live; answers how many were.
async fn delete(node: &Arc<Node>, cl: Consistency, keys: impl Iterator<Item = WireKey>) -> Reply {
    let mut count = 0;
    for k in keys {
        match node.get_cell(&k, cl).await {
            Ok(c) if !c.live(now_ms()) => continue,
            Ok(_) => {}
            Err(e) => return wire_err(&e),
        }
        if let Err(e) = node.reset(&k, cl).await {
            return wire_err(&e);
        }
        count += 1;
    }
    Reply::Int(count)
}
