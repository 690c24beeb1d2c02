//! The caller's-thread path: records sealed or merged by the writing
//! thread, under its cell lock, straight into the outbox, without the
//! sealer.
//!
//! A record is in the outbox before the cell lock is released, so a barrier
//! queued by anyone who then sees the new state follows it. New versions
//! of this node's shards are sealed as every one is (see `seal`).

use std::sync::atomic::Ordering::{Relaxed, Release};

use tokio::sync::oneshot;

use crate::add::OwnAdd;
use crate::cache::{Cached, PendingAdd};
use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::ids::tail::TailIds;
use crate::key::Key;
use crate::outcome::Staged;
use crate::version::Version;

use super::GroupCommit;
use super::relay::Answer;

impl GroupCommit {
    /// Seals one add on the caller's thread, under the cell lock held by
    /// `cached`'s owner and the version `v` (read-locked), straight into the
    /// outbox. For an add handed to the sealer that finds nothing to
    /// combine with (a cold cell): it skips the hand-off to the sealer.
    /// Its waiter is answered on this thread if refused (a closed outbox
    /// drops it: it reads as `Closed`), by the syncer otherwise.
    pub(crate) fn seal_now(&self, key: &Key, cached: &mut Cached, v: &Version, add: PendingAdd) {
        // The cell's pending list is empty: it holds the one add meanwhile.
        let mut waiting = std::mem::take(&mut cached.pending);
        waiting.push(add);
        self.seal_adds(key, cached, v, &mut waiting, true, &mut Answer::send);
        cached.pending = waiting;
    }

    /// Seals one add of [`Engine::add`](crate::Engine::add) on the
    /// caller's thread, like [`GroupCommit::seal_now`] but with no waiter:
    /// the batch's one ack, from [`GroupCommit::ack_now`], covers its
    /// record. An add the rule refuses changes nothing; a closed outbox
    /// refuses the batch (`Closed`).
    pub(crate) fn seal_one_now(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        delta: i64,
    ) -> Result<Staged> {
        let mut rule = OwnAdd::start(&cached.cell, self.counter_id, self.on_expired(cached));
        if let Err(e) = rule.add(delta) {
            return Ok(Staged::Refused(e));
        }
        let generation = v.active.generation();
        let outcome = self.seal_own(key, cached, v, &rule, |out, outcome| {
            out.add_batched(key, outcome, generation);
            false // the batch's ack wakes the syncer
        })?;
        Ok(Staged::Sealed(outcome))
    }

    /// Puts the record of a replica's `cell` for `key` straight into the
    /// outbox, on the caller's thread, under the cell lock the caller holds
    /// (so a barrier queued by anyone who then sees the merged state follows
    /// it). Its waiter comes separately, from [`GroupCommit::ack_now`].
    pub(crate) fn append_now(&self, key: &Key, cell: &Cell, v: &Version) -> Result<()> {
        let mut out = self.outbox.lock();
        if out.closed {
            return Err(Error::Closed);
        }
        out.add_cell(key, cell, v.active.generation());
        Ok(())
    }

    /// Like [`GroupCommit::append_now`], for a replica's `cell` that came
    /// with the ids `tail` (see `ids::tail`): one record holds both, and
    /// state read here leaves the node only once it is durable
    /// ([`GroupCommit::tails_unsynced`]).
    pub(crate) fn append_tail_now(
        &self,
        key: &Key,
        cell: &Cell,
        tail: &TailIds,
        v: &Version,
    ) -> Result<()> {
        let mut out = self.outbox.lock();
        if out.closed {
            return Err(Error::Closed);
        }
        out.add_tail_cell(key, cell, tail, v.active.generation());
        self.tail_batch.fetch_max(out.batch, Release);
        Ok(())
    }

    /// A receiver that fires once everything now in the outbox is durable:
    /// the barrier for records put there by [`GroupCommit::append_now`] and
    /// [`GroupCommit::seal_now`]. Records still with the sealer are not
    /// covered (see `Engine::apply`).
    pub(crate) fn ack_now(&self) -> oneshot::Receiver<Result<()>> {
        let (tx, rx) = oneshot::channel();
        let mut out = self.outbox.lock();
        if out.closed {
            let _ = tx.send(Err(Error::Closed));
            return rx;
        }
        out.add_ack(tx);
        let wake = out.wake_for(|| self.parks_soon());
        drop(out);
        if wake {
            self.outbox_cv.notify_one();
        }
        rx
    }

    /// Whether this thread's runtime writes this group commit's work as it
    /// parks, and fsyncs are fast enough for it to.
    pub(super) fn parks_soon(&self) -> bool {
        self.fast_syncs.load(Relaxed) && !self.writes_stalled() && self.commits_on_park()
    }

    /// Test seam (`Options::stall_writes`): the disk takes no writes, and
    /// only the syncer waits for it, never a runtime's thread.
    pub(super) fn writes_stalled(&self) -> bool {
        self.opts
            .stall_writes
            .as_ref()
            .is_some_and(|s| s.load(Relaxed))
    }
}
