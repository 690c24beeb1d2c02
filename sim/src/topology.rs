//! Ring changes in the simulation: a spare joins (it starts and runs its
//! join to the end), or a member is decommissioned through itself (its
//! ranges stream to their next owners) and stopped for good once every
//! other member sees it gone. The ring stays between the replication
//! factor and its first size plus the spares.

use std::time::Duration;

use tally_net::wire::{ClientOp, NodeState};

use crate::cluster::Cluster;
use crate::trace;

/// How long one change may take, retries included.
const CHANGE_DEADLINE: Duration = Duration::from_secs(90);

/// One ring change, if one can run: a join while there are spares
/// (`join` asks for one, or no member may leave), else a decommission.
/// Answers why it did not finish, if it did not.
pub async fn change(cluster: &Cluster, join: bool, pick: usize) -> Result<(), String> {
    let m = cluster.membership();
    let can_leave = m.members.len() > cluster.replication_factor();
    match (join || !can_leave, m.spares.first()) {
        (true, Some(&spare)) => self::join(cluster, spare).await,
        _ if can_leave => decommission(cluster, m.members[pick % m.members.len()]).await,
        _ => Ok(()),
    }
}

/// Spare `node` starts (unless it runs) and joins the ring, or resumes
/// its join; why it did not, if it did not.
pub async fn join(cluster: &Cluster, node: usize) -> Result<(), String> {
    trace!("n{} joins", node + 1);
    cluster.update(|m| {
        m.spares.retain(|&s| s != node);
        if !m.members.contains(&node) {
            m.members.push(node);
        }
    });
    if cluster.node(node).is_none() {
        cluster
            .start(node)
            .await
            .map_err(|e| format!("n{} did not start to join: {e:#}", node + 1))?;
    }
    let Some(n) = cluster.node(node) else {
        return Err(format!("n{} is down before its join", node + 1));
    };
    let joined = tokio::time::timeout(CHANGE_DEADLINE, n.join()).await;
    match joined {
        Ok(Ok(())) => {
            trace!("n{} joined", node + 1);
            Ok(())
        }
        Ok(Err(e)) => Err(format!("n{} did not join: {e}", node + 1)),
        Err(_) => Err(format!("n{} did not join in time", node + 1)),
    }
}

/// Member `node` is decommissioned through itself, and stopped once the
/// others see it gone; why it was not, if it was not.
pub async fn decommission(cluster: &Cluster, node: usize) -> Result<(), String> {
    trace!("n{} is decommissioned", node + 1);
    let op = ClientOp::Decommission {
        node: cluster.id(node).to_string(),
    };
    let started = tally_world::Instant::now();
    loop {
        let why = match cluster.node(node) {
            Some(n) => match n.execute(op.clone()).await {
                Ok(_) => break,
                Err(e) => e.to_string(),
            },
            None => "it is down".to_string(),
        };
        if has_left(cluster, node) {
            break;
        }
        if started.elapsed() > CHANGE_DEADLINE {
            return Err(format!(
                "the decommission of n{} did not finish: {why}",
                node + 1
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    trace!("n{} left", node + 1);
    cluster.crash(node);
    cluster.update(|m| {
        m.members.retain(|&n| n != node);
        m.gone.push(node);
    });
    Ok(())
}

/// Whether every other member up sees `node` as gone from the ring.
fn has_left(cluster: &Cluster, node: usize) -> bool {
    let m = cluster.membership();
    m.members
        .iter()
        .filter(|&&o| o != node)
        .filter_map(|&o| cluster.node(o))
        .all(|o| o.ring_state(node) == NodeState::Left)
}
