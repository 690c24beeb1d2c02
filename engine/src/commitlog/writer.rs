//! The appending side of the commit log, owned by the engine's commit thread.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::header;
use crate::error::{Error, Result};
use crate::fsutil;

/// Appends batches of records to the current segment, rolls segments, and
/// removes segments whose contents are all in SSTables.
///
/// # Invariants
/// - Every segment but the current one was fsync'd before the next was created.
/// - `segments` is ordered by id; its last entry is the current segment.
pub(crate) struct LogWriter {
    dir: PathBuf,
    file: File,
    path: PathBuf,
    bytes: u64,
    /// (segment id, highest memtable generation with records in it).
    segments: VecDeque<(u64, u64)>,
    segment_bytes_max: u64,
    unsynced: bool,
    fail_sync: Option<Arc<AtomicBool>>,
}

impl LogWriter {
    /// Starts a new segment after `existing` (segments left by replay, whose
    /// records all belong to memtable generation `replay_gen`).
    pub(crate) fn open(
        dir: &Path,
        existing: &[u64],
        replay_gen: u64,
        segment_bytes_max: u64,
        fail_sync: Option<Arc<AtomicBool>>,
    ) -> Result<Self> {
        let next = existing.last().map_or(1, |id| id + 1);
        let (file, path) = create_segment(dir, next)?;
        let mut segments: VecDeque<(u64, u64)> =
            existing.iter().map(|id| (*id, replay_gen)).collect();
        segments.push_back((next, 0));
        Ok(LogWriter {
            dir: dir.to_path_buf(),
            file,
            path,
            bytes: super::HEADER_BYTES as u64,
            segments,
            segment_bytes_max,
            unsynced: false,
            fail_sync,
        })
    }

    /// Appends framed records that belong to memtable generations up to `gen`.
    pub(crate) fn append(&mut self, records: &[u8], gen_max: u64) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        if self.bytes + records.len() as u64 > self.segment_bytes_max
            && self.bytes > super::HEADER_BYTES as u64
        {
            self.roll()?;
        }
        self.file
            .write_all(records)
            .map_err(|e| Error::io("append to commit log", &self.path, e))?;
        self.bytes += records.len() as u64;
        self.unsynced = true;
        let current = self
            .segments
            .back_mut()
            .expect("there is always a current segment");
        current.1 = current.1.max(gen_max);
        Ok(())
    }

    /// Makes everything appended so far durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        if self
            .fail_sync
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            let err = io::Error::other("injected fsync failure");
            return Err(Error::io("fsync commit log", &self.path, err));
        }
        self.file
            .sync_data()
            .map_err(|e| Error::io("fsync commit log", &self.path, e))?;
        self.unsynced = false;
        Ok(())
    }

    /// Removes closed segments whose records all belong to generations ≤ `flushed_gen`.
    pub(crate) fn remove_flushed(&mut self, flushed_gen: u64) -> Result<()> {
        let mut removed = false;
        while self.segments.len() > 1 && self.segments[0].1 <= flushed_gen {
            let (id, _) = self.segments.pop_front().expect("len > 1");
            let path = segment_path(&self.dir, id);
            std::fs::remove_file(&path)
                .map_err(|e| Error::io("remove commit log segment", &path, e))?;
            removed = true;
        }
        if removed {
            fsutil::sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Live segments, the current one included.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn roll(&mut self) -> Result<()> {
        self.sync()?;
        let next = self.segments.back().map_or(1, |(id, _)| id + 1);
        let (file, path) = create_segment(&self.dir, next)?;
        self.file = file;
        self.path = path;
        self.bytes = super::HEADER_BYTES as u64;
        self.segments.push_back((next, 0));
        Ok(())
    }
}

/// Path of segment `id`.
pub fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.log"))
}

/// Creates segment `id` with its header, durably (file and directory).
fn create_segment(dir: &Path, id: u64) -> Result<(File, PathBuf)> {
    let path = segment_path(dir, id);
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::io("create commit log segment", &path, e))?;
    file.write_all(&header())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io("write commit log header", &path, e))?;
    fsutil::sync_dir(dir)?;
    Ok((file, path))
}
