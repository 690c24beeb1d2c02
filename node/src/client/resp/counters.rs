//! The counter commands: `INCR`, `INCRBY`, `DECR`, `DECRBY`, `GET`,
//! `MGET`, and on a partition's columns `HINCRBY` and `HGET` (`EXISTS`
//! and `DEL`, on keys of every kind, are `generic`'s; the rest of a
//! hash's, `hashes`').
//! Each runs at the connection's level (`CLIENT CONSISTENCY`, QUORUM by
//! default) through this node as coordinator; the keys of one `MGET` are
//! read at once.

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};

use std::borrow::Cow;

use super::command::{Cmd, NOT_AN_INTEGER, Op};
use super::proto::Reply;
use super::registers::AddedToString;
use super::session::arity;
use crate::base::convert;
use crate::base::join::join_all;
use crate::base::keyspace::Keyspace;
use crate::base::refusal::is_holds_string;
use crate::cluster::write::Queued;
use crate::node::Node;

/// Most keys of one `MGET` read at once.
const READS_AT_ONCE: usize = 256;

/// Answers `name` if it is one of this module's commands. Adds and reads
/// (`Op::Add`, `Op::Get`, `Op::MGet`) come here only with a wrong number
/// of arguments: `super::keyed_as` runs them as parsed, with the
/// functions below.
pub(crate) fn execute(name: &str) -> Option<Reply> {
    match name {
        "incr" | "decr" | "incrby" | "decrby" | "hincrby" | "get" | "hget" | "mget" => {
            Some(arity(name))
        }
        _ => None,
    }
}

/// An integer argument, or Redis' error.
pub(crate) fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Reply::err(NOT_AN_INTEGER))
}

/// The key of a parsed add or read (`Op::Add`, `Op::Get`): the partition
/// `words[1]` as stored in `space`, and the column `words[2]` if `column`
/// (else none); a partition with no place there gets Redis' error for it.
pub(crate) fn key_of(
    space: Keyspace,
    cmd: &Cmd,
    column: bool,
) -> Result<(Cow<'_, [u8]>, &[u8]), Reply> {
    let partition = space
        .place(&cmd.words[1])
        .map_err(|e| Reply::err(format!("ERR {e}")))?;
    let column = if column { cmd.words[2].as_slice() } else { &[] };
    Ok((partition, column))
}

