//! Conversions between the engine's types and the wire's, where the two
//! differ: a key and a cell are checked into the engine's forms (lengths,
//! reserved columns, a list's limit, duplicate shards), an operation id
//! and a tail of ids too. Epochs, shards, changes and list changes are
//! `tally-model`'s, one type on both sides, and need none.

use tally_engine::cell::List;
use tally_engine::ids::record::Applied;
use tally_engine::{Cell, Key, LearnedTail, TailIds, TailOp};
use tally_net::ring::TokenRange;
use tally_net::wire::{
    ErrorKind, WireCell, WireError, WireKey, WireLearned, WireRange, WireTail, WireTailOp,
};

use super::refusal;

/// A wire key from a peer as an engine key; over-long parts are `Invalid`.
pub fn key(k: &WireKey) -> Result<Key, WireError> {
    Key::new(k.partition(), k.column())
        .map_err(|e| WireError::new(ErrorKind::Invalid, e.to_string()))
}

/// A wire key from a client as an engine key: over-long parts and
/// reserved columns (unique counters' own) are `Invalid`.
pub fn user_key(k: &WireKey) -> Result<Key, WireError> {
    user_key_of(k.partition(), k.column())
}

/// [`user_key`] of a partition and a column.
pub fn user_key_of(partition: &[u8], column: &[u8]) -> Result<Key, WireError> {
    Key::user(partition, column).map_err(|e| WireError::new(ErrorKind::Invalid, e.to_string()))
}

/// An engine key for the wire.
pub fn wire_key(k: &Key) -> WireKey {
    WireKey::new(k.partition(), k.column())
}

/// A wire operation id as the engine's; out of bounds is `Invalid`.
pub fn op_id(id: &tally_net::once::OpId) -> Result<tally_engine::OpId, WireError> {
    id.check()?;
    tally_engine::OpId::new(&id.client, id.seq)
        .map_err(|e| WireError::new(ErrorKind::Invalid, e.to_string()))
}

/// An engine operation id for the wire.
pub fn wire_op_id(id: &tally_engine::OpId) -> tally_net::once::OpId {
    tally_net::once::OpId {
        client: id.client.to_vec(),
        seq: id.seq,
    }
}

/// An engine cell for the wire.
pub fn wire_cell(c: &Cell) -> WireCell {
    WireCell {
        epoch: c.epoch(),
        shards: c.shards().iter().copied().collect(),
        list: c.list().map(|l| l.elements().into()),
    }
}

/// A wire cell as an engine cell. Duplicate counter ids are resolved by
/// the cell's own merge rule, so a hostile cell cannot break its invariants;
/// a list over its limit (which no correct peer sends: `authz` refuses it
/// in a write) is dropped, the rest of the cell kept.
pub fn cell(c: &WireCell) -> Cell {
    let list = c
        .list
        .as_ref()
        .and_then(|l| List::new(l.to_vec()).ok().flatten());
    Cell::from_parts(c.epoch, c.shards.iter().copied()).with_list(list)
}

/// A cell's value for a client: an [`ErrorKind::Overflow`] error when its
/// shards sum past the range of an `i64`, never a saturated number.
pub fn value(c: &Cell) -> Result<i64, WireError> {
    c.value()
        .map_err(|e| WireError::new(ErrorKind::Overflow, e.to_string()))
}

/// A counter's value at `now_ms`, `None` when it is absent (never
/// written, reset, or past its deadline); see [`value`] for the error.
pub fn live_value(c: &Cell, now_ms: u64) -> Result<Option<i64>, WireError> {
    if !c.live(now_ms) {
        return Ok(None);
    }
    if c.is_list() {
        return Err(WireError::new(
            ErrorKind::WrongType,
            "the key holds a list, not a counter",
        ));
    }
    value(c).map(Some)
}

