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
//! The rules are pure ([`set_string`]): a change of the partition's
//! registers from the ones decided so far, which the proposer may run once
//! per attempt.

use std::sync::Arc;

use tally_net::wire::{Presence, Register, Registers, Ttl, When, WireError};

use super::compare::Compare;
use crate::node::Node;

/// The largest string, in bytes (Redis' is larger; an agreed value travels
/// whole in every round).
pub(crate) use tally_net::wire::STRING_BYTES_MAX;

/// A `SET` of a string, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SetString {
    /// The value.
    pub(crate) value: Vec<u8>,
    /// The deadline asked for.
    pub(crate) ttl: Ttl,
    /// `NX`, `XX`, or neither.
    pub(crate) only: Presence,
    /// Whether to answer the value before (`GET`).
    pub(crate) get: bool,
    /// A condition on the value before (`IFEQ` and its kin).
    pub(crate) compare: Option<Compare>,
}

/// What a `SET` of a string did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SetDone {
    /// Whether its condition held and it set the value.
    pub(crate) applied: bool,
    /// The string before, if there was one.
    pub(crate) before: Option<Vec<u8>>,
}

/// The column of a key's string.
const COLUMN: &[u8] = b"";

/// `set` applied to `registers` (live at `now_ms`): the next registers
/// and what it did; unchanged registers when its condition fails.
pub(crate) fn set_string(
    registers: &Registers,
    set: &SetString,
    now_ms: u64,
) -> (Registers, SetDone) {
    let current = registers.get(COLUMN, now_ms);
    let before = current.map(|r| r.value.clone());
    let wanted = match set.only {
        Presence::Any => true,
        Presence::Absent => current.is_none(),
        Presence::Live => current.is_some(),
    } && set
        .compare
        .as_ref()
        .is_none_or(|c| c.holds(before.as_deref()));
    if !wanted {
        return (
            registers.clone(),
            SetDone {
                applied: false,
                before,
            },
        );
    }
    let at_ms = match set.ttl {
        Ttl::Clear => 0,
        Ttl::Keep => current.map_or(0, |r| r.at_ms),
        Ttl::At(at) => at,
    };
    let mut next = registers.clone();
    next.put(Register {
        column: COLUMN.to_vec(),
        value: set.value.clone(),
        at_ms,
    });
    (
        next,
        SetDone {
            applied: true,
            before,
        },
    )
}

/// What an add to a key's string did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddedToString {
    /// The string's integer after it.
    Value(i64),
    /// The string is not a 64-bit integer: nothing changed.
    NotInteger,
    /// The sum would not fit: nothing changed.
    Overflow,
    /// There is no string (any more): nothing changed.
    NoString,
}

/// `delta` added to the key's string read as an integer (its deadline
/// kept, as Redis keeps it): the next registers and what it did.
pub(crate) fn add_to_string(
    registers: &Registers,
    delta: i64,
    now_ms: u64,
) -> (Registers, AddedToString) {
    let Some(current) = registers.get(COLUMN, now_ms) else {
        return (registers.clone(), AddedToString::NoString);
    };
    let before = std::str::from_utf8(&current.value)
        .ok()
        .and_then(|v| v.parse::<i64>().ok());
    let Some(before) = before else {
        return (registers.clone(), AddedToString::NotInteger);
    };
    let Some(after) = before.checked_add(delta) else {
        return (registers.clone(), AddedToString::Overflow);
    };
    let mut next = registers.clone();
    next.put(Register {
        value: after.to_string().into_bytes(),
        ..current.clone()
    });
    (next, AddedToString::Value(after))
}

/// Adds `delta` to the key's string, agreed.
pub(crate) async fn add(node: &Node, key: &[u8], delta: i64) -> Result<AddedToString, WireError> {
    node.agree(key, move |registers, now| {
        Ok(add_to_string(registers, delta, now))
    })
    .await
}

/// `registers` without the key's string: the next registers and whether
/// there was one.
pub(crate) fn remove_string(registers: &Registers) -> (Registers, bool) {
    let mut next = registers.clone();
    let had = next.remove(COLUMN);
    (next, had)
}

