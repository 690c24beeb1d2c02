//! The commit log: every write is here, durably, before it is acknowledged.
//!
//! # Format (version 1)
//!
//! A log is a sequence of segment files `NNNNNN.log`, numbered in write order.
//!
//! ```text
//! segment = header record*
//! header  = magic "TALLYLOG" | version u32 LE | crc32(magic, version) u32 LE     (16 bytes)
//! record  = len u32 LE | crc32(payload) u32 LE | payload                            (8 + len bytes)
//! payload = key cell          (see `codec`: shard ids are fixed 8-byte u64 LE here)
//! ```
//!
//! A record holds *state* (a whole cell, or the leader's new own shard inside
//! its cell), never a delta, so replaying a record twice or in another order
//! leaves the same result: recovery is just `merge`.
//!
//! # Crash story
//!
//! Records are appended by one writer thread that puts many of them under one
//! fsync (group commit). A segment is fsync'd before the next one is created,
//! so only the last segment can end in a torn record. On open, replay reads
//! every segment in order:
//! - a bad record in the last segment that runs to (or past) the end of the
//!   file, or is followed only by zeros, is a torn write: the file is
//!   truncated there and replay goes on;
//! - any other bad record, and any length over the record limit (new file
//!   space reads as zeros, so a tear cannot produce one), is
//!   [`Error::Corruption`] naming the file and offset; it is never skipped.
//!
//! Replayed segments are fsync'd before a new segment is created: records
//! that survived a process crash only in the page cache become durable
//! before anything is written after them.
//!
//! Known gap: writeback can persist a later page of an unsynced tail before
//! an earlier one, leaving a zero hole before data; replay then reports
//! corruption rather than a tear. Sync markers in the log will tell the
//! durable prefix apart.
//!
//! A segment is deleted once every memtable generation it holds records for
//! has been flushed to an SSTable.

mod writer;

pub(crate) use writer::LogWriter;
pub use writer::segment_path;

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use crate::cell::{Cell, Shard};
use crate::codec::{self, Cursor};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::key::Key;

/// Segment file magic.
pub(crate) const MAGIC: &[u8; 8] = b"TALLYLOG";
/// Version of the format above.
pub(crate) const VERSION: u32 = 1;
/// Size of a segment header.
pub const HEADER_BYTES: usize = 16;
/// Size of a record's frame (length and checksum).
pub(crate) const FRAME_BYTES: usize = 8;
/// Largest payload a record may have: a maximal key and a cell of 4096 shards fit.
pub(crate) const RECORD_BYTES_MAX: usize = 256 * 1024;

