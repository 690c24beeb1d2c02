//! The Redis set and HyperLogLog commands, answered exactly by unique
//! counters (see `write::unique`): `SADD`, `SCARD`, `SISMEMBER`,
//! `SMISMEMBER`, `PFADD`, `PFCOUNT`. A key is a unique counter's
//! partition. `DEL` resets one (in `resp`).
//!
//! Only the counting part of a set is here: members cannot be listed or
//! removed one by one (`SMEMBERS`, `SREM` answer an error: see
//! `command::UNSERVED`), and `PFCOUNT`
//! of several keys, which would need the union of their members, too.

use std::sync::Arc;

use tally_net::wire::{Consistency, MEMBERS_MAX, WireError};

use super::proto::Reply;
use crate::base::keyspace::Keyspace;
use crate::node::Node;

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    // `SADD` (`Op::SAdd`) never comes here: `super::keyed_as` runs it as
    // parsed, with [`sadd`].
    let reply = match (name, rest.len()) {
        ("pfadd", 1) => Reply::Int(0),
        ("pfadd", n) if n >= 2 => match add(node, cl, &rest[0], &rest[1..]).await {
            Ok(new) => Reply::Int(i64::from(new.contains(&true))),
            Err(e) => err(&e),
        },
        ("scard", 1) | ("pfcount", 1) => match node.unique_count(&rest[0], cl).await {
            Ok(n) => Reply::Int(n),
            Err(e) => err(&e),
        },
        ("pfcount", n) if n > 1 => Reply::Error(
            "ERR PFCOUNT of several keys needs the union of their members; \
             Tally counts each unique counter on its own"
                .into(),
        ),
        ("sismember", 2) => match contains(node, cl, &rest[0], &rest[1..]).await {
            Ok(flags) => Reply::Int(i64::from(flags[0])),
            Err(e) => err(&e),
        },
        ("smismember", n) if n >= 2 => match contains(node, cl, &rest[0], &rest[1..]).await {
            Ok(flags) => Reply::Array(
                flags
                    .into_iter()
                    .map(|f| Reply::Int(i64::from(f)))
                    .collect(),
            ),
            Err(e) => err(&e),
        },
        ("sadd" | "pfadd" | "scard" | "pfcount" | "sismember" | "smismember", _) => Reply::Error(
            format!("ERR wrong number of arguments for '{name}' command"),
        ),
        _ => return None,
    };
    Some(reply)
}

/// The reply to a parsed `SADD` of `members` to the unique counter
/// `key` (as its client sent it) in `space`: how many were new.
pub(crate) async fn sadd(
    node: &Arc<Node>,
    cl: Consistency,
    space: Keyspace,
    key: &[u8],
    members: &[Vec<u8>],
) -> Reply {
    let key = match space.place(key) {
        Ok(key) => key,
        Err(e) => return Reply::err(format!("ERR {e}")),
    };
    match add(node, cl, &key, members).await {
        Ok(new) => Reply::Int(count_new(&new)),
        Err(e) => err(&e),
    }
}

fn count_new(new: &[bool]) -> i64 {
    new.iter().filter(|n| **n).count() as i64
}

/// Adds members in requests of at most [`MEMBERS_MAX`].
async fn add(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
    members: &[Vec<u8>],
) -> Result<Vec<bool>, WireError> {
    let mut new = Vec::with_capacity(members.len());
    for chunk in members.chunks(MEMBERS_MAX) {
        new.extend(node.unique_add(key, chunk, cl).await?);
    }
    Ok(new)
}

async fn contains(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
    members: &[Vec<u8>],
) -> Result<Vec<bool>, WireError> {
    let mut flags = Vec::with_capacity(members.len());
    for chunk in members.chunks(MEMBERS_MAX) {
        flags.extend(node.unique_contains(key, chunk, cl).await?);
    }
    Ok(flags)
}

fn err(e: &WireError) -> Reply {
    Reply::Error(format!("ERR {e}"))
}
