//! `FLUSHDB` and `FLUSHALL`: every counter of a database reset at once,
//! cluster-wide, by moving the database to a new generation (ScyllaDB's
//! TRUNCATE keeps a truncation record the same way).
//!
//! A database's keys are stored under its generation (see `keyspace`).
//! A flush is one ring version with the generation one on, stored by every
//! member before the flush answers, like a ring change: from then on every
//! coordinator reads and writes the new generation, where no counter
//! exists yet, so the database is empty and usable at once. The old
//! generation's cells are read by nothing; each node drops them in the
//! background as it stores the ring (`cleanup`), and a node down during
//! the flush cannot serve before it learns the ring.
//!
//! An add that races the flush may land in the old generation and be
//! dropped with it, as an add that races a reset is ("reset wins"). A
//! flush needs every member up, and runs one at a time with ring changes
//! and folds.

use std::sync::Arc;

use tally_net::wire::{ErrorKind, WireError};
use tracing::{info, warn};

use super::Refused;
use super::change::{commit, folding, learn};
use crate::ctx::Ctx;

/// Moves each of `dbs` to a new generation, on every member.
pub(crate) async fn run(ctx: &Arc<Ctx>, dbs: &[u8]) -> Result<(), WireError> {
    let Ok(_one) = ctx.changing.try_lock() else {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "cannot flush now: {} is running a topology change, a fold or a flush",
                ctx.name(ctx.me)
            ),
        ));
    };
    learn(ctx).await;
    let now = ctx.topology();
    let next = now.flush(dbs).map_err(|r| {
        let why = match r {
            Refused::Busy(busy) => format!(
                "a topology change is in progress ({} is {})",
                ctx.name(busy.node()),
                busy.verb()
            ),
            Refused::Folding(g) => folding(g, now.version),
            other => format!("{other:?}"),
        };
        WireError::not_applied(ErrorKind::Unavailable, format!("cannot flush now: {why}"))
    })?;
    if let Some(&down) = now.participants().iter().find(|&&n| !ctx.is_up(n)) {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "cannot flush while {} is down: every member must store the flush",
                ctx.name(down)
            ),
        ));
    }
    if ctx.flush_locally() {
        // FAULT INJECTION: the others learn it from this node's heartbeats.
        super::change::adopt(ctx, &next).map_err(|e| WireError::new(ErrorKind::Internal, e))?;
        return Ok(());
    }
    // Once a member stored it, it spreads: its outcome is no longer known.
    commit(ctx, &now, &next).await.map_err(|e| {
        WireError::new(
            e.kind,
            format!("the flush may have taken effect: {}", e.message),
        )
    })?;
    info!(?dbs, version = next.version, "databases flushed");
    Ok(())
}

/// After this node stored a ring that flushed a database: drops the old
/// generations' cells, in the background.
pub(crate) fn collect(ctx: &Arc<Ctx>) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        match super::cleanup::run(&ctx).await {
            Ok(done) => info!(dropped = done.dropped, "flushed generations collected"),
            Err(e) => {
                warn!(error = %e, "flushed generations not collected yet (tally cleanup does it)")
            }
        }
    });
}
