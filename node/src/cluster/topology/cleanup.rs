//! `tally cleanup`: once the ring has changed, a node drops the data of the
//! ranges it no longer replicates, keeping its own shards of them (a range
//! that moves away and back must not lose an update this node made:
//! ScyllaDB #27306); and all of the data of flushed databases' old
//! generations, which nothing reads (see `flush`).

use std::sync::Arc;

use tally_engine::Keep;
use tally_net::wire::{ErrorKind, WireCleaned, WireError};
use tracing::info;

use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;

/// Cleans this node up; refused while a ring change is in progress (its
/// pending replicas are not synced yet). One at a time: a cleanup asked
/// for while one runs (a retried `tally cleanup` or `tally fold`) waits
/// for it, and then finds little to do.
pub(crate) async fn run(ctx: &Arc<Ctx>) -> Result<WireCleaned, WireError> {
    let _one = ctx.changes().cleaning().await;
    let topology = ctx.topology();
    if let Some(change) = topology.in_progress() {
        return Err(WireError::not_applied(
            ErrorKind::Invalid,
            format!(
                "a topology change is in progress ({} is {}): clean up once it is done",
                ctx.name(change.node()),
                change.verb()
            ),
        ));
    }
    let ring = ctx.ring();
    let me = ctx.me();
    let before = ctx.engine().stats().table_bytes;
    let worker = ctx.clone();
    let (kept, dropped) = tally_world::blocking(move || {
        let keep = |k: &tally_engine::Key| {
            if topology.flushed(k.partition()) {
                Keep::Nothing
            } else if ring.replicas(k.partition()).all().contains(&me) {
                Keep::Whole
            } else {
                Keep::Own
            }
        };
        worker.engine().cleanup(None, keep)
    })
    .await
    .map_err(|e| WireError::new(ErrorKind::Internal, format!("cleanup failed: {e}")))?
    .map_err(|e| engine_error(&e))?;
    let done = WireCleaned {
        node: ctx.name(me).to_string(),
        kept,
        dropped,
        bytes_before: before,
        bytes_after: ctx.engine().stats().table_bytes,
    };
    info!(summary = ?done, "cleanup finished");
    Ok(done)
}
