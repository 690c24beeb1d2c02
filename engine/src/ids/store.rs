//! The ledger, the tails and their files, behind one handle: loaded at
//! open, written before a flush lets log segments go.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::Retention;
use super::file::{self, FILES_MAX};
use super::ledger::Ledger;
use super::now_ms;
use super::tail::Tails;
use crate::error::Result;
use crate::fsutil;

/// The ledger and the ids files of one data directory.
pub(crate) struct IdsStore {
    dir: PathBuf,
    ledger: Arc<Ledger>,
    tails: Arc<Tails>,
    /// The live files, oldest first; held while one is written.
    files: Mutex<Vec<(u64, PathBuf)>>,
}

impl IdsStore {
    /// Loads every ids file of `dir` into a new ledger.
    pub(crate) fn open(dir: &Path, retention: Retention) -> Result<IdsStore> {
        let ledger = Arc::new(Ledger::new(retention));
        let tails = Arc::new(Tails::default());
        let files = fsutil::numbered_files(dir, "ids")?;
        let now = now_ms();
        let mut entries = 0;
        for (_, path) in &files {
            entries += file::load(path, &ledger, &tails, now)?;
        }
        if !files.is_empty() {
            tracing::info!(files = files.len(), entries, "loaded operation ids");
        }
        Ok(IdsStore {
            dir: dir.to_path_buf(),
            ledger,
            tails,
            files: Mutex::new(files),
        })
    }

    pub(crate) fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    pub(crate) fn tails(&self) -> &Arc<Tails> {
        &self.tails
    }

    /// Writes the entries recorded since the last call to a new file, or,
    /// when there are [`FILES_MAX`] files already, a snapshot of the whole
    /// ledger (leaving out what is past the retention) that replaces them.
    /// Entries that could not be written are kept for the next call.
    pub(crate) fn persist(&self) -> Result<()> {
        self.write(false)
    }

    /// A snapshot of the whole ledger now, replacing every file: what is
    /// past the retention leaves the disk.
    pub(crate) fn compact(&self) -> Result<()> {
        self.write(true)
    }

    fn write(&self, compact: bool) -> Result<()> {
        let mut files = self.files.lock();
        let mut pending = self.ledger.take_pending();
        let tails = self.tails.entries();
        let snapshot = compact || files.len() >= FILES_MAX;
        if pending.is_empty() && tails.is_empty() && !snapshot {
            return Ok(());
        }
        let id = files.last().map_or(1, |(id, _)| id + 1);
        let written = if snapshot {
            // The pending entries are in the ledger too: the snapshot holds them.
            file::write(&self.dir, id, &self.ledger.snapshot(now_ms()), &tails)
        } else {
            // Tails ride along; if the write fails they go back with the
            // ledger's entries, facts that read twice change nothing.
            tails.iter().for_each(|t| pending.push_tail(t));
            file::write_encoded(&self.dir, id, &pending)
        };
        let path = match written {
            Ok(path) => path,
            Err(e) => {
                self.ledger.return_pending(pending);
                return Err(e);
            }
        };
        if snapshot {
            for (_, old) in files.drain(..) {
                if let Err(e) = tally_world::fs::remove_file(&old) {
                    tracing::warn!(path = %old.display(), error = %e, "could not remove an old ids file");
                }
            }
            fsutil::sync_dir(&self.dir)?;
        }
        files.push((id, path));
        Ok(())
    }

    /// Takes in another applier's entries (a ring change): written to a
    /// file of their own, durably, before the ledger answers from them, so
    /// that a crash right after cannot forget them.
    pub(crate) fn import(&self, entries: &[super::Entry]) -> Result<()> {
        let mut files = self.files.lock();
        let id = files.last().map_or(1, |(id, _)| id + 1);
        let path = file::write(&self.dir, id, entries, &[])?;
        files.push((id, path));
        drop(files);
        let now = now_ms();
        for entry in entries {
            self.ledger.load(entry.clone(), now, false);
        }
        Ok(())
    }

    /// Hard-links every ids file into `dir` (see `engine::snapshot`); no
    /// write replaces one meanwhile.
    pub(crate) fn link_into(&self, dir: &Path) -> Result<crate::fsutil::Snapshotted> {
        let files = self.files.lock();
        let mut done = crate::fsutil::Snapshotted::default();
        for (_, path) in files.iter() {
            crate::fsutil::link(path, dir, &mut done)?;
        }
        Ok(done)
    }

    /// Bytes of ids files on disk.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.files
            .lock()
            .iter()
            .filter_map(|(_, p)| tally_world::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }
}
