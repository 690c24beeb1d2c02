//! The topology role's own state (`topology`): what makes its changes run
//! one at a time. A leaf beside `ctx`, so that `Ctx` holds it without
//! importing the role, which imports `Ctx`; only `topology` takes these.

use crate::cluster::flush_queue::{Coalesced, Queue, Waiter};

/// The locks and queues of one node's topology changes, flushes and
/// cleanups; each taken by the function named on it.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Held by the topology change, fold or flush this node runs (one at a
    /// time).
    changing: tokio::sync::Mutex<()>,
    /// Held while a ring is stored and switched to (`change::adopt`).
    adopting: parking_lot::Mutex<()>,
    /// Held by the cleanup or collection this node runs (one at a time).
    cleaning: tokio::sync::Mutex<()>,
    /// A collection of flushed generations is queued and has not read the
    /// ring yet: the flushes stored meanwhile need no other
    /// (`topology::collect`).
    collect_queued: Coalesced,
    /// The flushes this node coordinates, one batch at a time
    /// (`flush_queue`, `topology::flush`).
    flushes: parking_lot::Mutex<Queue<Waiter>>,
}

impl Changes {
    /// The change (or fold) this node may begin now, if it runs none.
    pub(crate) fn try_change(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        self.changing.try_lock().ok()
    }

    /// Waits for any ring being stored and switched to, and holds the
    /// next one back until the guard drops.
    pub(crate) fn adopting(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.adopting.lock()
    }

    /// Waits for the cleanup or collection this node runs, and holds the
    /// next one back until the guard drops.
    pub(crate) async fn cleaning(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.cleaning.lock().await
    }

    /// Whether a collection of flushed generations is queued (see
    /// [`Coalesced`]).
    pub(crate) fn collect_queued(&self) -> &Coalesced {
        &self.collect_queued
    }

    /// The queue of flushes this node coordinates.
    pub(crate) fn flushes(&self) -> parking_lot::MutexGuard<'_, Queue<Waiter>> {
        self.flushes.lock()
    }
}
