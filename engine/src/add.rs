//! The one add rule: what adds to a counter do to this node's own shard,
//! and what value each answers, as a pure read-modify-write.
//!
//! Every write a leader makes to its own shard goes through [`OwnAdd`]: a
//! batch's add sealed on its caller's thread, the adds the sealer combines, adds with operation ids, a unique counter's admissions
//! (see `group_commit::seal` for the one way each is then sealed). Fed the
//! adds to one cell in arrival order, it answers each one's value or
//! refusal, and then the one new version of the shard they make together:
//!
//! - an add answers the counter's value right after it, as if the adds
//!   ran one after another in arrival order: the last one kept answers
//!   the cell's new value, and combining adds changes no answer;
//! - an add is refused, and counts for nothing, when it would take this
//!   node's shard, or the counter, outside an `i64`
//!   ([`Error::Overflow`]). The counter is checked exactly: replicas'
//!   shards may have taken it past an `i64` already, and an add is then
//!   refused while it leaves it there, and taken once it brings it back;
//! - every add is refused when the cell cannot take a new version of the
//!   shard ([`Limit`]: its clock at the end of its range, one shard too
//!   many, a list key);
//! - a counter whose deadline passed restarts first, in the epoch a reset
//!   makes (from 0, no deadline), as Redis' `INCR` on an expired key does;
//!   every leader makes the same epoch, so restarts on several merge. One
//!   whose epoch is at its limit stays as it is (and absent). A leader
//!   among replicas restarts it only once it confirmed the restart
//!   ([`OnExpired::Confirmed`]); until then every add is refused.
//!
//! Nothing changes until [`OwnAdd::install`]: refused adds leave the cell
//! as it was. The model test below checks the rule against a plain
//! sequential counter.
//!
//! Adds a caller combines into one before the engine sees them (a node's
//! batch) are [`Combined`]: their exact sum, an add whose delta would
//! take it outside an `i64` starting a combined add of its own; each
//! answers by the same rule, counted back from the value the combined add
//! answered ([`sequential_values`]); and a combined add refused for an
//! overflow is made again add by add ([`Combined::splits`]), since some
//! of its adds alone may be taken.

use smallvec::{SmallVec, smallvec};

use crate::cell::{Cell, Epoch, Limit, Shard, now_ms};
use crate::error::{Error, Result};
use crate::outcome::AddOutcome;

/// What an add does to a counter whose deadline has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExpired {
    /// Restarts it, in the epoch a reset makes: an engine alone.
    Restart,
    /// Restarts it if its epoch is this one (its [`Epoch::tag`]), whose
    /// restart the caller confirmed ([`crate::Engine::confirm_restart`]);
    /// else refuses every add ([`Limit::Expired`]). A leader among
    /// replicas confirms first that none of them holds a later deadline
    /// it missed, which keeps the counter live: restarted, the epoch it
    /// ended would take that acknowledged deadline with it.
    Confirmed(Option<u64>),
    /// Takes the adds into it as if it were live (the test seam
    /// `Options::keep_expired`).
    Keep,
}

/// One read-modify-write of a node's own shard of one cell, fed the adds
/// to it in arrival order (see the module doc).
///
/// # Invariants
/// - `kept > 0` ⇒ `clock` is `Ok`, and `others + own` is within `i64`.
/// - `restart` ⇒ `clock == Ok(1)` and `others` is the new epoch's base.
#[derive(Clone, Copy, Debug)]
pub struct OwnAdd {
    counter_id: u64,
    /// The epoch the new version lands in.
    epoch: Epoch,
    /// The cell restarts in `epoch` first: its deadline passed.
    restart: bool,
    /// The new version's clock, or why the cell takes none.
    clock: Result<u64, Limit>,
    /// The exact sum of the base and the other shards.
    others: i128,
    /// The shard's value, moved by the adds kept so far.
    own: i64,
    /// Adds kept so far.
    kept: u32,
}

