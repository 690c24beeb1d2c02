//! Strings through the native protocol and the `tally` CLI, and the
//! linearizable counter over RESP, against three real nodes: a lease is
//! held by one owner at a time while six clients through all three nodes
//! take turns, and by the next once it expired; compare-and-set from six
//! clients never loses or repeats a step; `INCR` at `SERIAL` answers
//! every value once; `tally lease` and `tally cas` say what they did in
//! their exit status.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tally_net::wire::{Deadline, StringCondition};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const CLIENTS: usize = 6;

#[test]
fn a_lease_has_one_holder_at_a_time_through_any_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let held = Arc::new(AtomicBool::new(false));
    let turns = rt().block_on(async {
        let mut tasks = Vec::new();
        for i in 0..CLIENTS {
            let client = cluster.client(i % 3).await.unwrap();
            let held = held.clone();
            tasks.push(tokio::spawn(async move {
                let owner = format!("owner-{i}");
                let until = Instant::now() + Duration::from_secs(20);
                let mut turns = 0;
                while turns < 4 && Instant::now() < until {
                    let ttl = Duration::from_secs(10);
                    let got = client.lease_acquire(b"leader", owner.as_bytes(), ttl);
                    if !got.await.unwrap().applied {
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        continue;
                    }
                    assert!(!held.swap(true, Ordering::SeqCst), "{owner}: two holders");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    held.store(false, Ordering::SeqCst);
                    let gone = client.lease_release(b"leader", owner.as_bytes()).await;
                    assert!(gone.unwrap().applied, "{owner} released its own lease");
                    turns += 1;
                }
                turns
            }));
        }
        let mut turns = Vec::new();
        for t in tasks {
            turns.push(t.await.unwrap());
        }
        turns
    });
    assert_eq!(turns, vec![4; CLIENTS], "every owner got its turns");

    // A lease that expires: the next owner takes it, the old one can
    // neither renew nor release it; its holder takes it again.
    rt().block_on(async {
        let (a, b) = (
            cluster.client(0).await.unwrap(),
            cluster.client(2).await.unwrap(),
        );
        let short = Duration::from_millis(1500);
        assert!(a.lease_acquire(b"job", b"a", short).await.unwrap().applied);
        let refused = b.lease_acquire(b"job", b"b", short).await.unwrap();
        assert!(!refused.applied);
        let before = refused.before.unwrap();
        assert_eq!(before.value, b"a");
        assert!(before.at_ms > 0, "a lease has a deadline");
        assert!(a.lease_renew(b"job", b"a", short).await.unwrap().applied);
        assert!(a.lease_acquire(b"job", b"a", short).await.unwrap().applied);
        tokio::time::sleep(Duration::from_millis(1700)).await;
        assert!(b.lease_acquire(b"job", b"b", short).await.unwrap().applied);
        assert!(!a.lease_renew(b"job", b"a", short).await.unwrap().applied);
        assert!(!a.lease_release(b"job", b"a").await.unwrap().applied);
        let now = a.get_string(b"job").await.unwrap().unwrap();
        assert_eq!(now.value, b"b");
    });
}

