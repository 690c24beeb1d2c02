//! The decisions of hint delivery, apart from I/O: which peers the
//! delivery task serves ([`peer_step`]), and in one round of deliveries
//! to a peer, which keys are sent and which count as delivered and leave
//! its hints ([`Round`]). The task in `handoff` reads cells, sends them
//! and feeds the answers in.
//!
//! # The rules
//! - A peer is served when it is in the ring, has hints pending and can
//!   write (one that cannot would refuse every cell: its hints wait until
//!   it can). A node that left the ring needs none, since its ranges moved
//!   with every write they had: its hints, which writes begun before it
//!   left can still make, are forgotten.
//! - A key of a flushed generation is done with: nothing reads it, and the
//!   peer would refuse it (`generations`). It is delivered without a send.
//! - Any other key is sent as its current cell, once read; a key whose
//!   cell cannot be read is not sent and stays pending.
//! - A sent key is delivered when the peer answers `Applied`, or `Stale`
//!   (it holds a newer reset, which the cell's state is older than).
//!   Anything else (an error, no answer) leaves it pending for a later
//!   round.
//!
//! # Invariants ([`Round::check_invariants`])
//! - A key's answer is counted at most once, and only for a key sent.
//! - The keys delivered are the flushed ones and those answered
//!   `Applied` or `Stale`, each once.

use tally_engine::Key;
use tally_net::wire::PeerResponse;

/// What the delivery task does about one peer in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerStep {
    /// Nothing now.
    Skip,
    /// Drop its hints: it left the ring.
    Forget,
    /// A round of deliveries.
    Deliver,
}

/// What to do about a peer that has `pending` hinted keys, has `left` the
/// ring or not, and can write or not (`writable`, asked only when it
/// matters).
pub(crate) fn peer_step(left: bool, pending: usize, writable: impl FnOnce() -> bool) -> PeerStep {
    match (left, pending) {
        (true, 0) => PeerStep::Skip,
        (true, _) => PeerStep::Forget,
        (false, 0) => PeerStep::Skip,
        (false, _) => match writable() {
            true => PeerStep::Deliver,
            false => PeerStep::Skip,
        },
    }
}

/// Whether a peer's answer to a hinted cell takes the key off its hints.
pub(crate) fn taken(answer: &PeerResponse) -> bool {
    matches!(answer, PeerResponse::Applied | PeerResponse::Stale { .. })
}

/// Where one listed key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Of a flushed generation: delivered without a send.
    Flushed,
    /// To be read and sent.
    Listed,
    /// Its cell could not be read: not sent, still pending.
    Unreadable,
    /// Sent; no answer yet.
    Sent,
    /// The peer took it.
    Taken,
    /// The peer did not take it: still pending.
    Refused,
}

/// One round of deliveries to one peer (see the module docs).
#[derive(Debug)]
pub(crate) struct Round {
    /// The keys listed for the round, each with its hint's generation and
    /// where it is.
    keys: Vec<(Key, u64, Status)>,
    /// Answers that came for a key not waiting for one (ignored).
    stray_answers: u32,
}

impl Round {
    /// A round of `listed` keys, those of flushed generations (`flushed`)
    /// already done with.
    pub(crate) fn new(listed: Vec<(Key, u64)>, flushed: impl Fn(&Key) -> bool) -> Round {
        let keys = listed
            .into_iter()
            .map(|(key, generation)| {
                let status = match flushed(&key) {
                    true => Status::Flushed,
                    false => Status::Listed,
                };
                (key, generation, status)
            })
            .collect();
        Round {
            keys,
            stray_answers: 0,
        }
    }

    /// The keys whose cells to read and send, by index.
    pub(crate) fn to_send(&self) -> Vec<(usize, Key)> {
        self.keys
            .iter()
            .enumerate()
            .filter(|(_, (_, _, s))| *s == Status::Listed)
            .map(|(i, (key, _, _))| (i, key.clone()))
            .collect()
    }

    /// Key `i`'s cell could not be read: it stays pending.
    pub(crate) fn unreadable(&mut self, i: usize) {
        self.step(i, Status::Listed, Status::Unreadable);
    }

