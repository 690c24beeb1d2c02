//! Helpers shared by the engine's integration tests.
#![allow(dead_code, missing_docs)]

use tally_engine::change::Change;
use tally_engine::{Engine, Epoch, Key, Options, ParkCommit, Result, now_ms};

/// A small deterministic RNG (xorshift64*), so failures replay from a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn key(i: u64) -> Key {
    Key::new(
        format!("p{}", i / 4).as_bytes(),
        format!("c{}", i % 4).as_bytes(),
    )
    .unwrap()
}

pub fn small_options() -> Options {
    Options {
        memtable_bytes_max: 8 << 10,
        block_bytes: 256,
        compaction_tables_min: 3,
        ..Options::default()
    }
}

pub fn open(dir: &std::path::Path, opts: &Options) -> Engine {
    Engine::open(dir, opts.clone()).unwrap()
}

/// A current-thread runtime that writes the engine's group commits as it parks.
pub fn hooked_runtime() -> (tokio::runtime::Runtime, ParkCommit) {
    let hook = ParkCommit::new();
    let on_park = hook.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(move || on_park.on_park())
        .build()
        .unwrap();
    (rt, hook)
}

/// The SSTable a single flush wrote into `dir`.
pub fn only_table(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .expect("flush wrote a table")
}

/// Resets the counter `k` (a `DEL`): answers its new epoch.
pub async fn reset(e: &Engine, k: &Key) -> Result<Epoch> {
    let (_, state) = e.change(k, Change::Delete, now_ms(), false).await?;
    Ok(state.epoch())
}
