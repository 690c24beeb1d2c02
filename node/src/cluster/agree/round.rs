//! One ballot of an agreed change: the proposer's decisions, apart from I/O.
//!
//! A change of a partition's registers (a `SET NX`, a compare-and-set, a
//! lease) is one single-decree Paxos instance among the partition's
//! replicas, CASPaxos-style: the proposer prepares a ballot, reads the
//! newest state a quorum holds, makes the next state from it and proposes
//! that. The round is told what happens ([`Round::on_promise`],
//! [`Round::on_accepted`], [`Round::on_rejected`], [`Round::on_failed`],
//! [`Round::on_timeout`]) and answers with a [`Verdict`] once it has one. It
//! does no I/O and reads no clock: the shell in `agree::propose` sends,
//! waits and feeds it. [`plan`] says what to propose from what was read.
//!
//! # The rules
//!
//! - **Participants** are the natural replicas and, while the ring changes,
//!   the pending ones; a quorum is a majority of the natural ones plus one
//!   answer for each pending one (as Cassandra counts them), so that a
//!   quorum of the old placement and one of the new always meet.
//! - **Prepare.** Once a quorum promised, the state is the newest value
//!   any of them reported, accepted or committed ([`Read`]). An accepted
//!   value newer than every committed one may be in flight: the next
//!   proposal is made from it, so it is finished before anything new
//!   (its proposer may have been told nothing, or may still be waiting).
//!   Unless the quorum itself accepted it: then it is decided already.
//! - **First ballots** (`tally_model::paxos`) skip the prepare: the
//!   proposal is made from nothing, and is decided only once every
//!   participant accepted it (each takes one first ballot at most, and
//!   only while it holds nothing), so that a prepare's quorum can tell:
//!   a first ballot's value may be decided only where every promise of
//!   a natural replica in the quorum reports it, and is then finished;
//!   else none was, nor can be once they promised. A pending replica's
//!   promise says nothing either way: it may have become a participant
//!   after the value was decided, before the ring change's handoff
//!   brought it the value. No first ballot is made while a replica is
//!   pending (`agree::propose`).
//! - **Propose.** Once a quorum accepted, the proposal is decided: its
//!   proposer answers, and tells every participant (a commit it does not
//!   wait for; the next prepare finishes it anyway where it was lost).
//! - **Outbid** once a participant rejects with a later promise and a
//!   quorum can no longer be reached without it: the shell retries with a
//!   ballot later than every one seen, after a random backoff.
//! - **Unavailable** once failures alone (down, broken, silent at the
//!   timeout) leave too few participants for a quorum.
//! - Answers are counted once per participant and phase; a verdict, once
//!   given, never changes within its phase.
//!
//! [`Round::check_invariants`] checks after every answer what these rules
//! promise (two quorums meet, a first ballot needs every participant, a
//! verdict rests on the answers it counts), in debug builds and in
//! simulations (`tally_world::invariant`).
//!
//! # What a quorum proves
//!
//! A value is decided once a quorum accepted it at its ballot. A prepare
//! that a quorum promised meets every quorum that accepted anything at a
//! lower ballot, so the newest accepted value it reads is at least as new
//! as every decided one; proposing from it (never from something older)
//! keeps every decided change in every later state. A promise also makes
//! its acceptor refuse every lower ballot from then on, so a proposer that
//! read an old state cannot slip a value in behind a newer one.

use smallvec::SmallVec;
use tally_net::ring::Replicas;
use tally_net::wire::{Accepted, Ballot, Promise, Registers};

use super::history::Rounds;

/// Ballots one change tries before it gives up (each after a random
/// backoff of up to 200 ms: a few seconds in all, so that a change to a
/// hot key waits its turn rather than fails).
pub(crate) const ATTEMPTS_MAX: u32 = 30;

