//! The engine: one node's counters, durable, behind a small API.
//!
//! This module only wires components together; each owns its state and
//! is reached through a narrow handle:
//!
//! - [`VersionSet`] (`version`): which memtables and tables hold cells;
//! - [`CounterCache`] (`cache`): the cell locks and recently written cells;
//! - [`GroupCommit`] (`group_commit`): the sealer's queue, the outbox, the
//!   commit log and its sealer and syncer threads;
//! - [`Background`] (`background`): flushes and compactions on their
//!   thread, asked for by [`Work`](crate::work::Work) messages;
//! - [`Poison`] (`poison`): once set, writes are refused for good.
//!
//! # Lock order
//!
//! A thread holding one of these locks takes only locks further down this
//! list (none is reentrant; two threads taking two of them in opposite
//! orders would deadlock):
//!
//! 1. `Background::flush_lock` or `Background::compaction_lock`, never
//!    both: one flush, one compaction at a time, held while the table is
//!    written.
//! 2. `GroupCommit::committer`: held across a group commit's write and
//!    fsync.
//! 3. `VersionSet::stall`: the sealer's write stall reads `state` under it.
//! 4. `VersionSet::state`: read-held across a cell's read-modify-write, so
//!    that no memtable switch comes in between; written only to swap the
//!    version.
//! 5. `CounterCache`'s stripes: the cell locks, one at a time.
//! 6. `GroupCommit::queue` or `GroupCommit::outbox`, never both: a record
//!    or key is handed over under the cell lock.
//! 7. Leaves, under which nothing is taken: the memtables' own locks,
//!    `Poison`, the relay's mailbox, the `ParkCommit` hook, the work
//!    channel, the rate limits of `Space` and `Background` logging.
//!
//! Any lock can be taken alone; the condvars wait on the lock named in
//! their doc and release it meanwhile.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::background::Background;
use crate::cache::{Cached, CounterCache, PendingAdd};
use crate::cell::{Cell, Epoch, Keep, Merger};
use crate::commitlog::{self, LogWriter, ReplayStats};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::group_commit::Admission;
use crate::group_commit::once::{OnceAdd, OnceSealed};
use crate::group_commit::{GroupCommit, Handles};
use crate::identity::Identity;
use crate::ids::store::IdsStore;
use crate::ids::tail::TailIds;
use crate::key::Key;
use crate::latency::Latencies;
use crate::memtable::Memtable;
use crate::options::{OnPark, Options, ParkCommit};
use crate::outcome::{Durable, DurableBy, Queued, Refusals, Staged, Wait};
use crate::poison::Poison;
use crate::row::{Bounded, Columns, Offer, Row};
use crate::space::Space;
use crate::sstable::Table;
use crate::unique;
use crate::version::{Version, VersionSet};
use crate::work::{WorkReceiver, WorkSender};

pub(crate) mod agreed;
pub(crate) mod changes;
#[cfg(test)]
mod cleanup_tests;
pub(crate) mod fold;
pub(crate) mod handover;
mod logged;
pub(crate) mod scan;
pub(crate) mod snapshot;
mod stepped;
pub(crate) mod tails;
#[cfg(test)]
pub(crate) mod test_support;

/// What [`Engine::apply`] owes its items before it answers, least first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Owed {
    /// Nothing was logged, and nothing unchanged is waited for.
    Nothing,
    /// Records in the outbox: an ack behind them there.
    Ack,
    /// Records or state with the sealer: a barrier through it.
    Barrier,
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
    /// Operation ids remembered (adds within the retention window).
    pub ids: usize,
    /// Bytes of ids files on disk.
    pub ids_file_bytes: u64,
    /// Other nodes' adds with ids held here until those nodes make them
    /// durable (see `ids::tail`).
    pub tail_ids: usize,
    /// Writes refused since open because the cell would have held more than
    /// [`SHARDS_MAX`](crate::cell::SHARDS_MAX) shards (merges, or a leader's new shard).
    pub shard_limit_refusals: u64,
    /// Memtables: the active one and those waiting to be flushed.
    pub memtables: usize,
    /// Compactions since open.
    pub compactions: u64,
    /// How long the commit log's fsyncs took.
    pub log_sync_latency: crate::latency::LatencySnapshot,
}

