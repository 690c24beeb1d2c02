//! `tallyd restore --config C --node N --tag T`: puts a stopped node back
//! to its snapshot `T` (`tally snapshot`), its data and its ring together.
//!
//! # Why the ring too
//!
//! Cells are stored under their database's flush generation (`keyspace`),
//! so a snapshot's data means what it meant only under the ring it was
//! taken under (the snapshot's [`RING`]: its version and the databases'
//! generations). Under a later ring, which a `FLUSHALL` since moved on,
//! the restored cells would be of a flushed generation: read by nothing,
//! and dropped by the next cleanup. So a restore puts back both: the
//! engine directory becomes a copy of the snapshot's files (a new
//! incarnation: a snapshot has no `IDENTITY`), the ring file the
//! snapshot's ring; and the node's hints go (they hold writes made after
//! the snapshot, which would come back).
//!
//! # What it means cluster-wide
//!
//! Nodes agree on the newest ring any of them holds (a node learns it
//! before it serves). So:
//! - every node restored from the same tag, all stopped: the cluster is
//!   back at the snapshot, flushes made since undone;
//! - one node restored while the others keep their data: at start it
//!   learns the newer ring from them, so the flushes since hold for it
//!   too (its cells of flushed generations are dropped, as everyone's
//!   were), and starting it with `--replace` merges in what it missed
//!   before it leads or answers reads (a node that served with the
//!   snapshot's ring before it learned the newer one would write to a
//!   flushed generation); the CRDT merge never lets its older shards win;
//! - some restored, some not: the newer ring of those not restored wins,
//!   as for one node.
//!
//! A restore is refused when the ring's members changed since the
//! snapshot, or it was taken during a ring change ([`check_rings`]): the
//! cluster cannot go back to other members.
//!
//! # Crash story
//!
//! Staged in `<data_dir>/restoring.tmp` (a copy of each file, fsync'd,
//! and the ring), fsync'd and renamed to `<data_dir>/restoring`: that
//! rename is the commit point. Applying it ([`finish`]) removes the hints
//! and renames the staged engine directory and ring over the node's;
//! each step may be repeated, and a node that starts with a `restoring`
//! directory finishes the restore first. A crash before the commit point
//! leaves the node as it was (the next restore removes the stale stage).

use std::path::Path;
use tally_world::fs::{self, File};

use anyhow::{Context, Result, anyhow, bail};

use crate::cluster::snapshot::{self, RING};
use crate::cluster::topology::{Topology, store};
use crate::config::Config;

/// A restore being staged: incomplete, removed by the next restore.
const STAGING: &str = "restoring.tmp";
/// A restore staged whole, to be applied (by [`finish`]).
const STAGED: &str = "restoring";

/// What a restore put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Files copied into the engine directory.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The version of the ring the snapshot was taken under, now the node's.
    pub ring_version: u64,
    /// Its databases' flush generations.
    pub generations: Vec<u32>,
    /// The version of the ring the node held before, if it held one.
    pub was_version: Option<u64>,
}

/// Whether a snapshot taken under ring `taken` may be restored onto a
/// node that holds ring `now` (`None`: none stored yet); why not, if not.
pub(crate) fn check_rings(taken: &Topology, now: Option<&Topology>) -> Result<(), String> {
    if let Some(change) = taken.in_progress() {
        return Err(format!(
            "the snapshot was taken during a ring change (node #{} {}, ring version {}): \
             a restore cannot bring back a change half done",
            change.node() + 1,
            change.verb(),
            taken.version
        ));
    }
    if let Some(now) = now
        && now.states != taken.states
    {
        return Err(format!(
            "the ring's members changed since the snapshot (ring version {} then, {} now): \
             a restore cannot bring back other members",
            taken.version, now.version
        ));
    }
    Ok(())
}