/// An engine error as the client or a peer sees it.
pub fn engine_error(e: &tally_engine::Error) -> WireError {
    use tally_engine::Error as E;
    let kind = match e {
        E::Overflow { .. } => ErrorKind::Overflow,
        E::PartitionTooLong { .. }
        | E::ColumnTooLong { .. }
        | E::TooManyShards { .. }
        | E::ClockExhausted { .. }
        | E::BadOpId(_)
        | E::MemberTooLong { .. }
        | E::ReservedColumn => ErrorKind::Invalid,
        E::ListTooLong(_) => ErrorKind::Invalid,
        // Redis' words, which the wire has always carried.
        E::Refused(r) => return WireError::new(refusal::kind(*r), refusal::redis(*r)),
        E::IdConflict { .. } => ErrorKind::IdConflict,
        // Its sender is gone: whoever asks, nothing was applied.
        E::Fenced { .. } => return WireError::not_applied(ErrorKind::Storage, e.to_string()),
        E::IdExpired { .. } => ErrorKind::IdExpired,
        // Refused before it changed anything: safe to retry.
        E::IdsFull { .. } => return WireError::not_applied(ErrorKind::Unavailable, e.to_string()),
        // The write path confirms the restart and adds again: a refusal
        // that reaches a client changed nothing.
        E::Expired { .. } => return WireError::not_applied(ErrorKind::Unavailable, e.to_string()),
        // Refused before it changed anything: safe to retry.
        E::DiskFull(_) => return WireError::not_applied(ErrorKind::Storage, e.to_string()),
        _ => ErrorKind::Storage,
    };
    WireError::new(kind, e.to_string())
}

/// An engine tail op for the wire.
fn wire_tail_op(op: &TailOp) -> WireTailOp {
    WireTailOp {
        batch: op.batch,
        id: tally_net::once::OpId {
            client: op.client.to_vec(),
            seq: op.op.seq,
        },
        delta: op.op.delta,
        value: op.op.value,
        epoch: op.op.epoch,
        at_ms: op.op.at_ms,
    }
}

/// A wire tail op as the engine's; an id out of bounds is `Invalid`.
fn tail_op(op: &WireTailOp) -> Result<TailOp, WireError> {
    let id = op_id(&op.id)?;
    Ok(TailOp {
        batch: op.batch,
        client: id.client,
        op: Applied {
            seq: id.seq,
            delta: op.delta,
            value: op.value,
            epoch: op.epoch,
            at_ms: op.at_ms,
        },
    })
}

/// An engine tail of ids for the wire.
pub fn wire_tail(t: &TailIds) -> WireTail {
    WireTail {
        counter_id: t.counter_id,
        durable: t.durable,
        ops: t.ops.iter().map(wire_tail_op).collect(),
    }
}

/// A wire tail of ids as the engine's; an id out of bounds is `Invalid`.
pub fn tail(t: &WireTail) -> Result<TailIds, WireError> {
    Ok(TailIds {
        counter_id: t.counter_id,
        durable: t.durable,
        ops: t.ops.iter().map(tail_op).collect::<Result<_, _>>()?,
    })
}

/// A key's tail, with its cell, for the wire.
pub fn wire_learned(key: &Key, cell: &Cell, ops: &[TailOp]) -> WireLearned {
    WireLearned {
        key: wire_key(key),
        cell: wire_cell(cell),
        ops: ops.iter().map(wire_tail_op).collect(),
    }
}

/// A key's learned tail from a peer; bad keys and ids are `Invalid`.
pub fn learned(l: &WireLearned) -> Result<LearnedTail, WireError> {
    Ok((
        key(&l.key)?,
        cell(&l.cell),
        l.ops.iter().map(tail_op).collect::<Result<_, _>>()?,
    ))
}

/// Token ranges as a peer request carries them.
pub(crate) fn wire_ranges(ranges: &[TokenRange]) -> Vec<WireRange> {
    ranges
        .iter()
        .map(|r| WireRange {
            start: r.start,
            end: r.end,
        })
        .collect()
}

/// The token ranges a peer request carries (bounds checked by its caller).
pub(crate) fn token_ranges(ranges: &[WireRange]) -> Vec<TokenRange> {
    ranges
        .iter()
        .map(|r| TokenRange {
            start: r.start,
            end: r.end,
        })
        .collect()
}
