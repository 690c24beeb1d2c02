//! CQL increments under chaos: workers add to a counter table,
//! `chaos.counters (k int PRIMARY KEY, c counter)`, through random
//! nodes' CQL ports at every level CQL has and Tally serves.
//!
//! Adds to the first keys carry an operation id in the custom payload
//! (`tally-op-id`) and are retried, with the same id, through random
//! nodes until known, as the chaos run's exact workers retry native
//! adds: they are judged exactly ([`crate::checker::exact`]), every
//! node's value at ALL equal to the sum of the distinct acknowledged
//! ids. Adds to the other keys carry none and are sent once: a key's
//! value at ALL must lie between the sum of its acknowledged adds and
//! that sum with every add whose outcome stayed unknown (their deltas
//! are positive).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::cql::{CqlClient, CqlError, Prepared};
use tally_net::once::OpId;
use tally_world::Instant;

use super::{Dial, reconnect};
use crate::checker::exact::{Ended, ExactLog, ExactReport, IdAdd, check_exact};

/// How long an add with an id keeps being retried once the workload has
/// stopped.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);
/// The wait before a retry.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// The levels, by their codes: ONE, TWO, THREE, QUORUM, ALL,
/// LOCAL_QUORUM, EACH_QUORUM, LOCAL_ONE.
const LEVELS: [u16; 8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x0A];
/// Share of adds that carry an id.
const WITH_ID_SHARE: f64 = 0.5;

const ADD: &str = "UPDATE chaos.counters SET c = c + ? WHERE k = ?";
const READ: &str = "SELECT c FROM chaos.counters WHERE k = ?";

/// What the CQL workers did.
#[derive(Debug, Default)]
pub struct CqlLog {
    /// The adds with ids, each once with its final outcome.
    pub exact: ExactLog,
    /// Per key without ids: the acknowledged sum, and the unknown sum.
    pub plain: HashMap<usize, (i64, i64)>,
    /// Adds without ids sent.
    pub plain_adds: usize,
}

impl CqlLog {
    /// Merges another worker's log into this one.
    pub fn absorb(&mut self, other: CqlLog) {
        self.exact.absorb(other.exact);
        self.plain_adds += other.plain_adds;
        for (k, (acked, unknown)) in other.plain {
            let e = self.plain.entry(k).or_default();
            e.0 += acked;
            e.1 += unknown;
        }
    }
}

/// Makes the table (replication factor `rf`) through the first node that
/// answers; retries while the cluster enables CQL tables.
pub async fn setup(dial: &dyn Dial, rf: usize) -> Result<(), String> {
    let table = "CREATE TABLE IF NOT EXISTS chaos.counters (k int PRIMARY KEY, c counter)";
    super::make_table(dial, rf, table).await
}

/// A worker's connection to one node, with its statements prepared.
struct Node {
    client: CqlClient,
    add: Prepared,
    read: Prepared,
}

/// A worker's connections, made (again) as needed.
struct Conns<'a> {
    dial: &'a dyn Dial,
    nodes: Vec<Option<Node>>,
}

impl Conns<'_> {
    fn new(dial: &dyn Dial) -> Conns<'_> {
        let nodes = (0..dial.nodes()).map(|_| None).collect();
        Conns { dial, nodes }
    }

    /// Node `n`'s connection, made if it has none.
    async fn node(&mut self, n: usize) -> Option<&Node> {
        if self.nodes[n].is_none() {
            let client = self.dial.dial(n).await.ok()?;
            let add = client.prepare(ADD).await.ok()?;
            let read = client.prepare(READ).await.ok()?;
            self.nodes[n] = Some(Node { client, add, read });
        }
        self.nodes[n].as_ref()
    }

    /// Sends an add of `delta` to key `k` at `level` through node `n`
    /// (with `id` in the payload if given); answers what it tells:
    /// `Some` known (acknowledged, refused for good), `None` not.
    async fn add(
        &mut self,
        n: usize,
        (k, delta): (usize, i64),
        id: Option<&OpId>,
        level: u16,
    ) -> Option<Ended> {
        let payload = id.map(|id| [&id.client[..], &id.seq.to_be_bytes()].concat());
        let node = self.node(n).await?;
        let (d, key) = (delta.to_be_bytes(), (k as i32).to_be_bytes());
        let done = node
            .client
            .execute_on(
                0,
                &node.add,
                &[&d, &key],
                level,
                payload.as_deref().map(|p| ("tally-op-id", p)),
            )
            .await;
        let known = classify(&done);
        if reconnect(&done) {
            self.nodes[n] = None;
        }
        known
    }
}

/// What one send tells: known or not (`None`: retry the same id).
fn classify(done: &Result<Vec<u8>, CqlError>) -> Option<Ended> {
    match done {
        // An UPDATE answers no value.
        Ok(_) => Some(Ended::Acked(0)),
        Err(CqlError::Server {
            code: 0x2200,
            message,
        }) => Some(Ended::Refused(message.clone())),
        // Unavailable, a write timeout or failure, a lost connection.
        Err(_) => None,
    }
}

