//! `tally fold`: the shards of retired incarnations folded into cells'
//! bases, cluster-wide, so that a cell stays at most a replication
//! factor's worth of shards wide after any churn (the rule is
//! `tally_engine::cell::fold`). A node that left, a wiped data directory
//! and an unclean restart each retire a counter_id.
//!
//! It runs on one node, like a topology change, and one at a time with
//! them:
//!
//! 1. every member cleans up (drops the data of ranges it no longer
//!    replicates, but its own shards: no repair reaches those copies, so
//!    none may be folded from a stale version), then answers its
//!    counter_id and the counter_ids whose shards it may hold (`Survey`);
//!    the retired ones are those held and no member's now, less those
//!    folded already ([`retired`]);
//! 2. a full repair brings every replica of every range to the merge of
//!    all, so that every replica holds the last version of every retired
//!    shard (`repair::run::sync`);
//! 3. every member answers again; if a member's counter_id changed
//!    meanwhile (an unclean restart, whose old incarnation the repair may
//!    have missed a last version of), the fold stops, to be run again
//!    ([`same_incarnations`]);
//! 4. every member stores the ring with a new fold generation of those
//!    ids, then the ring with it active: two versions, so that every member
//!    knows a generation before any cell of it exists;
//! 5. every member folds its cells (`Engine::fold`) and reports its widest.
//!
//! Run again after it stopped half way, it activates the generation that
//! is pending. Compactions fold cells by the active generation from then
//! on, on every node, so step 5 only makes it happen at once.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tally_net::wire::{
    ErrorKind, FOLD_IDS_MAX, PeerRequest, PeerResponse, WireError, WireFolded, WireFoldedNode,
};
use tracing::info;

use super::change::{commit, folding, learn};
use super::{Refused, Topology};
use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;

/// How long a member may take to survey or fold its data.
const FOLD_TIMEOUT: Duration = Duration::from_secs(600);

/// One member's answer to `Survey`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Surveyed {
    /// Its incarnation now.
    pub(crate) counter_id: u64,
    /// The counter_ids whose shards it may hold.
    pub(crate) held: Vec<u64>,
}

/// The counter_ids to fold: held by some member, the incarnation of none,
/// not folded already; sorted.
pub(crate) fn retired(ring: &Topology, members: &[Surveyed]) -> Vec<u64> {
    let live: BTreeSet<u64> = members.iter().map(|m| m.counter_id).collect();
    let held: BTreeSet<u64> = members
        .iter()
        .flat_map(|m| m.held.iter().copied())
        .collect();
    held.into_iter()
        .filter(|id| !live.contains(id) && !ring.folded(*id))
        .collect()
}

/// `Ok` when every member is the incarnation it was; else the index of
/// the first that is not.
pub(crate) fn same_incarnations(before: &[Surveyed], after: &[Surveyed]) -> Result<(), usize> {
    match before
        .iter()
        .zip(after)
        .position(|(b, a)| b.counter_id != a.counter_id)
    {
        Some(i) => Err(i),
        None => Ok(()),
    }
}

