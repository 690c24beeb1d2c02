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
//! background as it stores the ring ([`collect`]: only the tables holding
//! some are rewritten, and flushes in a row share one collection), and a
//! node down during the flush cannot serve before it learns the ring.
//!
//! An add that races the flush may land in the old generation and be
//! dropped with it, as an add that races a reset is ("reset wins"). A
//! flush needs every member up, and runs one at a time with ring changes
//! and folds; flushes asked of one coordinator at once run together
//! (`flush_queue`).

use std::sync::Arc;

use tally_net::Outcome;
use tally_net::wire::{ErrorKind, WireError};
use tokio::sync::oneshot;
use tracing::info;

use super::Refused;
use super::change::{commit, folding, learn};
use crate::cluster::ctx::Ctx;
use crate::cluster::faults::Fault;

/// Moves each of `dbs` to a new generation, on every member: in the next
/// batch of this coordinator's flushes (`flush_queue`), which begins
/// after this call and may flush other databases too.
pub(crate) async fn run(ctx: &Arc<Ctx>, dbs: &[u8]) -> Result<(), WireError> {
    let (waiter, answer) = oneshot::channel();
    let start = {
        let mut queue = ctx.changes().flushes();
        if queue.is_driving() && ctx.faults().has(Fault::FlushJoinRunning) {
            // FAULT INJECTION: as if the running flush covered this one.
            return Ok(());
        }
        queue.join(dbs, waiter)
    };
    if start {
        let ctx = ctx.clone();
        tokio::spawn(async move { drive(&ctx).await });
    }
    answer.await.unwrap_or_else(|_| {
        Err(WireError::new(
            ErrorKind::Internal,
            "the flush ended without an answer",
        ))
    })
}

/// Runs the queued batches of flushes one after another until none is
/// queued, answering each batch's callers.
async fn drive(ctx: &Arc<Ctx>) {
    loop {
        let Some(batch) = ctx.changes().flushes().take() else {
            return;
        };
        let dbs: Vec<u8> = batch.dbs.into_iter().collect();
        let worker = ctx.clone();
        // A batch that panics answers its callers and leaves the queue
        // running, so later flushes are not stuck behind it.
        let answer = tokio::spawn(async move { flush_once(&worker, &dbs).await })
            .await
            .unwrap_or_else(|e| {
                Err(WireError::new(
                    ErrorKind::Internal,
                    format!("the flush failed: {e}"),
                ))
            });
        for waiter in batch.waiters {
            // A caller gone (its connection closed) needs no answer.
            let _ = waiter.send(answer.clone());
        }
    }
}

/// One flush of `dbs`, run by the batch's driver.
async fn flush_once(ctx: &Arc<Ctx>, dbs: &[u8]) -> Result<(), WireError> {
    let Some(_one) = ctx.changes().try_change() else {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "cannot flush now: {} is running a topology change, a fold or a flush",
                ctx.name(ctx.me())
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
    if ctx.faults().has(Fault::FlushLocally) {
        // FAULT INJECTION: the others learn it from this node's heartbeats.
        super::change::adopt(ctx, &next)
            .map_err(|e| WireError::new(ErrorKind::Internal, e.to_string()))?;
        return Ok(());
    }
    // Refused by the first member, it was stored nowhere; once a member
    // stored it, it spreads: its outcome is no longer known.
    commit(ctx, &now, &next)
        .await
        .map_err(|e| match e.outcome {
            Outcome::NotApplied => {
                WireError::not_applied(e.kind, format!("the flush was not made: {}", e.message))
            }
            Outcome::Unknown => WireError::unknown(
                e.kind,
                format!("the flush may have taken effect: {}", e.message),
            ),
        })?;
    info!(?dbs, version = next.version, "databases flushed");
    Ok(())
}
