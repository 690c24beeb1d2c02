//! The commit path: hot-counter combining, then group commit, behind one
//! handle ([`GroupCommit`]).
//!
//! Two threads, so that sealing never waits for the disk (and a runtime
//! may write group commits itself, see below):
//!
//! ```text
//! callers ──queue──▶ sealer ──outbox──▶ syncer ──▶ write + fsync ──▶ answer waiters
//! ```
//!
//! - The **sealer** ([`sealer`]) takes everything queued: framed records
//!   from `apply`/`reset`, and the keys with pending leader adds (see
//!   `Engine::add`). For each
//!   such key it does *one* read-modify-write of this node's shard covering
//!   every add waiting on it (clock + 1, value + Σ deltas), one memtable
//!   update and one log record, all in memory, into the [`outbox`]. Every
//!   new version of this node's shard, on the sealer or on a caller's
//!   thread, is sealed in the one order [`seal`] gives.
//! - The **syncer** ([`syncer`]) takes everything in the outbox, writes it
//!   with one `write` and covers it with one fsync, then answers every
//!   waiter.
//!
//! While an fsync runs, the sealer keeps sealing into the outbox, so batches
//! grow with the load, and one hot counter's adds collapse into one record
//! per turn.
//!
//! A batch's add (`Engine::add`) skips the sealer unless adds wait on its
//! cell, writes stall or ids are not durable: the adding thread seals it
//! under the cell lock and puts the record straight into the outbox
//! ([`GroupCommit::seal_one_now`], in [`direct`]; the caller combined the
//! batch's adds to one cell first). So does an add for the sealer whose
//! cell is cold (no add waiting on it, and no record of it in the last
//! durable group commit or after: `Cached::sealed_batch`;
//! [`GroupCommit::seal_now`]). Sealing then runs on every thread that
//! adds, with one hand-off fewer; with 64 writers over 1M keys this took
//! durable adds one at a time from 214k to 250k (medians of five
//! alternating runs). Either path leaves the
//! same state: a record holds the whole own shard, so records of one cell
//! may reach the log in any order. A replica's batch of cells skips the
//! sealer the same way when every cell changes
//! ([`GroupCommit::append_now`], then one ack behind them,
//! [`GroupCommit::ack_now`]): a replica's apply then wakes one thread, the
//! syncer, not two.
//!
//! Writers released by one fsync come back a few microseconds later; if the
//! next fsync started at once it would miss them, and the writers would split
//! into two half-size groups taking turns. So the syncer waits a short
//! window for them before the next fsync; [`window`] states for how long,
//! and when windows are skipped because the writers do not come back in
//! time.
//!
//! # Writing on the runtime's thread as it parks
//!
//! A replica's apply, or a leader's batch, puts its records in the outbox
//! from a task, then waits. Handing the fsync to the syncer costs two
//! wake-ups between threads: the syncer's, and the runtime's when the
//! answers come back (each some tens to over a hundred microseconds on a
//! busy machine). So a runtime can be given a hook ([`ParkCommit`]): when
//! it has no task left to run and is about to park, its thread writes the
//! open group commit itself and answers the waiters, its own tasks, at
//! once. Whatever its tasks queue until then wakes nobody. See [`park`] for
//! when the syncer takes over.
//!
//! On uniform cluster load this took fsyncs per add from 0.117 to 0.077,
//! futex calls from 0.165 to 0.010 and context switches from 0.86 to 0.46
//! (`perf stat`, whole cluster), and throughput from 82k to 98k adds/s
//! (medians of five alternated runs).
//!
//! # Answers
//!
//! The sealer and the syncer answer waiters through the [`relay`]: on the
//! callers' runtime with one wake-up per batch when one is configured,
//! directly otherwise.
//!
//! # When an engine thread dies
//!
//! A panic on the sealer or the syncer (or the background thread) poisons
//! the engine at once (see `spawn` in `engine`), and
//! [`GroupCommit::fail_waiters`] closes the queue and the outbox and
//! answers everything waiting in them, or pending on a cell, with the
//! poison error: the thread that would have answered them may be the one
//! that is gone.
//!
//! [`ParkCommit`]: crate::ParkCommit

mod admit;
mod direct;
pub(crate) mod once;
pub use admit::Admission;
mod outbox;
mod park;
mod relay;
mod seal;
mod sealer;
mod stepped;
mod syncer;
mod window;

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use crate::add::OnExpired;
use crate::cache::{Cached, CounterCache};
use crate::cell::Cell;
use crate::commitlog::{self, LogWriter};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::options::{OnPark, Options};
use crate::poison::Poison;
use crate::space::Space;
use crate::version::VersionSet;
use crate::work::WorkSender;

use outbox::Outbox;
use relay::{Answer, Relay};
use sealer::Queue;
pub(crate) use stepped::Steps;
use syncer::Committer;

