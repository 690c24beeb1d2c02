//! Exactly-once adds in the simulation: clients give every add an
//! operation id and send it as the chaos harness's exact workers do
//! (`tally_tests::exact_sender`: retried until known, some raced, some
//! sent again after their acknowledgement), through the nodes' own calls.
//! The chaos harness's exact checker judges them: every node's value at
//! ALL must be the sum of the distinct acknowledged ids.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tally_net::once::OpId;
use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};
use tally_tests::checker::exact::IdAdd;
use tally_tests::exact_sender::{Nodes, Sender};

use crate::cluster::Cluster;
use crate::trace;
use crate::world::{Stream, stream};

/// The counters only adds with ids go to.
pub const EXACT_KEYS: usize = 3;
/// How long an add keeps being retried after the workload's end.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);
/// The wait before a retry: short, so retries overlap the original.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// How long one send waits for its answer.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Exact key `k`.
pub fn exact_key(k: usize) -> WireKey {
    WireKey::new(format!("sim-exact:{k}").as_bytes(), b"")
}

/// One exact client, `id`, until `until`: adds to the exact keys, each
/// until it knows.
pub async fn client(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> Vec<IdAdd> {
    let members = SimNodes { cluster, until };
    let mut s = Sender::new(members, stream(seed, Stream::Client(id as u64)));
    let name = format!("sim-exact-{id}").into_bytes();
    let mut adds = Vec::new();
    let mut seq = 0;
    while !s.nodes.stopped() {
        let pause = Duration::from_millis(s.rng.random_range(5..60));
        tokio::time::sleep(pause).await;
        seq += 1;
        let Ok(op) = OpId::new(name.clone(), seq) else {
            break;
        };
        let add = s.next(op, EXACT_KEYS);
        let add = s.add(add).await;
        trace!("exact client {id}: {add}");
        adds.push(add);
    }
    adds
}

/// The simulated cluster, as an exact client reaches it: each node's
/// own call.
struct SimNodes {
    cluster: Arc<Cluster>,
    until: tally_world::Instant,
}

impl Nodes for SimNodes {
    fn count(&self) -> usize {
        self.cluster.len()
    }

    async fn ready(&mut self, _node: usize) {}

    async fn send(
        &self,
        node: usize,
        add: &IdAdd,
        cl: Consistency,
    ) -> Option<Result<i64, WireError>> {
        let n = self.cluster.serving(node)?;
        let key = exact_key(add.key);
        let call = n.add_once(&key, add.delta, &add.id, cl);
        Some(match tokio::time::timeout(SEND_TIMEOUT, call).await {
            Ok(answer) => answer,
            Err(_) => Err(WireError::unknown(ErrorKind::Timeout, "no answer in time")),
        })
    }

    fn stopped(&self) -> bool {
        tally_world::Instant::now() >= self.until
    }

    fn give_up(&mut self) -> bool {
        tally_world::Instant::now() > self.until + SETTLE_RETRY_MAX
    }

    async fn backoff(&self) {
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}
