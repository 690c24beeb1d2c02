//! The cluster's membership as every node stores it: each node's state,
//! the ring version, the databases' generations, and the rules that
//! change them (pure; `topology` runs the changes).

use tally_net::wire::{NodeState, WireTopology};

use crate::base::keyspace::{DATABASES, Keyspace};
use crate::ring::Ring;

/// What a node being replaced says instead of leading or reading.
pub(crate) const NOT_READY: &str =
    "is being replaced: syncing its ranges from the other replicas (tallyd run --replace)";

/// Why a node does not take a peer's ring.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unaccepted {
    /// It is not of this node's configuration (another number of nodes).
    Misfit(String),
    /// Another change won here (two begun at once from one version):
    /// the one that lost may begin again on the ring that won.
    Lost(String),
}

impl std::fmt::Display for Unaccepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unaccepted::Misfit(why) | Unaccepted::Lost(why) => f.write_str(why),
        }
    }
}

/// A topology change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// The node becomes a member.
    Join(usize),
    /// The node, up, leaves.
    Decommission(usize),
    /// The node, down, is taken out.
    Remove(usize),
}

impl Change {
    /// The node the change is about.
    pub(crate) fn node(self) -> usize {
        match self {
            Change::Join(n) | Change::Decommission(n) | Change::Remove(n) => n,
        }
    }

    /// The state its node is in while the change runs.
    fn during(self) -> NodeState {
        match self {
            Change::Join(_) => NodeState::Joining,
            Change::Decommission(_) => NodeState::Leaving,
            Change::Remove(_) => NodeState::Removing,
        }
    }

    /// What the change is called, for people.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Change::Join(_) => "joining",
            Change::Decommission(_) => "leaving (decommission)",
            Change::Remove(_) => "being removed (removenode)",
        }
    }
}

/// Why a change cannot begin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Another change is in progress.
    Busy(Change),
    /// A join of a node that is a member already (or has left: a node id
    /// is not reused).
    NotAbsent(NodeState),
    /// A decommission or removal of a node that is not a member.
    NotAMember(NodeState),
    /// It would leave fewer members than the replication factor.
    TooFew {
        /// Members after it.
        left: usize,
        /// The replication factor.
        rf: usize,
    },
    /// A fold generation is agreed and not active yet (`tally fold` is
    /// running, or stopped half way: run it again).
    Folding(u32),
}

/// Every configured node's state, at a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    pub(crate) version: u64,
    pub(crate) states: Vec<NodeState>,
    /// The change in progress is switching over: its ranges are synced,
    /// and appliers hand their ids to each other before the ring switches
    /// (adds with ids whose applier moves are refused meanwhile).
    pub(crate) switching: bool,
    /// The retired counter_ids of each fold generation, oldest first
    /// (`tally_engine::cell::fold`).
    pub(crate) folds: Vec<Vec<u64>>,
    /// The generation cells fold up to; a later one is agreed by every
    /// member before any node folds by it.
    pub(crate) folds_active: u32,
    /// Each database's flush generation (see `keyspace`): how many times
    /// it was flushed; missing ones are 0.
    pub(crate) flushes: Vec<u32>,
}

impl Topology {
    /// The first ring (version 1): every configured node, except those the
    /// configuration says join later.
    pub(crate) fn seed(joins_later: &[bool]) -> Topology {
        Topology {
            version: 1,
            switching: false,
            folds: Vec::new(),
            folds_active: 0,
            flushes: Vec::new(),
            states: joins_later
                .iter()
                .map(|&later| {
                    if later {
                        NodeState::Absent
                    } else {
                        NodeState::Normal
                    }
                })
                .collect(),
        }
    }

    /// The change in progress, if one is.
    pub(crate) fn in_progress(&self) -> Option<Change> {
        self.states.iter().enumerate().find_map(|(n, s)| match s {
            NodeState::Joining => Some(Change::Join(n)),
            NodeState::Leaving => Some(Change::Decommission(n)),
            NodeState::Removing => Some(Change::Remove(n)),
            NodeState::Absent | NodeState::Normal | NodeState::Left => None,
        })
    }

