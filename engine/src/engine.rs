//! The engine: one node's counters, durable, behind a small API.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use crate::cache::{CounterCache, PendingAdd};
use crate::cell::{Cell, SHARDS_MAX};
use crate::commitlog::{self, LogWriter, ReplayStats};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::identity::Identity;
use crate::key::Key;
use crate::memtable::Memtable;
use crate::options::{OnPark, Options};
use crate::outcome::{AddOutcome, Durable, DurableBy, Staged};
use crate::sstable::Table;
use crate::version::{Version, VersionSet};
use crate::work::WorkSender;

/// Work waiting for the commit thread.
#[derive(Default)]
pub(crate) struct Queue {
    /// Framed records from `apply` and `reset`, already applied in memory.
    pub(crate) records: Vec<u8>,
    /// Highest memtable generation those records went into.
    pub(crate) gen_max: u64,
    /// Waiters for those records.
    pub(crate) acks: Vec<oneshot::Sender<Result<()>>>,
    /// Keys with pending adds, in arrival order.
    pub(crate) adds: Vec<Key>,
    /// Set by `close`.
    pub(crate) closed: bool,
}

impl Queue {
    pub(crate) fn has_work(&self) -> bool {
        !self.acks.is_empty() || !self.adds.is_empty()
    }
}

/// Numbers for status pages and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// This incarnation's counter id.
    pub counter_id: u64,
    /// Bytes in memtables (approximate).
    pub memtable_bytes: usize,
    /// Live SSTables.
    pub tables: usize,
    /// Bytes in live SSTables.
    pub table_bytes: u64,
    /// Cells in live SSTables (a cell in two tables counts twice).
    pub table_cells: u64,
    /// Live commit log segments.
    pub log_segments: usize,
    /// Cells in the counter cache.
    pub cached_cells: usize,
    /// Equal-clock/different-value conflicts seen by merges.
    pub clock_conflicts: u64,
    /// Commit log fsyncs since open.
    pub log_syncs: u64,
    /// Of those, the ones a runtime wrote as it parked (`Options::park_commit`).
    pub log_syncs_on_park: u64,
    /// Leader adds acknowledged since open.
    pub adds: u64,
    /// Read-modify-writes (log records) those adds took: fewer than `adds`
    /// when concurrent adds to one cell were combined.
    pub add_records: u64,
    /// Cells in memtables (a key in several memtables counts once per memtable).
    pub memtable_cells: usize,
    /// Bytes in commit log segments on disk.
    pub log_bytes: u64,
}

/// Counters kept by the commit thread.
#[derive(Default)]
pub(crate) struct CommitMetrics {
    pub(crate) syncs: AtomicU64,
    pub(crate) park_syncs: AtomicU64,
    pub(crate) adds: AtomicU64,
    pub(crate) add_records: AtomicU64,
}

/// What the engine's threads and its callers share.
///
/// # Lock order
///
/// A thread holding one of these locks takes only locks further down this
/// list (none is reentrant; two threads taking two of them in opposite
/// orders would deadlock):
///
/// 1. `flush_lock` or `compaction_lock`, never both: one flush, one
///    compaction at a time, held while the table is written.
/// 2. `committer`: held across a group commit's write and fsync.
/// 3. the version set's `stall`: the sealer's write stall reads `state`
///    under it.
/// 4. the version set's `state`: read-held across a cell's read-modify-write, so that no
///    memtable switch comes in between; written only to swap the version.
/// 5. the counter cache's stripes: the cell locks, one at a time.
/// 6. `queue` or `outbox`, never both: a record or key is handed over under
///    the cell lock.
/// 7. Leaves, under which nothing is taken: the memtables' own locks,
///    `poison`, the relay's mailbox.
///
/// Any lock can be taken alone; the condvars wait on the lock named in
/// their doc and release it meanwhile.
pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) opts: Options,
    pub(crate) counter_id: u64,
    pub(crate) cache: CounterCache,
    pub(crate) versions: Arc<VersionSet>,
    pub(crate) queue: Mutex<Queue>,
    /// Wakes the sealer; waits on `queue`.
    pub(crate) queue_cv: Condvar,
    pub(crate) outbox: Mutex<crate::commit::Outbox>,
    /// Wakes the syncer; waits on `outbox`.
    pub(crate) outbox_cv: Condvar,
    /// The commit log, held by whoever writes a group commit.
    pub(crate) committer: Mutex<crate::commit::Committer>,
    /// The last fsync was fast enough for a runtime to write group commits
    /// as it parks (see `commit`).
    pub(crate) fast_syncs: AtomicBool,
    pub(crate) poison: Mutex<Option<String>>,
    pub(crate) poisoned: AtomicBool,
    /// Wakes the background thread; guards its request flags.
    /// Asks the background thread for flushes.
    pub(crate) work: WorkSender,
    pub(crate) flush_lock: Mutex<()>,
    pub(crate) compaction_lock: Mutex<()>,
    pub(crate) log_segments: AtomicUsize,
    pub(crate) metrics: CommitMetrics,
    /// The last group commit made durable (see `commit`).
    pub(crate) durable_batch: AtomicU64,
    /// How the commit threads answer waiters.
    pub(crate) relay: Arc<crate::relay::Relay>,
    _identity: Identity,
}

