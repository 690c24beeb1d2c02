//! The appending side of the commit log, owned by the group commit's
//! `Committer`: written by the syncer, or by a runtime thread as it parks.
//!
//! Records are written over zeros laid down ahead of them, a chunk
//! ([`PREZERO_BYTES`]) at a time, each chunk made durable when it is laid
//! down (PostgreSQL zero-fills its WAL the same way): the fdatasync that
//! covers a group commit then writes data blocks only, never a new file
//! size. On this machine that made durable adds 7-16% faster. A chunk is
//! small (64 KiB) so a full disk still shows within a few hundred fsyncs and
//! little space is left unused; laying it down costs one more fsync per
//! about 25 group commits. A segment is
//! cut back to its records when it is closed, so only the current segment
//! can end in zeros, which replay reads as the end of the log.
//!
//! Every write ends in a sync mark: the offset up to which the segment was
//! fsync'd before the write was issued (`synced`). Replay takes a mark that
//! vouches for damaged bytes as proof that they were acknowledged.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tally_world::fs::{File, OpenOptions};

use super::header;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::latency::Latencies;

/// Zeros laid down ahead of the records at a time.
pub(crate) const PREZERO_BYTES: u64 = 64 << 10;

/// Appends batches of records to the current segment, rolls segments, and
/// removes segments whose contents are all in SSTables.
///
/// # Invariants
/// - Every segment but the current one was cut to its records and fsync'd
///   before the next was created.
/// - `segments` is ordered by id; its last entry is the current segment.
/// - `bytes <= allocated`; the current file holds zeros from `bytes` to
///   `allocated`, durably.
/// - `HEADER_BYTES <= synced <= bytes`: the current segment is durable up
///   to `synced`.
pub(crate) struct LogWriter {
    dir: PathBuf,
    file: File,
    path: PathBuf,
    /// End of the records in the current segment.
    bytes: u64,
    /// Length of the current segment's file (records, then zeros).
    allocated: u64,
    /// End of the records fsync'd in the current segment: what the next
    /// write's sync mark vouches for.
    synced: u64,
    /// (segment id, highest memtable generation with records in it).
    segments: VecDeque<(u64, u64)>,
    segment_bytes_max: u64,
    unsynced: bool,
    fail_sync: Option<Arc<AtomicBool>>,
    slow_sync: Option<Arc<AtomicU64>>,
    /// How long this log's fsyncs took (the engine's `Stats`).
    syncs: Arc<Latencies>,
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
        slow_sync: Option<Arc<AtomicU64>>,
        syncs: Arc<Latencies>,
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
            allocated: super::HEADER_BYTES as u64,
            synced: super::HEADER_BYTES as u64,
            segments,
            segment_bytes_max,
            unsynced: false,
            fail_sync,
            slow_sync,
            syncs,
        })
    }

    /// Appends framed records that belong to memtable generations up to
    /// `gen`, and the sync mark that ends every write (see `commitlog`):
    /// `records` gets it for the write and is given back as it was.
    pub(crate) fn append(&mut self, records: &mut Vec<u8>, gen_max: u64) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let len = (records.len() + super::MARK_BYTES) as u64;
        if self.bytes + len > self.segment_bytes_max && self.bytes > super::HEADER_BYTES as u64 {
            self.roll()?;
        }
        let end = self.bytes + len;
        if end > self.allocated {
            self.prezero(end)?;
        }
        let records_len = records.len();
        super::encode_mark(records, self.synced);
        let written = self.file.write_all_at(records, self.bytes);
        records.truncate(records_len);
        // No room: the bytes written so far are written again, the same,
        // by the next try, which starts at the same offset.
        written.map_err(|e| Error::io_or_space("append to commit log", &self.path, e))?;
        self.bytes = end;
        self.unsynced = true;
        let current = self
            .segments
            .back_mut()
            .expect("there is always a current segment");
        current.1 = current.1.max(gen_max);
        Ok(())
    }

    /// Whether anything appended is not durable yet (`sync` has work).
    pub(crate) fn unsynced(&self) -> bool {
        self.unsynced
    }

    /// Makes everything appended so far durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        self.sync_data()?;
        self.unsynced = false;
        self.synced = self.bytes;
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        if self
            .fail_sync
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            // ENOSPC, as a thin-provisioned disk or a quota may answer an
            // fsync: it must poison like any other fsync failure.
            let err = io::Error::from_raw_os_error(28);
            return Err(Error::io("fsync commit log", &self.path, err));
        }
        if let Some(us) = &self.slow_sync {
            std::thread::sleep(std::time::Duration::from_micros(us.load(Ordering::Relaxed)));
        }
        let started = tally_world::Instant::now();
        let synced = self
            .file
            .sync_data()
            .map_err(|e| Error::io("fsync commit log", &self.path, e));
        self.syncs.observe(started.elapsed());
        synced
    }

    /// Lays down durable zeros up to at least `end` (a whole number of chunks).
    fn prezero(&mut self, end: u64) -> Result<()> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let target = end.next_multiple_of(PREZERO_BYTES);
        let mut at = self.allocated;
        while at < target {
            let n = (target - at).min(ZEROS.len() as u64);
            self.file
                .write_all_at(&ZEROS[..n as usize], at)
                .map_err(|e| Error::io_or_space("extend commit log", &self.path, e))?;
            at += n;
        }
        // Durable now, so later fsyncs have no file size to write; and so
        // is every record before.
        self.sync_data()?;
        self.allocated = target;
        self.synced = self.bytes;
        Ok(())
    }

    /// Cuts the current segment back to its records, durably (a clean close).
    pub(crate) fn close(&mut self) -> Result<()> {
        self.sync()?;
        self.trim()
    }

    fn trim(&mut self) -> Result<()> {
        if self.allocated > self.bytes {
            self.file
                .set_len(self.bytes)
                .and_then(|()| self.file.sync_all())
                .map_err(|e| Error::io("trim commit log segment", &self.path, e))?;
            self.allocated = self.bytes;
        }
        Ok(())
    }

    /// Removes closed segments whose records all belong to generations ≤ `flushed_gen`.
    pub(crate) fn remove_flushed(&mut self, flushed_gen: u64) -> Result<()> {
        let mut removed = false;
        while self.segments.len() > 1 && self.segments[0].1 <= flushed_gen {
            let (id, _) = self.segments.pop_front().expect("len > 1");
            let path = segment_path(&self.dir, id);
            tally_world::fs::remove_file(&path)
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

    /// Bytes of live log, closed segments counted at their size limit.
    pub(crate) fn live_bytes(&self) -> u64 {
        (self.segments.len() as u64 - 1) * self.segment_bytes_max + self.bytes
    }

    fn roll(&mut self) -> Result<()> {
        self.sync()?;
        self.trim()?;
        let next = self.segments.back().map_or(1, |(id, _)| id + 1);
        let (file, path) = create_segment(&self.dir, next)?;
        self.file = file;
        self.path = path;
        self.bytes = super::HEADER_BYTES as u64;
        self.allocated = self.bytes;
        self.synced = self.bytes;
        self.segments.push_back((next, 0));
        Ok(())
    }
}

/// Path of segment `id`.
pub fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.log"))
}

/// Creates segment `id` with its header, durably (file and directory). A
/// segment that could not be made whole is removed, so that the next try
/// (once there is room) can create it.
fn create_segment(dir: &Path, id: u64) -> Result<(File, PathBuf)> {
    let path = segment_path(dir, id);
    // Not O_APPEND: records are written at explicit offsets, over zeros.
    let file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io_or_space("create commit log segment", &path, e))?;
    let made = file
        .write_all_at(&header(), 0)
        .map_err(|e| Error::io_or_space("write commit log header", &path, e))
        .and_then(|()| {
            file.sync_all()
                .map_err(|e| Error::io("fsync commit log header", &path, e))
        })
        .and_then(|()| fsutil::sync_dir(dir));
    if let Err(e) = made {
        drop(file);
        if let Err(rm) = tally_world::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), error = %rm, "could not remove a half-made segment");
        }
        return Err(e);
    }
    Ok((file, path))
}
