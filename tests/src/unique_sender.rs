//! How a unique worker adds members, whatever carries the adds (a client
//! connection in the chaos run, a node's own call in the simulation): it
//! adds random members to a few unique counters through random nodes,
//! each add retried (through another node) until it is acknowledged, and
//! sometimes sent through two nodes at once. Members come from a small
//! space, so the same member is added over and over, by racing workers
//! and by retries.
//!
//! The judgement ([`check`]) is exact: after healing, every node's count
//! at ALL must equal the number of distinct members added, and every
//! added member must be present. An add is safe to repeat whatever its
//! outcome, so a worker never stops at "outcome unknown": it retries
//! until it knows, also after the workload ends, until its carrier says
//! to give up.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::Consistency;

/// Half the members come from this few, so they repeat all the time...
const HOT_MEMBERS: u32 = 200;
/// ...and half from this many, so new ones keep coming in long runs.
const ALL_MEMBERS: u32 = 1_000_000;
/// The share of adds sent through two nodes at once.
const RACE_SHARE: f64 = 0.1;
/// Final reads asked again after a failure, and the wait between.
const FINAL_READ_TRIES: u32 = 20;
const FINAL_READ_PAUSE: Duration = Duration::from_millis(250);

const LEVELS: [Consistency; 3] = [Consistency::One, Consistency::Quorum, Consistency::All];

/// How a worker reaches the nodes. Counters are named by their index.
pub trait Sets {
    /// How many nodes it may send through.
    fn count(&self) -> usize;

    /// Gets ready to send through `node` (connects, if it has to).
    fn ready(&mut self, node: usize) -> impl Future<Output = ()>;

    /// One add of `members` to counter `set` through `node` at `cl`:
    /// whether the node acknowledged it.
    fn add(
        &self,
        node: usize,
        set: usize,
        members: &[String],
        cl: Consistency,
    ) -> impl Future<Output = bool>;

    /// The same add through `node` beside the worker's own, at QUORUM; its
    /// answer is not waited for.
    fn race(&self, node: usize, set: usize, members: Vec<String>);

    /// The wait before the next add (`pause`, drawn by the worker, or none).
    fn think(&self, pause: Duration) -> impl Future<Output = ()>;

    /// Whether the workload has ended: no new add is made.
    fn stopped(&self) -> bool;

    /// Whether an add not yet acknowledged must be given up (the workload
    /// ended long enough ago).
    fn give_up(&mut self) -> bool;

    /// The wait before a retry.
    fn backoff(&self) -> impl Future<Output = ()>;
}

/// What workers did.
#[derive(Debug, Default)]
pub struct UniqueLog {
    /// Per counter, the members acknowledged.
    pub added: BTreeMap<usize, BTreeSet<String>>,
    /// Adds made (each until acknowledged).
    pub adds: usize,
    /// Attempts past the first.
    pub retries: usize,
    /// Adds sent through two nodes at once.
    pub races: usize,
    /// Adds that were never acknowledged (the run is then not exact).
    pub unsettled: usize,
}

impl UniqueLog {
    /// Merges another worker's log into this one.
    pub fn absorb(&mut self, other: UniqueLog) {
        for (set, members) in other.added {
            self.added.entry(set).or_default().extend(members);
        }
        self.adds += other.adds;
        self.retries += other.retries;
        self.races += other.races;
        self.unsettled += other.unsettled;
    }
}

/// One worker: adds members to `counters` counters through `sets` until
/// they say the workload stopped, its choices drawn from `seed`.
pub async fn worker<S: Sets>(sets: &mut S, counters: usize, seed: u64) -> UniqueLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut log = UniqueLog::default();
    while !sets.stopped() {
        sets.think(Duration::from_millis(rng.random_range(5..60)))
            .await;
        let set = rng.random_range(0..counters);
        let members: Vec<String> = (0..rng.random_range(1..4))
            .map(|_| {
                let space = match rng.random_bool(0.5) {
                    true => HOT_MEMBERS,
                    false => ALL_MEMBERS,
                };
                format!("m{}", rng.random_range(0..space))
            })
            .collect();
        if rng.random_bool(RACE_SHARE) {
            let other = rng.random_range(0..sets.count());
            sets.race(other, set, members.clone());
            log.races += 1;
        }
        log.adds += 1;
        match add_until_acked(sets, &mut rng, set, &members, &mut log).await {
            true => log.added.entry(set).or_default().extend(members),
            false => log.unsettled += 1,
        }
    }
    log
}

