//! The version set: which memtables and SSTables hold the cells, as one
//! copy-on-write snapshot.
//!
//! Readers clone the current [`Version`] (an `Arc`) and drop the lock at
//! once; a write that must not see a memtable switch in the middle (a
//! cell's read-modify-write) holds the read lock instead ([`VersionSet::read`]).
//! Only three things install a new version, each under the write lock: a
//! memtable switch (freeze), a finished flush, a finished compaction.
//!
//! The set also owns the two number sources that name what it holds
//! (memtable generations and table ids) and the write stall: the sealer
//! waits here while too many frozen memtables wait for flushing, and a
//! flush wakes it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};

use crate::cell::{Cell, Merger};
use crate::error::Result;
use crate::key::Key;
use crate::memtable::Memtable;
use crate::sstable::Table;

/// A consistent view of where cells live: readers clone the `Arc` and drop
/// the lock at once.
///
/// # Invariants
/// - `frozen` is ordered newest first; all generations are distinct, and
///   the active memtable's is the highest.
pub(crate) struct Version {
    /// Grows with every version installed: a reader that saw `seq` knows
    /// whether the tables changed since.
    pub(crate) seq: u64,
    pub(crate) active: Arc<Memtable>,
    pub(crate) frozen: Vec<Arc<Memtable>>,
    pub(crate) tables: Vec<Arc<Table>>,
}

impl Version {
    /// The active memtable, then the frozen ones, newest first.
    pub(crate) fn memtables(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        std::iter::once(&self.active).chain(self.frozen.iter())
    }

    /// Merges the cells this version's SSTables hold for `key` (may read disk).
    pub(crate) fn read_tables(&self, key: &Key, merger: &Merger) -> Result<Cell> {
        let mut cell = Cell::new();
        for t in &self.tables {
            if let Some(c) = t.get(key)? {
                cell.merge(&c, merger);
            }
        }
        Ok(cell)
    }

    /// Asserts the invariants (debug builds only).
    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            let mut newer = self.active.generation();
            for m in &self.frozen {
                assert!(
                    m.generation() < newer,
                    "frozen memtables out of order: generation {} after {newer}",
                    m.generation()
                );
                newer = m.generation();
            }
        }
    }
}

/// The current [`Version`], how the next one is made, and the write stall.
///
/// # Invariants
/// - `next_gen` is above every memtable generation handed out, and
///   `next_table_id` above every table id: names are never reused.
/// - Once `closed` (under `stall`), no write waits for a flush.
pub(crate) struct VersionSet {
    state: RwLock<Arc<Version>>,
    next_gen: AtomicU64,
    next_table_id: AtomicU64,
    /// The write stall's lock: whether the engine is shutting down.
    stall: Mutex<bool>,
    /// Signalled when a frozen memtable is flushed (for stalled writers);
    /// waits on `stall`.
    flushed: Condvar,
    /// How every cell this engine holds merges (its fold generations).
    merger: Merger,
}

impl VersionSet {
    /// A set starting at `version`; new tables are numbered from
    /// `next_table_id`; its cells merge by `merger`.
    pub(crate) fn new(version: Version, next_table_id: u64, merger: Merger) -> Self {
        version.check_invariants();
        VersionSet {
            merger,
            next_gen: AtomicU64::new(version.active.generation() + 1),
            state: RwLock::new(Arc::new(version)),
            next_table_id: AtomicU64::new(next_table_id),
            stall: Mutex::new(false),
            flushed: Condvar::new(),
        }
    }

    /// How the cells this engine holds merge.
    pub(crate) fn merger(&self) -> &Merger {
        &self.merger
    }

    /// The current version, for a reader that does not mind a switch
    /// coming right after.
    pub(crate) fn current(&self) -> Arc<Version> {
        self.state.read().clone()
    }

    /// The current version, read-locked: no memtable switch, flush or
    /// compaction is installed until the guard is dropped.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Arc<Version>> {
        self.state.read()
    }

    /// A fresh table id.
    pub(crate) fn new_table_id(&self) -> u64 {
        self.next_table_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes the active memtable frozen and starts a new one (if it holds
    /// anything).
    pub(crate) fn freeze(&self) {
        self.switch_memtable(&mut self.state.write());
    }

    /// Freezes the active memtable if it is over `bytes_max`, checked under
    /// the lock: the sealer and the background thread both ask, and only
    /// one may freeze. Answers whether it froze.
    pub(crate) fn freeze_if_full(&self, bytes_max: usize) -> bool {
        let mut st = self.state.write();
        if st.active.bytes() < bytes_max {
            return false;
        }
        self.switch_memtable(&mut st);
        true
    }

    fn switch_memtable(&self, st: &mut Arc<Version>) {
        if st.active.len() == 0 {
            return;
        }
        let generation = self.next_gen.fetch_add(1, Ordering::Relaxed);
        let mut frozen = Vec::with_capacity(st.frozen.len() + 1);
        frozen.push(st.active.clone());
        frozen.extend(st.frozen.iter().cloned());
        install(
            st,
            Version {
                seq: st.seq + 1,
                active: Arc::new(Memtable::new(generation)),
                frozen,
                tables: st.tables.clone(),
            },
        );
    }

    /// Replaces the frozen memtable `generation` by `table`, its flush
    /// (`None` when it held nothing). Stalled writers are woken apart, by
    /// [`VersionSet::notify_flushed`].
    pub(crate) fn install_flushed(&self, generation: u64, table: Option<Arc<Table>>) {
        let mut st = self.state.write();
        let frozen = st
            .frozen
            .iter()
            .filter(|f| f.generation() != generation)
            .cloned()
            .collect();
        let mut tables = st.tables.clone();
        tables.extend(table);
        let next = Version {
            seq: st.seq + 1,
            active: st.active.clone(),
            frozen,
            tables,
        };
        install(&mut st, next);
    }

    /// Replaces the tables `inputs` by `output`, their compaction.
    pub(crate) fn install_compacted(&self, inputs: &[Arc<Table>], output: Arc<Table>) {
        let mut st = self.state.write();
        let mut tables: Vec<Arc<Table>> = st
            .tables
            .iter()
            .filter(|t| !inputs.iter().any(|i| i.id() == t.id()))
            .cloned()
            .collect();
        tables.push(output);
        let next = Version {
            seq: st.seq + 1,
            active: st.active.clone(),
            frozen: st.frozen.clone(),
            tables,
        };
        install(&mut st, next);
    }

    /// Backpressure: waits while `frozen_max` or more frozen memtables wait
    /// for flushing, unless the set is closed or `give_up` says so (a
    /// poisoned engine writes nothing, and flushes may never come).
    pub(crate) fn stall_while_behind(&self, frozen_max: usize, give_up: impl Fn() -> bool) {
        let mut closed = self.stall.lock();
        while self.current().frozen.len() >= frozen_max && !*closed && !give_up() {
            tracing::debug!("write stall: flushes are behind");
            self.flushed
                .wait_for(&mut closed, Duration::from_millis(100));
        }
    }

    /// Wakes stalled writers: a flush finished, or they should give up.
    pub(crate) fn notify_flushed(&self) {
        self.flushed.notify_all();
    }

    /// The engine is shutting down: no write waits for a flush from now on.
    pub(crate) fn close(&self) {
        *self.stall.lock() = true;
        self.flushed.notify_all();
    }
}

/// Swaps `next` in, under the write lock the caller holds.
fn install(st: &mut Arc<Version>, next: Version) {
    next.check_invariants();
    debug_assert!(
        next.seq > st.seq,
        "version went back: {} <= {}",
        next.seq,
        st.seq
    );
    *st = Arc::new(next);
}
