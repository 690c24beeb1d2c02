//! A replication round: the decisions of one write, apart from I/O.
//!
//! A leader has made a new shard state (an add's read-modify-write, or a
//! reset's new epoch) and sent it to the other replicas while its own
//! fsync runs. The round is told what happens — [`Round::on_local`],
//! [`Round::on_replica`], [`Round::unreachable`], [`Round::on_timeout`] —
//! and answers with a [`Verdict`] once it has one, and the replicas that
//! need a hint ([`Round::take_hints`]). It does no I/O and reads no clock:
//! the shell in `replicate` moves bytes and timers and feeds it.
//!
//! # The rules
//!
//! - **Retry** as soon as a replica answers `Stale`, whatever else has
//!   answered: it has seen a reset this node missed, so the state just made
//!   is in an epoch every replica discards, and acknowledging it would
//!   acknowledge an add that then disappears. The leader catches up to that
//!   epoch and makes the write again, at most [`STALE_ATTEMPTS_MAX`] times
//!   in all (then it fails, outcome unknown).
//! - **Acknowledged** once `required` copies are durable, whichever they
//!   are, **and the epoch is confirmed**: this node's record once its
//!   fsync succeeded counts as one copy, each replica that answered
//!   `Applied` as another. At QUORUM of three, two replicas that answer
//!   before this node's fsync ends make the write as durable as this node
//!   and one of them would: a node that crashes before its fsync comes back
//!   under a new counter id, and the replicas keep the old one's shard.
//!   The epoch is confirmed once another replica answered `Applied` (it
//!   holds no newer reset), or no other replica can still answer (all are
//!   down, failed or silent at the timeout). At QUORUM and ALL the copies
//!   already include such a replica; at ONE this makes the leader wait for
//!   the first other replica's answer besides its own fsync, so an add at
//!   ONE never lands in an epoch that a reset acknowledged at QUORUM or ALL
//!   has discarded (the two sets overlap). Only while every other replica
//!   is unreachable does ONE acknowledge on the leader's copy alone: that is
//!   what ONE is for, and such an add may be lost to a reset it could not
//!   see (see `docs/counters.md`).
//! - Otherwise nothing is decided while this node's fsync runs (its result
//!   is always waited for), nor while a replica may still answer before the
//!   write timeout.
//! - **Fail**, outcome unknown, otherwise: this node's fsync failed (the
//!   shard may already be on other replicas), or too few copies answered in
//!   time (the write is durable here and reaches the others by hints).
//! - **Hints** go to every replica that was down when the write was sent,
//!   that failed or refused it, or that was silent at the timeout. A
//!   `Stale` replica needs nothing from the old epoch: no hint.
//!
//! # Invariants
//! - A replica's answer is counted at most once; later ones are ignored.
//! - A replica is hinted at most once per round.
//! - Once given, a verdict never changes: later events only add hints.
//!
//! [`Round::check_invariants`] checks these after every event, with what
//! each verdict rests on (in debug builds and simulations, through
//! `tally_world::invariant`).

use crate::ring::Replicas;
use smallvec::SmallVec;
use tally_engine::Epoch;
use tally_net::wire::{Consistency, ErrorKind, PeerResponse, WireError};

/// Attempts of one write when resets keep overtaking it.
pub(crate) const STALE_ATTEMPTS_MAX: u32 = 3;

/// A replica's answer to a shard state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Merged and durable.
    Applied,
    /// The replica is at this newer epoch: the state was discarded.
    Stale(Epoch),
    /// An error, a refusal or a broken call.
    Failed,
}

impl Answer {
    /// What a peer's response means for the round.
    pub(crate) fn of(resp: &PeerResponse) -> Answer {
        match resp {
            PeerResponse::Applied => Answer::Applied,
            PeerResponse::Stale { epoch } => Answer::Stale(*epoch),
            _ => Answer::Failed,
        }
    }
}

/// How a round ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Enough durable copies: acknowledge.
    Ack,
    /// Catch up to this epoch and make the write again.
    Retry {
        /// The newest epoch a replica answered `Stale` with.
        epoch: Epoch,
    },
    /// Not acknowledged; the outcome is unknown.
    Fail(WireError),
}