/// One node's storage engine. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Engine {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    replay: ReplayStats,
}

impl Engine {
    /// Opens (creating if needed) the engine in `dir`, replaying its commit log.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Engine> {
        let dir = dir.as_ref().to_path_buf();
        let identity = Identity::open(&dir)?;
        remove_temporaries(&dir)?;

        let mut tables = Vec::new();
        let mut next_table_id = 1;
        for (id, path) in fsutil::numbered_files(&dir, "sst")? {
            tables.push(Arc::new(Table::open(&path, id)?));
            next_table_id = next_table_id.max(id + 1);
        }

        let replayed = Memtable::new(1);
        let replay = commitlog::replay(&dir, &replayed)?;
        let log = LogWriter::open(
            &dir,
            &replay.segments,
            1,
            opts.segment_bytes_max,
            opts.fail_sync.clone(),
            opts.slow_sync.clone(),
        )?;
        tracing::info!(
            dir = %dir.display(), counter_id = %format!("{:#018x}", identity.counter_id),
            tables = tables.len(), log_records = replay.records, log_bytes = replay.bytes,
            "engine opened"
        );

        let versions = Arc::new(VersionSet::new(
            Version {
                seq: 1,
                active: Arc::new(replayed),
                frozen: Vec::new(),
                tables,
            },
            next_table_id,
        ));
        let log_segments = log.segment_count();
        let window = std::time::Duration::from_micros(opts.group_commit_window_us);
        let cache = CounterCache::new(opts.counter_cache_cells_max, versions.clone());
        let (work, work_rx) = crate::work::channel();
        let inner = Arc::new(Inner {
            dir,
            opts,
            counter_id: identity.counter_id,
            cache,
            versions,
            queue: Mutex::new(Queue::default()),
            queue_cv: Condvar::new(),
            outbox: Mutex::new(Default::default()),
            outbox_cv: Condvar::new(),
            committer: Mutex::new(crate::commit::Committer::new(log, window)),
            fast_syncs: AtomicBool::new(true),
            poison: Mutex::new(None),
            poisoned: AtomicBool::new(false),
            work,
            flush_lock: Mutex::new(()),
            compaction_lock: Mutex::new(()),
            log_segments: AtomicUsize::new(log_segments),
            metrics: CommitMetrics::default(),
            durable_batch: AtomicU64::new(0),
            relay: Arc::default(),
            _identity: identity,
        });
        if let Some(runtime) = &inner.opts.answer_on {
            inner.relay.start(runtime);
        }
        let sealer = spawn(&inner, "tally-sealer", crate::commit::run_sealer)?;
        let syncer = spawn(&inner, "tally-syncer", crate::commit::run_syncer)?;
        if let Some(hook) = &inner.opts.park_commit {
            // The hook serves the engine opened last.
            let target: Arc<dyn OnPark> = inner.clone();
            hook.attach(Arc::downgrade(&target));
        }
        let background = spawn(&inner, "tally-background", move |inner| {
            crate::background::run(inner, &work_rx);
        })?;
        // A big replayed memtable is flushed like any other.
        inner.request_flush_if_full();
        Ok(Engine {
            inner,
            threads: Mutex::new(vec![sealer, syncer, background]),
            replay,
        })
    }

    /// This incarnation's counter id.
    pub fn counter_id(&self) -> u64 {
        self.inner.counter_id
    }

    /// What the last open replayed from the commit log.
    pub fn replay_stats(&self) -> &ReplayStats {
        &self.replay
    }

    /// The leader's add: a locally locked read-modify-write of this node's
    /// own shard, combined with concurrent adds to the same cell, returned
    /// once durable.
    pub async fn leader_add(&self, key: &Key, delta: i64) -> Result<AddOutcome> {
        let (done, rx) = oneshot::channel();
        self.queue_leader_add(
            key,
            PendingAdd {
                delta,
                done: Some(done),
                sealed: None,
            },
        )?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// [`Engine::leader_add`] in two steps: returns the outcome as soon as
    /// the read-modify-write is sealed, before its fsync, with a [`Durable`]
    /// that resolves once it is on disk. A leader can then replicate the
    /// shard while its own fsync runs; it must not acknowledge the add
    /// before `Durable::wait` succeeds. Replicas holding a version this
    /// engine later loses in a crash are harmless: an engine that was not
    /// closed cleanly comes back under a new counter id (see `identity`).
    pub async fn leader_add_staged(&self, key: &Key, delta: i64) -> Result<(AddOutcome, Durable)> {
        let (done, rx) = oneshot::channel();
        let (sealed, early) = oneshot::channel();
        self.queue_leader_add(
            key,
            PendingAdd {
                delta,
                done: Some(done),
                sealed: Some(sealed),
            },
        )?;
        match early.await {
            Ok(outcome) => Ok((outcome, Durable(DurableBy::Add(rx)))),
            // Refused at sealing (overflow, poisoned): the reason is in `done`.
            Err(_) => match rx.await {
                Ok(Err(e)) => Err(e),
                Ok(Ok(_)) => unreachable!("a sealed add always sends its early outcome"),
                Err(_) => Err(Error::Closed),
            },
        }
    }

    /// Leader adds for many keys at once, sealed on the calling thread
    /// (unless adds are already waiting on the cell, see [`Staged`]), with
    /// one [`Durable`] for all of them: a batch of adds costs one wake-up of
    /// the commit thread and one waiter, not one per add. Answers one
    /// [`Staged`] per add, in order. Each add is its own read-modify-write:
    /// the caller combines adds to one key first. The rules of
    /// [`Engine::leader_add_staged`] apply: replicate while the fsync runs,
    /// acknowledge only after `Durable::wait`.
    pub fn leader_add_batch<'k>(
        &self,
        adds: impl IntoIterator<Item = (&'k Key, i64)>,
    ) -> Result<(Vec<Staged>, Durable)> {
        self.inner.check_writable()?;
        let stall_at = self.inner.opts.frozen_memtables_max.max(1);
        let adds = adds.into_iter();
        let mut staged = Vec::with_capacity(adds.size_hint().0);
        let mut sealed_any = false;
        let mut full = false;
        for (key, delta) in adds {
            let one = self.inner.cache.with_cell(key, |cached, v| {
                // Unlike a lone add, a batch's add does not wait to be
                // combined when the cell's last record is not durable yet:
                // the caller has combined the batch's adds to one cell.
                if !cached.pending.is_empty() || v.frozen.len() >= stall_at {
                    return Ok(Staged::Hot);
                }
                let one = crate::commit::seal_one_now(&self.inner, key, cached, v, delta)?;
                full |= v.active.bytes() >= self.inner.opts.memtable_bytes_max;
                Ok::<_, Error>(one)
            })??;
            sealed_any |= matches!(one, Staged::Sealed(_));
            staged.push(one);
        }
        if full {
            self.inner.request_flush();
        }
        let durable = if sealed_any {
            DurableBy::Ack(crate::commit::ack_now(&self.inner))
        } else {
            DurableBy::Nothing
        };
        Ok((staged, Durable(durable)))
    }

    fn queue_leader_add(&self, key: &Key, add: PendingAdd) -> Result<()> {
        self.inner.check_writable()?;
        let full = self.inner.cache.with_cell(key, |cached, v| {
            // A cold cell (no add waiting, no record in the last durable
            // group commit or after it) and no write stall: seal here. A hot
            // cell stays with the sealer, where its adds are combined.
            if cached.pending.is_empty()
                && cached.sealed_batch < self.inner.durable_batch.load(Ordering::Acquire)
                && v.frozen.len() < self.inner.opts.frozen_memtables_max.max(1)
            {
                crate::commit::seal_now(&self.inner, key, cached, v, add);
                // The sealer, which checks otherwise, was not involved.
                return Ok(v.active.bytes() >= self.inner.opts.memtable_bytes_max);
            }
            let first = cached.pending.is_empty();
            cached.pending.push(add);
            if first && let Err(e) = self.inner.queue_add(key) {
                cached.pending.clear();
                return Err(e);
            }
            Ok(false)
        })??;
        if full {
            self.inner.request_flush();
        }
        Ok(())
    }

    /// Merges state from elsewhere (replication, hints, repair, read repair).
    /// Applying the same state twice changes nothing.
    pub async fn apply(&self, key: &Key, cell: &Cell) -> Result<()> {
        self.inner.check_writable()?;
        if cell.shards().len() > SHARDS_MAX {
            return Err(Error::TooManyShards {
                count: cell.shards().len(),
                max: SHARDS_MAX,
            });
        }
        let rx = self.inner.cache.merge(key, cell, |changed, v| {
            if changed {
                self.inner.log_record(key, cell, v.active.generation())
            } else {
                // Nothing new to log, but the state may come from a record
                // still waiting for its fsync: answer after the next one.
                self.inner.log_barrier()
            }
        });
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Merges many cells (one replication batch) and waits for one fsync
    /// that covers them all: the batch costs one wake-up, not one per cell.
    /// Each item answers the cell's epoch after the merge: higher than the
    /// item's own when this node has seen a reset the sender has not, so the
    /// item's shards were discarded. The outer error (poisoned, closed)
    /// applies to every item; the inner ones are per item (a cell over the
    /// shard limit). Cells are loaded into the counter cache (a cold one is
    /// read from disk first, outside the lock).
    ///
    /// A cell that changes is logged whole, so its own record is all its
    /// answer waits for; the records go straight into the group commit's
    /// outbox on this thread, without the sealer. A cell that does not
    /// change may owe its state to a record the sealer still holds (a
    /// combined leader add), so a batch with one waits for a barrier
    /// through the sealer instead, as do records made while flushes are
    /// behind (the sealer stalls those).
    pub async fn apply_many(&self, items: &[(Key, Cell)]) -> Result<Vec<Result<u64>>> {
        self.inner.check_writable()?;
        let stall_at = self.inner.opts.frozen_memtables_max.max(1);
        let mut results = Vec::with_capacity(items.len());
        let mut direct_only = true;
        let mut full = false;
        for (key, cell) in items {
            if cell.shards().len() > SHARDS_MAX {
                results.push(Err(Error::TooManyShards {
                    count: cell.shards().len(),
                    max: SHARDS_MAX,
                }));
                continue;
            }
            let epoch = self.inner.cache.with_cell(key, |cached, v| {
                let changed = cached.cell.merge_changed(cell);
                let epoch = cached.cell.epoch();
                if !changed {
                    direct_only = false;
                    return Ok::<u64, Error>(epoch);
                }
                cached.mark_written(key, v);
                if v.frozen.len() < stall_at {
                    crate::commit::append_now(&self.inner, key, cell, v)?;
                    full |= v.active.bytes() >= self.inner.opts.memtable_bytes_max;
                } else {
                    self.inner.queue_record(key, cell, v.active.generation())?;
                    direct_only = false;
                }
                Ok(epoch)
            })??;
            results.push(Ok(epoch));
        }
        if full {
            self.inner.request_flush();
        }
        // Records in the outbox are covered by any later ack there; records
        // (or state) with the sealer only by a barrier queued behind them.
        let durable = if direct_only {
            crate::commit::ack_now(&self.inner)
        } else {
            self.inner.log_barrier()
        };
        durable.await.map_err(|_| Error::Closed)??;
        Ok(results)
    }

    /// Resets the counter: moves its cell to a new epoch with no shards. Adds
    /// racing the reset that lose are discarded ("reset wins"). Returns the new epoch.
    pub async fn reset(&self, key: &Key) -> Result<u64> {
        self.inner.check_writable()?;
        let (epoch, rx) = self.inner.cache.with_cell(key, |cached, v| {
            cached.cell.reset();
            cached.mark_written(key, v);
            let cell = cached.cell.clone();
            (
                cell.epoch(),
                self.inner.log_record(key, &cell, v.active.generation()),
            )
        })?;
        rx.await.map_err(|_| Error::Closed)??;
        Ok(epoch)
    }

    /// The cell for `key` (empty if never written).
    pub fn get(&self, key: &Key) -> Result<Cell> {
        if let Some(cell) = self.inner.cache.cached(key) {
            return Ok(cell);
        }
        let v = self.inner.versions.current();
        let mut cell = v.read_tables(key)?;
        for m in v.memtables() {
            if let Some(slot) = m.get(key) {
                cell.merge(&self.inner.cache.slot_cell(m, key, slot));
            }
        }
        Ok(cell)
    }

    /// Every column of `partition`, in column order.
    pub fn get_row(&self, partition: &[u8]) -> Result<Vec<(Key, Cell)>> {
        let start = Key::new(partition, b"")?;
        let v = self.inner.versions.current();
        let mut row: BTreeMap<Key, Cell> = BTreeMap::new();
        let mut put = |k: Key, c: Cell| match row.get_mut(&k) {
            Some(have) => have.merge(&c),
            None => {
                row.insert(k, c);
            }
        };
        for m in v.memtables() {
            for (k, slot) in m.row(partition) {
                let c = self.inner.cache.slot_cell(m, &k, slot);
                put(k, c);
            }
        }
        for t in &v.tables {
            for item in t.iter_from(Some(&start)) {
                let (k, c) = item?;
                if k.partition() != partition {
                    break;
                }
                put(k, c);
            }
        }
        Ok(row.into_iter().collect())
    }

    /// Freezes the active memtable and writes every frozen memtable to an SSTable.
    pub fn flush(&self) -> Result<()> {
        self.inner.versions.freeze();
        crate::background::flush_frozen(&self.inner)
    }

    /// Compacts every SSTable into one (a major compaction).
    pub fn compact(&self) -> Result<()> {
        let tables = self.inner.versions.current().tables.clone();
        crate::background::compact(&self.inner, tables)
    }

    /// Current numbers.
    pub fn stats(&self) -> Stats {
        let v = self.inner.versions.current();
        Stats {
            counter_id: self.inner.counter_id,
            memtable_bytes: v.memtables().map(|m| m.bytes()).sum(),
            tables: v.tables.len(),
            table_bytes: v.tables.iter().map(|t| t.file_bytes()).sum(),
            table_cells: v.tables.iter().map(|t| t.entries()).sum(),
            log_segments: self.inner.log_segments.load(Ordering::Relaxed),
            cached_cells: self.inner.cache.len(),
            clock_conflicts: crate::cell::clock_conflicts(),
            log_syncs: self.inner.metrics.syncs.load(Ordering::Relaxed),
            log_syncs_on_park: self.inner.metrics.park_syncs.load(Ordering::Relaxed),
            adds: self.inner.metrics.adds.load(Ordering::Relaxed),
            add_records: self.inner.metrics.add_records.load(Ordering::Relaxed),
            memtable_cells: v.memtables().map(|m| m.len()).sum(),
            log_bytes: log_bytes(&self.inner.dir),
        }
    }

    /// Stops accepting work, makes everything acknowledged durable, stops the
    /// threads and marks the directory cleanly closed.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// [`Engine::close`] through a shared reference, for an engine that
    /// tasks still point at: work arriving afterwards fails with `Closed`.
    pub fn shutdown(&self) -> Result<()> {
        let threads = std::mem::take(&mut *self.threads.lock());
        if threads.is_empty() {
            return Ok(());
        }
        self.inner.queue.lock().closed = true;
        self.inner.queue_cv.notify_all();
        // The sealer may be stalled behind flushes that stop here.
        self.inner.versions.close();
        self.inner.work.shutdown();
        for t in threads {
            // Its poison guard (see `spawn`) has poisoned the engine.
            if t.join().is_err() {
                tracing::error!("an engine thread panicked");
            }
        }
        self.inner.relay.close();
        // Poisoned, the engine may have made shard versions that never
        // reached the log (and may have left this node): no clean marker,
        // so the next open takes a new counter id.
        if let Some(why) = self.inner.poison.lock().clone() {
            return Err(Error::Poisoned(why));
        }
        Identity::mark_clean(&self.inner.dir)
    }
}

/// Bytes in the commit log segments of `dir` (0 if it cannot be listed).
fn log_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "engine did not close cleanly");
        }
    }
}

