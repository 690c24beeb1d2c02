//! Snapshots of a node (`tally snapshot`): its SSTables and operation ids
//! hard-linked into `<data_dir>/snapshots/<tag>` after a flush, with the
//! ring they were taken under ([`RING`]: the ring version and the
//! databases' flush generations), listed and cleared by tag. A snapshot
//! costs no copy and holds the data as of its flush while the node goes
//! on; `tallyd restore` puts a stopped node back to one (see `restore`).
//!
//! A tag's directory is created exclusively (`Engine::snapshot`): of two
//! `snapshot --tag T` racing on a node, one takes it and the other is
//! refused, and neither removes the other's files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tally_net::wire::{ErrorKind, WireError, WireSnapshot, WireSnapshotOp, WireSnapshots};

use crate::cluster::ctx::Ctx;

/// The file in a snapshot holding the ring it was taken under (its
/// version and the databases' flush generations), in the ring file's
/// format (`topology::store`). A snapshot is whole once it is there.
pub(crate) const RING: &str = "RING";

/// Longest tag, in bytes.
pub(crate) const TAG_BYTES_MAX: usize = 64;

/// Whether `tag` may name a snapshot: a plain file name of
/// `[A-Za-z0-9._-]`, not `.` or `..`, at most [`TAG_BYTES_MAX`] bytes.
pub(crate) fn check_tag(tag: &str) -> Result<(), WireError> {
    let plain = tag
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if tag.is_empty() || tag.len() > TAG_BYTES_MAX || !plain || tag.starts_with('.') {
        return Err(WireError::new(
            ErrorKind::Invalid,
            format!(
                "bad snapshot tag {tag:?}: 1 to {TAG_BYTES_MAX} of A-Z a-z 0-9 . _ -, not starting with ."
            ),
        ));
    }
    Ok(())
}

/// Where a node's snapshots are.
pub(crate) fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("snapshots")
}

/// Takes, lists or clears this node's snapshots; answers them after.
pub(crate) async fn run(ctx: &Arc<Ctx>, op: WireSnapshotOp) -> Result<WireSnapshots, WireError> {
    let me = &ctx.config().nodes[ctx.me()];
    let dir = dir(&me.data_dir);
    match op {
        WireSnapshotOp::Take { tag } => take(ctx, &dir, &tag).await?,
        WireSnapshotOp::List => {}
        WireSnapshotOp::Clear { tag: Some(tag) } => {
            check_tag(&tag)?;
            let path = dir.join(&tag);
            if !path.is_dir() {
                return Err(WireError::new(
                    ErrorKind::Invalid,
                    format!("{} has no snapshot {tag:?}", me.id),
                ));
            }
            tally_world::fs::remove_dir_all(&path).map_err(|e| storage(&path, &e))?;
        }
        WireSnapshotOp::Clear { tag: None } => {
            for s in list(&dir)? {
                let path = dir.join(&s.tag);
                tally_world::fs::remove_dir_all(&path).map_err(|e| storage(&path, &e))?;
            }
        }
    }
    Ok(WireSnapshots {
        node: me.id.clone(),
        dir: dir.display().to_string(),
        snapshots: list(&dir)?,
    })
}

/// Takes snapshot `tag` into `dir`: the engine's files, then the ring
/// ([`RING`]), read after them so that no cell in the snapshot is of a
/// generation the ring has not flushed to yet.
async fn take(ctx: &Arc<Ctx>, dir: &Path, tag: &str) -> Result<(), WireError> {
    let me = &ctx.config().nodes[ctx.me()];
    check_tag(tag)?;
    let into = dir.join(tag);
    let taken_already = || {
        WireError::new(
            ErrorKind::Invalid,
            format!("{} already has a snapshot {tag:?}", me.id),
        )
    };
    if into.exists() {
        return Err(taken_already());
    }
    let worker = ctx.clone();
    let linked = into.clone();
    let taken = tally_world::blocking(move || worker.engine().snapshot(&linked))
        .await
        .map_err(|e| internal(&format!("the snapshot task failed: {e}")))?;
    let taken = match taken {
        Ok(taken) => taken,
        // Another `snapshot --tag` of the same tag won the race.
        Err(tally_engine::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            return Err(taken_already());
        }
        Err(e) => return Err(crate::base::convert::engine_error(&e)),
    };
    let ring = ctx.topology();
    let path = into.join(RING);
    crate::cluster::hints::file::replace(&path, &crate::cluster::topology::store::encode(&ring))
        .map_err(|e| internal(&format!("write {}: {e:#}", path.display())))?;
    tracing::info!(node = %me.id, tag, files = taken.files, bytes = taken.bytes,
        ring_version = ring.version, generations = ?ring.flushes, "snapshot taken");
    Ok(())
}

/// The snapshots in `dir`, by tag.
fn list(dir: &Path) -> Result<Vec<WireSnapshot>, WireError> {
    let entries = match tally_world::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(storage(dir, &e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| storage(dir, &e))?;
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let (mut files, mut bytes) = (0, 0);
        for f in tally_world::fs::read_dir(&path).map_err(|e| storage(&path, &e))? {
            let m = f
                .and_then(|f| f.metadata())
                .map_err(|e| storage(&path, &e))?;
            files += 1;
            bytes += m.len();
        }
        out.push(WireSnapshot {
            tag: entry.file_name().to_string_lossy().into_owned(),
            files,
            bytes,
        });
    }
    out.sort_by(|a, b| a.tag.cmp(&b.tag));
    Ok(out)
}

fn storage(path: &Path, e: &std::io::Error) -> WireError {
    WireError::new(ErrorKind::Storage, format!("{}: {e}", path.display()))
}

fn internal(why: &str) -> WireError {
    WireError::new(ErrorKind::Internal, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_plain_file_names() {
        for good in ["t1", "2026-11-27", "before_upgrade.v2", &"a".repeat(64)] {
            assert!(check_tag(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "../x",
            "a b",
            "ä",
            &"a".repeat(65),
        ] {
            assert!(check_tag(bad).is_err(), "{bad:?}");
        }
    }
}
