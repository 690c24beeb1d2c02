//! The steps of a fold, apart from I/O: which one comes next
//! ([`Folding::step`]), from the ring found and what the members answer.
//! The task in `fold::run` does each step and reports it done
//! ([`Folding::done`], [`Folding::surveyed`]). The steps are those of
//! `fold`'s module docs; a fold resumed (the ring found has a generation
//! pending) has every member store that ring again, then activates it.
//!
//! # Invariants ([`Folding::check_invariants`], after every event)
//! - Each commit is of the ring one version on the last one every member
//!   stores (found, or committed by this run).
//! - A generation is agreed only after a full repair and a second survey
//!   that found every member the incarnation it was at the first.
//! - A generation is activated only once every member stores it pending.
//! - Members fold their cells only once the generation is active, or when
//!   nothing was retired.

use super::{Refused, Topology};

/// One member's answer to `Survey`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Surveyed {
    /// Its incarnation now.
    pub(crate) counter_id: u64,
    /// The counter_ids whose shards it may hold.
    pub(crate) held: Vec<u64>,
}

/// The counter_ids to fold: held by some member, the incarnation of none,
/// not folded already; sorted.
pub(crate) fn retired(ring: &Topology, members: &[Surveyed]) -> Vec<u64> {
    let live: std::collections::BTreeSet<u64> = members.iter().map(|m| m.counter_id).collect();
    let held: std::collections::BTreeSet<u64> = members
        .iter()
        .flat_map(|m| m.held.iter().copied())
        .collect();
    held.into_iter()
        .filter(|id| !live.contains(id) && !ring.folded(*id))
        .collect()
}

/// `Ok` when every member is the incarnation it was; else the index of
/// the first that is not.
pub(crate) fn same_incarnations(before: &[Surveyed], after: &[Surveyed]) -> Result<(), usize> {
    match before
        .iter()
        .zip(after)
        .position(|(b, a)| b.counter_id != a.counter_id)
    {
        Some(i) => Err(i),
        None => Ok(()),
    }
}

/// What a fold does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Have every member answer `Survey`, each cleaned up first if
    /// `cleanup`.
    Survey { cleanup: bool },
    /// Repair every range, so that every replica holds the last version
    /// of every retired shard.
    Repair,
    /// Have every member store this ring again, the one found.
    Recommit(Topology),
    /// Have every member `from.commit_order(to)` names store `to`.
    Commit { from: Topology, to: Topology },
    /// Have every member fold its cells.
    FoldMembers,
    /// Nothing: the fold is done; the ring with the generation it made
    /// active, if it did (nothing was retired otherwise).
    Done(Option<Topology>),
    /// Nothing: the fold stopped.
    Stopped(Stop),
}

/// Why a fold stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The member at this index of the survey restarted during the repair.
    Restarted(usize),
    /// The ring refused the generation.
    Refused(Refused),
}

/// Where a fold is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Recommit,
    Survey,
    Repair,
    Resurvey,
    /// Commit the ring with the generation pending.
    Agree(Topology),
    /// Commit the ring with it active.
    Activate(Topology),
    Fold,
    Done,
    Stopped(Stop),
}

/// One run of a fold (see the module docs).
#[derive(Debug)]
pub(crate) struct Folding {
    phase: Phase,
    /// The ring every member stores last: found, or committed by this run.
    committed: Topology,
    /// The members' answers to the first survey.
    before: Vec<Surveyed>,
    /// The ring with the generation active, once committed.
    active: Option<Topology>,
    /// A generation is pending (found, or agreed by this run).
    agreed: bool,
    repaired: bool,
    /// What went out of order: for the invariants.
    broken: Option<String>,
}

impl Folding {
    /// A fold from ring `now` (the newest the members hold, with no change
    /// in progress).
    pub(crate) fn new(now: &Topology) -> Folding {
        let resumed = now.fold_pending().is_some();
        Folding {
            phase: match resumed {
                true => Phase::Recommit,
                false => Phase::Survey,
            },
            committed: now.clone(),
            before: Vec::new(),
            active: None,
            agreed: resumed,
            repaired: false,
            broken: None,
        }
    }

