//! Exactly-once adds under chaos: workers give every add an operation id
//! and retry it, with the same id, through random nodes until it is
//! acknowledged; some adds are sent through two nodes at once, and some
//! are sent again after their acknowledgement (a client that never saw
//! it), which must answer the original value and count nothing.
//!
//! The judgement is exact: after healing, every node's value of an exact
//! key at ALL must equal the sum of the deltas of the distinct ids added to
//! it. An add is retried until it knows, also after the faults end (the
//! cluster is healed by then), at most [`SETTLE_RETRY_MAX`]; one that
//! never knew makes the run unjudgeable, which is reported as such.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::once::OpId;
use tally_net::{Client, Consistency, Outcome};

/// How long an add keeps being retried once the workload has stopped.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);

/// Exact key `i`'s name.
pub(crate) fn exact_key(i: usize) -> Vec<u8> {
    format!("chaos-exact-{i}").into_bytes()
}

/// What one worker did.
#[derive(Debug, Default)]
pub(crate) struct ExactLog {
    /// Per key, the sum of the deltas of the ids acknowledged.
    pub(crate) sums: BTreeMap<usize, i64>,
    /// Adds made (each until acknowledged).
    pub(crate) adds: usize,
    /// Attempts past the first.
    pub(crate) retries: usize,
    /// Adds sent through two nodes at once.
    pub(crate) races: usize,
    /// Acknowledged adds sent again.
    pub(crate) resends: usize,
    /// What went wrong that the final values cannot show.
    pub(crate) violations: Vec<String>,
    /// Adds that never knew their outcome.
    pub(crate) unsettled: usize,
}

impl ExactLog {
    /// Merges another worker's log into this one.
    pub(crate) fn absorb(&mut self, other: ExactLog) {
        for (k, v) in other.sums {
            *self.sums.entry(k).or_default() += v;
        }
        self.adds += other.adds;
        self.retries += other.retries;
        self.races += other.races;
        self.resends += other.resends;
        self.violations.extend(other.violations);
        self.unsettled += other.unsettled;
    }
}

/// One worker, client id `chaos-exact-<seed>`: adds to `keys` exact keys until `stop`.
pub(crate) async fn worker(
    addrs: Vec<SocketAddr>,
    keys: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> ExactLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let client = format!("chaos-exact-{seed:x}").into_bytes();
    let mut log = ExactLog::default();
    let mut conns: Vec<Option<Client>> = addrs.iter().map(|_| None).collect();
    let mut seq = 0u64;
    while !stop.load(Ordering::Acquire) {
        seq += 1;
        let id = OpId::new(client.clone(), seq).expect("a valid id");
        let key = rng.random_range(0..keys);
        let delta = rng.random_range(-3..=9);
        if rng.random_bool(0.1) {
            race(
                addrs[rng.random_range(0..addrs.len())],
                key,
                delta,
                id.clone(),
            );
            log.races += 1;
        }
        log.adds += 1;
        let mut add = Add {
            key,
            delta,
            id: &id,
            conns: &mut conns,
            rng: &mut rng,
        };
        let Some(value) = add.until_known(&addrs, &stop, &mut log).await else {
            continue;
        };
        *log.sums.entry(key).or_default() += delta;
        if rng.random_bool(0.05) {
            log.resends += 1;
            let mut add = Add {
                key,
                delta,
                id: &id,
                conns: &mut conns,
                rng: &mut rng,
            };
            match add.until_known(&addrs, &stop, &mut log).await {
                Some(again) if again != value => log.violations.push(format!(
                    "id {id} answered {value}, then {again} when sent again"
                )),
                _ => {}
            }
        }
    }
    log
}

/// Sends the add once more through `addr`, at once, on its own.
fn race(addr: SocketAddr, key: usize, delta: i64, id: OpId) {
    tokio::spawn(async move {
        if let Ok(c) = Client::connect(addr).await {
            let _ = c
                .add_once(&exact_key(key), b"", delta, &id, Consistency::Quorum)
                .await;
        }
    });
}

/// One add with its id, and how it is sent.
struct Add<'a> {
    key: usize,
    delta: i64,
    id: &'a OpId,
    conns: &'a mut [Option<Client>],
    rng: &'a mut SmallRng,
}

impl Add<'_> {
    /// Sends the add through random nodes until it is acknowledged (its
    /// value) or certainly refused (`None`, logged); `None` too if it never
    /// knew within [`SETTLE_RETRY_MAX`] of the workload's end.
    async fn until_known(
        &mut self,
        addrs: &[SocketAddr],
        stop: &AtomicBool,
        log: &mut ExactLog,
    ) -> Option<i64> {
        let levels = [Consistency::One, Consistency::Quorum, Consistency::All];
        let mut stopped_at: Option<Instant> = None;
        let mut attempt = 0;
        loop {
            if attempt > 0 {
                log.retries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            attempt += 1;
            if stop.load(Ordering::Acquire) {
                let since = *stopped_at.get_or_insert_with(Instant::now);
                if since.elapsed() > SETTLE_RETRY_MAX {
                    log.unsettled += 1;
                    return None;
                }
            }
            let node = self.rng.random_range(0..addrs.len());
            if self.conns[node].as_ref().is_none_or(|c| c.is_closed()) {
                self.conns[node] = Client::connect(addrs[node]).await.ok();
            }
            let Some(c) = &self.conns[node] else { continue };
            let cl = levels[self.rng.random_range(0..levels.len())];
            let key = exact_key(self.key);
            match c.add_once(&key, b"", self.delta, self.id, cl).await {
                Ok(v) => return Some(v),
                // Certainly not applied, and never will be: it knows.
                Err(e) if e.outcome() == Outcome::NotApplied && !retryable(&e) => {
                    log.violations.push(format!("id {} refused: {e}", self.id));
                    return None;
                }
                Err(_) => {}
            }
        }
    }
}

/// Whether a not-applied error may go away (a node down or not writable).
fn retryable(e: &tally_net::ClientError) -> bool {
    use tally_net::ErrorKind;
    matches!(
        e.kind(),
        None | Some(ErrorKind::Unavailable | ErrorKind::Storage)
    )
}

/// Reads every exact key at ALL through every node and checks it equals
/// its sum; answers the violations, and each key's expected sum.
pub(crate) async fn check(
    addrs: &[SocketAddr],
    log: &ExactLog,
    keys: usize,
) -> (Vec<String>, Vec<(usize, i64)>) {
    let mut violations = log.violations.clone();
    if log.unsettled > 0 {
        violations.push(format!(
            "{} adds with ids never knew their outcome: the sums cannot be checked exactly",
            log.unsettled
        ));
    }
    let mut expected = Vec::new();
    for key in 0..keys {
        let want = log.sums.get(&key).copied().unwrap_or(0);
        expected.push((key, want));
        for (node, addr) in addrs.iter().enumerate() {
            match read_all(*addr, key).await {
                Ok(v) if v == want => {}
                Ok(v) => violations.push(format!(
                    "exact key {key} via n{}: {v}, the acknowledged ids sum to {want}",
                    node + 1
                )),
                Err(e) => violations.push(format!("exact key {key} via n{}: {e}", node + 1)),
            }
        }
    }
    (violations, expected)
}

async fn read_all(addr: SocketAddr, key: usize) -> Result<i64, String> {
    let c = Client::connect(addr).await.map_err(|e| e.to_string())?;
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
