//! The steps of one attempt at adds this node leads (the adds to one
//! counter that `batch` combines, or that `once` groups with their ids),
//! apart from I/O: what the lead does next ([`Attempt::step`]) as the
//! engine and the replicas answer.
//!
//! # The steps
//! 1. `Seal`: the engine makes the adds here. Sealed: step 2. Handed to
//!    its sealer (a cell adds wait on, a write stall, ids not durable
//!    yet): `Wait` for it, then as here. Refused because the counter's
//!    deadline passed here: `Confirm` the restart with the replicas
//!    (`change::confirm_restart`) while attempts are left
//!    (`retry::confirm_again`), else `Unconfirmed`. A sum that may
//!    overflow where its adds alone may not: `Again`, each alone, at the
//!    same attempt. Refused for another reason: `Fail`.
//! 2. `Replicate` the shard by the round, and judge its verdict by
//!    `retry::next`. Acknowledged: `Answer`. Not: `Fail`. A replica holds
//!    a newer epoch: `CatchUp` to it (`retry::catch_up`).
//! 3. Caught up, or the restart confirmed: `Again`, one attempt on (a
//!    catch-up or a confirmation that failed: `Fail`).
//!
//! `Answer`, `Fail`, `Unconfirmed` and `Again` end the attempt: the adds
//! queued again are the next attempt's.
//!
//! # Invariants ([`Attempt::check_invariants`], after every event)
//! - Adds are queued again one attempt on only after a catch-up or a
//!   confirmation that succeeded, and at the same attempt only split.
//! - A restart is confirmed only while attempts are left.
//! - Adds are answered only once a round acknowledged what was sealed.
//! - Nothing happens to an attempt that ended.

use tally_engine::Epoch;
use tally_net::wire::WireError;

use super::retry::{self, Next};
use super::round::Verdict;

/// Why adds are queued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// Their sum may overflow where they alone may not: each alone.
    Split,
    /// This node caught up to a newer epoch a replica holds: applied
    /// again in it.
    CaughtUp,
    /// Their counter's restart was confirmed with the replicas.
    Confirmed,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Make the adds here; then [`Attempt::on_sealed`], `on_queued`,
    /// `on_expired`, `on_splits` or `on_refused`.
    Seal,
    /// Wait for the engine's sealer; then as at `Seal`.
    Wait,
    /// Replicate the shard; then [`Attempt::on_verdict`].
    Replicate,
    /// Move the cell here to the newer `Epoch` a replica holds; then
    /// [`Attempt::on_caught_up`].
    CatchUp(Epoch),
    /// Confirm the restart of the counter, expired here in `Epoch`; then
    /// [`Attempt::on_confirmed`].
    Confirm(Epoch),
    /// Done: queue the adds again, at attempt `attempt`.
    Again { attempt: u32, why: Why },
    /// Done: answer the value the engine made.
    Answer,
    /// Done: answer this error.
    Fail(WireError),
    /// Done: the counter's epoch kept moving (now `Epoch`) while its
    /// restart was confirmed (`retry::unconfirmed`).
    Unconfirmed(Epoch),
}

impl Step {
    fn ended(&self) -> bool {
        matches!(
            self,
            Step::Again { .. } | Step::Answer | Step::Fail(_) | Step::Unconfirmed(_)
        )
    }
}

/// One attempt at adds (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    /// The attempt's number: 0 for adds as they came.
    n: u32,
    step: Step,
    /// What went out of order: for the invariants.
    broken: Option<String>,
}

impl Attempt {
    /// The `n`-th attempt at adds, to be sealed.
    pub(crate) fn new(n: u32) -> Attempt {
        Attempt {
            n,
            step: Step::Seal,
            broken: None,
        }
    }

    /// The attempt's number (a round's, for `round::STALE_ATTEMPTS_MAX`).
    pub(crate) fn n(&self) -> u32 {
        self.n
    }

    /// What to do next.
    pub(super) fn step(&self) -> Step {
        self.step.clone()
    }

    /// The engine sealed the adds.
    pub(super) fn on_sealed(&mut self) {
        self.sealing("a seal");
        self.go(Step::Replicate);
    }

    /// The engine handed the adds to its sealer.
    pub(super) fn on_queued(&mut self) {
        self.expect(self.step == Step::Seal, "a hand-over to the sealer");
        self.go(Step::Wait);
    }

    /// The engine refused the adds: their counter's deadline passed here
    /// in `epoch`, and its restart is not confirmed.
    pub(super) fn on_expired(&mut self, epoch: Epoch) {
        self.sealing("an expired counter");
        self.go(match retry::confirm_again(self.n) {
            true => Step::Confirm(epoch),
            false => Step::Unconfirmed(epoch),
        });
    }

    /// The engine refused the adds' sum, which may overflow where each
    /// alone may not.
    pub(super) fn on_splits(&mut self) {
        self.sealing("a split");
        self.go(Step::Again {
            attempt: self.n,
            why: Why::Split,
        });
    }

    /// The engine refused the adds for good.
    pub(super) fn on_refused(&mut self, e: WireError) {
        self.sealing("a refusal");
        self.go(Step::Fail(e));
    }

    /// The round of the sealed shard ended with `verdict`.
    pub(super) fn on_verdict(&mut self, verdict: &Verdict) {
        self.expect(self.step == Step::Replicate, "a verdict");
        self.go(match retry::next([verdict]) {
            Next::Answer => Step::Answer,
            Next::Fail(e) => Step::Fail(e.clone()),
            Next::Again(epoch) => Step::CatchUp(epoch),
        });
    }