/// What the shell does next, once the round has a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A quorum promised: this is what the partition holds. Propose
    /// ([`Round::propose`]) what [`plan`] says.
    Read(Read),
    /// A quorum accepted the proposal: decided. Commit it everywhere.
    Decided(Accepted),
    /// A later ballot was promised: retry with a ballot above `seen`.
    Outbid {
        /// The latest ballot a participant promised.
        seen: Ballot,
    },
    /// Too few participants answered for a quorum.
    Unavailable {
        /// How many answered.
        answered: usize,
        /// How many a quorum needs.
        required: usize,
    },
}

/// What a quorum of promises says the partition holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    /// The newest value reported, accepted or committed.
    pub(crate) current: Accepted,
    /// Whether `current` was only accepted, not known decided.
    pub(crate) in_flight: bool,
    /// Participants whose committed value is older than the newest
    /// committed one reported: the shell sends them that commit.
    pub(crate) behind: Vec<usize>,
    /// The newest committed value reported.
    pub(crate) committed: Accepted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Preparing,
    Proposing,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    Waiting,
    /// Promised, with what it held (prepare), or accepted (propose).
    Yes(Option<Box<(Option<Accepted>, Accepted)>>),
    Rejected,
    Failed,
}

/// One ballot's prepare and proposal (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Round {
    ballot: Ballot,
    /// The broken build's seam (`Fault::FirstBallotAsRegular`): first
    /// ballots judged as regular ones.
    naive: bool,
    required: usize,
    /// How many of `slots`, from the first, are natural replicas (the
    /// rest are pending).
    natural: usize,
    phase: Phase,
    slots: SmallVec<[(usize, Slot); 4]>,
    /// The latest ballot a rejection carried.
    seen: Option<Ballot>,
    proposal: Option<Accepted>,
    verdict: Option<Verdict>,
}

impl Round {
    /// A round of `ballot` among `replicas` (natural, then pending).
    pub(crate) fn new(ballot: Ballot, replicas: &Replicas) -> Round {
        let required = match ballot.is_first() {
            true => replicas.all().len(),
            false => quorum(replicas),
        };
        Round {
            ballot,
            naive: false,
            required,
            natural: replicas.len(),
            phase: Phase::Preparing,
            slots: replicas.all().iter().map(|&r| (r, Slot::Waiting)).collect(),
            seen: None,
            proposal: None,
            verdict: None,
        }
    }

    /// This round, its first ballots judged as regular ones: a broken
    /// build for the chaos checker (`Fault::FirstBallotAsRegular`).
    pub(crate) fn naive(self, replicas: &Replicas) -> Round {
        Round {
            naive: true,
            required: quorum(replicas),
            ..self
        }
    }

    /// The participants, by node index: the natural replicas, then the
    /// pending ones.
    pub(crate) fn participants(&self) -> Vec<usize> {
        self.slots.iter().map(|(r, _)| *r).collect()
    }

    /// Skips the prepare of a first ballot ([`Ballot::first`]): the
    /// partition reads as holding nothing, the one state a proposal at a
    /// first ballot can be made from (an acceptor that holds anything
    /// refuses it, see `tally_model::paxos`). That read is the verdict, as
    /// a quorum's promises would give it.
    pub(crate) fn skip_prepare(&mut self) -> Read {
        debug_assert!(self.ballot.is_first() && self.phase == Phase::Preparing);
        let read = Read {
            current: Accepted::default(),
            in_flight: false,
            behind: Vec::new(),
            committed: Accepted::default(),
        };
        self.verdict = Some(Verdict::Read(read.clone()));
        tally_world::invariant(|| self.check_invariants());
        read
    }

    /// Moves to the proposal of `value` at this ballot, once the prepare
    /// read ([`Verdict::Read`]); returns the proposal to send.
    pub(crate) fn propose(&mut self, value: Registers) -> Accepted {
        debug_assert!(matches!(self.verdict, Some(Verdict::Read(_))));
        let proposal = Accepted {
            ballot: self.ballot,
            value,
        };
        self.phase = Phase::Proposing;
        self.proposal = Some(proposal.clone());
        self.verdict = None;
        for (_, s) in &mut self.slots {
            *s = Slot::Waiting;
        }
        proposal
    }

