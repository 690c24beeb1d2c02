//! When a `SERIAL` read may answer: the rule of `read::repair_all`,
//! apart from I/O (as `gather` is for the asks).
//!
//! A `SERIAL` read answers only once a majority of replicas holds what it
//! read, so that no later read goes back. Of the replicas that answered,
//! those whose cells were the merge hold it already; each replica that
//! was behind is sent its repairs (one per cell it lacked: a row's columns
//! are several) and holds the merge once every one of them succeeded.
//! The read answers as soon as `required` replicas hold it, and fails as
//! soon as fewer than `required` still could (a repair failed on too
//! many); the repairs still running go on in the background.
//!
//! # Invariants ([`Holding::check_invariants`], after every event)
//! - A repair is reported only for a replica that was sent one, and
//!   never more of them than were sent.
//! - The replicas that hold the merge are never more than those that
//!   still may: a verdict, once given, never changes.

use std::collections::BTreeMap;

/// One replica's repairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Repairs {
    sent: usize,
    succeeded: usize,
    failed: usize,
}

impl Repairs {
    fn holds(&self) -> bool {
        self.succeeded == self.sent
    }
}

/// A `SERIAL` read's repairs, and whether a majority holds what it read
/// (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Holding {
    answered: usize,
    required: usize,
    /// The replicas that were behind, by their repairs.
    behind: BTreeMap<usize, Repairs>,
}

impl Holding {
    /// A read `answered` replicas answered, `required` of which must hold
    /// it; `repairs` names the replica of each repair it sends (a replica
    /// once per cell it lacked).
    pub(crate) fn new(
        answered: usize,
        required: usize,
        repairs: impl IntoIterator<Item = usize>,
    ) -> Holding {
        let mut behind = BTreeMap::<usize, Repairs>::new();
        for r in repairs {
            let entry = behind.entry(r).or_insert(Repairs {
                sent: 0,
                succeeded: 0,
                failed: 0,
            });
            entry.sent += 1;
        }
        let holding = Holding {
            answered,
            required,
            behind,
        };
        holding.checked();
        holding
    }

    /// One of `replica`'s repairs succeeded (`true`: it is durable there)
    /// or failed.
    pub(crate) fn on_repaired(&mut self, replica: usize, succeeded: bool) {
        if let Some(repairs) = self.behind.get_mut(&replica) {
            match succeeded {
                true => repairs.succeeded += 1,
                false => repairs.failed += 1,
            }
        }
        self.checked();
    }

    /// Replicas that hold what the read answers.
    fn holding(&self) -> usize {
        let up_to_date = self.answered.saturating_sub(self.behind.len());
        up_to_date + self.behind.values().filter(|r| r.holds()).count()
    }

    /// Replicas that hold it or still may (no repair of theirs failed).
    fn may_hold(&self) -> usize {
        let failed = self.behind.values().filter(|r| r.failed > 0).count();
        self.answered.saturating_sub(failed)
    }

    /// `Some(true)` once enough replicas hold what the read answers,
    /// `Some(false)` once too few still may; `None` while it depends on
    /// repairs in flight.
    pub(crate) fn verdict(&self) -> Option<bool> {
        if self.holding() >= self.required {
            Some(true)
        } else if self.may_hold() < self.required {
            Some(false)
        } else {
            None
        }
    }

    fn checked(&self) {
        tally_world::invariant(|| self.check_invariants());
    }

    /// The module's invariants: which does not hold, if any.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.behind.len() > self.answered {
            return Err(format!(
                "{} replicas behind of {} that answered",
                self.behind.len(),
                self.answered
            ));
        }
        for (r, repairs) in &self.behind {
            if repairs.succeeded + repairs.failed > repairs.sent {
                return Err(format!(
                    "replica {r}: {} repairs reported of {} sent",
                    repairs.succeeded + repairs.failed,
                    repairs.sent
                ));
            }
        }
        if self.holding() > self.may_hold() {
            return Err(format!(
                "{} replicas hold the read, of {} that may",
                self.holding(),
                self.may_hold()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_serial_read_answers_once_a_majority_holds_it() {
        // Two of three answered, one behind: it holds the read once
        // repaired, and then two do.
        let mut h = Holding::new(2, 2, [1]);
        assert_eq!(h.verdict(), None);
        h.on_repaired(1, true);
        assert_eq!(h.verdict(), Some(true));

        // Its repair failed: one holds it, not a majority.
        let mut h = Holding::new(2, 2, [1]);
        h.on_repaired(1, false);
        assert_eq!(h.verdict(), Some(false));

        // Three answered, one behind whose repair failed: two hold it.
        let h = Holding::new(3, 2, [2]);
        assert_eq!(h.verdict(), Some(true), "before any repair is back");
        assert_eq!(Holding::new(2, 2, []).verdict(), Some(true));
        h.check_invariants().unwrap();
    }

    #[test]
    fn a_replica_behind_on_several_columns_holds_the_row_once_all_are_repaired() {
        let mut h = Holding::new(2, 2, [0, 1, 1, 1]);
        h.on_repaired(1, true);
        h.on_repaired(0, true);
        h.on_repaired(1, true);
        assert_eq!(h.verdict(), None, "one column of replica 1 in flight");
        h.on_repaired(1, true);
        assert_eq!(h.verdict(), Some(true));

        let mut h = Holding::new(3, 2, [0, 1, 1]);
        h.on_repaired(1, true);
        h.on_repaired(1, false);
        assert_eq!(h.verdict(), None, "replica 0 still may");
        h.on_repaired(0, false);
        assert_eq!(h.verdict(), Some(false));
        h.check_invariants().unwrap();
    }

    #[test]
    fn it_answers_without_waiting_for_repairs_it_no_longer_needs() {
        // Three answered, two behind: one repaired suffices, and the
        // other's failure afterwards changes nothing.
        let mut h = Holding::new(3, 2, [1, 2]);
        h.on_repaired(2, true);
        assert_eq!(h.verdict(), Some(true));
        h.on_repaired(1, false);
        assert_eq!(h.verdict(), Some(true));

        // One failure leaves one that may hold it, of two required.
        let mut h = Holding::new(2, 2, [0, 1]);
        h.on_repaired(0, false);
        assert_eq!(h.verdict(), Some(false));
    }

    #[test]
    fn reports_beyond_the_repairs_sent_break_the_invariants() {
        let mut h = Holding::new(2, 2, [1]);
        h.behind.get_mut(&1).unwrap().succeeded = 2;
        assert!(h.check_invariants().is_err());
        let h = Holding {
            answered: 1,
            required: 1,
            behind: Holding::new(2, 2, [0, 1]).behind,
        };
        assert!(h.check_invariants().is_err(), "more behind than answered");
    }
}
