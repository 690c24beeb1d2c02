//! The sealer: takes the queue, combines each hot cell's pending adds into
//! one read-modify-write, and hands the records to the outbox.
//!
//! [`seal`] is the read-modify-write itself, shared with the adds sealed on
//! their callers' threads (see `direct`).

use std::sync::atomic::Ordering::{Acquire, Relaxed};

use tokio::sync::oneshot;

use crate::cache::PendingAdd;
use crate::cell::{Cell, Shard};
use crate::commitlog;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::outcome::AddOutcome;

use super::GroupCommit;
use super::outbox::Sealed;
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
            let closing = q.closed && !q.has_work();
            std::mem::swap(&mut records, &mut q.records);
            let gen_max = std::mem::take(&mut q.gen_max);
            let acks = std::mem::take(&mut q.acks);
            let adds = std::mem::take(&mut q.adds);
            drop(q);
            if closing {
                self.outbox.lock().close();
                self.outbox_cv.notify_one();
                return;
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
            self.versions.stall_while_behind(frozen_max, || {
                self.poison.is_set() || self.space.tables_full()
            });
            let no_room = self
                .space
                .check(|| self.versions.current().frozen.len() >= frozen_max)
                .err()
                .and_then(|e| match e {
                    Error::DiskFull(why) => Some(why),
                    _ => None,
                });
            let mut sealed = Vec::with_capacity(adds.len());
            let generation = self.seal_all(&adds, &mut records, &mut sealed, no_room);

            let mut out = self.outbox.lock();
            if out.closed {
                // The syncer is gone (see `fail_waiters`): nobody will write this.
                drop(out);
                records.clear();
                let err = Err(self.poison.error());
                self.complete(&err, acks, sealed, 0, false, false);
                continue;
            }
            out.hand_over(&records, gen_max.max(generation), acks, sealed);
            let wake = out.syncer_would_act();
            drop(out);
            if wake {
                self.outbox_cv.notify_one();
            }
            records.clear();

            let bytes_max = self.opts.memtable_bytes_max;
            if self.versions.read().active.bytes() >= bytes_max
                && self.versions.freeze_if_full(bytes_max)
            {
                self.work.flush();
            }
        }
    }

    /// Seals every key in `adds`; returns the memtable generation written
    /// to. With `no_room` (why the disk is full) the adds are refused.
    fn seal_all(
        &self,
        adds: &[Key],
        records: &mut Vec<u8>,
        sealed: &mut Vec<Sealed>,
        no_room: Option<String>,
    ) -> u64 {
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
            // This record joins the open group commit or the next one.
            cached.sealed_batch = self.durable_batch.load(Acquire) + 2;
            if let Some(outcome) = seal(
                self.counter_id,
                &mut cached.cell,
                &mut waiting,
                sealed,
                !self.ids_unsynced(),
                &mut |a| answers.push(a),
            ) {
                cached.mark_written(key, &v);
                // The log gets only the new own shard: the rest of the cell is
                // already wherever it came from.
                let own = std::slice::from_ref(&outcome.shard);
                commitlog::encode_record_parts(records, key, outcome.epoch, own);
            }
        }
        let generation = v.active.generation();
        drop(v);
        self.relay.deliver(&mut answers);
        generation
    }
}

/// One read-modify-write of `cell` (under its lock) for all the adds in
/// `waiting`, which it empties. Returns the outcome, or `None` if every add
/// was refused. Refusals and early outcomes go to `answer`.
///
/// The adds kept share one outcome but each answers its own value: the one
/// it would have seen had they run one after another in arrival order (the
/// cell with this node's shard as far as that add moved it); the last one
/// answers the cell's value. Combining thus leaves the values answered as
/// they would have been without it; the node's batches answer by this rule
/// too. Early outcomes are sent only when `early` (see `once` for when
/// they must wait for the fsync); otherwise their senders are dropped.
pub(super) fn seal<'s>(
    counter_id: u64,
    cell: &mut Cell,
    waiting: &mut Vec<PendingAdd>,
    sealed: &'s mut Vec<Sealed>,
    early: bool,
    answer: &mut impl FnMut(Answer),
) -> Option<&'s AddOutcome> {
    restart_expired(cell);
    // A cell that cannot take a new version of this node's shard refuses
    // every add.
    let clock = match cell.next_own_clock(counter_id) {
        Ok(clock) => clock,
        Err(limit) => {
            for done in waiting.drain(..).filter_map(|add| add.done) {
                answer(Answer::Add(done, Err(limit.into())));
            }
            return None;
        }
    };
    let mut own = own_shard(cell, counter_id);
    let own_before = own.value;
    let others = cell.sum() - i128::from(own.value);
    // Refuse what would overflow, in arrival order; keep the rest.
    waiting.retain_mut(|add| match added(others, own.value, add.delta) {
        Ok((o, _)) => {
            own.value = o;
            true
        }
        Err(e) => {
            if let Some(done) = add.done.take() {
                answer(Answer::Add(done, Err(e)));
            }
            false
        }
    });
    if waiting.is_empty() {
        return None;
    }
    let combined = u32::try_from(waiting.len()).unwrap_or(u32::MAX);
    let outcome = put_next_version(cell, own, clock, combined);
    let mut done = Vec::with_capacity(waiting.len());
    let mut own_value = own_before;
    for add in waiting.drain(..) {
        // Cannot fail: the same sums, in the same order, were checked above.
        let (o, value) =
            added(others, own_value, add.delta).expect("an add kept above is in range at its turn");
        own_value = o;
        if let (true, Some(tx)) = (early, add.sealed) {
            let outcome = AddOutcome {
                value,
                ..outcome.clone()
            };
            answer(Answer::Sealed(tx, outcome));
        }
        done.extend(add.done.map(|tx| (value, tx)));
    }
    debug_assert_eq!(
        own_value, outcome.shard.value,
        "the kept deltas do not add up to the new shard's value"
    );
    sealed.push((outcome, done));
    sealed.last().map(|(outcome, _)| outcome)
}