    /// `from` answered the prepare.
    pub(crate) fn on_promise(&mut self, from: usize, promise: Promise) {
        if self.phase != Phase::Preparing {
            return;
        }
        match promise {
            Promise::Promised {
                accepted,
                committed,
            } => self.answer(from, Slot::Yes(Some(Box::new((accepted, committed))))),
            Promise::Rejected { promised } => self.on_rejected(from, promised),
        }
    }

    /// `from` accepted the proposal.
    pub(crate) fn on_accepted(&mut self, from: usize) {
        if self.phase == Phase::Proposing {
            self.answer(from, Slot::Yes(None));
        }
    }

    /// `from` refused this phase: it promised `promised`.
    pub(crate) fn on_rejected(&mut self, from: usize, promised: Ballot) {
        if self.slot(from) == Some(&Slot::Waiting) {
            self.seen = self.seen.max(Some(promised));
        }
        self.answer(from, Slot::Rejected);
    }

    /// `from` could not be asked, or its answer was an error.
    pub(crate) fn on_failed(&mut self, from: usize) {
        self.answer(from, Slot::Failed);
    }

    /// The phase's timeout passed: whoever is silent has failed.
    pub(crate) fn on_timeout(&mut self) {
        let silent: Vec<usize> = self
            .slots
            .iter()
            .filter(|(_, s)| *s == Slot::Waiting)
            .map(|(r, _)| *r)
            .collect();
        for r in silent {
            self.answer(r, Slot::Failed);
        }
    }

