//! Strings, as pure rules: a key's byte string is the register of the
//! key's empty column, changed only through agreement (`cluster::agree`),
//! each change a function of the registers decided so far ([`set_string`]
//! and its kin) that the proposer may run once per attempt. The RESP
//! commands (`client::resp::registers`) and the native protocol's string
//! requests (`node::strings`) are both made of these.

use tally_net::wire::{
    Presence, Register, Registers, StringCondition, Ttl, When, WireString, WireSwapped,
};

use super::compare::Compare;
use super::decimal::{Decimal, incr_by_float};
use super::zset;

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
pub(crate) const COLUMN: &[u8] = b"";

/// `set` applied to `registers` (live at `now_ms`): the next registers
/// and what it did; unchanged registers when its condition fails.
pub(crate) fn set_string(
    registers: &Registers,
    set: &SetString,
    now_ms: u64,
) -> (Registers, SetDone) {
    let current = registers.get(COLUMN, now_ms);
    let before = current.map(|r| r.value.clone());
    // `NX` and `XX` ask whether the key exists: a sorted set is the key too.
    let exists = current.is_some() || registers.get(zset::COLUMN, now_ms).is_some();
    let wanted = match set.only {
        Presence::Any => true,
        Presence::Absent => !exists,
        Presence::Live => exists,
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
    // A string replaces the key's sorted set, as Redis' `SET` replaces a
    // key of any kind.
    next.remove(zset::COLUMN);
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

/// A native change of the key's string (`ClientOp::SetString`): `value`
/// with the deadline `ttl` (`None`: no string) if `condition` holds of
/// the string before. The next registers and what it did; unchanged
/// registers when the condition fails.
pub(crate) fn swap_string(
    registers: &Registers,
    value: Option<&[u8]>,
    condition: &StringCondition,
    ttl: Ttl,
    now_ms: u64,
) -> (Registers, WireSwapped) {
    let before = registers.get(COLUMN, now_ms).map(|r| WireString {
        value: r.value.clone(),
        at_ms: r.at_ms,
    });
    let applied = condition.holds(before.as_ref().map(|b| b.value.as_slice()));
    let next = match (applied, value) {
        (false, _) => registers.clone(),
        (true, None) => remove_string(registers).0,
        (true, Some(value)) => {
            let set = SetString {
                value: value.to_vec(),
                ttl,
                only: Presence::Any,
                get: false,
                compare: None,
            };
            set_string(registers, &set, now_ms).0
        }
    };
    (next, WireSwapped { applied, before })
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
    /// The key holds a sorted set: nothing changed (Redis' `WRONGTYPE`).
    WrongType,
}

/// `delta` added to the key's string read as an integer (its deadline
/// kept, as Redis keeps it): the next registers and what it did.
pub(crate) fn add_to_string(
    registers: &Registers,
    delta: i64,
    now_ms: u64,
) -> (Registers, AddedToString) {
    add_to_column(registers, COLUMN, delta, now_ms)
}

/// `delta` added to `column`'s string (a key's, or a hash's string field)
/// read as an integer, its deadline kept: the next registers and what it
/// did.
pub(crate) fn add_to_column(
    registers: &Registers,
    column: &[u8],
    delta: i64,
    now_ms: u64,
) -> (Registers, AddedToString) {
    let Some(current) = registers.get(column, now_ms) else {
        let done = if holds_register(registers, column, now_ms) {
            AddedToString::WrongType
        } else {
            AddedToString::NoString
        };
        return (registers.clone(), done);
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

/// `delta` added to the key's string as [`add_to_string`] adds it, or,
/// where the key holds none, a string of `delta` made (Redis' `INCR` of
/// an absent key): the adds of a linearizable counter.
pub(crate) fn add_or_make_string(
    registers: &Registers,
    delta: i64,
    now_ms: u64,
) -> (Registers, AddedToString) {
    match add_to_string(registers, delta, now_ms) {
        (_, AddedToString::NoString) => {
            let mut next = registers.clone();
            next.put(Register {
                column: COLUMN.to_vec(),
                value: delta.to_string().into_bytes(),
                at_ms: 0,
            });
            (next, AddedToString::Value(delta))
        }
        done => done,
    }
}

/// `by` added to `column`'s string (the key's, or a hash's string field)
/// read as a decimal (`INCRBYFLOAT`, `HINCRBYFLOAT`, see `base::decimal`),
/// its deadline kept; where the key holds none, a
/// string of `base + by` made (`base`: what the key's counter held when
/// this replaces it, else 0). The next registers and the new string, or
/// Redis' error and the registers unchanged.
pub(crate) fn add_float_to_string(
    registers: &Registers,
    column: &[u8],
    (base, by): (i64, Decimal),
    now_ms: u64,
) -> (Registers, Result<Vec<u8>, &'static str>) {
    let current = registers.get(column, now_ms);
    if current.is_none() && holds_register(registers, column, now_ms) {
        return (registers.clone(), Err(super::refusal::WRONGTYPE));
    }
    let sum = match current {
        Some(c) => incr_by_float(Some(&c.value), by),
        None => Decimal::of(base)
            .add(by)
            .map(|d| d.to_string().into_bytes()),
    };
    let Ok(value) = sum else {
        return (registers.clone(), sum);
    };
    let mut next = registers.clone();
    next.put(Register {
        column: column.to_vec(),
        value: value.clone(),
        at_ms: current.map_or(0, |c| c.at_ms),
    });
    (next, Ok(value))
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
    expire_column(registers, COLUMN, at_ms, only)
}

/// Whether `registers` hold, live at `now_ms`, a string in `column` (the
/// key's own, empty, or a hash's field) or, for the key's own, a sorted
/// set: a register a counter must not start beside.
pub(crate) fn holds_register(registers: &Registers, column: &[u8], now_ms: u64) -> bool {
    let sorted_set = || column.is_empty() && registers.get(zset::COLUMN, now_ms).is_some();
    registers.get(column, now_ms).is_some() || sorted_set()
}

/// The column of the key's own register, live at `now_ms`: its string,
/// else its sorted set (`zset`); `None` when it holds neither.
pub(crate) fn value_column(registers: &Registers, now_ms: u64) -> Option<&'static [u8]> {
    [COLUMN, zset::COLUMN]
        .into_iter()
        .find(|c| registers.get(c, now_ms).is_some())
}

/// As [`expire_string`], of the key's own register (its string or its
/// sorted set): what `EXPIRE` changes.
pub(crate) fn expire_value(registers: &Registers, at_ms: u64, only: When) -> (Registers, bool) {
    match value_column(registers, 0) {
        Some(column) => expire_column(registers, column, at_ms, only),
        None => (registers.clone(), false),
    }
}

fn expire_column(
    registers: &Registers,
    column: &[u8],
    at_ms: u64,
    only: When,
) -> (Registers, bool) {
    let Some(current) = registers.get(column, 0) else {
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
    fn a_float_add_counts_in_a_string_or_makes_one_from_the_counter() {
        let by = |d: &str| Decimal::parse(d.as_bytes()).unwrap();
        let (next, done) =
            add_float_to_string(&string("10.50", NOW + 9), COLUMN, (7, by("0.1")), NOW);
        assert_eq!(
            (next, done),
            (string("10.6", NOW + 9), Ok(b"10.6".to_vec()))
        );
        let none = Registers::default();
        let (made, done) = add_float_to_string(&none, COLUMN, (17179869184, by("1.5")), NOW);
        assert_eq!(made, string("17179869185.5", 0));
        assert_eq!(done, Ok(b"17179869185.5".to_vec()));
        // An expired string is none: the sum starts from the base.
        let (made, _) = add_float_to_string(&string("5", NOW), COLUMN, (1, by("0.5")), NOW);
        assert_eq!(made, string("1.5", 0));
        let word = string("  11", 0);
        let (same, done) = add_float_to_string(&word, COLUMN, (0, by("1")), NOW);
        assert_eq!(
            (same, done),
            (word, Err(super::super::decimal::NOT_A_FLOAT))
        );
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
    fn an_add_to_a_sorted_set_is_refused_as_redis_refuses_it() {
        let set = Registers(vec![Register {
            column: zset::COLUMN.to_vec(),
            value: b"set".to_vec(),
            at_ms: NOW + 9,
        }]);
        assert!(holds_register(&set, b"", NOW));
        assert!(
            !holds_register(&set, b"field", NOW),
            "a hash's field is not the set"
        );
        assert!(!holds_register(&set, b"", NOW + 9), "expired");
        for done in [
            add_to_string(&set, 1, NOW),
            add_or_make_string(&set, 1, NOW),
        ] {
            assert_eq!(done, (set.clone(), AddedToString::WrongType));
        }
        let by = Decimal::of(1);
        assert_eq!(
            add_float_to_string(&set, b"", (0, by), NOW),
            (set.clone(), Err(super::super::refusal::WRONGTYPE))
        );
        // Expired, it is gone: the add makes a string.
        assert_eq!(
            add_or_make_string(&set, 1, NOW + 9).1,
            AddedToString::Value(1)
        );
    }

    #[test]
    fn a_swap_changes_only_what_its_condition_allows() {
        let mine = StringCondition::AbsentOrEquals(b"me".to_vec());
        let none = Registers::default();
        // A lease: taken when free, taken again by its holder, not by another.
        let (held, done) = swap_string(&none, Some(b"me"), &mine, Ttl::At(NOW + 5), NOW);
        assert_eq!(
            (held.clone(), done.applied, done.before),
            (string("me", NOW + 5), true, None)
        );
        let (again, done) = swap_string(&held, Some(b"me"), &mine, Ttl::At(NOW + 9), NOW);
        assert_eq!((again, done.applied), (string("me", NOW + 9), true));
        let theirs = StringCondition::AbsentOrEquals(b"you".to_vec());
        let (same, done) = swap_string(&held, Some(b"you"), &theirs, Ttl::Clear, NOW);
        assert_eq!((same, done.applied), (held.clone(), false));
        let before = done.before.unwrap();
        assert_eq!((before.value, before.at_ms), (b"me".to_vec(), NOW + 5));
        // Once it expires, another takes it.
        assert!(
            swap_string(&held, Some(b"you"), &theirs, Ttl::Clear, NOW + 5)
                .1
                .applied
        );
        // Release: only by the holder; compare-and-set: only from the value.
        let release = |who: &str| StringCondition::Equals(who.as_bytes().to_vec());
        assert!(
            !swap_string(&held, None, &release("you"), Ttl::Clear, NOW)
                .1
                .applied
        );
        let (gone, done) = swap_string(&held, None, &release("me"), Ttl::Clear, NOW);
        assert_eq!((gone, done.applied), (none.clone(), true));
        let (set, done) = swap_string(&held, Some(b"2"), &release("me"), Ttl::Keep, NOW);
        assert_eq!((set, done.applied), (string("2", NOW + 5), true));
        // Present and absent.
        assert!(
            !swap_string(
                &none,
                Some(b"x"),
                &StringCondition::Present,
                Ttl::Clear,
                NOW
            )
            .1
            .applied
        );
        assert!(
            !swap_string(&held, Some(b"x"), &StringCondition::Absent, Ttl::Clear, NOW)
                .1
                .applied
        );
        assert!(
            swap_string(&held, Some(b"x"), &StringCondition::Always, Ttl::Clear, NOW)
                .1
                .applied
        );
    }

    #[test]
    fn a_linearizable_counter_starts_a_string_where_there_is_none() {
        let none = Registers::default();
        assert_eq!(
            add_or_make_string(&none, -3, NOW),
            (string("-3", 0), AddedToString::Value(-3))
        );
        // An expired string is none: it starts again, without a deadline.
        assert_eq!(
            add_or_make_string(&string("7", NOW), 2, NOW),
            (string("2", 0), AddedToString::Value(2))
        );
        let live = string("7", NOW + 1);
        assert_eq!(
            add_or_make_string(&live, 2, NOW),
            (string("9", NOW + 1), AddedToString::Value(9))
        );
        let word = string("x", 0);
        assert_eq!(
            add_or_make_string(&word, 1, NOW),
            (word.clone(), AddedToString::NotInteger)
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
