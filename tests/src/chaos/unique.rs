//! Unique counters under chaos: workers add random members to a few
//! unique counters through random nodes, each add retried (through
//! another node) until it is acknowledged, and sometimes sent through two
//! nodes at once. Members come from a small space, so the same member is
//! added over and over, by racing workers and by retries.
//!
//! The judgement is exact: after healing, every node's count at ALL must
//! equal the number of distinct members added, and every added member must
//! be present. An add is safe to repeat whatever its outcome, so a worker
//! never stops at "outcome unknown": it retries until it knows, also after
//! the faults end (the cluster is healed by then), at most
//! [`SETTLE_RETRY_MAX`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::{Client, Consistency};

/// How long an add keeps being retried once the workload has stopped.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);
/// Half the members come from this few, so they repeat all the time...
const HOT_MEMBERS: u32 = 200;
/// ...and half from this many, so new ones keep coming in long runs.
const ALL_MEMBERS: u32 = 1_000_000;

/// The unique counter `i`'s name.
pub(crate) fn set_name(i: usize) -> Vec<u8> {
    format!("chaos-set-{i}").into_bytes()
}

/// What one worker did.
#[derive(Debug, Default)]
pub(crate) struct UniqueLog {
    /// Per counter, the members acknowledged.
    pub(crate) added: BTreeMap<usize, BTreeSet<String>>,
    /// Adds made (each until acknowledged).
    pub(crate) adds: usize,
    /// Attempts past the first.
    pub(crate) retries: usize,
    /// Adds sent through two nodes at once.
    pub(crate) races: usize,
    /// Adds that were never acknowledged (the run is then not exact).
    pub(crate) unsettled: usize,
}

impl UniqueLog {
    /// Merges another worker's log into this one.
    pub(crate) fn absorb(&mut self, other: UniqueLog) {
        for (set, members) in other.added {
            self.added.entry(set).or_default().extend(members);
        }
        self.adds += other.adds;
        self.retries += other.retries;
        self.races += other.races;
        self.unsettled += other.unsettled;
    }
}

/// One worker: adds members to `sets` counters until `stop`.
pub(crate) async fn worker(
    addrs: Vec<SocketAddr>,
    sets: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> UniqueLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut log = UniqueLog::default();
    let mut conns: Vec<Option<Client>> = addrs.iter().map(|_| None).collect();
    while !stop.load(Ordering::Acquire) {
        let set = rng.random_range(0..sets);
        let members: Vec<String> = (0..rng.random_range(1..4))
            .map(|_| {
                let space = if rng.random_bool(0.5) {
                    HOT_MEMBERS
                } else {
                    ALL_MEMBERS
                };
                format!("m{}", rng.random_range(0..space))
            })
            .collect();
        if rng.random_bool(0.1) {
            // A retry racing the original: the same add through another node at once.
            let other = rng.random_range(0..addrs.len());
            let (addr, set_b, members_b) = (addrs[other], set_name(set), members.clone());
            tokio::spawn(async move {
                if let Ok(c) = super::secure::dial(addr, tally_net::client::DEFAULT_TIMEOUT).await {
                    let refs: Vec<&[u8]> = members_b.iter().map(String::as_bytes).collect();
                    let _ = c.unique_add(&set_b, &refs, Consistency::Quorum).await;
                }
            });
            log.races += 1;
        }
        log.adds += 1;
        if add_until_acked(&addrs, &mut conns, &mut rng, set, &members, &stop, &mut log).await {
            log.added.entry(set).or_default().extend(members);
        } else {
            log.unsettled += 1;
        }
    }
    log
}

/// Adds `members` through random nodes until one acknowledges it; false
/// if none did within [`SETTLE_RETRY_MAX`] of the workload's end.
async fn add_until_acked(
    addrs: &[SocketAddr],
    conns: &mut [Option<Client>],
    rng: &mut SmallRng,
    set: usize,
    members: &[String],
    stop: &AtomicBool,
    log: &mut UniqueLog,
) -> bool {
    let refs: Vec<&[u8]> = members.iter().map(String::as_bytes).collect();
    let levels = [Consistency::One, Consistency::Quorum, Consistency::All];
    let mut stopped_at: Option<Instant> = None;
    for attempt in 0.. {
        if attempt > 0 {
            log.retries += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if stop.load(Ordering::Acquire) {
            let since = *stopped_at.get_or_insert_with(Instant::now);
            if since.elapsed() > SETTLE_RETRY_MAX {
                return false;
            }
        }
        let node = rng.random_range(0..addrs.len());
        if conns[node].as_ref().is_none_or(|c| c.is_closed()) {
            conns[node] = super::secure::dial(addrs[node], tally_net::client::DEFAULT_TIMEOUT)
                .await
                .ok();
        }
        let Some(c) = &conns[node] else { continue };
        let cl = levels[rng.random_range(0..levels.len())];
        if c.unique_add(&set_name(set), &refs, cl).await.is_ok() {
            return true;
        }
    }
    unreachable!("the loop returns")
}

/// Reads every counter at ALL through every node and checks it exactly;
/// answers the violations, and each counter's expected count.
pub(crate) async fn check(
    addrs: &[SocketAddr],
    log: &UniqueLog,
    sets: usize,
) -> (Vec<String>, Vec<(usize, usize)>) {
    let mut violations = Vec::new();
    if log.unsettled > 0 {
        violations.push(format!(
            "{} unique adds were never acknowledged: the counts cannot be checked exactly",
            log.unsettled
        ));
    }
    let mut expected = Vec::new();
    for set in 0..sets {
        let want = log.added.get(&set).map_or(0, BTreeSet::len);
        expected.push((set, want));
        for (node, addr) in addrs.iter().enumerate() {
            match read_exactly(*addr, set, log).await {
                Ok((count, missing)) => {
                    if count != want as i64 {
                        violations.push(format!(
                            "unique counter {set} via n{}: count {count}, {want} distinct members were added",
                            node + 1
                        ));
                    }
                    if let Some(m) = missing {
                        violations.push(format!(
                            "unique counter {set} via n{}: member {m} was added and is absent",
                            node + 1
                        ));
                    }
                }
                Err(e) => violations.push(format!("unique counter {set} via n{}: {e}", node + 1)),
            }
        }
    }
    (violations, expected)
}

/// A counter's count at ALL through `addr`, and a member added but absent.
async fn read_exactly(
    addr: SocketAddr,
    set: usize,
    log: &UniqueLog,
) -> Result<(i64, Option<String>), String> {
    let c = super::secure::dial(addr, tally_net::client::DEFAULT_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let name = set_name(set);
    let count = asked_again("final count", || c.unique_count(&name, Consistency::All)).await?;
    let members: Vec<&String> = log.added.get(&set).into_iter().flatten().collect();
    for chunk in members.chunks(500) {
        let refs: Vec<&[u8]> = chunk.iter().map(|m| m.as_bytes()).collect();
        let flags = asked_again("final membership", || {
            c.unique_contains(&name, &refs, Consistency::All)
        })
        .await?;
        if let Some(i) = flags.iter().position(|f| !f) {
            return Ok((count, Some(chunk[i].clone())));
        }
    }
    Ok((count, None))
}

/// A final read, asked again after a failure (a loaded machine, a peer
/// still reconnecting: no answer is not a wrong answer) up to 20 times,
/// 250 ms apart; the last failure, named `what`, if none answers.
async fn asked_again<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut read: impl FnMut() -> F,
) -> Result<T, String> {
    let mut tries = 0;
    loop {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= 20 => return Err(format!("{what}: {e}")),
            Err(_) => tries += 1,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