impl OwnAdd {
    /// The rule over `cell` for `counter_id`'s shard, restarting the cell
    /// first when its deadline has passed, as `on_expired` says.
    #[inline]
    pub fn start(cell: &Cell, counter_id: u64, on_expired: OnExpired) -> OwnAdd {
        let epoch = cell.epoch();
        // Most counters have no deadline: one comparison on the add path.
        if epoch.expiry.at_ms == 0 || !epoch.expired(now_ms()) {
            return OwnAdd::new(cell, counter_id, false);
        }
        match on_expired {
            OnExpired::Restart => OwnAdd::new(cell, counter_id, true),
            OnExpired::Confirmed(tag) if tag == Some(epoch.tag()) => {
                OwnAdd::new(cell, counter_id, true)
            }
            OnExpired::Confirmed(_) => OwnAdd {
                clock: Err(Limit::Expired(epoch)),
                ..OwnAdd::new(cell, counter_id, false)
            },
            OnExpired::Keep => OwnAdd::new(cell, counter_id, false),
        }
    }

    /// [`OwnAdd::start`] with the clock read: `restart` when the cell's
    /// deadline has passed.
    #[inline]
    pub fn new(cell: &Cell, counter_id: u64, restart: bool) -> OwnAdd {
        if restart && let Ok(epoch) = cell.reset_epoch() {
            return OwnAdd {
                counter_id,
                epoch,
                restart,
                clock: Ok(1),
                others: i128::from(epoch.base),
                own: 0,
                kept: 0,
            };
        }
        let own = cell.shard(counter_id).map_or(0, |s| s.value);
        OwnAdd {
            counter_id,
            epoch: cell.epoch(),
            restart: false,
            clock: cell.next_own_clock(counter_id),
            others: cell.sum() - i128::from(own),
            own,
            kept: 0,
        }
    }

    /// Takes the next add of `delta`: the counter's value right after it,
    /// or why it is refused (nothing taken then).
    #[inline]
    pub fn add(&mut self, delta: i64) -> Result<i64> {
        self.clock?;
        let refused = || Error::Overflow {
            value: self.others + i128::from(self.own),
            delta,
        };
        let own = self.own.checked_add(delta).ok_or_else(refused)?;
        let value = i64::try_from(self.others + i128::from(own)).map_err(|_| refused())?;
        self.own = own;
        self.kept = self.kept.saturating_add(1);
        Ok(value)
    }

    /// The adds taken so far.
    pub fn kept(&self) -> u32 {
        self.kept
    }

    /// The epoch the new version lands in (a restart's, if the cell
    /// restarts).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Writes the new version of the shard into `cell`, which must be the
    /// cell this rule was started on, unchanged since (its lock held
    /// throughout), and answers what the adds did. At least one add must
    /// have been taken.
    // Inlined into each sealing path: as a call it cost a batch's add 1.6%
    // more instructions than the code it replaced (callgrind).
    #[inline(always)]
    pub fn install(&self, cell: &mut Cell) -> AddOutcome {
        assert!(self.kept > 0, "a new version of a shard no add moved");
        let clock = self
            .clock
            .expect("a cell that takes no new version refuses every add");
        if self.restart {
            cell.try_reset()
                .expect("the epoch could move on when the rule started");
        }
        let shard = Shard {
            counter_id: self.counter_id,
            clock,
            value: self.own,
        };
        cell.put_own(shard);
        cell.check_invariants();
        // Known without summing the shards again: checked by every add taken.
        let value = i64::try_from(self.others + i128::from(self.own))
            .expect("the adds taken leave the value in range");
        debug_assert_eq!(
            cell.value(),
            Ok(value),
            "the cell is not the one the rule started on"
        );
        AddOutcome {
            epoch: cell.epoch(),
            shard,
            value,
            combined: self.kept,
        }
    }
}