    /// The phase's verdict, once there is one.
    pub(crate) fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }

    fn slot(&self, from: usize) -> Option<&Slot> {
        self.slots.iter().find(|(r, _)| *r == from).map(|(_, s)| s)
    }

    fn answer(&mut self, from: usize, answer: Slot) {
        let Some((_, slot)) = self.slots.iter_mut().find(|(r, _)| *r == from) else {
            return;
        };
        if *slot != Slot::Waiting || self.verdict.is_some() {
            return;
        }
        *slot = answer;
        self.verdict = self.judge();
        tally_world::invariant(|| self.check_invariants());
    }

    /// What the rules promise of every state: which does not hold, if
    /// any. Checked after every answer (in debug builds and simulations).
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let n = self.slots.len();
        for (i, (r, _)) in self.slots.iter().enumerate() {
            if self.slots[..i].iter().any(|(p, _)| p == r) {
                return Err(format!("participant {r} counted twice"));
            }
        }
        if 2 * self.required <= n {
            return Err(format!("quorums of {} of {n} need not meet", self.required));
        }
        if self.ballot.is_first() && self.required != n {
            return Err(format!(
                "a first ballot decided by {} of {n} participants, not all",
                self.required
            ));
        }
        let proposing = self.phase == Phase::Proposing;
        if proposing
            != self
                .proposal
                .as_ref()
                .is_some_and(|p| p.ballot == self.ballot)
        {
            return Err("a proposal not of this ballot, or none while proposing".into());
        }
        let yes = self
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Yes(_)))
            .count();
        let waiting = self
            .slots
            .iter()
            .filter(|(_, s)| *s == Slot::Waiting)
            .count();
        let skipped = self.ballot.is_first() && yes == 0 && waiting == n;
        match &self.verdict {
            Some(Verdict::Read(_)) if proposing || (yes < self.required && !skipped) => Err(
                format!("read on {yes} promises of {} required", self.required),
            ),
            Some(Verdict::Decided(_)) if !proposing || yes < self.required => Err(format!(
                "decided on {yes} acceptances of {} required",
                self.required
            )),
            Some(Verdict::Decided(a)) if Some(a) != self.proposal.as_ref() => {
                Err("decided a value other than the proposal".into())
            }
            Some(Verdict::Outbid { .. } | Verdict::Unavailable { .. })
                if yes + waiting >= self.required =>
            {
                Err("gave up while a quorum could still answer".into())
            }
            Some(Verdict::Outbid { .. }) if self.seen.is_none() => {
                Err("outbid without a rejection".into())
            }
            None if yes >= self.required => Err("a quorum answered and no verdict".into()),
            _ => Ok(()),
        }
    }

    /// The rules of the module docs, in order.
    fn judge(&self) -> Option<Verdict> {
        let count = |f: fn(&Slot) -> bool| self.slots.iter().filter(|(_, s)| f(s)).count();
        let yes = count(|s| matches!(s, Slot::Yes(_)));
        if yes >= self.required {
            return Some(match self.phase {
                Phase::Preparing => Verdict::Read(self.read()),
                Phase::Proposing => Verdict::Decided(self.proposal.clone()?),
            });
        }
        let waiting = count(|s| *s == Slot::Waiting);
        if yes + waiting >= self.required {
            return None;
        }
        Some(match self.seen {
            Some(seen) => Verdict::Outbid { seen },
            None => Verdict::Unavailable {
                answered: yes,
                required: self.required,
            },
        })
    }

    /// Whether participant `r` is a natural replica, not a pending one.
    fn is_natural(&self, r: usize) -> bool {
        self.slots[..self.natural].iter().any(|(p, _)| *p == r)
    }

    /// The first ballot's value that may have been decided, above
    /// `committed`: the one every natural replica's promise so far
    /// reports. Pending replicas' promises are not read: one may hold
    /// nothing, or a first ballot of its own, where the others decided one
    /// before it became a participant.
    fn first_candidate(&self, committed: &Accepted) -> Option<Accepted> {
        let mut naturals = self.slots.iter().filter_map(|(r, s)| match s {
            Slot::Yes(Some(h)) if self.is_natural(*r) => Some(&h.0),
            _ => None,
        });
        let first = naturals.next()?.as_ref()?;
        let candidate = first.ballot.is_first() && first.ballot > committed.ballot;
        (candidate && naturals.all(|x| x.as_ref() == Some(first))).then(|| first.clone())
    }

    /// What the promises so far say (a quorum of them, once judged).
    fn read(&self) -> Read {
        let held = || {
            self.slots.iter().filter_map(|(r, s)| match s {
                Slot::Yes(Some(h)) => Some((*r, &h.0, &h.1)),
                _ => None,
            })
        };
        let mut committed = held().map(|(_, _, c)| c).max().cloned().unwrap_or_default();
        let newest = held()
            .filter_map(|(_, a, _)| a.as_ref())
            .filter(|a| a.ballot > committed.ballot)
            .max()
            .cloned();
        let mut accepted = match newest {
            // A value of a first ballot is decided once every participant
            // took it, and each takes one first ballot at most: unless
            // every natural replica's promise here reports it, none was
            // decided, nor can be once they promised. A pending replica
            // may have joined the participants since (module docs).
            Some(a) if a.ballot.is_first() && !self.naive => self.first_candidate(&committed),
            other => other,
        };
        // Accepted by a quorum (every participant, at a first ballot):
        // decided, though none knows it committed yet (its commit on the
        // way); nothing to finish.
        if let Some(a) = accepted.take_if(|a| {
            let at = |x: &Option<Accepted>| x.as_ref().is_some_and(|x| x.ballot == a.ballot);
            let needed = match a.ballot.is_first() && !self.naive {
                true => self.slots.len(),
                false => self.required,
            };
            held().filter(|(_, x, _)| at(x)).count() >= needed
        }) {
            committed = a;
        }
        let behind = held()
            .filter(|(_, _, c)| c.ballot < committed.ballot)
            .map(|(r, _, _)| r)
            .collect();
        Read {
            in_flight: accepted.is_some(),
            current: accepted.unwrap_or_else(|| committed.clone()),
            behind,
            committed,
        }
    }
}

/// A quorum of `replicas` at a regular ballot: a majority of the natural
/// ones plus one for each pending one.
fn quorum(replicas: &Replicas) -> usize {
    replicas.len() / 2 + 1 + replicas.pending().len()
}