/// One add of `delta` to this node's shard, worth `own`, in a cell whose
/// other shards sum to `others`: the shard's new value and the counter's,
/// or [`Error::Overflow`] when either is outside the range of an `i64`.
/// The counter's value is checked exactly, so an add is refused as long as
/// it leaves a sum past `i64` (replicas' shards can make one), and taken
/// once it brings the sum back in range.
pub(super) fn added(others: i128, own: i64, delta: i64) -> Result<(i64, i64)> {
    let refused = || Error::Overflow {
        value: others + i128::from(own),
        delta,
    };
    let own = own.checked_add(delta).ok_or_else(refused)?;
    let value = i64::try_from(others + i128::from(own)).map_err(|_| refused())?;
    Ok((own, value))
}

/// Test seam `Options::keep_expired`: leaders never restart.
pub(super) static KEEP_EXPIRED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Moves a counter whose deadline passed to the epoch a reset makes, so
/// that the add about to be made starts it again from 0 with no deadline,
/// as Redis' `INCR` on an expired key does. Every leader makes the same
/// epoch (`crate::cell::Epoch::restart`), so restarts on several merge.
/// A cell whose epoch is at its limit stays as it is (and absent).
pub(super) fn restart_expired(cell: &mut Cell) {
    // Most counters have no deadline: one comparison on the add path.
    if cell.epoch().expiry.at_ms == 0 || KEEP_EXPIRED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if cell.epoch().expired(crate::cell::now_ms()) {
        let _ = cell.try_reset();
    }
}

/// This node's shard of `cell`, a zero one if it has none yet.
pub(super) fn own_shard(cell: &Cell, counter_id: u64) -> Shard {
    cell.shard(counter_id).copied().unwrap_or(Shard {
        counter_id,
        clock: 0,
        value: 0,
    })
}

/// Installs `own`, its value already moved by the adds (and checked: the
/// cell's value stays in range), as the next version of this node's shard,
/// at `clock` (from [`Cell::next_own_clock`]); answers the adds' outcome.
pub(super) fn put_next_version(
    cell: &mut Cell,
    mut own: Shard,
    clock: u64,
    combined: u32,
) -> AddOutcome {
    own.clock = clock;
    cell.put_own(own);
    cell.check_invariants();
    AddOutcome {
        epoch: cell.epoch(),
        shard: own,
        value: cell
            .value()
            .expect("the adds were checked to leave the value in range"),
        combined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_add_is_checked_against_the_exact_sum() {
        let max = i128::from(i64::MAX);
        assert_eq!(added(0, 5, 7).unwrap(), (12, 12));
        assert_eq!(added(-10, 5, 7).unwrap(), (12, 2));
        // The own shard would overflow.
        assert!(matches!(
            added(0, i64::MAX, 1),
            Err(Error::Overflow { value, delta: 1 }) if value == max
        ));
        // The sum would, though the shard does not.
        assert!(matches!(added(max, 0, 1), Err(Error::Overflow { .. })));
        // Past i64 already: refused while it stays there, taken once back.
        assert!(matches!(
            added(max, 9, -1),
            Err(Error::Overflow { value, delta: -1 }) if value == max + 9
        ));
        assert_eq!(added(max, 9, -20).unwrap(), (-11, i64::MAX - 11));
        assert_eq!(
            added(i128::from(i64::MIN), 0, -1).ok(),
            None,
            "below i64::MIN too"
        );
    }
}
