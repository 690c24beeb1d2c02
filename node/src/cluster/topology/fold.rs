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

use std::sync::Arc;
use std::time::Duration;

use tally_net::wire::{
    ErrorKind, FOLD_IDS_MAX, PeerRequest, PeerResponse, WireError, WireFolded, WireFoldedNode,
};
use tracing::info;

use super::change::{commit, folding, learn};
use super::fold_steps::{Folding, Step, Stop, Surveyed};
use super::{Refused, Topology};
use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;

/// How long a member may take to survey or fold its data.
const FOLD_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs a fold to its end; answers what it did. The steps and their
/// order are `fold_steps::Folding`'s; this does each.
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
    let mut folding = Folding::new(&now);
    let mut done = WireFolded::default();
    loop {
        match folding.step() {
            Step::Survey { cleanup } => {
                let surveyed = survey(ctx, &members, cleanup).await?;
                folding.surveyed(surveyed);
                continue;
            }
            Step::Repair => {
                info!("fold: repairing every range first");
                let groups = crate::cluster::repair::run::all_groups(ctx);
                done.repaired = crate::cluster::repair::run::sync(ctx, groups).await?;
            }
            Step::Recommit(ring) => commit(ctx, &ring, &ring).await?,
            Step::Commit { from, to } => commit(ctx, &from, &to).await?,
            Step::FoldMembers => done.nodes = fold_members(ctx, &members).await?,
            Step::Done(active) => return Ok(finished(done, active.as_ref())),
            Step::Stopped(stop) => return Err(stopped(ctx, &now, &members, stop)),
        }
        folding.done();
    }
}

/// What a fold did, with the generation it made active, if any.
fn finished(mut done: WireFolded, active: Option<&Topology>) -> WireFolded {
    match active {
        Some(active) => {
            done.generation = active.folds_active;
            done.retired = active.folds.last().cloned().unwrap_or_default();
            info!(summary = ?done, "fold finished");
        }
        None => info!("fold: no retired incarnation holds shards"),
    }
    done
}

/// The error of a fold that stopped.
fn stopped(ctx: &Ctx, now: &Topology, members: &[usize], stop: Stop) -> WireError {
    match stop {
        Stop::Restarted(i) => WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "{} restarted during the fold's repair (a new incarnation): run the fold again",
                ctx.name(members[i])
            ),
        ),
        Stop::Refused(Refused::Folding(g)) => invalid(folding(g, now.version)),
        Stop::Refused(other) => invalid(format!("the ring cannot take a fold now: {other:?}")),
    }
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
