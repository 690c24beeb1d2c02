//! The steps of a topology change, apart from I/O: which one comes next
//! ([`Run::step`]), from where a change begun before stopped. The task in
//! `change::run` does each step and says when it is done ([`Run::done`]).
//!
//! # The steps
//! 0. A resumed change (the ring found has it in progress) first has every
//!    member store that ring again (`Recommit`): the run that committed it
//!    may have stopped half way through its members, and what follows
//!    (a sync, the hand-over) counts on every member holding it.
//! 1. `Commit` the ring with the change begun, unless the ring found
//!    holds it already (a resumed change).
//! 2. `Sync` the ranges the change moves into their new replicas, unless
//!    the ring found is switching already: a run that committed the switch
//!    synced before it.
//! 3. `DrainHints`, when the node running the change is the one leaving.
//! 4. `Commit` the ring switching over, unless the ring found is.
//! 5. `Sync` again: members admitted by their old appliers until the
//!    switch reach the new ones.
//! 6. `HandOver`: every participant hands the ids it applied to every
//!    other.
//! 7. `Commit` the ring with the change done; the run is `Done`.
//!
//! # Invariants ([`Run::check_invariants`])
//! - Each commit is of the ring one version on the last one committed (or
//!   found), so every member stores the versions in order.
//! - The ring switches over only after the ranges that move were synced
//!   (by this run, or by the run that committed the switch before).
//! - Ids are handed over only once every participant holds the switching
//!   ring (no add whose applier moves is applied any more), and the change
//!   is done only after they were.

use super::{Change, Refused, Topology};

/// What a change does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Have every member `from.commit_order(to)` names store `to`.
    Commit { from: Topology, to: Topology },
    /// Have every member store this ring again, the one found (stored by
    /// some members at least).
    Recommit(Topology),
    /// Sync the ranges that gain a replica in `ring` into it.
    Sync(Topology),
    /// Deliver this node's hints before it leaves.
    DrainHints,
    /// Have every participant of `ring` hand its ids to every other.
    HandOver(Topology),
    /// Nothing: the change is done, and this is the ring after it.
    Done(Topology),
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Recommit,
    Begin,
    Sync,
    DrainHints,
    Switch,
    Resync,
    HandOver,
    Finish,
    Done,
}

/// One run of a change (see the module docs).
#[derive(Debug)]
pub(crate) struct Run {
    phase: Phase,
    /// The ring every member stores last: found, or committed by this run.
    committed: Topology,
    /// The ring with the change begun, switching over and done.
    begun: Topology,
    switching: Topology,
    finished: Topology,
    /// This node leaves by the change: it drains its hints first.
    drains: bool,
    /// The ranges that move were synced since the change began.
    synced: bool,
    /// Every participant handed its ids over.
    handed_over: bool,
    /// What went out of order (a commit off the chain, a switch before a
    /// sync, a change ended before its hand-over): for the invariants.
    broken: Option<String>,
}

impl Run {
    /// A run of `change` from ring `now` (the newest the members hold),
    /// by node `me`; refused as `Topology::begin` refuses it.
    pub(crate) fn new(
        now: &Topology,
        change: Change,
        rf: usize,
        me: usize,
    ) -> Result<Run, Refused> {
        let begun = now.begin(change, rf)?;
        let switching = begun.switch().expect("a change is in progress");
        let finished = switching.finish().expect("a change is in progress");
        let phase = match now.in_progress() {
            Some(_) => Phase::Recommit,
            None => Phase::Begin,
        };
        let mut run = Run {
            phase,
            committed: now.clone(),
            begun,
            switching,
            finished,
            drains: change == Change::Decommission(me),
            // A ring that switches was committed after its sync.
            synced: now.switching,
            handed_over: false,
            broken: None,
        };
        run.skip_steps_not_needed();
        Ok(run)
    }

    /// The ring with the change begun.
    pub(crate) fn begun(&self) -> &Topology {
        &self.begun
    }

    /// What to do next.
    pub(crate) fn step(&self) -> Step {
        match self.phase {
            Phase::Recommit => Step::Recommit(self.committed.clone()),
            Phase::Begin => self.commit(&self.begun),
            Phase::Sync => Step::Sync(self.begun.clone()),
            Phase::DrainHints => Step::DrainHints,
            Phase::Switch => self.commit(&self.switching),
            Phase::Resync => Step::Sync(self.switching.clone()),
            Phase::HandOver => Step::HandOver(self.switching.clone()),
            Phase::Finish => self.commit(&self.finished),
            Phase::Done => Step::Done(self.finished.clone()),
        }
    }

    /// The step [`Run::step`] answered is done.
    pub(crate) fn done(&mut self) {
        match self.step() {
            Step::Commit { from, to } => self.committed(&from, to),
            Step::Sync(_) => self.synced = true,
            Step::HandOver(_) => self.handed_over(),
            Step::Recommit(_) | Step::DrainHints => {}
            Step::Done(_) => self.broke("a step done after the change was".to_string()),
        }
        self.phase = match self.phase {
            Phase::Recommit => Phase::Begin,
            Phase::Begin => Phase::Sync,
            Phase::Sync => Phase::DrainHints,
            Phase::DrainHints => Phase::Switch,
            Phase::Switch => Phase::Resync,
            Phase::Resync => Phase::HandOver,
            Phase::HandOver => Phase::Finish,
            Phase::Finish | Phase::Done => Phase::Done,
        };
        self.skip_steps_not_needed();
        tally_world::invariant(|| self.check_invariants());
    }

