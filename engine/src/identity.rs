//! The node incarnation: its `counter_id`, and the lock on its data directory.
//!
//! # Format (version 1)
//!
//! `IDENTITY` = magic "TALLYID\0" | version u32 LE | counter_id u64 LE | crc32 u32 LE (24 bytes)
//!
//! The id is drawn at random when the data directory is created and never
//! reused: a node whose data is lost comes back with a new directory and so
//! a new id, and its fresh clocks cannot be mistaken for its old shards.
//!
//! An engine that was not closed cleanly (no `CLEAN` marker) takes a new id
//! on open, whatever its sync mode:
//! - with `periodic` sync, a crash can lose the last acknowledged writes of
//!   this node's own shards while other replicas already hold them;
//! - with `batch` sync, `get` serves a sealed add before its fsync, and a
//!   read repair can carry that shard version to other replicas before a
//!   crash erases it here.
//!
//! Either way, reusing the id would hand out the same clock twice with two
//! different values. The old shards stay valid and keep merging; the cost is
//! one more shard in the cells the new incarnation writes.
//!
//! For the same reason a poisoned engine (a failed fsync, a panicked engine
//! thread) is not marked clean when it shuts down: its memory, and other
//! replicas, may hold shard versions its log never got.
//!
//! The id that an unclean open retires is added to the `RETIRED` list
//! (see `retired`) before the new one is written: replicas may hold ids
//! its shards applied that its log lost, and the node must learn them
//! (`ids::tail`) before it applies ids again.
//!
//! `CLEAN` holds the last group commit of the incarnation (`batch u64 LE |
//! crc32 u32 LE`; empty from older versions, read as 0): a clean reopen
//! numbers its group commits on from there, so that an incarnation's
//! numbers never repeat and a replica can tell which of its ids are
//! durable (`ids::tail`).

use std::path::Path;
use tally_world::fs::{File, OpenOptions};

use crate::error::{Error, Result};
use crate::fsutil::{replace_file, sync_dir};

const MAGIC: &[u8; 8] = b"TALLYID\0";
const VERSION: u32 = 1;
const FILE: &str = "IDENTITY";
const CLEAN: &str = "CLEAN";
const LOCK: &str = "LOCK";

/// An opened identity; holding it keeps the directory locked.
pub(crate) struct Identity {
    pub(crate) counter_id: u64,
    /// The last group commit of this incarnation before this open (0 for
    /// a new one).
    pub(crate) batch_base: u64,
    _lock: File,
}

/// Takes the lock of the data directory `dir` (which must exist), held
/// while the returned file is open: [`Error::Locked`] if a running engine,
/// or a tool, holds it.
pub(crate) fn lock(dir: &Path) -> Result<File> {
    let lock_path = dir.join(LOCK);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io("open lock file", &lock_path, e))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(tally_world::fs::TryLockError::WouldBlock) => Err(Error::Locked(dir.to_path_buf())),
        Err(tally_world::fs::TryLockError::Error(e)) => {
            Err(Error::io("lock data directory", &lock_path, e))
        }
    }
}

impl Identity {
    /// Locks `dir` (creating it) and loads or creates its counter id.
    pub(crate) fn open(dir: &Path) -> Result<Identity> {
        tally_world::fs::create_dir_all(dir)
            .map_err(|e| Error::io("create data directory", dir, e))?;
        let lock = lock(dir)?;
        let path = dir.join(FILE);
        let clean_path = dir.join(CLEAN);
        let clean = match tally_world::fs::read(&clean_path) {
            Ok(bytes) => Some(decode_clean(&clean_path, &bytes)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("read clean marker", &clean_path, e)),
        };
        let was_clean = clean.is_some();
        let existing = match tally_world::fs::read(&path) {
            Ok(bytes) => Some(decode(&path, &bytes)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("read identity", &path, e)),
        };
        let counter_id = match existing {
            Some(id) if was_clean => id,
            previous => {
                let id = fresh_id(dir)?;
                if let Some(old) = previous {
                    tracing::warn!(old = %format!("{old:#018x}"), new = %format!("{id:#018x}"),
                        "engine was not closed cleanly: taking a new counter id");
                    crate::retired::add(dir, old)?;
                }
                write(dir, &path, id)?;
                id
            }
        };
        if was_clean {
            tally_world::fs::remove_file(&clean_path)
                .map_err(|e| Error::io("remove clean marker", &clean_path, e))?;
            sync_dir(dir)?;
        }
        Ok(Identity {
            counter_id,
            batch_base: clean.unwrap_or(0),
            _lock: lock,
        })
    }

