//! The value an add answers, over real `tallyd` processes: the value its
//! leader sees right after it, as if the adds combined with it ran one
//! after another. Through one leader, concurrent adds of +1 to one counter
//! from any mix of paths (native clients, pipelined RESP clients, adds
//! forwarded by a node that is not a replica) answer every value from 1 to
//! their number exactly once, as Redis' INCR does. 2,400 adds at once
//! on a loaded host: the nodes wait [`PATIENT_TIMEOUT_MS`] for copies.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;

use tally_net::Consistency;
use tally_net::ring::Ring;
use tally_tests::{Cluster, ClusterOptions, PATIENT_TIMEOUT_MS, runtime as rt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Native clients, adds each.
const NATIVE: usize = 8;
const NATIVE_ADDS: usize = 150;
/// RESP clients, each sending its INCRs in pipelines of this many.
const RESP: usize = 4;
const RESP_PIPELINES: usize = 10;
const RESP_DEPTH: usize = 30;

/// Sends `pipelines` pipelines of `depth` `INCR key` and parses the answers.
async fn resp_incrs(addr: SocketAddr, key: &str, pipelines: usize, depth: usize) -> Vec<i64> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let cmd = format!("*2\r\n$4\r\nINCR\r\n${}\r\n{key}\r\n", key.len());
    let mut values = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..pipelines {
        s.write_all(cmd.repeat(depth).as_bytes()).await.unwrap();
        let want = values.len() + depth;
        while values.len() < want {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the RESP connection closed");
            buf.extend_from_slice(&chunk[..n]);
            while let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8(buf[..end].to_vec()).unwrap();
                buf.drain(..end + 2);
                let v = line
                    .strip_prefix(':')
                    .unwrap_or_else(|| panic!("an INCR answered {line:?}"));
                values.push(v.parse().unwrap());
            }
        }
    }
    values
}

/// Adds +1 to `key` through node `via` from native and RESP clients at
/// once; returns every answered value.
fn concurrent_incrs(cluster: &Cluster, via: usize, key: &'static str) -> Vec<i64> {
    rt().block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..NATIVE {
            let c = cluster.client(via).await.unwrap();
            tasks.push(tokio::spawn(async move {
                let mut values = Vec::with_capacity(NATIVE_ADDS);
                for _ in 0..NATIVE_ADDS {
                    values.push(
                        c.add(key.as_bytes(), b"", 1, Consistency::Quorum)
                            .await
                            .unwrap(),
                    );
                }
                values
            }));
        }
        let resp = cluster.resp_addr(via);
        for _ in 0..RESP {
            tasks.push(tokio::spawn(resp_incrs(
                resp,
                key,
                RESP_PIPELINES,
                RESP_DEPTH,
            )));
        }
        let mut values = Vec::new();
        for t in tasks {
            values.extend(t.await.unwrap());
        }
        values
    })
}

fn assert_each_value_once(mut values: Vec<i64>) {
    let n = NATIVE * NATIVE_ADDS + RESP * RESP_PIPELINES * RESP_DEPTH;
    assert_eq!(values.len(), n);
    values.sort_unstable();
    let want: Vec<i64> = (1..=n as i64).collect();
    let repeated = values.windows(2).filter(|w| w[0] == w[1]).count();
    assert!(
        values == want,
        "{repeated} repeated values among {n} answers"
    );
}

#[test]
fn adds_through_one_leader_answer_every_value_once() {
    let cluster = Cluster::start(ClusterOptions {
        request_timeout_ms: Some(PATIENT_TIMEOUT_MS),
        ..ClusterOptions::default()
    })
    .unwrap();
    assert_each_value_once(concurrent_incrs(&cluster, 0, "likes"));
}

#[test]
fn forwarded_adds_answer_every_value_once() {
    // One replica per partition: a node that does not hold the key
    // forwards every add to the one that does.
    let cluster = Cluster::start(ClusterOptions {
        replication_factor: 1,
        request_timeout_ms: Some(PATIENT_TIMEOUT_MS),
        ..ClusterOptions::default()
    })
    .unwrap();
    let c = &cluster.config.cluster;
    let ring = Ring::new(&cluster.config.node_ids(), c.vnodes, c.replication_factor);
    let key = "views";
    let owner = ring.replicas(key.as_bytes()).primary();
    let via = (owner + 1) % cluster.nodes.len();
    assert_each_value_once(concurrent_incrs(&cluster, via, key));
}
