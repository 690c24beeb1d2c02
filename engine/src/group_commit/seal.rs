//! Sealing a new version of this node's own shard: one order for every
//! path that makes one.
//!
//! An add for the sealer that finds its cell cold, on its caller's
//! thread, and the adds the sealer combines ([`GroupCommit::seal_adds`]), a batch's add (`direct`), adds with ids
//! (`once`) and a unique counter's admissions (`admit`) each decide their
//! adds by the one add rule ([`OwnAdd`]), then seal its outcome with
//! [`GroupCommit::seal_own`], under the cell lock and a read of the
//! version, in this order:
//!
//! 1. The rule has answered every add; nothing is changed yet. When it
//!    took none, nothing is written.
//! 2. Under the outbox lock, a closed outbox (the engine shut down, or a
//!    thread of it died) refuses the write: `Error::Closed`, the cell as
//!    it was. Otherwise the new version goes into the cached cell, its
//!    record (with its waiters, ids or members) into the outbox, and the
//!    cell notes the group commit it joined. So the cell never holds a
//!    version whose record the log will not get, and a barrier or an ack
//!    taken by anyone who sees the new version follows its record.
//! 3. With the outbox lock released: the key is marked in the active
//!    memtable (`Cached::mark_written`), whose flush then takes the cached
//!    cell. After step 2, so a refused write marks nothing; outside the
//!    outbox lock, which the syncer and every writer take, so that lock is
//!    held for the append alone. The version read is held throughout, so
//!    the marked memtable is the generation the record names, and no
//!    flush comes in between.
//! 4. Only then do queued adds learn their outcome, early (before the
//!    fsync): a shard version never leaves the node without its record
//!    in the outbox.

use crate::add::{CountBack, OwnAdd};
use crate::cache::{Cached, PendingAdd};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::outcome::AddOutcome;
use crate::version::Version;

use super::GroupCommit;
use super::outbox::{Outbox, Waiters};
use super::relay::Answer;

impl GroupCommit {
    /// Seals `rule`'s new version of this node's shard of `key`, in the
    /// order of the module doc, under the cell lock (held by `cached`'s
    /// owner) and the version `v` (read-held): `record` puts its record
    /// into the outbox and answers whether to wake the syncer for it. A
    /// closed outbox refuses it (`record` is dropped unrun: waiters it
    /// holds read as closed too), and nothing changes.
    pub(super) fn seal_own(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        rule: &OwnAdd,
        record: impl FnOnce(&mut Outbox, &AddOutcome) -> bool,
    ) -> Result<AddOutcome> {
        let mut out = self.outbox.lock();
        if out.closed {
            return Err(Error::Closed);
        }
        let outcome = rule.install(&mut cached.cell);
        let wake = record(&mut out, &outcome);
        cached.sealed_batch = out.batch;
        drop(out);
        if wake {
            self.outbox_cv.notify_one();
        }
        cached.mark_written(key, v);
        Ok(outcome)
    }

    /// Seals the adds `waiting` on `key` (which it empties, keeping the
    /// allocation) as one new version: a hot cell's pending adds on the
    /// sealer, or one for the sealer on its caller's thread. Refusals go to
    /// `answer` at once. Each add taken answers its own value after the
    /// fsync, and its outcome as soon as the record is in the
    /// outbox, unless a record with ids is not durable yet (see `once`).
    /// With `wake` this thread wakes the syncer for the record if it must
    /// (the sealer wakes it once per turn instead).
    pub(super) fn seal_adds(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        waiting: &mut Vec<PendingAdd>,
        wake: bool,
        answer: &mut impl FnMut(Answer),
    ) {
        let early = !self.ids_unsynced();
        let generation = v.active.generation();
        let mut rule = OwnAdd::start(&cached.cell, self.counter_id, self.on_expired(cached));
        let mut done: Waiters = Vec::with_capacity(waiting.len());
        waiting.retain_mut(|add| match rule.add(add.delta) {
            Ok(value) => {
                done.extend(add.done.take().map(|tx| (value, tx)));
                true
            }
            Err(e) => {
                if let Some(tx) = add.done.take() {
                    answer(Answer::Add(tx, Err(e)));
                }
                false // its dropped `sealed` reads as refused
            }
        });
        if waiting.is_empty() {
            return;
        }
        let sealed = self.seal_own(key, cached, v, &rule, |out, outcome| {
            out.add_sealed(key, outcome, generation, done);
            wake && out.wake_for(|| self.parks_soon())
        });
        if let (Ok(outcome), true) = (sealed, early) {
            let mut back = CountBack::from(outcome.value);
            for add in waiting.drain(..).rev() {
                let value = back.value_after(add.delta);
                answer(Answer::Sealed(add.sealed, AddOutcome { value, ..outcome }));
            }
        }
        waiting.clear();
    }
}
