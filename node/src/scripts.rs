//! The node's cache of Lua scripts by sha1 (see `resp::script`), shared by
//! every RESP connection, and filled from the other nodes on a miss: a
//! script loaded through one node runs by its sha through any other, so a
//! client may send `SCRIPT LOAD` and `EVALSHA` through different nodes. A
//! script a peer answers is kept only if its sha1 is the one asked for.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tally_net::wire::{PeerRequest, PeerResponse};
use tokio::task::JoinSet;

use crate::ctx::Ctx;

/// Most scripts a node caches.
pub(crate) const SCRIPTS_MAX: usize = 10_000;
/// Longest script a node caches (or runs), in bytes.
pub(crate) const SCRIPT_BYTES_MAX: usize = 4 << 20;
/// How long a peer may take to answer for a script.
const FETCH_TIMEOUT: Duration = Duration::from_secs(1);

/// The scripts, and how many times the cache was flushed.
#[derive(Default)]
struct Cache {
    scripts: HashMap<String, Arc<[u8]>>,
    generation: u64,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The lowercase hex sha1 of `body`, as Redis names scripts.
pub(crate) fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// The script of `sha`, if this node has it.
pub(crate) fn get(sha: &str) -> Option<Arc<[u8]>> {
    cache().lock().scripts.get(sha).cloned()
}

/// Whether this node has the script of `sha`.
pub(crate) fn contains(sha: &str) -> bool {
    cache().lock().scripts.contains_key(sha)
}

/// Keeps `body` under its sha; false when the cache is full (and it is
/// not there already).
pub(crate) fn insert(sha: &str, body: Arc<[u8]>) -> bool {
    let mut c = cache().lock();
    if c.scripts.len() >= SCRIPTS_MAX && !c.scripts.contains_key(sha) {
        return false;
    }
    c.scripts.entry(sha.to_string()).or_insert(body);
    true
}

/// Empties this node's cache.
pub(crate) fn flush() {
    let mut c = cache().lock();
    c.scripts.clear();
    c.generation += 1;
}

/// How many times this node's cache was emptied.
pub(crate) fn generation() -> u64 {
    cache().lock().generation
}

/// The script of `sha` from this node, or else from the first live peer
/// that has it (kept here then).
pub(crate) async fn find(ctx: &Arc<Ctx>, sha: &str) -> Option<Arc<[u8]>> {
    if let Some(body) = get(sha) {
        return Some(body);
    }
    let mut asked = JoinSet::new();
    for n in (0..ctx.config.nodes.len()).filter(|&n| n != ctx.me && ctx.is_up(n)) {
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
            insert(sha, body.clone());
            return Some(body);
        }
    }
    None
}

/// Empties every live peer's cache too (best effort: a peer that does not
/// answer keeps its scripts).
pub(crate) async fn flush_everywhere(ctx: &Arc<Ctx>) {
    flush();
    let mut asked = JoinSet::new();
    for n in (0..ctx.config.nodes.len()).filter(|&n| n != ctx.me && ctx.is_up(n)) {
        let ctx = ctx.clone();
        asked.spawn(async move {
            ctx.transport()
                .call(n, PeerRequest::FlushScripts, FETCH_TIMEOUT)
                .await
        });
    }
    while asked.join_next().await.is_some() {}
}

/// A peer's `Script` or `FlushScripts`.
pub(crate) fn serve(req: PeerRequest) -> PeerResponse {
    match req {
        PeerRequest::Script { sha } => PeerResponse::Script(get(&sha).map(|b| b.to_vec())),
        PeerRequest::FlushScripts => {
            flush();
            PeerResponse::Applied
        }
        other => PeerResponse::Error(tally_net::wire::WireError::new(
            tally_net::wire::ErrorKind::Internal,
            format!("not a script request: {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shas_are_redis_ones() {
        // redis-cli SCRIPT LOAD "return 1"
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }
}