/// The segment header bytes (public for tools that build logs, like benchmarks).
pub fn header() -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32fast::hash(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Appends one framed record for `(key, cell)` to `buf`.
pub fn encode_record(buf: &mut Vec<u8>, key: &Key, cell: &Cell) {
    encode_record_parts(buf, key, cell.epoch(), cell.shards());
}

/// Appends one framed record for `(key, {epoch, shards})` to `buf`.
pub(crate) fn encode_record_parts(buf: &mut Vec<u8>, key: &Key, epoch: u64, shards: &[Shard]) {
    let start = buf.len();
    buf.extend_from_slice(&[0; FRAME_BYTES]);
    codec::put_key(buf, key);
    codec::put_cell_parts(buf, epoch, shards, |b, id| {
        b.extend_from_slice(&id.to_le_bytes())
    });
    let len = buf.len() - start - FRAME_BYTES;
    assert!(
        len <= RECORD_BYTES_MAX,
        "record of {len} bytes over the limit"
    );
    let crc = crc32fast::hash(&buf[start + FRAME_BYTES..]);
    buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What replay found.
#[derive(Debug, Default, Clone)]
pub struct ReplayStats {
    /// Segment ids replayed, in order.
    pub segments: Vec<u64>,
    /// Records applied.
    pub records: u64,
    /// Bytes of log read.
    pub bytes: u64,
    /// Where a torn tail was cut off, if one was.
    pub truncated_at: Option<(PathBuf, u64)>,
}

/// Cells recovered from the log, keyed by their encoded key.
type Recovered = HashMap<Box<[u8]>, Cell>;

/// Replays every segment in `dir` and returns the merged cells, sorted by key.
///
/// Records carry state and merge commutes, so segments are replayed in
/// parallel into one map per thread, and the maps merged at the end.
pub(crate) fn replay(dir: &Path) -> Result<(Vec<(Key, Cell)>, ReplayStats)> {
    let segments = fsutil::numbered_files(dir, "log")?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let last = segments.len().saturating_sub(1);
    let results: Vec<Result<(Recovered, ReplayStats)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let segments = &segments;
                s.spawn(move || {
                    let mut map = Recovered::new();
                    let mut stats = ReplayStats::default();
                    for (i, (id, path)) in segments.iter().enumerate().skip(t).step_by(threads) {
                        replay_file(dir, *id, path, i == last, &mut map, &mut stats)?;
                    }
                    Ok((map, stats))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut merged = Recovered::new();
    let mut stats = ReplayStats::default();
    for r in results {
        let (mut map, s) = r?;
        // Fold the smaller map into the bigger one.
        if merged.len() < map.len() {
            std::mem::swap(&mut merged, &mut map);
        }
        merge_into(&mut map, &mut merged);
        stats.segments.extend(s.segments);
        stats.records += s.records;
        stats.bytes += s.bytes;
        stats.truncated_at = stats.truncated_at.or(s.truncated_at);
    }
    stats.segments.sort_unstable();
    let mut cells: Vec<(Key, Cell)> = Vec::with_capacity(merged.len());
    for (k, cell) in merged {
        let key = Cursor::new(&k)
            .key()
            .map_err(|e| Error::corruption(dir, 0, e.0))?;
        cells.push((key, cell));
    }
    cells.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok((cells, stats))
}

/// Moves every cell of `from` into `into`, merging.
fn merge_into(from: &mut Recovered, into: &mut Recovered) {
    for (k, cell) in from.drain() {
        match into.get_mut(&k) {
            Some(have) => have.merge(&cell),
            None => {
                into.insert(k, cell);
            }
        }
    }
}

/// Replays one segment file, cutting off a torn tail if it is the last one.
fn replay_file(
    dir: &Path,
    id: u64,
    path: &Path,
    last: bool,
    map: &mut Recovered,
    stats: &mut ReplayStats,
) -> Result<()> {
    let data = std::fs::read(path).map_err(|e| Error::io("read commit log segment", path, e))?;
    stats.bytes += data.len() as u64;
    let mut apply = |key: &[u8], cell: Cell| match map.get_mut(key) {
        Some(have) => have.merge(&cell),
        None => {
            map.insert(key.into(), cell);
        }
    };
    match replay_segment(path, &data, last, &mut apply, stats)? {
        Some(cut) if cut < HEADER_BYTES as u64 => {
            tracing::warn!(path = %path.display(), "removing commit log segment with a torn header");
            std::fs::remove_file(path).map_err(|e| Error::io("remove torn segment", path, e))?;
            fsutil::sync_dir(dir)?;
            stats.truncated_at = Some((path.to_path_buf(), 0));
            return Ok(());
        }
        Some(cut) => {
            tracing::warn!(path = %path.display(), offset = cut, "truncating torn commit log tail");
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Error::io("open torn segment", path, e))?;
            f.set_len(cut)
                .and_then(|()| f.sync_all())
                .map_err(|e| Error::io("truncate torn segment", path, e))?;
            stats.truncated_at = Some((path.to_path_buf(), cut));
        }
        None => {
            // The records just replayed may only be in the page cache (the
            // process died, the OS did not): make them durable before any
            // newer segment exists, or a later power loss would tear a
            // segment that is no longer the last one.
            std::fs::File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io("fsync replayed segment", path, e))?;
        }
    }
    stats.segments.push(id);
    Ok(())
}

/// Replays one segment; returns the offset to truncate at if its tail is torn.
fn replay_segment(
    path: &Path,
    data: &[u8],
    last: bool,
    apply: &mut impl FnMut(&[u8], Cell),
    stats: &mut ReplayStats,
) -> Result<Option<u64>> {
    // A bad stretch is a torn write only at the very end of the last segment.
    let torn = |offset: usize, reason: &str| -> Result<Option<u64>> {
        let frame_end = data
            .get(offset..offset + FRAME_BYTES)
            .map(|f| offset + FRAME_BYTES + u32::from_le_bytes([f[0], f[1], f[2], f[3]]) as usize);
        let runs_to_end = frame_end.is_none_or(|end| end >= data.len());
        if last && (runs_to_end || data[offset..].iter().all(|b| *b == 0)) {
            Ok(Some(offset as u64))
        } else {
            Err(Error::corruption(path, offset as u64, reason))
        }
    };
    if data.len() < HEADER_BYTES || data[..HEADER_BYTES] != header() {
        if last && (data.len() < HEADER_BYTES || data.iter().all(|b| *b == 0)) {
            return Ok(Some(0));
        }
        return Err(Error::corruption(path, 0, "bad commit log segment header"));
    }
    let mut offset = HEADER_BYTES;
    while offset < data.len() {
        let Some(frame) = data.get(offset..offset + FRAME_BYTES) else {
            return torn(offset, "truncated record frame");
        };
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if len > RECORD_BYTES_MAX {
            // New file space reads as zeros, never as a huge length: a torn
            // write cannot produce this, a flipped bit can.
            return Err(Error::corruption(
                path,
                offset as u64,
                format!("record length {len} over the limit"),
            ));
        }
        let Some(payload) = data.get(offset + FRAME_BYTES..offset + FRAME_BYTES + len) else {
            return torn(offset, "record runs past the end of the segment");
        };
        let actual = crc32fast::hash(payload);
        if actual != crc || len == 0 {
            return torn(
                offset,
                &format!("checksum mismatch (stored {crc:#010x}, computed {actual:#010x})"),
            );
        }
        let mut cur = Cursor::new(payload);
        let decoded = cur.key_parts().and_then(|_| {
            let key_bytes = &payload[..payload.len() - cur.remaining()];
            Ok((key_bytes, cur.cell(|c| c.u64())?))
        });
        let (key, cell) = match decoded {
            Ok(kc) if cur.remaining() == 0 => kc,
            Ok(_) => {
                return Err(Error::corruption(
                    path,
                    offset as u64,
                    "trailing bytes in record",
                ));
            }
            Err(e) => {
                return Err(Error::corruption(
                    path,
                    offset as u64,
                    format!("undecodable record: {}", e.0),
                ));
            }
        };
        apply(key, cell);
        stats.records += 1;
        offset += FRAME_BYTES + len;
    }
    Ok(None)
}
