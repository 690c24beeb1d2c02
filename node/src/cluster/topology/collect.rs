//! Dropping the cells of flushed generations, once this node stored a
//! ring that flushed a database (see `flush`): in the background,
//! rewriting only the tables that hold some, and once for flushes in a
//! row.

use std::sync::Arc;

use tally_engine::{Keep, Key};
use tally_net::wire::{ErrorKind, WireError};
use tracing::{info, warn};

use crate::cluster::ctx::Ctx;

/// After this node stored a ring that flushed a database: drops the old
/// generations' cells, in the background, rewriting only the tables that
/// hold some (`Engine::cleanup` within ranges). Flushes coalesce: while a
/// collection is queued, not yet reading the ring, another flush adds
/// none (the queued one reads the newer ring).
pub(crate) fn collect(ctx: &Arc<Ctx>) {
    if !ctx.changes().collect_queued().ask() {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        match collect_now(&ctx).await {
            Ok((kept, dropped)) => info!(kept, dropped, "flushed generations collected"),
            Err(e) => {
                warn!(error = %e, "flushed generations not collected yet (tally cleanup does it)")
            }
        }
    });
}

/// Drops the cells of the generations the ring has flushed; answers the
/// cells kept whole and those dropped, of the tables rewritten.
async fn collect_now(ctx: &Arc<Ctx>) -> Result<(u64, u64), WireError> {
    let _one = ctx.changes().cleaning().await;
    // Rings stored from here on may not be seen below: they queue another.
    ctx.changes().collect_queued().begin();
    let topology = ctx.topology();
    let key = |p: &[u8]| Key::new(p, b"").expect("a keyspace prefix is a short partition");
    let ranges: Vec<(Key, Option<Key>)> = topology
        .flushed_ranges()
        .iter()
        .map(|(from, to)| (key(from), to.as_deref().map(key)))
        .collect();
    let worker = ctx.clone();
    tally_world::blocking(move || {
        worker
            .engine()
            .cleanup(Some(&ranges), |k| match topology.flushed(k.partition()) {
                true => Keep::Nothing,
                false => Keep::Whole,
            })
    })
    .await
    .map_err(|e| WireError::new(ErrorKind::Internal, format!("collection failed: {e}")))?
    .map_err(|e| crate::base::convert::engine_error(&e))
}