    /// The topology with `change` begun: the same one when it is the
    /// change in progress (a resumed change), else one version on.
    pub(crate) fn begin(&self, change: Change, rf: usize) -> Result<Topology, Refused> {
        if let Some(busy) = self.in_progress() {
            return if busy == change {
                Ok(self.clone())
            } else {
                Err(Refused::Busy(busy))
            };
        }
        if let Some(g) = self.fold_pending() {
            return Err(Refused::Folding(g));
        }
        let state = self.states[change.node()];
        match change {
            Change::Join(_) if state != NodeState::Absent => return Err(Refused::NotAbsent(state)),
            Change::Decommission(_) | Change::Remove(_) => {
                if state != NodeState::Normal {
                    return Err(Refused::NotAMember(state));
                }
                let left = self.members_now().iter().filter(|&&m| m).count() - 1;
                if left < rf {
                    return Err(Refused::TooFew { left, rf });
                }
            }
            Change::Join(_) => {}
        }
        let mut next = self.clone();
        next.version += 1;
        next.states[change.node()] = change.during();
        Ok(next)
    }

    /// The topology with the change in progress switching over, one
    /// version on (the same when it is switching already); `None` when no
    /// change is in progress.
    pub(crate) fn switch(&self) -> Option<Topology> {
        self.in_progress()?;
        let mut next = self.clone();
        if !self.switching {
            next.version += 1;
            next.switching = true;
        }
        Some(next)
    }

    /// The topology with the change in progress done, one version on;
    /// `None` when none is.
    pub(crate) fn finish(&self) -> Option<Topology> {
        let change = self.in_progress()?;
        let mut next = self.clone();
        next.version += 1;
        next.switching = false;
        next.states[change.node()] = match change {
            Change::Join(_) => NodeState::Normal,
            Change::Decommission(_) | Change::Remove(_) => NodeState::Left,
        };
        Some(next)
    }

    /// The node being decommissioned, or `usize::MAX` when none is.
    pub(crate) fn leaving(&self) -> usize {
        match self.in_progress() {
            Some(Change::Decommission(n)) => n,
            _ => usize::MAX,
        }
    }

    /// The fold generation agreed and not active yet, if one is.
    pub(crate) fn fold_pending(&self) -> Option<u32> {
        let known = u32::try_from(self.folds.len()).unwrap_or(u32::MAX);
        (known > self.folds_active).then_some(known)
    }

    /// The topology with a fold generation of `retired` agreed, one
    /// version on; the same one when that generation is agreed already (a
    /// fold run again). Refused while a change runs or another generation
    /// is pending.
    pub(crate) fn begin_fold(&self, retired: &[u64]) -> Result<Topology, Refused> {
        if let Some(busy) = self.in_progress() {
            return Err(Refused::Busy(busy));
        }
        if let Some(g) = self.fold_pending() {
            return if self.folds.last().is_some_and(|ids| ids == retired) {
                Ok(self.clone())
            } else {
                Err(Refused::Folding(g))
            };
        }
        let mut next = self.clone();
        next.version += 1;
        next.folds.push(retired.to_vec());
        Ok(next)
    }

    /// The topology with the pending fold generation active, one version
    /// on; `None` when none is pending.
    pub(crate) fn activate_fold(&self) -> Option<Topology> {
        let g = self.fold_pending()?;
        let mut next = self.clone();
        next.version += 1;
        next.folds_active = g;
        Some(next)
    }

    /// Whether `counter_id` is retired by some fold generation.
    pub(crate) fn folded(&self, counter_id: u64) -> bool {
        self.folds.iter().any(|ids| ids.contains(&counter_id))
    }

    /// The fold generations as the engine merges and folds by them.
    pub(crate) fn engine_folds(&self) -> tally_engine::Folds {
        tally_engine::Folds::new(self.folds.clone(), self.folds_active)
    }

    /// Per node: a replica of its ranges now.
    pub(crate) fn members_now(&self) -> Vec<bool> {
        self.states
            .iter()
            .map(|s| {
                matches!(
                    s,
                    NodeState::Normal | NodeState::Leaving | NodeState::Removing
                )
            })
            .collect()
    }

    /// Per node: a replica of its ranges once the change in progress is done.
    pub(crate) fn members_next(&self) -> Vec<bool> {
        self.states
            .iter()
            .map(|s| matches!(s, NodeState::Normal | NodeState::Joining))
            .collect()
    }

    /// The ring to place data by: with pending replicas while a change is
    /// in progress.
    pub(crate) fn ring(&self, ids: &[String], vnodes: usize, rf: usize) -> Ring {
        let now = Ring::with_members(ids, &self.members_now(), vnodes, rf);
        match self.next_ring(ids, vnodes, rf) {
            Some(next) => now.during(&next),
            None => now,
        }
    }

    /// The ring once the change in progress is done, if one is.
    pub(crate) fn next_ring(&self, ids: &[String], vnodes: usize, rf: usize) -> Option<Ring> {
        self.in_progress()?;
        Some(Ring::with_members(ids, &self.members_next(), vnodes, rf))
    }

