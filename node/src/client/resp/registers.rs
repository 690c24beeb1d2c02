//! Strings: a key's byte string, kept as the register of the key's empty
//! column and changed only through agreement (`cluster::agree`), so every
//! change and read of it is linearizable through any node.
//!
//! A `SET` whose value is not a 64-bit integer stores a string (an
//! integer still sets a counter, see `strings`); `GET` reads a string
//! where the key holds no counter; `DEL`, `EXISTS` and `TYPE` see strings.
//! A key holds one kind: a string is not stored over a live counter, and
//! an add (`INCR` and its kin) to a key that holds a string is made to the
//! string, agreed ([`add`]), when the add's leader sees the string in its
//! cached Paxos state (`cluster::write::strings`). A leader that does not
//! (the string's state evicted from its cache, or just decided through
//! another node and not yet heard of) starts a counter beside it, and
//! reads then answer the counter.
//!
//! The rules are pure (`base::strings`): a change of the partition's
//! registers from the ones decided so far, which the proposer may run once
//! per attempt; this module runs them through agreement.

use std::sync::Arc;

use tally_net::wire::{ErrorKind, Register, Registers, When, WireError};

use crate::base::compare::Compare;
use crate::base::refusal::WRONGTYPE;
pub(crate) use crate::base::strings::{
    AddedToString, COLUMN, STRING_BYTES_MAX, SetDone, SetString, add_or_make_string, add_to_column,
    add_to_string, expire_string, expire_value, remove_string, set_string, value_column,
};
use crate::node::Node;

/// Adds `delta` to the string of `column` (the key's own, empty, or a
/// hash's field), agreed.
pub(crate) async fn add(
    node: &Node,
    (key, column): (&[u8], &[u8]),
    delta: i64,
) -> Result<AddedToString, WireError> {
    let column = column.to_vec();
    node.agree(key, move |registers, now| {
        Ok(add_to_column(registers, &column, delta, now))
    })
    .await
}

/// Adds `delta` to the key's string, or makes one of `delta` where there
/// is none, agreed (`INCR` at `SERIAL`).
pub(crate) async fn add_or_make(
    node: &Node,
    key: &[u8],
    delta: i64,
) -> Result<AddedToString, WireError> {
    node.agree(key, move |registers, now| {
        Ok(add_or_make_string(registers, delta, now))
    })
    .await
}

/// `set` of the key's string, agreed: what it did.
pub(crate) async fn set(
    node: &Arc<Node>,
    key: &[u8],
    set: SetString,
) -> Result<SetDone, WireError> {
    node.agree(key, move |registers, now| {
        Ok(set_string(registers, &set, now))
    })
    .await
}

/// The key's string, if it has one.
pub(crate) async fn get(node: &Arc<Node>, key: &[u8]) -> Result<Option<Vec<u8>>, WireError> {
    Ok(get_with_deadline(node, key).await?.map(|r| r.value))
}

/// The string of `column` (the key's own, empty, or a hash's field), if
/// it holds one; `WRONGTYPE` for the key's own where it holds a sorted
/// set, as Redis' `GET` answers.
pub(crate) async fn get_column(
    node: &Arc<Node>,
    key: &[u8],
    column: &[u8],
) -> Result<Option<Vec<u8>>, WireError> {
    let registers = node.read_registers(key).await?;
    let now = tally_engine::now_ms();
    match registers.get(column, now) {
        Some(r) => Ok(Some(r.value.clone())),
        None if column.is_empty() && registers.get(crate::base::zset::COLUMN, now).is_some() => {
            Err(WireError::not_applied(ErrorKind::WrongType, WRONGTYPE))
        }
        None => Ok(None),
    }
}

/// The key's string and its deadline (0: none), if it has one.
pub(crate) async fn get_with_deadline(
    node: &Arc<Node>,
    key: &[u8],
) -> Result<Option<Register>, WireError> {
    let registers = node.read_registers(key).await?;
    Ok(registers.get(COLUMN, tally_engine::now_ms()).cloned())
}

