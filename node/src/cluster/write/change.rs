//! Changes of a counter's epoch: `SET`, `EXPIRE`/`PERSIST` and resets
//! (`DEL`). The leader first reads the cell from every live replica (at
//! least as many as the consistency level requires, within the read
//! timeout) and merges what it learns, so that its epoch is the newest one
//! any reachable replica knows and a condition (`NX`, `XX`, `GT` ...) is
//! judged on it; then the engine makes the change
//! (`tally_engine::change::decide`), and the new epoch, with no shards, is
//! replicated like a shard, by the same round as an add. A newer change
//! that overtook this one (a `Stale` answer) is one it raced: the two are
//! ordered by their epochs, and this one is acknowledged as made first.
//!
//! Reading only the consistency level's replicas would let a leader that
//! missed a reset make an epoch that already exists (resets to the same
//! epoch merge): the new reset would silently keep every add made since
//! the one it missed. Reading every live replica costs a change one round
//! trip more, and up to the read timeout while a replica is silent but not
//! yet marked down; changes are rare next to adds.

use std::sync::Arc;

use tally_engine::change::{Change, Presence, Ttl, When};
use tally_engine::{Key, now_ms};
use tally_net::wire::{
    Consistency, PeerRequest, PeerResponse, WireChange, WireChanged, WireError, WirePresence,
    WireTtl, WireWhen,
};
use tokio::sync::oneshot;

use super::forward::{forward, unexpected};
use super::replicate::{Write, replicate};
use super::round::Verdict;
use crate::base::convert::{engine_error, wire_key};
use crate::cluster::ctx::Ctx;
use crate::cluster::placement::Route;
use crate::cluster::read;
use crate::ring::Replicas;

/// Makes `change` to a counter at `cl`, led here or by a live replica;
/// `reads`: it answers the value before (refused on a list).
pub(crate) async fn change(
    ctx: &Arc<Ctx>,
    key: &Key,
    change: WireChange,
    cl: Consistency,
    reads: bool,
) -> Result<WireChanged, WireError> {
    match ctx.route(key, cl, what(&change))? {
        Route::Lead(replicas) => lead(ctx, key, (change, reads), cl, replicas).await,
        Route::Forward(live) => {
            let req = PeerRequest::LeaderChange {
                key: wire_key(key),
                change,
                reads,
                cl,
            };
            match forward(ctx, &live, req).await? {
                PeerResponse::Changed(done) => Ok(done),
                other => Err(unexpected(&other)),
            }
        }
    }
}

/// The leader's change for a coordinator that forwarded it.
pub(crate) async fn lead_forwarded(
    ctx: &Arc<Ctx>,
    key: &Key,
    (change, reads): (WireChange, bool),
    cl: Consistency,
) -> Result<WireChanged, WireError> {
    let replicas = ctx.lead_here(key, cl, what(&change))?;
    lead(ctx, key, (change, reads), cl, replicas).await
}

/// What a change is called in errors.
fn what(change: &WireChange) -> &'static str {
    match change {
        WireChange::Set { .. } => "set",
        WireChange::Expire { .. } => "expire",
        WireChange::Delete => "reset",
    }
}

/// The leader's change (and whether it reads the value before): catch
/// up to the newest epoch, change, replicate.
async fn lead(
    ctx: &Arc<Ctx>,
    key: &Key,
    (change, reads): (WireChange, bool),
    cl: Consistency,
    replicas: Replicas,
) -> Result<WireChanged, WireError> {
    catch_up(ctx, key, &replicas, cl).await?;
    let (done, state) = ctx
        .engine()
        .change_reading(key, engine_change(change), now_ms(), reads)
        .await
        .map_err(|e| engine_error(&e))?;
    let before = match done.before.map(i64::try_from) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => {
            return Err(WireError::new(
                tally_net::wire::ErrorKind::Overflow,
                "the counter's value before is outside the range of a 64-bit counter",
            ));
        }
    };
    let done = WireChanged {
        applied: done.applied,
        before,
    };
    if !done.applied {
        settle_unmade(ctx).await?;
        return Ok(done); // nothing changed, nothing to replicate
    }
    // Overtaken by a newer change: acknowledged as made before it.
    replicate_header(ctx, key, state, replicas, cl).await?;
    Ok(done)
}