/// Adds `members` through random nodes at random levels until one
/// acknowledges it; false if `sets` said to give up first.
async fn add_until_acked<S: Sets>(
    sets: &mut S,
    rng: &mut SmallRng,
    set: usize,
    members: &[String],
    log: &mut UniqueLog,
) -> bool {
    for attempt in 0.. {
        if attempt > 0 {
            log.retries += 1;
            sets.backoff().await;
        }
        if sets.give_up() {
            return false;
        }
        let node = rng.random_range(0..sets.count());
        sets.ready(node).await;
        let cl = LEVELS[rng.random_range(0..LEVELS.len())];
        if sets.add(node, set, members, cl).await {
            return true;
        }
    }
    unreachable!("the loop returns")
}

/// How the checker reads the counters at the end, at ALL.
pub trait Counts {
    /// Counter `set`'s count through `node`.
    fn count(&self, node: usize, set: usize) -> impl Future<Output = Result<i64, String>>;

    /// Whether each of `members` is in counter `set`, through `node`.
    fn contains(
        &self,
        node: usize,
        set: usize,
        members: &[&String],
    ) -> impl Future<Output = Result<Vec<bool>, String>>;

    /// The wait before a final read is asked again.
    fn pause(&self, d: Duration) -> impl Future<Output = ()>;
}

/// Reads every counter through each of `nodes` and checks it exactly;
/// answers the violations, and each counter's expected count.
pub async fn check<C: Counts>(
    counts: &C,
    nodes: &[usize],
    log: &UniqueLog,
    counters: usize,
) -> (Vec<String>, Vec<(usize, usize)>) {
    let mut violations = Vec::new();
    if log.unsettled > 0 {
        violations.push(format!(
            "{} unique adds were never acknowledged: the counts cannot be checked exactly",
            log.unsettled
        ));
    }
    let mut expected = Vec::new();
    for set in 0..counters {
        let want = log.added.get(&set).map_or(0, BTreeSet::len);
        expected.push((set, want));
        for &node in nodes {
            let at = format!("unique counter {set} via n{}", node + 1);
            match read_exactly(counts, node, set, log).await {
                Ok((count, missing)) => {
                    if count != want as i64 {
                        violations.push(format!(
                            "{at}: count {count}, {want} distinct members were added"
                        ));
                    }
                    if let Some(m) = missing {
                        violations.push(format!("{at}: member {m} was added and is absent"));
                    }
                }
                Err(e) => violations.push(format!("{at}: {e}")),
            }
        }
    }
    (violations, expected)
}

/// A counter's count through `node`, and a member added but absent.
async fn read_exactly<C: Counts>(
    counts: &C,
    node: usize,
    set: usize,
    log: &UniqueLog,
) -> Result<(i64, Option<String>), String> {
    let count = asked_again(counts, "final count", || counts.count(node, set)).await?;
    let members: Vec<&String> = log.added.get(&set).into_iter().flatten().collect();
    for chunk in members.chunks(500) {
        let flags = asked_again(counts, "final membership", || {
            counts.contains(node, set, chunk)
        })
        .await?;
        if let Some(i) = flags.iter().position(|f| !f) {
            return Ok((count, Some(chunk[i].clone())));
        }
    }
    Ok((count, None))
}

/// A final read, asked again after a failure (a loaded machine, a peer
/// still reconnecting: no answer is not a wrong answer); the last
/// failure, named `what`, if none answers.
async fn asked_again<C: Counts, T, F: Future<Output = Result<T, String>>>(
    counts: &C,
    what: &str,
    mut read: impl FnMut() -> F,
) -> Result<T, String> {
    let mut tries = 0;
    loop {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= FINAL_READ_TRIES => return Err(format!("{what}: {e}")),
            Err(_) => tries += 1,
        }
        counts.pause(FINAL_READ_PAUSE).await;
    }
}
