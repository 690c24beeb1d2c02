//! The bounds a cell keeps within, and the refusals that name them: a
//! leaf, importing nothing, so that the error type and every module that
//! checks a bound can share them (why each bound exists, and which write
//! checks it, is in `cell::checked`).

/// Most shards a cell may hold: one per node incarnation that ever wrote it.
pub const SHARDS_MAX: usize = 4096;

/// Largest clock or epoch a cell takes: `2^32` short of `u64::MAX`, so a
/// version can never be moved past the end of its range and wrap.
pub const CLOCK_MAX: u64 = u64::MAX - (1 << 32);

/// Most bytes a list takes encoded (elements and their lengths).
pub use tally_model::list::LIST_BYTES_MAX;

/// A limit a write would take a cell past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The cell would hold `count` shards, more than [`SHARDS_MAX`].
    Shards {
        /// The shard count it would have.
        count: usize,
    },
    /// An add to a list key, which holds no counter.
    WrongType,
    /// A counter whose deadline passed, in this epoch, whose restart the
    /// caller has not confirmed (`add::OnExpired::Confirmed`).
    Expired(tally_model::Epoch),
    /// A clock or an epoch past [`CLOCK_MAX`].
    Clock {
        /// `"clock"`, `"epoch"` or `"stamp"`.
        what: &'static str,
        /// The clock or epoch.
        value: u64,
    },
}

/// A list would be longer than [`LIST_BYTES_MAX`] encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a list of {bytes} bytes is over the limit of {LIST_BYTES_MAX}")]
pub struct ListTooLong {
    /// The bytes it would take.
    pub bytes: usize,
}
