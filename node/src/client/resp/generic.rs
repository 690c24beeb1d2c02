//! The commands on a key whatever it holds: `DEL`, `UNLINK`, `EXISTS`,
//! `TYPE`.
//!
//! A key is a partition. It may hold a counter or a list (its empty
//! column), a hash (its client columns) and a unique counter (its reserved
//! columns, which sort last); a Redis key holds one kind, so a key holding
//! several is named by the first in column order ([`kind`]): the order in
//! which `SCAN` meets them (`keys::listed`) and in which `EXPIRE` and `TTL`
//! look (`expiry`: the counter, else the hash, else the unique counter,
//! whose deadline is its count's). A unique counter whose deadline passed
//! holds nothing, as an expired Redis set: it is not a kind of the key.
//!
//! `DEL` resets every live column of the key, the counter (or list) and
//! each field of the hash, and its live unique counter: each reset is a
//! counter's reset (a new epoch with no shards, logged before it is
//! answered and replicated at the connection's level, winning over the
//! adds it races), so a hash is deleted with a counter's guarantees. A
//! field first written while a `DEL` runs may be missed by it, as if the
//! write came after. `UNLINK` is `DEL`: nothing is freed in the background.

use std::collections::BTreeMap;
use std::sync::Arc;

use tally_engine::{Cell, now_ms};
use tally_net::wire::{Consistency, WireError, WireKey, WireKind};

use super::counters::wire_err;
use super::proto::Reply;
use super::registers;
use super::session::arity;
use crate::base::join::join_all;
use crate::base::{fields, zset};
use crate::node::Node;

/// Most keys of one `EXISTS` read at once.
const READS_AT_ONCE: usize = 256;
/// Most columns of one key reset at once.
const RESETS_AT_ONCE: usize = 64;

/// Answers `name` if it is one of this module's commands (keys as stored).
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("exists", n) if n >= 1 => exists(node, cl, rest).await,
        ("del" | "unlink", n) if n >= 1 => delete_keys(node, cl, rest).await,
        ("type", 1) => match first_kind(node, cl, &rest[0]).await {
            Ok(k) => Reply::Status(k.unwrap_or("none").into()),
            Err(e) => wire_err(&e),
        },
        ("exists" | "del" | "unlink" | "type", _) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// What a key holds now, kind by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holds {
    /// Its empty column, if live: [`WireKind::Counter`] or [`WireKind::List`].
    pub(crate) counter: Option<WireKind>,
    /// Whether a client column is live.
    pub(crate) hash: bool,
    /// Whether its unique counter has members (its deadline, if any, not
    /// passed).
    pub(crate) set: bool,
}

/// The one kind a key holding `h` is named by: the first in column order
/// (counter or list, hash, unique counter); `None` for no key.
pub(crate) fn kind(h: Holds) -> Option<WireKind> {
    h.counter
        .or(h.hash.then_some(WireKind::Row))
        .or(h.set.then_some(WireKind::Unique))
}

/// Redis' name for a kind of key (`none` for no key).
pub(crate) fn type_name(kind: Option<WireKind>) -> &'static str {
    match kind {
        Some(WireKind::Counter) => "string",
        Some(WireKind::Row) => "hash",
        Some(WireKind::Unique) => "set",
        Some(WireKind::List) => "list",
        Some(WireKind::SortedSet) => "zset",
        None => "none",
    }
}

/// What a live empty column holds.
fn counter_kind(c: &Cell, now_ms: u64) -> Option<WireKind> {
    match c.live(now_ms) {
        true if c.is_list() => Some(WireKind::List),
        true => Some(WireKind::Counter),
        false => None,
    }
}

/// The columns of `row` that `DEL` resets: the live ones (a column reset
/// or expired already reads as absent, and the next add restarts it).
pub(crate) fn to_reset(row: &BTreeMap<Vec<u8>, Cell>, now_ms: u64) -> Vec<&[u8]> {
    row.iter()
        .filter(|(_, c)| c.live(now_ms))
        .map(|(col, _)| col.as_slice())
        .collect()
}