    /// The catch-up to a newer epoch ended.
    pub(super) fn on_caught_up(&mut self, result: Result<(), WireError>) {
        self.expect(matches!(self.step, Step::CatchUp(_)), "a catch-up");
        self.again(result, Why::CaughtUp);
    }

    /// The confirmation of the counter's restart ended.
    pub(super) fn on_confirmed(&mut self, result: Result<(), WireError>) {
        self.expect(matches!(self.step, Step::Confirm(_)), "a confirmation");
        self.again(result, Why::Confirmed);
    }

    fn again(&mut self, result: Result<(), WireError>, why: Why) {
        self.go(match result {
            Ok(()) => Step::Again {
                attempt: self.n + 1,
                why,
            },
            Err(e) => Step::Fail(e),
        });
    }

    /// Expects the engine's answer to a seal (made at once or by its
    /// sealer).
    fn sealing(&mut self, what: &str) {
        self.expect(matches!(self.step, Step::Seal | Step::Wait), what);
    }

    fn go(&mut self, step: Step) {
        if !self.step.ended() {
            self.step = step;
        }
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
            return Err(format!("attempt {}: {what}", self.n));
        }
        match self.step {
            Step::Again { attempt, why } => {
                let want = match why {
                    Why::Split => self.n,
                    Why::CaughtUp | Why::Confirmed => self.n + 1,
                };
                if attempt != want {
                    return Err(format!(
                        "attempt {}: queued again as attempt {attempt} ({why:?})",
                        self.n
                    ));
                }
            }
            Step::Confirm(_) if !retry::confirm_again(self.n) => {
                return Err(format!(
                    "attempt {}: a restart confirmed with no attempt left",
                    self.n
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::write::round::STALE_ATTEMPTS_MAX;
    use tally_net::wire::ErrorKind;

    fn epoch(n: u64) -> Epoch {
        Epoch {
            n,
            ..Epoch::default()
        }
    }

    fn late() -> WireError {
        WireError::new(ErrorKind::Timeout, "late")
    }

    #[test]
    fn adds_sealed_and_acknowledged_are_answered() {
        let mut a = Attempt::new(0);
        assert_eq!(a.step(), Step::Seal);
        a.on_sealed();
        assert_eq!(a.step(), Step::Replicate);
        a.on_verdict(&Verdict::Ack);
        assert_eq!(a.step(), Step::Answer);
        assert_eq!(a.check_invariants(), Ok(()));

        let mut hot = Attempt::new(1);
        hot.on_queued();
        assert_eq!(hot.step(), Step::Wait);
        hot.on_sealed();
        hot.on_verdict(&Verdict::Fail(late()));
        assert_eq!(hot.step(), Step::Fail(late()));
    }

    #[test]
    fn adds_overtaken_by_a_newer_epoch_catch_up_and_go_again_one_attempt_on() {
        let mut a = Attempt::new(0);
        a.on_sealed();
        a.on_verdict(&Verdict::Retry { epoch: epoch(4) });
        assert_eq!(a.step(), Step::CatchUp(epoch(4)));
        a.on_caught_up(Ok(()));
        let again = Step::Again {
            attempt: 1,
            why: Why::CaughtUp,
        };
        assert_eq!(a.step(), again);

        let mut failed = Attempt::new(0);
        failed.on_sealed();
        failed.on_verdict(&Verdict::Retry { epoch: epoch(4) });
        failed.on_caught_up(Err(late()));
        assert_eq!(failed.step(), Step::Fail(late()));
    }

    #[test]
    fn an_expired_counter_is_confirmed_while_attempts_are_left() {
        let mut a = Attempt::new(0);
        a.on_expired(epoch(2));
        assert_eq!(a.step(), Step::Confirm(epoch(2)));
        a.on_confirmed(Ok(()));
        let again = Step::Again {
            attempt: 1,
            why: Why::Confirmed,
        };
        assert_eq!(a.step(), again);

        let mut last = Attempt::new(STALE_ATTEMPTS_MAX);
        last.on_queued();
        last.on_expired(epoch(9));
        assert_eq!(last.step(), Step::Unconfirmed(epoch(9)));
        assert_eq!(last.check_invariants(), Ok(()));
    }

    #[test]
    fn a_sum_that_splits_goes_again_alone_at_the_same_attempt() {
        let mut a = Attempt::new(2);
        a.on_splits();
        let again = Step::Again {
            attempt: 2,
            why: Why::Split,
        };
        assert_eq!(a.step(), again);
        let mut refused = Attempt::new(0);
        refused.on_refused(late());
        assert_eq!(refused.step(), Step::Fail(late()));
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: attempt 0: a refusal came at Again")
    )]
    fn an_attempt_that_ended_stays_ended_and_an_event_after_its_end_breaks_the_invariants() {
        let mut a = Attempt::new(0);
        a.on_splits();
        let ended = a.step();
        a.on_refused(late());
        assert_eq!(a.step(), ended);
        assert!(a.check_invariants().is_err(), "a refusal after the end");
    }

    /// A verdict for adds not sealed yet is caught where the world checks
    /// invariants (debug builds, simulations), and by `check_invariants`.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: attempt 0: a verdict came at Seal")
    )]
    fn a_verdict_before_the_seal_breaks_the_invariants() {
        let mut a = Attempt::new(0);
        a.on_verdict(&Verdict::Ack);
        assert!(a.check_invariants().is_err());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: attempt 0: a catch-up came at Replicate")
    )]
    fn a_catch_up_no_replica_asked_for_breaks_the_invariants() {
        let mut a = Attempt::new(0);
        a.on_sealed();
        a.on_caught_up(Ok(()));
        assert!(a.check_invariants().is_err());
    }
}
