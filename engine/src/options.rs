//! Engine settings: read by every component, importing only the data
//! types (the fold generations to install, `cell::Folds`).

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::cell::{Cell, Folds};
use crate::key::Key;

/// When a write counts as durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Group commit: a write is acknowledged after the fsync that covers it.
    Batch,
    /// A write is acknowledged once handed to the OS; the log is fsync'd
    /// every `interval_ms`. A crash can lose the last interval of writes.
    Periodic {
        /// Milliseconds between fsyncs.
        interval_ms: u64,
    },
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// Durability of acknowledged writes.
    pub sync: SyncMode,
    /// Longest a `batch` fsync waits for the writers the previous one
    /// released to come back (see `group_commit::window`).
    pub group_commit_window_us: u64,
    /// Memtable size that triggers a flush.
    pub memtable_bytes_max: usize,
    /// Frozen memtables allowed to wait for flushing before writes stall.
    pub frozen_memtables_max: usize,
    /// Commit log segment size.
    pub segment_bytes_max: u64,
    /// Live commit log beyond which the memtable is flushed even if it is
    /// small (a hot counter writes many records into few cells), so the log
    /// and the time to replay it stay bounded.
    pub log_bytes_max: u64,
    /// Target SSTable block size.
    pub block_bytes: usize,
    /// Cells kept in the counter cache.
    pub counter_cache_cells_max: usize,
    /// Similar-sized tables needed to start a size-tiered compaction.
    pub compaction_tables_min: usize,
    /// The runtime whose tasks wait on this engine, if they all run on one:
    /// answers then reach them through one task there, with one wake-up
    /// per batch instead of one per waiter (see `relay`).
    pub answer_on: Option<tokio::runtime::Handle>,
    /// The hook of the runtime whose tasks wait on this engine, if its
    /// thread is to write group commits as it parks (see [`ParkCommit`]).
    pub park_commit: Option<ParkCommit>,
    /// The longest fsync after which a runtime still writes group commits
    /// as it parks; after a slower one the syncer writes them all, until
    /// one of its fsyncs is this fast again.
    pub park_sync_max_us: u64,
    /// How long operation ids are remembered (see `ids`).
    pub ids_retention: Retention,
    /// Test seam: while set, every commit log fsync fails with ENOSPC.
    #[doc(hidden)]
    pub fail_sync: Option<Arc<AtomicBool>>,
    /// Test seam: every commit log fsync takes this many microseconds more.
    #[doc(hidden)]
    pub slow_sync: Option<Arc<AtomicU64>>,
    /// Test seam: while set, group commits wait before they are written
    /// (their records stay in memory).
    #[doc(hidden)]
    pub stall_writes: Option<Arc<AtomicBool>>,
    /// Test seam (a deliberately broken build, for the chaos checker): a
    /// leader never restarts a counter whose deadline passed; its adds go
    /// into the expired epoch.
    #[doc(hidden)]
    pub keep_expired: bool,
    /// An add restarts a counter whose deadline passed only once the
    /// caller confirmed it ([`crate::Engine::confirm_restart`]): until
    /// then it is refused with [`crate::Error::Expired`]
    /// (`add::OnExpired::Confirmed`). A node sets it: it first reads the
    /// replicas, one of which may hold a later deadline. Off: an add
    /// restarts it at once.
    pub confirm_restarts: bool,
    /// The fold generations installed in the engine's [`Merger`] at open,
    /// before the commit log is replayed (the replay merges cells of every
    /// generation the ring agreed).
    ///
    /// [`Merger`]: crate::cell::Merger
    pub folds: Folds,
    /// Test seam (a deliberately broken build, for the chaos checker):
    /// merges ignore fold generations, from the replay on
    /// (`Merger::inject_merge_ignoring_generations`).
    #[doc(hidden)]
    pub merge_ignoring_generations: bool,
    /// Test seam: while set, the sealer panics when it wakes with work.
    #[doc(hidden)]
    pub panic_seal: Option<Arc<AtomicBool>>,
    /// Test seam: while set, the syncer panics when it wakes to write.
    #[doc(hidden)]
    pub panic_sync: Option<Arc<AtomicBool>>,
    /// Dead cells compactions drop, and cells they do not fold (see
    /// [`Purge`]).
    pub purge: Option<Arc<dyn Purge>>,
    /// No engine threads: the work of the sealer, the syncer and the
    /// background thread is done by the [`ParkCommit`] hook (which must be
    /// set), as its runtime parks. For a deterministic simulation, where
    /// one thread runs every node. Batch sync only.
    pub stepped: bool,
}

