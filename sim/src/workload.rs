//! What a run does: clients counting through any node that is up (adds,
//! reads, and now and then a reset, SET or EXPIRE of one key), and a
//! nemesis that crashes and restarts nodes, cuts links and makes the
//! network lossy, each choice drawn from the run's seed.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::wire::{
    Change, ClientOp, ClientReply, Consistency, Presence, Ttl, When, WireError, WireKey,
};
use tally_node::Node;
use tally_tests::checker::{Kind, Op, Outcome};

use crate::cluster::Cluster;
use crate::disk::Fault;
use crate::net::{Faults, Net};
use crate::world::{SimWorld, Stream, stream};
use crate::{repairs, topology, trace};

/// How long a client waits for an answer before it counts the operation
/// unknown.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The counters a run's clients count.
pub const KEYS: usize = 6;
/// The counter whose epoch clients also change (reset, SET, EXPIRE).
pub const RESET_KEY: usize = KEYS - 1;
/// The share of the reset key's operations that change its epoch.
const CHANGE_SHARE: f64 = 0.4;

/// The counter of key index `k`.
pub fn key(k: usize) -> WireKey {
    WireKey::new(format!("sim:{k}").as_bytes(), b"")
}

/// Nanoseconds of simulated time since the run began.
pub fn now_ns() -> u64 {
    u64::try_from(SimWorld::elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// What the history records of a result.
fn outcome(result: &Result<i64, WireError>) -> Outcome {
    match result {
        Ok(v) => Outcome::Ok(*v),
        Err(e) if e.outcome == tally_net::Outcome::NotApplied => Outcome::Fail,
        Err(_) => Outcome::Unknown,
    }
}

/// One client, until `until`: an add or a read of a random counter at a
/// random level (`SERIAL` too, for reads) through a random node that is up, then a pause.
pub async fn client(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(stream(seed, Stream::Client(id as u64)));
    let mut history = Vec::new();
    while tally_world::Instant::now() < until {
        let pause = Duration::from_millis(rng.random_range(5..60));
        tokio::time::sleep(pause).await;
        let n = rng.random_range(0..cluster.len());
        let Some(node) = cluster.serving(n) else {
            continue;
        };
        let (k, kind) = choose(&mut rng);
        let cl = match (rng.random_range(0..5), kind) {
            (0, _) => Consistency::One,
            (1 | 2, _) => Consistency::Quorum,
            // A read that has a majority hold what it answers first.
            (4, Kind::Read) => Consistency::Serial,
            (4, _) => Consistency::Quorum,
            _ => Consistency::All,
        };
        let invoke_ns = now_ns();
        let kind = match kind {
            Kind::Expire { at_ns } => Kind::Expire {
                at_ns: invoke_ns + at_ns,
            },
            kind => kind,
        };
        let call = call(&node, k, kind, cl);
        let result = match tokio::time::timeout(CLIENT_TIMEOUT, call).await {
            Ok(r) => r,
            Err(_) => Err(WireError::new(
                tally_net::wire::ErrorKind::Timeout,
                "no answer in time",
            )),
        };
        drop(node);
        let op = Op {
            process: id,
            key: k,
            kind,
            cl,
            node: n,
            invoke_ns,
            complete_ns: now_ns(),
            outcome: outcome(&result),
        };
        trace!("client {id}: {op}");
        history.push(op);
    }
    history
}

/// The next operation: an add (60%) or a read of any key, or, on the
/// reset key, often a change of its epoch instead: a reset, a SET, or (as
/// often as both) an EXPIRE a fraction of a second ahead (`at_ns` is its
/// time to live here). The changes go to the reset key only: the
/// checker's bounds on a key weaken after one.
fn choose(rng: &mut SmallRng) -> (usize, Kind) {
    let k = rng.random_range(0..KEYS);
    if k == RESET_KEY && rng.random_bool(CHANGE_SHARE) {
        let kind = match rng.random_range(0..4) {
            0 => Kind::Reset,
            1 => Kind::Set(rng.random_range(-1_000..=1_000)),
            _ => Kind::Expire {
                at_ns: rng.random_range(200..=1_500) * 1_000_000,
            },
        };
        return (k, kind);
    }
    let kind = match rng.random_bool(0.6) {
        true => Kind::Add(rng.random_range(-3..=9)),
        false => Kind::Read,
    };
    (k, kind)
}

/// Runs `kind` on counter `k` through `node`, as a native client does
/// (`Node::execute`: its key in database 0's current keyspace, which a
/// flush moves on): the value an add or read answered, 0 for a reset or
/// SET, whether an EXPIRE applied.
async fn call(node: &Node, k: usize, kind: Kind, cl: Consistency) -> Result<i64, WireError> {
    let key = key(k);
    let op = match kind {
        Kind::Add(delta) => ClientOp::Add { key, delta, cl },
        Kind::Read => ClientOp::Get { key, cl },
        Kind::Reset => ClientOp::Reset { key, cl },
        Kind::Set(value) => {
            let change = Change::Set {
                value,
                ttl: Ttl::Clear,
                only: Presence::Any,
            };
            ClientOp::Change { key, change, cl }
        }
        Kind::Expire { at_ns } => {
            let ttl_ms = at_ns.saturating_sub(now_ns()) / 1_000_000;
            let change = Change::Expire {
                at_ms: tally_world::wall_ms() + ttl_ms,
                only: When::Always,
            };
            ClientOp::Change { key, change, cl }
        }
    };
    match node.execute(op).await? {
        ClientReply::Value(v) => Ok(v),
        ClientReply::Done => Ok(0),
        ClientReply::Changed(done) if matches!(kind, Kind::Expire { .. }) => {
            Ok(i64::from(done.applied))
        }
        ClientReply::Changed(_) => Ok(0),
        other => Err(WireError::new(
            tally_net::wire::ErrorKind::Internal,
            format!("{kind:?} answered {other:?}"),
        )),
    }
}

/// Faults until `until`, every one healed by then: a crash (of the
/// process, or a power cut that loses what was not fsync'd) and restart;
/// a disk fault ([`disk`]: slow, stalled until a crash, full, failing);
/// a node cut off (one way or both); a node paused (as by SIGSTOP); a
/// lossy, slow network for a while;
/// a ring change (a spare joins, a member is decommissioned); a repair;
/// a fold. Answers what went wrong that no client sees (a node that did
/// not start, a fold that left retired shards).
pub async fn nemesis(
    cluster: Arc<Cluster>,
    net: Arc<Net>,
    seed: u64,
    until: tally_world::Instant,
) -> Vec<String> {
    let mut findings = Vec::new();
    let mut rng = SmallRng::seed_from_u64(stream(seed, Stream::Nemesis));
    loop {
        let calm = Duration::from_millis(rng.random_range(500..4_000));
        tokio::time::sleep(calm).await;
        let span = Duration::from_millis(rng.random_range(300..6_000));
        if tally_world::Instant::now() + span >= until {
            return findings;
        }
        let members = cluster.membership().members;
        let n = members[rng.random_range(0..members.len())];
        let which = rng.random_range(0..10);
        match which {
            0 => {
                findings.extend(crash(&cluster, n, rng.random_bool(0.5)));
                tokio::time::sleep(span).await;
                findings.extend(restart(&cluster, n).await.err());
            }
            1 | 7 | 8 => findings.extend(disk(&cluster, n, which, span, &mut rng).await),
            2 => {
                let both = rng.random_bool(0.5);
                trace!("n{} cut off{}", n + 1, if both { "" } else { " one way" });
                net.cut_off(n, (0..cluster.len()).filter(|&m| m != n), both);
                tokio::time::sleep(span).await;
                trace!("links healed");
                net.heal();
            }
            3 => {
                cluster.pause(n, true);
                tokio::time::sleep(span).await;
                cluster.pause(n, false);
            }
            5 => {
                let (join, pick) = (rng.random_bool(0.5), rng.random_range(0..members.len()));
                findings.extend(topology::change(&cluster, join, pick).await.err());
            }
            6 => {
                // Refused while a replica is down, as it should be.
                let _ = repairs::repair(&cluster, n).await;
            }
            9 => findings.extend(repairs::fold(&cluster, n).await),
            _ => {
                let faults = Faults {
                    lose: rng.random_range(0.0..0.1),
                    repeat: rng.random_range(0.0..0.2),
                    delay_min: Duration::from_micros(100),
                    delay_max: Duration::from_millis(rng.random_range(1..80)),
                };
                trace!("network lossy: {faults:?}");
                net.set_faults(faults);
                tokio::time::sleep(span).await;
                trace!("network calm");
                net.set_faults(Faults::calm());
            }
        }
    }
}

/// Disk fault `which` on node `n` for about `span`:
/// - 1: the disk stops taking writes: a slow one, or one that stops
///   until the crash that loses what the node held in memory only;
/// - 7: full, then room again: the node refuses writes meanwhile, and
///   takes them again by itself;
/// - 8: every change fails (an fsync that failed forgets its writes),
///   until the node is stopped.
///
/// Answers what went wrong that no client sees.
async fn disk(
    cluster: &Cluster,
    n: usize,
    which: u32,
    span: Duration,
    rng: &mut SmallRng,
) -> Vec<String> {
    let mut findings = Vec::new();
    match which {
        7 => {
            cluster.disk_fault(n, Some(Fault::Full));
            tokio::time::sleep(span).await;
            cluster.disk_fault(n, None);
            return findings;
        }
        8 => {
            cluster.disk_fault(n, Some(Fault::Failing));
            tokio::time::sleep(span / 4).await;
            findings.extend(crash(cluster, n, rng.random_bool(0.5)));
            cluster.disk_fault(n, None);
        }
        _ => {
            cluster.stall(n, true);
            tokio::time::sleep(span / 4).await;
            if rng.random_bool(0.5) {
                cluster.stall(n, false);
                return findings;
            }
            findings.extend(crash(cluster, n, rng.random_bool(0.5)));
        }
    }
    tokio::time::sleep(span).await;
    findings.extend(restart(cluster, n).await.err());
    findings
}

/// Kills node `n`'s process, or cuts its `power`; why its disk could
/// not be cut back.
fn crash(cluster: &Cluster, n: usize, power: bool) -> Option<String> {
    match power {
        true => cluster.power_cut(n).err().map(|e| format!("{e:#}")),
        false => {
            cluster.crash(n);
            None
        }
    }
}

/// Starts node `n` again if it is down; why it could not.
pub async fn restart(cluster: &Cluster, n: usize) -> Result<(), String> {
    if cluster.is_up(n) {
        return Ok(());
    }
    cluster.start(n).await.map_err(|e| {
        let why = format!("n{} does not start: {e:#}", n + 1);
        trace!("{why}");
        why
    })
}