/// The group commit: the sealer's queue, the outbox, the commit log, and
/// how waiters are answered. One handle for the engine, its threads and a
/// runtime that writes group commits as it parks.
///
/// Its locks (`committer`, `queue`, `outbox`) have their places in the
/// engine's lock order, written in `engine`.
pub(crate) struct GroupCommit {
    opts: Options,
    counter_id: u64,
    /// The cells whose pending adds the sealer seals.
    cache: Arc<CounterCache>,
    /// Memtable generations, the write stall, freezes for a long log.
    versions: Arc<VersionSet>,
    /// Set when a write fails; every write checks it.
    poison: Arc<Poison>,
    /// Whether the log, or flushes, found the disk full (see `space`).
    space: Arc<Space>,
    /// Asks the background thread for flushes.
    work: WorkSender,
    queue: Mutex<Queue>,
    /// Wakes the sealer; waits on `queue`.
    queue_cv: Condvar,
    outbox: Mutex<Outbox>,
    /// Wakes the syncer; waits on `outbox`.
    outbox_cv: Condvar,
    /// The commit log, held by whoever writes a group commit.
    committer: Mutex<Committer>,
    /// The last fsync was fast enough for a runtime to write group commits
    /// as it parks (see [`park`]).
    fast_syncs: AtomicBool,
    /// The last group commit made durable (see `Outbox::batch`); shared
    /// with the counter cache, which keeps cells with ids not durable yet.
    durable_batch: Arc<AtomicU64>,
    /// The last group commit given a record with operation ids (see `once`).
    ids_batch: AtomicU64,
    /// The last group commit given a replica's record with a tail of ids
    /// (see `ids::tail`).
    tail_batch: AtomicU64,
    metrics: Metrics,
    /// Live commit log segments, as of the last group commit.
    log_segments: AtomicUsize,
    /// How the sealer and the syncer answer waiters.
    relay: Arc<Relay>,
}

/// Counters kept by whoever writes group commits.
#[derive(Default)]
struct Metrics {
    syncs: AtomicU64,
    park_syncs: AtomicU64,
    adds: AtomicU64,
    add_records: AtomicU64,
}

/// The group commit's numbers, for `Engine::stats`.
pub(crate) struct CommitStats {
    /// Commit log fsyncs since open.
    pub(crate) syncs: u64,
    /// Of those, the ones a runtime wrote as it parked.
    pub(crate) park_syncs: u64,
    /// Leader adds acknowledged.
    pub(crate) adds: u64,
    /// Log records those adds took.
    pub(crate) add_records: u64,
    /// Live commit log segments.
    pub(crate) log_segments: usize,
}

/// The engine's handles a [`GroupCommit`] works with.
pub(crate) struct Handles {
    /// The cells whose pending adds the sealer seals.
    pub(crate) cache: Arc<CounterCache>,
    /// Memtable generations, the write stall.
    pub(crate) versions: Arc<VersionSet>,
    /// Set when a write fails.
    pub(crate) poison: Arc<Poison>,
    /// Whether the disk was found full.
    pub(crate) space: Arc<Space>,
    /// Asks the background thread for flushes.
    pub(crate) work: WorkSender,
    /// The last durable group commit, starting at the incarnation's last
    /// one before this open (see `identity`).
    pub(crate) durable_batch: Arc<AtomicU64>,
}

impl GroupCommit {
    /// What an add to `cached`'s counter does if its deadline passed, by
    /// the options.
    #[inline]
    pub(crate) fn on_expired(&self, cached: &Cached) -> OnExpired {
        match (self.opts.keep_expired, self.opts.confirm_restarts) {
            (true, _) => OnExpired::Keep,
            (false, true) => OnExpired::Confirmed(cached.restart_confirmed),
            (false, false) => OnExpired::Restart,
        }
    }

    /// The group commit over `log`, starting the relay if `opts` asks for one.
    pub(crate) fn new(log: LogWriter, opts: Options, counter_id: u64, h: Handles) -> Arc<Self> {
        let Handles {
            cache,
            versions,
            poison,
            space,
            work,
            durable_batch,
        } = h;
        let last_batch = durable_batch.load(Acquire);
        let window = Duration::from_micros(opts.group_commit_window_us);
        let log_segments = log.segment_count();
        let relay = Arc::new(Relay::default());
        if let Some(runtime) = &opts.answer_on {
            relay.start(runtime);
        }
        Arc::new(GroupCommit {
            opts,
            counter_id,
            cache,
            versions,
            poison,
            space,
            work,
            queue: Mutex::new(Queue::default()),
            queue_cv: Condvar::new(),
            outbox: Mutex::new(Outbox::after(last_batch)),
            outbox_cv: Condvar::new(),
            committer: Mutex::new(Committer::new(log, window)),
            fast_syncs: AtomicBool::new(true),
            durable_batch,
            ids_batch: AtomicU64::new(0),
            tail_batch: AtomicU64::new(0),
            metrics: Metrics::default(),
            log_segments: AtomicUsize::new(log_segments),
            relay,
        })
    }

    /// What a [`ParkCommit`](crate::ParkCommit) hook calls.
    pub(crate) fn park_target(self: &Arc<Self>) -> Weak<dyn OnPark> {
        Arc::downgrade(self) as Weak<dyn OnPark>
    }

