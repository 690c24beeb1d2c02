//! The poison flag: once set, the engine refuses writes for good.
//!
//! Set when a commit log write or fsync fails (nothing acknowledged after
//! it could be trusted to be on disk) and when an engine thread panics.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Whether, and why, the engine is poisoned.
///
/// # Invariants
/// - `set` is true exactly when `why` holds a reason; neither is ever
///   cleared.
#[derive(Default)]
pub(crate) struct Poison {
    why: Mutex<Option<String>>,
    /// `why.is_some()`, readable without the lock on every write.
    set: AtomicBool,
}

impl Poison {
    /// Whether the engine is poisoned (one atomic load).
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// `Ok` unless the engine is poisoned.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_set() {
            return Err(self.error());
        }
        Ok(())
    }

    /// The error a poisoned engine answers.
    pub(crate) fn error(&self) -> Error {
        Error::Poisoned(self.why().unwrap_or_default())
    }

    /// Why the engine is poisoned, if it is.
    pub(crate) fn why(&self) -> Option<String> {
        self.why.lock().clone()
    }

    /// Poisons the engine for the reason `why` gives, unless it was
    /// poisoned already; answers whether it was not.
    pub(crate) fn set(&self, why: impl FnOnce() -> String) -> bool {
        let mut p = self.why.lock();
        let first = p.is_none();
        if first {
            *p = Some(why());
        }
        self.set.store(true, Ordering::Release);
        first
    }
}