/// Runs a fold to its end; answers what it did.
pub(crate) async fn run(ctx: &Arc<Ctx>) -> Result<WireFolded, WireError> {
    let Some(_one) = ctx.changes().try_change() else {
        return Err(invalid(format!(
            "{} is already running a topology change or a fold; one at a time",
            ctx.name(ctx.me())
        )));
    };
    learn(ctx).await;
    let now = ctx.topology();
    if let Some(busy) = now.in_progress() {
        return Err(invalid(format!(
            "a topology change is in progress: {} is {} (ring version {}); fold once it is done",
            ctx.name(busy.node()),
            busy.verb(),
            now.version
        )));
    }
    let members = now.participants();
    if let Some(&down) = members.iter().find(|&&n| !ctx.is_up(n)) {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "cannot fold while {} is down: every replica must hold the shards it folds",
                ctx.name(down)
            ),
        ));
    }
    let mut done = WireFolded::default();
    let pending = match now.fold_pending() {
        // Resumed: a commit that stopped half way may have left members
        // without the generation, and every one must know it before any
        // folds by it.
        Some(_) => {
            commit(ctx, &now, &now).await?;
            now.clone()
        }
        None => match agree(ctx, &now, &members, &mut done).await? {
            Some(begun) => begun,
            None => {
                done.nodes = fold_members(ctx, &members).await?;
                return Ok(done);
            }
        },
    };
    let active = pending.activate_fold().expect("a generation is pending");
    commit(ctx, &pending, &active).await?;
    done.generation = active.folds_active;
    done.retired = active.folds.last().cloned().unwrap_or_default();
    info!(
        generation = done.generation,
        retired = done.retired.len(),
        "fold generation active"
    );
    done.nodes = fold_members(ctx, &members).await?;
    info!(summary = ?done, "fold finished");
    Ok(done)
}

/// Steps 1-4 up to the generation agreed: the ring with it pending, or
/// `None` when nothing is retired.
async fn agree(
    ctx: &Arc<Ctx>,
    now: &Topology,
    members: &[usize],
    done: &mut WireFolded,
) -> Result<Option<Topology>, WireError> {
    let before = survey(ctx, members, true).await?;
    let ids = retired(now, &before);
    if ids.is_empty() {
        info!("fold: no retired incarnation holds shards");
        return Ok(None);
    }
    info!(retired = ids.len(), "fold: repairing every range first");
    let groups = crate::cluster::repair::run::all_groups(ctx);
    done.repaired = crate::cluster::repair::run::sync(ctx, groups).await?;
    let after = survey(ctx, members, false).await?;
    if let Err(i) = same_incarnations(&before, &after) {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "{} restarted during the fold's repair (a new incarnation): run the fold again",
                ctx.name(members[i])
            ),
        ));
    }
    let begun = now.begin_fold(&ids).map_err(|r| match r {
        Refused::Folding(g) => invalid(folding(g, now.version)),
        other => invalid(format!("the ring cannot take a fold now: {other:?}")),
    })?;
    commit(ctx, now, &begun).await?;
    Ok(Some(begun))
}

/// Every member's `Survey`, in the order of `members`, each cleaned up
/// first if `cleanup`.
async fn survey(
    ctx: &Arc<Ctx>,
    members: &[usize],
    cleanup: bool,
) -> Result<Vec<Surveyed>, WireError> {
    let mut out = Vec::with_capacity(members.len());
    for &n in members {
        match call(ctx, n, PeerRequest::Survey { cleanup }).await? {
            PeerResponse::Survey { counter_id, held } => out.push(Surveyed { counter_id, held }),
            other => return Err(unexpected(ctx, n, &other)),
        }
    }
    Ok(out)
}

/// Has every member fold its cells; answers what each holds after.
async fn fold_members(ctx: &Arc<Ctx>, members: &[usize]) -> Result<Vec<WireFoldedNode>, WireError> {
    let mut out = Vec::with_capacity(members.len());
    for &n in members {
        match call(ctx, n, PeerRequest::Fold).await? {
            PeerResponse::Folded(f) => out.push(f),
            other => return Err(unexpected(ctx, n, &other)),
        }
    }
    Ok(out)
}