    /// The nodes that must store a new version before it counts: every
    /// node in the ring before or after it, except one being removed (it
    /// is down for good).
    pub(crate) fn participants(&self) -> Vec<usize> {
        self.states
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                matches!(
                    s,
                    NodeState::Joining | NodeState::Normal | NodeState::Leaving
                )
            })
            .map(|(n, _)| n)
            .collect()
    }

    /// Who must store `next`, the version after this one, and in which
    /// order: every participant of either (a node that has just left
    /// learns it too) but a node being removed (it is down for good), in
    /// config order (of two changes begun at once, the first node decides
    /// which wins); a node that leaves in `next` last, so that once it
    /// holds the ring that says so every other member does, and it may be
    /// stopped.
    pub(crate) fn commit_order(&self, next: &Topology) -> Vec<usize> {
        let mut nodes = next.participants();
        let removed = |n: &usize| next.states[*n] == NodeState::Removing;
        nodes.extend(self.participants().into_iter().filter(|n| !removed(n)));
        nodes.sort_unstable_by_key(|&n| (next.states[n] == NodeState::Left, n));
        nodes.dedup();
        nodes
    }

    /// Whether `theirs`, sent by a peer, may replace this one: it is newer.
    /// The same version with other states is a conflict (two changes
    /// begun at once; the first one a node stored wins), and so is an
    /// older one this ring cannot have followed (see `may_follow`).
    pub(crate) fn accepts(&self, theirs: &Topology) -> Result<bool, Unaccepted> {
        if theirs.states.len() != self.states.len() {
            return Err(Unaccepted::Misfit(format!(
                "a ring of {} nodes, and this node's configuration names {}",
                theirs.states.len(),
                self.states.len()
            )));
        }
        if theirs.version > self.version {
            return Ok(true);
        }
        if theirs.version == self.version && theirs != self {
            return Err(Unaccepted::Lost(format!(
                "ring version {} differs from this node's: another topology change won",
                theirs.version
            )));
        }
        if !self.may_follow(theirs) {
            return Err(Unaccepted::Lost(format!(
                "this node's ring version {} did not follow ring version {}: another topology change won",
                self.version, theirs.version
            )));
        }
        Ok(false)
    }

    /// Whether this ring may be one that `older` led to: what only grows
    /// (each database's flush generation, the fold generations) is at
    /// least `older`'s here. A flush whose commit reaches a node after
    /// another change moved it on lost, and must not count as stored.
    fn may_follow(&self, older: &Topology) -> bool {
        let flushed =
            (0..DATABASES).all(|db| self.keyspace(db).generation >= older.keyspace(db).generation);
        flushed && self.folds.len() >= older.folds.len() && self.folds_active >= older.folds_active
    }

    /// The keyspace database `db` writes to now.
    pub(crate) fn keyspace(&self, db: u8) -> Keyspace {
        Keyspace {
            db,
            generation: self.flushes.get(usize::from(db)).copied().unwrap_or(0),
        }
    }

    /// The topology with each of `dbs` flushed (its generation one on),
    /// one version on. Refused while a change runs or a fold is pending.
    pub(crate) fn flush(&self, dbs: &[u8]) -> Result<Topology, Refused> {
        if let Some(busy) = self.in_progress() {
            return Err(Refused::Busy(busy));
        }
        if let Some(g) = self.fold_pending() {
            return Err(Refused::Folding(g));
        }
        let mut next = self.clone();
        next.version += 1;
        next.flushes.resize(usize::from(DATABASES), 0);
        for &db in dbs {
            let g = &mut next.flushes[usize::from(db)];
            *g = g.wrapping_add(1);
        }
        Ok(next)
    }

    /// The ranges of stored partitions that hold every flushed
    /// generation's cells (see `keyspace::other_generations`).
    pub(crate) fn flushed_ranges(&self) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        (0..DATABASES)
            .flat_map(|db| {
                crate::base::keyspace::other_generations(db, self.keyspace(db).generation)
            })
            .collect()
    }

    /// Whether a stored partition is of a flushed generation: nothing
    /// reads it any more.
    pub(crate) fn flushed(&self, stored: &[u8]) -> bool {
        Keyspace::of(stored).is_some_and(|s| s.generation != self.keyspace(s.db).generation)
    }

    pub(crate) fn to_wire(&self) -> WireTopology {
        WireTopology {
            version: self.version,
            states: self.states.clone(),
            switching: self.switching,
            folds: self.folds.clone(),
            folds_active: self.folds_active,
            flushes: self.flushes.clone(),
        }
    }

    pub(crate) fn from_wire(w: &WireTopology) -> Topology {
        Topology {
            version: w.version,
            states: w.states.clone(),
            switching: w.switching,
            folds: w.folds.clone(),
            folds_active: w.folds_active,
            flushes: w
                .flushes
                .iter()
                .take(usize::from(DATABASES))
                .copied()
                .collect(),
        }
    }
}

