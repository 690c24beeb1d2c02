//! Changes of a counter's epoch that a leader makes under the cell lock:
//! `SET`, `EXPIRE`/`PERSIST` and `DEL`, with Redis' conditions. Pure: the
//! rule ([`decide`]) takes the cell and the wall clock and changes the
//! cell in place; the engine logs and replicates what it made.
//!
//! What each does to the cell (see [`crate::cell`] for the epochs):
//! - **Set**: a new epoch `(n + 1, leader)` with the value as its base, no
//!   shards, and the deadline asked for (none, the one the counter had, or
//!   a new one).
//! - **Expire**: the same epoch with a new deadline (or none: `PERSIST`),
//!   stamped later than the one it replaces; only on a live counter.
//! - **Delete**: a new epoch `(n + 1, 0)` with no shards, live or not.
//!
//! A counter whose deadline passed is absent: `SET ... NX` sets it,
//! `EXPIRE` answers that nothing changed.

pub use tally_model::change::{Change, Presence, Ttl, When};

use crate::cell::{Cell, Expiry, Limit};

/// What a change did to a cell (the engine's side of [`tally_model::Changed`]: the
/// value before is the exact sum, which may be out of an `i64`'s range).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    /// Whether it changed the cell (its condition held; for `PERSIST`,
    /// the counter had a deadline).
    pub applied: bool,
    /// The counter's value before, `None` when it was absent (the exact
    /// sum: it may be out of an `i64`'s range).
    pub before: Option<i128>,
}

/// Applies `change` by `leader` at `now_ms` to `cell` (see the module
/// doc); refused, with nothing changed, when the epoch is at its limit.
pub fn decide(cell: &mut Cell, change: Change, leader: u64, now_ms: u64) -> Result<Decided, Limit> {
    decide_reading(cell, change, leader, now_ms, false)
}

/// [`decide`], for a change that answers the value before (`GETSET`,
/// `SET ... GET`, `GETDEL`, `GETEX`) when `reads`: a live list has no such
/// value, so the change is refused ([`Limit::WrongType`]), nothing changed,
/// as Redis refuses them on a list.
pub fn decide_reading(
    cell: &mut Cell,
    change: Change,
    leader: u64,
    now_ms: u64,
    reads: bool,
) -> Result<Decided, Limit> {
    let live = cell.live(now_ms);
    if reads && live && cell.is_list() {
        return Err(Limit::WrongType);
    }
    let before = live.then(|| cell.sum());
    let epoch = cell.epoch();
    let applied = match change {
        Change::Set { value, ttl, only } => {
            let wanted = match only {
                Presence::Any => true,
                Presence::Absent => !live,
                Presence::Live => live,
            };
            if wanted {
                let at_ms = match ttl {
                    Ttl::Clear => 0,
                    Ttl::Keep if live => epoch.expiry.at_ms,
                    Ttl::Keep => 0,
                    Ttl::At(at_ms) => at_ms,
                };
                let expiry = stamped(&epoch.expiry, at_ms, leader, now_ms);
                cell.try_set(leader, value, expiry)?;
            }
            wanted
        }
        Change::Expire { at_ms, only } => {
            let current = epoch.expiry.at_ms;
            let wanted = live && only.allows(current, at_ms);
            if wanted {
                let mut next = epoch;
                next.expiry = stamped(&epoch.expiry, at_ms, leader, now_ms);
                cell.merge_parts(next, &[]);
            }
            wanted
        }
        Change::Delete => {
            cell.try_reset()?;
            true
        }
    };
    Ok(Decided { applied, before })
}

/// The columns of one partition an `EXPIRE` (or `PERSIST`) of its key
/// changes, given each column's liveness: the key is named by the first
/// kind it holds, so its counter (the empty column) alone when that is
/// live, else every live client column (a hash, expired whole as Redis
/// does), else its unique counter's count (`unique::count_key`'s column),
/// whose deadline is the set's. A member cell of a unique counter carries
/// no deadline (see [`crate::unique`]): it is never one.
pub fn expire_targets<'a>(row: impl IntoIterator<Item = (&'a [u8], bool)>) -> Vec<&'a [u8]> {
    let live: Vec<&[u8]> = row
        .into_iter()
        .filter_map(|(column, live)| live.then_some(column))
        .collect();
    if live.contains(&&b""[..]) {
        return vec![b""];
    }
    let hash: Vec<&[u8]> = live
        .iter()
        .copied()
        .filter(|c| !crate::key::is_reserved(c))
        .collect();
    if !hash.is_empty() {
        return hash;
    }
    live.into_iter()
        .filter(|c| *c == [crate::key::RESERVED])
        .collect()
}

