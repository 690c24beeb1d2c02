//! A cell's epoch: the generation its shards count from, what it starts
//! at, and when it expires. The type and its merge rule are shared data
//! (`tally_model::epoch`, where the module doc draws them); the engine adds
//! the wall clock its deadlines are read against.

pub use tally_model::epoch::{Epoch, Expiry, Order, Stamp};

/// The wall clock, ms since the Unix epoch (0 if it is set before 1970);
/// with the `fault-injection` feature, skewed as [`skew_clock`] set it.
pub fn now_ms() -> u64 {
    let now = tally_world::wall_ms();
    #[cfg(feature = "fault-injection")]
    let now = now.saturating_add_signed(SKEW_MS.load(std::sync::atomic::Ordering::Relaxed));
    now
}

/// How far this process's clock reads off (`skew_clock`).
#[cfg(feature = "fault-injection")]
static SKEW_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// FAULT INJECTION: from now on [`now_ms`] reads `ms` off the wall clock
/// (ahead if positive): a node whose clock is skewed. Only with the
/// `fault-injection` feature.
#[cfg(feature = "fault-injection")]
pub fn skew_clock(ms: i64) {
    SKEW_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}