    /// Key `i`'s cell is on its way.
    pub(crate) fn sent(&mut self, i: usize) {
        self.step(i, Status::Listed, Status::Sent);
    }

    /// The peer answered key `i`: it took it, or not.
    pub(crate) fn on_answer(&mut self, i: usize, taken: bool) {
        let to = match taken {
            true => Status::Taken,
            false => Status::Refused,
        };
        self.step(i, Status::Sent, to);
    }

    /// The keys delivered, each with its generation: for the hints.
    pub(crate) fn delivered(&self) -> Vec<(Key, u64)> {
        self.keys
            .iter()
            .filter(|(_, _, s)| matches!(s, Status::Flushed | Status::Taken))
            .map(|(key, generation, _)| (key.clone(), *generation))
            .collect()
    }

    /// Moves key `i` from `from` to `to`; any other move is ignored (an
    /// answer counted twice, say), and counted.
    fn step(&mut self, i: usize, from: Status, to: Status) {
        match self.keys.get_mut(i) {
            Some((_, _, s)) if *s == from => *s = to,
            _ => self.stray_answers += 1,
        }
        tally_world::invariant(|| self.check_invariants());
    }

    /// What does not hold of the invariants (see the module docs).
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.stray_answers > 0 {
            return Err(format!(
                "hint delivery: {} answers or steps came for a key not waiting for them",
                self.stray_answers
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_engine::Epoch;

    fn key(p: &str) -> Key {
        Key::new(p.as_bytes(), b"").unwrap()
    }

    #[test]
    fn a_peer_is_served_when_in_the_ring_hinted_and_writable() {
        let writable = || true;
        let unwritable = || false;
        assert_eq!(peer_step(false, 3, writable), PeerStep::Deliver);
        assert_eq!(peer_step(false, 3, unwritable), PeerStep::Skip);
        assert_eq!(peer_step(false, 0, writable), PeerStep::Skip);
        assert_eq!(peer_step(true, 3, writable), PeerStep::Forget);
        assert_eq!(peer_step(true, 0, writable), PeerStep::Skip);
        // Whether it can write is not asked of a peer with nothing to take.
        assert_eq!(
            peer_step(false, 0, || panic!("asked without hints")),
            PeerStep::Skip
        );
    }

    #[test]
    fn applied_and_stale_take_a_key_and_nothing_else_does() {
        assert!(taken(&PeerResponse::Applied));
        assert!(taken(&PeerResponse::Stale {
            epoch: Epoch::default()
        }));
        assert!(!taken(&PeerResponse::Pong { ring: 1 }));
    }

    #[test]
    fn flushed_keys_are_delivered_unsent_and_the_others_once_taken() {
        let listed = vec![(key("a"), 1), (key("old"), 2), (key("b"), 3), (key("c"), 4)];
        let mut round = Round::new(listed, |k| k.partition() == b"old");
        let to_send: Vec<usize> = round.to_send().into_iter().map(|(i, _)| i).collect();
        assert_eq!(to_send, [0, 2, 3]);
        round.unreadable(3);
        round.sent(0);
        round.sent(2);
        round.on_answer(0, true);
        round.on_answer(2, false);
        assert_eq!(round.delivered(), [(key("a"), 1), (key("old"), 2)]);
        assert_eq!(round.check_invariants(), Ok(()));
    }

    /// A second answer for a key is ignored (it stays where the first put
    /// it), and is a broken invariant: where the world checks them (debug
    /// builds, simulations) the round says so.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: hint delivery: 1 answers")
    )]
    fn a_second_answer_is_ignored_and_breaks_the_invariants() {
        let mut round = Round::new(vec![(key("a"), 1)], |_| false);
        round.sent(0);
        round.on_answer(0, false);
        round.on_answer(0, true);
        assert!(round.delivered().is_empty());
        assert!(round.check_invariants().is_err());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: hint delivery: 1 answers")
    )]
    fn an_answer_for_a_key_not_sent_is_ignored_and_breaks_the_invariants() {
        let mut round = Round::new(vec![(key("a"), 1)], |_| false);
        round.on_answer(0, true);
        assert!(round.delivered().is_empty());
        assert!(round.check_invariants().is_err());
    }
}