/// The two-letter status nodetool prints: up or down, then the state.
pub fn status_code(up: bool, state: NodeState) -> &'static str {
    match (up, state) {
        (true, NodeState::Normal) => "UN",
        (false, NodeState::Normal) => "DN",
        (true, NodeState::Joining) => "UJ",
        (false, NodeState::Joining) => "DJ",
        (true, NodeState::Leaving | NodeState::Removing) => "UL",
        (false, NodeState::Leaving | NodeState::Removing) => "DL",
        (_, NodeState::Absent) => "--",
        (_, NodeState::Left) => "LE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeState::{Absent, Joining, Leaving, Left, Normal, Removing};

    fn five() -> Topology {
        Topology::seed(&[false, false, false, true, true])
    }

    #[test]
    fn a_join_goes_through_joining_to_normal_one_version_at_a_time() {
        let t = five();
        assert_eq!(t.states, [Normal, Normal, Normal, Absent, Absent]);
        let joining = t.begin(Change::Join(3), 3).unwrap();
        assert_eq!(joining.version, 2);
        assert_eq!(joining.states[3], Joining);
        assert_eq!(joining.in_progress(), Some(Change::Join(3)));
        assert_eq!(joining.members_now(), [true, true, true, false, false]);
        assert_eq!(joining.members_next(), [true, true, true, true, false]);
        assert_eq!(joining.participants(), [0, 1, 2, 3]);
        // Resuming the same change changes nothing; another is refused.
        assert_eq!(joining.begin(Change::Join(3), 3), Ok(joining.clone()));
        assert_eq!(
            joining.begin(Change::Join(4), 3),
            Err(Refused::Busy(Change::Join(3)))
        );
        assert_eq!(
            joining.begin(Change::Decommission(0), 3),
            Err(Refused::Busy(Change::Join(3)))
        );
        let switching = joining.switch().unwrap();
        assert_eq!((switching.version, switching.switching), (3, true));
        assert_eq!(switching.switch(), Some(switching.clone()), "once");
        assert_eq!(switching.in_progress(), Some(Change::Join(3)));
        let joined = switching.finish().unwrap();
        assert_eq!((joined.version, joined.states[3]), (4, Normal));
        assert!(!joined.switching);
        assert_eq!(joined.switch(), None);
        assert_eq!(joined.in_progress(), None);
        assert_eq!(joined.finish(), None);
        assert_eq!(
            joined.begin(Change::Join(3), 3),
            Err(Refused::NotAbsent(Normal))
        );
    }

    #[test]
    fn leaving_keeps_a_node_a_replica_until_it_has_left() {
        let t = Topology::seed(&[false; 4]);
        let leaving = t.begin(Change::Decommission(1), 3).unwrap();
        assert_eq!(leaving.states[1], Leaving);
        assert_eq!(leaving.members_now(), [true; 4]);
        assert_eq!(leaving.members_next(), [true, false, true, true]);
        assert_eq!(leaving.participants(), [0, 1, 2, 3]);
        assert_eq!((t.leaving(), leaving.leaving()), (usize::MAX, 1));
        assert_eq!(t.commit_order(&leaving), [0, 1, 2, 3]);
        let left = leaving.finish().unwrap();
        assert_eq!(left.leaving(), usize::MAX);
        assert_eq!(
            leaving.commit_order(&left),
            [0, 2, 3, 1],
            "the leaving node learns it has left last"
        );
        assert_eq!(left.states[1], Left);
        assert_eq!(left.participants(), [0, 2, 3]);
        // A node id is not reused, and the ring keeps rf members.
        assert_eq!(
            left.begin(Change::Join(1), 3),
            Err(Refused::NotAbsent(Left))
        );
        assert_eq!(
            left.begin(Change::Decommission(0), 3),
            Err(Refused::TooFew { left: 2, rf: 3 })
        );
        assert_eq!(
            left.begin(Change::Remove(1), 3),
            Err(Refused::NotAMember(Left))
        );
    }

    #[test]
    fn a_removed_node_does_not_vote() {
        let t = Topology::seed(&[false; 4]);
        let removing = t.begin(Change::Remove(2), 3).unwrap();
        assert_eq!(removing.states[2], Removing);
        assert_eq!(removing.participants(), [0, 1, 3]);
        assert_eq!(removing.in_progress(), Some(Change::Remove(2)));
        assert_eq!(t.commit_order(&removing), [0, 1, 3], "not the removed node");
        let removed = removing.switch().unwrap().finish().unwrap();
        assert_eq!(removing.commit_order(&removed), [0, 1, 3]);
    }

    #[test]
    fn only_a_newer_version_replaces_a_ring() {
        let t = five();
        let a = t.begin(Change::Join(3), 3).unwrap();
        let b = t.begin(Change::Join(4), 3).unwrap();
        assert_eq!(t.accepts(&a), Ok(true));
        assert_eq!(a.accepts(&a), Ok(false));
        assert_eq!(a.accepts(&t), Ok(false));
        let Err(Unaccepted::Lost(why)) = a.accepts(&b) else {
            panic!("a conflict is a lost race")
        };
        assert!(why.contains("another topology change won"), "{why}");
        // A flush of the ring a newer one came from, stored after it: it
        // was never part of this node's history.
        let flushed = t.flush(&[0]).unwrap();
        let c = a.switch().unwrap();
        assert_eq!(c.accepts(&t), Ok(false), "an older ring it followed");
        let Err(Unaccepted::Lost(why)) = c.accepts(&flushed) else {
            panic!("a flush the ring did not follow lost")
        };
        assert!(why.contains("did not follow ring version 2"), "{why}");
        let again = flushed.flush(&[1]).unwrap();
        assert_eq!(again.accepts(&flushed), Ok(false), "a flush it followed");
        let short = Topology::seed(&[false; 3]);
        assert!(matches!(t.accepts(&short), Err(Unaccepted::Misfit(_))));
    }

    #[test]
    fn the_ring_of_a_change_has_the_joiner_pending() {
        let ids: Vec<String> = (1..=5).map(|i| format!("n{i}")).collect();
        let joining = five().begin(Change::Join(3), 3).unwrap();
        let ring = joining.ring(&ids, 16, 3);
        let mut pending = 0;
        for (_, replicas) in ring.ranges() {
            assert!(!replicas.contains(&3) && !replicas.contains(&4));
            assert!(replicas.pending().iter().all(|&p| p == 3));
            pending += replicas.pending().len();
        }
        assert!(pending > 0);
        let joined = joining.finish().unwrap().ring(&ids, 16, 3);
        assert!(joined.ranges().iter().any(|(_, r)| r.contains(&3)));
        assert!(joined.ranges().iter().all(|(_, r)| r.pending().is_empty()));
    }

    #[test]
    fn a_flush_moves_its_databases_on_a_generation_in_one_version() {
        let t = Topology::seed(&[false, false, false]);
        assert_eq!(
            t.keyspace(3),
            Keyspace {
                db: 3,
                generation: 0
            }
        );
        let once = t.flush(&[3]).unwrap();
        assert_eq!(once.version, t.version + 1);
        assert_eq!(once.keyspace(3).generation, 1);
        assert_eq!(once.keyspace(0), Keyspace::DEFAULT);
        let all: Vec<u8> = (0..DATABASES).collect();
        let twice = once.flush(&all).unwrap();
        assert_eq!(
            (twice.keyspace(3).generation, twice.keyspace(0).generation),
            (2, 1)
        );
        // What the generations before hold is read by nothing.
        let old3 = Keyspace {
            db: 3,
            generation: 1,
        }
        .stored(b"k")
        .unwrap();
        let now3 = twice.keyspace(3).stored(b"k").unwrap();
        assert!(twice.flushed(&old3) && twice.flushed(b"k"));
        assert!(!twice.flushed(&now3) && !once.flushed(&old3) && !once.flushed(b"k"));
        let mut joining = t.clone();
        joining.states[2] = NodeState::Joining;
        assert_eq!(joining.flush(&[0]), Err(Refused::Busy(Change::Join(2))));
    }

    #[test]
    fn status_codes_are_nodetools() {
        assert_eq!(status_code(true, Normal), "UN");
        assert_eq!(status_code(false, Normal), "DN");
        assert_eq!(status_code(true, Joining), "UJ");
        assert_eq!(status_code(true, Leaving), "UL");
        assert_eq!(status_code(false, Removing), "DL");
    }
}
