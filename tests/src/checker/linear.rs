//! A linearizability checker for one register (a string key changed
//! through agreement): reads, writes, compare-and-set, set-if-absent and
//! deletes, recorded from real processes with when each was invoked and
//! when it completed.
//!
//! The search is Wing and Gong's, with Lowe's cache (as Porcupine does):
//! walk the history in time order; at an operation's call, try to make it
//! take effect now (the register's model must allow its recorded answer),
//! remember the state, and restart from the earliest call left; reaching
//! an operation's return that has not taken effect means the last choice
//! was wrong: undo it and try the next call instead. A pair (operations
//! taken, register value) seen before is not searched again. The history
//! is linearizable iff every operation takes effect.
//!
//! An operation whose outcome is unknown (a timeout, a lost connection)
//! may have taken effect at any time after its call, or never: it has no
//! return (it stays open to the end) and its answer constrains nothing.
//! Taking effect last, after everything observed, is the same as never,
//! so the search needs no other case for it.
//!
//! Ties: an operation that returned at the instant another was called is
//! treated as concurrent with it (calls sort before returns), so the
//! checker never claims an order the clocks cannot show.

use std::collections::{HashMap, HashSet};

/// What an operation asked (of values `V`: the bytes recorded, or the
/// search's ids for them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Call<V = Vec<u8>> {
    /// `GET`.
    Read,
    /// `SET k v`.
    Write(V),
    /// Set to `new` iff the value is `expected` (`SET ... IFEQ`, CAS).
    Cas {
        /// The value it must hold.
        expected: V,
        /// The value it then holds.
        new: V,
    },
    /// `SET k v NX`.
    SetIfAbsent(V),
    /// `DEL`.
    Delete,
    /// Delete iff the value is this one (`DELEX ... IFEQ`, a
    /// compare-and-delete script).
    DeleteIf(V),
}

/// What it answered; `Unknown` when the outcome is not known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer<V = Vec<u8>> {
    /// A read's value (`None`: absent).
    Value(Option<V>),
    /// A write's `OK`.
    Done,
    /// Whether a conditional change applied (CAS, NX; a delete: whether
    /// there was a value).
    Applied(bool),
    /// It may or may not have taken effect.
    Unknown,
}

/// One operation of the history. Times are any monotonic clock's, in one
/// unit (the harness's nanoseconds since the run began).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op<V = Vec<u8>> {
    /// What it asked.
    pub call: Call<V>,
    /// What it answered.
    pub answer: Answer<V>,
    /// When it was invoked.
    pub invoked: u64,
    /// When it completed (ignored when the answer is `Unknown`).
    pub completed: u64,
}

/// The register's value after `op` from `state`, if `op`'s answer is one
/// the register can give from `state`.
fn step<V: Clone + PartialEq>(state: &Option<V>, op: &Op<V>) -> Option<Option<V>> {
    let unknown = op.answer == Answer::Unknown;
    let check = |applied: bool| unknown || op.answer == Answer::Applied(applied);
    match &op.call {
        Call::Read => (unknown || op.answer == Answer::Value(state.clone())).then(|| state.clone()),
        Call::Write(v) => (unknown || op.answer == Answer::Done).then(|| Some(v.clone())),
        Call::Cas { expected, new } => {
            let holds = state.as_ref() == Some(expected);
            check(holds).then(|| {
                if holds {
                    Some(new.clone())
                } else {
                    state.clone()
                }
            })
        }
        Call::SetIfAbsent(v) => {
            let absent = state.is_none();
            check(absent).then(|| {
                if absent {
                    Some(v.clone())
                } else {
                    state.clone()
                }
            })
        }
        Call::Delete => check(state.is_some()).then_some(None),
        Call::DeleteIf(v) => {
            let holds = state.as_ref() == Some(v);
            check(holds).then(|| if holds { None } else { state.clone() })
        }
    }
}

/// Why a history is not linearizable: the longest linearizable prefix
/// the search found, and the first operation (in call order) outside it:
/// where the history goes wrong, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Indices of the operations of the longest linearizable prefix found.
    pub prefix: Vec<usize>,
    /// The operation whose return came before it could take effect.
    pub stuck: usize,
}

