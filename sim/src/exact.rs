//! Exactly-once adds in the simulation: clients give every add an
//! operation id and retry it, with the same id and delta, through random
//! nodes until it is known (acknowledged, or refused for good). Some adds
//! race a twin through another node; some are sent again after their
//! acknowledgement. The chaos harness's exact checker judges them: every
//! node's value at ALL must be the sum of the distinct acknowledged ids.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::once::OpId;
use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};
use tally_tests::checker::exact::{Ended, IdAdd};

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
/// The share of adds sent through two nodes at once.
const RACE_SHARE: f64 = 0.1;
/// The share of acknowledged adds sent again through another node.
const RESEND_SHARE: f64 = 0.05;

/// Exact key `k`.
pub fn exact_key(k: usize) -> WireKey {
    WireKey::new(format!("sim-exact:{k}").as_bytes(), b"")
}

/// What one send tells: known, or nothing (`None`: retry the same id).
fn classify(result: &Result<i64, WireError>) -> Option<Ended> {
    let e = match result {
        Ok(v) => return Some(Ended::Acked(*v)),
        Err(e) => e,
    };
    match e.kind {
        ErrorKind::IdExpired => Some(Ended::Unknown),
        ErrorKind::Invalid | ErrorKind::Overflow | ErrorKind::IdConflict
            if e.outcome == tally_net::Outcome::NotApplied =>
        {
            Some(Ended::Refused(e.to_string()))
        }
        _ => None,
    }
}

/// A small delta, never 0 (a 0 would hide a double count).
fn small_delta(rng: &mut SmallRng) -> i64 {
    match rng.random_range(-3..=8) {
        d if d >= 0 => d + 1,
        d => d,
    }
}

/// One exact client, `id`, until `until`: adds to the exact keys, each
/// until it knows.
pub async fn client(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> Vec<IdAdd> {
    let mut s = Sender {
        rng: SmallRng::seed_from_u64(stream(seed, Stream::Client(id as u64))),
        cluster,
        until,
    };
    let name = format!("sim-exact-{id}").into_bytes();
    let mut adds = Vec::new();
    let mut seq = 0;
    while tally_world::Instant::now() < until {
        let pause = Duration::from_millis(s.rng.random_range(5..60));
        tokio::time::sleep(pause).await;
        seq += 1;
        let Ok(op) = OpId::new(name.clone(), seq) else {
            break;
        };
        let add = IdAdd {
            key: s.rng.random_range(0..EXACT_KEYS),
            id: op,
            delta: small_delta(&mut s.rng),
            ended: Ended::Unknown,
            attempts: 0,
            raced: s.rng.random_bool(RACE_SHARE),
            resent: false,
            again: Vec::new(),
        };
        let add = s.add(add).await;
        trace!("exact client {id}: {add}");
        adds.push(add);
    }
    adds
}

struct Sender {
    rng: SmallRng,
    cluster: Arc<Cluster>,
    until: tally_world::Instant,
}

impl Sender {
    /// Sends `add` until it knows (raced at first if it says so), then
    /// perhaps once more through another node.
    async fn add(&mut self, mut add: IdAdd) -> IdAdd {
        let mut known = None;
        if add.raced {
            add.attempts = 1;
            let (first, twin) = self.race(&add).await;
            add.again.extend(twin);
            known = first;
        }
        let (node, ended) = match known {
            Some(known) => known,
            None => {
                let (node, ended, attempts) = self.until_known(&add, None).await;
                add.attempts += attempts;
                (node, ended)
            }
        };
        add.ended = ended;
        let acked = matches!(add.ended, Ended::Acked(_));
        if acked && self.rng.random_bool(RESEND_SHARE) {
            add.resent = true;
            let (_, again, _) = self.until_known(&add, Some(node)).await;
            add.again.push(again);
        }
        add
    }

    /// Sends `add` through two nodes at once.
    async fn race(&mut self, add: &IdAdd) -> (Option<(usize, Ended)>, Option<Ended>) {
        let n = self.cluster.len();
        let a = self.rng.random_range(0..n);
        let b = (a + self.rng.random_range(1..n)) % n;
        let (cl_a, cl_b) = (self.level(), self.level());
        let (ra, rb) = tokio::join!(self.send(a, add, cl_a), self.send(b, add, cl_b));
        match (ra, rb) {
            (Some(known), twin) => (Some((a, known)), twin),
            (None, known) => (known.map(|k| (b, k)), None),
        }
    }

    /// Sends `add` through random nodes (never `avoid`) until one knows:
    /// the node, the outcome, the sends it took.
    async fn until_known(&mut self, add: &IdAdd, avoid: Option<usize>) -> (usize, Ended, u32) {
        let n = self.cluster.len();
        let mut attempts = 0;
        loop {
            if attempts > 0 {
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
            if tally_world::Instant::now() > self.until + SETTLE_RETRY_MAX {
                return (0, Ended::Unknown, attempts);
            }
            attempts += 1;
            let node = match avoid {
                Some(a) => (a + self.rng.random_range(1..n)) % n,
                None => self.rng.random_range(0..n),
            };
            let cl = self.level();
            if let Some(ended) = self.send(node, add, cl).await {
                return (node, ended, attempts);
            }
        }
    }

    fn level(&mut self) -> Consistency {
        match self.rng.random_range(0..3) {
            0 => Consistency::One,
            1 => Consistency::Quorum,
            _ => Consistency::All,
        }
    }

    /// One send of `add` through `node`, if it is up: what it tells.
    async fn send(&self, node: usize, add: &IdAdd, cl: Consistency) -> Option<Ended> {
        let n = self.cluster.node(node)?;
        let key = exact_key(add.key);
        let call = n.add_once(&key, add.delta, &add.id, cl);
        classify(&tokio::time::timeout(SEND_TIMEOUT, call).await.ok()?)
    }
}
