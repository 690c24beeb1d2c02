//! Group commit without threads (`Options::stepped`): the sealer's and
//! the syncer's turns, taken by whoever drives the engine (the runtime of
//! a deterministic simulation, as it parks), one after the other.

use super::GroupCommit;
use super::syncer::Syncer;

/// What the sealer and the syncer keep between their turns.
pub(crate) struct Steps {
    records: Vec<u8>,
    syncer: Syncer,
}

impl GroupCommit {
    /// The turns' state, before the first.
    pub(crate) fn steps(&self) -> Steps {
        Steps {
            records: Vec::new(),
            syncer: self.syncer(),
        }
    }

    /// The sealer's turn, if anything is queued (or the queue closed
    /// while the outbox is open), then the syncer's. Answers whether
    /// either did anything. Never waits: flushes are the caller's to run
    /// between turns.
    pub(crate) fn step(&self, steps: &mut Steps) -> bool {
        let open = !self.outbox.lock().closed;
        let q = self.queue.lock();
        let sealed = if q.has_work() || (q.closed && open) {
            self.seal_turn(q, &mut steps.records, false);
            true
        } else {
            drop(q);
            false
        };
        self.step_syncer(&mut steps.syncer) || sealed
    }
}
