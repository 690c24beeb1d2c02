//! Topology faults: nodes join, are decommissioned and are removed while
//! the workload runs (see `tally_node::cluster::topology`).
//!
//! The run keeps the ring between its first size and that plus the spare
//! nodes: a `join` starts the next spare (a `[[node]]` with `join = true`)
//! with `--join` and waits until the ring has it as a member; a
//! `decommission` or `removenode` takes a member out while there are more
//! than the replication factor (else it joins instead). A decommissioned
//! node is stopped once it has left; a removed one is killed first, as a
//! dead machine. Node ids are never reused, so each join takes a spare.
//!
//! A change that cannot run now (a member restarted by the last fault is
//! not seen up yet) is tried again for up to a minute: a change left half
//! way would block every later one.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rand::Rng;
use rand::rngs::SmallRng;
use serde_json::Value;
use tally_net::wire::{ClientOp, ClientReply, WireFolded};

use crate::Cluster;

/// How long one change may take, retries included.
const CHANGE_DEADLINE: Duration = Duration::from_secs(90);

/// Which nodes are members, which are spares, which are gone.
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    /// Members of the ring, running (or held down by a fault).
    pub(crate) members: Vec<usize>,
    /// Configured with `join = true`, never started.
    pub(crate) spares: Vec<usize>,
    /// Left the ring; stopped for good.
    pub(crate) gone: Vec<usize>,
    /// The replication factor: the fewest members.
    pub(crate) rf: usize,
}

/// The topology faults done: joins, decommissions, removals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Nodes that joined.
    pub joined: usize,
    /// Nodes decommissioned.
    pub decommissioned: usize,
    /// Nodes removed while dead.
    pub removed: usize,
    /// Cleanups that ran (the `cleanup` operation).
    pub cleanups: usize,
    /// Cells they dropped.
    pub cells_dropped: u64,
    /// Folds that agreed a generation (the `fold` operation, and the one
    /// after the run).
    pub folds: usize,
    /// Retired incarnations they folded.
    pub folded: usize,
    /// Members wiped and replaced (the `replace` fault).
    pub replaced: usize,
    /// The widest cell the last fold left on any member.
    pub widest: u64,
}

impl Membership {
    pub(crate) fn new(first: usize, spares: usize, rf: usize) -> Membership {
        Membership {
            members: (0..first).collect(),
            spares: (first..first + spares).collect(),
            gone: Vec::new(),
            rf,
        }
    }

    /// A member, at random.
    pub(crate) fn pick(&self, rng: &mut SmallRng) -> usize {
        self.members[rng.random_range(0..self.members.len())]
    }
}

/// Runs topology fault `kind` ("join", "decommission", "removenode"): a
/// leave when no spare is left, a join when the ring is as small as it
/// may be; nothing when neither can run.
pub(crate) fn inject(
    cluster: &mut Cluster,
    m: &mut Membership,
    kind: &str,
    rng: &mut SmallRng,
    done: &mut Changes,
) -> Result<()> {
    let can_leave = m.members.len() > m.rf;
    let kind = match kind {
        "join" if m.spares.is_empty() && can_leave => "decommission",
        "decommission" | "removenode" if !can_leave && !m.spares.is_empty() => "join",
        k => k,
    };
    match kind {
        "join" if !m.spares.is_empty() => {
            let node = m.spares.remove(0);
            cluster.join(node)?;
            wait_member(cluster, node)?;
            m.members.push(node);
            done.joined += 1;
        }
        "decommission" if can_leave => {
            let node = m.pick(rng);
            let id = cluster.nodes[node].id.clone();
            let others: Vec<usize> = m.members.iter().copied().filter(|&n| n != node).collect();
            let op = ClientOp::Decommission { node: id };
            change(cluster, node, node, &others, op)?;
            leave(cluster, m, node)?;
            done.decommissioned += 1;
        }
        "removenode" if can_leave => {
            let node = m.pick(rng);
            cluster.kill(node)?;
            let others: Vec<usize> = m.members.iter().copied().filter(|&n| n != node).collect();
            let via = others[rng.random_range(0..others.len())];
            let id = cluster.nodes[node].id.clone();
            change(
                cluster,
                via,
                node,
                &others,
                ClientOp::RemoveNode { node: id },
            )?;
            leave(cluster, m, node)?;
            done.removed += 1;
        }
        _ => {}
    }
    Ok(())
}

/// `node` left the ring: it is stopped for good.
fn leave(cluster: &mut Cluster, m: &mut Membership, node: usize) -> Result<()> {
    cluster.kill(node)?;
    m.members.retain(|&n| n != node);
    m.gone.push(node);
    Ok(())
}

/// Runs a change that takes node `node` out of the ring through node
/// `via` until it is done (see [`call_until`]); an attempt that failed on
/// the way may still have finished the change, which the next attempt
/// then finds: every member of `others` sees that `node` has left.
fn change(
    cluster: &Cluster,
    via: usize,
    node: usize,
    others: &[usize],
    op: ClientOp,
) -> Result<()> {
    let left = || others.iter().all(|&o| has_left(cluster, o, node));
    match call_until(cluster, via, &op, left)? {
        Some(ClientReply::Ring(_)) | None => Ok(()),
        Some(other) => bail!("{op:?} answered {other:?}"),
    }
}

