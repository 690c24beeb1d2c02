//! Agreement: linearizable changes of a partition's registers (strings,
//! leases, locks, compare-and-set), by single-decree Paxos among the
//! partition's replicas, one instance per change (CASPaxos).
//!
//! - `round`: one ballot's decisions (prepare, read, propose, decide),
//!   pure, with golden scripts; `plan` says what a change proposes from
//!   what a quorum read, so that a change is applied once across retries.
//! - `history`: the rounds a state came through, kept in the state, so
//!   that a proposer outbid after proposing can tell whether its value
//!   took effect, and try again if not.
//! - `queue`: a node's changes of a partition wait for its next round,
//!   and each round makes all that waited (one proposer per partition
//!   per node, so clients do not outbid each other).
//! - `propose`: the proposer's shell: ballots from a hybrid clock, the
//!   messages to every participant, the timeouts, retries with a random
//!   backoff when outbid, and the commit sent without waiting.
//! - `handoff`: agreed state moves with its ranges to new replicas.
//! - `serve` (here): the acceptor's side of a peer's request, each rule
//!   the engine's (`Engine::prepare`, `accept`, `commit`, `agreed`), made
//!   durable before the answer. A node being replaced answers none that
//!   reports or binds its state (prepare, propose, read) until its
//!   ranges are synced: it lost what it promised and accepted.
//!
//! Used only once the cluster has enabled the `agreement` feature (every
//! member's build has it), since older builds know neither the messages
//! nor the cells that hold the state.

pub(crate) mod handoff;
pub(crate) mod history;
pub(crate) mod propose;
pub(crate) mod queue;
pub(crate) mod round;

use std::sync::Arc;

use tally_net::wire::{Ballot, ErrorKind, PeerRequest, PeerResponse, WireError};

use crate::base::convert::engine_error;
use crate::base::registry::Served;
use crate::cluster::ctx::Ctx;
use crate::cluster::faults::{Fault, PROMISE_LAG};

pub(crate) use propose::Proposer;

/// Answers an agreement request from a peer (authorized already: this node
/// replicates the partition, and the ballots and values are in bounds).
pub(crate) async fn serve(ctx: &Arc<Ctx>, req: PeerRequest) -> Result<PeerResponse, WireError> {
    let engine = ctx.engine();
    if matches!(
        req,
        PeerRequest::Prepare { .. } | PeerRequest::Propose { .. } | PeerRequest::ReadAgreed { .. }
    ) {
        ctx.check_readable()?;
    }
    let served = match req {
        PeerRequest::Prepare { .. } => Some(Served::Prepare),
        PeerRequest::Propose { .. } => Some(Served::Propose),
        PeerRequest::Commit { .. } => Some(Served::Commit),
        PeerRequest::ReadAgreed { .. } => Some(Served::Read),
        _ => None,
    };
    if let Some(kind) = served {
        ctx.metrics().served(kind);
    }
    let answer = match req {
        PeerRequest::Prepare { partition, ballot } if ctx.faults().has(Fault::PromiseLate) => {
            promise_late(ctx, partition, ballot)
        }
        PeerRequest::Prepare { partition, ballot } => engine
            .prepare(&partition, ballot)
            .await
            .map(PeerResponse::Promise),
        PeerRequest::Propose {
            partition,
            proposal,
        } => engine
            .accept(&partition, proposal)
            .await
            .map(|r| PeerResponse::Proposed(r.err())),
        PeerRequest::Commit { partition, decided } => engine
            .commit(&partition, decided)
            .await
            .map(|()| PeerResponse::Applied),
        PeerRequest::ReadAgreed { partition } => {
            engine.agreed(&partition).map(PeerResponse::Agreed)
        }
        PeerRequest::AgreedIn { ranges, after } => return handoff::page(ctx, ranges, after).await,
        PeerRequest::MergeAgreed { states } => return handoff::merge(ctx, states).await,
        _ => {
            return Err(WireError::new(
                ErrorKind::Internal,
                "not an agreement request",
            ));
        }
    };
    answer.map_err(|e| engine_error(&e))
}

/// The broken acceptor of `Fault::PromiseLate`: the promise this node's
/// state would give, answered at once and stored only `PROMISE_LAG` later.
fn promise_late(
    ctx: &Arc<Ctx>,
    partition: Vec<u8>,
    ballot: Ballot,
) -> Result<PeerResponse, tally_engine::Error> {
    let promise = ctx.engine().agreed(&partition)?.prepare(ballot);
    let ctx = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(PROMISE_LAG).await;
        let _ = ctx.engine().prepare(&partition, ballot).await;
    });
    Ok(PeerResponse::Promise(promise))
}