impl OnPark for Inner {
    fn on_park(&self) {
        crate::commit::commit_on_park(self);
    }
}

impl Inner {
    fn check_writable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let why = self.poison.lock().clone().unwrap_or_default();
            return Err(Error::Poisoned(why));
        }
        Ok(())
    }

    /// Stops all writes for good: called when an fsync (or log write) fails.
    pub(crate) fn poison(&self, err: &Error) {
        if self.set_poison(|| err.to_string()) {
            tracing::error!(error = %err, "commit log write failed: engine poisoned, refusing writes");
        }
    }

    /// Stops all writes for good, for the reason `why` gives unless the
    /// engine was poisoned already; answers whether it was not.
    fn set_poison(&self, why: impl FnOnce() -> String) -> bool {
        let mut p = self.poison.lock();
        let first = p.is_none();
        if first {
            *p = Some(why());
        }
        self.poisoned.store(true, Ordering::Release);
        first
    }

    /// An engine thread panicked (see `spawn`): poisons the engine, and
    /// answers with the poison error every waiter the dead thread may have
    /// left, rather than let them hang.
    fn thread_panicked(&self, thread: &str, message: &str) {
        tracing::error!(
            thread,
            message,
            "engine thread panicked: engine poisoned, refusing writes"
        );
        self.set_poison(|| format!("engine thread {thread} panicked: {message}"));
        crate::commit::fail_waiters(self);
        // A sealer stalled behind flushes that may never come.
        self.versions.notify_flushed();
    }

    pub(crate) fn poison_error(&self) -> Error {
        Error::Poisoned(self.poison.lock().clone().unwrap_or_default())
    }

    /// Queues a framed record for `(key, cell)`; the receiver fires once it is durable.
    fn log_record(&self, key: &Key, cell: &Cell, generation: u64) -> oneshot::Receiver<Result<()>> {
        self.queue_ack(|q| {
            commitlog::encode_record(&mut q.records, key, cell);
            q.gen_max = q.gen_max.max(generation);
        })
    }

    /// Queues a framed record for `(key, cell)` without a waiter of its own.
    fn queue_record(&self, key: &Key, cell: &Cell, generation: u64) -> Result<()> {
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

    /// A receiver that fires after the next log fsync.
    fn log_barrier(&self) -> oneshot::Receiver<Result<()>> {
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

    /// Hands a key with newly pending adds to the commit thread.
    fn queue_add(&self, key: &Key) -> Result<()> {
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

    /// Asks the background thread to flush when the active memtable is full.
    pub(crate) fn request_flush_if_full(&self) {
        if self.versions.read().active.bytes() >= self.opts.memtable_bytes_max {
            self.request_flush();
        }
    }

    /// Asks the background thread to flush frozen memtables.
    pub(crate) fn request_flush(&self) {
        self.work.flush();
    }
}

/// Starts one of the engine's threads, under a poison guard.
///
/// Should `run` panic, the engine is poisoned at once and every waiter
/// answered ([`Inner::thread_panicked`]). Otherwise adds would wait forever
/// on a dead sealer or syncer, and the panic would show only at shutdown,
/// which would still mark the directory clean: the next open would reuse the
/// counter id, although clock bumps may have existed only in memory (and
/// on replicas), and hand them out again with other values.
fn spawn(
    inner: &Arc<Inner>,
    name: &'static str,
    run: impl FnOnce(&Inner) + Send + 'static,
) -> Result<JoinHandle<()>> {
    let shared = inner.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // Unwind safety: whatever the panic left half-done is never
            // written after it, as the guard poisons the engine first.
            let ran = std::panic::catch_unwind(AssertUnwindSafe(|| run(&shared)));
            if let Err(panic) = ran {
                shared.thread_panicked(name, panic_message(&*panic));
                // For `shutdown`, which joins the thread.
                std::panic::resume_unwind(panic);
            }
        })
        .map_err(|e| Error::io("spawn engine thread", &inner.dir, e))
}

/// The message a panic was raised with, if it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "no message"
    }
}

fn remove_temporaries(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list data directory", dir, e))?;
    for entry in entries {
        let path = entry
            .map_err(|e| Error::io("list data directory", dir, e))?
            .path();
        if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
            std::fs::remove_file(&path)
                .map_err(|e| Error::io("remove temporary file", &path, e))?;
        }
    }
    Ok(())
}
