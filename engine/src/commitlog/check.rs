//! Checking a data directory's commit log without opening the engine, and
//! cutting a damaged tail off when the operator says so (`tallyd
//! check-log`).
//!
//! A check judges every segment as replay would (see `scan`) and also
//! decodes every record's cell, as replay does when it merges them. It
//! holds the directory's lock, so a node running on the directory is never
//! checked, let alone cut, under its feet.
//!
//! Cutting is the operator's decision, for either kind of damaged tail: a
//! torn one (replay would cut it anyway) or a corrupt one (replay refuses
//! to start; cutting it gives up the records from the damage on, which
//! other replicas may still hold: repair brings them back).

use std::path::{Path, PathBuf};
use tally_world::fs::{File, OpenOptions};

use super::{HEADER_BYTES, Parts, decode_record, scan};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::identity::{self, Identity};

pub use super::scan::SegmentEnd;

/// What a check found in one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentCheck {
    /// The segment's number.
    pub id: u64,
    /// Its file.
    pub path: PathBuf,
    /// Its format version (0 if its header is unreadable).
    pub version: u32,
    /// Its size.
    pub bytes: u64,
    /// Whole, decodable records before its end.
    pub records: u64,
    /// How it ends.
    pub end: SegmentEnd,
}

impl SegmentCheck {
    /// Where its good part ends: where a cut goes.
    pub fn good_end(&self) -> u64 {
        self.end.good_end(self.bytes)
    }

    /// Whether replay would refuse the segment.
    pub fn is_corrupt(&self) -> bool {
        matches!(self.end, SegmentEnd::Corrupt { .. })
    }

    /// Whether anything follows its good part.
    pub fn has_tail(&self) -> bool {
        self.good_end() < self.bytes
    }
}

/// A checked commit log, with the data directory locked until it is dropped.
pub struct LogCheck {
    dir: PathBuf,
    /// Every segment, in log order.
    pub segments: Vec<SegmentCheck>,
    _lock: File,
}

impl LogCheck {
    /// Locks the data directory `dir` and checks every segment of its log.
    pub fn open(dir: &Path) -> Result<LogCheck> {
        if !dir.is_dir() {
            let e = std::io::Error::from(std::io::ErrorKind::NotFound);
            return Err(Error::io("open data directory", dir, e));
        }
        let lock = identity::lock(dir)?;
        let files = fsutil::numbered_files(dir, "log")?;
        let mut segments = Vec::with_capacity(files.len());
        for (i, (id, path)) in files.iter().enumerate() {
            let data = tally_world::fs::read(path)
                .map_err(|e| Error::io("read commit log segment", path, e))?;
            segments.push(check_segment(*id, path, &data, i + 1 == files.len()));
        }
        Ok(LogCheck {
            dir: dir.to_path_buf(),
            segments,
            _lock: lock,
        })
    }

    /// Cuts segment `i` back to its good part, durably (removing it if that
    /// ends inside its header), after forgetting any clean shutdown: the
    /// next open takes a new counter id. Answers whether there was anything
    /// to cut.
    pub fn truncate(&mut self, i: usize) -> Result<bool> {
        let s = &mut self.segments[i];
        if !s.has_tail() {
            return Ok(false);
        }
        let at = s.good_end();
        Identity::forget_clean(&self.dir)?;
        cut_segment(&self.dir, &s.path, at)?;
        s.bytes = at;
        s.end = SegmentEnd::Clean;
        Ok(true)
    }
}

/// Judges one segment, `last` or not in its log, and decodes its records.
fn check_segment(id: u64, path: &Path, data: &[u8], last: bool) -> SegmentCheck {
    let mut offsets = Vec::new();
    let scanned = scan::scan(data, last, &mut |offset, _| offsets.push(offset));
    let mut check = SegmentCheck {
        id,
        path: path.to_path_buf(),
        version: scanned.version,
        bytes: data.len() as u64,
        records: scanned.records,
        end: scanned.end,
    };
    let (mut shards, mut ops, mut members, mut tail) = (Vec::new(), Vec::new(), Vec::new(), None);
    for (n, offset) in offsets.into_iter().enumerate() {
        let mut parts = Parts {
            shards: &mut shards,
            ops: &mut ops,
            members: &mut members,
            tail: &mut tail,
        };
        if let Err(e) = decode_record(data, offset, &mut parts) {
            check.records = n as u64;
            check.end = SegmentEnd::Corrupt {
                offset: offset as u64,
                reason: format!("undecodable record: {}", e.0),
            };
            break;
        }
    }
    check
}

/// Cuts the segment at `path` in `dir` at `at`, durably; removes it if `at`
/// is inside its header.
pub(crate) fn cut_segment(dir: &Path, path: &Path, at: u64) -> Result<()> {
    if at < HEADER_BYTES as u64 {
        tracing::warn!(path = %path.display(), "removing commit log segment with a torn header");
        tally_world::fs::remove_file(path)
            .map_err(|e| Error::io("remove torn segment", path, e))?;
        return fsutil::sync_dir(dir);
    }
    tracing::warn!(path = %path.display(), offset = at, "truncating commit log segment");
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open torn segment", path, e))?;
    f.set_len(at)
        .and_then(|()| f.sync_all())
        .map_err(|e| Error::io("truncate torn segment", path, e))
}