/// One node's storage engine. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Engine {
    dir: PathBuf,
    opts: Options,
    counter_id: u64,
    versions: Arc<VersionSet>,
    cache: Arc<CounterCache>,
    commit: Arc<GroupCommit>,
    background: Arc<Background>,
    poison: Arc<Poison>,
    /// Whether the disk was found full (see `space`).
    space: Arc<Space>,
    work: WorkSender,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The threads' work, in an engine without threads (`Options::stepped`).
    stepper: Mutex<Option<Arc<stepped::Stepper>>>,
    replay: ReplayStats,
    /// The operation ids applied here, and their files.
    ids: Arc<IdsStore>,
    /// One admission per unique counter at a time (see [`Engine::admit`]).
    admissions: Box<[tokio::sync::Mutex<()>]>,
    /// See [`Stats::shard_limit_refusals`].
    refusals: Arc<Refusals>,
    /// See [`Stats::log_sync_latency`].
    log_syncs: Arc<Latencies>,
    /// The partitions a round here saw hold a string (see `agreed`).
    strings: agreed::StringFilter,
    /// Waiters on lists, woken by their changes.
    lists: crate::list_signals::ListSignals,
    /// Holds the directory lock while the engine is open.
    _identity: Identity,
}

impl Engine {
    /// Opens (creating if needed) the engine in `dir`, replaying its commit log.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Engine> {
        stepped::check(&opts)?;
        let dir = dir.as_ref().to_path_buf();
        let identity = Identity::open(&dir)?;
        remove_temporaries(&dir)?;