/// Answers a peer's `Survey` or `Fold`.
pub(crate) async fn serve(ctx: &Arc<Ctx>, req: PeerRequest) -> PeerResponse {
    if let PeerRequest::Survey { cleanup: true } = req
        && let Err(e) = super::cleanup::run(ctx).await
    {
        return PeerResponse::Error(e);
    }
    let worker = ctx.clone();
    let answer = tally_world::blocking(move || match req {
        PeerRequest::Survey { .. } => {
            let held = worker.engine().counter_ids_held();
            Ok(PeerResponse::Survey {
                counter_id: worker.engine().counter_id(),
                held: held.into_iter().take(FOLD_IDS_MAX).collect(),
            })
        }
        PeerRequest::Fold => worker
            .engine()
            .fold()
            .map(|r| {
                PeerResponse::Folded(WireFoldedNode {
                    node: worker.name(worker.me()).to_string(),
                    cells: r.cells,
                    widest: r.widest as u64,
                    table_bytes: r.table_bytes,
                    retired_held: r.retired_held as u64,
                })
            })
            .map_err(|e| engine_error(&e)),
        other => Err(WireError::new(
            ErrorKind::Internal,
            format!("not a fold request: {other:?}"),
        )),
    })
    .await;
    match answer {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => PeerResponse::Error(e),
        Err(e) => PeerResponse::Error(WireError::new(
            ErrorKind::Internal,
            format!("fold request failed: {e}"),
        )),
    }
}

/// Node `n`'s answer to `req` (this node answers itself).
async fn call(ctx: &Arc<Ctx>, n: usize, req: PeerRequest) -> Result<PeerResponse, WireError> {
    let answer = if n == ctx.me() {
        serve(ctx, req).await
    } else {
        ctx.transport()
            .call(n, req, FOLD_TIMEOUT)
            .await
            .map_err(|e| {
                WireError::unknown(
                    ErrorKind::Unavailable,
                    format!("{} did not answer the fold: {e}", ctx.name(n)),
                )
            })?
    };
    match answer {
        PeerResponse::Error(e) => Err(e),
        answer => Ok(answer),
    }
}

fn unexpected(ctx: &Ctx, n: usize, answer: &PeerResponse) -> WireError {
    WireError::new(
        ErrorKind::Internal,
        format!("{} answered {answer:?} to a fold request", ctx.name(n)),
    )
}

fn invalid(message: String) -> WireError {
    WireError::not_applied(ErrorKind::Invalid, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(counter_id: u64, held: &[u64]) -> Surveyed {
        Surveyed {
            counter_id,
            held: held.to_vec(),
        }
    }

    #[test]
    fn retired_ids_are_held_by_someone_live_for_no_one_and_not_folded_yet() {
        let mut ring = Topology::seed(&[false, false, false]);
        let members = [
            member(1, &[1, 2, 7, 8]),
            member(2, &[2, 3, 9]),
            member(3, &[1, 3]),
        ];
        assert_eq!(retired(&ring, &members), vec![7, 8, 9]);
        ring.folds.push(vec![8]);
        assert_eq!(retired(&ring, &members), vec![7, 9]);
        assert!(retired(&ring, &[member(1, &[1])]).is_empty());
    }

    #[test]
    fn a_member_that_restarted_between_the_surveys_stops_the_fold() {
        let before = [member(1, &[]), member(2, &[])];
        assert_eq!(same_incarnations(&before, &before), Ok(()));
        let after = [member(1, &[]), member(5, &[2])];
        assert_eq!(same_incarnations(&before, &after), Err(1));
    }

    #[test]
    fn a_fold_is_agreed_then_activated_one_version_each() {
        let ring = Topology::seed(&[false, false, false]);
        let begun = ring.begin_fold(&[7, 9]).unwrap();
        assert_eq!((begun.version, begun.fold_pending()), (2, Some(1)));
        assert_eq!(begun.engine_folds().active(), 0, "known, not active yet");
        assert_eq!(begun.begin_fold(&[7, 9]), Ok(begun.clone()), "run again");
        assert_eq!(
            begun.begin_fold(&[8]),
            Err(super::super::Refused::Folding(1))
        );
        assert_eq!(
            begun.begin(super::super::Change::Decommission(0), 2),
            Err(super::super::Refused::Folding(1)),
            "no ring change while a generation is pending"
        );
        let active = begun.activate_fold().unwrap();
        assert_eq!((active.version, active.fold_pending()), (3, None));
        assert!(active.folded(9) && !active.folded(1));
        assert_eq!(active.engine_folds().active(), 1);
        assert_eq!(active.activate_fold(), None);
    }
}
