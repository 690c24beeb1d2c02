//! Group commits written on a runtime's thread as it parks
//! ([`ParkCommit`](crate::ParkCommit)).
//!
//! Whoever writes a group commit holds the `Committer` (the log); the
//! runtime only tries to take it, so it never waits behind the syncer,
//! which looks at the outbox again when it is done. The syncer is the
//! fallback:
//! - work left for longer than [`WATCH`] is the syncer's: the runtime,
//!   still busy, wakes it when it adds more, and while group commits are
//!   being written the syncer also looks by itself every [`WATCH_POLL`];
//! - work from any other thread (the sealer's, or an add from a thread
//!   without the hook) wakes it as before;
//! - after an fsync slower than `Options::park_sync_max_us` (1 ms by default; the runtime's tasks wait while it writes) the runtime leaves every
//!   group commit to the syncer, as its tasks would wait behind a slow
//!   disk, until an fsync is fast again.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::options::{OnPark, SyncMode};

use super::GroupCommit;

/// How long the syncer leaves work to a runtime that writes group commits
/// as it parks, and how long it sleeps at a time while it watches for such
/// work: the most such work waits when that runtime stays busy.
pub(super) const WATCH: Duration = Duration::from_micros(500);
/// How often the syncer looks for work left longer than [`WATCH`] by a
/// runtime that does not park, if nothing wakes it sooner: a busy runtime
/// that adds work wakes it itself once older work is overdue, so this only
/// bounds the wait of work left behind by a runtime that then runs no add.
pub(super) const WATCH_POLL: Duration = Duration::from_millis(5);
/// Polls in a row that saw no group commit, after which the syncer sleeps
/// until it is woken.
pub(super) const WATCHES_MAX: u32 = 20;

thread_local! {
    /// The group commit (its address) this thread writes when its runtime
    /// parks; 0 for none.
    static COMMITS_ON_PARK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl GroupCommit {
    /// Whether this thread writes this group commit's work when it parks.
    pub(super) fn commits_on_park(&self) -> bool {
        COMMITS_ON_PARK.with(|c| c.get()) == std::ptr::from_ref(self) as usize
    }
}

impl OnPark for GroupCommit {
    /// A runtime thread's part in group commit: called as the runtime is
    /// about to park, it writes the open group commit itself when no other
    /// thread is writing, and answers the waiters (its own tasks) without
    /// waking anyone. Work its own tasks add then wakes no thread either
    /// (see `Outbox::wake_for`). For a replica's apply this saves two
    /// hand-offs between threads: to the syncer, and back to the runtime.
    fn on_park(&self) {
        if self.opts.sync != SyncMode::Batch {
            return;
        }
        COMMITS_ON_PARK.with(|c| c.set(std::ptr::from_ref(self) as usize));
        if !self.fast_syncs.load(Relaxed) {
            return;
        }
        if self.writes_stalled() {
            // Test seam: the syncer waits for the disk, this thread does not.
            let mut out = self.outbox.lock();
            out.act_now |= out.has_work();
            drop(out);
            self.outbox_cv.notify_one();
            return;
        }
        let Some(mut c) = self.committer.try_lock() else {
            // The syncer is writing: it takes what is left here next, at once.
            let mut out = self.outbox.lock();
            out.act_now |= out.has_work();
            return;
        };
        let out = self.outbox.lock();
        if c.closed || !out.has_work() {
            return;
        }
        self.write_group(&mut c, out, true, true);
    }
}