        let (tables, next_table_id) = open_tables(&dir)?;
        let ids = Arc::new(IdsStore::open(&dir, opts.ids_retention)?);
        let replayed = Memtable::new(1);
        let merger = Merger::default();
        merger.install(opts.folds.clone());
        if opts.merge_ignoring_generations {
            merger.inject_merge_ignoring_generations();
        }
        let replay = commitlog::replay(&dir, &replayed, &merger, ids.ledger(), ids.tails())?;
        let log_syncs = Arc::new(Latencies::default());
        let log = LogWriter::open(
            &dir,
            &replay.segments,
            1,
            opts.segment_bytes_max,
            opts.fail_sync.clone(),
            opts.slow_sync.clone(),
            log_syncs.clone(),
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
            merger,
        ));
        let durable_batch = Arc::new(AtomicU64::new(identity.batch_base));
        let cache = Arc::new(CounterCache::new(
            opts.counter_cache_cells_max,
            versions.clone(),
            durable_batch.clone(),
        ));
        let poison = Arc::new(Poison::default());
        let space = Arc::new(Space::default());
        let (work, work_rx) = crate::work::channel();
        let commit = GroupCommit::new(
            log,
            opts.clone(),
            identity.counter_id,
            Handles {
                cache: cache.clone(),
                versions: versions.clone(),
                poison: poison.clone(),
                space: space.clone(),
                work: work.clone(),
                durable_batch,
            },
        );
        let background = Arc::new(Background::new(
            dir.clone(),
            &opts,
            versions.clone(),
            cache.clone(),
            commit.clone(),
            space.clone(),
            ids.clone(),
        ));
        let guard = PoisonGuard {
            dir: dir.clone(),
            poison: poison.clone(),
            commit: commit.clone(),
            versions: versions.clone(),
        };
        let (threads, stepper) = match &opts.park_commit {
            Some(hook) if opts.stepped => {
                let stepper = stepped::Stepper::new(commit.clone(), background.clone(), work_rx);
                hook.attach(Arc::downgrade(&stepper) as std::sync::Weak<dyn OnPark>);
                (Vec::new(), Some(stepper))
            }
            _ => (
                guard.start(&background, work_rx, opts.park_commit.as_ref())?,
                None,
            ),
        };
        // A big replayed memtable is flushed like any other.
        if versions.read().active.bytes() >= opts.memtable_bytes_max {
            work.flush();
        }
        Ok(Engine {
            dir,
            opts,
            counter_id: identity.counter_id,
            versions,
            cache,
            commit,
            background,
            poison,
            space,
            work,
            threads: Mutex::new(threads),
            stepper: Mutex::new(stepper),
            replay,
            ids,
            admissions: (0..256).map(|_| tokio::sync::Mutex::new(())).collect(),
            refusals: Arc::default(),
            log_syncs,
            strings: agreed::StringFilter::default(),
            lists: crate::list_signals::ListSignals::default(),
            _identity: identity,
        })
    }

    /// How this engine's cells merge: the fold generations the node
    /// installs in it ([`Merger::install`]), its clock conflicts. A node
    /// merges cells from several replicas with it too.
    pub fn merger(&self) -> &Merger {
        self.versions.merger()
    }

    /// This incarnation's counter id.
    pub fn counter_id(&self) -> u64 {
        self.counter_id
    }

    /// Why the engine refuses writes, if it is poisoned.
    fn poisoned(&self) -> Option<String> {
        // The load first: the reason takes a lock.
        self.poison.is_set().then(|| self.poison.why()).flatten()
    }

    /// Whether the engine takes writes now: not poisoned, and its disk not
    /// found full (atomic loads: cheap enough to ask before every write).
    /// False as soon as a flush finds no room, while the log may still take
    /// writes for a while: a node steps aside before it has to refuse.
    pub fn is_writable(&self) -> bool {
        !self.poison.is_set() && !self.space.log_full() && !self.space.tables_full()
    }

    /// Why the engine refuses writes now: poisoned for good, or its disk
    /// full until there is room again (see `space`).
    pub fn not_writable(&self) -> Option<String> {
        if let Some(why) = self.poisoned() {
            return Some(why);
        }
        if self.space.log_full() {
            return Some("disk full: the commit log cannot grow".into());
        }
        if self.space.tables_full() {
            return Some("disk full: flushes find no room for their tables".into());
        }
        None
    }

    /// What the last open replayed from the commit log.
    pub fn replay_stats(&self) -> &ReplayStats {
        &self.replay
    }

    /// The leader's adds, for many keys at once: under each key's cell
    /// lock, a locally locked read-modify-write of this node's own shard,
    /// sealed on the calling thread, with one [`Durable`] for all of them:
    /// a batch of adds costs one wake-up of the syncer and one waiter, not
    /// one per add. Answers one [`Staged`] per add, in order. Each add is
    /// its own read-modify-write: the caller combines adds to one key
    /// first. An add to a cell that adds are already waiting on, or during
    /// a write stall, or while a record with ids is not durable, goes to
    /// the sealer instead ([`Staged::Queued`]), which combines concurrent
    /// adds to one cell into one read-modify-write.
    ///
    /// The outcome comes before its fsync: a leader can replicate the
    /// shard while its own fsync runs, and count this node's copy as
    /// durable only once `Durable::wait` succeeds (an add may still be
    /// acknowledged on enough other durable copies: the caller's rule).
    /// Replicas holding a version this engine later loses in a crash are
    /// harmless: an engine that was not closed cleanly comes back under a
    /// new counter id (see `identity`).
    pub fn add<'k>(
        &self,
        adds: impl IntoIterator<Item = (&'k Key, i64)>,
    ) -> Result<(Vec<Staged>, Durable)> {
        self.check_writable()?;
        let stall_at = self.opts.frozen_memtables_max.max(1);
        let (keys, deltas): (Vec<&Key>, Vec<i64>) = adds.into_iter().unzip();
        let mut staged = Vec::with_capacity(keys.len());
        let mut sealed_any = false;
        let mut full = false;
        for (i, (&key, delta)) in keys.iter().zip(deltas).enumerate() {
            self.cache.fetch_ahead(&keys, i);
            let one = self.cache.with_cell(key, |cached, v| {
                // A batch's add does not wait to be combined when the
                // cell's last record is not durable yet: the caller has
                // combined the batch's adds to one cell. While a record
                // with ids is not durable, its shard may not leave early:
                // the sealer's path waits for the fsync.
                if !cached.pending.is_empty()
                    || v.frozen.len() >= stall_at
                    || self.commit.ids_unsynced()
                {
                    let (queued, filled) = self.queue_for_sealer(key, cached, v, delta)?;
                    full |= filled;
                    return Ok(Staged::Queued(queued));
                }
                let one = self.commit.seal_one_now(key, cached, v, delta)?;
                full |= v.active.bytes() >= self.opts.memtable_bytes_max;
                Ok::<_, Error>(one)
            })??;
            sealed_any |= matches!(one, Staged::Sealed(_));
            if let Staged::Refused(e) = &one {
                self.refusals.count(e);
            }
            staged.push(one);
        }
        if full {
            self.work.flush();
        }
        let durable = if sealed_any {
            DurableBy::Ack(self.commit.ack_now())
        } else {
            DurableBy::Nothing
        };
        Ok((staged, Durable(durable)))
    }

    /// Confirms the restart of `key`'s counter from `epoch`, whose
    /// deadline passed: the caller read the replicas, and learned of no
    /// later deadline and no newer epoch (see `Options::confirm_restarts`).
    /// The next add restarts it, if it is still at that epoch and expired.
    pub fn confirm_restart(&self, key: &Key, epoch: Epoch) -> Result<()> {
        self.cache.with_cell(key, |cached, _| {
            if cached.cell.epoch().id() == epoch.id() {
                cached.restart_confirmed = Some(epoch.tag());
            }
        })
    }

    /// Hands an add to the sealer, under the cell lock held by `cached`'s
    /// owner, in version `v` (read-locked): it joins the adds waiting on
    /// the cell. A cold cell (no add waiting, no record in the last durable
    /// group commit or after it) and no write stall has nothing to wait
    /// for: its add is sealed here, as the sealer would (the outcome of one
    /// with ids unsynced waits for durability all the same). Answers the
    /// add's handle, and whether the active memtable is full.
    fn queue_for_sealer(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        delta: i64,
    ) -> Result<(Queued, bool)> {
        let (done, done_rx) = oneshot::channel();
        let (sealed, sealed_rx) = oneshot::channel();
        let add = PendingAdd {
            delta,
            done: Some(done),
            sealed,
        };
        let queued = Queued {
            sealed: sealed_rx,
            done: done_rx,
            refusals: self.refusals.clone(),
        };
        if cached.pending.is_empty()
            && cached.sealed_batch < self.commit.durable_batch()
            && v.frozen.len() < self.opts.frozen_memtables_max.max(1)
        {
            self.commit.seal_now(key, cached, v, add);
            // The sealer, which checks otherwise, was not involved.
            return Ok((queued, v.active.bytes() >= self.opts.memtable_bytes_max));
        }
        let first = cached.pending.is_empty();
        cached.pending.push(add);
        if first && let Err(e) = self.commit.queue_add(key) {
            cached.pending.clear();
            return Err(e);
        }
        Ok((queued, false))
    }

    /// Adds with operation ids, grouped per counter (see `ids`): under each
    /// cell lock the ledger says which adds are new; those make one
    /// read-modify-write and one record holding the ids too, sealed on
    /// the calling thread; retries answer their original value. Answers one
    /// [`OnceSealed`] per group, in order, and one [`Durable`] for all.
    ///
    /// The caller must wait for `Durable` before it sends any
    /// `OnceSealed::replicate` anywhere, and acknowledge an add only once
    /// that state is replicated as its level asks: a shard holding an add
    /// with an id never leaves this node before the id is durable here
    /// (see `group_commit::once`).
    pub fn add_once<'k>(
        &self,
        groups: impl IntoIterator<Item = (&'k Key, &'k [OnceAdd])>,
    ) -> Result<(Vec<OnceSealed>, Durable)> {
        self.check_writable()?;
        let ledger = self.ids.ledger();
        let now = crate::ids::now_ms();
        let mut sealed = Vec::new();
        let mut full = false;
        for (key, adds) in groups {
            let one = self.cache.with_cell(key, |cached, v| {
                let one = self.commit.seal_once_now(key, cached, v, adds, ledger, now);
                full |= v.active.bytes() >= self.opts.memtable_bytes_max;
                one
            })??;
            for e in one.answers.iter().filter_map(|a| a.as_ref().err()) {
                self.count_refusal(e);
            }
            sealed.push(one);
        }
        if full {
            self.work.flush();
        }
        // Retries answer only once their first application is durable:
        // the ack covers every record in the outbox, theirs too.
        Ok((sealed, Durable(DurableBy::Ack(self.commit.ack_now()))))
    }

    /// Counts each of `members` of the unique counter `partition` once
    /// (see `unique`): those absent from it are admitted, the count moves
    /// by their number, all in one record. This node must be the members'
    /// applier. Answers which members were new, and one [`Durable`];
    /// the rules of [`Engine::add_once`] apply to
    /// `Admission::replicate`.
    pub async fn admit(&self, partition: &[u8], members: &[&[u8]]) -> Result<(Admission, Durable)> {
        let count = unique::count_key(partition)?;
        let keys = members
            .iter()
            .map(|m| unique::member_key(partition, m))
            .collect::<Result<Vec<Key>>>()?;
        // One admission per counter at a time: the members read below are
        // then still as they are when the count's lock is taken.
        let stripe = (count.hash_u64() as usize) % self.admissions.len();
        let _turn = self.admissions[stripe].lock().await;
        self.check_writable()?;
        let found = keys
            .iter()
            .map(|k| self.get(k))
            .collect::<Result<Vec<Cell>>>()?;
        let mut full = false;
        let admission = self.cache.with_cell(&count, |cached, v| {
            full = v.active.bytes() >= self.opts.memtable_bytes_max;
            self.commit.seal_admission(&count, cached, v, &keys, &found)
        });
        let admission = self.counted(admission.and_then(|a| a))?;
        if full {
            self.work.flush();
        }
        Ok((admission, Durable(DurableBy::Ack(self.commit.ack_now()))))
    }

    /// Merges a member cell (see `unique`: never cached) into the active
    /// memtable and queues its record for the sealer: a barrier queued
    /// after it covers it.
    fn apply_member(&self, key: &Key, cell: &Cell) -> Result<()> {
        Cell::new()
            .try_merge(cell, self.merger())
            .map_err(Error::from)?;
        let v = self.versions.read();
        v.active.insert(key.clone(), cell.clone(), self.merger());
        self.commit.queue_record(key, cell, v.active.generation())
    }

    /// Resolves once every record with operation ids sealed so far is
    /// durable; at once when none waits. State read from this engine may
    /// leave the node (read repair, hints) only after this: see
    /// `group_commit::once`.
    pub async fn settled(&self) -> Result<()> {
        if !self.commit.ids_unsynced() && !self.commit.tails_unsynced() {
            return Ok(());
        }
        self.commit.ack_now().await.map_err(|_| Error::Closed)?
    }

    /// Merges state from elsewhere (replication, hints, repair, read
    /// repair, a leader's catch-up): many cells at once, waiting for one
    /// fsync that covers them all (a batch costs one wake-up, not one per
    /// cell). Applying the same state twice changes nothing. Each item
    /// answers the cell's epoch after the merge: higher than the item's own
    /// when this node has seen a reset the sender has not, so the item's
    /// shards were discarded. The outer error (poisoned, closed) applies to
    /// every item; the inner ones are per item: a cell past a limit (see
    /// [`crate::cell`]: clocks, epoch, shard count), or whose merge would
    /// leave the stored cell wider than
    /// [`SHARDS_MAX`](crate::cell::SHARDS_MAX), is refused and changes
    /// nothing. Cells are loaded into the counter cache to check that (a
    /// cold one is read from disk first, outside the lock); a unique
    /// counter's member cell (`unique`) goes to the memtable alone.
    ///
    /// A replica's cell that came with the ids its applier may still lose
    /// (see `ids::tail`) is logged in one record with its tail, even when
    /// the cell brings nothing new, and kept until its applier says they
    /// are durable there. A tail of an incarnation whose node learned its
    /// tails already is refused ([`Error::Fenced`]), and its cell with it.
    ///
    /// A cell that changes is logged whole, so its own record is all its
    /// answer waits for; the records go straight into the group commit's
    /// outbox on this thread, without the sealer. A cell that does not
    /// change may owe its state to a record the sealer still holds (a
    /// queued leader add), so with [`Wait::Durable`] a batch with one waits
    /// for a barrier through the sealer instead, as do records made while
    /// flushes are behind (the sealer stalls those). With
    /// [`Wait::IfChanged`] (a leader's catch-up before a change), a cell
    /// that brings nothing new is not waited for: the change made next
    /// logs its whole cell, and a change that is not made waits for
    /// [`Engine::barrier`]; so a batch in which nothing changed answers at
    /// once. Items refused wait for nothing.
    pub async fn apply<'i>(
        &self,
        items: impl IntoIterator<Item = (&'i Key, &'i Cell, Option<&'i TailIds>)>,
        wait: Wait,
    ) -> Result<Vec<Result<Epoch>>> {
        self.check_writable()?;
        let stall_at = self.opts.frozen_memtables_max.max(1);
        let items: Vec<_> = items.into_iter().collect();
        let keys: Vec<&Key> = items.iter().map(|&(key, ..)| key).collect();
        let mut results = Vec::with_capacity(items.len());
        let mut owed = Owed::Nothing;
        let mut full = false;
        for (i, &(key, cell, tail)) in items.iter().enumerate() {
            self.cache.fetch_ahead(&keys, i);
            if let Some(tail) = tail {
                let applied = self.apply_tail(key, cell, tail);
                if let Ok((_, filled)) = applied {
                    full |= filled;
                    owed = owed.max(Owed::Ack);
                }
                results.push(applied.map(|(epoch, _)| epoch));
                continue;
            }
            if unique::is_member(key) {
                let applied = self.apply_member(key, cell).map(|()| cell.epoch());
                match &applied {
                    Ok(_) => owed = Owed::Barrier, // its record is with the sealer
                    Err(e) => self.count_refusal(e),
                }
                results.push(applied);
                continue;
            }
            let epoch = self.cache.with_cell(key, |cached, v| {
                let changed = match cached.cell.try_merge(cell, self.merger()) {
                    Ok(changed) => changed,
                    Err(limit) => return Ok(Err(Error::from(limit))),
                };
                let epoch = cached.cell.epoch();
                if !changed {
                    if wait == Wait::Durable {
                        owed = Owed::Barrier;
                    }
                    return Ok(Ok(epoch));
                }
                cached.mark_written(key, v);
                if cached.cell.is_list() {
                    self.lists.changed(key);
                }
                if v.frozen.len() < stall_at {
                    self.commit.append_now(key, cell, v)?;
                    full |= v.active.bytes() >= self.opts.memtable_bytes_max;
                    owed = owed.max(Owed::Ack);
                } else {
                    self.commit.queue_record(key, cell, v.active.generation())?;
                    owed = Owed::Barrier;
                }
                Ok::<_, Error>(Ok(epoch))
            })??;
            if let Err(e) = &epoch {
                self.count_refusal(e);
            }
            results.push(epoch);
        }
        if full {
            self.work.flush();
        }
        // Records in the outbox are covered by any later ack there; records
        // (or state) with the sealer only by a barrier queued behind them.
        let durable = match owed {
            Owed::Nothing => return Ok(results),
            Owed::Ack => self.commit.ack_now(),
            Owed::Barrier => self.commit.log_barrier(),
        };
        durable.await.map_err(|_| Error::Closed)??;
        Ok(results)
    }

    /// Resolves once every record logged or sealed so far is durable.
    pub async fn barrier(&self) -> Result<()> {
        let rx = self.counted(Ok(self.commit.log_barrier()))?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// The cell for `key` (empty if never written).
    pub fn get(&self, key: &Key) -> Result<Cell> {
        if let Some(cell) = self.cache.cached(key) {
            return Ok(cell);
        }
        let v = self.versions.current();
        let merger = self.merger();
        let mut cell = v.read_tables(key, merger)?;
        for m in v.memtables() {
            if let Some(slot) = m.get(key) {
                cell.merge(&self.cache.slot_cell(m, key, slot), merger);
            }
        }
        Ok(cell)
    }

    /// The first `columns_max` client columns of `partition` (not the
    /// reserved ones of a unique counter), in column order, and whether it
    /// has more. The limit holds while reading (see `row`): a
    /// partition far wider than it costs a bounded read, not a full scan
    /// into memory. It does disk reads and merges: call it off an async
    /// runtime's threads.
    pub fn get_row(&self, partition: &[u8], columns_max: usize) -> Result<Row> {
        self.get_slice(partition, Columns::ALL, columns_max)
    }

    /// [`Engine::get_row`] of the columns in `columns` only: the first
    /// `columns_max` of them, and whether the range has more.
    pub fn get_slice(
        &self,
        partition: &[u8],
        columns: Columns<'_>,
        columns_max: usize,
    ) -> Result<Row> {
        let start = Key::new(partition, columns.seek())?;
        let v = self.versions.current();
        let mut row = Bounded::new(columns_max);
        let merge = |have: &mut Cell, c: Cell| have.merge(&c, self.merger());
        for m in v.memtables() {
            let (slots, truncated) = m.row(partition, columns, columns_max);
            if truncated {
                row.mark_truncated();
            }
            for (k, slot) in slots {
                let c = self.cache.slot_cell(m, &k, slot);
                row.offer(&k, c, merge);
            }
        }
        for t in &v.tables {
            for item in t.iter_from(Some(&start)) {
                let (k, c) = item?;
                if k.column() < columns.start {
                    continue; // before a start longer than any column
                }
                // Reserved columns sort last: the client's row ends there.
                if k.partition() != partition
                    || !columns.before_end(k.column())
                    || unique::is_reserved(k.column())
                    || row.offer(&k, c, merge) == Offer::Beyond
                {
                    break;
                }
            }
        }
        let (cells, truncated) = row.finish();
        Ok(Row { cells, truncated })
    }

    /// Freezes the active memtable and writes every frozen memtable to an SSTable.
    pub fn flush(&self) -> Result<()> {
        self.versions.freeze();
        self.background.flush_frozen()
    }

    /// Drops from its tables what `keep` says of each key: all of a cell
    /// but this node's own shard ([`Keep::Own`], data this node no longer
    /// replicates: a range that moves away and back must not lose an update
    /// this node made, ScyllaDB #27306), or the whole cell
    /// ([`Keep::Nothing`], data nothing reads any more). Flushes first,
    /// then rewrites every table into one; or, `within` some key ranges
    /// (each from its first key up to, not including, its second; to the
    /// end for `None`), only the tables holding a key in one of them, so
    /// the rest of the data is not rewritten (a `FLUSHDB`'s collection:
    /// `keep` must then keep whole every key outside the ranges). Answers
    /// the cells kept whole and those dropped.
    pub fn cleanup(
        &self,
        within: Option<&[(Key, Option<Key>)]>,
        keep: impl Fn(&Key) -> Keep,
    ) -> Result<(u64, u64)> {
        self.check_writable()?;
        self.cache.trim(&keep, self.counter_id);
        self.flush()?;
        match within {
            None => self.background.rewrite(&keep, self.counter_id),
            Some(ranges) => self
                .background
                .rewrite_holding(ranges, &keep, self.counter_id),
        }
    }

    /// Compacts every SSTable into one (a major compaction), and the
    /// operation ids into one file without those past their retention.
    pub fn compact(&self) -> Result<()> {
        let tables = self.versions.current().tables.clone();
        self.background.compact(tables)?;
        self.ids.compact()
    }

    /// Current numbers.
    pub fn stats(&self) -> Stats {
        let v = self.versions.current();
        let commit = self.commit.stats();
        Stats {
            counter_id: self.counter_id,
            ids: self.ids.ledger().len(),
            tail_ids: self.ids.tails().len(),
            ids_file_bytes: self.ids.file_bytes(),
            memtable_bytes: v.memtables().map(|m| m.bytes()).sum(),
            tables: v.tables.len(),
            table_bytes: v.tables.iter().map(|t| t.file_bytes()).sum(),
            table_cells: v.tables.iter().map(|t| t.entries()).sum(),
            log_segments: commit.log_segments,
            cached_cells: self.cache.len(),
            clock_conflicts: self.merger().clock_conflicts(),
            log_syncs: commit.syncs,
            log_syncs_on_park: commit.park_syncs,
            adds: commit.adds,
            add_records: commit.add_records,
            memtable_cells: v.memtables().map(|m| m.len()).sum(),
            log_bytes: log_bytes(&self.dir),
            shard_limit_refusals: self.refusals.get(),
            memtables: v.memtables().count(),
            compactions: self.background.compactions.load(Ordering::Relaxed),
            log_sync_latency: self.log_syncs.snapshot(),
        }
    }

    /// Refuses a new write, before it changes anything, when the engine is
    /// poisoned or the disk full (see `space`).
    fn check_writable(&self) -> Result<()> {
        self.poison.check()?;
        let stall_at = self.opts.frozen_memtables_max.max(1);
        self.space
            .check(|| self.versions.current().frozen.len() >= stall_at)
    }

    /// Counts `result` in the stats if it is a refusal that counts.
    fn counted<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.count_refusal(e);
        }
        result
    }

    /// Counts a write refused for a limit of the cell.
    fn count_refusal(&self, e: &Error) {
        self.refusals.count(e);
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
        let stepper = self.stepper.lock().take();
        if threads.is_empty() && stepper.is_none() {
            return Ok(());
        }
        self.commit.close();
        // The sealer may be stalled behind flushes that stop here.
        self.versions.close();
        if let Some(stepper) = stepper {
            // The sealer's and the syncer's last turns. With writes
            // stalled they write nothing: records in memory only, never
            // answered, so the directory must not be marked clean.
            stepper.drain();
            if !self.commit.log_closed() {
                self.poison
                    .set(|| "closed with records its disk never took".into());
            }
        }
        self.work.shutdown();
        for t in threads {
            // Its poison guard (see `spawn`) has poisoned the engine.
            if t.join().is_err() {
                tracing::error!("an engine thread panicked");
            }
        }
        self.commit.close_relay();
        // Poisoned, the engine may have made shard versions that never
        // reached the log (and may have left this node): no clean marker,
        // so the next open takes a new counter id.
        if let Some(why) = self.poison.why() {
            return Err(Error::Poisoned(why));
        }
        Identity::mark_clean(&self.dir, self.commit.durable_batch())
    }
}

