//! The steps of an admission of members to a unique counter by their
//! applier, apart from I/O: what `unique::lead` does next ([`Admission::step`])
//! as the engine admits and the replicas answer.
//!
//! # The steps
//! 1. `Admit` the members here (the count and the members in one record),
//!    and wait until it is durable.
//! 2. The engine refused: the count's deadline passed here. `ConfirmRestart`
//!    with the replicas (one may hold a later deadline), then admit again;
//!    after [`retry::confirm_again`]'s tries, fail (`retry::unconfirmed`).
//! 3. `Replicate` the count's shard and the member cells, a round each.
//!    Their verdicts (`retry::next`) answer, fail, or say a replica holds
//!    a newer epoch: `CatchUp` to it, and admit again in it, where the
//!    members of the discarded epoch read absent.
//! 4. `Answer` which members were new: those new in any attempt (a member
//!    new in a discarded epoch was new to the caller all the same).
//!
//! Each admission or confirmation is an attempt; after [`ATTEMPTS_MAX`]
//! the add fails, safe to retry.
//!
//! # Invariants ([`Admission::check_invariants`])
//! - An admission answers one flag per member.
//! - Cells are replicated only after the attempt's admission, and the
//!   members answered only once its rounds were acknowledged.
//! - At most [`ATTEMPTS_MAX`] attempts.

use tally_engine::Epoch;
use tally_net::wire::{ErrorKind, WireError};

use super::retry::{self, Next};

/// Admissions that met a newer epoch (or a deadline passed), tried at
/// most this often.
pub(super) const ATTEMPTS_MAX: u32 = 4;

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Admit the members here, the `attempt`-th time; answer with
    /// [`Admission::on_admitted`] once durable, or
    /// [`Admission::on_expired`].
    Admit { attempt: u32 },
    /// Read the replicas before the count restarts in a new epoch (its
    /// deadline passed here in `epoch`); then [`Admission::on_caught_up`].
    ConfirmRestart(Epoch),
    /// Replicate the cells of the `attempt`-th admission; then
    /// [`Admission::on_verdicts`].
    Replicate { attempt: u32 },
    /// Move the count here to the newer `epoch` a replica holds; then
    /// [`Admission::on_caught_up`].
    CatchUp(Epoch),
    /// Done: per member, whether it was new.
    Answer(Vec<bool>),
    /// Done: the add failed.
    Fail(WireError),
}

/// One admission of members (see the module docs).
#[derive(Debug)]
pub(super) struct Admission {
    members: usize,
    attempt: u32,
    step: Step,
    /// Per member, new in some attempt so far.
    new: Option<Vec<bool>>,
    /// What went out of order: for the invariants.
    broken: Option<String>,
}

impl Admission {
    /// An admission of `members` members.
    pub(super) fn new(members: usize) -> Admission {
        Admission {
            members,
            attempt: 1,
            step: Step::Admit { attempt: 1 },
            new: None,
            broken: None,
        }
    }

    /// What to do next.
    pub(super) fn step(&self) -> Step {
        self.step.clone()
    }

    /// The engine admitted the members, `new` saying which were new, and
    /// the admission is durable.
    pub(super) fn on_admitted(&mut self, new: &[bool]) {
        self.expect(matches!(self.step, Step::Admit { .. }), "an admission");
        if new.len() != self.members {
            self.broke(format!("{} flags for {} members", new.len(), self.members));
        }
        let merged = match self.new.take() {
            Some(before) => before.iter().zip(new).map(|(a, b)| *a || *b).collect(),
            None => new.to_vec(),
        };
        self.new = Some(merged);
        self.step = Step::Replicate {
            attempt: self.attempt,
        };
        tally_world::invariant(|| self.check_invariants());
    }

    /// The engine refused: the count's deadline passed here in `epoch`.
    pub(super) fn on_expired(&mut self, epoch: Epoch) {
        self.expect(matches!(self.step, Step::Admit { .. }), "an expiry");
        self.step = match retry::confirm_again(self.attempt) {
            true => Step::ConfirmRestart(epoch),
            false => Step::Fail(retry::unconfirmed(epoch)),
        };
        tally_world::invariant(|| self.check_invariants());
    }

    /// The replicated cells' rounds ended: what their verdicts say.
    pub(super) fn on_verdicts(&mut self, next: Next<'_>) {
        self.expect(matches!(self.step, Step::Replicate { .. }), "verdicts");
        self.step = match next {
            Next::Answer => Step::Answer(self.new.clone().unwrap_or_default()),
            Next::Fail(e) => Step::Fail(e.clone()),
            Next::Again(epoch) => Step::CatchUp(epoch),
        };
        tally_world::invariant(|| self.check_invariants());
    }

