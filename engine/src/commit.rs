//! The commit thread: group commit and hot-counter combining.
//!
//! All writes meet here. Each turn takes everything queued since the last
//! one: framed records from `apply`/`reset`, and the keys with pending leader
//! adds. For each such key it does *one* read-modify-write of this node's
//! shard covering every add waiting on it (clock + 1, value + Σ deltas), one
//! memtable update and one log record. Then one write and one fsync cover the
//! whole turn, and every waiter is answered. While the fsync runs, new work
//! queues up, so the batch grows with the load: that is what makes both the
//! throughput of many writers and the throughput of one hot counter.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::cell::{Cell, Shard};
use crate::commitlog::{self, LogWriter};
use crate::engine::{Inner, SyncMode};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::stripes::{AddOutcome, PendingAdd, Stripe};

/// One turn's work, taken from the queue.
struct Turn {
    records: Vec<u8>,
    gen_max: u64,
    acks: Vec<oneshot::Sender<Result<()>>>,
    adds: Vec<Key>,
}

/// Waiters of one sealed key, answered after the fsync.
type Sealed = (AddOutcome, Vec<oneshot::Sender<Result<AddOutcome>>>);

/// Runs the commit loop until the engine closes.
pub(crate) fn run(inner: &Inner, mut log: LogWriter) {
    let periodic = match inner.opts.sync {
        SyncMode::Batch => None,
        SyncMode::Periodic { interval_ms } => Some(Duration::from_millis(interval_ms.max(1))),
    };
    let mut next_sync = Instant::now() + periodic.unwrap_or_default();
    let mut removed_gen = 0;
    // Reused across turns so a steady load allocates nothing here.
    let mut spare = Vec::new();
    loop {
        let mut q = inner.queue.lock();
        while !q.has_work() && !q.closed && q.flushed_gen <= removed_gen {
            match periodic {
                None => inner.queue_cv.wait(&mut q),
                Some(_) => {
                    if inner.queue_cv.wait_until(&mut q, next_sync).timed_out() {
                        break;
                    }
                }
            }
        }
        let turn = Turn {
            records: std::mem::replace(&mut q.records, std::mem::take(&mut spare)),
            gen_max: std::mem::take(&mut q.gen_max),
            acks: std::mem::take(&mut q.acks),
            adds: std::mem::take(&mut q.adds),
        };
        let closing = q.closed;
        let flushed_gen = q.flushed_gen;
        drop(q);

        if !turn.acks.is_empty() || !turn.adds.is_empty() {
            spare = commit_turn(inner, &mut log, turn, periodic.is_none());
        }
        if periodic.is_some_and(|p| {
            let now = Instant::now();
            let due = now >= next_sync;
            if due {
                next_sync = now + p;
            }
            due || closing
        }) && let Err(e) = log.sync()
        {
            inner.poison(&e);
        }
        if flushed_gen > removed_gen {
            match log.remove_flushed(flushed_gen) {
                Ok(()) => removed_gen = flushed_gen,
                Err(e) => tracing::warn!(error = %e, "could not remove flushed log segments"),
            }
            inner
                .log_segments
                .store(log.segment_count(), std::sync::atomic::Ordering::Relaxed);
        }
        if inner.state.read().active.bytes() >= inner.opts.memtable_bytes_max {
            crate::background::freeze(inner);
            inner.request_flush();
        }
        if closing && !inner.queue.lock().has_work() {
            if let Err(e) = log.sync() {
                inner.poison(&e);
            }
            return;
        }
    }
}

/// Seals, writes and (in batch mode) fsyncs one turn; returns the emptied
/// record buffer for reuse.
fn commit_turn(inner: &Inner, log: &mut LogWriter, turn: Turn, sync: bool) -> Vec<u8> {
    let Turn {
        mut records,
        gen_max,
        acks,
        adds,
    } = turn;
    stall_while_flush_behind(inner);
    let poisoned = inner.poisoned.load(std::sync::atomic::Ordering::Acquire);
    let mut sealed: Vec<Sealed> = Vec::with_capacity(adds.len());
    let generation = {
        let v = inner.state.read();
        for key in &adds {
            let mut stripe = inner.stripe(key).lock();
            let Some(waiting) = stripe.pending.remove(key) else {
                continue;
            };
            if poisoned {
                for w in waiting {
                    let _ = w.done.send(Err(inner.poison_error()));
                }
                continue;
            }
            let cell = seal(inner, &mut stripe, key, waiting, &mut sealed);
            if let Some(cell) = cell {
                let own = sealed
                    .last()
                    .expect("seal pushed its outcome")
                    .0
                    .replica_cell();
                v.active.put_dominating(key, cell);
                commitlog::encode_record(&mut records, key, &own);
            }
        }
        v.active.generation()
    };

    let written = if poisoned {
        Err(inner.poison_error())
    } else {
        log.append(&records, generation.max(gen_max))
            .and_then(|()| if sync { log.sync() } else { Ok(()) })
    };
    if let Err(e) = &written {
        inner.poison(e);
    }
    for ack in acks {
        let _ = ack.send(
            written
                .as_ref()
                .map(|_| ())
                .map_err(|_| inner.poison_error()),
        );
    }
    for (outcome, waiters) in sealed {
        for w in waiters {
            let _ = w.send(match &written {
                Ok(()) => Ok(outcome.clone()),
                Err(_) => Err(inner.poison_error()),
            });
        }
    }
    records.clear();
    records
}

/// One read-modify-write for all adds waiting on `key`, under its cell lock.
/// Returns the new whole cell, or `None` if every add was refused.
fn seal(
    inner: &Inner,
    stripe: &mut Stripe,
    key: &Key,
    waiting: Vec<PendingAdd>,
    sealed: &mut Vec<Sealed>,
) -> Option<Cell> {
    let cell = stripe
        .cells
        .get_mut(key)
        .expect("a key with pending adds is pinned in the counter cache");
    let id = inner.counter_id;
    let mut own = cell.shard(id).copied().unwrap_or(Shard {
        counter_id: id,
        clock: 0,
        value: 0,
    });
    let mut view = cell.value();
    let mut accepted = Vec::with_capacity(waiting.len());
    for PendingAdd { delta, done } in waiting {
        match (own.value.checked_add(delta), view.checked_add(delta)) {
            (Some(o), Some(v)) => {
                own.value = o;
                view = v;
                accepted.push(done);
            }
            _ => {
                let _ = done.send(Err(Error::Overflow { value: view, delta }));
            }
        }
    }
    if accepted.is_empty() {
        return None;
    }
    own.clock += 1;
    cell.put_own(own);
    cell.check_invariants();
    let outcome = AddOutcome {
        epoch: cell.epoch(),
        shard: own,
        value: cell.value(),
        combined: u32::try_from(accepted.len()).unwrap_or(u32::MAX),
    };
    sealed.push((outcome, accepted));
    Some(cell.clone())
}

/// Backpressure: while too many frozen memtables wait for flushing, writes wait.
fn stall_while_flush_behind(inner: &Inner) {
    let max = inner.opts.frozen_memtables_max.max(1);
    let mut bg = inner.bg.lock();
    while inner.version().frozen.len() >= max && !bg.shutdown {
        tracing::debug!("write stall: flushes are behind");
        inner
            .flushed_cv
            .wait_for(&mut bg, Duration::from_millis(100));
    }
}
