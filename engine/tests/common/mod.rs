//! Helpers shared by the engine's integration tests.
#![allow(dead_code, missing_docs)]

use tally_engine::{Engine, Key, Options};

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
