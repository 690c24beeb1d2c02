//! A full disk: writes fail with an error promptly, never hang, and are
//! taken again once there is room, without a restart; a flush that fails
//! leaves no temporary file behind to eat the room an operator frees.
//!
//! The disk fills through `RLIMIT_FSIZE` (as in the chaos harness): a write
//! past the limit fails with EFBIG, as it would with ENOSPC on a full disk
//! (SIGXFSZ ignored). The limit is the whole process's, so the tests of
//! this binary take turns.

#![allow(clippy::disallowed_methods, reason = "tests measure real time")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{add_one, apply_cells, apply_one, key, open};
use tally_engine::{Cell, Engine, Error, Key, Options, Shard};

/// The file size limit is per process: one test at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sets the soft file size limit (`None`: none), keeping the hard one.
#[allow(
    unsafe_code,
    reason = "setrlimit(2) and signal(2) have no safe std wrapper"
)]
fn file_limit(bytes: Option<u64>) {
    // SAFETY: plain system calls on integers and a local struct.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        lim.rlim_cur = bytes.unwrap_or(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
}

/// Lifts the limit when a test ends, passed or not.
struct Room;

impl Drop for Room {
    fn drop(&mut self) {
        file_limit(None);
    }
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

fn replica_cell(value: i64) -> Cell {
    Cell::from_parts(
        0,
        [Shard {
            counter_id: 0xabc,
            clock: 1,
            value,
        }],
    )
}

fn wide_key(i: usize) -> Key {
    Key::new(
        format!("row{}", i / 16).as_bytes(),
        format!("{i:06}").as_bytes(),
    )
    .unwrap()
}

/// `f` within the time a node gives a write, or the test fails as hung.
async fn promptly<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(3), f)
        .await
        .unwrap_or_else(|_| panic!("{what} hung on a full disk"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_flush_leaves_no_temporary_behind() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let _room = Room;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), &Options::default());
    let items: Vec<(Key, Cell)> = (0..3000)
        .map(|i| (wide_key(i), replica_cell(i as i64)))
        .collect();
    for chunk in items.chunks(500) {
        apply_cells(&engine, chunk).await.unwrap();
    }

    // Room for 16 KiB files only: the table (some 100 KiB) does not fit.
    file_limit(Some(16 << 10));
    let err = engine.flush().unwrap_err();
    assert!(
        temporaries(dir.path()).is_empty(),
        "{:?} left by: {err}",
        temporaries(dir.path())
    );
    // The background thread retries every second; each try cleans up too.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        temporaries(dir.path()).is_empty(),
        "{:?}",
        temporaries(dir.path())
    );

    // Room again: the retried flush goes through.
    file_limit(None);
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.stats().tables == 0 {
        assert!(Instant::now() < deadline, "no flush once there was room");
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in (0..3000).step_by(97) {
        assert_eq!(engine.get(&wide_key(i)).unwrap().value(), Ok(i as i64));
    }
    engine.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_promptly_while_the_log_cannot_grow_and_work_again_after() {
    log_full_then_room(Options::default()).await;
}

/// The same, with group commits written by the runtime's thread as it
/// parks: the records it could not write are tried again all the same.
#[test]
fn a_runtime_that_writes_group_commits_as_it_parks_retries_them_too() {
    let (rt, hook) = common::hooked_runtime();
    rt.block_on(async {
        log_full_then_room(Options {
            answer_on: Some(tokio::runtime::Handle::current()),
            park_commit: Some(hook),
            ..Options::default()
        })
        .await;
    });
}

/// Fills the disk under the log of an engine opened with `opts`, checks
/// that writes fail promptly, then that they are taken again with room.
async fn log_full_then_room(opts: Options) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let _room = Room;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), opts.clone()).unwrap();
    add_one(&engine, &key(0), 1).await.unwrap();

    // The log's next record is past the limit.
    file_limit(Some(64));
    let first = promptly("an add", add_one(&engine, &key(1), 1)).await;
    assert!(first.is_err(), "{first:?}");
    for k in 2..5 {
        let r = promptly("an add", add_one(&engine, &key(k), 1)).await;
        assert!(matches!(r, Err(Error::DiskFull(_))), "{r:?}");
        let r = promptly("an apply", apply_one(&engine, &key(k), &replica_cell(1))).await;
        assert!(matches!(r, Err(Error::DiskFull(_))), "{r:?}");
    }

    // Room again: writes are taken again, without a restart.
    file_limit(None);
    let deadline = Instant::now() + Duration::from_secs(5);
    let added = loop {
        match promptly("an add", add_one(&engine, &key(1), 1)).await {
            Ok(added) => break added,
            Err(e) => assert!(Instant::now() < deadline, "still refused with room: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The add that failed in flight may have gone through: it was in
    // memory, and reached the log with the next write.
    assert!((1..=2).contains(&added.value), "{added:?}");
    apply_one(&engine, &key(2), &replica_cell(7)).await.unwrap();
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), opts).unwrap();
    assert_eq!(engine.get(&key(0)).unwrap().value(), Ok(1));
    assert_eq!(engine.get(&key(1)).unwrap().value(), Ok(added.value));
    assert_eq!(engine.get(&key(2)).unwrap().value(), Ok(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_promptly_while_flushes_cannot_and_work_again_after() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let _room = Room;
    let dir = tempfile::tempdir().unwrap();
    // Small log segments fit under the limit; memtables' tables do not,
    // by far (a table takes about a quarter of its memtable's bytes: one
    // near the limit would flush whenever a memtable freezes early).
    let opts = Options {
        memtable_bytes_max: 1 << 20,
        frozen_memtables_max: 1,
        segment_bytes_max: 32 << 10,
        ..Options::default()
    };
    let engine = open(dir.path(), &opts);
    file_limit(Some(64 << 10));

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut applied = 0;
    let refused = loop {
        assert!(
            Instant::now() < deadline,
            "{applied} cells taken, none refused"
        );
        let items: Vec<(Key, Cell)> = (applied..applied + 200)
            .map(|i| (wide_key(i), replica_cell(i as i64)))
            .collect();
        match promptly("a replica's batch", apply_cells(&engine, &items)).await {
            Ok(results) => {
                assert!(results.iter().all(Result::is_ok));
                applied += 200;
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(refused, Error::DiskFull(_)), "{refused}");
    assert_eq!(engine.stats().tables, 0, "a table fit under the limit");
    let r = promptly("an add", add_one(&engine, &key(0), 1)).await;
    assert!(matches!(r, Err(Error::DiskFull(_))), "{r:?}");

    // Room again: flushes catch up and writes are taken again.
    file_limit(None);
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = promptly("an add", add_one(&engine, &key(0), 1)).await {
        assert!(Instant::now() < deadline, "still refused with room: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(engine.stats().tables > 0);
    for i in (0..applied).step_by(61) {
        assert_eq!(engine.get(&wide_key(i)).unwrap().value(), Ok(i as i64));
    }
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), opts).unwrap();
    assert_eq!(
        engine.get(&wide_key(applied - 1)).unwrap().value(),
        Ok(applied as i64 - 1)
    );
}
