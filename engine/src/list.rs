//! Changes of a list that a leader makes under the cell lock: Redis'
//! `LPUSH`/`RPUSH` (and their `X` forms), `LPOP`/`RPOP`, `LTRIM`, `LSET`,
//! `LREM` and `LINSERT`. Pure: [`decide_list`] takes the cell and the wall
//! clock and changes the cell in place; the engine logs and replicates
//! what it made (see `cell::list` for how a list lives in a cell).
//!
//! - A change that changes the list moves the cell to a new epoch
//!   `(max(n + 1, stamp), leader)` carrying the new list, with the
//!   deadline it had (Redis keeps a key's TTL when its list changes). The
//!   wall clock in the generation makes changes that never saw each other
//!   (one made on a replica cut off from the others, whose client got no
//!   answer, and one made after it elsewhere) last-writer-wins by time,
//!   as Cassandra orders its writes: the later one is kept whole. Clock
//!   skew between leaders can reorder such changes (see `docs/redis.md`).
//! - A change that empties the list deletes the key (Redis has no empty
//!   lists): the epoch a `DEL` makes.
//! - A change that changes nothing (a pop of an absent key, a trim that
//!   keeps all) changes nothing: nothing is logged or replicated.
//! - On a live counter every change is refused ([`Refusal::WrongType`]);
//!   an expired key of either kind is absent. Whether it expired is read
//!   at [`At::now_ms`], the wall clock as the change is made, not at its
//!   stamp, which may be earlier (when its leader began reading, or its
//!   coordinator was asked).

pub use tally_model::list::{End, ListChange, ListReply};

use crate::cell::{Cell, Expiry, Limit, List, ListTooLong};
use crate::error::{Error, Refusal};

/// Why a list change was refused, nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListRefusal {
    /// The key holds a counter.
    #[error("{}", Refusal::WrongType)]
    WrongType,
    /// `LSET` on an absent key.
    #[error("{}", Refusal::NoSuchKey)]
    NoSuchKey,
    /// `LSET` past either end.
    #[error("{}", Refusal::IndexOutOfRange)]
    OutOfRange,
    /// The list would be over its limit.
    #[error(transparent)]
    TooLong(#[from] ListTooLong),
    /// The epoch is at its limit.
    #[error("{0:?}")]
    Limit(Limit),
}

impl From<ListRefusal> for Error {
    fn from(refusal: ListRefusal) -> Error {
        match refusal {
            ListRefusal::WrongType => Refusal::WrongType.into(),
            ListRefusal::NoSuchKey => Refusal::NoSuchKey.into(),
            ListRefusal::OutOfRange => Refusal::IndexOutOfRange.into(),
            ListRefusal::TooLong(e) => Error::ListTooLong(e),
            ListRefusal::Limit(limit) => limit.into(),
        }
    }
}

/// What [`decide_list`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListDone {
    /// Whether it changed the cell (then it is logged and replicated).
    pub applied: bool,
    /// The answer for the client.
    pub reply: ListReply,
}

/// When a list change is made, both wall-clock ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// Now, as it is made: what has expired.
    pub now_ms: u64,
    /// Its stamp, at most `now_ms`: its epoch's floor and its deadline's
    /// stamp, which order it among changes that never saw each other.
    pub stamp_ms: u64,
}

impl At {
    /// Made now, stamped now.
    pub fn now(now_ms: u64) -> At {
        At {
            now_ms,
            stamp_ms: now_ms,
        }
    }
}

/// Applies `change` by `leader` at `when` to `cell` (see the module doc).
pub fn decide_list(
    cell: &mut Cell,
    change: &ListChange,
    leader: u64,
    when: At,
) -> Result<ListDone, ListRefusal> {
    let At { now_ms, stamp_ms } = when;
    let live = cell.live(now_ms);
    if live && !cell.is_list() {
        return Err(ListRefusal::WrongType);
    }
    let before: &[Vec<u8>] = match cell.list() {
        Some(list) if live => list.elements(),
        _ => &[],
    };
    let Some((after, reply)) = apply(before, change)? else {
        return Ok(ListDone {
            applied: false,
            reply: unchanged(before, change),
        });
    };
    match List::new(after)? {
        None => cell.try_reset().map_err(ListRefusal::Limit)?,
        Some(list) => {
            let at_ms = if live { cell.epoch().expiry.at_ms } else { 0 };
            let expiry = Expiry {
                at_ms,
                stamp: cell.epoch().expiry.next_stamp(leader, stamp_ms),
            };
            cell.try_set_list(leader, list, expiry, stamp_ms)
                .map_err(ListRefusal::Limit)?;
        }
    }
    Ok(ListDone {
        applied: true,
        reply,
    })
}

