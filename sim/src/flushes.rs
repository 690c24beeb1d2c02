//! Flushes in the simulation, as the chaos run's `flush` fault makes
//! them: a `FLUSHALL` through a random member now and then, every other
//! one two at once through the same member. The counter checker reads each
//! as a reset of every key at ALL.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::Consistency;
use tally_tests::checker::{Kind, Op, Outcome};

use crate::cluster::Cluster;
use crate::trace;
use crate::workload::{KEYS, now_ns};
use crate::world::{Stream, stream};

/// The history's process number of a flush (two at once: this and the next).
const PROCESS: usize = 1 << 20;
/// How long a flush may take before the flusher counts it unknown.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The flusher, until `until`: a `FLUSHALL` through a random member that
/// is up every 1 to 6 s, every other one two at once; its history holds
/// each flush as a reset of every counter at ALL.
pub async fn flusher(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(stream(seed, Stream::Client(id as u64)));
    let mut history = Vec::new();
    let mut flushes = 0usize;
    while tally_world::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..6_000))).await;
        let n = rng.random_range(0..cluster.len());
        if cluster.serving(n).is_none() {
            continue;
        }
        flushes += 1;
        if flushes % 2 == 1 {
            history.extend(flush(&cluster, n, PROCESS).await);
        } else {
            let (a, b) = tokio::join!(flush(&cluster, n, PROCESS), flush(&cluster, n, PROCESS + 1));
            history.extend(a.into_iter().chain(b));
        }
    }
    history
}

/// One `FLUSHALL` through `n`, as resets of every counter by `process`.
async fn flush(cluster: &Cluster, n: usize, process: usize) -> Vec<Op> {
    let invoke_ns = now_ns();
    let outcome = match cluster.serving(n) {
        None => Outcome::Fail,
        Some(node) => match tokio::time::timeout(TIMEOUT, node.flush_all()).await {
            Ok(Ok(())) => Outcome::Ok(0),
            Ok(Err(e)) if e.outcome == tally_net::Outcome::NotApplied => Outcome::Fail,
            Ok(Err(_)) | Err(_) => Outcome::Unknown,
        },
    };
    let complete_ns = now_ns();
    trace!("flush {process} through n{}: {outcome:?}", n + 1);
    (0..KEYS)
        .map(|key| Op {
            process,
            key,
            kind: Kind::Reset,
            cl: Consistency::All,
            node: n,
            invoke_ns,
            complete_ns,
            outcome,
        })
        .collect()
}