/// The values adds of `deltas`, combined into one, answer when the last
/// leaves the counter at `last`: each the value right after it, as if
/// they had run one after another in arrival order (the module doc's
/// rule), counted back from the last ([`CountBack`]). In the adds' order.
pub fn sequential_values(
    last: i64,
    deltas: impl DoubleEndedIterator<Item = i64> + ExactSizeIterator,
) -> SmallVec<[i64; 1]> {
    let mut values: SmallVec<[i64; 1]> = smallvec![0; deltas.len()];
    let mut back = CountBack::from(last);
    for (slot, delta) in values.iter_mut().rev().zip(deltas.rev()) {
        *slot = back.value_after(delta);
    }
    values
}

/// Adds to one counter combined into one before the rule sees them (a
/// node's batch): their sum, and each add's `T` (where its answer goes)
/// and delta, in arrival order, inline for the usual one.
///
/// # Invariants
/// - `delta` is the exact sum of the members' deltas, unless the members
///   were taken out ([`Combined::take`]).
#[derive(Debug)]
pub struct Combined<T> {
    delta: i64,
    members: SmallVec<[(T, i64); 1]>,
}

impl<T> Combined<T> {
    /// One add of `delta`, which later adds may join.
    #[inline]
    pub fn one(member: T, delta: i64) -> Combined<T> {
        Combined {
            delta,
            members: smallvec![(member, delta)],
        }
    }

    /// Joins an add of `delta`; gives `member` back, nothing joined, when
    /// the sum would leave an `i64` (it starts a combined add of its own).
    #[inline]
    pub fn join(&mut self, member: T, delta: i64) -> std::result::Result<(), T> {
        match self.delta.checked_add(delta) {
            Some(sum) => {
                self.delta = sum;
                self.members.push((member, delta));
                Ok(())
            }
            None => Err(member),
        }
    }

    /// The delta of the one add they make.
    #[inline]
    pub fn delta(&self) -> i64 {
        self.delta
    }

    /// How many adds it combines.
    #[inline]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it combines none (its members were taken out).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Each member, with the value it answers when the combined add
    /// answered `last`: as if the adds ran one after another in arrival
    /// order ([`sequential_values`]).
    pub fn answers(&mut self, last: i64) -> impl Iterator<Item = (&mut T, i64)> {
        let values = sequential_values(last, self.members.iter().map(|(_, d)| *d));
        self.members.iter_mut().map(|(m, _)| m).zip(values)
    }

    /// Each member, to answer it something else (an error).
    pub fn members_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.members.iter_mut().map(|(m, _)| m)
    }

    /// The members, taken out (to be answered elsewhere), as a combined
    /// add of their own; this one is left with none.
    pub fn take(&mut self) -> Combined<T> {
        Combined {
            delta: self.delta,
            members: std::mem::take(&mut self.members),
        }
    }

    /// The members and their deltas, in arrival order.
    pub fn into_members(self) -> impl Iterator<Item = (T, i64)> {
        self.members.into_iter()
    }

    /// Whether the combined add's refusal `e` is one its adds alone may
    /// not meet, so that each is made again on its own: a sum that
    /// overflows where some of its adds do not. Any other refusal (a
    /// limit of the cell, a closed engine) meets each alone as well.
    pub fn splits(&self, e: &Error) -> bool {
        self.members.len() > 1 && matches!(e, Error::Overflow { .. })
    }
}

/// The value rule counted back from the last add's value, without a
/// buffer: fed the adds last first, answers the value right after each.
#[derive(Clone, Copy, Debug)]
pub struct CountBack {
    after: i64,
}

impl CountBack {
    /// Counting back from `last`, the value the last add answers.
    pub fn from(last: i64) -> CountBack {
        CountBack { after: last }
    }

