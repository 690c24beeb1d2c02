//! Clients over RESP in the simulation: the node's RESP port reached
//! through a pipe in memory (`MemoryDoors`), so that what only real
//! clients reach runs here too: pipelines (commands of one pipeline run
//! at once), scripts, `CLIENT CONSISTENCY`, RESP's own SET and PEXPIREAT.
//!
//! - A pipelining client sends what the chaos run's RESP workers send
//!   ([`tally_tests::resp_work`]) on the counters the native clients
//!   count, through one node until its connection breaks, and its
//!   operations join the same history.
//! - A hostile client sends scripts that try to plant code in the
//!   interpreters the others' scripts run in; a sealed node refuses
//!   each, and one that took one would answer the others' scripted adds
//!   without making them, which the checker sees.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_tests::checker::Op;
use tally_tests::resp_work::{self, Answer, Clocks, Keys, PLANTS, answer, exchange, pipeline};
use tokio::io::{AsyncWriteExt, BufReader, DuplexStream};

use crate::cluster::Cluster;
use crate::trace;
use crate::workload::{KEYS, RESET_KEY, now_ns};
use crate::world::{Stream, stream};

/// The name of counter `k` as RESP names it: the key a native client's
/// `workload::key(k)` is.
fn name(k: usize) -> String {
    format!("sim:{k}")
}

/// A pipelining client, `id`, until `until`: its operations.
pub async fn client(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(stream(seed, Stream::Client(id as u64)));
    let keys = Keys {
        count: KEYS,
        reset: RESET_KEY..KEYS,
        name,
    };
    let mut conn: Option<(usize, BufReader<DuplexStream>)> = None;
    let mut history = Vec::new();
    while tally_world::Instant::now() < until {
        // A pipeline carries up to 16 commands: fewer of them than a
        // native client's single operations.
        tokio::time::sleep(Duration::from_millis(rng.random_range(30..250))).await;
        // A paused node's clients hear nothing: they give up on it.
        if let Some((n, _)) = conn
            && cluster.serving(n).is_none()
        {
            conn = None;
        }
        let (node, c) = match conn.as_mut() {
            Some((n, c)) => (*n, c),
            None => {
                let n = rng.random_range(0..cluster.len());
                let Some(pipe) = cluster.resp(n) else {
                    continue;
                };
                let (_, c) = conn.insert((n, BufReader::new(pipe)));
                (n, c)
            }
        };
        let clocks = Clocks {
            run_ns: now_ns(),
            wall_ms: tally_world::wall_ms(),
        };
        let p = pipeline(&mut rng, &keys, clocks);
        let done = exchange(c, p, (id, node), now_ns).await;
        for op in &done.ops {
            trace!("resp client {id}: {op}");
        }
        history.extend(done.ops);
        if done.broken {
            conn = None;
        }
    }
    history
}

/// The hostile client, `id`, until `until`: sends [`PLANTS`] through
/// random nodes, each on a connection of its own. Answers how many were
/// answered and how many of those were not refused.
pub async fn hostile(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> (usize, usize) {
    let mut rng = SmallRng::seed_from_u64(stream(seed, Stream::Client(id as u64)));
    let (mut sent, mut taken) = (0, 0);
    while tally_world::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
        let n = rng.random_range(0..cluster.len());
        let plant = PLANTS[rng.random_range(0..PLANTS.len())];
        let Some(pipe) = cluster.resp(n) else {
            continue;
        };
        let mut c = BufReader::new(pipe);
        let reply = async {
            let eval = resp_work::eval(plant, "hostile", None);
            c.get_mut().write_all(eval.as_bytes()).await.ok()?;
            answer(&mut c).await
        };
        let Ok(Some(reply)) = tokio::time::timeout(resp_work::REPLY_TIMEOUT, reply).await else {
            continue;
        };
        trace!("hostile client {id} via n{}: {plant:?} -> {reply:?}", n + 1);
        sent += 1;
        // An error (the table is read-only) is what a sealed node says.
        taken += usize::from(reply != Answer::Error);
    }
    (sent, taken)
}