/// The key's own register (its string, else its sorted set), if it has
/// one: what `TTL` reads.
pub(crate) async fn get_value(node: &Arc<Node>, key: &[u8]) -> Result<Option<Register>, WireError> {
    let registers = node.read_registers(key).await?;
    let now = tally_engine::now_ms();
    Ok(value_column(&registers, now).and_then(|c| registers.get(c, now).cloned()))
}

/// Gives the key's own register (its string, else its sorted set) the
/// deadline `at_ms` (0: none) if `only` allows; whether it did (a read
/// first, as [`surely_none`]).
pub(crate) async fn expire(
    node: &Arc<Node>,
    key: &[u8],
    at_ms: u64,
    only: When,
) -> Result<bool, WireError> {
    if surely_without(node, key, |r, now| value_column(r, now).is_some()).await? {
        return Ok(false);
    }
    node.agree(key, move |registers, _| {
        Ok(expire_value(registers, at_ms, only))
    })
    .await
}

/// Takes the key's string away (`GETDEL`): what it was, if there was one.
pub(crate) async fn take(node: &Arc<Node>, key: &[u8]) -> Result<Option<Vec<u8>>, WireError> {
    if surely_none(node, key).await? {
        return Ok(None);
    }
    node.agree(key, |registers, now| {
        let before = registers.get(COLUMN, now).map(|r| r.value.clone());
        Ok((remove_string(registers).0, before))
    })
    .await
}

/// Gives the key's string the deadline `at_ms` (0: none) whatever it had
/// (`GETEX`): the string, if there is one.
pub(crate) async fn get_and_expire(
    node: &Arc<Node>,
    key: &[u8],
    at_ms: u64,
) -> Result<Option<Vec<u8>>, WireError> {
    if surely_none(node, key).await? {
        return Ok(None);
    }
    node.agree(key, move |registers, now| {
        let before = registers.get(COLUMN, now).map(|r| r.value.clone());
        let (next, _) = expire_string(registers, at_ms, When::Always);
        Ok((next, before))
    })
    .await
}

/// Whether the key holds no string, so that a change of it has nothing
/// to do: read (a key without one then costs no agreement round), unless
/// this node last saw it hold one (a lock being released, extended):
/// then the change goes straight to its round.
async fn surely_none(node: &Arc<Node>, key: &[u8]) -> Result<bool, WireError> {
    surely_without(node, key, |r, now| r.get(COLUMN, now).is_some()).await
}

/// Whether the key's registers surely lack what `holds` looks for: read,
/// unless this node last saw them hold it (then a change goes straight to
/// its round).
async fn surely_without(
    node: &Arc<Node>,
    key: &[u8],
    holds: impl Fn(&Registers, u64) -> bool,
) -> Result<bool, WireError> {
    let now = tally_engine::now_ms();
    if node
        .last_seen_registers(key)
        .is_some_and(|r| holds(&r, now))
    {
        return Ok(false);
    }
    Ok(!holds(&node.read_registers(key).await?, now))
}

/// Deletes the key's string if `c` holds of it (`DELEX`); whether it did.
pub(crate) async fn delete_if(node: &Arc<Node>, key: &[u8], c: Compare) -> Result<bool, WireError> {
    if surely_none(node, key).await? {
        return Ok(false);
    }
    node.agree(key, move |registers, now| {
        let current = registers.get(COLUMN, now).map(|r| r.value.as_slice());
        match current.is_some() && c.holds(current) {
            true => Ok(remove_string(registers)),
            false => Ok((registers.clone(), false)),
        }
    })
    .await
}

/// Deletes the key's string and every string field of it (`DEL`);
/// whether it had any. A read first: a key without any costs no round.
pub(crate) async fn delete_all(node: &Arc<Node>, key: &[u8]) -> Result<bool, WireError> {
    if surely_without(node, key, crate::base::fields::holds_any).await? {
        return Ok(false);
    }
    node.agree(key, |registers, now| {
        Ok(crate::base::fields::clear(registers, now))
    })
    .await
}
