//! The simulation's world: a wall clock that moves with the paused
//! runtime's clock from a fixed date, random bytes from the run's seed,
//! and the simulated disk ([`SimDisk`]); state machines' broken
//! invariants are kept as the run's violations. One run at a time per
//! thread; each thread running runs keeps its own.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use tally_world::fs::Disk;
use tally_world::{Instant, World};

use crate::disk::SimDisk;

/// The wall clock's reading when a run starts: 2026-01-01T00:00:00Z.
const EPOCH_SECS: u64 = 1_767_225_600;

/// The independent streams of choices a run draws from its seed.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    /// The nodes' random bytes.
    World,
    /// The network's delays and losses.
    Net,
    /// The faults.
    Nemesis,
    /// Client `n`'s operations.
    Client(u64),
    /// Which kinds of clients a run has (`Plan::swarm`).
    Swarm,
}

/// The seed of `stream` of the run of `seed` (SplitMix64's finalizer of
/// both, so that neighbouring seeds draw unrelated streams).
pub fn stream(seed: u64, stream: Stream) -> u64 {
    let n = match stream {
        Stream::World => 1,
        Stream::Net => 2,
        Stream::Nemesis => 3,
        Stream::Swarm => 4,
        Stream::Client(c) => 1_000 + c,
    };
    let mut z = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Run {
    /// The runtime's clock when the run began.
    start: Instant,
    rng: SmallRng,
    /// Invariants found broken, not reported yet.
    broken: Vec<String>,
}

thread_local! {
    static RUN: RefCell<Option<Run>> = const { RefCell::new(None) };
}

/// The world every simulated node reads.
pub struct SimWorld;

impl SimWorld {
    /// Installs the simulated world in this process (once: later calls
    /// find it there); refused if anything read the real one first.
    pub fn install() -> anyhow::Result<()> {
        static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        match INSTALLED.get_or_init(|| tally_world::install(Box::new(SimWorld)).is_ok()) {
            true => Ok(()),
            false => anyhow::bail!("the process read the real clock before the simulation began"),
        }
    }

    /// Starts a run on this thread, inside its (paused) runtime: the wall
    /// clock reads the fixed date now, and random bytes come from `seed`.
    pub fn begin(seed: u64) {
        SimDisk::begin();
        RUN.with(|r| {
            *r.borrow_mut() = Some(Run {
                start: Instant::now(),
                rng: SmallRng::seed_from_u64(stream(seed, Stream::World)),
                broken: Vec::new(),
            })
        });
    }

    /// Ends this thread's run.
    pub fn end() {
        SimDisk::end();
        RUN.with(|r| *r.borrow_mut() = None);
    }

    /// The invariants found broken since the last call, each as a
    /// violation.
    pub fn broken_invariants() -> Vec<String> {
        RUN.with(|r| {
            r.borrow_mut()
                .as_mut()
                .map(|run| std::mem::take(&mut run.broken))
        })
        .unwrap_or_default()
    }

    /// Simulated time since the run began.
    pub fn elapsed() -> Duration {
        RUN.with(|r| r.borrow().as_ref().map(|run| run.start.elapsed()))
            .unwrap_or_default()
    }
}

impl World for SimWorld {
    fn wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_SECS) + SimWorld::elapsed()
    }

    fn fill_random(&self, buf: &mut [u8]) {
        RUN.with(|r| match r.borrow_mut().as_mut() {
            Some(run) => run.rng.fill_bytes(buf),
            // Outside a run (a node's drop after it): nothing depends on it.
            None => buf.fill(0x5a),
        })
    }

    fn inline_blocking(&self) -> bool {
        true
    }

    fn disk(&self) -> Option<&dyn Disk> {
        Some(&SimDisk)
    }

    fn checks_invariants(&self) -> bool {
        true
    }

    fn broken_invariant(&self, what: String) {
        RUN.with(|r| match r.borrow_mut().as_mut() {
            Some(run) => run.broken.push(format!("invariant broken: {what}")),
            None => panic!("invariant broken outside a run: {what}"),
        })
    }
}