    /// The value right after the add of `delta`, the add after it fed
    /// already; the next one fed is the add before it.
    pub fn value_after(&mut self, delta: i64) -> i64 {
        let value = self.after;
        // Exact whenever the value before is an i64, as it is for every
        // add the rule takes; adds combined before the rule saw them may
        // pass through values outside one.
        self.after = self.after.wrapping_sub(delta);
        value
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use proptest::prelude::*;

    use super::*;
    use crate::cell::{CLOCK_MAX, Expiry, List, SHARDS_MAX};

    /// This node's counter id.
    const ME: u64 = 7;

    #[test]
    fn an_expired_counter_restarts_only_once_its_restart_is_confirmed() {
        let expiry = Expiry {
            at_ms: 1,
            stamp: tally_model::Stamp { ms: 1, id: 3 },
        };
        let epoch = Epoch {
            n: 3,
            expiry,
            ..Epoch::default()
        };
        let shard = Shard {
            counter_id: ME,
            clock: 4,
            value: 7,
        };
        let cell = Cell::from_parts(epoch, [shard]);
        // Refused, unconfirmed or confirmed for another epoch.
        let other = Epoch { origin: 9, ..epoch };
        for id in [None, Some(2), Some(other.tag())] {
            let mut rule = OwnAdd::start(&cell, ME, OnExpired::Confirmed(id));
            let refused = rule.add(2);
            assert!(
                matches!(refused, Err(Error::Expired { epoch: e }) if e == epoch),
                "{id:?}: {refused:?}"
            );
            assert_eq!(rule.kept(), 0);
        }
        let confirmed = OnExpired::Confirmed(Some(epoch.tag()));
        for (on_expired, value, n) in [
            (confirmed, 2, 4),
            (OnExpired::Restart, 2, 4),
            (OnExpired::Keep, 9, 3),
        ] {
            let mut rule = OwnAdd::start(&cell, ME, on_expired);
            assert_eq!(rule.add(2).unwrap(), value, "{on_expired:?}");
            assert_eq!(rule.epoch().n, n, "{on_expired:?}");
        }
        // A live counter never waits for a confirmation.
        let live = Cell::from_parts(
            Epoch {
                n: 3,
                ..Epoch::default()
            },
            [shard],
        );
        let mut rule = OwnAdd::start(&live, ME, OnExpired::Confirmed(None));
        assert_eq!(rule.add(2).unwrap(), 9);
    }

    /// Values that make overflows common: small ones, and ones at and
    /// near either end of an `i64`.
    fn value() -> impl Strategy<Value = i64> {
        prop_oneof![
            -5i64..5,
            i64::MAX - 4..=i64::MAX,
            i64::MIN..i64::MIN + 4,
            any::<i64>(),
        ]
    }

    /// What may keep a cell from taking a new version of this node's shard.
    #[derive(Clone, Copy, Debug)]
    enum Bound {
        Free,
        ClockAtEnd,
        Full,
        List,
    }

    /// A cell as replicas and this node may have left it: a base (a SET's),
    /// other nodes' shards, maybe this node's, maybe at a bound; with
    /// whether its deadline has passed (so the rule restarts it).
    fn case() -> impl Strategy<Value = (Cell, bool)> {
        let bound = prop_oneof![
            4 => Just(Bound::Free),
            1 => Just(Bound::ClockAtEnd),
            1 => Just(Bound::Full),
            1 => Just(Bound::List),
        ];
        (
            prop_oneof![Just(0u64), Just(3), Just(CLOCK_MAX)],
            prop_oneof![Just(0i64), value()],
            proptest::collection::vec(value(), 0..4),
            proptest::option::of((1u64..5, value())),
            bound,
            any::<bool>(),
        )
            .prop_map(|(n, base, others, own, bound, restart)| {
                let epoch = Epoch {
                    n,
                    origin: u64::from(base != 0 || matches!(bound, Bound::List)),
                    base,
                    expiry: Expiry::NONE,
                    fold: 0,
                };
                let mut shards: Vec<Shard> = others
                    .into_iter()
                    .zip(100..)
                    .map(|(value, counter_id)| Shard {
                        counter_id,
                        clock: 1,
                        value,
                    })
                    .collect();
                let mine = |(clock, value)| Shard {
                    counter_id: ME,
                    clock,
                    value,
                };
                let cell = match bound {
                    Bound::Free => Cell::from_parts(epoch, shards.into_iter().chain(own.map(mine))),
                    Bound::ClockAtEnd => {
                        let own = own.unwrap_or((0, 0));
                        let at_end = mine((CLOCK_MAX, own.1));
                        Cell::from_parts(epoch, shards.into_iter().chain([at_end]))
                    }
                    Bound::Full => {
                        let more = (1000..).map(|counter_id| Shard {
                            counter_id,
                            clock: 1,
                            value: 0,
                        });
                        shards.extend(more.take(SHARDS_MAX - shards.len()));
                        Cell::from_parts(epoch, shards)
                    }
                    Bound::List => {
                        let list = List::new(vec![b"hit".to_vec()]).unwrap();
                        Cell::from_parts(epoch, []).with_list(list)
                    }
                };
                (cell, restart)
            })
    }

    /// The rule as a plain sequential counter: each add in turn is applied
    /// to the counter's value and to this node's part of it, and refused
    /// when either would leave an `i64`, or when the cell takes no new
    /// version of the shard at all.
    struct Model {
        value: i128,
        own: i128,
        takes: Result<(), String>,
    }

    impl Model {
        fn of(cell: &Cell, restart: bool) -> Model {
            if restart && cell.epoch().n < CLOCK_MAX {
                return Model {
                    value: 0,
                    own: 0,
                    takes: Ok(()),
                };
            }
            let own = cell.shard(ME);
            let takes = if cell.is_list() {
                Err("wrong type".into())
            } else if own.is_some_and(|s| s.clock >= CLOCK_MAX) {
                Err("clock exhausted".into())
            } else if own.is_none() && cell.shards().len() >= SHARDS_MAX {
                Err(format!("{} shards", SHARDS_MAX + 1))
            } else {
                Ok(())
            };
            Model {
                value: cell.sum(),
                own: own.map_or(0, |s| i128::from(s.value)),
                takes,
            }
        }

        fn add(&mut self, delta: i64) -> Result<i64, String> {
            self.takes.clone()?;
            let (own, value) = (self.own + i128::from(delta), self.value + i128::from(delta));
            if i64::try_from(own).is_err() || i64::try_from(value).is_err() {
                return Err(format!("overflow of {} by {delta}", self.value));
            }
            (self.own, self.value) = (own, value);
            Ok(i64::try_from(value).unwrap())
        }
    }

    /// An answer of the rule, in the model's terms.
    fn seen(answer: Result<i64>) -> Result<i64, String> {
        answer.map_err(|e| match e {
            Error::Overflow { value, delta } => format!("overflow of {value} by {delta}"),
            Error::ClockExhausted { what, .. } => format!("{what} exhausted"),
            Error::TooManyShards { count, .. } => format!("{count} shards"),
            Error::Refused(crate::error::Refusal::WrongType) => "wrong type".into(),
            e => format!("unexpected: {e}"),
        })
    }

    proptest! {
        /// Each add answers what the sequential model answers; the new
        /// version holds exactly the adds taken; and replicating it alone
        /// brings the old cell to the new one.
        #[test]
        fn the_rule_is_a_sequential_counter(
            (cell, restart) in case(),
            deltas in proptest::collection::vec(value(), 0..8),
        ) {
            let mut rule = OwnAdd::new(&cell, ME, restart);
            let mut model = Model::of(&cell, restart);
            let mut taken = Vec::new();
            for &delta in &deltas {
                let answer = seen(rule.add(delta));
                prop_assert_eq!(&answer, &model.add(delta), "add of {}", delta);
                if let Ok(value) = answer {
                    taken.push((delta, value));
                }
            }
            prop_assert_eq!(rule.kept() as usize, taken.len());
            if taken.is_empty() {
                return Ok(());
            }
            let mut after = cell.clone();
            let outcome = rule.install(&mut after);
            let last = taken.last().unwrap().1;
            prop_assert_eq!(outcome.value, last);
            prop_assert_eq!(after.value().ok(), Some(last));
            prop_assert_eq!(i128::from(outcome.shard.value), model.own);
            prop_assert_eq!(outcome.combined as usize, taken.len());
            let restarted = restart && cell.epoch().n < CLOCK_MAX;
            let clock = match (restarted, cell.shard(ME)) {
                (false, Some(own)) => own.clock + 1,
                _ => 1,
            };
            prop_assert_eq!(outcome.shard.clock, clock);
            prop_assert_eq!(outcome.epoch, rule.epoch());
            let others = |c: &Cell| -> Vec<Shard> {
                c.shards().iter().filter(|s| s.counter_id != ME).copied().collect()
            };
            if restarted {
                prop_assert!(others(&after).is_empty());
                prop_assert_eq!(outcome.epoch, cell.reset_epoch().unwrap());
            } else {
                prop_assert_eq!(others(&after), others(&cell));
                prop_assert_eq!(outcome.epoch, cell.epoch());
            }
            let mut replica = cell.clone();
            replica.merge(&outcome.replica_cell(), &crate::cell::Merger::default());
            prop_assert_eq!(&replica, &after);
            let values = sequential_values(last, taken.iter().map(|&(d, _)| d));
            let answered: Vec<i64> = taken.iter().map(|&(_, v)| v).collect();
            prop_assert_eq!(&values[..], &answered[..], "counted back from the last");
        }
    }

    /// Combines `deltas` as a node's batch does: each joins the newest
    /// combined add, or starts one when the sum would overflow.
    fn combine(deltas: &[i64]) -> Vec<Combined<usize>> {
        let mut all: Vec<Combined<usize>> = Vec::new();
        for (i, &delta) in deltas.iter().enumerate() {
            let refused = match all.last_mut() {
                Some(open) => open.join(i, delta).err(),
                None => Some(i),
            };
            if let Some(i) = refused {
                all.push(Combined::one(i, delta));
            }
        }
        all
    }

    proptest! {
        /// Combined adds, each decided by the rule and split add by add
        /// when it overflows, answer what the adds one by one answer
        /// whenever each add's value is an `i64` along the way; and every
        /// add is in exactly one combined add, in arrival order, whose
        /// delta is their sum.
        #[test]
        fn combined_adds_answer_as_the_adds_one_by_one(
            (cell, restart) in case(),
            deltas in proptest::collection::vec(value(), 0..8),
        ) {
            let mut combined = combine(&deltas);
            let members: Vec<usize> = combined
                .iter_mut()
                .flat_map(|c| c.members_mut().map(|m| *m).collect::<Vec<_>>())
                .collect();
            prop_assert_eq!(members, (0..deltas.len()).collect::<Vec<_>>());
            for c in &mut combined {
                let sum: i128 = c.members.iter().map(|&(_, d)| i128::from(d)).sum();
                prop_assert_eq!(i128::from(c.delta()), sum);
            }
            let mut model = Model::of(&cell, restart);
            let alone: Vec<Result<i64, String>> = deltas.iter().map(|&d| model.add(d)).collect();
            if alone.iter().any(Result::is_err) {
                return Ok(()); // refusals are the rule's, tested above
            }
            let mut now = cell.clone();
            let mut restart = restart;
            let mut answered = vec![None; deltas.len()];
            // The cell restarts with the first version made, if at all.
            let seal = |now: &mut Cell, restart: &mut bool, adds: &mut Combined<usize>| {
                let mut rule = OwnAdd::new(now, ME, *restart);
                let got = rule.add(adds.delta());
                if got.is_ok() {
                    rule.install(now);
                    *restart = false;
                }
                got
            };
            for mut c in combined {
                match seal(&mut now, &mut restart, &mut c) {
                    Ok(last) => c.answers(last).for_each(|(&mut i, v)| answered[i] = Some(v)),
                    Err(e) => {
                        prop_assert!(c.splits(&e), "only an overflow of a sum splits: {}", e);
                        for (i, delta) in c.into_members() {
                            let v = seal(&mut now, &mut restart, &mut Combined::one(i, delta));
                            answered[i] = v.ok();
                        }
                    }
                }
            }
            let want: Vec<Option<i64>> = alone.into_iter().map(Result::ok).collect();
            prop_assert_eq!(answered, want);
        }
    }

    #[test]
    fn a_combined_add_refuses_an_add_that_overflows_its_sum() {
        let mut c = Combined::one('a', i64::MAX - 1);
        assert_eq!(c.join('b', 1), Ok(()));
        assert_eq!(c.join('c', 1), Err('c'), "the sum would overflow");
        assert_eq!(c.join('d', -5), Ok(()));
        assert_eq!((c.delta(), c.len()), (i64::MAX - 5, 3));
        let overflow = Error::Overflow { value: 9, delta: 1 };
        assert!(c.splits(&overflow));
        assert!(
            !c.splits(&Error::Refused(crate::error::Refusal::WrongType)),
            "a limit meets each add alone too"
        );
        assert!(
            !Combined::one('a', 1).splits(&overflow),
            "one add is alone already"
        );
        let taken = c.take();
        assert!(c.is_empty());
        assert_eq!(taken.len(), 3);
        let values: Vec<(char, i64)> = Combined::one('x', 2)
            .answers(10)
            .map(|(m, v)| (*m, v))
            .collect();
        assert_eq!(values, [('x', 10)]);
    }

    #[test]
    fn an_add_is_checked_against_the_exact_sum() {
        let max = i128::from(i64::MAX);
        let cell = |others: &[i64], own: i64| {
            let others = others.iter().zip(100..).map(|(&value, counter_id)| Shard {
                counter_id,
                clock: 1,
                value,
            });
            let own = Shard {
                counter_id: ME,
                clock: 1,
                value: own,
            };
            Cell::from_parts(0, others.chain([own]))
        };
        let add = |c: &Cell, delta| OwnAdd::new(c, ME, false).add(delta);
        assert_eq!(add(&cell(&[], 5), 7).unwrap(), 12);
        assert_eq!(add(&cell(&[-10], 5), 7).unwrap(), 2);
        // The own shard would overflow.
        assert!(matches!(
            add(&cell(&[], i64::MAX), 1),
            Err(Error::Overflow { value, delta: 1 }) if value == max
        ));
        // The sum would, though the shard does not.
        assert!(matches!(
            add(&cell(&[i64::MAX], 0), 1),
            Err(Error::Overflow { .. })
        ));
        // Past i64 already: refused while it stays there, taken once back.
        let past = cell(&[i64::MAX], 9);
        assert!(matches!(
            add(&past, -1),
            Err(Error::Overflow { value, delta: -1 }) if value == max + 9
        ));
        assert_eq!(add(&past, -20).unwrap(), i64::MAX - 11);
        assert!(
            add(&cell(&[i64::MIN], 0), -1).is_err(),
            "below i64::MIN too"
        );
    }

    #[test]
    fn each_combined_add_answers_the_value_right_after_it() {
        let cases: &[(i64, &[i64], &[i64])] = &[
            (5, &[5], &[5]),
            (10, &[1, 1, 1], &[8, 9, 10]),
            (7, &[3, -2, 4], &[5, 3, 7]),
            (0, &[], &[]),
            // At the edge of i64 the arithmetic stays exact.
            (i64::MAX, &[i64::MAX, 0], &[i64::MAX, i64::MAX]),
        ];
        for (last, deltas, want) in cases {
            let got = sequential_values(*last, deltas.iter().copied());
            assert_eq!(&got[..], *want, "last {last}, deltas {deltas:?}");
        }
    }
}
