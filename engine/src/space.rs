//! Running out of disk space: which writes are refused meanwhile, and how
//! often it is logged.
//!
//! A full disk is not an fsync failure: a `write` that finds no room
//! changes nothing on disk worth keeping, so the engine keeps its state and
//! waits for room instead of poisoning itself. Two parts can hit it:
//!
//! - the commit log, when it cannot grow: the group commit that failed is
//!   answered with [`Error::NoSpace`] (its state is in memory already, and
//!   reaches the log with the next write that goes through: the outcome is
//!   unknown), its records are kept, and the syncer tries them again a few
//!   times a second. Meanwhile every new write is refused at once with
//!   [`Error::DiskFull`], before it changes anything;
//! - flushes, when a table cannot be written: the log still takes writes
//!   while memtables have room, and once as many are frozen as the write
//!   stall allows, new writes are refused with [`Error::DiskFull`] instead
//!   of waiting for a flush that cannot come. The background thread tries
//!   the flush again every second; a failed table leaves no file behind.
//!
//! Either way writes are taken again as soon as a write to the log, or a
//! flush, goes through. The errors are logged at most once a second
//! ([`RateLimit`]), with a count of the ones left out.

use std::sync::atomic::{AtomicBool, Ordering};
use tally_world::Instant;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::rate_limit::RateLimit;

/// Which parts of the engine have found the disk full.
#[derive(Default)]
pub(crate) struct Space {
    /// The commit log could not grow; records wait in memory for room.
    log_full: AtomicBool,
    /// The last flush found no room for its table.
    tables_full: AtomicBool,
    /// When out-of-space errors were last logged.
    log_limit: Mutex<RateLimit>,
}

impl Space {
    /// Refuses a new write while the log cannot grow, or while flushes find
    /// no room and `behind` (as many memtables frozen as the write stall
    /// allows): [`Error::DiskFull`], before anything changed.
    pub(crate) fn check(&self, behind: impl FnOnce() -> bool) -> Result<()> {
        if self.log_full.load(Ordering::Acquire) {
            return Err(Error::DiskFull("the commit log cannot grow".into()));
        }
        if self.tables_full.load(Ordering::Acquire) && behind() {
            return Err(Error::DiskFull(
                "memtables are full and cannot be flushed".into(),
            ));
        }
        Ok(())
    }

    /// The log found no room (`true`), or wrote again (`false`).
    pub(crate) fn set_log_full(&self, full: bool) {
        if self.log_full.swap(full, Ordering::AcqRel) && !full {
            tracing::info!("the commit log has room again: writes are taken");
        }
    }

    /// A flush found no room (`true`), or went through (`false`).
    pub(crate) fn set_tables_full(&self, full: bool) {
        if self.tables_full.swap(full, Ordering::AcqRel) && !full {
            tracing::info!("flushes have room again");
        }
    }

    /// Whether the log found no room: records wait in memory for it.
    pub(crate) fn log_full(&self) -> bool {
        self.log_full.load(Ordering::Acquire)
    }

    /// Whether the last flush found no room.
    pub(crate) fn tables_full(&self) -> bool {
        self.tables_full.load(Ordering::Acquire)
    }

    /// Logs `err` (`what` failed), at most once a second.
    pub(crate) fn report(&self, what: &str, err: &Error) {
        if let Some(suppressed) = self.log_limit.lock().allow(Instant::now()) {
            tracing::error!(error = %err, suppressed, "{what}: the disk is full; retrying");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_refused_while_the_log_is_full_or_flushes_are_behind() {
        let space = Space::default();
        assert!(space.check(|| true).is_ok());
        space.set_tables_full(true);
        assert!(space.check(|| false).is_ok(), "memtables still have room");
        assert!(matches!(space.check(|| true), Err(Error::DiskFull(_))));
        space.set_tables_full(false);
        space.set_log_full(true);
        assert!(matches!(space.check(|| false), Err(Error::DiskFull(_))));
        space.set_log_full(false);
        assert!(space.check(|| true).is_ok());
    }
}
