//! The script cache's peer half (`scripts`): an `EVALSHA` of a script
//! this node lacks asks the live peers for it, and `SCRIPT FLUSH` empties
//! theirs too.

use std::sync::Arc;
use std::time::Duration;

use tally_net::wire::{PeerRequest, PeerResponse};
use tokio::task::JoinSet;

use crate::cluster::ctx::Ctx;
use crate::cluster::scripts::sha1_hex;

/// How long a peer may take to answer for a script.
const FETCH_TIMEOUT: Duration = Duration::from_secs(1);

/// The script of `sha` from this node, or else from the first live peer
/// that has it (kept here then).
pub(crate) async fn find(ctx: &Arc<Ctx>, sha: &str) -> Option<Arc<[u8]>> {
    if let Some(body) = ctx.scripts().get(sha) {
        return Some(body);
    }
    let mut asked = JoinSet::new();
    for n in (0..ctx.config().nodes.len()).filter(|&n| n != ctx.me() && ctx.is_up(n)) {
        let (ctx, req) = (
            ctx.clone(),
            PeerRequest::Script {
                sha: sha.to_string(),
            },
        );
        asked.spawn(async move { ctx.transport().call(n, req, FETCH_TIMEOUT).await });
    }
    while let Some(answer) = asked.join_next().await {
        if let Ok(Ok(PeerResponse::Script(Some(body)))) = answer
            && sha1_hex(&body) == sha
        {
            let body: Arc<[u8]> = body.into();
            ctx.scripts().insert_eval(sha, body.clone());
            return Some(body);
        }
    }
    None
}

/// Empties every live peer's cache too (best effort: a peer that does not
/// answer keeps its scripts).
pub(crate) async fn flush_everywhere(ctx: &Arc<Ctx>) {
    ctx.scripts().flush();
    let mut asked = JoinSet::new();
    for n in (0..ctx.config().nodes.len()).filter(|&n| n != ctx.me() && ctx.is_up(n)) {
        let ctx = ctx.clone();
        asked.spawn(async move {
            ctx.transport()
                .call(n, PeerRequest::FlushScripts, FETCH_TIMEOUT)
                .await
        });
    }
    while asked.join_next().await.is_some() {}
}
