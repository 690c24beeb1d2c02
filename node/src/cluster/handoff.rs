//! Hinted handoff's tasks: delivering hints to peers that are back and
//! can write, and fsyncing (and compacting) the hint files (the files
//! themselves are `hints`).

use std::sync::Weak;
use std::time::Duration;

use tally_net::wire::{PeerRequest, PeerResponse};
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::base::convert::{wire_cell, wire_key};
use crate::cluster::ctx::Ctx;
use crate::cluster::generations;
use crate::cluster::hints;

/// Keys delivered to one peer per hint round.
const HINT_BATCH_KEYS_MAX: usize = 512;
/// Pause between hint rounds.
const HINT_ROUND_INTERVAL: Duration = Duration::from_millis(200);

/// Starts delivering and syncing hints, until the node is gone.
pub(crate) fn start(ctx: Weak<Ctx>) {
    tokio::spawn(deliver(ctx.clone()));
    tokio::spawn(sync(ctx));
}

/// Delivers hints to peers that are up, in rounds, until the node stops.
async fn deliver(ctx: Weak<Ctx>) {
    loop {
        tokio::time::sleep(HINT_ROUND_INTERVAL).await;
        let Some(ctx) = ctx.upgrade() else { return };
        for peer in 0..ctx.config().nodes.len() {
            // A peer that cannot write would refuse every cell: its hints
            // wait until it can (a restart on a good disk).
            if peer == ctx.me() {
                continue;
            }
            // A node that left the ring needs none (its ranges moved with
            // every write they had); hints for it can still come from
            // writes begun before it left.
            if ctx.node_state(peer) == tally_net::wire::NodeState::Left {
                if ctx.hints().count(peer) > 0
                    && let Err(e) = ctx.hints().forget(peer)
                {
                    tracing::warn!(peer = %ctx.name(peer), error = %e, "could not drop the hints of a node that left");
                }
                continue;
            }
            if ctx.is_up(peer) {
                ctx.hints().seen_up(peer);
            }
            if ctx.hints().count(peer) == 0 || !ctx.transport().is_writable(peer) {
                continue;
            }
            deliver_round(&ctx, peer).await;
        }
    }
}

/// Sends `peer` the current cell of up to [`HINT_BATCH_KEYS_MAX`] of its
/// hinted keys, and clears the ones it took.
async fn deliver_round(ctx: &std::sync::Arc<Ctx>, peer: usize) {
    let keys = ctx.hints().pending(peer, HINT_BATCH_KEYS_MAX);
    let mut cells = Vec::with_capacity(keys.len());
    // A flushed generation's hints are done with: nothing reads them, and
    // the peer refuses them (`generations`).
    let topology = ctx.topology();
    let (flushed, keys): (Vec<_>, Vec<_>) = keys
        .into_iter()
        .partition(|(key, _)| generations::left(key.partition(), |db| topology.keyspace(db)));
    for (key, generation) in keys {
        match ctx.engine().get(&key) {
            Ok(c) => cells.push((key, generation, c)),
            Err(e) => warn!(error = %e, "cannot read a hinted cell"),
        }
    }
    // The cells may hold this node's adds with ids not durable yet: they
    // leave once they are (see `tally_engine::Engine::settled`).
    if ctx.engine().settled().await.is_err() {
        return;
    }
    let mut sends = JoinSet::new();
    for (key, generation, cell) in cells {
        let ctx = ctx.clone();
        sends.spawn(async move {
            let req = PeerRequest::Apply {
                key: wire_key(&key),
                cell: wire_cell(&cell),
            };
            let ok = matches!(
                ctx.transport().call(peer, req, ctx.write_timeout()).await,
                Ok(PeerResponse::Applied | PeerResponse::Stale { .. })
            );
            (key, generation, ok)
        });
    }
    let mut delivered = flushed;
    while let Some(joined) = sends.join_next().await {
        if let Ok((key, generation, true)) = joined {
            delivered.push((key, generation));
        }
    }
    let count = delivered.len();
    if let Err(e) = ctx.hints().delivered(peer, &delivered) {
        warn!(error = %e, "could not record delivered hints");
    }
    if count > 0 {
        info!(peer = %ctx.name(peer), delivered = count, left = ctx.hints().count(peer), "delivered hints");
    }
}

/// Drops hints past their window (see `hints::bound`) and fsyncs hint
/// files every `hints::SYNC_INTERVAL`.
async fn sync(ctx: Weak<Ctx>) {
    loop {
        tokio::time::sleep(hints::SYNC_INTERVAL).await;
        let Some(ctx) = ctx.upgrade() else { return };
        if let Err(e) = ctx.hints().enforce(tally_engine::now_ms()) {
            warn!(error = %e, "could not empty a hint file");
        }
        let result = tally_world::blocking(move || ctx.hints().sync()).await;
        if let Ok(Err(e)) = result {
            warn!(error = %e, "could not fsync hints");
        }
    }
}
