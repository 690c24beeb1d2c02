//! The counter cache: cell locks and recently written cells, striped by
//! key hash, behind one handle ([`CounterCache`]).
//!
//! A stripe's mutex is *the* cell lock for every key that hashes to it. It
//! guards, for those keys:
//! - the counter cache: the whole cell as this node knows it, for recently
//!   written keys, so the leader's read-modify-write never reads the disk.
//!   A memtable holds a written cached key as a mark, not a copy of its
//!   state, and reads that state here (see `memtable`): an entry leaves it
//!   there as a cell before it is evicted;
//! - pending adds, next to the cached cell: deltas waiting for the sealer,
//!   which combines all adds to one key into one read-modify-write and one
//!   log record.
//!
//! The lock is only ever held for in-memory work: a cold cell is read from
//! the SSTables before it is taken ([`CounterCache::with_cell`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, AtomicUsize};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::cell::Cell;
use crate::error::Result;
use crate::ids::tail::TailOp;
use crate::key::Key;
use crate::memtable::{Memtable, Slot};
use crate::outcome::AddOutcome;
use crate::version::{Version, VersionSet};

mod cells;
use cells::{Cells, Span};

/// Number of stripes (a power of two).
const STRIPES: usize = 1024;

/// The counter cache and the cell locks.
///
/// # Invariants
/// - Every stripe holds at most `cap_per_stripe` entries, plus those pinned
///   by pending adds (see [`Stripe`]).
/// - A memtable marks a key ([`Slot::Cached`]) only while it is cached here.
pub(crate) struct CounterCache {
    stripes: Box<[Locked]>,
    cap_per_stripe: usize,
    /// Where cells not cached live.
    versions: Arc<VersionSet>,
    /// The last durable group commit (see `GroupCommit`).
    durable_batch: Arc<AtomicU64>,
}

impl CounterCache {
    /// A cache of about `cells_max` cells over the memtables and tables of `versions`.
    pub(crate) fn new(
        cells_max: usize,
        versions: Arc<VersionSet>,
        durable_batch: Arc<AtomicU64>,
    ) -> Self {
        CounterCache {
            stripes: (0..STRIPES).map(|_| Locked::default()).collect(),
            cap_per_stripe: (cells_max / STRIPES).max(1),
            versions,
            durable_batch,
        }
    }

    /// The cell lock of `key`.
    pub(crate) fn stripe(&self, key: &Key) -> &Mutex<Stripe> {
        &self.stripes[stripe_of(key)].stripe
    }

    /// Asks the CPU to fetch what the read-modify-writes of `keys[i + 1..]`
    /// will read, while the caller works on `keys[i]`: the entry of
    /// `keys[i + AHEAD]` (reading its index slot, under its lock) and the
    /// index slot of `keys[i + 2 * AHEAD]` (without a lock). A batch calls
    /// it before each of its keys, so that no lookup waits for memory.
    pub(crate) fn fetch_ahead(&self, keys: &[&Key], i: usize) {
        if let Some(key) = keys.get(i + 2 * AHEAD) {
            self.stripes[stripe_of(key)].span().prefetch(key.hash_u64());
        }
        if let Some(key) = keys.get(i + AHEAD) {
            self.stripe(key).lock().cells.prefetch(key.hash_u64());
        }
    }

    /// The cached cell of `key`, if it is cached.
    pub(crate) fn cached(&self, key: &Key) -> Option<Cell> {
        self.stripe(key)
            .lock()
            .cells
            .get(key)
            .map(|c| c.cell.clone())
    }

    /// `look` at the cached cell of `key`, if it is cached (nothing is
    /// read from disk, nothing copied).
    pub(crate) fn peek<R>(&self, key: &Key, look: impl FnOnce(&Cell) -> R) -> Option<R> {
        self.stripe(key)
            .lock()
            .cells
            .get(key)
            .map(|c| look(&c.cell))
    }

    /// Cuts every cached cell of a key `keep` does not keep whole down to
    /// what it keeps (see `Engine::cleanup`): the cache is the state of the
    /// keys it holds, which the memtables only mark.
    pub(crate) fn trim(&self, keep: &dyn Fn(&Key) -> crate::cell::Keep, own: u64) {
        for stripe in self.stripes.iter() {
            for (key, cached) in stripe.stripe.lock().cells.iter_mut() {
                let rule = keep(key);
                if rule == crate::cell::Keep::Whole {
                    continue;
                }
                let cell = std::mem::replace(&mut cached.cell, Cell::new());
                // A key that goes is cached as one never written.
                if let Some(kept) = rule.apply(cell, own) {
                    cached.cell = kept;
                }
            }
        }
    }