/// One call or return, in time order.
#[derive(Debug, Clone, Copy)]
struct Event {
    op: usize,
    call: bool,
}

/// Whether `history` (starting from an absent register) is linearizable.
pub fn check(history: &[Op]) -> Result<(), Violation> {
    let (ops, original) = intern(history);
    search(&ops).map_err(|v| Violation {
        prefix: v.prefix.into_iter().map(|i| original[i]).collect(),
        stuck: original[v.stuck],
    })
}

/// A value as the search sees it: one id per value some read answered or
/// some compare-and-set expects, and [`UNSEEN`] for every other. Values
/// nobody can tell apart are one value to the search, so two ways of
/// ordering that differ only in which of them the register holds are
/// searched once.
type Val = u32;
const UNSEEN: Val = 0;

/// `history` in ids of values, without the reads of unknown outcome
/// (they change and constrain nothing); and each operation's index in
/// `history`.
fn intern(history: &[Op]) -> (Vec<Op<Val>>, Vec<usize>) {
    let mut ids: HashMap<&[u8], Val> = HashMap::new();
    for o in history {
        let seen = match (&o.call, &o.answer) {
            (_, Answer::Value(Some(v))) => v,
            (Call::Cas { expected, .. } | Call::DeleteIf(expected), _) => expected,
            _ => continue,
        };
        let next = ids.len() as Val + 1;
        ids.entry(seen.as_slice()).or_insert(next);
    }
    let id = |v: &Vec<u8>| ids.get(v.as_slice()).copied().unwrap_or(UNSEEN);
    let mut ops = Vec::with_capacity(history.len());
    let mut original = Vec::with_capacity(history.len());
    for (i, o) in history.iter().enumerate() {
        let call = match &o.call {
            Call::Read if o.answer == Answer::Unknown => continue,
            Call::Read => Call::Read,
            Call::Write(v) => Call::Write(id(v)),
            Call::Cas { expected, new } => Call::Cas {
                expected: id(expected),
                new: id(new),
            },
            Call::SetIfAbsent(v) => Call::SetIfAbsent(id(v)),
            Call::Delete => Call::Delete,
            Call::DeleteIf(v) => Call::DeleteIf(id(v)),
        };
        let answer = match &o.answer {
            Answer::Value(v) => Answer::Value(v.as_ref().map(id)),
            Answer::Done => Answer::Done,
            Answer::Applied(a) => Answer::Applied(*a),
            Answer::Unknown => Answer::Unknown,
        };
        ops.push(Op {
            call,
            answer,
            invoked: o.invoked,
            completed: o.completed,
        });
        original.push(i);
    }
    (ops, original)
}

/// What the search has taken so far, as far as the rest of the history
/// can tell: the operations of known outcome taken, and how many of each
/// kind of unknown outcome (the same call on the same value). Unknown
/// operations of one kind are interchangeable once called (none has a
/// return to meet), so a search that took one of them has the same
/// future as one that took another.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Taken {
    known: Vec<u64>,
    unknown: Vec<u32>,
}

/// Each operation's place in [`Taken`]: a bit of `known`, or a kind of
/// `unknown`.
fn places(ops: &[Op<Val>]) -> (Vec<Result<usize, usize>>, Taken) {
    let mut kinds: HashMap<&Call<Val>, usize> = HashMap::new();
    let mut known = 0usize;
    let places = ops
        .iter()
        .map(|o| match o.answer {
            Answer::Unknown => {
                let next = kinds.len();
                Err(*kinds.entry(&o.call).or_insert(next))
            }
            _ => {
                known += 1;
                Ok(known - 1)
            }
        })
        .collect();
    let taken = Taken {
        known: vec![0; known.div_ceil(64)],
        unknown: vec![0; kinds.len()],
    };
    (places, taken)
}

impl Taken {
    fn flip(&mut self, place: Result<usize, usize>, take: bool) {
        match place {
            Ok(bit) => self.known[bit / 64] ^= 1 << (bit % 64),
            Err(kind) if take => self.unknown[kind] += 1,
            Err(kind) => self.unknown[kind] -= 1,
        }
    }
}

