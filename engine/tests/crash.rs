//! A real child process doing `batch` adds and replica applies is SIGKILLed
//! mid-run; after reopening, every acknowledged add and apply is there and
//! nothing unattempted is.

#![allow(clippy::disallowed_methods, reason = "tests measure real time")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{add_one, apply_cells, key};
use tally_engine::{Cell, Engine, Options, Shard, Staged};

const KEYS: u64 = 500;
/// Replica writers; writer `t` owns key `KEYS + t` and a foreign shard.
const REPLICAS: u64 = 4;
/// Tasks adding in batches.
const BATCHERS: u64 = 4;
const CHILD_ENV: &str = "TALLY_CRASH_CHILD_DIR";

/// The child: adds forever from 32 tasks, printing `a k d` before each add
/// and `k k d` once it is acknowledged, and from `BATCHERS` more in batches
/// of eight (`Engine::add`, as a node's add pipeline does, waiting
/// for the ones queued to the sealer one by one); and applies ever newer versions of
/// a foreign shard (clock = value = n) from `REPLICAS` tasks, as a replica
/// does, printing `r t n` once version n of writer t is acknowledged.
#[test]
#[ignore = "helper process for crash_keeps_every_acknowledged_add; does nothing on its own"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let engine = std::sync::Arc::new(Engine::open(&dir, Options::default()).unwrap());
        let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..32u64 {
            let engine = engine.clone();
            let out = out.clone();
            tasks.spawn(async move {
                let mut rng = common::Rng(t * 7919 + 17);
                loop {
                    let k = rng.below(KEYS);
                    let d = 1 + rng.below(9) as i64;
                    writeln!(out.lock().unwrap(), "a {k} {d}").unwrap();
                    add_one(&engine, &key(k), d).await.unwrap();
                    writeln!(out.lock().unwrap(), "k {k} {d}").unwrap();
                }
            });
        }
        for t in 0..BATCHERS {
            let engine = engine.clone();
            let out = out.clone();
            tasks.spawn(async move {
                let mut rng = common::Rng(t * 104_729 + 3);
                loop {
                    let adds: Vec<(u64, i64)> = (0..8)
                        .map(|_| (rng.below(KEYS), 1 + rng.below(9) as i64))
                        .collect();
                    let keys: Vec<_> = adds.iter().map(|&(k, _)| key(k)).collect();
                    for &(k, d) in &adds {
                        writeln!(out.lock().unwrap(), "a {k} {d}").unwrap();
                    }
                    let (staged, durable) = engine
                        .add(keys.iter().zip(adds.iter().map(|&(_, d)| d)))
                        .unwrap();
                    let mut sealed = Vec::new();
                    let mut queued = Vec::new();
                    for (&(k, d), staged) in adds.iter().zip(staged) {
                        match staged {
                            Staged::Sealed(_) => sealed.push((k, d)),
                            Staged::Queued(q) => queued.push((k, d, q)),
                            Staged::Refused(e) => panic!("refused: {e}"),
                        }
                    }
                    durable.wait().await.unwrap();
                    for (k, d) in sealed {
                        writeln!(out.lock().unwrap(), "k {k} {d}").unwrap();
                    }
                    for (k, d, q) in queued {
                        let (_, durable) = q.wait().await.unwrap();
                        durable.wait().await.unwrap();
                        writeln!(out.lock().unwrap(), "k {k} {d}").unwrap();
                    }
                }
            });
        }
        for t in 0..REPLICAS {
            let engine = engine.clone();
            let out = out.clone();
            tasks.spawn(async move {
                let k = key(KEYS + t);
                let mut n = engine.get(&k).unwrap().value().unwrap();
                loop {
                    n += 1;
                    let shard = Shard {
                        counter_id: 1000 + t,
                        clock: n as u64,
                        value: n,
                    };
                    let cell = Cell::from_parts(0, [shard]);
                    apply_cells(&engine, &[(k.clone(), cell)]).await.unwrap();
                    writeln!(out.lock().unwrap(), "r {t} {n}").unwrap();
                }
            });
        }
        // The writers never stop on their own; one that fails ends the child.
        if let Some(Err(e)) = tasks.join_next().await {
            panic!("writer failed: {e}");
        }
    });
}

#[test]
fn crash_keeps_every_acknowledged_add() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: HashMap<u64, i64> = HashMap::new();
    let mut attempted: HashMap<u64, i64> = HashMap::new();
    let mut applied: HashMap<u64, i64> = HashMap::new();
    let mut total_acked = 0;
    for round in 0..3 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let started = Instant::now();
        let mut acks_this_round = 0;
        // Kill after a few thousand acknowledgements, at a moment the child chooses by its own pace.
        while acks_this_round < 3000 + round * 1000 && started.elapsed() < Duration::from_secs(30) {
            let Some(Ok(line)) = lines.next() else { break };
            if record(&line, &mut acked, &mut attempted, &mut applied) {
                acks_this_round += 1;
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Lines already written before the kill are still in the pipe.
        for line in lines.map_while(Result::ok) {
            if record(&line, &mut acked, &mut attempted, &mut applied) {
                acks_this_round += 1;
            }
        }
        assert!(
            acks_this_round > 1000,
            "round {round}: child made too little progress ({acks_this_round})"
        );
        total_acked += acks_this_round;

        let engine = Engine::open(dir.path(), Options::default()).unwrap();
        for k in 0..KEYS {
            let v = engine.get(&key(k)).unwrap().value().unwrap();
            let lo = acked.get(&k).copied().unwrap_or(0);
            let hi = attempted.get(&k).copied().unwrap_or(0);
            assert!(
                lo <= v && v <= hi,
                "round {round}, key {k}: value {v} outside [{lo}, {hi}]"
            );
        }
        for t in 0..REPLICAS {
            let v = engine.get(&key(KEYS + t)).unwrap().value().unwrap();
            let lo = applied.get(&t).copied().unwrap_or(0);
            assert!(
                v >= lo,
                "round {round}, replica writer {t}: version {v} survived, {lo} was acknowledged"
            );
        }
        // Make the surviving state the new floor: adds in flight at the kill
        // may or may not have landed, and now we know.
        for k in 0..KEYS {
            let v = engine.get(&key(k)).unwrap().value().unwrap();
            acked.insert(k, v);
            attempted.insert(k, v);
        }
        engine.close().unwrap();
    }
    assert!(total_acked > 3000);
}

/// Parses one child line; true if it was an acknowledgement.
fn record(
    line: &str,
    acked: &mut HashMap<u64, i64>,
    attempted: &mut HashMap<u64, i64>,
    applied: &mut HashMap<u64, i64>,
) -> bool {
    // The test harness prints "test crash_child ... " in front of the first line.
    let parts: Vec<&str> = line.split(' ').collect();
    let [.., kind, k, d] = parts[..] else {
        return false;
    };
    let (Ok(k), Ok(d)) = (k.parse::<u64>(), d.parse::<i64>()) else {
        return false;
    };
    match kind {
        "a" => *attempted.entry(k).or_default() += d,
        "k" => {
            *acked.entry(k).or_default() += d;
            return true;
        }
        "r" => {
            let newest = applied.entry(k).or_default();
            *newest = (*newest).max(d);
            return true;
        }
        _ => {}
    }
    false
}
