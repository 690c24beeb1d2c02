//! Group commits written by a runtime's thread as it parks
//! (`Options::park_commit`): every waiter is answered and every answered
//! write survives a reopen; work a busy runtime leaves is written by the
//! syncer; after a slow fsync the syncer writes every group commit until
//! an fsync is fast again; and with no hook the syncer writes everything.

#![allow(clippy::disallowed_methods, reason = "tests measure real time")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{add_one, apply_cells, foreign, hooked_runtime, key};
use tally_engine::{Engine, Options, ParkCommit, Staged};

/// Opens the engine for tasks on the current runtime, with `hook`.
fn open(dir: &std::path::Path, hook: Option<ParkCommit>) -> Arc<Engine> {
    open_with(dir, hook, None)
}

/// The park limit of the slow-fsync test, in microseconds.
const PARK_SYNC_MAX_US: u64 = 25_000;

fn open_with(
    dir: &std::path::Path,
    hook: Option<ParkCommit>,
    slow_sync: Option<Arc<AtomicU64>>,
) -> Arc<Engine> {
    let mut opts = Options {
        answer_on: Some(tokio::runtime::Handle::current()),
        park_commit: hook,
        ..Options::default()
    };
    if slow_sync.is_some() {
        // Slow and fast fsyncs as the test makes them, not as this disk
        // happens to be under load: a real fsync here can take over the
        // default 1 ms limit, but not over 25 ms.
        opts.slow_sync = slow_sync;
        opts.park_sync_max_us = PARK_SYNC_MAX_US;
    }
    Arc::new(Engine::open(dir, opts).unwrap())
}

/// Every kind of write from several tasks, each waiting for one write at a
/// time: batched and single leader adds, to many keys and to one, and
/// replica applies.
async fn write_everything(engine: &Arc<Engine>) {
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let e = engine.clone();
        tasks.spawn(async move {
            for i in (t..KEYS).step_by(TASKS as usize) {
                match i % 3 {
                    0 => {
                        let (staged, durable) = e.add([(&key(1 + i), 2)]).unwrap();
                        durable.wait().await.unwrap();
                        assert!(matches!(staged[0], Staged::Sealed(_)));
                    }
                    1 => {
                        add_one(&e, &key(1 + i), 2).await.unwrap();
                    }
                    _ => {
                        add_one(&e, &key(0), 1).await.unwrap();
                    }
                }
                apply_cells(&e, &[(key(10_000 + i % 7), foreign(i + 1))])
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
}

/// Writers, and keys they write.
const TASKS: u64 = 8;
const KEYS: u64 = 300;

fn check_values(engine: &Engine) {
    assert_eq!(
        engine.get(&key(0)).unwrap().value().unwrap(),
        KEYS as i64 / 3
    );
    for i in (0..KEYS).filter(|i| i % 3 != 2) {
        assert_eq!(
            engine.get(&key(1 + i)).unwrap().value().unwrap(),
            2,
            "key {}",
            1 + i
        );
    }
    assert_eq!(engine.get(&key(10_000)).unwrap().value().unwrap(), 1);
}

#[test]
fn a_parking_runtime_writes_group_commits_and_they_are_durable() {
    let _alone = ALONE.lock();
    let dir = tempfile::tempdir().unwrap();
    let (rt, hook) = hooked_runtime();
    let stats = rt.block_on(async {
        let engine = open(dir.path(), Some(hook));
        write_everything(&engine).await;
        check_values(&engine);
        let stats = engine.stats();
        engine.shutdown().unwrap();
        stats
    });
    assert!(
        stats.log_syncs_on_park > 0,
        "the runtime wrote none of {} group commits",
        stats.log_syncs
    );
    eprintln!(
        "{} of {} fsyncs written as the runtime parked",
        stats.log_syncs_on_park, stats.log_syncs
    );
    drop(rt);

    // Everything answered was on disk.
    let engine = Engine::open(dir.path(), Options::default()).unwrap();
    check_values(&engine);
}

#[test]
fn work_a_busy_runtime_leaves_is_written_by_the_syncer() {
    let _alone = ALONE.lock();
    let dir = tempfile::tempdir().unwrap();
    let (rt, hook) = hooked_runtime();
    rt.block_on(async {
        let engine = open(dir.path(), Some(hook));
        // Group commits just written: the syncer now watches.
        write_everything(&engine).await;
        let before = engine.stats();

        // Queue a write, then keep the runtime's thread busy: it cannot park.
        let (_, durable) = engine.add([(&key(50_000), 5)]).unwrap();
        let busy_until = std::time::Instant::now() + Duration::from_millis(200);
        let mut written = engine.stats();
        while written.log_syncs == before.log_syncs && std::time::Instant::now() < busy_until {
            std::thread::sleep(Duration::from_millis(1));
            written = engine.stats();
        }
        assert_eq!(
            written.log_syncs,
            before.log_syncs + 1,
            "the syncer did not write what the busy runtime left"
        );
        assert_eq!(written.log_syncs_on_park, before.log_syncs_on_park);
        durable.wait().await.unwrap();
        assert_eq!(engine.get(&key(50_000)).unwrap().value().unwrap(), 5);
        engine.shutdown().unwrap();
    });
}

#[test]
fn after_a_slow_fsync_the_runtime_leaves_group_commits_to_the_syncer() {
    let _alone = ALONE.lock();
    let dir = tempfile::tempdir().unwrap();
    let (rt, hook) = hooked_runtime();
    let slow = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let engine = open_with(dir.path(), Some(hook), Some(slow.clone()));
        write_everything(&engine).await;
        let fast = engine.stats();
        assert!(fast.log_syncs_on_park > 0);

        // Every fsync now takes over the limit: the first one (perhaps on
        // park) shows it, and the syncer writes the rest.
        slow.store(2 * PARK_SYNC_MAX_US, Ordering::Relaxed);
        write_everything(&engine).await;
        let slowed = engine.stats();
        assert!(slowed.log_syncs - fast.log_syncs > 10);
        assert!(
            slowed.log_syncs_on_park - fast.log_syncs_on_park <= 1,
            "{} slow fsyncs written on park",
            slowed.log_syncs_on_park - fast.log_syncs_on_park
        );

        // The syncer's first fast fsync hands group commits back.
        slow.store(0, Ordering::Relaxed);
        write_everything(&engine).await;
        let again = engine.stats();
        assert!(again.log_syncs_on_park > slowed.log_syncs_on_park);
        engine.shutdown().unwrap();
    });
}

#[test]
fn without_the_hook_the_syncer_writes_everything() {
    let _alone = ALONE.lock();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let engine = open(dir.path(), None);
        write_everything(&engine).await;
        check_values(&engine);
        let stats = engine.stats();
        assert!(stats.log_syncs > 0);
        assert_eq!(stats.log_syncs_on_park, 0);
        engine.shutdown().unwrap();
    });
}