/// The reply of a change that changed nothing.
fn unchanged(before: &[Vec<u8>], change: &ListChange) -> ListReply {
    match change {
        ListChange::Push { .. } => ListReply::Int(before.len() as i64),
        ListChange::Pop { .. } => ListReply::Popped(Vec::new()),
        ListChange::Trim { .. } | ListChange::Set { .. } => ListReply::Done,
        ListChange::Remove { .. } => ListReply::Int(0),
        ListChange::Insert { .. } if before.is_empty() => ListReply::Int(0),
        ListChange::Insert { .. } => ListReply::Int(-1),
    }
}

/// A new list's elements and the reply of the change that made them.
type Made = (Vec<Vec<u8>>, ListReply);

/// The list `change` makes of `list` and its reply, `None` if it changes
/// nothing.
fn apply(list: &[Vec<u8>], change: &ListChange) -> Result<Option<Made>, ListRefusal> {
    let mut out = list.to_vec();
    let reply = match change {
        ListChange::Push {
            end,
            values,
            only_existing,
        } => {
            if values.is_empty() || (*only_existing && list.is_empty()) {
                return Ok(None);
            }
            for v in values {
                match end {
                    End::Left => out.insert(0, v.clone()),
                    End::Right => out.push(v.clone()),
                }
            }
            ListReply::Int(out.len() as i64)
        }
        ListChange::Pop { end, count } => {
            let n = usize::try_from(*count).unwrap_or(usize::MAX).min(out.len());
            if n == 0 {
                return Ok(None);
            }
            let popped = match end {
                End::Left => out.drain(..n).collect(),
                End::Right => out.drain(out.len() - n..).rev().collect(),
            };
            ListReply::Popped(popped)
        }
        ListChange::Trim { start, stop } => {
            let kept = match range(list.len(), *start, *stop) {
                Some((a, b)) => list[a..=b].to_vec(),
                None => Vec::new(),
            };
            if kept.len() == list.len() {
                return Ok(None);
            }
            out = kept;
            ListReply::Done
        }
        ListChange::Set { index, value } => {
            if list.is_empty() {
                return Err(ListRefusal::NoSuchKey);
            }
            let i = index_of(list.len(), *index).ok_or(ListRefusal::OutOfRange)?;
            if out[i] == *value {
                return Ok(None);
            }
            out[i] = value.clone();
            ListReply::Done
        }
        ListChange::Remove { count, value } => {
            let removed = remove(&mut out, *count, value);
            if removed == 0 {
                return Ok(None);
            }
            ListReply::Int(removed)
        }
        ListChange::Insert {
            before,
            pivot,
            value,
        } => {
            let Some(at) = out.iter().position(|e| e == pivot) else {
                return Ok(None);
            };
            out.insert(if *before { at } else { at + 1 }, value.clone());
            ListReply::Int(out.len() as i64)
        }
    };
    Ok(Some((out, reply)))
}

/// Removes up to |count| elements equal to `value` (see [`ListChange::Remove`]).
fn remove(out: &mut Vec<Vec<u8>>, count: i64, value: &[u8]) -> i64 {
    let max = if count == 0 {
        u64::MAX
    } else {
        count.unsigned_abs()
    };
    let mut removed = 0u64;
    let mut keep = |e: &Vec<u8>| {
        if removed < max && e == value {
            removed += 1;
            false
        } else {
            true
        }
    };
    if count < 0 {
        out.reverse();
        out.retain(&mut keep);
        out.reverse();
    } else {
        out.retain(&mut keep);
    }
    removed as i64
}

/// The position of Redis' `index` (negative: from the tail) in a list of
/// `len` elements, if it is in it.
pub fn index_of(len: usize, index: i64) -> Option<usize> {
    let len = len as i64;
    let i = if index < 0 { len + index } else { index };
    (0..len).contains(&i).then_some(i as usize)
}

