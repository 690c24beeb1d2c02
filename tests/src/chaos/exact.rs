//! Exactly-once adds under chaos: workers give every add an operation id
//! and retry it, with the same id and delta, through random nodes until it
//! is known: acknowledged, or refused for good. A retry through another
//! coordinator races the original still in flight, which is the point.
//! On purpose, too, some adds are sent through two different nodes at
//! once, and some are sent again through another node after their
//! acknowledgement (a client that never saw it): a correct cluster answers
//! those as duplicates, with the original value, and counts nothing.
//!
//! Every logical add is recorded once ([`IdAdd`]) with its final outcome
//! and what its duplicates answered, and judged exactly after healing by
//! [`crate::checker::exact`]: every node's value at ALL must equal the sum
//! of the distinct acknowledged ids. Retries keep going after the faults
//! end (the cluster is healed by then), at most [`SETTLE_RETRY_MAX`]; an
//! add that never knew is reported as a harness failure.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::once::OpId;
use tally_net::{Client, ClientError, Consistency, ErrorKind, Outcome};

use crate::checker::exact::{Ended, ExactReport, IdAdd, check_exact};

/// How long an add keeps being retried once the workload has stopped.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);
/// The wait before a retry: short, so retries overlap the original.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// The share of adds sent through two nodes at once.
const RACE_SHARE: f64 = 0.1;
/// The share of acknowledged adds sent again through another node.
const RESEND_SHARE: f64 = 0.05;

const LEVELS: [Consistency; 3] = [Consistency::One, Consistency::Quorum, Consistency::All];

/// Exact key `i`'s name.
pub(crate) fn exact_key(i: usize) -> Vec<u8> {
    format!("chaos-exact-{i}").into_bytes()
}

/// What the workers did: every logical add once.
#[derive(Debug, Default)]
pub(crate) struct ExactLog {
    /// The adds, each with its final outcome.
    pub(crate) adds: Vec<IdAdd>,
}

impl ExactLog {
    /// Merges another worker's log into this one.
    pub(crate) fn absorb(&mut self, other: ExactLog) {
        self.adds.extend(other.adds);
    }

    /// Adds, retries (attempts past the first), racing adds, adds sent again.
    pub(crate) fn counts(&self) -> (usize, usize, usize, usize) {
        let retries = self.adds.iter().map(|a| a.attempts.saturating_sub(1));
        (
            self.adds.len(),
            retries.map(|r| r as usize).sum(),
            self.adds.iter().filter(|a| a.raced).count(),
            self.adds.iter().filter(|a| a.resent).count(),
        )
    }
}

/// What one send of an add tells: known (acknowledged, refused for good,
/// or never to be known) or nothing (`None`: retry the same id).
fn classify(result: &Result<i64, ClientError>) -> Option<Ended> {
    let e = match result {
        Ok(v) => return Some(Ended::Acked(*v)),
        Err(e) => e,
    };
    match e.kind() {
        // Past the retention window: no retry will ever know.
        Some(ErrorKind::IdExpired) => Some(Ended::Unknown),
        Some(ErrorKind::Invalid | ErrorKind::Overflow | ErrorKind::IdConflict)
            if e.outcome() == Outcome::NotApplied =>
        {
            Some(Ended::Refused(e.to_string()))
        }
        // Unavailable, a node that cannot write, a timeout, a lost connection.
        _ => None,
    }
}

/// A node other than `avoid` (any node if there is no other).
fn other_node(rng: &mut SmallRng, nodes: usize, avoid: usize) -> usize {
    match nodes {
        0 | 1 => 0,
        n => (avoid + rng.random_range(1..n)) % n,
    }
}

/// A small delta, negatives included, never 0 (a 0 would hide a double count).
fn small_delta(rng: &mut SmallRng) -> i64 {
    match rng.random_range(-3..=8) {
        d if d >= 0 => d + 1,
        d => d,
    }
}