/// Sends `op` (a ring change, a fold or a repair) through node `via`,
/// again and again while it fails (a member restarted by the last fault is
/// not seen up yet), until it answers or `finished` says an attempt that
/// failed did the work after all (`None`). Each call waits as long as the
/// operation may take, as the `tally` commands do.
pub(crate) fn call_until(
    cluster: &Cluster,
    via: usize,
    op: &ClientOp,
    finished: impl Fn() -> bool,
) -> Result<Option<ClientReply>> {
    let deadline = Instant::now() + CHANGE_DEADLINE;
    let addr = cluster.nodes[via].client;
    loop {
        let answer = crate::runtime().block_on(async {
            let c = super::secure::dial(addr, CHANGE_DEADLINE).await?;
            anyhow::Ok(c.call(op.clone()).await)
        });
        let why = match answer {
            Ok(Ok(reply)) => return Ok(Some(reply)),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        if finished() {
            return Ok(None);
        }
        if Instant::now() > deadline {
            bail!("{op:?} through n{} did not finish: {why}", via + 1);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Node `node`, stopped, comes back with a wiped data directory through
/// `tallyd run --replace`; waits until it has synced and leads again.
pub(crate) fn replace(cluster: &mut Cluster, node: usize) -> Result<()> {
    cluster.replace_wiped(node)?;
    let id = cluster.nodes[node].id.clone();
    let deadline = Instant::now() + CHANGE_DEADLINE;
    loop {
        if let Ok(status) = cluster.status_json(Some(&id))
            && let Some(nodes) = status["nodes"].as_array()
            && nodes
                .iter()
                .any(|n| n["id"] == id.as_str() && n["writable"] == true)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{id} was not replaced: {}", cluster.log_tail(node));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `tally fold` through node `via` until it is done (see
/// [`call_until`]); counts it in `done`.
pub(crate) fn fold(cluster: &Cluster, via: usize, done: &mut Changes) -> Result<WireFolded> {
    match call_until(cluster, via, &ClientOp::Fold, || false)? {
        Some(ClientReply::Folded(f)) => {
            if f.generation > 0 {
                done.folds += 1;
                done.folded += f.retired.len();
            }
            done.widest = f.nodes.iter().map(|n| n.widest).max().unwrap_or(0);
            Ok(f)
        }
        other => bail!("fold answered {other:?}"),
    }
}

/// Waits until node `node`, joining, is a member of the ring as it sees it.
fn wait_member(cluster: &Cluster, node: usize) -> Result<()> {
    let deadline = Instant::now() + CHANGE_DEADLINE;
    let id = cluster.nodes[node].id.clone();
    loop {
        if let Ok(status) = cluster.status_json(Some(&id))
            && state(&status, &id).as_deref() == Some("normal")
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{id} did not join: {}", cluster.log_tail(node));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether node `via` sees node `node` as having left the ring.
fn has_left(cluster: &Cluster, via: usize, node: usize) -> bool {
    let id = &cluster.nodes[node].id;
    cluster
        .status_json(Some(&cluster.nodes[via].id))
        .is_ok_and(|s| state(&s, id).as_deref() == Some("left"))
}

/// Node `id`'s state in `tally status --json`.
fn state(status: &Value, id: &str) -> Option<String> {
    let nodes = status["nodes"].as_array()?;
    let n = nodes.iter().find(|n| n["id"] == id)?;
    Some(n["state"].as_str()?.to_string())
}

/// Every member's ring version, which must be one and the same with no
/// change in progress.
pub(crate) fn check_ring(cluster: &Cluster, m: &Membership) -> Result<Vec<String>> {
    let mut versions = Vec::new();
    let mut violations = Vec::new();
    for &n in &m.members {
        let id = &cluster.nodes[n].id;
        let status = cluster.status_json(Some(id)).context("status")?;
        versions.push((id.clone(), status["ring_version"].as_u64()));
        for node in status["nodes"].as_array().into_iter().flatten() {
            let (nid, s) = (node["id"].as_str().unwrap_or("?"), node["state"].as_str());
            let member = cluster
                .nodes
                .iter()
                .position(|p| p.id == nid)
                .is_some_and(|i| m.members.contains(&i));
            let want = if member { "normal" } else { "absent or left" };
            let ok = match s {
                Some("normal") => member,
                Some("absent" | "left") => !member,
                _ => false,
            };
            if !ok {
                violations.push(format!("{id} sees {nid} as {s:?}, not {want}"));
            }
        }
    }
    if versions.windows(2).any(|w| w[0].1 != w[1].1) {
        violations.push(format!(
            "the members disagree on the ring version: {versions:?}"
        ));
    }
    Ok(violations)
}