/// One worker: adds to keys `0..keys` (with ids) and `keys..2 * keys`
/// (without) until `stop`.
pub async fn worker(dial: Arc<dyn Dial>, keys: usize, seed: u64, stop: Arc<AtomicBool>) -> CqlLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut conns = Conns::new(&*dial);
    let client = format!("chaos-cql-{seed:x}").into_bytes();
    let mut log = CqlLog::default();
    let mut seq = 0u64;
    while !stop.load(Ordering::Acquire) {
        super::think(&*dial).await;
        let delta = rng.random_range(1..=5);
        if !rng.random_bool(WITH_ID_SHARE) {
            let k = keys + rng.random_range(0..keys);
            let n = rng.random_range(0..conns.dial.nodes());
            let level = LEVELS[rng.random_range(0..LEVELS.len())];
            log.plain_adds += 1;
            let e = log.plain.entry(k).or_default();
            match conns.add(n, (k, delta), None, level).await {
                Some(Ended::Acked(_)) => e.0 += delta,
                Some(_) => {}
                None => e.1 += delta,
            }
            continue;
        }
        seq += 1;
        let mut add = IdAdd {
            key: rng.random_range(0..keys),
            id: OpId::new(client.clone(), seq).expect("a short client id and a seq from 1"),
            delta,
            ended: Ended::Unknown,
            attempts: 0,
            raced: false,
            resent: false,
            again: Vec::new(),
        };
        let mut stopped_at: Option<Instant> = None;
        loop {
            if stop.load(Ordering::Acquire)
                && stopped_at.get_or_insert_with(Instant::now).elapsed() > SETTLE_RETRY_MAX
            {
                break;
            }
            add.attempts += 1;
            let n = rng.random_range(0..conns.dial.nodes());
            let level = LEVELS[rng.random_range(0..LEVELS.len())];
            if let Some(ended) = conns.add(n, (add.key, delta), Some(&add.id), level).await {
                add.ended = ended;
                break;
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
        log.exact.adds.push(add);
    }
    log
}

/// Reads every key at ALL through every node and judges them: the keys
/// with ids exactly, the others within their bounds.
pub async fn check(dial: &dyn Dial, log: &CqlLog, keys: usize) -> ExactReport {
    let mut conns = Conns::new(dial);
    let (mut finals, mut violations) = (Vec::new(), Vec::new());
    for n in 0..dial.nodes() {
        for k in 0..2 * keys {
            match read_all(&mut conns, n, k).await {
                Ok(v) if k < keys => finals.push((n, k, v)),
                Ok(v) => {
                    let (acked, unknown) = log.plain.get(&k).copied().unwrap_or_default();
                    if !(acked..=acked + unknown).contains(&v) {
                        violations.push(format!(
                            "CQL key {k} via n{}: read {v} at ALL, expected within \
                             [{acked}, {}]",
                            n + 1,
                            acked + unknown
                        ));
                    }
                }
                Err(e) => violations.push(format!("CQL key {k} via n{}: {e}", n + 1)),
            }
        }
    }
    let mut report = check_exact(&log.exact.adds, keys, &finals);
    report.violations = report
        .violations
        .into_iter()
        .map(|v| format!("CQL {v}"))
        .chain(violations)
        .collect();
    report
}

/// Key `k`'s value at ALL through node `n` (0 when it has no row),
/// retrying a while.
async fn read_all(conns: &mut Conns<'_>, n: usize, k: usize) -> Result<i64, String> {
    let mut last = String::new();
    for _ in 0..20 {
        if let Some(node) = conns.node(n).await {
            let key = (k as i32).to_be_bytes();
            match node
                .client
                .execute_on(0, &node.read, &[&key], 0x05, None)
                .await
            {
                Ok(body) => return Ok(tally_net::cql::first_bigint(&body).unwrap_or(0)),
                Err(e) => last = e.to_string(),
            }
            conns.nodes[n] = None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("final read: {last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_knows_only_an_ack_or_a_refusal_for_good() {
        assert_eq!(classify(&Ok(Vec::new())), Some(Ended::Acked(0)));
        let invalid = CqlError::Server {
            code: 0x2200,
            message: "no".into(),
        };
        assert!(matches!(classify(&Err(invalid)), Some(Ended::Refused(_))));
        for code in [0x1000, 0x1100, 0x1500, 0x0000, 0x2500] {
            let e = CqlError::Server {
                code,
                message: String::new(),
            };
            assert_eq!(classify(&Err(e)), None, "{code:#x}");
        }
        assert_eq!(classify(&Err(CqlError::Closed("reset".into()))), None);
    }
}
