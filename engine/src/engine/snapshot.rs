//! Snapshots: the engine's data at one moment as hard links, cheap to take
//! and safe to copy off while the engine runs (SSTables and ids files are
//! never changed once written, only replaced). An engine opened on a
//! directory holding a snapshot's files serves exactly what was flushed
//! when it was taken, as a new incarnation (it has no `IDENTITY`).

use std::path::Path;

use super::Engine;
use crate::error::{Error, Result};
use crate::fsutil;

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshotted {
    /// Files linked (SSTables and ids files).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Engine {
    /// Flushes the memtables and the pending operation ids, then
    /// hard-links every live SSTable and ids file into `into` (created; it
    /// must not exist yet, and be on the same file system).
    pub fn snapshot(&self, into: &Path) -> Result<Snapshotted> {
        self.check_writable()?;
        if into.exists() {
            let e = std::io::Error::new(std::io::ErrorKind::AlreadyExists, "already exists");
            return Err(Error::io("create the snapshot directory", into, e));
        }
        std::fs::create_dir_all(into)
            .map_err(|e| Error::io("create the snapshot directory", into, e))?;
        let taken = self.link_all(into);
        if taken.is_err() {
            // No half snapshot is left to be listed or restored.
            let _ = std::fs::remove_dir_all(into);
        }
        taken
    }

    /// [`Engine::snapshot`] into the new directory `into`.
    fn link_all(&self, into: &Path) -> Result<Snapshotted> {
        self.flush()?;
        self.ids.persist()?;
        let tables = self.background.link_tables(into)?;
        let ids = self.ids.link_into(into)?;
        fsutil::sync_dir(into)?;
        Ok(Snapshotted {
            files: tables.files + ids.files,
            bytes: tables.bytes + ids.bytes,
        })
    }
}

/// Hard-links `from` into `dir` under its own name; adds it to `done`.
pub(crate) fn link(from: &Path, dir: &Path, done: &mut Snapshotted) -> Result<()> {
    let name = from.file_name().ok_or_else(|| {
        Error::io(
            "link into a snapshot",
            from,
            std::io::ErrorKind::InvalidInput.into(),
        )
    })?;
    let to = dir.join(name);
    std::fs::hard_link(from, &to).map_err(|e| Error::io("link into a snapshot", &to, e))?;
    done.files += 1;
    done.bytes += std::fs::metadata(&to).map(|m| m.len()).unwrap_or(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::{Key, Options};

    fn key(i: u32) -> Key {
        Key::new(format!("k{i}").as_bytes(), b"").unwrap()
    }

    #[tokio::test]
    async fn a_snapshot_reopens_to_the_values_it_was_taken_at() {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let engine = Engine::open(dir.path().join("engine"), Options::default()).unwrap();
        for i in 0..100 {
            engine.leader_add(&key(i), i64::from(i) + 1).await.unwrap();
        }
        let taken = engine.snapshot(&snap).unwrap();
        assert!(taken.files >= 1 && taken.bytes > 0, "{taken:?}");
        assert!(engine.snapshot(&snap).is_err(), "a tag is taken once");
        for i in 0..100 {
            engine.leader_add(&key(i), 1000).await.unwrap();
        }
        engine.compact().unwrap();
        let old_id = engine.stats().counter_id;
        drop(engine);

        let restored = Engine::open(&snap, Options::default()).unwrap();
        for i in 0..100 {
            let cell = restored.get(&key(i)).unwrap();
            assert_eq!(cell.value().unwrap(), i64::from(i) + 1, "counter {i}");
        }
        assert_ne!(
            restored.stats().counter_id,
            old_id,
            "a restore is a new incarnation"
        );
    }
}