    /// What to do next.
    pub(crate) fn step(&self) -> Step {
        match &self.phase {
            Phase::Recommit => Step::Recommit(self.committed.clone()),
            Phase::Survey => Step::Survey { cleanup: true },
            Phase::Repair => Step::Repair,
            Phase::Resurvey => Step::Survey { cleanup: false },
            Phase::Agree(to) | Phase::Activate(to) => Step::Commit {
                from: self.committed.clone(),
                to: to.clone(),
            },
            Phase::Fold => Step::FoldMembers,
            Phase::Done => Step::Done(self.active.clone()),
            Phase::Stopped(stop) => Step::Stopped(stop.clone()),
        }
    }

    /// Every member answered the survey [`Folding::step`] asked for.
    pub(crate) fn surveyed(&mut self, members: Vec<Surveyed>) {
        match self.phase {
            Phase::Survey => {
                let nothing = retired(&self.committed, &members).is_empty();
                self.before = members;
                self.phase = match nothing {
                    true => Phase::Fold,
                    false => Phase::Repair,
                };
            }
            Phase::Resurvey => self.phase = self.agree(&members),
            _ => self.broke(format!("a survey answered in {:?}", self.phase)),
        }
        self.checked();
    }

    /// After the second survey: the generation of the ids the first found
    /// retired, unless a member restarted meanwhile.
    fn agree(&mut self, after: &[Surveyed]) -> Phase {
        if !self.repaired {
            self.broke("a generation agreed before the repair".to_string());
        }
        if let Err(i) = same_incarnations(&self.before, after) {
            return Phase::Stopped(Stop::Restarted(i));
        }
        let ids = retired(&self.committed, &self.before);
        match self.committed.begin_fold(&ids) {
            Ok(begun) => Phase::Agree(begun),
            Err(r) => Phase::Stopped(Stop::Refused(r)),
        }
    }

