//! Compare-and-set and compare-and-delete commands of strings (Redis
//! 8.4): `DELEX key [IFEQ|IFNE|IFDEQ|IFDNE x]` and `DIGEST key`, with
//! `SET ... IF*` in `strings`; and `MSETNX` of one key. Their conditions
//! are `compare`'s, checked inside the agreed change (`registers`).
//!
//! A counter is a Redis string of digits: `DIGEST` hashes them and
//! `DELEX` compares them, then resets the counter (a read and a reset,
//! not one step: counters are not agreed). `SET ... IF*` over a counter is
//! refused, as every `SET` of a string over one is.
//!
//! `TALLY.CAS key expected new` swaps a string's value if it is
//! `expected` (its deadline kept), answering 1 or 0: the compare-and-swap
//! of a linearizable counter (`GET`, then swap v to v+5). Only strings:
//! a counter's key answers 0.
//!
//! `MSETNX` is atomic within one partition; every key is a partition of
//! its own, so an `MSETNX` of several keys is refused the way Redis
//! Cluster refuses keys of several slots, rather than half applied.

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Consistency, Deadline, StringCondition, WireKey};

use super::counters::{read_err, wire_err};
use super::proto::Reply;
use super::registers;
use super::session::arity;
use crate::base::compare::{Compare, delex_args, digest_hex};
use crate::node::Node;

/// Answers `name` if it is one of this module's commands (keys as stored).
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("delex", n) if n >= 1 => match delex_args(&rest[1..]) {
            Ok(None) => super::generic::execute(node, cl, "del", &rest[..1])
                .await
                .unwrap_or(Reply::Int(0)),
            Ok(Some(c)) => delex(node, cl, &rest[0], c).await,
            Err(e) => Reply::err(e),
        },
        ("digest", 1) => match super::text::value(node, cl, &rest[0]).await {
            Ok(v) => v.map_or(Reply::NIL, |v| Reply::bulk(digest_hex(&v))),
            Err(e) => e,
        },
        ("msetnx", n) if n >= 2 && n % 2 == 0 => msetnx(node, cl, rest).await,
        ("tally.cas", 3) => swap(node, &rest[0], &rest[1], &rest[2]).await,
        ("delex" | "digest" | "msetnx" | "tally.cas", _) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// The key's counter, if it holds a live one.
async fn counter(node: &Arc<Node>, cl: Consistency, key: &[u8]) -> Result<Option<i64>, Reply> {
    let cell = node
        .get_cell(&WireKey::new(key, b""), cl)
        .await
        .map_err(|e| read_err(&e))?;
    crate::base::convert::live_value(&cell, now_ms()).map_err(|e| read_err(&e))
}

/// `DELEX key cond`: 1 if the key held a value the condition holds of
/// and it is gone.
async fn delex(node: &Arc<Node>, cl: Consistency, key: &[u8], c: Compare) -> Reply {
    match counter(node, cl, key).await {
        Ok(Some(v)) if c.holds(Some(v.to_string().as_bytes())) => {
            super::generic::execute(node, cl, "del", &[key.to_vec()])
                .await
                .unwrap_or(Reply::Int(0))
        }
        Ok(Some(_)) => Reply::Int(0),
        Ok(None) => match registers::delete_if(node, key, c).await {
            Ok(gone) => Reply::Int(i64::from(gone)),
            Err(e) => wire_err(&e),
        },
        Err(e) => e,
    }
}

/// `TALLY.CAS key expected new`: 1 if the key's string was `expected`
/// and is now `new`, else 0.
async fn swap(node: &Arc<Node>, key: &[u8], expected: &[u8], new: &[u8]) -> Reply {
    let condition = StringCondition::Equals(expected.to_vec());
    let swapped = node
        .swap_string(key.to_vec(), Some(new.to_vec()), condition, Deadline::Keep)
        .await;
    match swapped {
        Ok(s) => Reply::Int(i64::from(s.applied)),
        Err(e) => wire_err(&e),
    }
}

/// `MSETNX key value`: `SET key value NX`, answering 1 or 0; several keys
/// are refused (see the module's note).
async fn msetnx(node: &Arc<Node>, cl: Consistency, rest: &[Vec<u8>]) -> Reply {
    let key = &rest[0];
    if rest.chunks(2).any(|pair| pair[0] != *key) {
        return Reply::err(
            "CROSSSLOT Keys in request don't hash to the same slot (MSETNX is atomic within \
             one key in Tally; send one MSETNX per key, or SET ... NX)",
        );
    }
    let Some(value) = rest.last() else {
        return arity("msetnx");
    };
    let set = vec![key.clone(), value.clone(), b"NX".to_vec()];
    match super::strings::execute(node, cl, "set", &set).await {
        Some(Reply::Simple("OK")) => Reply::Int(1),
        Some(Reply::Bulk(None)) => Reply::Int(0),
        Some(other) => other,
        None => Reply::Int(0),
    }
}