/// Wing and Gong's search with Lowe's cache (see the module docs).
fn search(history: &[Op<Val>]) -> Result<(), Violation> {
    let events = events(history);
    // A doubly linked list over `events`, so taken operations can be
    // lifted out and put back in O(1).
    let n = events.len();
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
    let mut head = if n == 0 { usize::MAX } else { 0 };
    let ret_of: Vec<Option<usize>> = {
        let mut r = vec![None; history.len()];
        for (i, e) in events.iter().enumerate() {
            if !e.call {
                r[e.op] = Some(i);
            }
        }
        r
    };
    let (places, mut taken) = places(history);
    let mut state: Option<Val> = None;
    let mut stack: Vec<(usize, Option<Val>)> = Vec::new();
    let mut seen: HashSet<(Taken, Option<Val>)> = HashSet::new();
    let mut best: Vec<usize> = Vec::new();
    let mut at = head;
    let unlink = |i: usize, next: &mut Vec<usize>, prev: &mut Vec<usize>, head: &mut usize| {
        let (p, nx) = (prev[i], next[i]);
        if p == usize::MAX {
            *head = if nx < n { nx } else { usize::MAX };
        } else {
            next[p] = nx;
        }
        if nx < n {
            prev[nx] = p;
        }
    };
    let relink = |i: usize, next: &mut Vec<usize>, prev: &mut Vec<usize>, head: &mut usize| {
        let (p, nx) = (prev[i], next[i]);
        if p == usize::MAX {
            *head = i;
        } else {
            next[p] = i;
        }
        if nx < n {
            prev[nx] = i;
        }
    };
    while head != usize::MAX {
        if at < n && events[at].call {
            let op = events[at].op;
            if let Some(after) = step(&state, &history[op]) {
                taken.flip(places[op], true);
                if seen.insert((taken.clone(), after)) {
                    stack.push((at, std::mem::replace(&mut state, after)));
                    unlink(at, &mut next, &mut prev, &mut head);
                    if let Some(r) = ret_of[op] {
                        unlink(r, &mut next, &mut prev, &mut head);
                    }
                    if stack.len() > best.len() {
                        best = stack.iter().map(|(i, _)| events[*i].op).collect();
                    }
                    at = head;
                    continue;
                }
                taken.flip(places[op], false);
            }
            at = next[at];
            continue;
        }
        // A return of an operation not taken, or the end with calls left
        // that lead nowhere new: undo the last choice.
        let Some((call_at, before)) = stack.pop() else {
            // The first call the longest prefix could not take.
            let stuck = events
                .iter()
                .find(|e| e.call && !best.contains(&e.op))
                .map_or(0, |e| e.op);
            return Err(Violation {
                prefix: best,
                stuck,
            });
        };
        let op = events[call_at].op;
        taken.flip(places[op], false);
        state = before;
        if let Some(r) = ret_of[op] {
            relink(r, &mut next, &mut prev, &mut head);
        }
        relink(call_at, &mut next, &mut prev, &mut head);
        at = next[call_at];
    }
    Ok(())
}

