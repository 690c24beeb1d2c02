//! Lists over RESP: `LPUSH`, `RPUSH`, `LPUSHX`, `RPUSHX`, `LPOP`, `RPOP`,
//! `LTRIM`, `LSET`, `LREM`, `LINSERT` (changes, led by the list's first
//! replica: see `write::list`) and `LLEN`, `LRANGE`, `LINDEX` (reads of
//! the list's cell at the connection's consistency level). What rate
//! limiters' moving windows need, with Redis' replies and errors; a list
//! holds at most `LIST_BYTES_MAX` bytes (a clear error past it).

use std::sync::Arc;

use tally_engine::list::{index_of, range};
use tally_engine::{Refusal, now_ms};
use tally_net::list::{End, ListChange, ListReply};
use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};

use super::counters::{WRONGTYPE, int_arg, wire_err};
use super::proto::Reply;
use super::session::arity;
use crate::base::refusal;
use crate::node::Node;

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("lpush" | "rpush" | "lpushx" | "rpushx", n) if n >= 2 => {
            let change = ListChange::Push {
                end: end_of(name),
                values: rest[1..].to_vec(),
                only_existing: name.ends_with('x'),
            };
            change_list(node, cl, &rest[0], change).await
        }
        ("lpop" | "rpop", 1 | 2) => pop(node, cl, name, rest).await,
        ("ltrim", 3) => match (int_arg(&rest[1]), int_arg(&rest[2])) {
            (Ok(start), Ok(stop)) => {
                let change = ListChange::Trim { start, stop };
                change_list(node, cl, &rest[0], change).await
            }
            (Err(e), _) | (_, Err(e)) => e,
        },
        ("lset", 3) => match int_arg(&rest[1]) {
            Ok(index) => {
                let value = rest[2].clone();
                change_list(node, cl, &rest[0], ListChange::Set { index, value }).await
            }
            Err(e) => e,
        },
        ("lrem", 3) => match int_arg(&rest[1]) {
            Ok(count) => {
                let value = rest[2].clone();
                change_list(node, cl, &rest[0], ListChange::Remove { count, value }).await
            }
            Err(e) => e,
        },
        ("linsert", 4) => match insert_args(rest) {
            Ok(change) => change_list(node, cl, &rest[0], change).await,
            Err(e) => e,
        },
        ("llen" | "lrange" | "lindex", _) => read(node, cl, name, rest).await,
        (
            "lpush" | "rpush" | "lpushx" | "rpushx" | "lpop" | "rpop" | "ltrim" | "lset" | "lrem"
            | "linsert",
            _,
        ) => arity(name),
        _ => return None,
    };
    Some(reply)
}

fn end_of(name: &str) -> End {
    if name.starts_with('l') {
        End::Left
    } else {
        End::Right
    }
}

/// `LINSERT key BEFORE|AFTER pivot element`.
fn insert_args(rest: &[Vec<u8>]) -> Result<ListChange, Reply> {
    let before = match rest[1].to_ascii_lowercase().as_slice() {
        b"before" => true,
        b"after" => false,
        _ => return Err(Reply::err("ERR syntax error")),
    };
    Ok(ListChange::Insert {
        before,
        pivot: rest[2].clone(),
        value: rest[3].clone(),
    })
}

/// `LPOP key [count]`: one element (nil when none) without a count, an
/// array (nil when the key is absent) with one.
async fn pop(node: &Arc<Node>, cl: Consistency, name: &str, rest: &[Vec<u8>]) -> Reply {
    let count = match rest.get(1).map(|c| int_arg(c)) {
        None => None,
        Some(Ok(n)) if n >= 0 => Some(n as u64),
        Some(_) => return Reply::err("ERR value is out of range, must be positive"),
    };
    let change = ListChange::Pop {
        end: end_of(name),
        count: count.unwrap_or(1),
    };
    let popped = match node
        .change_list(&WireKey::new(&rest[0], b""), change, cl)
        .await
    {
        Ok(ListReply::Popped(p)) => p,
        Ok(other) => return unexpected(&other),
        Err(e) => return list_err(&e),
    };
    match count {
        None => Reply::Bulk(popped.into_iter().next()),
        Some(_) if popped.is_empty() => Reply::Bulk(None),
        Some(_) => Reply::Array(popped.into_iter().map(|e| Reply::Bulk(Some(e))).collect()),
    }
}

/// Makes a change; answers its reply as Redis does.
async fn change_list(node: &Arc<Node>, cl: Consistency, key: &[u8], change: ListChange) -> Reply {
    match node.change_list(&WireKey::new(key, b""), change, cl).await {
        Ok(ListReply::Int(n)) => Reply::Int(n),
        Ok(ListReply::Done) => Reply::Simple("OK"),
        Ok(other @ ListReply::Popped(_)) => unexpected(&other),
        Err(e) => list_err(&e),
    }
}

fn unexpected(r: &ListReply) -> Reply {
    Reply::err(format!("ERR internal error: unexpected answer {r:?}"))
}

/// A list change's error, in Redis' words.
pub(crate) fn list_err(e: &WireError) -> Reply {
    match (e.kind, refusal::of_text(&e.message)) {
        (ErrorKind::Invalid, Some(r @ (Refusal::NoSuchKey | Refusal::IndexOutOfRange))) => {
            Reply::err(refusal::redis(r))
        }
        _ => wire_err(e),
    }
}

/// `LLEN key`, `LRANGE key start stop`, `LINDEX key index`.
async fn read(node: &Arc<Node>, cl: Consistency, name: &str, rest: &[Vec<u8>]) -> Reply {
    let args = match (name, rest.len()) {
        ("llen", 1) => (0, 0),
        ("lindex", 2) => match int_arg(&rest[1]) {
            Ok(i) => (i, 0),
            Err(e) => return e,
        },
        ("lrange", 3) => match (int_arg(&rest[1]), int_arg(&rest[2])) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return e,
        },
        _ => return arity(name),
    };
    let cell = match node.get_cell(&WireKey::new(&rest[0], b""), cl).await {
        Ok(c) => c,
        Err(e) => return wire_err(&e),
    };
    let live = cell.live(now_ms());
    if live && !cell.is_list() {
        return Reply::err(WRONGTYPE);
    }
    let list: &[Vec<u8>] = match cell.list() {
        Some(l) if live => l.elements(),
        _ => &[],
    };
    match name {
        "llen" => Reply::Int(list.len() as i64),
        "lindex" => Reply::Bulk(index_of(list.len(), args.0).map(|i| list[i].clone())),
        _ => Reply::Array(match range(list.len(), args.0, args.1) {
            Some((a, b)) => list[a..=b]
                .iter()
                .map(|e| Reply::Bulk(Some(e.clone())))
                .collect(),
            None => Vec::new(),
        }),
    }
}
