//! A cell's epoch: the generation its shards count from, what it starts
//! at, and when it expires. The type and its merge rule are shared data
//! (`tally_model::epoch`, where the module doc draws them); the engine adds
//! the wall clock its deadlines are read against.

pub use tally_model::epoch::{Epoch, Expiry, Order, Stamp};

/// The wall clock, ms since the Unix epoch (0 if it is set before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
