//! Helpers shared by the engine's integration tests.
#![allow(dead_code, missing_docs)]

use tally_engine::change::Change;
use tally_engine::{
    AddOutcome, Cell, Durable, Engine, Epoch, Key, OnceAdd, OpId, Options, ParkCommit, Result,
    Shard, Staged, TailIds, Wait, now_ms,
};

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

/// A replica's cell: one foreign shard (counter 7) at `clock`, value 1.
pub fn foreign(clock: u64) -> Cell {
    Cell::from_parts(
        0,
        [Shard {
            counter_id: 7,
            clock,
            value: 1,
        }],
    )
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

/// One add through `Engine::add`, answered once durable here: a sealed
/// add waits for the batch's `Durable`, a queued one for the sealer, then
/// for its own.
pub async fn add_one(e: &Engine, k: &Key, delta: i64) -> Result<AddOutcome> {
    let (staged, durable) = e.add([(k, delta)])?;
    let (outcome, durable) = match staged.into_iter().next() {
        Some(Staged::Sealed(outcome)) => (outcome, durable),
        Some(Staged::Queued(queued)) => queued.wait().await?,
        Some(Staged::Refused(e)) => return Err(e),
        None => panic!("one add answered nothing"),
    };
    durable.wait().await?;
    Ok(outcome)
}

/// Seals an add with an operation id (`n` makes it fresh) to a key of its
/// own, and answers its `Durable` unawaited: until its record is durable,
/// every add goes to the sealer (`Staged::Queued`), which combines those
/// to one cell.
pub fn unsynced_ids(e: &Engine, n: u64) -> Durable {
    let add = OnceAdd {
        delta: 1,
        id: OpId::new(b"unsynced", n).unwrap(),
        reapply_stale: false,
    };
    let k = Key::new(b"unsynced-ids", b"").unwrap();
    e.add_once([(&k, std::slice::from_ref(&add))]).unwrap().1
}

/// One cell through `Engine::apply`, waited for until durable: its answer.
pub async fn apply_one(e: &Engine, k: &Key, cell: &Cell) -> Result<Epoch> {
    let mut answers = e.apply([(k, cell, None)], Wait::Durable).await?;
    answers.pop().expect("one answer per cell")
}

/// Cells through `Engine::apply`, waited for until durable.
pub async fn apply_cells(e: &Engine, items: &[(Key, Cell)]) -> Result<Vec<Result<Epoch>>> {
    e.apply(items.iter().map(|(k, c)| (k, c, None)), Wait::Durable)
        .await
}

/// A replica's cells, some with tails, through `Engine::apply`, waited for
/// until durable.
pub async fn apply_tails(
    e: &Engine,
    items: &[(Key, Cell, Option<TailIds>)],
) -> Result<Vec<Result<Epoch>>> {
    e.apply(
        items.iter().map(|(k, c, t)| (k, c, t.as_ref())),
        Wait::Durable,
    )
    .await
}