/// What a change proposes once a prepare read the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan<'a> {
    /// The change's earlier attempt (the `usize`-th) is in the decided
    /// state's history: it took effect, answer what it answered.
    Done(usize),
    /// The change's earlier attempt is in the history of a state in
    /// flight: propose that state again, unchanged, then answer what the
    /// attempt answered.
    Finish(usize, &'a Registers),
    /// Make the next state from this one (nothing of this change is in
    /// its history, nor ever will be).
    Apply(&'a Registers),
    /// An earlier attempt's round has left the state's remembered
    /// history: whether it took effect cannot be told.
    Unknown,
}

/// One earlier attempt of a change that proposed: its ballot and the
/// round its state would be (`history::Rounds::seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub(crate) ballot: Ballot,
    pub(crate) seq: u64,
}

/// What to propose after `read`, for a change whose earlier attempts
/// proposed `ours` (oldest first). A change is applied once: if the
/// newest state read remembers an earlier attempt's round, that state
/// carries it (see `history`).
pub(crate) fn plan<'a>(read: &'a Read, ours: &[Attempt]) -> Plan<'a> {
    let rounds = Rounds::of(&read.current.value);
    if let Some(i) = ours.iter().position(|a| rounds.holds(a.ballot)) {
        return match read.in_flight {
            true => Plan::Finish(i, &read.current.value),
            false => Plan::Done(i),
        };
    }
    match ours.iter().all(|a| rounds.covers(a.seq)) {
        true => Plan::Apply(&read.current.value),
        false => Plan::Unknown,
    }
}

/// Whether attempt `attempt` of a change proposes at a first ballot,
/// without a prepare (see `tally_model::paxos`): only a first attempt,
/// once the cluster has `enabled` first ballots (every acceptor then takes
/// one only while it holds nothing), and only where the partition looks
/// new: this node's own replica of it holds nothing (`new_here`; false
/// where this node is no replica) and this node's rounds saw nothing of
/// it (`hinted`). A guess, and a cheap one to get wrong: the acceptors
/// that hold something refuse, and the next attempt prepares at once.
pub(crate) fn skips_prepare(
    attempt: u32,
    enabled: bool,
    hinted: bool,
    new_here: impl FnOnce() -> bool,
) -> bool {
    attempt == 1 && enabled && !hinted && new_here()
}

/// Whether the change's next state `next` needs a proposal: not when it
/// leaves a decided state as it is (a `SET NX` that finds the key, a read
/// at SERIAL), since the quorum that promised has shown nothing newer;
/// always when an earlier attempt of the change `proposed_before`, whose
/// value a later proposer could otherwise still finish.
pub(crate) fn needs_proposal(read: &Read, next: &Registers, proposed_before: bool) -> bool {
    read.in_flight || proposed_before || *next != read.current.value
}

#[cfg(test)]
mod tests {
    //! Golden scripts: each line an event (`nX promised [accepted B V]
    //! [committed B V]`, `nX accepted`, `nX rejected B`, `nX failed`,
    //! `timeout`, `propose V`) and, after it, the verdict so far. A ballot
    //! `B` is written `ms` (proposer 1) or `ms@p`; a value `V` is the
    //! string of column "".

    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use tally_net::wire::Register;

    fn node(name: &str) -> usize {
        name.strip_prefix('n').unwrap().parse::<usize>().unwrap() - 1
    }

    fn ballot(s: &str) -> Ballot {
        let (ms, p) = s.split_once('@').unwrap_or((s, "1"));
        Ballot {
            ms: ms.parse().unwrap(),
            seq: 0,
            proposer: p.parse().unwrap(),
        }
    }

    fn value(s: &str) -> Registers {
        Registers(vec![Register {
            column: Vec::new(),
            value: s.as_bytes().to_vec(),
            at_ms: 0,
        }])
    }

