//! `tallyd run --replace`: a node whose data directory was lost (a dead
//! disk, a wiped machine) comes back under a new counter_id and takes its
//! ranges back from the other replicas before it serves them, as
//! Cassandra's `replace_address` does.
//!
//! - Before the engine opens ([`prepare`]): the data directory must hold
//!   no incarnation (`engine/IDENTITY`), unless a replace of it was begun;
//!   a `replacing` marker, written durably, says one was.
//! - While the marker is there the node takes replicated writes (as a
//!   pending replica does), leads none (its heartbeats say it is not
//!   writable, so coordinators pick another leader), and refuses replica
//!   reads (an answer from it must not count toward a quorum:
//!   `Ctx::check_readable`).
//! - Once it has learned the ring it must be a member of it (a node that
//!   never was one joins instead); its ranges are synced from every
//!   replica by the repair machinery, again and again while a replica is
//!   down ([`run`]); then the marker goes and the node serves.
//! - A replace that stopped half way resumes when the node starts again,
//!   with or without the flag.
//!
//! The lost incarnation is retired like any other (`tally fold` folds its
//! shards). The ids it applied are lost with it: a retry of one of them is
//! applied again, as after `removenode`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tally_net::wire::{ErrorKind, NodeState, WireError, WireRepaired};
use tracing::{info, warn};

use crate::cluster::ctx::Ctx;

/// Where the marker of a replace in progress is.
fn marker(data_dir: &Path) -> PathBuf {
    data_dir.join("replacing")
}

/// Whether a replace of the node in `data_dir` is in progress.
pub(crate) fn in_progress(data_dir: &Path) -> bool {
    marker(data_dir).exists()
}

/// Before the node opens: with `replace`, checks that `data_dir` holds no
/// incarnation and marks it, durably, as being replaced. Answers whether a
/// replace is in progress (begun now, or before and not finished).
pub(crate) fn prepare(data_dir: &Path, replace: bool) -> anyhow::Result<bool> {
    if in_progress(data_dir) {
        return Ok(true);
    }
    if !replace {
        return Ok(false);
    }
    let identity = data_dir.join("engine").join("IDENTITY");
    if identity.exists() {
        bail!(
            "{} holds this node's data ({} exists): --replace is for a node whose data \
             directory was lost; a node that still has its data restarts without it",
            data_dir.display(),
            identity.display()
        );
    }
    tally_world::fs::create_dir_all(data_dir)
        .with_context(|| format!("create the data directory {}", data_dir.display()))?;
    let path = marker(data_dir);
    crate::cluster::hints::file::replace(&path, b"a replace of this node is in progress\n")
        .with_context(|| format!("write {}", path.display()))?;
    Ok(true)
}

/// Syncs every range this node replicates from every replica, until it
/// succeeds (a replica down is waited for); then the node leads and
/// answers reads again. Refused when the node is not a member of the
/// ring.
pub(crate) async fn run(ctx: &Arc<Ctx>) -> Result<WireRepaired, WireError> {
    let state = ctx.node_state(ctx.me());
    if state != NodeState::Normal {
        // Nothing to replace: the next start is a plain one.
        let path = marker(&ctx.config().nodes[ctx.me()].data_dir);
        if let Err(e) = crate::cluster::hints::file::remove(&path) {
            warn!(error = %e, "could not remove the replace marker");
        }
        ctx.replaced();
        return Err(WireError::not_applied(
            ErrorKind::Invalid,
            format!(
                "{} is not a member of the ring (it is {state:?}): a node that never was one \
                 joins (tallyd run --join)",
                ctx.name(ctx.me())
            ),
        ));
    }
    info!(node = %ctx.name(ctx.me()), "replacing: syncing this node's ranges from every replica");
    let synced = loop {
        let groups = crate::cluster::repair::run::groups(ctx, None);
        match crate::cluster::repair::run::sync(ctx, groups).await {
            Ok(done) => break done,
            Err(e) => {
                warn!(error = %e, "the replace's sync stopped; trying again in 2 s");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    let path = marker(&ctx.config().nodes[ctx.me()].data_dir);
    crate::cluster::hints::file::remove(&path).map_err(|e| {
        WireError::new(
            ErrorKind::Storage,
            format!("could not remove {}: {e:#}", path.display()),
        )
    })?;
    ctx.replaced();
    info!(summary = ?synced, "replaced: this node leads and answers reads again");
    Ok(synced)
}