    /// Moves past the steps a resumed change did already, and the drain of
    /// a node that does not leave.
    fn skip_steps_not_needed(&mut self) {
        loop {
            let skip = match self.phase {
                Phase::Begin => self.committed.version >= self.begun.version,
                Phase::Sync => self.committed.switching,
                Phase::DrainHints => !self.drains,
                Phase::Switch => self.committed.version >= self.switching.version,
                Phase::Recommit | Phase::Resync | Phase::HandOver | Phase::Finish | Phase::Done => {
                    false
                }
            };
            if !skip {
                return;
            }
            self.phase = match self.phase {
                Phase::Begin => Phase::Sync,
                Phase::Sync => Phase::DrainHints,
                Phase::DrainHints => Phase::Switch,
                _ => Phase::Resync,
            };
        }
    }

    fn commit(&self, to: &Topology) -> Step {
        Step::Commit {
            from: self.committed.clone(),
            to: to.clone(),
        }
    }

    /// Every member stored `to`, the ring after `from`.
    fn committed(&mut self, from: &Topology, to: Topology) {
        if *from != self.committed || to.version != from.version + 1 {
            self.broke(format!(
                "ring version {} committed after version {}, not after {}",
                to.version, from.version, self.committed.version
            ));
        }
        if to.switching && !self.synced {
            self.broke(format!(
                "ring version {} switches over before the ranges that move were synced",
                to.version
            ));
        }
        if to.in_progress().is_none() && !self.handed_over {
            self.broke(format!(
                "ring version {} ends the change before the ids were handed over",
                to.version
            ));
        }
        self.committed = to;
    }

    /// Every participant handed its ids over.
    fn handed_over(&mut self) {
        if self.committed != self.switching {
            self.broke(format!(
                "ids handed over at ring version {}, before every member held the switching one",
                self.committed.version
            ));
        }
        self.handed_over = true;
    }

    fn broke(&mut self, what: String) {
        self.broken.get_or_insert(what);
    }

    /// What does not hold of the invariants (see the module docs).
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        match &self.broken {
            Some(what) => Err(format!("topology change: {what}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::NodeState;

    /// Three members, and node 3 absent.
    fn three() -> Topology {
        Topology::seed(&[false, false, false, true])
    }

    /// Runs to the end, answering the steps taken (commits by version).
    fn steps(mut run: Run) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let step = run.step();
            out.push(match &step {
                Step::Commit { to, .. } => format!("commit {}", to.version),
                Step::Recommit(ring) => format!("recommit {}", ring.version),
                Step::Sync(ring) => format!("sync {}", ring.version),
                Step::DrainHints => "drain".to_string(),
                Step::HandOver(ring) => format!("hand over {}", ring.version),
                Step::Done(ring) => format!("done {}", ring.version),
            });
            if matches!(step, Step::Done(_)) {
                assert_eq!(run.check_invariants(), Ok(()));
                return out;
            }
            run.done();
        }
    }

    #[test]
    fn a_join_commits_syncs_switches_syncs_hands_over_and_finishes() {
        let run = Run::new(&three(), Change::Join(3), 3, 3).unwrap();
        assert_eq!(run.begun().states[3], NodeState::Joining);
        assert_eq!(
            steps(run),
            [
                "commit 2",
                "sync 2",
                "commit 3",
                "sync 3",
                "hand over 3",
                "commit 4",
                "done 4"
            ]
        );
    }

    #[test]
    fn a_node_that_decommissions_itself_drains_its_hints_before_the_switch() {
        let run = Run::new(&three(), Change::Decommission(1), 2, 1).unwrap();
        let steps = steps(run);
        assert_eq!(steps[..4], ["commit 2", "sync 2", "drain", "commit 3"]);
        let run = Run::new(&three(), Change::Decommission(1), 2, 0).unwrap();
        assert!(
            !self::steps(run).contains(&"drain".to_string()),
            "another node's"
        );
    }

    #[test]
    fn a_resumed_change_skips_what_its_ring_says_was_done() {
        let begun = three().begin(Change::Join(3), 3).unwrap();
        let run = Run::new(&begun, Change::Join(3), 3, 0).unwrap();
        assert_eq!(steps(run)[..3], ["recommit 2", "sync 2", "commit 3"]);

        // A switching ring was committed after its sync: only the second.
        let switching = begun.switch().unwrap();
        let run = Run::new(&switching, Change::Join(3), 3, 0).unwrap();
        assert_eq!(
            steps(run),
            ["recommit 3", "sync 3", "hand over 3", "commit 4", "done 4"]
        );
    }

    #[test]
    fn another_change_in_progress_refuses_the_run() {
        let begun = three().begin(Change::Join(3), 3).unwrap();
        assert!(matches!(
            Run::new(&begun, Change::Decommission(0), 2, 0),
            Err(Refused::Busy(Change::Join(3)))
        ));
    }

    /// A switch committed before its sync (a step the shell skipped) is
    /// caught: where the world checks invariants (debug builds,
    /// simulations) at once, and by `check_invariants` anyway.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: topology change: ring version 3 switches")
    )]
    fn a_switch_before_the_sync_breaks_the_invariants() {
        let mut run = Run::new(&three(), Change::Join(3), 3, 0).unwrap();
        run.done(); // commit 2
        run.phase = Phase::Switch; // the sync skipped
        run.done();
        assert!(run.check_invariants().is_err());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: topology change: ring version 4 ends")
    )]
    fn a_change_done_before_the_hand_over_breaks_the_invariants() {
        let switching = three().begin(Change::Join(3), 3).unwrap().switch().unwrap();
        let mut run = Run::new(&switching, Change::Join(3), 3, 0).unwrap();
        run.done(); // recommit 3
        run.done(); // sync 3
        run.phase = Phase::Finish; // the hand-over skipped
        run.done();
        assert!(run.check_invariants().is_err());
    }
}