/// The inclusive positions Redis' `start stop` (as `LRANGE`, `LTRIM` take
/// them) cover in a list of `len` elements, `None` when none.
pub fn range(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let norm = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, stop) = (norm(start), norm(stop).min(len - 1));
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Epoch, Shard};

    const ME: u64 = 7;
    const NOW: u64 = 1_000_000;

    fn b(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    fn elements(c: &Cell) -> Vec<String> {
        c.list().map_or(Vec::new(), |l| {
            l.elements()
                .iter()
                .map(|e| String::from_utf8(e.clone()).unwrap())
                .collect()
        })
    }

    fn push(end: End, values: &[&str]) -> ListChange {
        ListChange::Push {
            end,
            values: values.iter().map(|v| b(v)).collect(),
            only_existing: false,
        }
    }

    fn run(c: &mut Cell, change: ListChange) -> Result<ListDone, ListRefusal> {
        decide_list(c, &change, ME, At::now(NOW))
    }

    #[test]
    fn pushes_make_a_list_in_a_new_epoch_of_its_leader() {
        let mut c = Cell::new();
        let done = run(&mut c, push(End::Left, &["a", "b", "c"])).unwrap();
        assert_eq!(done.reply, ListReply::Int(3));
        assert_eq!(elements(&c), ["c", "b", "a"], "LPUSH a b c");
        assert_eq!(c.epoch().id(), (NOW, ME));
        run(&mut c, push(End::Right, &["d"])).unwrap();
        assert_eq!(elements(&c), ["c", "b", "a", "d"]);
        assert_eq!(c.epoch().id(), (NOW + 1, ME), "within one ms: n + 1");
        c.check_invariants();
        let mut absent = Cell::new();
        let x = ListChange::Push {
            end: End::Left,
            values: vec![b("a")],
            only_existing: true,
        };
        let done = run(&mut absent, x).unwrap();
        assert_eq!((done.applied, done.reply), (false, ListReply::Int(0)));
        assert_eq!(absent, Cell::new());
    }

    #[test]
    fn a_counter_refuses_list_changes_and_a_list_refuses_adds() {
        let mut counter = Cell::from_parts(
            Epoch::at(1),
            [Shard {
                counter_id: 3,
                clock: 1,
                value: 5,
            }],
        );
        let before = counter.clone();
        assert_eq!(
            run(&mut counter, push(End::Left, &["a"])),
            Err(ListRefusal::WrongType)
        );
        assert_eq!(counter, before);
        let mut list = Cell::new();
        run(&mut list, push(End::Left, &["a"])).unwrap();
        assert_eq!(list.next_own_clock(ME), Err(Limit::WrongType));
    }

    #[test]
    fn a_change_that_reads_the_value_before_refuses_a_list_and_others_replace_it() {
        use crate::change::{Change, Presence, Ttl, decide_reading};
        let mut list = Cell::new();
        run(&mut list, push(End::Left, &["a"])).unwrap();
        let before = list.clone();
        let set = Change::Set {
            value: 5,
            ttl: Ttl::Clear,
            only: Presence::Any,
        };
        assert_eq!(
            decide_reading(&mut list, set, ME, NOW, true),
            Err(Limit::WrongType),
            "GETSET"
        );
        assert_eq!(
            decide_reading(&mut list, Change::Delete, ME, NOW, true),
            Err(Limit::WrongType),
            "GETDEL"
        );
        assert_eq!(list, before, "nothing changed");
        let done = decide_reading(&mut list, set, ME, NOW, false).unwrap();
        assert!(done.applied && !list.is_list(), "SET replaces a list");
        assert_eq!(list.value(), Ok(5));
    }

    /// The list `[a]`, expiring at `NOW + 50`.
    fn expiring_list() -> Cell {
        let mut c = Cell::new();
        run(&mut c, push(End::Left, &["a"])).unwrap();
        let change = crate::change::Change::Expire {
            at_ms: NOW + 50,
            only: crate::change::When::Always,
        };
        crate::change::decide(&mut c, change, ME, NOW).unwrap();
        c
    }

    #[test]
    fn the_deadline_is_kept_and_an_expired_list_is_absent() {
        let mut c = expiring_list();
        run(&mut c, push(End::Left, &["b"])).unwrap();
        assert_eq!(c.epoch().expiry.at_ms, NOW + 50, "LPUSH keeps the TTL");
        assert_eq!(elements(&c), ["b", "a"]);
        let later = NOW + 50;
        let done = decide_list(&mut c, &push(End::Left, &["c"]), ME, At::now(later)).unwrap();
        assert_eq!(done.reply, ListReply::Int(1), "expired: a new list");
        assert_eq!(c.epoch().expiry.at_ms, 0);
        assert_eq!(elements(&c), ["c"]);
    }

    #[test]
    fn a_change_stamped_before_its_list_expired_finds_it_expired() {
        // Stamped when its coordinator was asked, made once the list's
        // deadline passed: the list is gone (a push onto it would keep
        // its past deadline, acknowledged and never seen).
        let mut c = expiring_list();
        let made = At {
            now_ms: NOW + 60,
            stamp_ms: NOW + 10,
        };
        let done = decide_list(&mut c, &push(End::Left, &["b"]), ME, made).unwrap();
        assert_eq!(done.reply, ListReply::Int(1), "expired: a new list");
        assert_eq!(
            (c.epoch().expiry.at_ms, elements(&c)),
            (0, vec!["b".to_string()])
        );
        assert!(c.live(NOW + 60));
    }

    #[test]
    fn emptying_a_list_deletes_the_key() {
        let mut c = Cell::new();
        run(&mut c, push(End::Right, &["a", "b"])).unwrap();
        let pop = ListChange::Pop {
            end: End::Right,
            count: 5,
        };
        let done = run(&mut c, pop.clone()).unwrap();
        assert_eq!(done.reply, ListReply::Popped(vec![b("b"), b("a")]));
        assert!(!c.exists() && !c.is_list());
        assert_eq!(c.epoch(), Epoch::at(NOW + 1));
        let done = run(&mut c, pop).unwrap();
        assert_eq!(
            (done.applied, done.reply),
            (false, ListReply::Popped(vec![]))
        );
    }

    #[test]
    fn trim_set_remove_insert_follow_redis() {
        let mut c = Cell::new();
        run(&mut c, push(End::Right, &["a", "b", "a", "c", "a"])).unwrap();
        let rem = ListChange::Remove {
            count: -2,
            value: b("a"),
        };
        assert_eq!(run(&mut c, rem).unwrap().reply, ListReply::Int(2));
        assert_eq!(elements(&c), ["a", "b", "c"]);
        let ins = ListChange::Insert {
            before: false,
            pivot: b("b"),
            value: b("x"),
        };
        assert_eq!(run(&mut c, ins).unwrap().reply, ListReply::Int(4));
        assert_eq!(elements(&c), ["a", "b", "x", "c"]);
        let set = ListChange::Set {
            index: -1,
            value: b("z"),
        };
        run(&mut c, set).unwrap();
        assert_eq!(elements(&c), ["a", "b", "x", "z"]);
        let far = ListChange::Set {
            index: 4,
            value: b("z"),
        };
        assert_eq!(run(&mut c, far), Err(ListRefusal::OutOfRange));
        let keep_all = ListChange::Trim { start: 0, stop: -1 };
        assert!(!run(&mut c, keep_all).unwrap().applied);
        let trim = ListChange::Trim { start: 1, stop: 2 };
        assert!(run(&mut c, trim).unwrap().applied);
        assert_eq!(elements(&c), ["b", "x"]);
        let none = ListChange::Trim { start: 5, stop: 9 };
        run(&mut c, none).unwrap();
        assert!(!c.exists(), "a trim to nothing deletes");
        let set = ListChange::Set {
            index: 0,
            value: b("z"),
        };
        assert_eq!(run(&mut c, set), Err(ListRefusal::NoSuchKey));
    }

    #[test]
    fn of_two_changes_that_never_saw_each_other_the_later_wins_on_every_replica() {
        let mut base = Cell::new();
        run(&mut base, push(End::Right, &["a"])).unwrap();
        // A leader cut off makes one change; another, later, makes one on
        // the state before it, with a smaller counter_id.
        let mut cut_off = base.clone();
        decide_list(
            &mut cut_off,
            &push(End::Right, &["lost"]),
            99,
            At::now(NOW + 10),
        )
        .unwrap();
        let mut later = base.clone();
        decide_list(
            &mut later,
            &push(End::Right, &["kept"]),
            3,
            At::now(NOW + 20),
        )
        .unwrap();
        let mut a = cut_off.clone();
        a.merge(&later, &crate::cell::Merger::default());
        let mut b = later.clone();
        b.merge(&cut_off, &crate::cell::Merger::default());
        assert_eq!(a, later);
        assert_eq!(b, later);
        assert_eq!(elements(&later), ["a", "kept"]);
    }

    #[test]
    fn ranges_and_indexes_follow_redis() {
        assert_eq!(range(5, 0, -1), Some((0, 4)));
        assert_eq!(range(5, -100, 100), Some((0, 4)));
        assert_eq!(range(5, 3, 1), None);
        assert_eq!(range(5, 5, 9), None);
        assert_eq!(range(0, 0, -1), None);
        assert_eq!(range(5, -2, -1), Some((3, 4)));
        assert_eq!(index_of(3, -1), Some(2));
        assert_eq!(index_of(3, 3), None);
        assert_eq!(index_of(3, -4), None);
    }

    #[test]
    fn a_list_over_the_limit_is_refused_and_nothing_changes() {
        let mut c = Cell::new();
        let big = ListChange::Push {
            end: End::Left,
            values: vec![vec![0u8; 60_000]; 4],
            only_existing: false,
        };
        assert!(matches!(run(&mut c, big), Err(ListRefusal::TooLong(_))));
        assert_eq!(c, Cell::new());
    }
}