    fn text(v: &Registers) -> String {
        v.0.iter()
            .map(|r| String::from_utf8_lossy(&r.value).into_owned())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn at(b: &str, v: &str) -> Accepted {
        Accepted {
            ballot: ballot(b),
            value: value(v),
        }
    }

    fn verdict_text(v: Option<&Verdict>) -> String {
        match v {
            None => "-".into(),
            Some(Verdict::Read(r)) => {
                let mut s = format!(
                    "read {}{} {}",
                    r.current.ballot.ms,
                    if r.in_flight { " in-flight" } else { "" },
                    text(&r.current.value)
                )
                .trim_end()
                .to_string();
                if !r.behind.is_empty() {
                    let behind: Vec<String> =
                        r.behind.iter().map(|n| format!("n{}", n + 1)).collect();
                    s += &format!(" behind {}", behind.join(" "));
                }
                s
            }
            Some(Verdict::Decided(a)) => format!("decided {} {}", a.ballot.ms, text(&a.value)),
            Some(Verdict::Outbid { seen }) => format!("outbid {}", seen.ms),
            Some(Verdict::Unavailable { answered, required }) => {
                format!("unavailable {answered}/{required}")
            }
        }
    }

    /// Runs `script` (`event => verdict` per line) on a round of ballot
    /// 10 among `replicas`.
    fn run_on(replicas: &Replicas, script: &str) {
        run_at(ballot("10"), replicas, script);
    }

    /// [`run_on`] at `b`, with the event `skip` (`Round::skip_prepare`).
    fn run_at(b: Ballot, replicas: &Replicas, script: &str) {
        let mut round = Round::new(b, replicas);
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (event, want) = line.split_once("=>").unwrap();
            let w: Vec<&str> = event.split_whitespace().collect();
            match w[..] {
                ["timeout"] => round.on_timeout(),
                ["skip"] => assert_eq!(
                    Verdict::Read(round.skip_prepare()),
                    *round.verdict().unwrap()
                ),
                ["propose", v] => {
                    let p = round.propose(value(v));
                    assert_eq!(p.ballot, b);
                }
                [n, "accepted"] => round.on_accepted(node(n)),
                [n, "rejected", b] => round.on_rejected(node(n), ballot(b)),
                [n, "failed"] => round.on_failed(node(n)),
                [n, "promised", ref rest @ ..] => {
                    let (mut accepted, mut committed) = (None, Accepted::default());
                    for part in rest.chunks(3) {
                        match part {
                            ["accepted", b, v] => accepted = Some(at(b, v)),
                            ["committed", b, v] => committed = at(b, v),
                            _ => panic!("bad promise {part:?}"),
                        }
                    }
                    round.on_promise(
                        node(n),
                        Promise::Promised {
                            accepted,
                            committed,
                        },
                    );
                }
                _ => panic!("bad event {event:?}"),
            }
            let got = verdict_text(round.verdict());
            assert_eq!(got, want.trim(), "after `{}`", event.trim());
        }
    }

    fn run(script: &str) {
        run_on(&Replicas::new(&[0, 1, 2], &[]), script);
    }

    /// [`run`] at a first ballot.
    fn run_first(script: &str) {
        run_at(Ballot::first(7), &Replicas::new(&[0, 1, 2], &[]), script);
    }

    #[test]
    fn the_invariants_catch_a_first_ballot_a_quorum_decides_and_a_thin_read() {
        let replicas = Replicas::new(&[0, 1, 2], &[]);
        let round = Round::new(Ballot::first(7), &replicas);
        round.check_invariants().unwrap();
        // The broken build's round: a quorum decides a first ballot.
        let e = round.naive(&replicas).check_invariants().unwrap_err();
        assert!(e.contains("a first ballot decided by 2 of 3"), "{e}");

        let mut round = Round::new(ballot("5"), &replicas);
        round.slots[0].1 = Slot::Yes(Some(Box::default()));
        round.check_invariants().unwrap();
        round.verdict = Some(Verdict::Read(round.read()));
        let e = round.check_invariants().unwrap_err();
        assert!(e.contains("read on 1 promises of 2 required"), "{e}");
    }