/// What an `EXPIRE` of a whole key answers from what it did to each cell
/// it tried: whether any changed (Redis' 1 or 0).
pub fn expire_answer(applied: impl IntoIterator<Item = bool>) -> bool {
    applied.into_iter().fold(false, |any, a| any | a)
}

/// The expiry `at_ms` written by `leader` at `now_ms`, stamped past `prev`.
fn stamped(prev: &Expiry, at_ms: u64, leader: u64, now_ms: u64) -> Expiry {
    Expiry {
        at_ms,
        stamp: prev.next_stamp(leader, now_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Epoch, Shard};

    const ME: u64 = 7;
    const NOW: u64 = 1_000_000;

    fn counter(value: i64, at_ms: u64) -> Cell {
        let mut c = Cell::from_parts(
            Epoch::at(2),
            [Shard {
                counter_id: 3,
                clock: 1,
                value,
            }],
        );
        if at_ms != 0 {
            let change = Change::Expire {
                at_ms,
                only: When::Always,
            };
            decide(&mut c, change, 3, NOW - 10).unwrap();
        }
        c
    }

    fn set(value: i64, ttl: Ttl, only: Presence) -> Change {
        Change::Set { value, ttl, only }
    }

    fn expire(at_ms: u64, only: When) -> Change {
        Change::Expire { at_ms, only }
    }

    #[test]
    fn set_starts_an_epoch_of_its_own_with_the_value_as_base() {
        let mut c = counter(5, 0);
        let done = decide(&mut c, set(-40, Ttl::Clear, Presence::Any), ME, NOW).unwrap();
        assert_eq!(
            done,
            Decided {
                applied: true,
                before: Some(5)
            }
        );
        assert_eq!(c.value(), Ok(-40));
        assert_eq!(c.epoch().id(), (3, ME));
        assert!(c.shards().is_empty() && c.live(NOW));
        // A SET of 0 still makes the counter exist.
        decide(&mut c, set(0, Ttl::Clear, Presence::Any), ME, NOW).unwrap();
        assert!(c.live(NOW));
    }

    #[test]
    fn set_nx_and_xx_look_at_liveness_and_an_expired_counter_is_absent() {
        let mut c = counter(5, 0);
        let nx = decide(&mut c, set(1, Ttl::Clear, Presence::Absent), ME, NOW).unwrap();
        assert_eq!(
            nx,
            Decided {
                applied: false,
                before: Some(5)
            }
        );
        assert_eq!(c.value(), Ok(5));
        let mut expired = counter(5, NOW - 1);
        let nx = decide(&mut expired, set(1, Ttl::Clear, Presence::Absent), ME, NOW).unwrap();
        assert_eq!(
            nx,
            Decided {
                applied: true,
                before: None
            }
        );
        let mut fresh = Cell::new();
        let xx = decide(&mut fresh, set(1, Ttl::Clear, Presence::Live), ME, NOW).unwrap();
        assert!(!xx.applied && fresh == Cell::new());
    }

    #[test]
    fn set_keeps_clears_or_gives_a_deadline() {
        let mut c = counter(5, NOW + 500);
        decide(&mut c, set(1, Ttl::Keep, Presence::Any), ME, NOW).unwrap();
        assert_eq!(c.epoch().expiry.at_ms, NOW + 500);
        decide(&mut c, set(1, Ttl::At(NOW + 9), Presence::Any), ME, NOW).unwrap();
        assert_eq!(c.epoch().expiry.at_ms, NOW + 9);
        decide(&mut c, set(1, Ttl::Clear, Presence::Any), ME, NOW).unwrap();
        assert_eq!(c.epoch().expiry.at_ms, 0);
        let mut gone = counter(5, NOW - 1);
        decide(&mut gone, set(1, Ttl::Keep, Presence::Any), ME, NOW).unwrap();
        assert_eq!(
            gone.epoch().expiry.at_ms,
            0,
            "an expired deadline is not kept"
        );
    }

    #[test]
    fn expire_conditions_follow_redis() {
        let none = || counter(5, 0);
        let at = |ms| counter(5, ms);
        let cases = [
            (none(), expire(NOW + 5, When::Always), true),
            (none(), expire(0, When::Always), false), // PERSIST of none
            (at(NOW + 5), expire(0, When::Always), true),
            (none(), expire(NOW + 5, When::NoDeadline), true),
            (at(NOW + 5), expire(NOW + 9, When::NoDeadline), false),
            (none(), expire(NOW + 5, When::HasDeadline), false),
            (at(NOW + 5), expire(NOW + 9, When::HasDeadline), true),
            (none(), expire(NOW + 5, When::Later), false),
            (at(NOW + 5), expire(NOW + 9, When::Later), true),
            (at(NOW + 5), expire(NOW + 2, When::Later), false),
            (none(), expire(NOW + 5, When::Sooner), true),
            (at(NOW + 5), expire(NOW + 2, When::Sooner), true),
            (at(NOW + 5), expire(NOW + 9, When::Sooner), false),
            (none(), expire(NOW + 5, When::SoonerThanOne), false),
            (at(NOW + 5), expire(NOW + 2, When::SoonerThanOne), true),
            (Cell::new(), expire(NOW + 5, When::Always), false),
            (at(NOW - 1), expire(NOW + 5, When::Always), false),
        ];
        for (i, (mut c, change, applied)) in cases.into_iter().enumerate() {
            let before = c.clone();
            let done = decide(&mut c, change, ME, NOW).unwrap();
            assert_eq!(done.applied, applied, "case {i}: {change:?} on {before:?}");
            if !applied {
                assert_eq!(c, before, "case {i} changed nothing");
            } else if let Change::Expire { at_ms, .. } = change {
                assert_eq!(c.epoch().expiry.at_ms, at_ms, "case {i}");
                assert_eq!(c.value(), Ok(5), "case {i}: shards kept");
            }
        }
    }

    #[test]
    fn a_past_deadline_makes_the_counter_absent_and_delete_restarts() {
        let mut c = counter(5, 0);
        assert!(
            decide(&mut c, expire(NOW - 1, When::Always), ME, NOW)
                .unwrap()
                .applied
        );
        assert!(!c.live(NOW));
        let mut d = counter(5, NOW + 100);
        let done = decide(&mut d, Change::Delete, ME, NOW).unwrap();
        assert_eq!(
            done,
            Decided {
                applied: true,
                before: Some(5)
            }
        );
        assert_eq!(d.epoch(), Epoch::at(3));
        assert!(!d.exists());
    }

    #[test]
    fn an_expire_changes_the_first_kind_a_key_holds() {
        const R: u8 = crate::key::RESERVED;
        let (count, member): (&[u8], &[u8]) = (&[R], &[R, b'm']);
        fn targets<'a>(row: &[(&'a [u8], bool)]) -> Vec<&'a [u8]> {
            expire_targets(row.iter().copied())
        }
        // Its counter alone, when live, whatever else the row holds.
        let all: [(&[u8], bool); 4] = [(b"", true), (b"f", true), (count, true), (member, true)];
        assert_eq!(targets(&all), vec![&b""[..]]);
        // Else every live field of its hash, never the count or a member.
        let hash: [(&[u8], bool); 5] = [
            (b"", false),
            (b"f", true),
            (b"g", false),
            (b"h", true),
            (count, true),
        ];
        assert_eq!(targets(&hash), vec![&b"f"[..], &b"h"[..]]);
        // Else its unique counter's count; a member cell is never changed.
        let set: [(&[u8], bool); 3] = [(b"f", false), (count, true), (member, true)];
        assert_eq!(targets(&set), vec![count]);
        let gone: [(&[u8], bool); 3] = [(b"", false), (count, false), (member, true)];
        assert!(targets(&gone).is_empty());
    }

    #[test]
    fn an_expire_of_a_key_answers_whether_any_cell_changed() {
        assert!(!expire_answer([]));
        assert!(!expire_answer([false, false]));
        assert!(expire_answer([false, true, false]));
    }

    #[test]
    fn a_new_expiry_wins_on_every_replica_even_against_a_clock_ahead() {
        // Another leader, its clock far ahead, stamped the current deadline.
        let mut c = counter(5, 0);
        decide(&mut c, expire(NOW + 9_000, When::Always), 99, NOW + 5_000).unwrap();
        let replica = c.clone();
        decide(&mut c, expire(0, When::Always), ME, NOW).unwrap();
        let mut r = replica;
        r.merge(
            &Cell::from_parts(c.epoch(), []),
            &crate::cell::Merger::default(),
        );
        assert_eq!(r.epoch().expiry.at_ms, 0, "the PERSIST made later wins");
        assert_eq!(r, c);
    }
}
