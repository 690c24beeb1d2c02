//! A cell's agreed part: one acceptor's Paxos state of its partition's
//! registers (`tally_model::paxos`), kept in the cell of the partition's
//! reserved column. It is this node's own state: a prepare, a proposal, a
//! commit, or another replica's state merged in when ranges move
//! (`Engine::merge_agreed`), changes it under the cell lock, and it is
//! durable before the node answers. Replay and compaction merge it by its
//! own rule, a join (each part the later), whatever the cell's epochs do;
//! it never travels with the cell's shards (replication and repair carry
//! counters only, and leave cells of nothing else out).

use std::sync::Arc;

use tally_model::paxos::{Acceptor, REGISTERS_BYTES_MAX};

use super::Cell;

/// Most bytes an agreed part takes encoded: an accepted and a committed
/// state of the most registers, and their ballots.
pub const AGREED_BYTES_MAX: usize = 2 * REGISTERS_BYTES_MAX + 4096;

/// Bytes it holds in memory, roughly.
pub(super) fn size(a: &Acceptor) -> usize {
    let registers = |r: &tally_model::paxos::Registers| {
        r.size() + r.0.len() * std::mem::size_of::<tally_model::paxos::Register>()
    };
    std::mem::size_of::<Acceptor>()
        + registers(&a.committed.value)
        + a.accepted.as_ref().map_or(0, |x| registers(&x.value))
}

impl Cell {
    /// Whether the cell holds an agreed part and nothing else: no counter,
    /// no list (a partition only agreement touched). Such a cell is this
    /// node's own Paxos state alone, which repair does not compare.
    pub fn holds_only_agreed(&self) -> bool {
        self.agreed.is_some()
            && self.shards.is_empty()
            && self.list.is_none()
            && self.epoch == super::Epoch::default()
    }

    /// Merges another copy of the agreed part; whether this one changed.
    #[cold]
    pub(super) fn merge_agreed(&mut self, theirs: &Arc<Acceptor>) -> bool {
        match &mut self.agreed {
            None => {
                self.agreed = Some(theirs.clone());
                true
            }
            Some(mine) if **mine == **theirs => false,
            Some(mine) => {
                let before = mine.clone();
                Arc::make_mut(mine).merge(theirs);
                *mine != before
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Epoch, Merger, Shard};
    use tally_model::paxos::{Accepted, Ballot, Register, Registers};

    fn state(promised: u64, committed: u64, value: &str) -> Arc<Acceptor> {
        let ballot = |ms| Ballot {
            ms,
            seq: 0,
            proposer: 1,
        };
        let mut a = Acceptor::default();
        a.commit(Accepted {
            ballot: ballot(committed),
            value: Registers(vec![Register {
                column: Vec::new(),
                value: value.as_bytes().to_vec(),
                at_ms: 0,
            }]),
        });
        a.prepare(ballot(promised));
        Arc::new(a)
    }

    #[test]
    fn the_agreed_part_merges_whatever_the_epochs_do() {
        let m = Merger::default();
        let older = Cell::from_parts(
            Epoch::at(1),
            [Shard {
                counter_id: 1,
                clock: 1,
                value: 5,
            }],
        )
        .with_agreed(Some(state(9, 9, "new")));
        let mut newer = Cell::from_parts(Epoch::at(2), []).with_agreed(Some(state(4, 3, "old")));
        assert!(newer.merge_changed(&older, &m));
        assert_eq!(newer.epoch().n, 2, "the epoch still wins");
        assert!(newer.shards().is_empty());
        let agreed = newer.agreed().unwrap();
        assert_eq!(agreed.committed.value.0[0].value, b"new");
        assert_eq!(agreed.promised.ms, 9);
        // Again: nothing changes.
        assert!(!newer.merge_changed(&older, &m));
        let mut plain = Cell::from_parts(Epoch::at(3), []);
        plain.merge(&older, &m);
        assert_eq!(plain.agreed(), older.agreed());
        plain.check_invariants();
    }

    #[test]
    fn a_changed_part_is_copied_not_shared() {
        let shared = state(2, 1, "a");
        let mut cell = Cell::new().with_agreed(Some(shared.clone()));
        cell.agreed_mut().prepare(Ballot {
            ms: 7,
            seq: 0,
            proposer: 2,
        });
        assert_eq!(shared.promised.ms, 2);
        assert_eq!(cell.agreed().unwrap().promised.ms, 7);
        assert!(cell.len_bytes() > std::mem::size_of::<Cell>());
    }
}