/// `registers` with the key's string given the deadline `at_ms` (0:
/// none) if `only` allows it (`When::allows`): the next registers and
/// whether it did. No string, no change.
pub(crate) fn expire_string(registers: &Registers, at_ms: u64, only: When) -> (Registers, bool) {
    let Some(current) = registers.get(COLUMN, 0) else {
        return (registers.clone(), false);
    };
    if !only.allows(current.at_ms, at_ms) {
        return (registers.clone(), false);
    }
    let mut next = registers.clone();
    next.put(Register {
        at_ms,
        ..current.clone()
    });
    (next, true)
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

/// The key's string and its deadline (0: none), if it has one.
pub(crate) async fn get_with_deadline(
    node: &Arc<Node>,
    key: &[u8],
) -> Result<Option<Register>, WireError> {
    let registers = node.read_registers(key).await?;
    Ok(registers.get(COLUMN, tally_engine::now_ms()).cloned())
}

/// Gives the key's string the deadline `at_ms` (0: none) if `only`
/// allows; whether it did (see [`surely_none`]).
pub(crate) async fn expire(
    node: &Arc<Node>,
    key: &[u8],
    at_ms: u64,
    only: When,
) -> Result<bool, WireError> {
    if surely_none(node, key).await? {
        return Ok(false);
    }
    node.agree(key, move |registers, _| {
        Ok(expire_string(registers, at_ms, only))
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
    let now = tally_engine::now_ms();
    if node
        .last_seen_registers(key)
        .is_some_and(|r| r.get(COLUMN, now).is_some())
    {
        return Ok(false);
    }
    Ok(get(node, key).await?.is_none())
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

/// Deletes the key's string; whether it had one (see [`surely_none`]).
pub(crate) async fn delete(node: &Arc<Node>, key: &[u8]) -> Result<bool, WireError> {
    if surely_none(node, key).await? {
        return Ok(false);
    }
    node.agree(key, |registers, _| Ok(remove_string(registers)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    fn string(value: &str, at_ms: u64) -> Registers {
        Registers(vec![Register {
            column: Vec::new(),
            value: value.as_bytes().to_vec(),
            at_ms,
        }])
    }

    fn set(value: &str, ttl: Ttl, only: Presence) -> SetString {
        SetString {
            value: value.as_bytes().to_vec(),
            ttl,
            only,
            get: false,
            compare: None,
        }
    }

    #[test]
    fn set_keeps_redis_conditions_and_deadlines() {
        let none = Registers::default();
        let (next, done) = set_string(&none, &set("a", Ttl::At(NOW + 5), Presence::Absent), NOW);
        assert_eq!(
            (next.clone(), done.applied, done.before),
            (string("a", NOW + 5), true, None)
        );
        // NX on a live string: nothing changes, the old value answered.
        let (same, done) = set_string(&next, &set("b", Ttl::Clear, Presence::Absent), NOW);
        assert_eq!((same, done.applied), (next.clone(), false));
        assert_eq!(done.before, Some(b"a".to_vec()));
        // XX on none: nothing.
        let (same, done) = set_string(&none, &set("b", Ttl::Clear, Presence::Live), NOW);
        assert_eq!((same, done.applied), (none.clone(), false));
        // KEEPTTL keeps the deadline; a plain SET clears it.
        let (kept, _) = set_string(&next, &set("c", Ttl::Keep, Presence::Live), NOW);
        assert_eq!(kept, string("c", NOW + 5));
        let (cleared, _) = set_string(&next, &set("c", Ttl::Clear, Presence::Any), NOW);
        assert_eq!(cleared, string("c", 0));
        // Once expired, the string is absent: NX takes it.
        let (taken, done) = set_string(&next, &set("d", Ttl::Clear, Presence::Absent), NOW + 5);
        assert_eq!(
            (taken, done.applied, done.before),
            (string("d", 0), true, None)
        );
    }

    #[test]
    fn expire_follows_the_conditions_of_counters() {
        let at = |registers: &Registers| registers.get(COLUMN, 0).map(|r| r.at_ms);
        let (next, done) = expire_string(&string("a", 0), NOW + 9, When::NoDeadline);
        assert_eq!((at(&next), done), (Some(NOW + 9), true));
        let (same, done) = expire_string(&next, NOW + 5, When::NoDeadline);
        assert_eq!((same, done), (next.clone(), false));
        let (sooner, done) = expire_string(&next, NOW + 5, When::Sooner);
        assert_eq!((at(&sooner), done), (Some(NOW + 5), true));
        // GT never shortens, and no deadline is the farthest.
        assert!(!expire_string(&next, NOW + 5, When::Later).1);
        assert!(!expire_string(&string("a", 0), NOW + 5, When::Later).1);
        // PERSIST: only a deadline to take away.
        let (kept, done) = expire_string(&next, 0, When::Always);
        assert_eq!((at(&kept), done), (Some(0), true));
        assert!(!expire_string(&kept, 0, When::Always).1);
        // The value stays; no string, no change.
        assert_eq!(
            kept.get(COLUMN, 0).map(|r| r.value.clone()),
            Some(b"a".to_vec())
        );
        let none = Registers::default();
        assert_eq!(expire_string(&none, NOW, When::Always), (none, false));
    }

    #[test]
    fn an_add_to_a_string_counts_in_it_as_redis_does() {
        let (next, done) = add_to_string(&string("41", NOW + 9), 1, NOW);
        assert_eq!(
            (next, done),
            (string("42", NOW + 9), AddedToString::Value(42))
        );
        let word = string("forty", 0);
        assert_eq!(
            add_to_string(&word, 1, NOW),
            (word.clone(), AddedToString::NotInteger)
        );
        let max = string(&i64::MAX.to_string(), 0);
        assert_eq!(
            add_to_string(&max, 1, NOW),
            (max.clone(), AddedToString::Overflow)
        );
        let none = Registers::default();
        assert_eq!(
            add_to_string(&none, 1, NOW),
            (none.clone(), AddedToString::NoString)
        );
        // Expired: no string.
        assert_eq!(
            add_to_string(&string("1", NOW), 1, NOW).1,
            AddedToString::NoString
        );
    }

    #[test]
    fn remove_says_whether_there_was_a_string() {
        assert_eq!(remove_string(&string("a", 0)), (Registers::default(), true));
        assert_eq!(
            remove_string(&Registers::default()),
            (Registers::default(), false)
        );
    }
}