/// Which dead cells a compaction may forget, and which expired cells it
/// keeps unfolded. A compaction of every table asks [`Purge::drops`] of
/// each cell that is not live, and drops it if so (a compaction of some
/// tables drops nothing: an older copy in a table left out would come
/// back). Nothing stops a replica that kept an older copy of a dropped
/// cell from sending it back, so the rule must only drop cells whose
/// copies every replica has had time to merge (Cassandra's gc grace), or
/// whose coming back is harmless.
pub trait Purge: Send + Sync + std::fmt::Debug {
    /// Whether `cell` of `key`, not live at `now_ms`, may go.
    fn drops(&self, key: &Key, cell: &Cell, now_ms: u64) -> bool;

    /// Whether an expired cell of `key` folds into a reset's tombstone
    /// (`Cell::fold_expired`) once its grace has passed; a cell that does
    /// not keeps the deadline [`Purge::drops`] may judge it by.
    fn folds(&self, _key: &Key) -> bool {
        true
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync: SyncMode::Batch,
            group_commit_window_us: 100,
            memtable_bytes_max: 64 << 20,
            frozen_memtables_max: 2,
            segment_bytes_max: 64 << 20,
            log_bytes_max: 1 << 30,
            block_bytes: 4096,
            counter_cache_cells_max: 1 << 20,
            compaction_tables_min: 4,
            answer_on: None,
            park_commit: None,
            ids_retention: Retention::default(),
            fail_sync: None,
            slow_sync: None,
            stall_writes: None,
            keep_expired: false,
            confirm_restarts: false,
            folds: Folds::default(),
            merge_ignoring_generations: false,
            park_sync_max_us: 1_000,
            panic_seal: None,
            panic_sync: None,
            purge: None,
            stepped: false,
        }
    }
}

/// A runtime's part in group commit. A runtime whose tasks wait on one
/// engine can let its threads write the engine's group commits as they are
/// about to park, instead of handing them to the syncer thread and being
/// woken back: build the runtime with `on_thread_park` calling
/// [`ParkCommit::on_park`], and open the engine with
/// [`Options::park_commit`] set to a clone. The syncer still writes
/// whatever a busy runtime leaves for longer than half a millisecond.
/// Meant for a current-thread runtime, where the park comes as soon as
/// every task waits. One hook serves one engine at a time: the one opened
/// last.
#[derive(Clone, Default)]
pub struct ParkCommit(Arc<Mutex<Option<Weak<dyn OnPark>>>>);

/// What a [`ParkCommit`] hook calls on its thread: the group commit of the
/// engine opened last. A trait, so that these settings import no component.
pub(crate) trait OnPark: Send + Sync {
    /// Writes the open group commit on this thread if nobody else is
    /// writing one.
    fn on_park(&self);
}

impl ParkCommit {
    /// A hook for one engine, not yet opened.
    pub fn new() -> Self {
        ParkCommit::default()
    }

    /// Writes the engine's open group commit on this thread if nobody else
    /// is writing one. Call it from the runtime's `on_thread_park`.
    pub fn on_park(&self) {
        let target = self.0.lock().as_ref().and_then(Weak::upgrade);
        if let Some(target) = target {
            target.on_park();
        }
    }

    /// Points the hook at the engine being opened (replacing any other).
    pub(crate) fn attach(&self, target: Weak<dyn OnPark>) {
        *self.0.lock() = Some(target);
    }
}

impl std::fmt::Debug for ParkCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.0.lock().as_ref().is_some_and(|w| w.strong_count() > 0);
        f.debug_struct("ParkCommit")
            .field("engine_open", &open)
            .finish()
    }
}

/// Retention: how long ids are remembered, and of how many clients.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// An applied add is answered for this long (ms), then expired.
    pub window_ms: u64,
    /// A client's forgotten mark is kept this long (ms) after its last add
    /// here; after that its old ids read as new.
    pub forget_ms: u64,
    /// The same, for a client that made one add only (a one-off id).
    pub one_add_forget_ms: u64,
    /// The most clients remembered: an add of a client not known past it
    /// is refused, not applied (`ids::record::Check::Full`).
    pub clients_max: usize,
}

impl Default for Retention {
    /// Ten minutes to answer a retry; a client's mark kept for a day, a
    /// one-add client's for an hour; a million clients.
    fn default() -> Self {
        Retention {
            window_ms: 10 * 60 * 1000,
            forget_ms: 24 * 60 * 60 * 1000,
            one_add_forget_ms: 60 * 60 * 1000,
            clients_max: 1_000_000,
        }
    }
}

impl Retention {
    /// Whether a client not known may take a place when `clients` are.
    pub fn admits_new_client(&self, clients: usize) -> bool {
        clients < self.clients_max
    }
}