#[test]
fn compare_and_set_steps_a_counter_once_per_success() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    const STEPS: usize = 10;
    let values = rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        let start = c.set_string(b"ctr", Some(b"0"), StringCondition::Always, Deadline::Never);
        assert!(start.await.unwrap().applied);
        let mut tasks = Vec::new();
        for i in 0..CLIENTS {
            let client = cluster.client(i % 3).await.unwrap();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                while mine.len() < STEPS {
                    let seen = client.get_string(b"ctr").await.unwrap().unwrap().value;
                    let v: u64 = std::str::from_utf8(&seen).unwrap().parse().unwrap();
                    let next = (v + 5).to_string();
                    if client
                        .cas(b"ctr", Some(&seen), next.as_bytes())
                        .await
                        .unwrap()
                    {
                        mine.push(v + 5);
                    }
                }
                mine
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort_unstable();
        let last = c.get_string(b"ctr").await.unwrap().unwrap().value;
        (all, last)
    });
    let (all, last) = values;
    let expected: Vec<u64> = (1..=(CLIENTS * STEPS) as u64).map(|i| i * 5).collect();
    assert_eq!(all, expected, "each step taken once");
    assert_eq!(last, (CLIENTS * STEPS * 5).to_string().into_bytes());

    // The CLI: a swap that does not hold exits 4, a lease held by another too.
    let out = cluster.tally(&["cas", "ctr", "0", "1"]).unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not swapped: ctr holds \"300\""),
        "{stderr}"
    );
    assert_eq!(
        cluster.tally_ok(&["cas", "ctr", "300", "x"]).unwrap(),
        "swapped\n"
    );
    assert_eq!(cluster.tally_ok(&["get", "ctr"]).unwrap(), "x\n");
    let take = |owner: &str| cluster.tally(&["lease", "acquire", "cron", owner, "--ttl", "30"]);
    assert_eq!(take("a").unwrap().status.code(), Some(0));
    let refused = take("b").unwrap();
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds \"a\" for"));
    assert_eq!(
        cluster
            .tally_ok(&["lease", "release", "cron", "a"])
            .unwrap(),
        "OK\n"
    );
    assert_eq!(take("b").unwrap().status.code(), Some(0));
    // A string beside a counter is refused: a key holds one kind.
    cluster.tally_ok(&["add", "hits", "3"]).unwrap();
    let out = cluster.tally(&["set", "hits", "many"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(cluster.tally_ok(&["get", "hits"]).unwrap(), "3\n");
}

/// Runs `commands` (one per line) at SERIAL through node `i` in one
/// redis-cli connection; answers its output lines.
fn serial(cluster: &Cluster, i: usize, commands: &str) -> Vec<String> {
    let port = cluster.resp_addr(i).port().to_string();
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "CLIENT CONSISTENCY SERIAL\n{commands}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().skip(1).map(str::to_string).collect()
}

/// Sends `CLIENT CONSISTENCY SERIAL` and `n` `INCR key` in one write
/// through node `i`; answers the `INCR`s' replies, in order.
fn pipelined(cluster: &Cluster, i: usize, key: &str, n: usize) -> Vec<i64> {
    use std::io::{BufRead, BufReader};
    let mut conn = std::net::TcpStream::connect(cluster.resp_addr(i)).unwrap();
    let mut out = tally_tests::resp_command(&[b"CLIENT", b"CONSISTENCY", b"SERIAL"]);
    for _ in 0..n {
        out.extend(tally_tests::resp_command(&[b"INCR", key.as_bytes()]));
    }
    conn.write_all(&out).unwrap();
    let mut lines = BufReader::new(conn).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "+OK");
    (0..n)
        .map(|_| {
            let line = lines.next().unwrap().unwrap();
            let n = line.strip_prefix(':').unwrap_or_else(|| panic!("{line}"));
            n.parse().unwrap()
        })
        .collect()
}

#[test]
fn incr_at_serial_answers_every_value_once() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    const EACH: usize = 20;
    let incrs = "INCR views\n".repeat(EACH);
    let (cluster_ref, incrs) = (&cluster, incrs.as_str());
    let mut answers: Vec<i64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..CLIENTS)
            .map(|i| s.spawn(move || serial(cluster_ref, i % 3, incrs)))
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .map(|line| line.parse().unwrap_or_else(|_| panic!("{line}")))
            .collect()
    });
    answers.sort_unstable();
    let expected: Vec<i64> = (1..=(CLIENTS * EACH) as i64).collect();
    assert_eq!(answers, expected, "every value answered once");
    assert_eq!(cluster.redis_cli(1, &["TYPE", "views"]), "string\n");
    // SET of an integer at SERIAL is a string too; TALLY.CAS swaps it.
    let out = serial(
        &cluster,
        2,
        "SET limit 10\nTALLY.CAS limit 10 11\nTALLY.CAS limit 10 12",
    );
    assert_eq!(out, ["OK", "1", "0"]);
    assert_eq!(cluster.redis_cli(0, &["GET", "limit"]), "11\n");
    // Pipelined, the adds of a key answer in their order.
    let answers = pipelined(&cluster, 0, "seq", 10);
    assert_eq!(answers, (1..=10).collect::<Vec<i64>>(), "in order");
    // A counter stays a counter at SERIAL.
    assert_eq!(cluster.redis_cli(0, &["INCRBY", "plain", "4"]), "4\n");
    assert_eq!(serial(&cluster, 1, "INCR plain"), ["5"]);
}
