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
use std::sync::atomic::{AtomicBool, Ordering};

use tally_engine::{Keep, Key};
use tally_net::wire::{ErrorKind, WireError};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::Refused;
use super::change::{commit, folding, learn};
use crate::cluster::ctx::Ctx;

/// Who waits for a flush's answer.
pub(crate) type Waiter = oneshot::Sender<Result<(), WireError>>;

/// Moves each of `dbs` to a new generation, on every member: in the next
/// batch of this coordinator's flushes (`flush_queue`), which begins
/// after this call and may flush other databases too.
pub(crate) async fn run(ctx: &Arc<Ctx>, dbs: &[u8]) -> Result<(), WireError> {
    let (waiter, answer) = oneshot::channel();
    let start = {
        let mut queue = ctx.flushes.lock();
        if queue.is_driving() && ctx.flush_join_running() {
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
        let Some(batch) = ctx.flushes.lock().take() else {
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
/// generations' cells, in the background, rewriting only the tables that
/// hold some (`Engine::cleanup_in`). Flushes coalesce: while a
/// collection is queued, not yet reading the ring, another flush adds
/// none (the queued one reads the newer ring).
pub(crate) fn collect(ctx: &Arc<Ctx>) {
    if !ctx.collect_queued.ask() {
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

/// A job asked for again while a run of it is queued runs once: the
/// queued run reads what it works on only when it begins.
///
/// # Invariants
/// - Every [`Coalesced::ask`] is followed by a [`Coalesced::begin`] that
///   comes after it: the one it queued, or the queued one it joined.
#[derive(Debug, Default)]
pub(crate) struct Coalesced(AtomicBool);

impl Coalesced {
    /// Asks for a run: whether the caller must queue one (none is).
    pub(crate) fn ask(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }

    /// A queued run begins: asks from here on queue another.
    pub(crate) fn begin(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Drops the cells of the generations the ring has flushed; answers the
/// cells kept whole and those dropped, of the tables rewritten.
async fn collect_now(ctx: &Arc<Ctx>) -> Result<(u64, u64), WireError> {
    let _one = ctx.cleaning.lock().await;
    // Rings stored from here on may not be seen below: they queue another.
    ctx.collect_queued.begin();
    let topology = ctx.topology();
    let key = |p: &[u8]| Key::new(p, b"").expect("a keyspace prefix is a short partition");
    let ranges: Vec<(Key, Option<Key>)> = topology
        .flushed_ranges()
        .iter()
        .map(|(from, to)| (key(from), to.as_deref().map(key)))
        .collect();
    let worker = ctx.clone();
    tokio::task::spawn_blocking(move || {
        worker
            .engine
            .cleanup_in(&ranges, |k| match topology.flushed(k.partition()) {
                true => Keep::Nothing,
                false => Keep::Whole,
            })
    })
    .await
    .map_err(|e| WireError::new(ErrorKind::Internal, format!("collection failed: {e}")))?
    .map_err(|e| crate::base::convert::engine_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_while_a_run_is_queued_join_it_and_asks_after_it_began_queue_another() {
        let c = Coalesced::default();
        assert!(c.ask(), "none queued: queue one");
        assert!(
            !c.ask() && !c.ask(),
            "flushes meanwhile join the queued run"
        );
        c.begin();
        assert!(c.ask(), "the run may have read the ring before this flush");
        assert!(!c.ask());
        c.begin();
        c.begin();
        assert!(c.ask());
    }
}
