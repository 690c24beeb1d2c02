//! Hinted handoff's tasks: delivering hints to peers that are back and
//! can write, and fsyncing (and compacting) the hint files (the files
//! themselves are `hints`). What is delivered, and when, is `delivery`'s
//! to decide; these tasks read, send and record.

mod delivery;

use std::sync::Weak;
use std::time::Duration;

use tally_net::wire::PeerRequest;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::base::convert::{wire_cell, wire_key};
use crate::cluster::ctx::Ctx;
use crate::cluster::generations;
use crate::cluster::hints;
use delivery::{PeerStep, Round};

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
        for peer in (0..ctx.config().nodes.len()).filter(|&p| p != ctx.me()) {
            let left = ctx.node_state(peer) == tally_net::wire::NodeState::Left;
            if !left && ctx.is_up(peer) {
                ctx.hints().seen_up(peer);
            }
            let pending = ctx.hints().count(peer);
            match delivery::peer_step(left, pending, || ctx.transport().is_writable(peer)) {
                PeerStep::Skip => {}
                PeerStep::Forget => {
                    if let Err(e) = ctx.hints().forget(peer) {
                        warn!(peer = %ctx.name(peer), error = %e, "could not drop the hints of a node that left");
                    }
                }
                PeerStep::Deliver => deliver_round(&ctx, peer).await,
            }
        }
    }
}

/// Sends `peer` the current cell of up to [`HINT_BATCH_KEYS_MAX`] of its
/// hinted keys, and clears the ones it took.
async fn deliver_round(ctx: &std::sync::Arc<Ctx>, peer: usize) {
    let topology = ctx.topology();
    let mut round = Round::new(ctx.hints().pending(peer, HINT_BATCH_KEYS_MAX), |key| {
        generations::left(key.partition(), |db| topology.keyspace(db))
    });
    let mut cells = Vec::new();
    for (i, key) in round.to_send() {
        match ctx.engine().get(&key) {
            Ok(c) => cells.push((i, key, c)),
            Err(e) => {
                warn!(error = %e, "cannot read a hinted cell");
                round.unreadable(i);
            }
        }
    }
    // The cells may hold this node's adds with ids not durable yet: they
    // leave once they are (see `tally_engine::Engine::settled`).
    if ctx.engine().settled().await.is_err() {
        return;
    }
    let mut sends = JoinSet::new();
    for (i, key, cell) in cells {
        let ctx = ctx.clone();
        round.sent(i);
        sends.spawn(async move {
            let req = PeerRequest::Apply {
                key: wire_key(&key),
                cell: wire_cell(&cell),
            };
            let answer = ctx.transport().call(peer, req, ctx.write_timeout()).await;
            (i, answer.is_ok_and(|a| delivery::taken(&a)))
        });
    }
    while let Some(joined) = sends.join_next().await {
        if let Ok((i, taken)) = joined {
            round.on_answer(i, taken);
        }
    }
    let delivered = round.delivered();
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