    #[test]
    fn uncontended_two_round_trips() {
        run("
            n1 promised committed 5 a => -
            n2 promised committed 5 a => read 5 a
            n3 promised committed 5 a => read 5 a
            propose b => -
            n1 accepted => -
            n1 accepted => -
            n3 accepted => decided 10 b
            n2 failed => decided 10 b");
    }

    #[test]
    fn a_first_ballot_reads_nothing_and_proposes_in_one_round_trip() {
        run_first(
            "
            skip => read 0
            propose a => -
            n1 accepted => -
            n3 accepted => -
            n2 accepted => decided 0 a",
        );
        // Every participant must take it: one down, and a prepare follows.
        run_first(
            "
            skip => read 0
            propose a => -
            n1 accepted => -
            n2 failed => unavailable 1/3",
        );
        // Refused where the partition holds something: outbid, and the
        // next attempt prepares above what the refusals carried.
        run_first(
            "
            skip => read 0
            propose a => -
            n1 accepted => -
            n2 rejected 5 => outbid 5
            n3 rejected 6 => outbid 5",
        );
    }

    #[test]
    fn a_first_ballots_value_is_finished_only_where_the_whole_quorum_reports_it() {
        // Two first ballots raced: neither can have been decided.
        run("
            n1 promised accepted 0@5 a => -
            n2 promised accepted 0@7 b => read 0");
        run("
            n1 promised accepted 0@7 b => -
            n2 promised => read 0");
        // Every promise reports it: maybe decided (the third took it too).
        run("
            n1 promised accepted 0@7 b => -
            n3 promised accepted 0@7 b => read 0 in-flight b");
        // A regular ballot's value above it is read as ever.
        run("
            n1 promised accepted 0@7 b => -
            n2 promised accepted 4 c => read 4 in-flight c");
        // Committed: decided, and a first ballot's stray value under it
        // is not read.
        run("
            n1 promised committed 0@7 b => -
            n2 promised accepted 0@7 b => read 0 b behind n2");
    }

    #[test]
    fn only_a_first_attempt_on_a_partition_new_here_skips_the_prepare() {
        let new = || true;
        assert!(skips_prepare(1, true, false, new));
        assert!(!skips_prepare(2, true, false, new), "a retry prepares");
        assert!(!skips_prepare(1, false, false, new), "not enabled yet");
        assert!(
            !skips_prepare(1, true, true, new),
            "this node's rounds saw it"
        );
        assert!(
            !skips_prepare(1, true, false, || false),
            "this replica holds some"
        );
    }

    #[test]
    fn the_newest_value_of_a_quorum_is_read_and_laggards_named() {
        run("
            n2 promised committed 3 old => -
            n3 promised committed 5 new => read 5 new behind n2");
        run("
            n1 promised committed 5 a => -
            n3 promised accepted 7 b committed 5 a => read 7 in-flight b");
        // An accepted value older than a committed one is not in flight.
        run("
            n1 promised accepted 4 x committed 3 a => -
            n2 promised committed 5 b => read 5 b behind n1");
        // One a quorum accepted is decided, its commit on the way: nothing
        // to finish, and those that do not know it committed are behind.
        run("
            n1 promised accepted 7 b committed 5 a => -
            n3 promised accepted 7 b committed 5 a => read 7 b behind n1 n3");
    }

    #[test]
    fn a_later_promise_outbids_once_no_quorum_is_left() {
        run("
            n1 rejected 12 => -
            n2 promised => -
            n3 rejected 11 => outbid 12");
        run("
            n1 rejected 12 => -
            n2 promised => -
            n3 promised => read 0");
        run("
            n1 promised => -
            n2 promised => read 0
            propose v => -
            n2 rejected 15@3 => -
            n3 failed => outbid 15");
    }

    #[test]
    fn failures_alone_make_it_unavailable() {
        run("
            n2 failed => -
            n3 failed => unavailable 0/2");
        run("
            n1 promised => -
            timeout => unavailable 1/2");
        run("
            n1 promised => -
            n2 promised => read 0
            propose v => -
            n1 accepted => -
            timeout => unavailable 1/2");
    }

    #[test]
    fn a_pending_replica_needs_one_more_answer() {
        // n4 joins: n1..n3 natural, n4 pending: 2 + 1 of the four.
        let joining = Replicas::new(&[0, 1, 2], &[3]);
        run_on(
            &joining,
            "
            n1 promised => -
            n2 promised => -
            n4 promised committed 4 a => read 4 a behind n1 n2
            propose b => -
            n1 accepted => -
            n2 accepted => -
            n3 accepted => decided 10 b",
        );
        run_on(
            &joining,
            "
            n4 failed => -
            n1 failed => unavailable 0/3",
        );
    }

    #[test]
    fn a_first_ballots_value_decided_before_a_replica_joined_is_finished() {
        // n1..n3 took it (decided), their commits lost to crashes; n4
        // joined since, and its handoff has not brought it yet: its
        // promise of nothing does not undo the decision.
        let joining = Replicas::new(&[0, 1, 2], &[3]);
        run_on(
            &joining,
            "
            n4 promised => -
            n2 promised accepted 0@7 b => -
            n3 promised accepted 0@7 b => read 0 in-flight b",
        );
        // Nor does a first ballot the pending replica took of its own,
        // later than the decided one.
        run_on(
            &joining,
            "
            n4 promised accepted 0@9 y => -
            n2 promised accepted 0@7 b => -
            n3 promised accepted 0@7 b => read 0 in-flight b",
        );
        // A natural replica that holds nothing still shows none was.
        run_on(
            &joining,
            "
            n4 promised accepted 0@7 b => -
            n2 promised accepted 0@7 b => -
            n3 promised => read 0",
        );
    }

    #[test]
    fn answers_of_strangers_and_repeats_change_nothing() {
        run("
            n7 promised committed 9 z => -
            n1 promised committed 1 a => -
            n1 promised committed 8 b => -
            n2 promised committed 2 c => read 2 c behind n1");
    }

    fn read_of(b: &str, in_flight: bool) -> Read {
        Read {
            current: at(b, "v"),
            in_flight,
            behind: Vec::new(),
            committed: Accepted::default(),
        }
    }

    /// A read of a state whose history is the rounds of `ballots`.
    fn read_after(ballots: &[&str], in_flight: bool) -> Read {
        let mut read = read_of(ballots.last().unwrap_or(&"0"), in_flight);
        let mut rounds = Rounds::default();
        for b in ballots {
            rounds = rounds.next(ballot(b));
        }
        rounds.stamp(&mut read.current.value);
        read
    }

    fn attempt(b: &str, seq: u64) -> Attempt {
        Attempt {
            ballot: ballot(b),
            seq,
        }
    }

    #[test]
    fn a_change_is_applied_once_across_its_attempts() {
        let ours = [attempt("3", 2), attempt("6", 3)];
        // Our second attempt decided, or finished by another proposer and
        // built on since (the state is another's, the history holds ours).
        let done = read_after(&["1", "2@2", "6"], false);
        assert_eq!(plan(&done, &ours), Plan::Done(1));
        let built_on = read_after(&["1", "3", "8@2"], false);
        assert_eq!(plan(&built_on, &ours), Plan::Done(0));
        // In flight: finished first, as it is.
        let flying = read_after(&["1", "3@2", "6", "7@3"], true);
        assert_eq!(plan(&flying, &ours), Plan::Finish(1, &flying.current.value));
        // Neither in the history that covers their rounds: apply anew.
        let other = read_after(&["1", "4@2", "5@2"], false);
        assert_eq!(plan(&other, &ours), Plan::Apply(&other.current.value));
        assert_eq!(plan(&read_of("4@2", false), &[]), Plan::Apply(&value("v")));
        // Our round has left the window: unknown.
        let long: Vec<String> = (10..100).map(|ms| format!("{ms}@2")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        assert_eq!(plan(&read_after(&long, false), &ours), Plan::Unknown);
    }

    #[test]
    fn an_unchanged_decided_state_needs_no_proposal() {
        assert!(!needs_proposal(&read_of("4", false), &value("v"), false));
        assert!(needs_proposal(&read_of("4", true), &value("v"), false));
        assert!(needs_proposal(&read_of("4", false), &value("w"), false));
        // An earlier attempt is sealed off by deciding a later ballot.
        assert!(needs_proposal(&read_of("4", false), &value("v"), true));
    }
}