    /// The restart was confirmed, or the count caught up: admit again,
    /// unless the attempts are spent.
    pub(super) fn on_caught_up(&mut self) {
        self.expect(
            matches!(self.step, Step::ConfirmRestart(_) | Step::CatchUp(_)),
            "a catch-up",
        );
        self.step = if self.attempt >= ATTEMPTS_MAX {
            Step::Fail(WireError::unknown(
                ErrorKind::Unavailable,
                "the unique counter kept being reset while members were added; \
                 adding them again is safe",
            ))
        } else {
            self.attempt += 1;
            Step::Admit {
                attempt: self.attempt,
            }
        };
        tally_world::invariant(|| self.check_invariants());
    }

    fn expect(&mut self, ok: bool, what: &str) {
        if !ok {
            let at = format!("{what} came at {:?}", self.step);
            self.broke(at);
        }
    }

    fn broke(&mut self, what: String) {
        self.broken.get_or_insert(what);
    }

    /// What does not hold of the invariants (see the module docs).
    pub(super) fn check_invariants(&self) -> Result<(), String> {
        if let Some(what) = &self.broken {
            return Err(format!("admission: {what}"));
        }
        if self.attempt > ATTEMPTS_MAX {
            return Err(format!("admission: attempt {}", self.attempt));
        }
        if let Step::Answer(flags) = &self.step
            && flags.len() != self.members
        {
            return Err(format!(
                "admission: {} flags answered for {} members",
                flags.len(),
                self.members
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
    fn an_admission_acknowledged_answers_its_flags() {
        let mut a = Admission::new(2);
        assert_eq!(a.step(), Step::Admit { attempt: 1 });
        a.on_admitted(&[true, false]);
        assert_eq!(a.step(), Step::Replicate { attempt: 1 });
        a.on_verdicts(Next::Answer);
        assert_eq!(a.step(), Step::Answer(vec![true, false]));
        assert_eq!(a.check_invariants(), Ok(()));
    }

    #[test]
    fn a_member_new_in_a_discarded_epoch_stays_new() {
        let mut a = Admission::new(3);
        a.on_admitted(&[true, false, false]);
        a.on_verdicts(Next::Again(epoch(5)));
        assert_eq!(a.step(), Step::CatchUp(epoch(5)));
        a.on_caught_up();
        assert_eq!(a.step(), Step::Admit { attempt: 2 });
        // In the new epoch every member reads absent: all new.
        a.on_admitted(&[false, true, false]);
        assert_eq!(a.step(), Step::Replicate { attempt: 2 });
        a.on_verdicts(Next::Answer);
        assert_eq!(a.step(), Step::Answer(vec![true, true, false]));
    }

    #[test]
    fn an_expired_count_is_confirmed_then_admitted_again_a_few_times() {
        let mut a = Admission::new(1);
        a.on_expired(epoch(1));
        assert_eq!(a.step(), Step::ConfirmRestart(epoch(1)));
        a.on_caught_up();
        assert_eq!(a.step(), Step::Admit { attempt: 2 });
        a.on_expired(epoch(2));
        a.on_caught_up();
        a.on_expired(epoch(3));
        assert!(
            matches!(a.step(), Step::Fail(e) if e.message.contains("kept moving")),
            "{:?}",
            a.step()
        );
        assert_eq!(a.check_invariants(), Ok(()));
    }

    #[test]
    fn an_admission_overtaken_too_often_fails_safe_to_retry() {
        let mut a = Admission::new(1);
        for _ in 1..ATTEMPTS_MAX {
            a.on_admitted(&[true]);
            a.on_verdicts(Next::Again(epoch(9)));
            a.on_caught_up();
        }
        a.on_admitted(&[false]);
        a.on_verdicts(Next::Again(epoch(10)));
        a.on_caught_up();
        assert!(
            matches!(a.step(), Step::Fail(e) if e.message.contains("kept being reset")),
            "{:?}",
            a.step()
        );
    }

    #[test]
    fn a_failed_round_fails_the_admission() {
        let mut a = Admission::new(1);
        a.on_admitted(&[true]);
        let e = WireError::new(ErrorKind::Timeout, "no quorum");
        a.on_verdicts(Next::Fail(&e));
        assert_eq!(a.step(), Step::Fail(e));
    }

    /// An engine that answers a flag too few is caught where the world
    /// checks invariants (debug builds, simulations), and by
    /// `check_invariants`.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: admission: 1 flags for 2 members")
    )]
    fn flags_for_other_members_break_the_invariants() {
        let mut a = Admission::new(2);
        a.on_admitted(&[true]);
        assert!(a.check_invariants().is_err());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: admission: verdicts came at Admit")
    )]
    fn verdicts_before_an_admission_break_the_invariants() {
        let mut a = Admission::new(1);
        a.on_verdicts(Next::Answer);
        assert!(a.check_invariants().is_err());
    }
}
