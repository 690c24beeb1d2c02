//! Writes this node coordinates but does not lead: sent to a live replica
//! that leads them.
//!
//! A replica that could not be reached never saw the request, so the next
//! live one may lead instead; any later failure leaves the outcome unknown.

use std::sync::Arc;

use tally_net::peer::PeerError;
use tally_net::wire::{ErrorKind, PeerRequest, PeerResponse, WireError};

use super::Writes;
use super::queue::{QueuedAdd, reply_one};
use crate::convert::wire_key;
use crate::ctx::Ctx;

/// Forwards an add to the live replicas in turn, on a task of its own.
pub(crate) fn spawn_add(writes: &Arc<Writes>, add: QueuedAdd, live: Vec<usize>) {
    let ctx = writes.ctx.clone();
    tokio::spawn(async move {
        let req = PeerRequest::LeaderAdd {
            key: wire_key(&add.key),
            delta: add.delta,
            cl: add.cl,
        };
        let result = match forward(&ctx, &live, req).await {
            Ok(PeerResponse::Added(v)) => Ok(v),
            Ok(other) => Err(unexpected(&other)),
            Err(e) => Err(e),
        };
        reply_one(add.reply, result);
    });
}

/// Sends a leader request to the first live replica that takes it.
pub(crate) async fn forward(
    ctx: &Ctx,
    live: &[usize],
    req: PeerRequest,
) -> Result<PeerResponse, WireError> {
    let mut last = None;
    // The leader has write_timeout for its replication: leave it room to
    // answer with its own verdict.
    let patience = ctx.write_timeout + ctx.write_timeout / 2;
    for &leader in live {
        match ctx.transport().call(leader, req.clone(), patience).await {
            Ok(PeerResponse::Error(e)) => return Err(e),
            Ok(resp) => return Ok(resp),
            Err(e @ PeerError::Unreachable { .. }) => last = Some(e),
            Err(e) => {
                return Err(WireError::unknown(
                    ErrorKind::Timeout,
                    format!("{e}; the leader may or may not have applied it"),
                ));
            }
        }
    }
    Err(WireError::not_applied(
        ErrorKind::Unavailable,
        format!(
            "no replica could lead: {}",
            last.map_or_else(|| "none live".into(), |e| e.to_string())
        ),
    ))
}

/// A leader's answer of the wrong kind.
pub(crate) fn unexpected(resp: &PeerResponse) -> WireError {
    WireError::unknown(
        ErrorKind::Internal,
        format!("unexpected answer from the leader: {resp:?}"),
    )
}
