//! Which replicas a read asks, and when it is over: the rule of
//! `read::gather_from`, apart from I/O (as `write::round` is for writes).
//!
//! A read wants `want` answers (the level's `required`, or every live
//! replica for a reset learning the newest epoch) and succeeds with
//! `required`. It asks the live replicas in order (this node first when it
//! is one), never more at once than could still be needed: a replica that
//! fails is replaced by the next live one. It is over once `want` have
//! answered, once nothing is in flight and no replica is left to ask, or
//! at the read timeout.
//!
//! # Invariants ([`Gather::check_invariants`], after every event)
//! - Each replica is asked at most once, and answers or fails at most once.
//! - What answered or failed was asked; nothing answers and fails.
//! - Answers and asks in flight never exceed `want`.

use smallvec::SmallVec;

/// One read's asks and answers (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Gather {
    /// The live replicas, in the order they are asked.
    live: SmallVec<[usize; 4]>,
    want: usize,
    required: usize,
    /// `live[..asked]` were asked.
    asked: usize,
    answered: SmallVec<[usize; 4]>,
    failed: SmallVec<[usize; 4]>,
    timed_out: bool,
}

impl Gather {
    /// A read of `live` replicas that wants `want` answers and succeeds
    /// with `required`.
    pub(crate) fn new(live: &[usize], required: usize, want: usize) -> Gather {
        Gather {
            live: live.into(),
            want,
            required,
            asked: 0,
            answered: SmallVec::new(),
            failed: SmallVec::new(),
            timed_out: false,
        }
    }

    /// The next replica to ask now, if one is left and could be needed.
    pub(crate) fn next_ask(&mut self) -> Option<usize> {
        if self.timed_out
            || self.answered.len() + self.in_flight() >= self.want
            || self.asked >= self.live.len()
        {
            return None;
        }
        self.asked += 1;
        let r = self.live[self.asked - 1];
        self.checked();
        Some(r)
    }

    /// `replica` answered.
    pub(crate) fn on_answer(&mut self, replica: usize) {
        if self.waits_for(replica) {
            self.answered.push(replica);
        }
        self.checked();
    }

    /// `replica` failed (an error, a broken call).
    pub(crate) fn on_failure(&mut self, replica: usize) {
        if self.waits_for(replica) {
            self.failed.push(replica);
        }
        self.checked();
    }

    /// The read timeout passed: asks still in flight are given up.
    pub(crate) fn on_timeout(&mut self) {
        self.timed_out = true;
        self.checked();
    }

    /// Asks sent and not answered yet.
    pub(crate) fn in_flight(&self) -> usize {
        self.asked - self.answered.len() - self.failed.len()
    }

    /// Whether the read is over: `Some(true)` if enough answered,
    /// `Some(false)` if too few did and no more can.
    pub(crate) fn done(&self) -> Option<bool> {
        let over = self.answered.len() >= self.want
            || self.timed_out
            || (self.in_flight() == 0 && self.asked >= self.live.len());
        over.then_some(self.answered.len() >= self.required)
    }

    fn waits_for(&self, replica: usize) -> bool {
        !self.timed_out
            && self.live[..self.asked].contains(&replica)
            && !self.answered.contains(&replica)
            && !self.failed.contains(&replica)
    }

    fn checked(&self) {
        tally_world::invariant(|| self.check_invariants());
    }

    /// The module's invariants: which does not hold, if any.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.asked > self.live.len() {
            return Err(format!(
                "asked {} of {} replicas",
                self.asked,
                self.live.len()
            ));
        }
        let asked = &self.live[..self.asked];
        for (i, r) in asked.iter().enumerate() {
            if asked[..i].contains(r) {
                return Err(format!("replica {r} asked twice"));
            }
        }
        let over = self.answered.iter().chain(&self.failed);
        for (i, r) in over.clone().enumerate() {
            if !asked.contains(r) {
                return Err(format!("replica {r} answered unasked"));
            }
            if over.clone().take(i).any(|p| p == r) {
                return Err(format!("replica {r} answered twice"));
            }
        }
        if self.answered.len() + self.in_flight() > self.want {
            return Err(format!(
                "{} answered and {} in flight for {} wanted",
                self.answered.len(),
                self.in_flight(),
                self.want
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// Asks all it may now.
    fn asks(g: &mut Gather) -> Vec<usize> {
        std::iter::from_fn(|| g.next_ask()).collect()
    }

    #[test]
    fn a_failed_replica_is_replaced_by_the_next_live_one() {
        let mut g = Gather::new(&[0, 1, 2], 2, 2);
        assert_eq!(asks(&mut g), [0, 1]);
        g.on_answer(0);
        assert_eq!(asks(&mut g), Vec::<usize>::new());
        g.on_failure(1);
        assert_eq!(g.done(), None);
        assert_eq!(asks(&mut g), [2]);
        g.on_answer(2);
        assert_eq!(g.done(), Some(true));
        g.check_invariants().unwrap();
    }

    #[test]
    fn it_fails_when_too_few_are_left_or_at_the_timeout() {
        let mut g = Gather::new(&[0, 1], 2, 2);
        asks(&mut g);
        g.on_answer(0);
        g.on_failure(1);
        assert_eq!(g.done(), Some(false));

        let mut g = Gather::new(&[0, 1, 2], 2, 2);
        asks(&mut g);
        g.on_answer(1);
        g.on_timeout();
        assert_eq!(g.done(), Some(false));
        g.on_answer(0);
        assert_eq!(
            g.done(),
            Some(false),
            "answers after the timeout do not count"
        );
    }

    #[test]
    fn every_live_replica_is_waited_for_and_required_ones_suffice() {
        let mut g = Gather::new(&[0, 1, 2], 2, 3);
        assert_eq!(asks(&mut g), [0, 1, 2]);
        g.on_answer(0);
        g.on_answer(2);
        assert_eq!(g.done(), None);
        g.on_timeout();
        assert_eq!(g.done(), Some(true));
    }

    #[test]
    fn repeats_and_strangers_change_nothing_and_the_invariants_hold() {
        let mut g = Gather::new(&[0, 1, 2], 1, 1);
        assert_eq!(asks(&mut g), [0]);
        g.on_answer(0);
        g.on_answer(0);
        g.on_failure(0);
        g.on_answer(7);
        g.on_answer(2);
        assert_eq!((g.answered.as_slice(), g.failed.len()), (&[0][..], 0));
        g.check_invariants().unwrap();
        g.answered.push(2);
        let e = g.check_invariants().unwrap_err();
        assert!(e.contains("replica 2 answered unasked"), "{e}");
    }
}