    /// The last group commit made durable: a cell whose newest record went
    /// into a later one may still gain adds to combine with it.
    pub(crate) fn durable_batch(&self) -> u64 {
        self.durable_batch.load(Acquire)
    }

    /// Queues a framed record for `(key, cell)`, written into memtable
    /// `generation`; the receiver fires once it is durable.
    pub(crate) fn log_record(
        &self,
        key: &Key,
        cell: &Cell,
        generation: u64,
    ) -> oneshot::Receiver<Result<()>> {
        self.queue_ack(|q| {
            commitlog::encode_record(&mut q.records, key, cell);
            q.gen_max = q.gen_max.max(generation);
        })
    }

    /// Queues a framed record for `(key, cell)` without a waiter of its own.
    pub(crate) fn queue_record(&self, key: &Key, cell: &Cell, generation: u64) -> Result<()> {
        let mut q = self.queue.lock();
        if q.closed {
            return Err(Error::Closed);
        }
        commitlog::encode_record(&mut q.records, key, cell);
        q.gen_max = q.gen_max.max(generation);
        drop(q);
        self.queue_cv.notify_one();
        Ok(())
    }

    /// A receiver that fires after the next log fsync behind everything
    /// queued now.
    pub(crate) fn log_barrier(&self) -> oneshot::Receiver<Result<()>> {
        self.queue_ack(|_| {})
    }

    fn queue_ack(&self, f: impl FnOnce(&mut Queue)) -> oneshot::Receiver<Result<()>> {
        let (tx, rx) = oneshot::channel();
        let mut q = self.queue.lock();
        if q.closed {
            let _ = tx.send(Err(Error::Closed));
            return rx;
        }
        f(&mut q);
        q.acks.push(tx);
        drop(q);
        self.queue_cv.notify_one();
        rx
    }

    /// Hands a key with newly pending adds to the sealer.
    pub(crate) fn queue_add(&self, key: &Key) -> Result<()> {
        let mut q = self.queue.lock();
        if q.closed {
            return Err(Error::Closed);
        }
        let wake = !q.has_work();
        q.adds.push(key.clone());
        drop(q);
        if wake {
            self.queue_cv.notify_one();
        }
        Ok(())
    }

    /// The background thread flushed every memtable up to `generation`:
    /// log segments whose records all went there may go.
    pub(crate) fn flushed(&self, generation: u64) {
        self.outbox.lock().set_flushed(generation);
        self.outbox_cv.notify_one();
    }

    /// Takes no more work: the sealer hands over what it holds and ends, then
    /// the syncer writes everything and ends.
    pub(crate) fn close(&self) {
        self.queue.lock().closed = true;
        self.queue_cv.notify_all();
    }

    /// Whether the log is closed: the syncer's last group commit is
    /// written.
    pub(crate) fn log_closed(&self) -> bool {
        self.committer.lock().closed
    }

    /// After the threads are gone: the relay task ends once it has
    /// delivered everything.
    pub(crate) fn close_relay(&self) {
        self.relay.close();
    }

    /// The numbers for `Engine::stats`.
    pub(crate) fn stats(&self) -> CommitStats {
        let m = &self.metrics;
        CommitStats {
            syncs: m.syncs.load(Relaxed),
            park_syncs: m.park_syncs.load(Relaxed),
            adds: m.adds.load(Relaxed),
            add_records: m.add_records.load(Relaxed),
            log_segments: self.log_segments.load(Relaxed),
        }
    }

    /// Stops all writes for good: called when an fsync (or log write) fails.
    fn poison_on(&self, err: &Error) {
        if self.poison.set(|| err.to_string()) {
            tracing::error!(error = %err, "commit log write failed: engine poisoned, refusing writes");
        }
    }

    /// After an engine thread died (see `spawn` in `engine`), with the
    /// engine poisoned: closes the queue and the outbox, so that nothing
    /// more waits in them, and answers every waiter there or pending on a
    /// cell with the poison error. The dead thread may be the one that would
    /// have answered them. A sealer or syncer still alive then finds nothing
    /// to do and ends. Records not written yet are dropped: a poisoned
    /// engine writes nothing.
    pub(crate) fn fail_waiters(&self) {
        let why = self.poison.why().unwrap_or_default();
        let err = || Error::Poisoned(why.clone());
        let mut answers = Vec::new();
        {
            let mut q = self.queue.lock();
            q.closed = true;
            q.records.clear();
            // Their adds are answered from the cells, below.
            q.adds.clear();
            answers.extend(q.acks.drain(..).map(|ack| Answer::Ack(ack, Err(err()))));
        }
        self.queue_cv.notify_all();
        // After the queue closed: an add that finds no add pending on its cell
        // then fails to queue its key, and one that finds adds pending joins
        // them before this sweep reaches its cell (a live sealer may take them
        // first; it answers them with the poison error too).
        self.cache.drain_pending(|add| {
            answers.extend(add.done.map(|done| Answer::Add(done, Err(err()))));
        });
        let (acks, sealed) = self.outbox.lock().fail();
        self.outbox_cv.notify_all();
        self.relay.deliver(&mut answers);
        self.complete(&Err(err()), acks, sealed, 0, false, false);
    }
}