/// The kind of `key` at `cl` (Redis' name of it), reading no further
/// than the first found.
async fn first_kind(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
) -> Result<Option<&'static str>, WireError> {
    let now = now_ms();
    let mut h = Holds {
        counter: counter_kind(&node.get_cell(&WireKey::new(key, b""), cl).await?, now),
        ..Holds::default()
    };
    if h.counter.is_none() {
        let row = node.get_row_cells(key, cl).await?;
        h.hash = row.iter().any(|(col, c)| !col.is_empty() && c.live(now));
    }
    if h.counter.is_none() && !h.hash {
        h.set = node.unique_count(key, cl).await? > 0;
    }
    // A string is named as a counter is ("string"); string fields make a
    // hash.
    if kind(h).is_none() {
        let registers = node.read_registers(key).await?;
        let now = now_ms();
        if registers.get(b"", now).is_some() {
            h.counter = Some(WireKind::Counter);
        } else if fields::fields(&registers, now).next().is_some() {
            h.hash = true;
        } else if registers.get(zset::COLUMN, now).is_some() {
            return Ok(Some("zset"));
        }
    }
    Ok(kind(h).map(|k| type_name(Some(k))))
}

/// `EXISTS key...`: how many of the keys hold anything (a key named twice
/// counts twice, as in Redis).
async fn exists(node: &Arc<Node>, cl: Consistency, keys: &[Vec<u8>]) -> Reply {
    let mut count = 0;
    for keys in keys.chunks(READS_AT_ONCE) {
        for found in join_all(keys.iter().map(|k| first_kind(node, cl, k))).await {
            match found {
                Ok(k) => count += i64::from(k.is_some()),
                Err(e) => return wire_err(&e),
            }
        }
    }
    Reply::Int(count)
}

/// `DEL key...` (and `UNLINK`): deletes each key; answers how many held
/// anything.
async fn delete_keys(node: &Arc<Node>, cl: Consistency, keys: &[Vec<u8>]) -> Reply {
    let mut count = 0;
    for k in keys {
        match delete(node, cl, k).await {
            Ok(had) => count += i64::from(had),
            Err(e) => return wire_err(&e),
        }
    }
    Reply::Int(count)
}

/// Resets every live column of `key` and its unique counter at `cl`;
/// answers whether it held anything.
async fn delete(node: &Arc<Node>, cl: Consistency, key: &[u8]) -> Result<bool, WireError> {
    let row = node.get_row_cells(key, cl).await?;
    let live = to_reset(&row, now_ms());
    for columns in live.chunks(RESETS_AT_ONCE) {
        let resets = columns
            .iter()
            .map(|col| async move { node.reset(&WireKey::new(key, col), cl).await });
        for reset in join_all(resets).await {
            reset?;
        }
    }
    let set = node.unique_reset(key, cl).await?;
    let strings = registers::delete_all(node, key).await?;
    Ok(!live.is_empty() || set || strings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_engine::{Epoch, Expiry, Shard, Stamp};

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn a_key_is_named_by_its_first_kind_in_column_order() {
        let (c, l, h, s) = (
            Some(WireKind::Counter),
            Some(WireKind::List),
            Some(WireKind::Row),
            Some(WireKind::Unique),
        );
        let holds = |counter, hash, set| Holds { counter, hash, set };
        let table = [
            (holds(None, false, false), None, "none"),
            (holds(c, false, false), c, "string"),
            (holds(l, false, false), l, "list"),
            (holds(None, true, false), h, "hash"),
            (holds(None, false, true), s, "set"),
            (holds(c, true, true), c, "string"),
            (holds(l, true, false), l, "list"),
            (holds(None, true, true), h, "hash"),
        ];
        for (found, want, name) in table {
            assert_eq!(kind(found), want, "{found:?}");
            assert_eq!(type_name(kind(found)), name, "{found:?}");
        }
    }

    fn cell(value: i64, expire_at_ms: u64) -> Cell {
        let epoch = Epoch {
            expiry: Expiry {
                at_ms: expire_at_ms,
                stamp: Stamp::default(),
            },
            ..Epoch::default()
        };
        let shard = Shard {
            counter_id: 7,
            clock: 1,
            value,
        };
        Cell::from_parts(epoch, [shard])
    }

    #[test]
    fn del_resets_every_live_column_and_only_those() {
        let row: BTreeMap<Vec<u8>, Cell> = [
            (b"".to_vec(), cell(1, 0)),
            (b"f".to_vec(), cell(3, 0)),
            (b"gone".to_vec(), Cell::new()),
            (b"later".to_vec(), cell(2, NOW + 1)),
            (b"past".to_vec(), cell(2, NOW)),
        ]
        .into_iter()
        .collect();
        assert_eq!(to_reset(&row, NOW), [&b""[..], b"f", b"later"]);
        assert!(to_reset(&BTreeMap::new(), NOW).is_empty());
    }
}
