//! `engine-bench`: the storage engine's throughput, replay speed and size on disk.
//!
//! Every figure comes from one process on this machine, so compare ratios
//! within one run. Each load loop runs for `--seconds` and stops by itself.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and benchmarks measure real time, and draw real random bytes"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use tally_engine::{
    AddOutcome, Cell, Engine, Key, OnceAdd, OpId, Options, Retention, Shard, Staged, SyncMode,
    Wait, commitlog,
};

/// The allocator `tallyd` runs with, so the figures are the server's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Benchmarks of Tally's storage engine")]
struct Args {
    /// What to measure.
    #[arg(value_enum, default_values_t = [Bench::All])]
    bench: Vec<Bench>,
    /// Directory for scratch data (a temporary directory under it is used and removed).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Seconds per throughput run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Distinct keys for uniform loads and the size test.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Only these writer counts for `adds` (default 1, 16, 64).
    #[arg(long, value_delimiter = ',')]
    writers: Vec<u64>,
    /// Only this sync mode for `adds`.
    #[arg(long)]
    sync: Option<SyncArg>,
    /// Group-commit window for `batch` adds (default: the engine's).
    #[arg(long)]
    group_commit_window_us: Option<u64>,
    /// Commit log to replay, in MiB.
    #[arg(long, default_value_t = 1024)]
    log_mib: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SyncArg {
    Batch,
    Periodic,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Bench {
    All,
    Adds,
    Hot,
    /// The leader's read-modify-write alone: batches of 400 adds to
    /// random cached keys through `Engine::add` on one thread, as a
    /// node's batch task makes them (periodic sync: the CPU, not the disk).
    LeaderBatch,
    Gets,
    Replay,
    Size,
    /// Bytes per counter with operation ids in the window, and after it.
    IdsSize,
    /// Adds with operation ids against plain adds, alternated: the
    /// engine's CPU for an id (periodic sync, so the disk does not set the pace).
    Ids,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let scratch = tempfile::tempdir_in(&args.dir).context("create scratch directory")?;
    let want = |b: Bench| args.bench.contains(&b) || args.bench.contains(&Bench::All);
    println!(
        "engine-bench: {} s per run, {} keys",
        args.seconds, args.keys
    );
    let mut uniform64 = None;
    if want(Bench::Adds) {
        let writer_counts = if args.writers.is_empty() {
            vec![1, 16, 64]
        } else {
            args.writers.clone()
        };
        let modes = [
            (SyncArg::Batch, "batch", SyncMode::Batch),
            (
                SyncArg::Periodic,
                "periodic 10ms",
                SyncMode::Periodic { interval_ms: 10 },
            ),
        ];
        for (_, name, sync) in modes
            .into_iter()
            .filter(|(a, ..)| args.sync.is_none_or(|s| s == *a))
        {
            for &writers in &writer_counts {
                let (rate, detail) =
                    rt.block_on(adds(scratch.path(), &args, sync, writers, args.keys))?;
                println!("adds  {name:<14} {writers:>3} writers  {rate:>10.0} adds/s   [{detail}]");
                if sync == SyncMode::Batch && writers == 64 {
                    uniform64 = Some(rate);
                }
            }
        }
    }
    if want(Bench::Hot) {
        let (rate, detail) = rt.block_on(adds(scratch.path(), &args, SyncMode::Batch, 64, 1))?;
        print!("adds  batch, ONE hot key  64 writers  {rate:>10.0} adds/s   [{detail}]");
        match uniform64 {
            Some(u) => println!("  hot/uniform = {:.2}", rate / u),
            None => println!(),
        }
    }
    if want(Bench::LeaderBatch) {
        for round in 1..=3 {
            let rate = leader_batch(scratch.path(), &args)?;
            println!(
                "leader-batch round {round}: {rate:>10.0} adds/s over {} keys",
                args.keys
            );
        }
    }
    if want(Bench::Gets) {
        rt.block_on(gets(scratch.path(), args.keys, args.seconds))?;
    }
    if want(Bench::Replay) {
        replay(scratch.path(), args.keys, args.log_mib)?;
    }
    if want(Bench::Size) {
        rt.block_on(size(scratch.path(), args.keys))?;
    }
    if want(Bench::IdsSize) {
        rt.block_on(ids_size(scratch.path(), args.keys))?;
    }
    if want(Bench::Ids) {
        let mut ratios = Vec::new();
        for round in 1..=3 {
            let plain = rt.block_on(batch_adds(scratch.path(), &args, false))?;
            let ids = rt.block_on(batch_adds(scratch.path(), &args, true))?;
            println!(
                "ids   round {round}: plain {plain:>9.0} adds/s, with ids {ids:>9.0} adds/s, ratio {:.2}",
                ids / plain
            );
            ratios.push(ids / plain);
        }
        ratios.sort_by(f64::total_cmp);
        println!("ids   median ratio {:.2}", ratios[1]);
    }
    Ok(())
}

/// Adds/s of 16 writers over uniform keys, each call one add through the
/// batch API a node uses (`Engine::add`, or `add_once`
/// with a fresh id), periodic sync.
async fn batch_adds(root: &Path, args: &Args, with_ids: bool) -> Result<f64> {
    let dir = fresh_dir(root, "batch-adds")?;
    let opts = Options {
        sync: SyncMode::Periodic { interval_ms: 10 },
        ..Options::default()
    };
    let engine = Arc::new(Engine::open(&dir, opts)?);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..16u64)
        .map(|w| {
            let (engine, stop, keys) = (engine.clone(), stop.clone(), args.keys);
            tokio::spawn(async move {
                let mut rng = w * 0x9e37_79b9 + 1;
                let client = format!("writer-{w:08}-{:06}", std::process::id());
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = key(next(&mut rng) % keys);
                    let durable = if with_ids {
                        let add = OnceAdd {
                            delta: 1,
                            id: OpId::new(client.as_bytes(), done + 1)?,
                            reapply_stale: false,
                        };
                        engine.add_once([(&k, std::slice::from_ref(&add))])?.1
                    } else {
                        engine.add([(&k, 1)])?.1
                    };
                    durable.wait().await?;
                    done += 1;
                }
                anyhow::Ok(done)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    drop(engine);
    std::fs::remove_dir_all(&dir).ok();
    Ok(rate)
}

/// Adds/s of `Engine::add` alone on one thread, in batches of 400
/// adds to uniform keys, every key cached first. Only the calls are
/// timed: each batch's keys are made before, as a node makes them from
/// its requests.
fn leader_batch(root: &Path, args: &Args) -> Result<f64> {
    const BATCH: u64 = 400;
    let dir = fresh_dir(root, "leader-batch")?;
    let opts = Options {
        sync: SyncMode::Periodic { interval_ms: 10 },
        ..Options::default()
    };
    let engine = Engine::open(&dir, opts)?;
    for first in (0..args.keys).step_by(BATCH as usize) {
        let keys: Vec<Key> = (first..args.keys.min(first + BATCH)).map(key).collect();
        engine.add(keys.iter().map(|k| (k, 1)))?;
    }
    let mut rng = 0x9e37_79b9_u64;
    let mut done = 0u64;
    let mut spent = Duration::ZERO;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(args.seconds) {
        let batch: Vec<Key> = (0..BATCH)
            .map(|_| key(next(&mut rng) % args.keys))
            .collect();
        let call = Instant::now();
        engine.add(batch.iter().map(|k| (k, 1)))?;
        spent += call.elapsed();
        done += BATCH;
    }
    drop(engine);
    std::fs::remove_dir_all(&dir).ok();
    Ok(done as f64 / spent.as_secs_f64())
}

/// One add through [`Engine::add`], answered once durable: a sealed add
/// waits for the batch's `Durable`, one queued to the sealer for the
/// sealer, then for its own.
async fn add_one(engine: &Engine, k: &Key, delta: i64) -> Result<AddOutcome> {
    let (staged, durable) = engine.add([(k, delta)])?;
    let (outcome, durable) = match staged.into_iter().next() {
        Some(Staged::Sealed(outcome)) => (outcome, durable),
        Some(Staged::Queued(queued)) => queued.wait().await?,
        Some(Staged::Refused(e)) => return Err(e.into()),
        None => anyhow::bail!("one add answered nothing"),
    };
    durable.wait().await?;
    Ok(outcome)
}

/// A 16-byte key for counter `i`.
fn key(i: u64) -> Key {
    Key::new(format!("counter:{i:08}").as_bytes(), b"").expect("16-byte key")
}

/// xorshift64*: cheap and deterministic per writer.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn fresh_dir(root: &Path, name: &str) -> Result<PathBuf> {
    let dir = root.join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clear {}", dir.display()))?;
    }
    Ok(dir)
}

/// Durable adds/s with `writers` concurrent writers over `keys` uniform
/// keys, each waiting for one add at a time ([`add_one`]).
async fn adds(
    root: &Path,
    args: &Args,
    sync: SyncMode,
    writers: u64,
    keys: u64,
) -> Result<(f64, String)> {
    let seconds = args.seconds;
    let dir = fresh_dir(root, "adds")?;
    let defaults = Options::default();
    let engine = Arc::new(Engine::open(
        &dir,
        Options {
            sync,
            group_commit_window_us: args
                .group_commit_window_us
                .unwrap_or(defaults.group_commit_window_us),
            ..defaults
        },
    )?);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (engine, stop) = (engine.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = w * 0x9e37_79b9 + 1;
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    add_one(&engine, &key(next(&mut rng) % keys), 1).await?;
                    done += 1;
                }
                anyhow::Ok(done)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    let stats = engine.stats();
    let detail = if sync == SyncMode::Batch {
        format!(
            "{:.1} adds/fsync, {:.2} adds/record",
            stats.adds as f64 / stats.log_syncs.max(1) as f64,
            stats.adds as f64 / stats.add_records.max(1) as f64
        )
    } else {
        format!(
            "{:.2} adds/record",
            stats.adds as f64 / stats.add_records.max(1) as f64
        )
    };
    drop(engine);
    std::fs::remove_dir_all(&dir).ok();
    Ok((rate, detail))
}

/// Gets/s from the counter cache, and from SSTables after a reopen.
async fn gets(root: &Path, keys: u64, seconds: u64) -> Result<()> {
    let dir = fresh_dir(root, "gets")?;
    let opts = Options {
        sync: SyncMode::Periodic { interval_ms: 10 },
        ..Options::default()
    };
    let engine = Arc::new(Engine::open(&dir, opts.clone())?);
    fill(&engine, keys, 1).await?;
    let rate = get_loop(&engine, keys, seconds)?;
    println!("gets  counter cache (1 thread per core)   {rate:>10.0} gets/s");
    engine.flush()?;
    drop(Arc::into_inner(engine).context("engine still shared")?);
    let engine = Engine::open(&dir, opts)?;
    let rate = get_loop(&engine, keys, seconds)?;
    println!(
        "gets  SSTables, cold cache ({} tables)     {rate:>10.0} gets/s",
        engine.stats().tables
    );
    drop(engine);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

fn get_loop(engine: &Engine, keys: u64, seconds: u64) -> Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                s.spawn(move || {
                    let mut rng = t + 77;
                    let mut done = 0u64;
                    while Instant::now() < deadline {
                        for _ in 0..256 {
                            engine.get(&key(next(&mut rng) % keys))?;
                        }
                        done += 256;
                    }
                    anyhow::Ok(done)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("get thread panicked"))
            .sum::<Result<u64>>()
    })?;
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Writes `keys` counters with `shards` shards each (own add + foreign applies).
async fn fill(engine: &Arc<Engine>, keys: u64, shards: u64) -> Result<()> {
    let tasks: Vec<_> = (0..64u64)
        .map(|t| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut rng = t + 5;
                for i in (t..keys).step_by(64) {
                    let k = key(i);
                    add_one(&engine, &k, (next(&mut rng) % 100_000) as i64).await?;
                    let foreign = (1..shards).map(|s| Shard {
                        counter_id: 0x5eed_0000 + s,
                        clock: 1 + next(&mut rng) % 1000,
                        value: (next(&mut rng) % 100_000) as i64,
                    });
                    if shards > 1 {
                        let cell = Cell::from_parts(0, foreign);
                        for applied in engine.apply([(&k, &cell, None)], Wait::Durable).await? {
                            applied?;
                        }
                    }
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Time to open a node with `log_mib` MiB of commit log over `keys` keys.
fn replay(root: &Path, keys: u64, log_mib: u64) -> Result<()> {
    let dir = fresh_dir(root, "replay")?;
    let opts = Options {
        memtable_bytes_max: 16 << 30,
        ..Options::default()
    };
    let counter_id = {
        let engine = Engine::open(&dir, opts.clone())?;
        engine.counter_id()
    };
    // Segments written straight in the documented format: much faster than
    // 25 million fsync'd adds, and byte-for-byte what the engine writes.
    let segment_bytes: u64 = 64 << 20;
    let mut written = 0u64;
    let mut clock = 0u64;
    let mut id = 100;
    let mut i = 0u64;
    while written < log_mib << 20 {
        let mut buf = Vec::with_capacity(segment_bytes as usize + 4096);
        buf.extend_from_slice(&commitlog::header());
        while (buf.len() as u64) < segment_bytes {
            if i.is_multiple_of(keys) {
                clock += 1;
            }
            let shard = Shard {
                counter_id,
                clock,
                value: clock as i64 * 3,
            };
            commitlog::encode_record(&mut buf, &key(i % keys), &Cell::from_parts(0, [shard]));
            i += 1;
        }
        let path = commitlog::segment_path(&dir, id);
        // fsync'd like the engine's own segments, so the open below measures
        // replay, not writeback of the benchmark's dirty pages.
        std::fs::File::create(&path)
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, &buf)?;
                f.sync_all()
            })
            .with_context(|| format!("write {}", path.display()))?;
        written += buf.len() as u64;
        id += 1;
    }
    let started = Instant::now();
    let engine = Engine::open(&dir, opts)?;
    let secs = started.elapsed().as_secs_f64();
    let stats = engine.replay_stats().clone();
    println!(
        "open  {} MiB commit log, {} records     {secs:>9.2} s  ({:.0} MiB/s)",
        stats.bytes >> 20,
        stats.records,
        stats.bytes as f64 / (1 << 20) as f64 / secs
    );
    drop(engine);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// Bytes per counter on disk, tables and ids files, after compaction:
/// `keys` counters of one add each, with an operation id (a 16-byte
/// client id, as the thin client's) and without; the ids while in their
/// window and once it has passed.
async fn ids_size(root: &Path, keys: u64) -> Result<()> {
    // Long enough for the adds below to be in the window when measured.
    let window_ms = 20_000;
    let dir = fresh_dir(root, "ids-size")?;
    let opts = Options {
        sync: SyncMode::Periodic { interval_ms: 10 },
        ids_retention: Retention {
            window_ms,
            forget_ms: window_ms,
            one_add_forget_ms: window_ms,
            clients_max: usize::MAX,
        },
        ..Options::default()
    };
    let engine = Arc::new(Engine::open(&dir, opts)?);
    let client = [7u8; 16];
    let started = Instant::now();
    let tasks: Vec<_> = (0..64u64)
        .map(|t| {
            let engine = engine.clone();
            tokio::spawn(async move {
                for i in (t..keys).step_by(64) {
                    let add = OnceAdd {
                        delta: 1 + (i % 100) as i64,
                        id: OpId::new(&client, i + 1)?,
                        reapply_stale: false,
                    };
                    let k = key(i);
                    let (_, durable) = engine.add_once([(&k, std::slice::from_ref(&add))])?;
                    durable.wait().await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let filled = started.elapsed();
    anyhow::ensure!(
        filled < Duration::from_millis(window_ms / 2),
        "the adds took {filled:?}, too close to the {window_ms} ms window: use fewer --keys"
    );
    let bytes = |e: &Engine| {
        let s = e.stats();
        (s.table_bytes, s.ids_file_bytes)
    };
    engine.flush()?;
    engine.compact()?;
    let (tables, ids) = bytes(&engine);
    let per = |b: u64| b as f64 / keys as f64;
    println!(
        "disk  {keys} counters, one add with an id each, in the window: tables {:.1} + ids {:.1} = {:.1} bytes/counter",
        per(tables),
        per(ids),
        per(tables + ids)
    );
    tokio::time::sleep(Duration::from_millis(window_ms + 500)).await;
    engine.compact()?;
    let (tables, ids) = bytes(&engine);
    println!(
        "disk  the same once the window has passed:                tables {:.1} + ids {:.1} = {:.1} bytes/counter",
        per(tables),
        per(ids),
        per(tables + ids)
    );
    drop(engine);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// Bytes per counter on disk after compaction: `keys` counters, 16-byte keys, 3 shards.
async fn size(root: &Path, keys: u64) -> Result<()> {
    let dir = fresh_dir(root, "size")?;
    let opts = Options {
        sync: SyncMode::Periodic { interval_ms: 10 },
        ..Options::default()
    };
    let engine = Arc::new(Engine::open(&dir, opts)?);
    fill(&engine, keys, 3).await?;
    engine.flush()?;
    engine.compact()?;
    let stats = engine.stats();
    println!(
        "disk  {keys} counters x 3 shards, 16 B keys: {} bytes in {} table(s) = {:.1} bytes/counter",
        stats.table_bytes,
        stats.tables,
        stats.table_bytes as f64 / keys as f64
    );
    drop(engine);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