    /// Folds every cached cell by `folds` (see `Engine::fold`).
    pub(crate) fn fold(&self, folds: &crate::cell::Folds) {
        for stripe in self.stripes.iter() {
            for (_, cached) in stripe.stripe.lock().cells.iter_mut() {
                cached.cell.fold_retired(folds);
            }
        }
    }

    /// Adds the counter_ids of every cached cell's shards to `ids`.
    pub(crate) fn counter_ids(&self, ids: &mut std::collections::BTreeSet<u64>) {
        for stripe in self.stripes.iter() {
            for (_, cached) in stripe.stripe.lock().cells.iter() {
                ids.extend(cached.cell.shards().iter().map(|s| s.counter_id));
            }
        }
    }

    /// Cells cached now.
    pub(crate) fn len(&self) -> usize {
        self.stripes
            .iter()
            .map(|s| s.stripe.lock().cells.len())
            .sum()
    }

    /// Runs `f` under the cell lock on the key's counter cache entry, loading
    /// the whole cell first (outside the lock) if it is not cached. `f` also
    /// gets the version, held so that no memtable switch happens meanwhile.
    pub(crate) fn with_cell<R>(
        &self,
        key: &Key,
        f: impl FnOnce(&mut Cached, &Version) -> R,
    ) -> Result<R> {
        debug_assert!(
            !crate::unique::is_member(key),
            "member cells are never cached: {key:?}"
        );
        loop {
            let v = self.versions.read();
            let mut stripe = self.stripe(key).lock();
            if let Some(cached) = stripe.cells.get_mut(key) {
                return Ok(f(cached, &v));
            }
            let seq = v.seq;
            drop(stripe);
            drop(v);

            // Cold: read the tables without any lock held, then take the lock
            // and add what the memtables hold. If a flush or compaction
            // changed the tables in between, read again.
            let snapshot = self.versions.current();
            if snapshot.seq != seq {
                continue;
            }
            let merger = self.versions.merger();
            let mut cell = snapshot.read_tables(key, merger)?;
            let v = self.versions.read();
            if v.seq != seq {
                continue;
            }
            let mut stripe = self.stripe(key).lock();
            if !stripe.cells.contains_key(key) {
                for m in v.memtables().filter(|m| m.holds_cells()) {
                    match m.get(key) {
                        Some(Slot::Cell(c)) => cell.merge(&c, merger),
                        // Not cached, under the cell lock: none (see `Memtable`).
                        Some(Slot::Cached) => debug_assert!(false, "{key:?} marked, not cached"),
                        None => {}
                    }
                }
                let durable = self.durable_batch.load(Acquire);
                stripe.cache(key.clone(), cell, self.cap_per_stripe, &v, durable);
                self.stripes[stripe_of(key)].publish(stripe.cells.span());
            }
            let cached = stripe
                .cells
                .get_mut(key)
                .expect("cached under this lock just above");
            return Ok(f(cached, &v));
        }
    }

    /// The state of `key` that memtable `m` holds as `slot`. A
    /// [`Slot::Cached`] is the counter cache's whole cell, or, if the entry
    /// was evicted since the slot was read, the cell its eviction left in `m`.
    pub(crate) fn slot_cell(&self, m: &Memtable, key: &Key, slot: Slot) -> Cell {
        if let Slot::Cell(cell) = slot {
            return *cell;
        }
        let stripe = self.stripe(key).lock();
        if let Some(cached) = stripe.cells.get(key) {
            return cached.cell.clone();
        }
        match m.get(key) {
            Some(Slot::Cell(cell)) => *cell,
            // Not cached, under the cell lock: no mark (see `Memtable`), and
            // entries are never removed.
            other => {
                debug_assert!(false, "{key:?} marked, not cached: {other:?}");
                tracing::error!(?key, "memtable marks a key the counter cache does not hold");
                Cell::new()
            }
        }
    }

    /// Takes every pending add off every cell, one cell lock at a time, and
    /// hands it to `f` (for answering them when the sealer is gone).
    pub(crate) fn drain_pending(&self, mut f: impl FnMut(PendingAdd)) {
        for stripe in &self.stripes {
            let mut stripe = stripe.stripe.lock();
            for (_, cached) in stripe.cells.iter_mut() {
                cached.pending.drain(..).for_each(&mut f);
            }
        }
    }
}

/// A waiting add.
pub(crate) struct PendingAdd {
    pub(crate) delta: i64,
    /// Fires once the add is durable (or failed); taken when it is answered.
    pub(crate) done: Option<oneshot::Sender<Result<AddOutcome>>>,
    /// Fires when the add is sealed, before its fsync; dropped unsent if
    /// the add is refused, or its outcome waits for durability.
    pub(crate) sealed: oneshot::Sender<AddOutcome>,
}

