//! Repairs in the simulation: now and then one races the workload, and
//! at the end every member's ranges are repaired twice. The second pass
//! must find the replicas alike: a repair that moved nothing leaves them
//! apart, as the chaos harness finds it. Folds (`tally fold`: a full
//! repair, then every replica folds the shards of retired incarnations
//! into one base) race the workload too.

use std::time::Duration;

use tally_net::wire::{ClientOp, ClientReply, WireRepaired};
use tally_tests::checker::folds::check_fold;

use crate::cluster::Cluster;
use crate::trace;

/// How long the end's first repair of a node may be refused.
const FIRST_PASS_MAX: Duration = Duration::from_secs(30);

/// Repairs the ranges of `node`: what the repair did, or why it could not.
pub async fn repair(cluster: &Cluster, node: usize) -> Result<WireRepaired, String> {
    let Some(n) = cluster.node(node) else {
        return Err(format!("n{} is down", node + 1));
    };
    let done = n.execute(ClientOp::Repair { range: None }).await;
    let done = match done {
        Ok(ClientReply::Repaired(r)) => Ok(r),
        Ok(other) => Err(format!("a repair answered {other:?}")),
        Err(e) => Err(e.to_string()),
    };
    match &done {
        Ok(r) => trace!(
            "repair of n{}: {} keys differing, {} cells moved",
            node + 1,
            r.keys_differing,
            r.cells_moved
        ),
        Err(e) => trace!("repair of n{}: {e}", node + 1),
    }
    done
}

/// Repairs every member, then every member again: answers what the
/// second pass found wrong (replicas still apart, a repair that failed).
pub async fn twice(cluster: &Cluster) -> Vec<String> {
    let members = cluster.membership().members;
    let mut findings = Vec::new();
    for &n in &members {
        // The first pass may be refused a while (a node still starting).
        let started = tally_world::Instant::now();
        while let Err(e) = repair(cluster, n).await {
            if started.elapsed() > FIRST_PASS_MAX {
                findings.push(format!("the first repair of n{} failed: {e}", n + 1));
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    for &n in &members {
        match repair(cluster, n).await {
            Ok(r) if r.keys_differing > 0 => findings.push(format!(
                "replicas differ after a repair: the second repair of n{} found {} keys apart",
                n + 1,
                r.keys_differing
            )),
            Ok(_) => {}
            Err(e) => findings.push(format!("the second repair of n{} failed: {e}", n + 1)),
        }
    }
    findings
}

/// Folds the ring through `node` (refused while a replica is down, as it
/// should be): the violations it left, a member still holding shards of
/// a folded incarnation.
pub async fn fold(cluster: &Cluster, node: usize) -> Vec<String> {
    let Some(n) = cluster.node(node) else {
        return Vec::new();
    };
    let folded = match n.execute(ClientOp::Fold).await {
        Ok(ClientReply::Folded(f)) => f,
        Ok(other) => return vec![format!("a fold answered {other:?}")],
        Err(e) => {
            trace!("fold through n{}: {e}", node + 1);
            return Vec::new();
        }
    };
    trace!(
        "fold through n{}: generation {}, {} incarnations folded",
        node + 1,
        folded.generation,
        folded.retired.len()
    );
    check_fold(&folded)
}