/// This node's own copy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Local {
    Pending,
    Durable,
    Failed(WireError),
}

/// One other replica's part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    Waiting,
    Applied,
    Stale,
    Failed,
    Silent,
}

/// The state of one write's replication (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Round {
    cl: Consistency,
    required: usize,
    attempt: u32,
    timeout_ms: u64,
    local: Local,
    /// The other replicas, by node index.
    peers: SmallVec<[(usize, Peer); 4]>,
    newer_epoch: Option<Epoch>,
    timed_out: bool,
    hints: SmallVec<[usize; 2]>,
    decided: Option<Verdict>,
}

impl Round {
    /// A round for a write this node (`me`, one of `replicas`) leads, its
    /// `attempt`-th (from 1), with replicas given `timeout_ms`. Pending
    /// replicas (a ring change in progress) are sent the write and each
    /// must answer besides the level's count (`placement::write_acks`).
    pub(crate) fn new(
        cl: Consistency,
        replicas: &Replicas,
        me: usize,
        attempt: u32,
        timeout_ms: u64,
    ) -> Round {
        Round {
            cl,
            required: crate::cluster::placement::write_acks(replicas, cl),
            attempt,
            timeout_ms,
            local: Local::Pending,
            peers: replicas
                .all()
                .iter()
                .filter(|&&r| r != me)
                .map(|&r| (r, Peer::Waiting))
                .collect(),
            newer_epoch: None,
            timed_out: false,
            hints: SmallVec::new(),
            decided: None,
        }
    }

    /// This node's write is durable (`Ok`) or failed.
    pub(crate) fn on_local(&mut self, result: Result<(), WireError>) {
        if self.local == Local::Pending {
            self.local = match result {
                Ok(()) => Local::Durable,
                Err(e) => Local::Failed(e),
            };
        }
        self.decide();
    }

    /// `replica` answered.
    pub(crate) fn on_replica(&mut self, replica: usize, answer: Answer) {
        let Some(slot) = self.peer(replica) else {
            return;
        };
        if *slot != Peer::Waiting {
            return;
        }
        *slot = match answer {
            Answer::Applied => Peer::Applied,
            Answer::Stale(_) => Peer::Stale,
            Answer::Failed => Peer::Failed,
        };
        match answer {
            Answer::Stale(epoch) => {
                if self.newer_epoch.is_none_or(|e| epoch.id() > e.id()) {
                    self.newer_epoch = Some(epoch);
                }
            }
            Answer::Failed => self.hints.push(replica),
            Answer::Applied => {}
        }
        self.decide();
    }

    /// `replica` could not be sent the write (down, or the send failed).
    pub(crate) fn unreachable(&mut self, replica: usize) {
        self.on_replica(replica, Answer::Failed);
    }

    /// The write timeout passed: replicas still silent get hints.
    pub(crate) fn on_timeout(&mut self) {
        self.timed_out = true;
        for (r, p) in &mut self.peers {
            if *p == Peer::Waiting {
                *p = Peer::Silent;
                self.hints.push(*r);
            }
        }
        self.decide();
    }

    /// The verdict, once there is one.
    pub(crate) fn verdict(&self) -> Option<&Verdict> {
        self.decided.as_ref()
    }

    /// The replicas to hint since the last call.
    pub(crate) fn take_hints(&mut self) -> SmallVec<[usize; 2]> {
        std::mem::take(&mut self.hints)
    }

    /// Whether a replica other than this node confirmed the epoch
    /// (answered `Applied`), or none can any longer.
    fn epoch_confirmed(&self) -> bool {
        self.peers.iter().any(|(_, p)| *p == Peer::Applied)
            || self.peers.iter().all(|(_, p)| *p != Peer::Waiting)
    }

    /// Durable copies so far.
    fn acks(&self) -> usize {
        usize::from(self.local == Local::Durable)
            + self
                .peers
                .iter()
                .filter(|(_, p)| *p == Peer::Applied)
                .count()
    }

    fn peer(&mut self, replica: usize) -> Option<&mut Peer> {
        self.peers
            .iter_mut()
            .find(|(r, _)| *r == replica)
            .map(|(_, p)| p)
    }