/// Restores node `node` of the config at `config` from its snapshot
/// `tag`. The node must be stopped (its engine directory is locked).
pub fn run(config: &Path, node: &str, tag: &str) -> Result<Restored> {
    let config = Config::load(config)?;
    let (_, me) = config.node(node)?;
    let data = me.data_dir.clone();
    snapshot::check_tag(tag).map_err(|e| anyhow!(e.message))?;
    let from = snapshot::dir(&data).join(tag);
    if !from.is_dir() {
        bail!("{node} has no snapshot {tag:?} (no {})", from.display());
    }
    let ring_path = from.join(RING);
    let ring = fs::read(&ring_path).with_context(|| {
        format!(
            "read {}: a snapshot without its ring (taken by an older tallyd, or cut short) \
             cannot be restored by this command",
            ring_path.display()
        )
    })?;
    let taken = store::decode(&ring).map_err(|why| anyhow!("{}: {why}", ring_path.display()))?;
    let now = store::load(&data)?;
    check_rings(&taken, now.as_ref())
        .map_err(|why| anyhow!("{node} cannot be restored from {tag:?}: {why}"))?;
    let engine = data.join("engine");
    let _stopped = match engine.is_dir() {
        true => Some(tally_engine::lock_stopped(&engine).with_context(|| {
            format!(
                "lock {}: {node} must be stopped to be restored",
                engine.display()
            )
        })?),
        false => None,
    };
    // One staged before and never applied goes first, as a start would.
    finish(&data)?;
    let (files, bytes) = stage(&from, &data, &ring)?;
    finish(&data)?;
    Ok(Restored {
        files,
        bytes,
        ring_version: taken.version,
        generations: taken.flushes.clone(),
        was_version: now.map(|t| t.version),
    })
}

/// Stages the restore of snapshot `from` into `data` and commits it
/// (renames it to [`STAGED`]); answers the files and bytes copied.
fn stage(from: &Path, data: &Path, ring: &[u8]) -> Result<(u64, u64)> {
    let tmp = data.join(STAGING);
    remove_dir(&tmp)?;
    let engine = tmp.join("engine");
    fs::create_dir_all(&engine).with_context(|| format!("create {}", engine.display()))?;
    let (mut files, mut bytes) = (0, 0);
    let listing = || format!("list {}", from.display());
    for entry in fs::read_dir(from).with_context(listing)? {
        let entry = entry.with_context(listing)?;
        let name = entry.file_name();
        if name == RING || !entry.file_type().with_context(listing)?.is_file() {
            continue;
        }
        bytes += copy_synced(&entry.path(), &engine.join(&name))?;
        files += 1;
    }
    sync_dir(&engine)?;
    write_synced(&tmp.join("ring"), ring)?;
    sync_dir(&tmp)?;
    let staged = data.join(STAGED);
    fs::rename(&tmp, &staged)
        .with_context(|| format!("rename {} to {}", tmp.display(), staged.display()))?;
    sync_dir(data)?;
    Ok((files, bytes))
}

/// Applies a restore staged in `data` (by `tallyd restore`), if one is:
/// the node's hints removed, the staged engine directory and ring renamed
/// over its own. Each step may run again after a crash. Answers whether
/// one was applied.
pub fn finish(data: &Path) -> Result<bool> {
    let staged = data.join(STAGED);
    if !staged.is_dir() {
        return Ok(false);
    }
    remove_dir(&data.join("hints"))?;
    let engine = staged.join("engine");
    if engine.is_dir() {
        let live = data.join("engine");
        remove_dir(&live)?;
        rename(&engine, &live)?;
    }
    let ring = staged.join("ring");
    if ring.is_file() {
        rename(&ring, &store::path(data))?;
    }
    sync_dir(data)?;
    remove_dir(&staged)?;
    sync_dir(data)?;
    Ok(true)
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).with_context(|| format!("rename {} to {}", from.display(), to.display()))
}

/// Removes the directory `dir` and all it holds, if it is there.
fn remove_dir(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("remove {}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// Copies `from` to the new file `to` and fsyncs it; answers its bytes.
fn copy_synced(from: &Path, to: &Path) -> Result<u64> {
    let bytes = fs::copy(from, to)
        .with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    File::open(to)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("fsync {}", to.display()))?;
    Ok(bytes)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes)
        .and_then(|()| File::open(path)?.sync_all())
        .with_context(|| format!("write {}", path.display()))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync {}", dir.display()))
}

#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;