    /// The step [`Folding::step`] answered (not a survey) is done.
    pub(crate) fn done(&mut self) {
        match self.step() {
            Step::Commit { from, to } => self.committed(&from, to),
            Step::Repair => self.repaired = true,
            Step::FoldMembers => self.members_folded(),
            Step::Recommit(_) => {}
            step => self.broke(format!("{step:?} reported done")),
        }
        self.phase = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Repair => Phase::Resurvey,
            Phase::Recommit | Phase::Agree(_) => match self.committed.activate_fold() {
                Some(active) => Phase::Activate(active),
                None => {
                    self.broke("no generation pending to activate".to_string());
                    Phase::Done
                }
            },
            Phase::Activate(active) => {
                self.active = Some(active);
                Phase::Fold
            }
            Phase::Stopped(stop) => Phase::Stopped(stop),
            Phase::Survey | Phase::Resurvey | Phase::Fold | Phase::Done => Phase::Done,
        };
        self.checked();
    }

    /// Every member stored `to`, the ring after `from`.
    fn committed(&mut self, from: &Topology, to: Topology) {
        if *from != self.committed || to.version != from.version + 1 {
            self.broke(format!(
                "ring version {} committed after version {}, not after {}",
                to.version, from.version, self.committed.version
            ));
        }
        if to.fold_pending().is_some() {
            self.agreed = true;
        }
        if to.folds_active > from.folds_active && !self.agreed {
            self.broke(format!(
                "ring version {} activates a generation no member stored pending",
                to.version
            ));
        }
        self.committed = to;
    }

    /// Every member folded its cells: by an active generation, or with
    /// nothing retired.
    fn members_folded(&mut self) {
        let active = self.active.as_ref() == Some(&self.committed);
        if self.agreed && !active {
            self.broke(format!(
                "members fold at ring version {}, before its generation is active",
                self.committed.version
            ));
        }
    }

    fn broke(&mut self, what: String) {
        self.broken.get_or_insert(what);
    }

    fn checked(&self) {
        tally_world::invariant(|| self.check_invariants());
    }

    /// What does not hold of the invariants (see the module docs).
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        match &self.broken {
            Some(what) => Err(format!("fold: {what}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn member(counter_id: u64, held: &[u64]) -> Surveyed {
        Surveyed {
            counter_id,
            held: held.to_vec(),
        }
    }

    fn three() -> Topology {
        Topology::seed(&[false, false, false])
    }

    /// Runs to the end, each survey answered by the next of `surveys`;
    /// answers the steps taken.
    fn steps(mut f: Folding, surveys: &[Vec<Surveyed>]) -> Vec<String> {
        let mut surveys = surveys.iter();
        let mut out = Vec::new();
        loop {
            let step = f.step();
            out.push(match &step {
                Step::Survey { cleanup } => format!("survey {cleanup}"),
                Step::Repair => "repair".to_string(),
                Step::Recommit(ring) => format!("recommit {}", ring.version),
                Step::Commit { to, .. } => format!("commit {}", to.version),
                Step::FoldMembers => "fold".to_string(),
                Step::Done(ring) => format!("done {:?}", ring.as_ref().map(|r| r.folds_active)),
                Step::Stopped(stop) => format!("stopped {stop:?}"),
            });
            match step {
                Step::Done(_) | Step::Stopped(_) => {
                    assert_eq!(f.check_invariants(), Ok(()));
                    return out;
                }
                Step::Survey { .. } => f.surveyed(surveys.next().unwrap().clone()),
                _ => f.done(),
            }
        }
    }

    #[test]
    fn retired_ids_are_held_by_someone_live_for_no_one_and_not_folded_yet() {
        let mut ring = three();
        let members = [
            member(1, &[1, 2, 7, 8]),
            member(2, &[2, 3, 9]),
            member(3, &[1, 3]),
        ];
        assert_eq!(retired(&ring, &members), vec![7, 8, 9]);
        ring.folds.push(vec![8]);
        assert_eq!(retired(&ring, &members), vec![7, 9]);
        assert!(retired(&ring, &[member(1, &[1])]).is_empty());
    }

    #[test]
    fn a_member_that_restarted_between_the_surveys_stops_the_fold() {
        let before = vec![member(1, &[7]), member(2, &[])];
        assert_eq!(same_incarnations(&before, &before), Ok(()));
        let after = vec![member(1, &[7]), member(5, &[2])];
        assert_eq!(same_incarnations(&before, &after), Err(1));
        assert_eq!(
            steps(Folding::new(&three()), &[before, after]),
            [
                "survey true",
                "repair",
                "survey false",
                "stopped Restarted(1)"
            ]
        );
    }

    #[test]
    fn a_fold_surveys_repairs_surveys_agrees_activates_and_folds() {
        let members = vec![member(1, &[1, 7]), member(2, &[2, 9])];
        assert_eq!(
            steps(Folding::new(&three()), &[members.clone(), members]),
            [
                "survey true",
                "repair",
                "survey false",
                "commit 2",
                "commit 3",
                "fold",
                "done Some(1)"
            ]
        );
    }

    #[test]
    fn nothing_retired_folds_the_members_without_a_generation() {
        let members = vec![member(1, &[1]), member(2, &[2])];
        assert_eq!(
            steps(Folding::new(&three()), &[members]),
            ["survey true", "fold", "done None"]
        );
    }

    #[test]
    fn a_resumed_fold_stores_the_ring_found_again_then_activates_it() {
        let begun = three().begin_fold(&[7]).unwrap();
        assert_eq!(
            steps(Folding::new(&begun), &[]),
            ["recommit 2", "commit 3", "fold", "done Some(1)"]
        );
    }

    #[test]
    fn a_fold_is_agreed_then_activated_one_version_each() {
        let ring = three();
        let begun = ring.begin_fold(&[7, 9]).unwrap();
        assert_eq!((begun.version, begun.fold_pending()), (2, Some(1)));
        assert_eq!(begun.engine_folds().active(), 0, "known, not active yet");
        assert_eq!(begun.begin_fold(&[7, 9]), Ok(begun.clone()), "run again");
        assert_eq!(begun.begin_fold(&[8]), Err(Refused::Folding(1)));
        assert_eq!(
            begun.begin(super::super::Change::Decommission(0), 2),
            Err(Refused::Folding(1)),
            "no ring change while a generation is pending"
        );
        let active = begun.activate_fold().unwrap();
        assert_eq!((active.version, active.fold_pending()), (3, None));
        assert!(active.folded(9) && !active.folded(1));
        assert_eq!(active.engine_folds().active(), 1);
        assert_eq!(active.activate_fold(), None);
    }

    /// Members folding by a generation not active yet (a commit the shell
    /// skipped) is caught.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: fold: members fold at ring version 2")
    )]
    fn folding_before_the_generation_is_active_breaks_the_invariants() {
        let members = vec![member(1, &[7])];
        let mut f = Folding::new(&three());
        f.surveyed(members.clone());
        f.done(); // repair
        f.surveyed(members);
        f.done(); // commit 2: agreed
        f.phase = Phase::Fold; // the activation skipped
        f.done();
        assert!(f.check_invariants().is_err());
    }
}
