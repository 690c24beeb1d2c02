//! Writes this node coordinates but does not lead: sent to a writable replica
//! that leads them.
//!
//! A replica that could not be reached never saw the request, and one that
//! refused it with nothing applied (it cannot write) did nothing with it:
//! the next writable one may lead instead. Any other failure ends the
//! forward with the error it had: a timeout or a lost connection leaves
//! the outcome unknown, and the next leader is never tried then.

use std::sync::Arc;

use tally_net::peer::PeerError;
use tally_net::wire::{ErrorKind, PeerRequest, PeerResponse, WireError};
use tracing::debug;

use super::Writes;
use super::queue::{QueuedAdd, reply_one};
use crate::base::convert::{wire_key, wire_op_id};
use crate::cluster::ctx::Ctx;
use crate::cluster::placement;

/// Forwards an add to the writable replicas in turn, on a task of its own.
pub(crate) fn spawn_add(writes: &Arc<Writes>, add: QueuedAdd, writable: Vec<usize>) {
    let ctx = writes.ctx.clone();
    tokio::spawn(async move {
        let key = wire_key(&add.key);
        let (delta, cl) = (add.delta, add.cl);
        let req = match &add.id {
            None => PeerRequest::LeaderAdd { key, delta, cl },
            Some(once) => PeerRequest::LeaderAddOnce {
                key,
                delta,
                id: wire_op_id(&once.id),
                cl,
            },
        };
        let result = match forward(&ctx, &writable, req).await {
            Ok(PeerResponse::Added(v)) => Ok(v),
            Ok(other) => Err(unexpected(&other)),
            Err(e) => Err(e),
        };
        reply_one(add.reply, result);
    });
}

/// Sends a leader request to the writable replicas in turn, until one
/// answers. A replica that was not reached, or that refused the request
/// with nothing applied where another leader may not refuse it (it cannot
/// write, say: see `placement::next_leader_may_try`), hands it to the
/// next; any other failure ends it.
pub(crate) async fn forward(
    ctx: &Ctx,
    writable: &[usize],
    req: PeerRequest,
) -> Result<PeerResponse, WireError> {
    let mut last: Option<WireError> = None;
    // The leader has write_timeout for its replication: leave it room to
    // answer with its own verdict.
    let patience = ctx.write_timeout() + ctx.write_timeout() / 2;
    for &leader in writable {
        match ctx.transport().call(leader, req.clone(), patience).await {
            Ok(PeerResponse::Error(e)) if placement::next_leader_may_try(&e) => {
                debug!(leader = %ctx.name(leader), error = %e, "leader refused; trying the next");
                last = Some(e);
            }
            Ok(PeerResponse::Error(e)) => return Err(e),
            Ok(resp) => return Ok(resp),
            Err(e @ PeerError::Unreachable { .. }) => {
                last = Some(WireError::not_applied(
                    ErrorKind::Unavailable,
                    format!("no replica could lead: {e}"),
                ));
            }
            Err(e) => {
                return Err(WireError::unknown(
                    ErrorKind::Timeout,
                    format!("{e}; the leader may or may not have applied it"),
                ));
            }
        }
    }
    Err(last.unwrap_or_else(|| {
        WireError::not_applied(
            ErrorKind::Unavailable,
            "no replica could lead: none writable",
        )
    }))
}

/// A leader's answer of the wrong kind.
pub(crate) fn unexpected(resp: &PeerResponse) -> WireError {
    WireError::unknown(
        ErrorKind::Internal,
        format!("unexpected answer from the leader: {resp:?}"),
    )
}
