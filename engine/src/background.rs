//! The background thread: memtable flushes and size-tiered compaction.
//!
//! It is asked for work by messages ([`Work`], from the sealer, the syncer
//! and writers that fill a memtable), and talks back through narrow
//! handles: it installs tables in the [`VersionSet`], reads marked cells
//! from the [`CounterCache`], and tells the [`GroupCommit`] which memtable
//! generation is flushed, so that log segments may go. `Engine::flush` and
//! `Engine::compact` run the same code on the caller's thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tally_world::Instant;

use parking_lot::Mutex;

use crate::cache::CounterCache;
use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::group_commit::GroupCommit;
use crate::ids::store::IdsStore;
use crate::key::Key;
use crate::options::Options;
use crate::rate_limit::RateLimit;
use crate::space::Space;
use crate::sstable::{Table, TableIter, TableWriter};
use crate::version::VersionSet;
use crate::work::{Work, WorkReceiver};

/// Largest number of tables one compaction merges.
const COMPACTION_TABLES_MAX: usize = 32;
/// Tables below this size all share the smallest tier.
const SMALL_TABLE_BYTES: u64 = 4 << 20;

/// How often the background thread looks for frozen memtables nobody
/// asked it to flush.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Flushes and compactions, with the handles they need.
///
/// Its locks (`flush_lock`, `compaction_lock`: one flush and one
/// compaction at a time) have their places in the engine's lock order,
/// written in `engine`.
pub(crate) struct Background {
    /// Where tables are written.
    dir: PathBuf,
    block_bytes: usize,
    memtable_bytes_max: usize,
    compaction_tables_min: usize,
    versions: Arc<VersionSet>,
    /// Holds the state of keys a memtable only marks.
    cache: Arc<CounterCache>,
    /// Told the flushed generation.
    commit: Arc<GroupCommit>,
    /// Told whether flushes find room.
    space: Arc<Space>,
    /// Written before a flush lets log segments go.
    ids: Arc<IdsStore>,
    /// When a failed flush or compaction was last logged.
    failures: Mutex<RateLimit>,
    flush_lock: Mutex<()>,
    compaction_lock: Mutex<()>,
    /// Compactions done since open.
    pub(crate) compactions: std::sync::atomic::AtomicU64,
    /// Dead cells a compaction of every table drops, and cells no
    /// compaction folds.
    purge: Option<Arc<dyn crate::options::Purge>>,
}

impl Background {
    /// Flushes and compactions for the engine in `dir`.
    pub(crate) fn new(
        dir: PathBuf,
        opts: &Options,
        versions: Arc<VersionSet>,
        cache: Arc<CounterCache>,
        commit: Arc<GroupCommit>,
        space: Arc<Space>,
        ids: Arc<IdsStore>,
    ) -> Self {
        Background {
            dir,
            block_bytes: opts.block_bytes,
            memtable_bytes_max: opts.memtable_bytes_max,
            compaction_tables_min: opts.compaction_tables_min,
            purge: opts.purge.clone(),
            versions,
            cache,
            commit,
            space,
            ids,
            failures: Mutex::new(RateLimit::default()),
            flush_lock: Mutex::new(()),
            compaction_lock: Mutex::new(()),
            compactions: Default::default(),
        }
    }

