//! Resets: the leader first reads the cell from every live replica (at
//! least as many as the consistency level requires, within the read
//! timeout) and merges what it learns, so its epoch is the newest one any
//! reachable replica knows; then the engine moves the cell to the next
//! epoch with no shards, and that empty cell is replicated like a shard,
//! by the same round as an add. A newer reset that overtook this one (a
//! `Stale` answer) leaves the counter reset either way.
//!
//! Reading only the consistency level's replicas would let a leader that
//! missed a reset make an epoch that already exists (resets to the same
//! epoch merge): the new reset would silently keep every add made since
//! the one it missed. Reading every live replica costs a reset one round
//! trip more, and up to the read timeout while a replica is silent but not
//! yet marked down; resets are rare next to adds.

use std::sync::Arc;

use tally_engine::{Cell, Key};
use tally_net::wire::{Consistency, PeerRequest, PeerResponse, WireError};
use tokio::sync::oneshot;

use super::forward::{forward, unexpected};
use super::replicate::{Write, replicate};
use super::round::Verdict;
use crate::convert::{engine_error, wire_key};
use crate::ctx::Ctx;
use crate::placement::Route;
use crate::read;
use crate::ring::Replicas;

/// Resets a counter at `cl`, led here or by a live replica.
pub(crate) async fn reset(ctx: &Arc<Ctx>, key: &Key, cl: Consistency) -> Result<(), WireError> {
    match ctx.route(key, cl, "reset")? {
        Route::Lead(replicas) => lead(ctx, key, cl, replicas).await,
        Route::Forward(live) => {
            let req = PeerRequest::LeaderReset {
                key: wire_key(key),
                cl,
            };
            match forward(ctx, &live, req).await? {
                PeerResponse::Reset => Ok(()),
                other => Err(unexpected(&other)),
            }
        }
    }
}

/// The leader's reset for a coordinator that forwarded it.
pub(crate) async fn lead_forwarded(
    ctx: &Arc<Ctx>,
    key: &Key,
    cl: Consistency,
) -> Result<(), WireError> {
    let replicas = ctx.lead_here(key, cl, "reset")?;
    lead(ctx, key, cl, replicas).await
}

/// The leader's reset: catch up to the newest epoch, reset, replicate.
async fn lead(
    ctx: &Arc<Ctx>,
    key: &Key,
    cl: Consistency,
    replicas: Replicas,
) -> Result<(), WireError> {
    let (merged, _) = read::read_key(ctx, key, &replicas, cl, read::Reach::AllLive).await?;
    ctx.engine
        .apply(key, &merged)
        .await
        .map_err(|e| engine_error(&e))?;
    let epoch = ctx.engine.reset(key).await.map_err(|e| engine_error(&e))?;
    let cell = Cell::from_parts(epoch, []);
    let write = Write::new(ctx, key.clone(), cell, replicas, cl, 1);
    // Answered at the verdict; the replication goes on for its hints.
    let (tx, rx) = oneshot::channel();
    let task_ctx = ctx.clone();
    tokio::spawn(async move {
        // `reset` returned once the new epoch was durable here.
        let local = std::future::ready(Ok(()));
        replicate(&task_ctx, &mut [write], local, |w| {
            let _ = tx.send(w[0].round.verdict().cloned());
        })
        .await;
    });
    match rx.await {
        Ok(Some(Verdict::Ack | Verdict::Retry { .. })) => Ok(()),
        Ok(Some(Verdict::Fail(e))) => Err(e),
        Ok(None) | Err(_) => Err(WireError::unknown(
            tally_net::wire::ErrorKind::Internal,
            "the reset's replication ended without a verdict",
        )),
    }
}
