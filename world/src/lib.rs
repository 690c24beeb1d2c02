//! What a Tally node reads from outside itself: the clocks and random
//! bytes. Every read of them in the library crates goes through here
//! (clippy's `disallowed-methods` keeps it so), so that the simulator
//! (`tally-sim`) can run whole clusters in one process, on one seed, and
//! replay any run exactly.
//!
//! - **Monotonic time** is tokio's clock ([`Instant`]): the system's in a
//!   node, and in the simulator a paused runtime's, which jumps to the
//!   next timer whenever every task waits.
//! - **Wall time** ([`wall`], [`wall_ms`]) and **random bytes**
//!   ([`fill_random`], [`random_u64`]) come from the installed [`World`]:
//!   the system's ([`Real`]) unless the simulator installed its own,
//!   once, before any node starts.
//! - **Files** are changed through [`fs`]: straight through to the OS,
//!   or through the simulator's disk, which fails changes and forgets
//!   what was not fsync'd when a node crashes.
//! - **Invariants** of state machines are checked after every step
//!   ([`invariant`]) in debug builds and in simulations, which report a
//!   broken one with the run's violations.
//! - **Blocking work** ([`blocking`]) runs on tokio's blocking pool, or,
//!   in a simulation, on the runtime's one thread.
//!
//! Password salts and TLS keys are not read here: they come from `ring`'s
//! and rustls' own random sources, real in every build.

pub mod fs;

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

pub use tokio::time::Instant;

/// The wall clock and the random bytes a process's nodes read.
pub trait World: Send + Sync + 'static {
    /// The time of day.
    fn wall(&self) -> SystemTime;

    /// Fills `buf` with random bytes.
    fn fill_random(&self, buf: &mut [u8]);

    /// Whether blocking work runs on the runtime's thread, at once, rather
    /// than on tokio's blocking pool ([`blocking`]): in a simulation, where
    /// another thread's timing would decide the order of events.
    fn inline_blocking(&self) -> bool {
        false
    }

    /// The disk every file change passes through ([`fs`]), if not the OS
    /// alone: a simulated one.
    fn disk(&self) -> Option<&dyn fs::Disk> {
        None
    }

    /// Whether state machines check their invariants after every step
    /// ([`invariant`]): in debug builds, and always in a simulation.
    fn checks_invariants(&self) -> bool {
        cfg!(debug_assertions)
    }

    /// A state machine's invariant does not hold: `what` says which, and
    /// how. Panics, unless the world keeps it (a simulation reports it
    /// with the run's violations).
    fn broken_invariant(&self, what: String) {
        panic!("invariant broken: {what}");
    }
}

/// The system's clock and random bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Real;

impl World for Real {
    fn wall(&self) -> SystemTime {
        #[allow(clippy::disallowed_methods, reason = "the real clock")]
        SystemTime::now()
    }

    fn fill_random(&self, buf: &mut [u8]) {
        #[allow(clippy::disallowed_methods, reason = "the real random bytes")]
        if let Err(e) = getrandom::fill(buf) {
            // Without the OS's random bytes no id can be trusted to be
            // unique: nothing can go on.
            panic!("the OS gave no random bytes: {e}");
        }
    }
}

static WORLD: OnceLock<Box<dyn World>> = OnceLock::new();

/// Makes `world` the process's clock and random source; refused once
/// anything has read them (or another was installed).
pub fn install(world: Box<dyn World>) -> Result<(), Box<dyn World>> {
    WORLD.set(world)
}

fn world() -> &'static dyn World {
    &**WORLD.get_or_init(|| Box::new(Real))
}

/// The time of day.
pub fn wall() -> SystemTime {
    world().wall()
}

/// The time of day since the Unix epoch (zero before it).
pub fn since_epoch() -> Duration {
    wall()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// The time of day in milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    u64::try_from(since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// Fills `buf` with random bytes.
pub fn fill_random(buf: &mut [u8]) {
    world().fill_random(buf)
}

/// Whether blocking work runs on the runtime's thread at once (a
/// simulation): code that starts threads of its own runs their work
/// inline then.
pub fn runs_inline() -> bool {
    world().inline_blocking()
}

/// Runs `f`, which blocks (disk reads, big scans), on tokio's blocking
/// pool; or on this thread at once, where the world says so (a
/// simulation). Like `tokio::task::spawn_blocking`, whose error it answers
/// when `f` panicked on the pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    if runs_inline() {
        return Ok(f());
    }
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    tokio::task::spawn_blocking(f).await
}

/// Checks a state machine's invariants (`check` answers what does not
/// hold), where the world checks them: in debug builds and simulations.
pub fn invariant(check: impl FnOnce() -> Result<(), String>) {
    let world = world();
    if world.checks_invariants()
        && let Err(what) = check()
    {
        world.broken_invariant(what);
    }
}

/// A random `u64`.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    fill_random(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods, reason = "compared with the system's")]
    use super::*;

    #[test]
    fn the_real_world_reads_the_system() {
        let before = SystemTime::now();
        let read = wall();
        assert!(read >= before && read <= SystemTime::now());
        assert!(wall_ms() > 1_700_000_000_000);
        // 64 random bits twice alike: one chance in 2^64.
        assert_ne!(random_u64(), random_u64());
    }
}
