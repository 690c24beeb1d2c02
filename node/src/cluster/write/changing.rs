//! The steps of a leader's change of a counter's epoch (`SET`, `EXPIRE`,
//! `PERSIST`, a reset) or of a list (`list`, never made again), apart
//! from I/O: what `change::lead` and `list::lead_list` do next
//! ([`Changing::step`]) as their reads, the engine and the replicas
//! answer.
//!
//! # The steps
//! 1. `CatchUp`: read the cell from every live replica and merge it here,
//!    so that the change is judged on, and made after, the newest epoch
//!    any of them knows (see `change`).
//! 2. `Make` the change here. Not made (a condition failed): `Settle`
//!    until what it was judged on is durable, then answer.
//! 3. `Replicate` the new header by an add's round. Held: answer. A
//!    replica holds a newer epoch: a deadline is made again in it
//!    (`CatchUpTo` it, then from step 1, one attempt on); a `SET` or a
//!    reset is answered as made before it (`retry::made_again`).
//!
//! # Invariants ([`Changing::check_invariants`])
//! - A change is made only after a catch-up in the same attempt, and
//!   replicated only once made.
//! - A change is answered as made only once its replication ended (held
//!   or overtaken), and as not made only once settled.
//! - Only a deadline is made again.

use tally_engine::Epoch;

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Read every live replica's cell and merge it here; then
    /// [`Changing::on_caught_up`].
    CatchUp,
    /// Make the change here; then [`Changing::on_made`].
    Make,
    /// Wait until what the change was judged on is durable; then
    /// [`Changing::on_settled`].
    Settle,
    /// Replicate the new header, the `attempt`-th time; then
    /// [`Changing::on_held`] or [`Changing::on_overtaken`].
    Replicate { attempt: u32 },
    /// Move the cell here to the newer `epoch` a replica holds; then
    /// [`Changing::on_caught_up`].
    CatchUpTo(Epoch),
    /// Done: answer what the engine said of the change.
    Answer,
}

/// One leader's change (see the module docs).
#[derive(Debug)]
pub(super) struct Changing {
    /// Whether the change is made again in a newer epoch that overtook it.
    made_again: bool,
    attempt: u32,
    step: Step,
    /// What went out of order: for the invariants.
    broken: Option<String>,
}

impl Changing {
    /// A change, made again in a newer epoch that overtakes it if
    /// `made_again` (`retry::made_again`).
    pub(super) fn new(made_again: bool) -> Changing {
        Changing {
            made_again,
            attempt: 1,
            step: Step::CatchUp,
            broken: None,
        }
    }

    /// What to do next.
    pub(super) fn step(&self) -> Step {
        self.step.clone()
    }

    /// The catch-up (of every live replica, or to a newer epoch) is
    /// merged here.
    pub(super) fn on_caught_up(&mut self) {
        self.expect(
            matches!(self.step, Step::CatchUp | Step::CatchUpTo(_)),
            "a catch-up",
        );
        self.step = match self.step {
            Step::CatchUpTo(_) => Step::CatchUp,
            _ => Step::Make,
        };
        tally_world::invariant(|| self.check_invariants());
    }

    /// The engine made the change (`applied`), or judged it not to be.
    pub(super) fn on_made(&mut self, applied: bool) {
        self.expect(self.step == Step::Make, "a change made");
        self.step = match applied {
            true => Step::Replicate {
                attempt: self.attempt,
            },
            false => Step::Settle,
        };
        tally_world::invariant(|| self.check_invariants());
    }

    /// What the change not made was judged on is durable.
    pub(super) fn on_settled(&mut self) {
        self.expect(self.step == Step::Settle, "a settle");
        self.step = Step::Answer;
        tally_world::invariant(|| self.check_invariants());
    }

    /// The replication held at the level.
    pub(super) fn on_held(&mut self) {
        self.expect(
            matches!(self.step, Step::Replicate { .. }),
            "a replication held",
        );
        self.step = Step::Answer;
        tally_world::invariant(|| self.check_invariants());
    }

    /// A replica holds `newer`, an epoch that overtook the change.
    pub(super) fn on_overtaken(&mut self, newer: Epoch) {
        self.expect(
            matches!(self.step, Step::Replicate { .. }),
            "an overtaken replication",
        );
        self.step = match self.made_again {
            true => {
                self.attempt += 1;
                Step::CatchUpTo(newer)
            }
            // Acknowledged as made before the newer change.
            false => Step::Answer,
        };
        tally_world::invariant(|| self.check_invariants());
    }

    fn expect(&mut self, ok: bool, what: &str) {
        if !ok {
            let at = format!("{what} came at {:?}", self.step);
            self.broken.get_or_insert(at);
        }
    }

    /// What does not hold of the invariants (see the module docs).
    pub(super) fn check_invariants(&self) -> Result<(), String> {
        if let Some(what) = &self.broken {
            return Err(format!("change: {what}"));
        }
        if self.attempt > 1 && !self.made_again {
            return Err(format!(
                "change: a change that is not made again at attempt {}",
                self.attempt
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(n: u64) -> Epoch {
        Epoch {
            n,
            ..Epoch::default()
        }
    }

    #[test]
    fn a_change_catches_up_makes_replicates_and_answers() {
        let mut c = Changing::new(false);
        assert_eq!(c.step(), Step::CatchUp);
        c.on_caught_up();
        assert_eq!(c.step(), Step::Make);
        c.on_made(true);
        assert_eq!(c.step(), Step::Replicate { attempt: 1 });
        c.on_held();
        assert_eq!(c.step(), Step::Answer);
        assert_eq!(c.check_invariants(), Ok(()));
    }

    #[test]
    fn a_change_not_made_settles_before_it_answers() {
        let mut c = Changing::new(false);
        c.on_caught_up();
        c.on_made(false);
        assert_eq!(c.step(), Step::Settle);
        c.on_settled();
        assert_eq!(c.step(), Step::Answer);
    }

    #[test]
    fn a_set_overtaken_answers_as_made_first_and_a_deadline_is_made_again() {
        let mut set = Changing::new(false);
        set.on_caught_up();
        set.on_made(true);
        set.on_overtaken(epoch(4));
        assert_eq!(set.step(), Step::Answer);

        let mut expire = Changing::new(true);
        expire.on_caught_up();
        expire.on_made(true);
        expire.on_overtaken(epoch(4));
        assert_eq!(expire.step(), Step::CatchUpTo(epoch(4)));
        expire.on_caught_up();
        assert_eq!(expire.step(), Step::CatchUp, "every live replica again");
        expire.on_caught_up();
        expire.on_made(true);
        assert_eq!(expire.step(), Step::Replicate { attempt: 2 });
        expire.on_held();
        assert_eq!(expire.step(), Step::Answer);
        assert_eq!(expire.check_invariants(), Ok(()));
    }

    /// A change made without its catch-up (the rule the module docs of
    /// `change` explain) is caught where the world checks invariants
    /// (debug builds, simulations), and by `check_invariants`.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: change: a change made came at CatchUp")
    )]
    fn a_change_made_before_its_catch_up_breaks_the_invariants() {
        let mut c = Changing::new(false);
        c.on_made(true);
        assert!(c.check_invariants().is_err());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: change: a replication held came at Settle")
    )]
    fn a_change_not_made_cannot_be_held_and_breaks_the_invariants() {
        let mut c = Changing::new(false);
        c.on_caught_up();
        c.on_made(false);
        c.on_held();
        assert!(c.check_invariants().is_err());
    }
}
