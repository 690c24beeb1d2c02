//! Tails of ids, the engine's side (see `ids::tail`): a replica takes them
//! with its cells, and answers and forgets them when the applier's next
//! incarnation asks; a node that restarted uncleanly learns its lost
//! incarnations' tails before it applies ids again.

use std::collections::HashMap;

use super::Engine;
use crate::cell::{Cell, Epoch};
use crate::error::{Error, Result};
use crate::ids::tail::{Fenced, TailIds, TailOp};
use crate::key::Key;
use crate::outcome::Wait;
use crate::retired;

/// A key's tail ops, with the cell they were applied to.
pub type LearnedTail = (Key, Cell, Vec<TailOp>);

impl Engine {
    /// Merges a replica's `cell` that came with the ids `tail` and logs
    /// both in one record, straight into the outbox (never into the
    /// sealer's queue: the caller's ack covers it). Answers the cell's
    /// epoch, and whether the active memtable is full.
    pub(super) fn apply_tail(
        &self,
        key: &Key,
        cell: &Cell,
        tail: &TailIds,
    ) -> Result<(Epoch, bool)> {
        let tails = self.ids.tails();
        let applied = self.cache.with_cell(key, |cached, v| {
            if let Err(Fenced(source)) = tails.take(key, tail) {
                return Err(Error::Fenced { counter_id: source });
            }
            cached
                .cell
                .try_merge(cell, self.merger())
                .map_err(Error::from)?;
            cached.mark_written(key, v);
            // Logged even when the cell did not change: the tail may be new.
            self.commit.append_tail_now(key, cell, tail, v)?;
            Ok((
                cached.cell.epoch(),
                v.active.bytes() >= self.opts.memtable_bytes_max,
            ))
        });
        let applied = applied.and_then(|a| a);
        if let Err(e) = &applied {
            self.count_refusal(e);
        }
        applied
    }

    /// This node's incarnations retired by unclean restarts whose tails it
    /// has not learned yet: until it has, from every replica it shares
    /// ranges with, it must not apply ids (see `ids::tail`).
    pub fn retired(&self) -> Result<Vec<u64>> {
        retired::read(&self.dir)
    }

    /// For another node's new incarnation: fences its retired `sources`
    /// (their messages still in flight are refused from now on) and answers
    /// their tails held here, per key, in batch order. The caller reads the
    /// cells of the keys it sends ([`Engine::get`]), a page at a time.
    pub fn fence_tails(&self, sources: &[u64]) -> Vec<(Key, Vec<TailOp>)> {
        let mut out: Vec<(Key, Vec<TailOp>)> = Vec::new();
        let mut at: HashMap<Key, usize> = HashMap::new();
        for (key, op) in self.ids.tails().fence(sources) {
            match at.get(&key) {
                Some(&i) => out[i].1.push(op),
                None => {
                    at.insert(key.clone(), out.len());
                    out.push((key, vec![op]));
                }
            }
        }
        out
    }

    /// Forgets the tails of `sources` for good, durably: their node learned
    /// them.
    pub fn forget_tails(&self, sources: &[u64]) -> Result<()> {
        self.ids.tails().forget(sources);
        self.ids.persist()
    }

    /// Learns tails of this node's retired incarnations from a replica:
    /// merges each key's cell (so that a retry answered from the tail finds
    /// its add here too, and replicates it), remembers the ops as applied
    /// here, and makes both durable before it answers.
    pub async fn learn_tails(&self, learned: Vec<LearnedTail>) -> Result<()> {
        let cells = learned.iter().map(|(k, c, _)| (k, c, None));
        for r in self.apply(cells, Wait::Durable).await? {
            r?;
        }
        let ledger = self.ids.ledger();
        for (key, _, mut ops) in learned {
            // A later application of one id (a catch-up after a reset) wins.
            ops.sort_by_key(|op| op.batch);
            let key = crate::ids::fingerprint(&key);
            for op in ops {
                ledger.record(key, &op.client, op.op);
            }
        }
        self.ids.persist()
    }

    /// Takes `sources` off the retired list, durably: their tails are
    /// learned from every replica.
    pub fn tails_learned(&self, sources: &[u64]) -> Result<()> {
        retired::remove(&self.dir, sources)
    }
}