    /// Runs flushes and compactions, as `work` asks, until told to stop.
    pub(crate) fn run(&self, work: &WorkReceiver) {
        loop {
            match work.next(IDLE_CHECK) {
                Some(Work::Shutdown) => return,
                Some(Work::Flush) => {}
                None if self.versions.current().frozen.is_empty() => continue,
                None => {}
            }
            self.versions.freeze_if_full(self.memtable_bytes_max);
            if let Err(e) = self.flush_frozen() {
                self.failed("memtable flush failed; retrying in a second", &e);
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            if let Err(e) = self.compact_tiers() {
                self.failed("compaction failed", &e);
            }
        }
    }

    /// The background thread's work in an engine without threads
    /// (`Options::stepped`): when a flush was asked for or frozen
    /// memtables wait, flushes them and runs the compactions due. Answers
    /// whether it flushed.
    pub(crate) fn step(&self, work: &WorkReceiver) -> bool {
        let asked = work.next(Duration::ZERO) == Some(Work::Flush);
        if !asked && self.versions.current().frozen.is_empty() {
            return false;
        }
        self.versions.freeze_if_full(self.memtable_bytes_max);
        if let Err(e) = self.flush_frozen() {
            self.failed("memtable flush failed; retrying at the next step", &e);
            return false;
        }
        if let Err(e) = self.compact_tiers() {
            self.failed("compaction failed", &e);
        }
        true
    }

    /// Logs a failure, at most once a second (a full disk fails every try).
    fn failed(&self, what: &str, e: &Error) {
        if let Some(suppressed) = self.failures.lock().allow(Instant::now()) {
            tracing::error!(error = %e, suppressed, "{what}");
        }
    }

    /// Writes every frozen memtable, oldest first, to an SSTable. A flush
    /// that finds the disk full tells `space`, so that writes are refused
    /// rather than left waiting for it (see `space`), until one goes
    /// through.
    pub(crate) fn flush_frozen(&self) -> Result<()> {
        let flushed = self.flush_frozen_tables();
        match &flushed {
            Ok(()) => self.space.set_tables_full(false),
            Err(e) if e.is_out_of_space() => {
                self.space.set_tables_full(true);
                // Writers stalled for this flush: refuse them instead.
                self.versions.notify_flushed();
            }
            Err(_) => {}
        }
        flushed
    }

    fn flush_frozen_tables(&self) -> Result<()> {
        let _one_at_a_time = self.flush_lock.lock();
        loop {
            let Some(m) = self.versions.current().frozen.last().cloned() else {
                return Ok(());
            };
            let table = if m.len() == 0 {
                None
            } else {
                // Marked keys' state is read from the counter cache, one cell
                // lock at a time, after the memtable's shard locks are released.
                let cells: Vec<(Key, Cell)> = m
                    .sorted()
                    .into_iter()
                    .map(|(k, slot)| {
                        let c = self.cache.slot_cell(&m, &k, slot);
                        (k, c)
                    })
                    .collect();
                Some(self.write_table(cells.into_iter().map(Ok))?)
            };
            self.versions.install_flushed(m.generation(), table);
            // The ids in the generation's log records reach a file before
            // its segments may go.
            self.ids.persist()?;
            self.commit.flushed(m.generation());
            self.versions.notify_flushed();
            tracing::debug!(
                generation = m.generation(),
                cells = m.len(),
                "memtable flushed"
            );
        }
    }

    fn write_table(&self, cells: impl Iterator<Item = Result<(Key, Cell)>>) -> Result<Arc<Table>> {
        let id = self.versions.new_table_id();
        let mut w = TableWriter::create(&self.dir, id, self.block_bytes)?;
        for item in cells {
            let (k, c) = item?;
            w.add(&k, &c)?;
        }
        let (path, _) = w.finish()?;
        Ok(Arc::new(Table::open(&path, id)?))
    }

    /// Runs size-tiered compactions until no tier has enough tables.
    fn compact_tiers(&self) -> Result<()> {
        while let Some(pick) =
            pick_tier(&self.versions.current().tables, self.compaction_tables_min)
        {
            self.compact(pick)?;
        }
        Ok(())
    }

    /// Merges `inputs` into one table and swaps it in. Shards that a reset made
    /// obsolete disappear in the merge.
    pub(crate) fn compact(&self, inputs: Vec<Arc<Table>>) -> Result<()> {
        if inputs.len() < 2 {
            return Ok(());
        }
        let _one_at_a_time = self.compaction_lock.lock();
        let live = self.versions.current();
        if !inputs
            .iter()
            .all(|i| live.tables.iter().any(|t| t.id() == i.id()))
        {
            return Ok(()); // Someone compacted these already.
        }
        let folding = inputs.len() == live.tables.len();
        let merger = self.versions.merger();
        let mut cells = merged(&inputs, merger, folding);
        cells.purge = self.purge.clone();
        cells.dropping = folding;
        let output = self.replace(&inputs, cells)?;
        self.compactions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(
            inputs = inputs.len(),
            output = output.id(),
            cells = output.entries(),
            "compacted"
        );
        Ok(())
    }

    /// Hard-links every live table into `dir` (see `engine::snapshot`);
    /// no compaction deletes one meanwhile.
    pub(crate) fn link_tables(&self, dir: &Path) -> Result<crate::fsutil::Snapshotted> {
        let _one_at_a_time = self.compaction_lock.lock();
        let mut done = crate::fsutil::Snapshotted::default();
        for t in &self.versions.current().tables {
            let path = crate::sstable::table_path(&self.dir, t.id());
            crate::fsutil::link(&path, dir, &mut done)?;
        }
        Ok(done)
    }

    /// Rewrites every table into one without the cells of the keys `keep`
    /// refuses, but for `own`'s shard of each (with its epoch); answers the
    /// cells kept whole and the cells dropped (own shards kept or not).
    pub(crate) fn rewrite(
        &self,
        keep: &dyn Fn(&Key) -> crate::cell::Keep,
        own: u64,
    ) -> Result<(u64, u64)> {
        let _one_at_a_time = self.compaction_lock.lock();
        let inputs = self.versions.current().tables.clone();
        self.rewrite_tables(&inputs, keep, own)
    }

    /// [`Background::rewrite`] of the tables holding a key in one of
    /// `ranges` alone (see `Engine::cleanup`).
    pub(crate) fn rewrite_holding(
        &self,
        ranges: &[(Key, Option<Key>)],
        keep: &dyn Fn(&Key) -> crate::cell::Keep,
        own: u64,
    ) -> Result<(u64, u64)> {
        let _one_at_a_time = self.compaction_lock.lock();
        let mut inputs = Vec::new();
        for t in &self.versions.current().tables {
            if holds_any(t, ranges)? {
                inputs.push(t.clone());
            }
        }
        self.rewrite_tables(&inputs, keep, own)
    }

    /// Rewrites `inputs` (live tables; the caller holds the compaction
    /// lock) into one, filtered by `keep` (see [`Background::rewrite`]).
    fn rewrite_tables(
        &self,
        inputs: &[Arc<Table>],
        keep: &dyn Fn(&Key) -> crate::cell::Keep,
        own: u64,
    ) -> Result<(u64, u64)> {
        if inputs.is_empty() {
            return Ok((0, 0));
        }
        let (mut kept, mut dropped) = (0, 0);
        let folding = inputs.len() == self.versions.current().tables.len();
        let merger = self.versions.merger();
        let filtered = merged(inputs, merger, folding).filter_map(|item| {
            let (k, c) = match item {
                Ok(kc) => kc,
                Err(e) => return Some(Err(e)),
            };
            let rule = keep(&k);
            match rule {
                crate::cell::Keep::Whole => kept += 1,
                crate::cell::Keep::Own | crate::cell::Keep::Nothing => dropped += 1,
            }
            rule.apply(c, own).map(|c| Ok((k, c)))
        });
        self.replace(inputs, filtered)?;
        Ok((kept, dropped))
    }

    /// Writes `cells` (made of `inputs`) to one new table and swaps it in
    /// for them, durably.
    fn replace(
        &self,
        inputs: &[Arc<Table>],
        cells: impl Iterator<Item = Result<(Key, Cell)>>,
    ) -> Result<Arc<Table>> {
        let output = self.write_table(cells)?;
        self.versions.install_compacted(inputs, output.clone());
        for t in inputs {
            if let Err(e) = tally_world::fs::remove_file(t.path()) {
                tracing::warn!(path = %t.path().display(), error = %e, "could not remove a replaced table");
            }
        }
        fsutil::sync_dir(&self.dir)?;
        Ok(output)
    }
}

/// Whether `table` holds a key in one of `ranges` (from the first key
/// up to, not including, the second; to the end for `None`): one seek each.
fn holds_any(table: &Arc<Table>, ranges: &[(Key, Option<Key>)]) -> Result<bool> {
    for (from, to) in ranges {
        if let Some(first) = table.iter_from(Some(from)).next() {
            let (k, _) = first?;
            if to.as_ref().is_none_or(|to| k < *to) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Every cell of `inputs`, merged; counters expired past the grace fold
/// into tombstones, and, when `folding`, retired incarnations' shards
/// into bases (by the generations `merger` holds: `cell::fold`).
///
/// Only a merge of every table folds (the caller holds the compaction
/// lock, so none is missing): a fold must take a retired shard's last
/// version, and a merge of some tables may hold only a stale one while a
/// table left out holds the last. Folded, the stale value would become
/// the base at the new generation, which wins every later merge: the
/// counter off by the shard's last adds (up, where they were negative).
fn merged(inputs: &[Arc<Table>], merger: &crate::cell::Merger, folding: bool) -> MergeIter {
    MergeIter {
        fold_before_ms: crate::cell::now_ms().saturating_sub(EXPIRED_GRACE_MS),
        purge: None,
        dropping: false,
        folds: folding.then(|| merger.installed()),
        merger: merger.clone(),
        inputs: inputs
            .iter()
            .map(|t| t.iter_from(None).peekable())
            .collect(),
    }
}

/// The largest group of similar-sized tables, if it has at least `min` of them.
fn pick_tier(tables: &[Arc<Table>], min: usize) -> Option<Vec<Arc<Table>>> {
    let mut sorted = tables.to_vec();
    sorted.sort_by_key(|t| t.file_bytes());
    let mut tiers: Vec<Vec<Arc<Table>>> = Vec::new();
    for t in sorted {
        let fits = tiers.last().is_some_and(|tier| {
            let avg = tier.iter().map(|t| t.file_bytes()).sum::<u64>() / tier.len() as u64;
            t.file_bytes() <= SMALL_TABLE_BYTES || t.file_bytes() <= avg + avg / 2
        });
        if fits {
            tiers.last_mut().expect("fits implies a tier").push(t);
        } else {
            tiers.push(vec![t]);
        }
    }
    let mut best = tiers
        .into_iter()
        .filter(|t| t.len() >= min.max(2))
        .max_by_key(|t| t.len())?;
    best.truncate(COMPACTION_TABLES_MAX);
    Some(best)
}

/// How long after its deadline an expired counter keeps its shards
/// (until a compaction folds it into a tombstone): a late `PERSIST` or a
/// longer `EXPIRE` stamped before the deadline by a leader whose clock is
/// behind still finds them within this.
pub(crate) const EXPIRED_GRACE_MS: u64 = 60 * 60 * 1000;

/// Merges sorted streams of cells (tables, sorted memtables) into one
/// sorted stream, merging equal keys; a counter expired before
/// `fold_before_ms` becomes a tombstone ([`Cell::fold_expired`]; 0 folds
/// nothing).
pub(crate) struct MergeIter<I: Iterator<Item = Result<(Key, Cell)>> = TableIter> {
    pub(crate) fold_before_ms: u64,
    /// Which dead cells may go, and which expired cells do not fold.
    pub(crate) purge: Option<Arc<dyn crate::options::Purge>>,
    /// Whether this merge drops the dead cells `purge` says may go (a
    /// merge of every table's only).
    pub(crate) dropping: bool,
    /// The fold generations to fold cells by, if any.
    pub(crate) folds: Option<Arc<crate::cell::Folds>>,
    /// How the cells merge.
    pub(crate) merger: crate::cell::Merger,
    pub(crate) inputs: Vec<std::iter::Peekable<I>>,
}

impl<I: Iterator<Item = Result<(Key, Cell)>>> Iterator for MergeIter<I> {
    type Item = Result<(Key, Cell)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (key, mut cell) = match self.merge_next()? {
                Ok(kc) => kc,
                Err(e) => return Some(Err(e)),
            };
            if self.purges(&key, &cell) {
                continue;
            }
            if self.purge.as_ref().is_none_or(|p| p.folds(&key)) {
                cell.fold_expired(self.fold_before_ms);
            }
            if let Some(folds) = &self.folds {
                cell.fold_retired(folds);
            }
            return Some(Ok((key, cell)));
        }
    }
}

impl<I: Iterator<Item = Result<(Key, Cell)>>> MergeIter<I> {
    /// Whether `cell` (of `key`, before its fold) is one to drop.
    fn purges(&self, key: &Key, cell: &Cell) -> bool {
        let Some(p) = self.purge.as_ref().filter(|_| self.dropping) else {
            return false;
        };
        let now = crate::cell::now_ms();
        !cell.live(now) && p.drops(key, cell, now)
    }

    /// The next key's cells of every input, merged (not folded yet).
    fn merge_next(&mut self) -> Option<Result<(Key, Cell)>> {
        let mut min: Option<Key> = None;
        for input in &mut self.inputs {
            match input.peek() {
                Some(Ok((k, _))) if min.as_ref().is_none_or(|m| k < m) => min = Some(k.clone()),
                Some(Ok(_)) => {}
                Some(Err(_)) => return input.next(),
                None => {}
            }
        }
        let min = min?;
        let mut cell = Cell::new();
        for input in &mut self.inputs {
            if let Some(Ok((k, _))) = input.peek()
                && *k == min
                && let Some(Ok((_, c))) = input.next()
            {
                cell.merge(&c, &self.merger);
            }
        }
        Some(Ok((min, cell)))
    }
}