    /// Forgets a clean shutdown: the next open takes a new counter id.
    /// Cutting records out of the log does this first, since versions of
    /// this node's own shard may go with them, and its clocks must never
    /// repeat under the same id.
    pub(crate) fn forget_clean(dir: &Path) -> Result<()> {
        let path = dir.join(CLEAN);
        match tally_world::fs::remove_file(&path) {
            Ok(()) => sync_dir(dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove clean marker", &path, e)),
        }
    }

    /// Records a clean shutdown (everything acknowledged is fsync'd), after
    /// group commit `last_batch`.
    pub(crate) fn mark_clean(dir: &Path, last_batch: u64) -> Result<()> {
        let path = dir.join(CLEAN);
        let mut b = last_batch.to_le_bytes().to_vec();
        b.extend_from_slice(&crc32fast::hash(&b).to_le_bytes());
        // Whole or absent: a marker torn by a crash while it was written
        // would stop the next open.
        replace_file(dir, &path, &b, "write clean marker")
    }
}

fn fresh_id(_dir: &Path) -> Result<u64> {
    Ok(tally_world::random_u64())
}

/// The last group commit a clean marker holds (0 for an empty one).
fn decode_clean(path: &Path, bytes: &[u8]) -> Result<u64> {
    match bytes.len() {
        0 => Ok(0),
        12 if crc32fast::hash(&bytes[..8]).to_le_bytes()[..] == bytes[8..] => {
            Ok(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")))
        }
        _ => Err(Error::corruption(path, 0, "not a clean marker")),
    }
}

fn decode(path: &Path, bytes: &[u8]) -> Result<u64> {
    if bytes.len() != 24 || &bytes[..8] != MAGIC {
        return Err(Error::corruption(path, 0, "not an identity file"));
    }
    let stored = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if crc32fast::hash(&bytes[..20]) != stored {
        return Err(Error::corruption(path, 0, "identity checksum mismatch"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(Error::corruption(
            path,
            8,
            format!("unsupported identity version {version}"),
        ));
    }
    Ok(u64::from_le_bytes(
        bytes[12..20].try_into().expect("8 bytes"),
    ))
}

fn write(dir: &Path, path: &Path, id: u64) -> Result<()> {
    let mut b = Vec::with_capacity(24);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&id.to_le_bytes());
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    replace_file(dir, path, &b, "write identity")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_stable_across_clean_reopens_and_new_after_an_unclean_one() {
        let dir = tempfile::tempdir().unwrap();
        let a = Identity::open(dir.path()).unwrap().counter_id;
        Identity::mark_clean(dir.path(), 41).unwrap();
        let b = Identity::open(dir.path()).unwrap();
        assert_eq!((b.counter_id, b.batch_base), (a, 41));
        drop(b);
        assert!(crate::retired::read(dir.path()).unwrap().is_empty());
        // Not marked clean this time: a new id, the old one retired.
        let c = Identity::open(dir.path()).unwrap();
        assert_ne!(c.counter_id, a);
        assert_eq!(c.batch_base, 0);
        assert_eq!(crate::retired::read(dir.path()).unwrap(), [a]);
    }

    #[test]
    fn an_empty_clean_marker_is_read_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = Identity::open(dir.path()).unwrap().counter_id;
        tally_world::fs::write(dir.path().join(CLEAN), b"").unwrap();
        let b = Identity::open(dir.path()).unwrap();
        assert_eq!((b.counter_id, b.batch_base), (a, 0));
        drop(b);
        tally_world::fs::write(dir.path().join(CLEAN), b"garbage").unwrap();
        assert!(matches!(
            Identity::open(dir.path()),
            Err(Error::Corruption { .. })
        ));
    }

    #[test]
    fn second_open_is_refused_while_locked() {
        let dir = tempfile::tempdir().unwrap();
        let _held = Identity::open(dir.path()).unwrap();
        assert!(matches!(Identity::open(dir.path()), Err(Error::Locked(_))));
    }
}