/// An engine without threads (`Options::stepped`), its memtables small so
/// that flushes and compactions run too.
fn open_stepped(dir: &std::path::Path, hook: ParkCommit) -> Arc<Engine> {
    let opts = Options {
        answer_on: Some(tokio::runtime::Handle::current()),
        park_commit: Some(hook),
        stepped: true,
        ..common::small_options()
    };
    Arc::new(Engine::open(dir, opts).unwrap())
}

#[test]
fn a_stepped_engine_runs_on_its_runtime_alone_and_what_it_answered_survives_a_crash() {
    let _alone = ALONE.lock();
    let dir = tempfile::tempdir().unwrap();
    let (rt, hook) = hooked_runtime();
    rt.block_on(async {
        let threads = engine_threads();
        let engine = open_stepped(dir.path(), hook.clone());
        assert_eq!(
            engine_threads(),
            threads,
            "a stepped engine started threads"
        );
        write_everything(&engine).await;
        check_values(&engine);
        let stats = engine.stats();
        assert!(stats.tables > 0, "no memtable was flushed");
        assert_eq!(stats.log_syncs, stats.log_syncs_on_park);
        // Queued and not yet written: lost in the crash, never answered.
        let (_, durable) = engine.add([(&key(60_000), 1)]).unwrap();
        engine.crash();
        assert!(durable.wait().await.is_err());
    });
    drop(rt);
    let (rt, hook) = hooked_runtime();
    rt.block_on(async {
        let engine = open_stepped(dir.path(), hook);
        check_values(&engine);
        assert_eq!(engine.get(&key(60_000)).unwrap().value().unwrap(), 0);
        engine.shutdown().unwrap();
    });
}

#[test]
fn a_stepped_engine_needs_the_hook_and_batch_sync() {
    let _alone = ALONE.lock();
    let dir = tempfile::tempdir().unwrap();
    let no_hook = Options {
        stepped: true,
        ..Options::default()
    };
    assert!(Engine::open(dir.path(), no_hook).is_err());
    let periodic = Options {
        stepped: true,
        park_commit: Some(ParkCommit::new()),
        sync: tally_engine::SyncMode::Periodic { interval_ms: 10 },
        ..Options::default()
    };
    assert!(Engine::open(dir.path(), periodic).is_err());
}

/// Held by every test here: one counts the process's engine threads, which
/// another test's engine would add to.
static ALONE: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Threads of this process whose names are the engine's.
fn engine_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|name| name.starts_with("tally-"))
        .count()
}