/// The reply to a parsed `MGET` of `keys` in `space`: each key's value,
/// read `READS_AT_ONCE` at a time; a key with no place in `space` gets
/// Redis' error for it.
pub(crate) async fn mget(
    node: &Arc<Node>,
    cl: Consistency,
    space: Keyspace,
    keys: &[Vec<u8>],
) -> Reply {
    let placed: Result<Vec<Cow<'_, [u8]>>, _> = keys.iter().map(|k| space.place(k)).collect();
    let placed = match placed {
        Ok(placed) => placed,
        Err(e) => return Reply::err(format!("ERR {e}")),
    };
    let mut items = Vec::with_capacity(placed.len());
    for keys in placed.chunks(READS_AT_ONCE) {
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

/// Queues a parsed add (`Op::Add`'s `column` and `delta`) of `cmd` in
/// `space` at `cl`, to be answered by [`answer`]; the general path and a
/// pipeline's group both run this. A key with no place in `space` comes
/// before an amount that is not an integer, as Redis checks them.
pub(crate) fn queue_add(
    node: &Node,
    cl: Consistency,
    space: Keyspace,
    cmd: &Cmd,
    column: bool,
    delta: Result<i64, &'static str>,
) -> Result<Queued, Reply> {
    let (partition, column) = key_of(space, cmd, column)?;
    let delta = delta.map_err(Reply::err)?;
    node.queue_add(&partition, column, delta, cl)
        .map_err(|e| wire_err(&e))
}

/// The reply to an add [`queue_add`] queued of `cmd` (`Op::Add`): its new
/// value, once the write is acknowledged. An add its leader refused
/// because the key holds a string is made to the string, agreed, as
/// Redis' `INCR` of a string that holds an integer; should the string be
/// gone by then, the add is queued again as a counter's.
pub(crate) async fn answer(
    node: &Node,
    (cl, space): (Consistency, Keyspace),
    cmd: &Cmd,
    queued: Queued,
) -> Reply {
    match queued.answer().await {
        Ok(value) => Reply::Int(value),
        Err(e) if is_holds_string(&e) => add_to_string(node, (cl, space), cmd).await,
        Err(e) => wire_err(&e),
    }
}

/// An add of a key's own column at `SERIAL` (`INCR` and its kin), made
/// to the key's string through agreement, so that no two adds answer the
/// same value (a linearizable counter); a key with neither a string nor a
/// counter starts a string at the delta, as Redis' `INCR` of an absent
/// key. `None`: not such an add, or the key holds a live counter, which
/// keeps counting as one.
pub(crate) async fn serial_add(
    node: &Node,
    cl: Consistency,
    space: Keyspace,
    cmd: &Cmd,
) -> Option<Reply> {
    let (
        Consistency::Serial,
        Op::Add {
            column: false,
            delta,
        },
    ) = (cl, cmd.op)
    else {
        return None;
    };
    let (partition, delta) = match (key_of(space, cmd, false), delta) {
        (Ok((p, _)), Ok(d)) => (p, d),
        (Err(e), _) => return Some(e),
        (_, Err(e)) => return Some(Reply::err(e)),
    };
    match node.get_cell(&key(&partition, b""), cl).await {
        Ok(cell) if cell.live(now_ms()) => return None,
        Ok(_) => {}
        Err(e) => return Some(read_err(&e)),
    }
    Some(
        match super::registers::add_or_make(node, &partition, delta).await {
            Ok(done) => added_to_string(done),
            Err(e) => wire_err(&e),
        },
    )
}

/// The reply to an add made to a string.
fn added_to_string(done: AddedToString) -> Reply {
    match done {
        AddedToString::Value(v) => Reply::Int(v),
        AddedToString::NotInteger => Reply::err(NOT_AN_INTEGER),
        AddedToString::Overflow => Reply::err("ERR increment or decrement would overflow"),
        AddedToString::NoString => Reply::err("ERR no such key"),
        AddedToString::WrongType => Reply::err(WRONGTYPE),
    }
}

/// `cmd`'s add made to the string of its column (the key's own, or a
/// hash's string field).
async fn add_to_string(node: &Node, (cl, space): (Consistency, Keyspace), cmd: &Cmd) -> Reply {
    let Op::Add { column, delta } = cmd.op else {
        return Reply::err("ERR not an add");
    };
    let ((partition, column), delta) = match (key_of(space, cmd, column), delta) {
        (Ok(key), Ok(d)) => (key, d),
        (Err(e), _) => return e,
        (_, Err(e)) => return Reply::err(e),
    };
    let mut waits = STRING_GONE_WAITS_MS.iter();
    loop {
        match super::registers::add(node, (&partition, column), delta).await {
            Ok(AddedToString::NoString) => {}
            Ok(done) => return added_to_string(done),
            Err(e) => return wire_err(&e),
        }
        let answer = match node.queue_add(&partition, column, delta, cl) {
            Ok(queued) => queued.answer().await,
            Err(e) => Err(e),
        };
        match (answer, waits.next()) {
            (Ok(v), _) => return Reply::Int(v),
            (Err(e), Some(ms)) if is_holds_string(&e) => {
                tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
            }
            (Err(e), _) => return wire_err(&e),
        }
    }
}

/// How long an add waits, each time, before it tries again when the
/// key's leader refused it for a string that agreement found gone: the
/// leader has not yet taken the commit that removed it (commits are sent
/// without waiting), and will within moments.
const STRING_GONE_WAITS_MS: [u64; 7] = [5, 10, 20, 40, 80, 160, 320];

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
pub(crate) fn read_err(e: &WireError) -> Reply {
    match e.kind {
        ErrorKind::Overflow => Reply::err(format!("ERR {}", e.message)),
        _ => wire_err(e),
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
            // No counter: the string of the column (the key's own, or a
            // hash's string field), if it holds one.
            Ok(None) => match super::registers::get_column(node, partition, column).await {
                Ok(Some(s)) => Reply::bulk(s),
                Ok(None) => Reply::NIL,
                Err(e) => read_err(&e),
            },
            Err(e) => read_err(&e),
        },
        Err(e) => read_err(&e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn cmd(line: &str) -> Cmd {
        Cmd::parse(line.split(' ').map(|w| w.as_bytes().to_vec()).collect())
    }

    /// An add's key is placed in every database, and after a flush: the
    /// fast path serves them all.
    #[test]
    fn a_parsed_add_has_its_key_in_every_keyspace() {
        let incr = cmd("INCR a");
        let (p, c) = key_of(Keyspace::DEFAULT, &incr, false).unwrap();
        assert!(matches!(p, Cow::Borrowed(b"a")) && c.is_empty());
        for space in [
            Keyspace {
                db: 3,
                generation: 0,
            },
            Keyspace {
                db: 0,
                generation: 1,
            },
            Keyspace {
                db: 15,
                generation: 9,
            },
        ] {
            let (p, c) = key_of(space, &incr, false).unwrap();
            assert_eq!(p.as_ref(), space.stored(b"a").unwrap());
            assert!(c.is_empty());
        }
        let h = cmd("HINCRBY h f 2");
        let (p, c) = key_of(
            Keyspace {
                db: 3,
                generation: 0,
            },
            &h,
            true,
        )
        .unwrap();
        assert_eq!(
            (p.len(), c),
            (1 + crate::base::keyspace::PREFIX_BYTES, &b"f"[..])
        );
        let long = cmd(&format!(
            "INCR {}",
            "k".repeat(tally_engine::PARTITION_BYTES_MAX + 1)
        ));
        let Err(Reply::Error(e)) = key_of(Keyspace::DEFAULT, &long, false) else {
            panic!("a long key has no place")
        };
        assert!(e.contains("the limit is"), "{e}");
    }
}
