//! Learning lost tails after an unclean restart.
//!
//! An applier's shard leaves it with the ids it could still lose (see
//! `tally_engine::ids::tail`). When this node comes back from an unclean
//! restart, its retired incarnations may have reached replicas with ids
//! its log lost; a retry of one of those, applied again here, would count
//! twice. So before this node applies an id for a key, it learns those
//! tails from every other replica of the key ([`Gate`]): each peer fences
//! the retired incarnations and answers what it holds of them, with its
//! cells; the engine makes both durable. Until a key's replicas have all
//! answered, adds with ids led here for it fail fast as not applied, and
//! the client retries them: the availability an unclean restart costs
//! while a peer is down. Once every peer has answered, the retired
//! incarnations leave the engine's list and the peers are told to forget
//! their tails.
//!
//! ```text
//! start ─▶ engine.retired() ─▶ per peer: LearnTails (pages) ─▶ engine.learn_tails
//!       ─▶ gate opens for keys whose replicas all answered
//!       ─▶ all answered: engine.tails_learned, ForgetTails to every peer
//! ```

use std::sync::Weak;
use std::time::Duration;

use tally_net::log_limit::LogLimit;
use tally_net::wire::{ErrorKind, PeerRequest, PeerResponse, WireError};
use tracing::{info, warn};

use crate::base::convert::{self, engine_error};
use crate::cluster::ctx::Ctx;
pub(crate) use crate::cluster::tails_gate::Gate;

/// How long a peer that did not answer is left before it is asked again.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// The refusal of an add with an id this node may not apply yet.
pub(crate) fn not_ready(ctx: &Ctx) -> WireError {
    WireError::not_applied(
        ErrorKind::Unavailable,
        format!(
            "{} restarted uncleanly and is still learning the ids its last run applied \
             from the other replicas; nothing was applied: retry the same id",
            ctx.name(ctx.me())
        ),
    )
}

/// Learns this node's lost tails from every peer, in the background.
pub(crate) fn start(ctx: Weak<Ctx>) {
    tokio::spawn(async move {
        let Some(c) = ctx.upgrade() else { return };
        c.tails().set_learned(c.me());
        if c.tails().is_open() {
            return;
        }
        let retired = c.tails().retired().to_vec();
        info!(retired = ?retired, "learning the ids of this node's last runs from its peers");
        let peers: Vec<usize> = (0..c.config().nodes.len())
            .filter(|&n| n != c.me())
            .collect();
        drop(c);
        let tasks: Vec<_> = peers
            .iter()
            .map(|&peer| tokio::spawn(learn_from(ctx.clone(), peer, retired.clone())))
            .collect();
        for t in tasks {
            if t.await.is_err() {
                return;
            }
        }
        let Some(c) = ctx.upgrade() else { return };
        if !c.tails().is_open() {
            return; // the node is closing
        }
        if let Err(e) = c.engine().tails_learned(&retired) {
            warn!(error = %e, "could not take the learned incarnations off the list; learning again at the next start");
        }
        info!("learned the ids of this node's last runs from every peer");
        for peer in peers {
            let req = PeerRequest::ForgetTails {
                retired: retired.clone(),
            };
            // Best effort: a peer that misses it keeps a few ids it never needs.
            let _ = c.transport().call(peer, req, c.write_timeout()).await;
        }
    });
}

/// Asks `peer` for the tails of `retired` until it has answered them all
/// and they are durable here.
async fn learn_from(ctx: Weak<Ctx>, peer: usize, retired: Vec<u64>) {
    let mut from = 0u64;
    loop {
        let Some(c) = ctx.upgrade() else { return };
        let req = PeerRequest::LearnTails {
            retired: retired.clone(),
            from,
        };
        let answer = c.transport().call(peer, req, c.read_timeout()).await;
        let learned = match answer {
            Ok(PeerResponse::Tails { learned, more }) => Some((learned, more)),
            Ok(other) => {
                // A peer that refuses would be asked again every turn: a line a second.
                static LOG: LogLimit = LogLimit::per_second();
                if let Some(suppressed) = LOG.admit() {
                    warn!(peer = %c.name(peer), answer = ?other, suppressed, "unexpected answer to LearnTails");
                }
                None
            }
            Err(_) => None,
        };
        let Some((learned, more)) = learned else {
            drop(c);
            tokio::time::sleep(RETRY_AFTER).await;
            continue;
        };
        let page = learned.len() as u64;
        let taken = learned
            .iter()
            .map(convert::learned)
            .collect::<Result<Vec<_>, _>>();
        let stored = match taken {
            Ok(tails) => c
                .engine()
                .learn_tails(tails)
                .await
                .map_err(|e| engine_error(&e)),
            Err(e) => Err(e),
        };
        if let Err(e) = stored {
            // A node that cannot write (a full disk) would say so every turn.
            static LOG: LogLimit = LogLimit::per_second();
            if let Some(suppressed) = LOG.admit() {
                warn!(peer = %c.name(peer), error = %e, suppressed, "could not learn a peer's tails; asking again");
            }
            drop(c);
            tokio::time::sleep(RETRY_AFTER).await;
            continue;
        }
        from += page;
        if !more {
            info!(peer = %c.name(peer), "learned this node's lost ids held by the peer");
            c.tails().set_learned(peer);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_opens_per_key_as_its_replicas_answer() {
        let g = Gate::new(4, 0, vec![9]);
        assert!(!g.ready(&[0, 1, 2]));
        g.set_learned(1);
        g.set_learned(2);
        assert!(g.ready(&[0, 1, 2]), "every replica of the key answered");
        assert!(!g.ready(&[0, 2, 3]));
        assert!(!g.is_open());
        g.set_learned(3);
        assert!(g.is_open() && g.ready(&[1, 2, 3]));
        // Nothing to learn: open from the start.
        assert!(Gate::new(3, 1, vec![]).ready(&[0, 1, 2]));
    }
}