/// Every call and (known) return, in time order, calls first at a tie.
fn events(history: &[Op<Val>]) -> Vec<Event> {
    let mut timed: Vec<(u64, bool, Event)> = Vec::with_capacity(history.len() * 2);
    for (op, o) in history.iter().enumerate() {
        timed.push((o.invoked, false, Event { op, call: true }));
        if o.answer != Answer::Unknown {
            // `true` sorts after `false`: at a tie, calls come first.
            timed.push((o.completed.max(o.invoked), true, Event { op, call: false }));
        }
    }
    timed.sort_by_key(|(t, is_return, e)| (*t, *is_return, e.op));
    timed.into_iter().map(|(_, _, e)| e).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    fn op(call: Call, answer: Answer, invoked: u64, completed: u64) -> Op {
        Op {
            call,
            answer,
            invoked,
            completed,
        }
    }

    fn read(value: Option<&str>, from: u64, to: u64) -> Op {
        op(Call::Read, Answer::Value(value.map(v)), from, to)
    }

    fn write(value: &str, from: u64, to: u64) -> Op {
        op(Call::Write(v(value)), Answer::Done, from, to)
    }

    #[test]
    fn a_compare_and_delete_deletes_only_its_value() {
        let h = [
            write("a", 0, 1),
            op(Call::DeleteIf(v("b")), Answer::Applied(false), 2, 3),
            read(Some("a"), 4, 5),
            op(Call::DeleteIf(v("a")), Answer::Applied(true), 6, 7),
            read(None, 8, 9),
        ];
        assert_eq!(check(&h), Ok(()));
        // Two deletes of one value, one after the other, both applied: no.
        let twice = [
            write("a", 0, 1),
            op(Call::DeleteIf(v("a")), Answer::Applied(true), 2, 3),
            op(Call::DeleteIf(v("a")), Answer::Applied(true), 4, 5),
        ];
        assert!(check(&twice).is_err());
    }

    #[test]
    fn sequential_histories_follow_the_register() {
        let h = [
            read(None, 0, 1),
            write("a", 2, 3),
            read(Some("a"), 4, 5),
            op(Call::SetIfAbsent(v("b")), Answer::Applied(false), 6, 7),
            op(
                Call::Cas {
                    expected: v("a"),
                    new: v("c"),
                },
                Answer::Applied(true),
                8,
                9,
            ),
            read(Some("c"), 10, 11),
            op(Call::Delete, Answer::Applied(true), 12, 13),
            op(Call::SetIfAbsent(v("d")), Answer::Applied(true), 14, 15),
            read(Some("d"), 16, 17),
        ];
        assert_eq!(check(&h), Ok(()));
        assert_eq!(check(&[]), Ok(()));
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_caught() {
        let h = [write("a", 0, 1), write("b", 2, 3), read(Some("a"), 4, 5)];
        let e = check(&h).unwrap_err();
        assert_eq!(e.stuck, 2);
    }

    #[test]
    fn concurrent_operations_may_take_effect_in_either_order() {
        // The read overlaps both writes: either value is fine, and so is
        // the first read of "b" then "a" when the writes overlap too.
        let h = [
            write("a", 0, 10),
            write("b", 0, 10),
            read(Some("b"), 1, 2),
            read(Some("a"), 3, 4),
        ];
        assert_eq!(check(&h), Ok(()));
        // But not back again once both writes completed.
        let h = [
            write("a", 0, 10),
            write("b", 0, 10),
            read(Some("b"), 11, 12),
            read(Some("a"), 13, 14),
        ];
        assert!(check(&h).is_err());
    }

    #[test]
    fn two_clients_cannot_both_take_a_lease() {
        let take = |value: &str, ok: bool, from, to| {
            op(Call::SetIfAbsent(v(value)), Answer::Applied(ok), from, to)
        };
        assert_eq!(
            check(&[take("x", true, 0, 5), take("y", false, 1, 6)]),
            Ok(())
        );
        assert!(check(&[take("x", true, 0, 5), take("y", true, 1, 6)]).is_err());
        // Released (CAS to nothing is a delete here), then taken again.
        let h = [
            take("x", true, 0, 1),
            op(Call::Delete, Answer::Applied(true), 2, 3),
            take("y", true, 4, 5),
        ];
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn an_unknown_write_may_take_effect_late_or_never() {
        let lost = op(Call::Write(v("z")), Answer::Unknown, 0, 0);
        // Never seen: fine.
        assert_eq!(check(&[lost.clone(), read(None, 5, 6)]), Ok(()));
        // Seen, even long after: fine.
        assert_eq!(
            check(&[lost.clone(), read(None, 5, 6), read(Some("z"), 100, 101)]),
            Ok(())
        );
        // Seen, then gone without another write: not fine.
        assert!(check(&[lost, read(Some("z"), 5, 6), read(None, 7, 8),]).is_err());
        // A value nobody wrote is never read.
        assert!(check(&[read(Some("q"), 0, 1)]).is_err());
    }

    /// Thirty writes of unknown outcome before a violation: 2^30 ways of
    /// taking some of them, which the search must all rule out. Values
    /// nobody read are one value to it, and such writes interchangeable,
    /// so it rules out 31.
    #[test]
    fn a_violation_after_many_unknown_writes_is_found_at_once() {
        let mut h: Vec<Op> = (0..30u64)
            .map(|i| op(Call::Write(v(&format!("u{i}"))), Answer::Unknown, i, 0))
            .collect();
        h.push(op(Call::Delete, Answer::Unknown, 40, 0));
        h.push(read(Some("never written"), 100, 101));
        let e = check(&h).unwrap_err();
        assert_eq!(e.stuck, 31);
    }

    #[test]
    fn a_cas_answers_only_what_the_value_allows() {
        let cas = |e: &str, n: &str, ok: bool, from, to| {
            op(
                Call::Cas {
                    expected: v(e),
                    new: v(n),
                },
                Answer::Applied(ok),
                from,
                to,
            )
        };
        // The linearizable counter: read v, CAS v -> v+5, twice at once:
        // only one of the two CASes may win.
        let h = [
            write("0", 0, 1),
            cas("0", "5", true, 2, 10),
            cas("0", "5", true, 3, 11),
        ];
        assert!(check(&h).is_err());
        let h = [
            write("0", 0, 1),
            cas("0", "5", true, 2, 10),
            cas("0", "5", false, 3, 11),
            read(Some("5"), 12, 13),
        ];
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_long_concurrent_history_is_checked_quickly() {
        // 12 clients each write their value, all overlapping, then reads
        // of the last: the cache keeps the search small.
        let mut h: Vec<Op> = (0..12).map(|i| write(&i.to_string(), 0, 100)).collect();
        h.push(read(Some("7"), 101, 102));
        h.push(read(Some("7"), 103, 104));
        assert_eq!(check(&h), Ok(()));
        h.push(read(Some("3"), 105, 106));
        assert!(check(&h).is_err());
    }
}

#[cfg(test)]
mod brute {
    //! The search against brute force: every order of a small random
    //! history that respects real time, tried one by one.
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn brute(h: &[Op]) -> bool {
        fn go(h: &[Op], done: &mut Vec<bool>, state: Option<Vec<u8>>) -> bool {
            if done.iter().all(|d| *d) {
                return true;
            }
            // An op may go next if no op not yet done returned before it was called.
            let earliest_return = h
                .iter()
                .zip(done.iter())
                .filter(|(o, d)| !**d && o.answer != Answer::Unknown)
                .map(|(o, _)| o.completed)
                .min()
                .unwrap_or(u64::MAX);
            for i in 0..h.len() {
                if done[i] || h[i].invoked > earliest_return {
                    continue;
                }
                if let Some(after) = step(&state, &h[i]) {
                    done[i] = true;
                    if go(h, done, after) {
                        return true;
                    }
                    done[i] = false;
                }
            }
            false
        }
        go(h, &mut vec![false; h.len()], None)
    }

    fn random_history(rng: &mut SmallRng) -> Vec<Op> {
        let n = rng.random_range(1..7);
        (0..n)
            .map(|_| {
                // Some values written are never read: one to the search.
                let value = vec![b'a' + rng.random_range(0..5u8)];
                let call = match rng.random_range(0..4) {
                    0 => Call::Write(value.clone()),
                    1 => Call::SetIfAbsent(value.clone()),
                    2 => Call::Delete,
                    _ => Call::Read,
                };
                let answer = match (&call, rng.random_range(0..6)) {
                    (_, 0) if call != Call::Read => Answer::Unknown,
                    (Call::Write(_), _) => Answer::Done,
                    (Call::Read, k) if k < 2 => Answer::Value(None),
                    (Call::Read, _) => Answer::Value(Some(vec![b'a' + rng.random_range(0..3u8)])),
                    (_, k) => Answer::Applied(k % 2 == 0),
                };
                let invoked = rng.random_range(0..20);
                let completed = invoked + rng.random_range(0..10);
                Op {
                    call,
                    answer,
                    invoked,
                    completed,
                }
            })
            .collect()
    }

    #[test]
    fn the_search_agrees_with_brute_force() {
        let mut rng = SmallRng::seed_from_u64(48);
        for round in 0..20_000 {
            let h = random_history(&mut rng);
            assert_eq!(check(&h).is_ok(), brute(&h), "round {round}: {h:#?}");
        }
    }
}
