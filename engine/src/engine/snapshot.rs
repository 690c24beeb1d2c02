//! Snapshots: the engine's data at one moment as hard links, cheap to take
//! and safe to copy off while the engine runs (SSTables and ids files are
//! never changed once written, only replaced). An engine opened on a
//! directory holding a snapshot's files serves exactly what was flushed
//! when it was taken, as a new incarnation (it has no `IDENTITY`).

use std::path::Path;

use super::Engine;
use crate::error::{Error, Result};
use crate::fsutil::{self, Snapshotted};

impl Engine {
    /// Flushes the memtables and the pending operation ids, then
    /// hard-links every live SSTable and ids file into `into` (created
    /// exclusively: an `AlreadyExists` error if it exists, even if another
    /// snapshot is creating it now; it must be on the same file system).
    pub fn snapshot(&self, into: &Path) -> Result<Snapshotted> {
        self.check_writable()?;
        if let Some(parent) = into.parent() {
            tally_world::fs::create_dir_all(parent)
                .map_err(|e| Error::io("create the snapshots directory", parent, e))?;
        }
        // Created exclusively: of two snapshots racing for one name, one
        // gets `AlreadyExists` here and never touches the other's files.
        tally_world::fs::create_dir(into)
            .map_err(|e| Error::io("create the snapshot directory", into, e))?;
        let taken = self.link_all(into);
        if taken.is_err() {
            // No half snapshot is left to be listed or restored; the
            // directory is this call's own.
            let _ = tally_world::fs::remove_dir_all(into);
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

/// Locks the engine directory `dir` of a stopped node, for a tool that
/// replaces its files (a restore): [`Error::Locked`] while an engine, or
/// another tool, holds it; held until the file is dropped.
pub fn lock_stopped(dir: &Path) -> Result<tally_world::fs::File> {
    crate::identity::lock(dir)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::engine::test_support::add_one;
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
            add_one(&engine, &key(i), i64::from(i) + 1).await.unwrap();
        }
        let taken = engine.snapshot(&snap).unwrap();
        assert!(taken.files >= 1 && taken.bytes > 0, "{taken:?}");
        assert!(engine.snapshot(&snap).is_err(), "a tag is taken once");
        for i in 0..100 {
            add_one(&engine, &key(i), 1000).await.unwrap();
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
    /// Two snapshots racing for one tag: one wins, the other is refused,
    /// and the winner's files stay (the loser once removed the directory
    /// both had passed the "does it exist" check for).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_snapshots_racing_for_one_tag_never_delete_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path().join("engine"), Options::default()).unwrap();
        for i in 0..50 {
            add_one(&engine, &key(i), 1).await.unwrap();
        }
        let engine = std::sync::Arc::new(engine);
        for round in 0..20 {
            let snap = dir.path().join(format!("snap{round}"));
            let start = std::sync::Arc::new(std::sync::Barrier::new(2));
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let (engine, snap, start) = (engine.clone(), snap.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        engine.snapshot(&snap)
                    })
                })
                .collect();
            let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
            let won = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(won, 1, "round {round}: {results:?}");
            let lost = results.iter().find_map(|r| r.as_ref().err()).unwrap();
            assert!(
                lost.to_string().contains("exists"),
                "round {round}: the loser says why: {lost}"
            );
            let taken = results.iter().find_map(|r| r.as_ref().ok()).unwrap();
            let files = tally_world::fs::read_dir(&snap)
                .map(|d| d.count())
                .unwrap_or(0);
            assert_eq!(
                files as u64, taken.files,
                "round {round}: the winner's snapshot lost files"
            );
        }
    }
}
