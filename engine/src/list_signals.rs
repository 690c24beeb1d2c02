//! Signals of changed lists, for the clients that wait on one (a blocking
//! pop): every list cell this node changes, as a list's leader or as its
//! replica, wakes the waiters of its key's bucket. Buckets, not keys: a
//! fixed [`BUCKETS`] of [`Notify`]s, so that waiting costs no map of keys
//! and nothing to clean up; a waiter woken by another key of its bucket
//! looks once more and waits again.

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::key::Key;

/// Buckets of waiters.
const BUCKETS: usize = 256;

/// The waiters on lists, by bucket of their keys.
pub(crate) struct ListSignals(Box<[Notify]>);

impl Default for ListSignals {
    fn default() -> ListSignals {
        ListSignals((0..BUCKETS).map(|_| Notify::new()).collect())
    }
}

impl ListSignals {
    fn bucket(&self, key: &Key) -> &Notify {
        &self.0[(key.hash_u64() as usize) % BUCKETS]
    }

    /// Wakes every waiter of `key`'s bucket.
    pub(crate) fn changed(&self, key: &Key) {
        self.bucket(key).notify_waiters();
    }

    /// A wake-up of `key`'s bucket: enable it (`Notified::enable`) before
    /// looking at the list, then await it.
    pub(crate) fn wait(&self, key: &Key) -> Notified<'_> {
        self.bucket(key).notified()
    }
}
