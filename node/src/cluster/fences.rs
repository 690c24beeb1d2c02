//! The write role's fences (`write::once`, `write::unique`), which a ring
//! switching over closes (`topology::change`): once it is taken, every add
//! with an id that passed its check is in the ledger, and every admission
//! whose applier it moves has ended. A leaf beside `ctx`, so that `Ctx`
//! holds it without importing either role.

/// The two fences of one node.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    /// Held for reading from the check that an add with an id may be
    /// applied here through its read-modify-write; for writing when a
    /// ring switching over is taken.
    ids: parking_lot::RwLock<()>,
    /// Held for reading by an admission of unique members through its
    /// replication; for writing once a ring switching over is taken.
    admissions: tokio::sync::RwLock<()>,
}

impl Fences {
    /// Held by an add with an id from its check through its
    /// read-modify-write (`write::once::lead`).
    pub(crate) fn pass_ids(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.ids.read()
    }

    /// Held while a ring switching over is stored: every add with an id
    /// that passed the fence before is in the ledger once it is taken.
    pub(crate) fn close_ids(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.ids.write()
    }

    /// Held by an admission of unique members through its replication
    /// (`write::unique::lead`).
    pub(crate) async fn pass_admissions(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.admissions.read().await
    }

    /// Waits for every admission that passed the fence before.
    pub(crate) async fn wait_admissions(&self) {
        drop(self.admissions.write().await);
    }
}
