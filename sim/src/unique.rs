//! Unique counters in the simulation: clients add members as the chaos
//! harness's unique workers do (`tally_tests::unique_sender`: random
//! members, many repeated, through random nodes at random levels, each
//! add retried until acknowledged, some raced through a second node),
//! through the nodes' own calls, as a native client's operations (in
//! database 0's current keyspace). The chaos harness's checker judges them:
//! every member's count at ALL through every member of the ring is the
//! number of distinct members acknowledged, and each is present.

use std::sync::Arc;
use std::time::Duration;

use tally_net::wire::{ClientOp, ClientReply, Consistency, ErrorKind, WireError};
use tally_tests::unique_sender::{self, Counts, Sets, UniqueLog};

use crate::cluster::Cluster;
use crate::trace;
use crate::world::{Stream, stream};

/// The unique counters clients add members to.
pub const SETS: usize = 2;
/// How long an add keeps being retried after the workload's end.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);
/// The wait before a retry.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// How long one add waits for its answer.
const ADD_TIMEOUT: Duration = Duration::from_secs(5);

/// Unique counter `i`'s key.
pub fn set_key(i: usize) -> Vec<u8> {
    format!("sim-set:{i}").into_bytes()
}

fn add_op(set: usize, members: &[String], cl: Consistency) -> ClientOp {
    ClientOp::UniqueAdd {
        partition: set_key(set),
        members: members.iter().map(|m| m.as_bytes().to_vec()).collect(),
        cl,
    }
}

/// An answer of a kind the operation does not give.
fn unexpected(reply: ClientReply) -> WireError {
    WireError::new(ErrorKind::Internal, format!("unexpected answer {reply:?}"))
}

/// One unique client, `id`, until `until`.
pub async fn client(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> UniqueLog {
    let mut nodes = SimSets { id, cluster, until };
    let log =
        unique_sender::worker(&mut nodes, SETS, stream(seed, Stream::Client(id as u64))).await;
    trace!(
        "unique client {id}: {} adds ({} retries, {} raced), {} never acknowledged",
        log.adds, log.retries, log.races, log.unsettled
    );
    log
}

/// The simulated cluster, as a unique client reaches it: each node's own
/// call.
struct SimSets {
    id: usize,
    cluster: Arc<Cluster>,
    until: tally_world::Instant,
}

impl Sets for SimSets {
    fn count(&self) -> usize {
        self.cluster.len()
    }

    async fn ready(&mut self, _node: usize) {}

    async fn add(&self, node: usize, set: usize, members: &[String], cl: Consistency) -> bool {
        let Some(n) = self.cluster.serving(node) else {
            return false;
        };
        let call = n.execute(add_op(set, members, cl));
        let answer = match tokio::time::timeout(ADD_TIMEOUT, call).await {
            Ok(Ok(ClientReply::Value(_))) => Ok(()),
            Ok(Ok(other)) => Err(unexpected(other).to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer in time".to_string()),
        };
        trace!(
            "unique client {}: add {members:?} to set {set} through n{} at {cl:?}: {}",
            self.id,
            node + 1,
            match &answer {
                Ok(()) => "acknowledged",
                Err(e) => e,
            }
        );
        answer.is_ok()
    }

    fn race(&self, node: usize, set: usize, members: Vec<String>) {
        let Some(n) = self.cluster.serving(node) else {
            return;
        };
        let call = async move { n.execute(add_op(set, &members, Consistency::Quorum)).await };
        tokio::spawn(tokio::time::timeout(ADD_TIMEOUT, call));
    }

    async fn think(&self, pause: Duration) {
        tokio::time::sleep(pause).await;
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

/// Every counter read at ALL through every member of the ring, judged
/// exactly.
pub async fn check(cluster: &Cluster, log: &UniqueLog) -> Vec<String> {
    let members = cluster.membership().members;
    let (violations, expected) =
        unique_sender::check(&Finals { cluster }, &members, log, SETS).await;
    trace!("unique counters: {expected:?} (set, distinct members)");
    violations
}

/// The final reads, through the nodes' own calls.
struct Finals<'a> {
    cluster: &'a Cluster,
}

impl Counts for Finals<'_> {
    async fn count(&self, node: usize, set: usize) -> Result<i64, String> {
        let n = self.cluster.node(node).ok_or("down at the end")?;
        let op = ClientOp::UniqueCount {
            partition: set_key(set),
            cl: Consistency::All,
        };
        match n.execute(op).await {
            Ok(ClientReply::Value(count)) => Ok(count),
            Ok(other) => Err(unexpected(other).to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn contains(
        &self,
        node: usize,
        set: usize,
        members: &[&String],
    ) -> Result<Vec<bool>, String> {
        let n = self.cluster.node(node).ok_or("down at the end")?;
        let op = ClientOp::UniqueContains {
            partition: set_key(set),
            members: members.iter().map(|m| m.as_bytes().to_vec()).collect(),
            cl: Consistency::All,
        };
        match n.execute(op).await {
            Ok(ClientReply::Flags(flags)) => Ok(flags),
            Ok(other) => Err(unexpected(other).to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn pause(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}
