//! Conversions between the engine's types and the wire's.

use tally_engine::{Cell, Key, Shard};
use tally_net::wire::{ErrorKind, WireCell, WireError, WireKey, WireShard};

/// A wire key from a peer as an engine key; over-long parts are `Invalid`.
pub fn key(k: &WireKey) -> Result<Key, WireError> {
    Key::new(k.partition(), k.column())
        .map_err(|e| WireError::new(ErrorKind::Invalid, e.to_string()))
}

/// A wire key from a client as an engine key: over-long parts and
/// reserved columns (unique counters' own) are `Invalid`.
pub fn user_key(k: &WireKey) -> Result<Key, WireError> {
    Key::user(k.partition(), k.column())
        .map_err(|e| WireError::new(ErrorKind::Invalid, e.to_string()))
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
        shards: c
            .shards()
            .iter()
            .map(|s| WireShard {
                counter_id: s.counter_id,
                clock: s.clock,
                value: s.value,
            })
            .collect(),
    }
}

/// A wire cell as an engine cell. Duplicate counter ids are resolved by
/// the cell's own merge rule, so a hostile cell cannot break its invariants.
pub fn cell(c: &WireCell) -> Cell {
    Cell::from_parts(
        c.epoch,
        c.shards.iter().map(|s| Shard {
            counter_id: s.counter_id,
            clock: s.clock,
            value: s.value,
        }),
    )
}

/// A cell's value for a client: an [`ErrorKind::Overflow`] error when its
/// shards sum past the range of an `i64`, never a saturated number.
pub fn value(c: &Cell) -> Result<i64, WireError> {
    c.value()
        .map_err(|e| WireError::new(ErrorKind::Overflow, e.to_string()))
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
        E::IdConflict { .. } => ErrorKind::IdConflict,
        E::IdExpired { .. } => ErrorKind::IdExpired,
        // Refused before it changed anything: safe to retry.
        E::DiskFull(_) => return WireError::not_applied(ErrorKind::Storage, e.to_string()),
        _ => ErrorKind::Storage,
    };
    WireError::new(kind, e.to_string())
}