    fn decide(&mut self) {
        if self.decided.is_none() {
            self.decided = self.judge();
        }
        tally_world::invariant(|| self.check_invariants());
    }

    /// The module's invariants, and what a verdict given rests on: which
    /// one does not hold, if any.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        for (i, (r, _)) in self.peers.iter().enumerate() {
            if self.peers[..i].iter().any(|(p, _)| p == r) {
                return Err(format!("replica {r} is in the round twice"));
            }
        }
        for (i, r) in self.hints.iter().enumerate() {
            if self.hints[..i].contains(r) {
                return Err(format!("replica {r} is hinted twice"));
            }
            let state = self.peers.iter().find(|(p, _)| p == r).map(|(_, s)| *s);
            if !matches!(state, Some(Peer::Failed | Peer::Silent)) {
                return Err(format!("replica {r} is hinted while {state:?}"));
            }
        }
        let waiting = self.peers.iter().any(|(_, p)| *p == Peer::Waiting);
        if self.timed_out && waiting {
            return Err("a replica is still waited for after the timeout".into());
        }
        let stale = self.peers.iter().any(|(_, p)| *p == Peer::Stale);
        if self.newer_epoch.is_some() != stale {
            return Err(format!(
                "a newer epoch {:?} without a stale replica, or the reverse",
                self.newer_epoch
            ));
        }
        match &self.decided {
            Some(Verdict::Ack) if self.acks() < self.required || !self.epoch_confirmed() => {
                Err(format!(
                    "acknowledged on {} of {} copies",
                    self.acks(),
                    self.required
                ))
            }
            Some(Verdict::Retry { .. }) if self.newer_epoch.is_none() => {
                Err("a retry without a newer epoch".into())
            }
            Some(Verdict::Fail(_))
                if self.newer_epoch.is_none()
                    && (self.local == Local::Pending || (waiting && !self.timed_out)) =>
            {
                Err("failed before this node's fsync and the replicas were done".into())
            }
            _ => Ok(()),
        }
    }

    /// The rules of the module docs, in order.
    fn judge(&self) -> Option<Verdict> {
        if let Some(epoch) = self.newer_epoch {
            return Some(self.stale(epoch));
        }
        let acks = self.acks();
        if acks >= self.required && self.epoch_confirmed() {
            return Some(Verdict::Ack);
        }
        let replicas_done = self.timed_out || self.peers.iter().all(|(_, p)| *p != Peer::Waiting);
        if self.local == Local::Pending || !replicas_done {
            return None;
        }
        if let Local::Failed(e) = &self.local {
            return Some(Verdict::Fail(WireError::unknown(
                ErrorKind::Storage,
                format!(
                    "{}; the shard may already be on other replicas, so the write may or may not have been applied",
                    e.message
                ),
            )));
        }
        Some(Verdict::Fail(WireError::unknown(
            ErrorKind::Timeout,
            format!(
                "{acks} of {} copies acknowledged within {} ms at {cl}; the write is durable on the leader and will reach the others, but may not be visible at {cl} yet",
                self.required,
                self.timeout_ms,
                cl = self.cl,
            ),
        )))
    }

    /// The verdict once a replica answered `Stale` with `epoch`.
    fn stale(&self, epoch: Epoch) -> Verdict {
        if self.attempt < STALE_ATTEMPTS_MAX {
            return Verdict::Retry { epoch };
        }
        Verdict::Fail(WireError::unknown(
            ErrorKind::Timeout,
            format!(
                "resets kept overtaking the write (now at epoch {}); it may or may not have been applied",
                epoch.n
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    //! Golden scripts: each case is a level, the events in order (`local
    //! ok|fail`, `nX applied|stale E|failed|down`, `timeout`) and, after
    //! each event, the verdict so far and the hints it produced.

    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use tally_net::wire::Outcome;

    /// Node `nX` is index X-1; this node is n1 of n1..n3.
    fn node(name: &str) -> usize {
        name.strip_prefix('n').unwrap().parse::<usize>().unwrap() - 1
    }

    fn verdict_text(v: Option<&Verdict>) -> String {
        match v {
            None => "-".into(),
            Some(Verdict::Ack) => "ack".into(),
            Some(Verdict::Retry { epoch }) => format!("retry {}", epoch.n),
            Some(Verdict::Fail(e)) => {
                // A round fails only after the state may have left this node.
                assert_eq!(e.outcome, Outcome::Unknown, "{e}");
                format!("fail {:?}", e.kind).to_lowercase()
            }
        }
    }

    /// Runs `script` (one event per line: `event => verdict [hints]`) on
    /// n1's write to n1, n2 and n3.
    fn run(cl: Consistency, attempt: u32, script: &str) {
        run_on(&Replicas::new(&[0, 1, 2], &[]), cl, attempt, script);
    }

    fn run_on(replicas: &Replicas, cl: Consistency, attempt: u32, script: &str) {
        let mut round = Round::new(cl, replicas, 0, attempt, 500);
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (event, want) = line.split_once("=>").unwrap();
            let words: Vec<&str> = event.split_whitespace().collect();
            match words[..] {
                ["local", "ok"] => round.on_local(Ok(())),
                ["local", "fail"] => {
                    round.on_local(Err(WireError::new(ErrorKind::Storage, "fsync failed")))
                }
                ["timeout"] => round.on_timeout(),
                [r, "applied"] => round.on_replica(node(r), Answer::Applied),
                [r, "stale", e] => {
                    round.on_replica(node(r), Answer::Stale(Epoch::at(e.parse().unwrap())))
                }
                [r, "failed"] => round.on_replica(node(r), Answer::Failed),
                [r, "down"] => round.unreachable(node(r)),
                _ => panic!("bad event {event:?}"),
            }
            round.check_invariants().unwrap();
            let hints: Vec<String> = round
                .take_hints()
                .iter()
                .map(|r| format!("n{}", r + 1))
                .collect();
            let mut got = verdict_text(round.verdict());
            if !hints.is_empty() {
                got = format!("{got} [{}]", hints.join(" "));
            }
            assert_eq!(
                got,
                want.trim(),
                "{cl} attempt {attempt}, after `{}`",
                event.trim()
            );
        }
    }

    #[test]
    fn a_pending_replica_needs_one_more_answer() {
        // n4 joins: n1, n2, n3 natural, n4 pending; QUORUM needs 2 + 1.
        let joining = Replicas::new(&[0, 1, 2], &[3]);
        run_on(
            &joining,
            Consistency::Quorum,
            1,
            "
            local ok => -
            n2 applied => -
            n4 applied => ack
            n3 failed => ack [n3]",
        );
        run_on(
            &joining,
            Consistency::Quorum,
            1,
            "
            local ok => -
            n4 down => - [n4]
            n2 applied => -
            n3 applied => ack",
        );
        run_on(
            &joining,
            Consistency::One,
            1,
            "
            local ok => -
            n4 applied => ack",
        );
    }

    #[test]
    fn quorum_acks_on_any_two_durable_copies() {
        run(
            Consistency::Quorum,
            1,
            "
            local ok => -
            n2 applied => ack
            n3 applied => ack",
        );
        // Two replicas before this node's fsync: acknowledged already.
        run(
            Consistency::Quorum,
            1,
            "
            n2 applied => -
            n3 applied => ack
            local ok => ack",
        );
        // This node's fsync failed but two replicas hold the write.
        run(
            Consistency::Quorum,
            1,
            "
            local fail => -
            n2 applied => -
            n3 applied => ack",
        );
    }

    #[test]
    fn one_acks_on_one_copy_once_another_replica_confirmed_the_epoch() {
        run(
            Consistency::One,
            1,
            "
            local ok => -
            n2 applied => ack
            n3 failed => ack [n3]",
        );
        // A failed replica confirms nothing; the next answer does.
        run(
            Consistency::One,
            1,
            "
            local ok => -
            n2 failed => - [n2]
            n3 applied => ack",
        );
        // A replica's copy is a copy, before this node's fsync ends.
        run(
            Consistency::One,
            1,
            "
            n3 applied => ack
            local ok => ack",
        );
        // No other replica can answer: the leader's copy alone.
        run(
            Consistency::One,
            1,
            "
            n2 down => - [n2]
            n3 down => - [n3]
            local ok => ack",
        );
        run(
            Consistency::One,
            1,
            "
            local ok => -
            timeout => ack [n2 n3]",
        );
    }

    #[test]
    fn all_needs_every_replica() {
        run(
            Consistency::All,
            1,
            "
            local ok => -
            n2 applied => -
            n3 applied => ack",
        );
        run(
            Consistency::All,
            1,
            "
            n3 down => - [n3]
            local ok => -
            n2 applied => fail timeout",
        );
    }

    #[test]
    fn the_local_fsync_is_always_waited_for_unless_replicas_suffice() {
        run(
            Consistency::Quorum,
            1,
            "
            n2 failed => - [n2]
            n3 failed => - [n3]
            timeout => -
            local ok => fail timeout",
        );
        run(
            Consistency::Quorum,
            1,
            "
            n2 applied => -
            n3 failed => - [n3]
            local fail => fail storage",
        );
    }

    #[test]
    fn a_stale_answer_is_never_acknowledged_and_means_retry_in_its_epoch() {
        run(
            Consistency::All,
            1,
            "
            local ok => -
            n2 stale 4 => retry 4
            n3 stale 7 => retry 4",
        );
        // Enough copies despite the stale one: still a retry, since the
        // state is in an epoch every replica will discard (issue 23).
        run(
            Consistency::Quorum,
            1,
            "
            local ok => -
            n2 stale 4 => retry 4
            n3 applied => retry 4",
        );
        // At ONE the leader's fsync alone does not acknowledge: the first
        // other replica is waited for, and it is a reset ahead.
        run(
            Consistency::One,
            1,
            "
            local ok => -
            n2 stale 4 => retry 4
            n3 applied => retry 4",
        );
        // Not waiting for this node's fsync: the state is discarded anyway.
        run(
            Consistency::Quorum,
            1,
            "
            n2 stale 4 => retry 4
            local fail => retry 4",
        );
        run(
            Consistency::All,
            STALE_ATTEMPTS_MAX,
            "
            local ok => -
            n2 stale 4 => fail timeout
            n3 applied => fail timeout",
        );
        // A reset that comes after the acknowledgment is concurrent with
        // the add: the verdict stays.
        run(
            Consistency::Quorum,
            1,
            "
            local ok => -
            n3 applied => ack
            n2 stale 4 => ack",
        );
    }

    #[test]
    fn the_invariants_catch_a_verdict_the_answers_do_not_support() {
        let replicas = Replicas::new(&[0, 1, 2], &[]);
        let mut round = Round::new(Consistency::Quorum, &replicas, 0, 1, 500);
        round.on_local(Ok(()));
        round.check_invariants().unwrap();
        round.decided = Some(Verdict::Ack);
        let e = round.check_invariants().unwrap_err();
        assert!(e.contains("acknowledged on 1 of 2"), "{e}");

        let mut round = Round::new(Consistency::Quorum, &replicas, 0, 1, 500);
        round.hints.push(1);
        let e = round.check_invariants().unwrap_err();
        assert!(e.contains("hinted while Some(Waiting)"), "{e}");
        round.peers[0].1 = Peer::Failed;
        round.check_invariants().unwrap();
        round.hints.push(1);
        let e = round.check_invariants().unwrap_err();
        assert!(e.contains("hinted twice"), "{e}");
    }

    #[test]
    fn silent_replicas_get_hints_at_the_timeout_once() {
        run(
            Consistency::Quorum,
            1,
            "
            local ok => -
            timeout => fail timeout [n2 n3]
            timeout => fail timeout
            n2 applied => fail timeout",
        );
        // Acknowledged first, then a straggler times out: it still gets its hint.
        run(
            Consistency::Quorum,
            1,
            "
            local ok => -
            n2 applied => ack
            timeout => ack [n3]",
        );
    }

    #[test]
    fn answers_count_once_and_the_verdict_stays() {
        run(
            Consistency::All,
            1,
            "
            local ok => -
            n2 applied => -
            n2 applied => -
            n2 failed => -
            n3 failed => fail timeout [n3]
            n3 applied => fail timeout",
        );
        run(
            Consistency::Quorum,
            1,
            "
            n2 down => - [n2]
            n2 down => -
            local ok => -
            n3 applied => ack",
        );
    }
}