/// The leader's first step of a change: reads the cell from every live
/// replica (at least `cl`'s count) and merges it here, so that the change
/// is judged on, and made after, the newest epoch any of them knows. What
/// it learns is durable here before the change; what it already had may
/// not be yet: a change made logs its whole cell, and one not made waits
/// for [`settle_unmade`] before it answers.
pub(super) async fn catch_up(
    ctx: &Arc<Ctx>,
    key: &Key,
    replicas: &Replicas,
    cl: Consistency,
) -> Result<(), WireError> {
    let (merged, _) = read::read_key(ctx, key, replicas, cl, read::Reach::AllLive).await?;
    ctx.engine()
        .apply_news(key, &merged)
        .await
        .map(|_| ())
        .map_err(|e| engine_error(&e))
}

/// Waits until the state a change that was not made was judged on is
/// durable here, so that its answer never rests on state a crash loses.
pub(super) async fn settle_unmade(ctx: &Ctx) -> Result<(), WireError> {
    ctx.engine().barrier().await.map_err(|e| engine_error(&e))
}

/// How a change's replication was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Replicated {
    /// Held by as many replicas as the level asks.
    Held,
    /// A replica answered `Stale`: it holds this newer epoch, which wins
    /// over this change's (made by a later change, which saw this one if
    /// it was led here too).
    Overtaken(tally_engine::Epoch),
}

/// Replicates a change's new header (`state`, durable here) to `replicas`
/// by an add's round; answers at the verdict of `cl`, and the replication
/// goes on for its hints.
pub(super) async fn replicate_header(
    ctx: &Arc<Ctx>,
    key: &Key,
    state: tally_engine::Cell,
    replicas: Replicas,
    cl: Consistency,
) -> Result<Replicated, WireError> {
    let write = Write::new(ctx, key.clone(), state, replicas, cl, 1);
    let (tx, rx) = oneshot::channel();
    let task_ctx = ctx.clone();
    tokio::spawn(async move {
        // The change returned once the new state was durable here.
        let local = std::future::ready(Ok(()));
        replicate(&task_ctx, &mut [write], local, |w| {
            let _ = tx.send(w[0].round.verdict().cloned());
        })
        .await;
    });
    match rx.await {
        Ok(Some(Verdict::Ack)) => Ok(Replicated::Held),
        Ok(Some(Verdict::Retry { epoch })) => Ok(Replicated::Overtaken(epoch)),
        Ok(Some(Verdict::Fail(e))) => Err(e),
        Ok(None) | Err(_) => Err(WireError::unknown(
            tally_net::wire::ErrorKind::Internal,
            "the change's replication ended without a verdict",
        )),
    }
}

/// A change from the wire as the engine's.
pub(crate) fn engine_change(c: WireChange) -> Change {
    match c {
        WireChange::Set { value, ttl, only } => Change::Set {
            value,
            ttl: match ttl {
                WireTtl::Clear => Ttl::Clear,
                WireTtl::Keep => Ttl::Keep,
                WireTtl::At(ms) => Ttl::At(ms),
            },
            only: match only {
                WirePresence::Any => Presence::Any,
                WirePresence::Absent => Presence::Absent,
                WirePresence::Live => Presence::Live,
            },
        },
        WireChange::Expire { at_ms, only } => Change::Expire {
            at_ms,
            only: match only {
                WireWhen::Always => When::Always,
                WireWhen::NoDeadline => When::NoDeadline,
                WireWhen::HasDeadline => When::HasDeadline,
                WireWhen::Later => When::Later,
                WireWhen::Sooner => When::Sooner,
                WireWhen::SoonerThanOne => When::SoonerThanOne,
            },
        },
        WireChange::Delete => Change::Delete,
    }
}
