//! The sealer: takes the queue, combines each hot cell's pending adds into
//! one read-modify-write, and hands the records to the outbox.
//!
//! A hot cell's adds are sealed as every new version of this node's shard
//! is (see `seal`); the records queued by `apply` and `reset` go to the
//! outbox ahead of them, and the acks queued with those after them.

use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::key::Key;

use super::GroupCommit;
use super::relay::Answer;

/// Work waiting for the sealer.
#[derive(Default)]
pub(super) struct Queue {
    /// Framed records from `apply` and `reset`, already applied in memory.
    pub(super) records: Vec<u8>,
    /// Highest memtable generation those records went into.
    pub(super) gen_max: u64,
    /// Waiters for those records.
    pub(super) acks: Vec<oneshot::Sender<Result<()>>>,
    /// Keys with pending adds, in arrival order.
    pub(super) adds: Vec<Key>,
    /// Set by `close`.
    pub(super) closed: bool,
}

impl Queue {
    pub(super) fn has_work(&self) -> bool {
        !self.acks.is_empty() || !self.adds.is_empty()
    }
}

impl GroupCommit {
    /// Runs the sealer until the engine closes.
    pub(crate) fn run_sealer(&self) {
        let mut records = Vec::new();
        loop {
            let mut q = self.queue.lock();
            while !q.has_work() && !q.closed {
                self.queue_cv.wait(&mut q);
            }
            if self.seal_turn(q, &mut records, true) {
                return;
            }
        }
    }

    /// One turn of the sealer: takes everything queued (`q`, locked) and
    /// seals it into the outbox. Waits while flushes are behind if
    /// `stall`. Answers whether the queue was closed and empty: the outbox
    /// is then closed, and the sealer's work is over.
    pub(super) fn seal_turn(
        &self,
        mut q: parking_lot::MutexGuard<'_, Queue>,
        records: &mut Vec<u8>,
        stall: bool,
    ) -> bool {
        let closing = q.closed && !q.has_work();
        std::mem::swap(records, &mut q.records);
        let gen_max = std::mem::take(&mut q.gen_max);
        let acks = std::mem::take(&mut q.acks);
        let adds = std::mem::take(&mut q.adds);
        drop(q);
        if closing {
            self.outbox.lock().close();
            self.outbox_cv.notify_one();
            return true;
        }
        if let Some(seam) = &self.opts.panic_seal
            && seam.load(Relaxed)
        {
            panic!("injected sealer panic");
        }

        // Backpressure: while too many frozen memtables wait for
        // flushing, writes wait; unless flushes find the disk full, when
        // the adds are refused rather than left waiting for room. The
        // records (applied in memory already) go on to the log.
        let frozen_max = self.opts.frozen_memtables_max.max(1);
        if stall {
            self.versions.stall_while_behind(frozen_max, || {
                self.poison.is_set() || self.space.tables_full()
            });
        }
        let no_room = self
            .space
            .check(|| self.versions.current().frozen.len() >= frozen_max)
            .err()
            .and_then(|e| match e {
                Error::DiskFull(why) => Some(why),
                _ => None,
            });
        // The records first: the adds sealed after them may answer
        // the state they hold.
        if !records.is_empty() {
            let mut out = self.outbox.lock();
            if !out.closed {
                out.add_records(records, gen_max);
            }
            records.clear();
        }
        self.seal_all(&adds, no_room);
        let mut out = self.outbox.lock();
        if out.closed {
            // The syncer is gone (see `fail_waiters`): nobody will write this.
            drop(out);
            let err = Err(self.poison.error());
            self.complete(&err, acks, Vec::new(), 0, false, false);
            return false;
        }
        out.hand_over(acks);
        let wake = out.syncer_would_act();
        drop(out);
        if wake {
            self.outbox_cv.notify_one();
        }

        let bytes_max = self.opts.memtable_bytes_max;
        if self.versions.read().active.bytes() >= bytes_max
            && self.versions.freeze_if_full(bytes_max)
        {
            self.work.flush();
        }
        false
    }

    /// Seals the pending adds of every key in `adds`, each key's as one
    /// new version. With `no_room` (why the disk is full) they are refused.
    fn seal_all(&self, adds: &[Key], no_room: Option<String>) {
        let poisoned = self.poison.is_set();
        let v = self.versions.read();
        // Swapped with each key's pending list, so both stay allocated.
        let mut waiting = Vec::new();
        // Early outcomes and refusals, delivered once every key is sealed.
        let mut answers = Vec::new();
        for key in adds {
            let mut stripe = self.cache.stripe(key).lock();
            let Some(cached) = stripe.get_mut(key) else {
                continue; // never evicted while adds are pending; nothing to seal
            };
            std::mem::swap(&mut cached.pending, &mut waiting);
            if waiting.is_empty() {
                continue;
            }
            if poisoned || no_room.is_some() {
                for done in waiting.drain(..).filter_map(|w| w.done) {
                    let err = match &no_room {
                        Some(why) if !poisoned => Error::DiskFull(why.clone()),
                        _ => self.poison.error(),
                    };
                    answers.push(Answer::Add(done, Err(err)));
                }
                continue;
            }
            self.seal_adds(key, cached, &v, &mut waiting, false, &mut |a| {
                answers.push(a)
            });
        }
        drop(v);
        self.relay.deliver(&mut answers);
    }
}