/// A cached cell with the adds waiting to be sealed into it.
#[derive(Default)]
pub(crate) struct Cached {
    /// The whole cell as this node knows it.
    pub(crate) cell: Cell,
    /// Adds not yet sealed, in arrival order; kept allocated between turns.
    pub(crate) pending: Vec<PendingAdd>,
    /// The group commit this cell's newest record went into (or a later
    /// one). Until it is durable, new adds wait to be combined.
    pub(crate) sealed_batch: u64,
    /// The generation of the memtable that last marked this key as held
    /// here ([`Slot::Cached`](crate::memtable::Slot)); 0 for none.
    pub(crate) marked_in: u64,
    /// This node's adds with ids to the cell whose group commit may not be
    /// durable yet: they go with every shard of the cell that leaves early
    /// (see `group_commit::once`). An entry holding some is not evicted
    /// before its newest record is durable.
    pub(crate) unsynced: Vec<TailOp>,
    /// The expired epoch whose restart the caller confirmed
    /// ([`crate::Engine::confirm_restart`]), by its tag.
    pub(crate) restart_confirmed: Option<u64>,
}

impl Cached {
    /// Records in the active memtable that this entry holds state written
    /// there: once per memtable, so that a write to a cached cell costs one
    /// hash lookup, not two. Call under the cell lock after changing `cell`.
    pub(crate) fn mark_written(&mut self, key: &Key, v: &Version) {
        if self.marked_in != v.active.generation() {
            v.active.mark_cached(key, &self.cell);
            self.marked_in = v.active.generation();
        }
    }
}

/// The state behind one cell lock.
///
/// # Invariants
/// - An entry with pending adds is pinned: never evicted; so is one with
///   unsynced ids whose newest record is not durable.
#[derive(Default)]
pub(crate) struct Stripe {
    cells: Cells,
}

impl Stripe {
    /// The cache entry of `key`, if it is cached.
    pub(crate) fn get_mut(&mut self, key: &Key) -> Option<&mut Cached> {
        self.cells.get_mut(key)
    }

    /// Caches `cell` for `key` (not cached yet), evicting an unpinned entry
    /// when over `cap`. `v` is the version the caller holds.
    ///
    /// The victim is the first unpinned entry from a place the new key's
    /// hash picks, which is effectively random; evicting a live key only
    /// costs a memtable or SSTable read on its next write. A victim that
    /// memtables mark as held here leaves its whole cell in them instead.
    fn cache(&mut self, key: Key, cell: Cell, cap: usize, v: &Version, durable: u64) {
        if self.cells.len() >= cap {
            let victim = self
                .cells
                .iter_from(key.hash_u64() as usize)
                .find(|(_, c)| {
                    c.pending.is_empty() && (c.unsynced.is_empty() || c.sealed_batch <= durable)
                })
                .map(|(k, _)| k.clone());
            if let Some((gone, entry)) = victim.and_then(|k| self.cells.remove(&k))
                && entry.marked_in != 0
            {
                for m in v.memtables() {
                    m.unmark_cached(&gone, &entry.cell);
                }
            }
        }
        self.cells.insert(
            key,
            Cached {
                cell,
                pending: Vec::new(),
                sealed_batch: 0,
                marked_in: 0,
                unsynced: Vec::new(),
                restart_confirmed: None,
            },
        );
    }
}

/// How many keys ahead a batch fetches entries (see
/// [`CounterCache::fetch_ahead`]): enough work between to cover a memory
/// access.
const AHEAD: usize = 4;

/// A stripe behind its lock, and where its index lies, for fetching ahead
/// without the lock.
#[derive(Default)]
struct Locked {
    stripe: Mutex<Stripe>,
    /// The index's [`Span`], published under the lock whenever it moves.
    /// Read without it, the two may be torn or stale: only a prefetch
    /// (which reads nothing) uses them.
    span_at: AtomicUsize,
    span_mask: AtomicUsize,
}

impl Locked {
    fn span(&self) -> Span {
        Span {
            at: self.span_at.load(Relaxed),
            mask: self.span_mask.load(Relaxed),
        }
    }

    fn publish(&self, span: Span) {
        if span != self.span() {
            self.span_at.store(span.at, Relaxed);
            self.span_mask.store(span.mask, Relaxed);
        }
    }
}

/// Which stripe guards `key`. Uses middle bits of the key hash: the maps
/// inside a stripe index by the low bits and tag by the top ones.
fn stripe_of(key: &Key) -> usize {
    ((key.hash_u64() >> 32) as usize) & (STRIPES - 1)
}