/// Bytes in the commit log segments of `dir` (0 if it cannot be listed).
fn log_bytes(dir: &std::path::Path) -> u64 {
    tally_world::fs::read_dir(dir)
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

/// What an engine thread's poison guard reaches when the thread panics.
struct PoisonGuard {
    dir: PathBuf,
    poison: Arc<Poison>,
    commit: Arc<GroupCommit>,
    versions: Arc<VersionSet>,
}

impl PoisonGuard {
    /// Starts the engine's threads, each with the handles it runs on: the
    /// sealer and the syncer on the group commit, the background thread on
    /// `background`, reading `work`. Points `park_commit` at this engine.
    fn start(
        &self,
        background: &Arc<Background>,
        work: WorkReceiver,
        park_commit: Option<&ParkCommit>,
    ) -> Result<Vec<JoinHandle<()>>> {
        let sealer = self.spawn("tally-sealer", {
            let commit = self.commit.clone();
            move || commit.run_sealer()
        })?;
        let syncer = self.spawn("tally-syncer", {
            let commit = self.commit.clone();
            move || commit.run_syncer()
        })?;
        if let Some(hook) = park_commit {
            // The hook serves the engine opened last.
            hook.attach(self.commit.park_target());
        }
        let flusher = self.spawn("tally-background", {
            let background = background.clone();
            move || background.run(&work)
        })?;
        Ok(vec![sealer, syncer, flusher])
    }

    /// Starts one of the engine's threads, under the guard.
    ///
    /// Should `run` panic, the engine is poisoned at once and every waiter
    /// answered ([`PoisonGuard::thread_panicked`]). Otherwise adds would
    /// wait forever on a dead sealer or syncer, and the panic would show
    /// only at shutdown, which would still mark the directory clean: the
    /// next open would reuse the counter id, although clock bumps may have
    /// existed only in memory (and on replicas), and hand them out again
    /// with other values.
    fn spawn(
        &self,
        name: &'static str,
        run: impl FnOnce() + Send + 'static,
    ) -> Result<JoinHandle<()>> {
        let guard = PoisonGuard {
            dir: self.dir.clone(),
            poison: self.poison.clone(),
            commit: self.commit.clone(),
            versions: self.versions.clone(),
        };
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Unwind safety: whatever the panic left half-done is never
                // written after it, as the guard poisons the engine first.
                let ran = std::panic::catch_unwind(AssertUnwindSafe(run));
                if let Err(panic) = ran {
                    guard.thread_panicked(name, panic_message(&*panic));
                    // For `shutdown`, which joins the thread.
                    std::panic::resume_unwind(panic);
                }
            })
            .map_err(|e| Error::io("spawn engine thread", &self.dir, e))
    }

    /// An engine thread panicked: poisons the engine, and answers with the
    /// poison error every waiter the dead thread may have left, rather than
    /// let them hang.
    fn thread_panicked(&self, thread: &str, message: &str) {
        tracing::error!(
            thread,
            message,
            "engine thread panicked: engine poisoned, refusing writes"
        );
        self.poison
            .set(|| format!("engine thread {thread} panicked: {message}"));
        self.commit.fail_waiters();
        // A sealer stalled behind flushes that may never come.
        self.versions.notify_flushed();
    }
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

/// The SSTables in `dir`, and the id the next new one takes.
fn open_tables(dir: &Path) -> Result<(Vec<Arc<Table>>, u64)> {
    let mut tables = Vec::new();
    let mut next_table_id = 1;
    for (id, path) in fsutil::numbered_files(dir, "sst")? {
        tables.push(Arc::new(Table::open(&path, id)?));
        next_table_id = next_table_id.max(id + 1);
    }
    Ok((tables, next_table_id))
}

fn remove_temporaries(dir: &Path) -> Result<()> {
    let entries =
        tally_world::fs::read_dir(dir).map_err(|e| Error::io("list data directory", dir, e))?;
    for entry in entries {
        let path = entry
            .map_err(|e| Error::io("list data directory", dir, e))?
            .path();
        if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
            tally_world::fs::remove_file(&path)
                .map_err(|e| Error::io("remove temporary file", &path, e))?;
        }
    }
    Ok(())
}