/// One worker, client id `chaos-exact-<seed>`: adds to `keys` exact keys
/// until `stop`, each until it knows.
pub(crate) async fn worker(
    addrs: Vec<SocketAddr>,
    keys: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> ExactLog {
    let mut sender = Sender {
        conns: addrs.iter().map(|_| None).collect(),
        addrs,
        rng: SmallRng::seed_from_u64(seed),
        stop,
    };
    let client = format!("chaos-exact-{seed:x}").into_bytes();
    let mut log = ExactLog::default();
    let mut seq = 0u64;
    while !sender.stop.load(Ordering::Acquire) {
        seq += 1;
        let add = IdAdd {
            key: sender.rng.random_range(0..keys),
            id: OpId::new(client.clone(), seq).expect("a short client id and a seq from 1"),
            delta: small_delta(&mut sender.rng),
            ended: Ended::Unknown,
            attempts: 0,
            raced: sender.rng.random_bool(RACE_SHARE),
            resent: false,
            again: Vec::new(),
        };
        log.adds.push(sender.add(add).await);
    }
    log
}

/// How a worker sends: its connections, its randomness, the stop flag.
struct Sender {
    addrs: Vec<SocketAddr>,
    conns: Vec<Option<Client>>,
    rng: SmallRng,
    stop: Arc<AtomicBool>,
}

impl Sender {
    /// Sends `add` until it knows (raced on its first send if it says
    /// so), then perhaps once more through another node; answers it with
    /// what it learned.
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
        if acked && !self.stop.load(Ordering::Acquire) && self.rng.random_bool(RESEND_SHARE) {
            add.resent = true;
            let (_, again, _) = self.until_known(&add, Some(node)).await;
            add.again.push(again);
        }
        add
    }

    /// Sends `add` through two different nodes at once: the node and
    /// outcome of the first send that knew, and what the other one knew.
    async fn race(&mut self, add: &IdAdd) -> (Option<(usize, Ended)>, Option<Ended>) {
        let a = self.rng.random_range(0..self.addrs.len());
        let b = other_node(&mut self.rng, self.addrs.len(), a);
        self.connect(a).await;
        self.connect(b).await;
        let (cl_a, cl_b) = (self.level(), self.level());
        let (ra, rb) = tokio::join!(
            send(self.conns[a].as_ref(), add, cl_a),
            send(self.conns[b].as_ref(), add, cl_b)
        );
        match (ra, rb) {
            (Some(known), twin) => (Some((a, known)), twin),
            (None, known) => (known.map(|k| (b, k)), None),
        }
    }

    /// Sends `add` through random nodes (never `avoid`) until one send
    /// knows: the node, the outcome, and the sends it took. Unknown (and
    /// node 0) if none knew within [`SETTLE_RETRY_MAX`] of the workload's end.
    async fn until_known(&mut self, add: &IdAdd, avoid: Option<usize>) -> (usize, Ended, u32) {
        let mut stopped_at: Option<Instant> = None;
        let mut attempts = 0;
        loop {
            if attempts > 0 {
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
            if self.stop.load(Ordering::Acquire) {
                let since = *stopped_at.get_or_insert_with(Instant::now);
                if since.elapsed() > SETTLE_RETRY_MAX {
                    return (0, Ended::Unknown, attempts);
                }
            }
            attempts += 1;
            let node = match avoid {
                Some(n) => other_node(&mut self.rng, self.addrs.len(), n),
                None => self.rng.random_range(0..self.addrs.len()),
            };
            self.connect(node).await;
            let cl = self.level();
            if let Some(ended) = send(self.conns[node].as_ref(), add, cl).await {
                return (node, ended, attempts);
            }
        }
    }

    /// A random consistency level.
    fn level(&mut self) -> Consistency {
        LEVELS[self.rng.random_range(0..LEVELS.len())]
    }

    /// (Re)connects to `node` if it has no open connection.
    async fn connect(&mut self, node: usize) {
        if self.conns[node].as_ref().is_none_or(|c| c.is_closed()) {
            self.conns[node] =
                super::secure::dial(self.addrs[node], tally_net::client::DEFAULT_TIMEOUT)
                    .await
                    .ok();
        }
    }
}

/// One send of `add` through `client`, if connected: what it tells.
async fn send(client: Option<&Client>, add: &IdAdd, cl: Consistency) -> Option<Ended> {
    let key = exact_key(add.key);
    classify(&client?.add_once(&key, b"", add.delta, &add.id, cl).await)
}

/// Reads every exact key at ALL through every node and judges them.
pub(crate) async fn check(addrs: &[SocketAddr], log: &ExactLog, keys: usize) -> ExactReport {
    let mut finals = Vec::new();
    let mut unread = Vec::new();
    for (node, addr) in addrs.iter().enumerate() {
        for key in 0..keys {
            match read_all(*addr, key).await {
                Ok(v) => finals.push((node, key, v)),
                Err(e) => unread.push(format!("exact key {key} via n{}: {e}", node + 1)),
            }
        }
    }
    let mut report = check_exact(&log.adds, keys, &finals);
    report.violations.extend(unread);
    report
}

/// Reads exact key `key` at ALL through `addr`, retrying a while.
async fn read_all(addr: SocketAddr, key: usize) -> Result<i64, String> {
    let c = super::secure::dial(addr, tally_net::client::DEFAULT_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let mut tries = 0;
    loop {
        match c.get(&exact_key(key), b"", Consistency::All).await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= 20 => return Err(format!("final read: {e}")),
            Err(_) => tries += 1,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use tally_net::wire::WireError;

    use super::*;

    fn server(e: WireError) -> Result<i64, ClientError> {
        Err(ClientError::Server(e))
    }

    #[test]
    fn a_send_knows_only_an_ack_or_a_refusal_for_good() {
        assert_eq!(classify(&Ok(-4)), Some(Ended::Acked(-4)));
        for kind in [
            ErrorKind::IdConflict,
            ErrorKind::Invalid,
            ErrorKind::Overflow,
        ] {
            let known = classify(&server(WireError::not_applied(kind, "no")));
            assert!(
                matches!(known, Some(Ended::Refused(_))),
                "{kind:?}: {known:?}"
            );
        }
        let expired = WireError::unknown(ErrorKind::IdExpired, "too old");
        assert_eq!(classify(&server(expired)), Some(Ended::Unknown));
        // Not applied this time, or perhaps applied: retry the same id.
        let retry = [
            WireError::not_applied(ErrorKind::Unavailable, "applier down"),
            WireError::not_applied(ErrorKind::Storage, "poisoned"),
            WireError::unknown(ErrorKind::Timeout, "slow"),
            WireError::unknown(ErrorKind::Invalid, "odd"),
        ];
        for e in retry {
            assert_eq!(classify(&server(e.clone())), None, "{e:?}");
        }
        assert_eq!(classify(&Err(ClientError::Closed("reset".into()))), None);
    }

    #[test]
    fn another_node_is_never_the_avoided_one() {
        let mut rng = SmallRng::seed_from_u64(3);
        for avoid in 0..3 {
            let picked: std::collections::BTreeSet<usize> =
                (0..100).map(|_| other_node(&mut rng, 3, avoid)).collect();
            assert_eq!(picked.len(), 2, "{picked:?}");
            assert!(!picked.contains(&avoid));
        }
        assert_eq!(other_node(&mut rng, 1, 0), 0);
    }
}
