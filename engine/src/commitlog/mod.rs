//! The commit log: every write is here, durably, before it is acknowledged.
//!
//! # Format (version 6)
//!
//! A log is a sequence of segment files `NNNNNN.log`, numbered in write order.
//!
//! ```text
//! segment = header (record* mark)*
//! header  = magic "TALLYLOG" | version u32 LE | crc32(magic, version) u32 LE     (16 bytes)
//! record  = len u32 LE | crc32(payload) u32 LE | payload                            (8 + len bytes)
//! payload = key cell [ids [members [tail]]]   (see `codec`: shard ids are fixed 8-byte u64 LE here)
//! ids     = the operation ids the record's adds applied (see `ids::put_record_ops`)
//! members = varint n | (varint len | member)*: the members a unique counter's
//!           count admitted (see `unique`); the record's cell is the count's
//!           new own shard, and replay makes each member's cell from it
//! tail    = the ids another node's shard in the cell applied, which this
//!           replica keeps until that node made them durable (see `ids::tail`;
//!           `ids` and `members` are then empty)
//! mark    = 0x8000_0008 u32 LE | crc32(synced) u32 LE | synced u64 LE              (16 bytes)
//! ```
//!
//! `len` is at most [`RECORD_BYTES_MAX`]; the top bit of the first word
//! tells a sync mark from a record. Every write of records (a group commit)
//! ends in a sync mark: the offset up to which the segment was fsync'd
//! before that write was issued. Version 5 is the same without list cells,
//! version 4 also without epoch headers (see `codec`), version 3 also
//! without tails, version 2 also without ids, version 1 also without
//! marks; all are still read.
//!
//! An add with an operation id is applied in the same record as the ids
//! it applied: one checksum covers the new shard and the ids, so a crash
//! keeps both or neither, and a retry can never find its add applied but
//! not remembered, or remembered but not applied.
//!
//! A record holds *state* (a whole cell, or the leader's new own shard inside
//! its cell), never a delta, so replaying a record twice or in another order
//! leaves the same result: recovery is just `merge`.
//!
//! # Crash story
//!
//! Records are appended by one writer thread that puts many of them under one
//! fsync (group commit), over zeros laid down (durably) ahead of them (see
//! `writer`). A segment is cut back to its records and fsync'd before the
//! next one is created, so only the last segment can end in a torn write or
//! in zeros. On power loss, writeback may have written any of the pages of
//! the writes not yet fsync'd, in any order: pages it did not write still
//! hold those zeros, so a tear can leave a zero-filled gap before records
//! that did reach the disk. It never leaves a byte that was not written,
//! and never touches bytes that were fsync'd.
//!
//! On open, replay reads every segment (in rounds of bounded size) and
//! judges the first bytes of each that are not a whole record or mark
//! (`scan`, which spells out what the format proves and why):
//! - zeros to the end of the last segment end the log;
//! - in the last segment, a record whose frame runs past the end of the
//!   file or is followed by nothing but zeros, and (version 2) a record that
//!   meets a zero-filled gap as writeback leaves one, when no later sync
//!   mark says the log was durable past it, are a torn write: the file is
//!   truncated there and replay goes on;
//! - anything else is [`Error::Corruption`] naming the file and offset,
//!   never skipped: garbage, a length over the limit (new file space reads
//!   as zeros, never as a huge length), a gap that a later mark proves
//!   durable, damage in any segment but the last.
//!
//! `tallyd check-log` reports the same judgement for every segment, and
//! cuts a torn or corrupt tail when the operator asks it to ([`check`]).
//!
//! Replayed segments are fsync'd before a new segment is created: records
//! that survived a process crash only in the page cache become durable
//! before anything is written after them. The new segment takes the next
//! number: a cut segment is never written again.
//!
//! A segment is deleted once every memtable generation it holds records for
//! has been flushed to an SSTable.

pub mod check;
mod scan;
mod writer;

pub use scan::SegmentEnd;
pub(crate) use writer::LogWriter;
pub use writer::segment_path;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tally_model::paxos::Acceptor;

use crate::cell::{Cell, Epoch, List, Merger, Shard};
use crate::codec::{self, Cursor};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::ids::tail::{self, TailIds, Tails};
use crate::ids::{self, ClientId, ledger::Ledger, record::Applied};
use crate::key::{Key, KeyHashBuilder};
use crate::memtable::Memtable;
use crate::unique;

/// Segment file magic.
pub(crate) const MAGIC: &[u8; 8] = b"TALLYLOG";
/// Version of the format above: 5 may hold cells with an epoch header, 6
/// list cells too (see `codec`); older versions read the same way.
pub(crate) const VERSION: u32 = 6;
/// Size of a segment header.
pub const HEADER_BYTES: usize = 16;
/// Size of a record's frame (length and checksum).
pub(crate) const FRAME_BYTES: usize = 8;
/// Largest payload a record may have: a maximal key and a cell of 4096
/// shards fit, and so does a partition's largest agreed part.
pub(crate) const RECORD_BYTES_MAX: usize = 4 << 20;
const _: () = assert!(crate::cell::AGREED_BYTES_MAX + 4096 <= RECORD_BYTES_MAX);
/// The first word of a sync mark: the top bit set, and its payload's length.
pub(crate) const MARK_LEN: u32 = (1 << 31) | 8;
/// Size of a sync mark.
pub(crate) const MARK_BYTES: usize = 16;

const _: () = assert!(
    RECORD_BYTES_MAX < (1 << 31),
    "a record's length never looks like a mark"
);

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
    encode_record_full(buf, key, cell, &[], &[], None);
}

/// Appends one framed record for `(key, {epoch, shards})` to `buf`.
pub(crate) fn encode_record_parts(buf: &mut Vec<u8>, key: &Key, epoch: Epoch, shards: &[Shard]) {
    encode_record_ops(buf, key, epoch, shards, &[]);
}

/// Appends one framed record for `(key, {epoch, shards})` and the
/// operation ids its adds applied to `buf`.
pub(crate) fn encode_record_ops(
    buf: &mut Vec<u8>,
    key: &Key,
    epoch: Epoch,
    shards: &[Shard],
    ops: &[(ClientId, Applied)],
) {
    encode_record_members(buf, key, epoch, shards, ops, &[]);
}

/// Appends one framed record for a replica's `(key, cell)` and the tail of
/// ids that came with it.
pub(crate) fn encode_record_tail(buf: &mut Vec<u8>, key: &Key, cell: &Cell, tail: &TailIds) {
    encode_record_full(buf, key, cell, &[], &[], Some(tail));
}

/// Appends one framed record for `(key, {epoch, shards})`, the operation
/// ids its adds applied and the members its count admitted.
pub(crate) fn encode_record_members(
    buf: &mut Vec<u8>,
    key: &Key,
    epoch: Epoch,
    shards: &[Shard],
    ops: &[(ClientId, Applied)],
    members: &[&[u8]],
) {
    let cell = CellParts {
        epoch,
        shards,
        list: None,
        agreed: None,
    };
    encode_record_with(buf, key, cell, ops, members, None);
}

/// Appends one framed record for `(key, cell)`, the operation ids its adds
/// applied, the members its count admitted and the tail a replica keeps.
pub(crate) fn encode_record_full(
    buf: &mut Vec<u8>,
    key: &Key,
    cell: &Cell,
    ops: &[(ClientId, Applied)],
    members: &[&[u8]],
    tail: Option<&TailIds>,
) {
    let parts = CellParts {
        epoch: cell.epoch(),
        shards: cell.shards(),
        list: cell.list(),
        agreed: cell.agreed().map(|a| &**a),
    };
    encode_record_with(buf, key, parts, ops, members, tail);
}

/// A cell as its parts, to encode.
struct CellParts<'a> {
    epoch: Epoch,
    shards: &'a [Shard],
    list: Option<&'a List>,
    agreed: Option<&'a Acceptor>,
}

fn encode_record_with(
    buf: &mut Vec<u8>,
    key: &Key,
    cell: CellParts<'_>,
    ops: &[(ClientId, Applied)],
    members: &[&[u8]],
    tail: Option<&TailIds>,
) {
    let start = buf.len();
    buf.extend_from_slice(&[0; FRAME_BYTES]);
    codec::put_key(buf, key);
    let head = (cell.epoch, cell.shards);
    codec::put_cell_parts(buf, head, cell.list, cell.agreed, |b, id| {
        b.extend_from_slice(&id.to_le_bytes())
    });
    if !ops.is_empty() || !members.is_empty() || tail.is_some() {
        ids::put_record_ops(buf, ops);
    }
    if !members.is_empty() || tail.is_some() {
        codec::put_varint(buf, members.len() as u64);
        for m in members {
            codec::put_varint(buf, m.len() as u64);
            buf.extend_from_slice(m);
        }
    }
    if let Some(t) = tail {
        tail::put_tail(buf, t);
    }
    let len = buf.len() - start - FRAME_BYTES;
    assert!(
        len <= RECORD_BYTES_MAX,
        "record of {len} bytes over the limit"
    );
    let crc = crc32fast::hash(&buf[start + FRAME_BYTES..]);
    buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Appends a sync mark to `buf`: the segment was durable up to `synced`
/// before the write it ends was issued.
pub(crate) fn encode_mark(buf: &mut Vec<u8>, synced: u64) {
    let payload = synced.to_le_bytes();
    buf.extend_from_slice(&MARK_LEN.to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    buf.extend_from_slice(&payload);
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

/// Bits of a key hash that pick its partition in replay's second pass.
const PARTITION_BITS: u32 = 8;

/// Where a record is: its key's hash, its segment and its frame's offset.
#[derive(Clone, Copy)]
struct RecordRef {
    hash: u64,
    segment: u32,
    offset: u32,
}

/// A record's encoded key, borrowed from the segment read, with its hash.
struct RawKey<'a> {
    hash: u64,
    bytes: &'a [u8],
}

impl PartialEq for RawKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for RawKey<'_> {}

impl std::hash::Hash for RawKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The top bits pick the partition, so they are the same for every
        // key of one partition's map, which takes its tags from the top bits
        // and its buckets from the low ones: multiply, so the top bits mix
        // all of the hash and the low ones stay as they were.
        state.write_u64(self.hash.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
}

/// What to do with a segment once replay has read it.
enum Ending {
    /// Complete: fsync it (it may only be in the page cache).
    Sync,
    /// Torn at this offset: truncate there (remove the file if within the header).
    Cut(u64),
}

/// Log bytes replayed per round: bounds replay's memory (the segments read
/// plus a 16-byte reference per record) whatever the size of the log. Flushes
/// keep a log under `Options::log_bytes_max` (1 GiB by default), so it
/// normally replays in one round; each further round merges every key it
/// holds into the memtable again.
const ROUND_BYTES: u64 = 2 << 30;

/// Replays every segment in `dir` into `memtable`.
///
/// Records carry state and merge commutes, so order does not matter, and a
/// log holds many versions of few keys. Segments are replayed in rounds of
/// about [`ROUND_BYTES`], each round read into memory and taken in two
/// parallel passes built to stay in cache:
/// 1. **scan** (segments split across threads): check each frame and
///    checksum, hash the key, and file a small [`RecordRef`] under one of
///    2^[`PARTITION_BITS`] partitions by the hash's top bits;
/// 2. **merge** (partitions split across threads): decode each partition's
///    records into a map small enough for the cache, then merge its cells
///    into the memtable.
///
/// Torn tails are cut once every round is done.
pub(crate) fn replay(
    dir: &Path,
    memtable: &Memtable,
    merger: &Merger,
    ledger: &Ledger,
    tails: &Tails,
) -> Result<ReplayStats> {
    let files = fsutil::numbered_files(dir, "log")?;
    let sizes = files
        .iter()
        .map(|(_, path)| {
            tally_world::fs::metadata(path)
                .map(|m| m.len())
                .map_err(|e| Error::io("stat commit log segment", path, e))
        })
        .collect::<Result<Vec<u64>>>()?;
    let seed = foldhash::quality::RandomState::default();
    let mut stats = ReplayStats::default();
    let mut endings = Vec::new();
    let mut start = 0;
    while start < files.len() {
        let mut end = start + 1;
        let mut bytes = sizes[start];
        while end < files.len() && bytes + sizes[end] <= ROUND_BYTES {
            bytes += sizes[end];
            end += 1;
        }
        let last = (end == files.len()).then(|| end - 1 - start);
        let sinks = Sinks {
            memtable,
            merger,
            ledger,
            tails,
        };
        let round = replay_round(&files[start..end], last, &seed, &sinks)?;
        stats.records += round.stats.records;
        stats.bytes += round.stats.bytes;
        endings.extend(round.endings.into_iter().map(|(i, e)| (start + i, e)));
        start = end;
    }
    endings.sort_unstable_by_key(|(i, _)| *i);
    for (i, ending) in endings {
        let (id, path) = &files[i];
        match ending {
            Ending::Cut(cut) => {
                check::cut_segment(dir, path, cut)?;
                stats.truncated_at = Some((path.clone(), cut));
                if cut < HEADER_BYTES as u64 {
                    continue; // removed
                }
            }
            Ending::Sync => {
                // The records just replayed may only be in the page cache (the
                // process died, the OS did not): make them durable before any
                // newer segment exists, or a later power loss would tear a
                // segment that is no longer the last one.
                tally_world::fs::File::open(path)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| Error::io("fsync replayed segment", path, e))?;
            }
        }
        stats.segments.push(*id);
    }
    Ok(stats)
}

/// What one round found: how each of its segments ends, and counts.
struct Round {
    endings: Vec<(usize, Ending)>,
    stats: ReplayStats,
}

/// Where replayed records go.
struct Sinks<'a> {
    memtable: &'a Memtable,
    merger: &'a Merger,
    ledger: &'a Ledger,
    tails: &'a Tails,
}

/// Replays `files` (one round) into `sinks`; `last` is the index among
/// them of the log's last segment, if it is in this round. Two passes,
/// each on up to 8 threads: the segments are read and scanned, their
/// records filed by the partition of their key's hash; then each
/// partition's records are merged into cells.
fn replay_round(
    files: &[(u64, PathBuf)],
    last: Option<usize>,
    seed: &foldhash::quality::RandomState,
    sinks: &Sinks<'_>,
) -> Result<Round> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(files.len());
    let scanned = in_parallel(threads, |t| {
        let mut out = Scanned {
            data: Vec::new(),
            parts: vec![Vec::new(); 1 << PARTITION_BITS],
            endings: Vec::new(),
            stats: ReplayStats::default(),
        };
        for (i, (_, path)) in files.iter().enumerate().skip(t).step_by(threads) {
            scan_segment(i, path, Some(i) == last, seed, &mut out)?;
        }
        Ok(out)
    })?;
    let mut segments: Vec<(&Path, &[u8])> =
        files.iter().map(|(_, p)| (p.as_path(), &[][..])).collect();
    for sc in &scanned {
        for (i, data) in &sc.data {
            segments[*i].1 = data;
        }
    }
    in_parallel(threads, |t| {
        let mut merge = Merge::new(sinks);
        for p in (t..1 << PARTITION_BITS).step_by(threads) {
            for r in scanned
                .iter()
                .flat_map(|sc| sc.parts[p].chunks(TOUCH_AHEAD))
                .flat_map(|chunk| touch(&segments, chunk))
            {
                merge.record(&segments, r)?;
            }
            merge.hand_over(files[0].1.as_path())?;
        }
        Ok(())
    })?;
    let mut round = Round {
        endings: Vec::new(),
        stats: ReplayStats::default(),
    };
    for sc in scanned {
        round.endings.extend(sc.endings);
        round.stats.records += sc.stats.records;
        round.stats.bytes += sc.stats.bytes;
    }
    Ok(round)
}

/// What one thread of a round's first pass read and found.
struct Scanned {
    /// The segments it read, by their index in the round.
    data: Vec<(usize, Vec<u8>)>,
    /// Their records, by partition.
    parts: Vec<Vec<RecordRef>>,
    endings: Vec<(usize, Ending)>,
    stats: ReplayStats,
}

/// Reads segment `i` of a round, at `path`, and files its records in
/// `out` by partition; `last`: the log's last segment, whose torn tail is
/// cut rather than corruption.
fn scan_segment(
    i: usize,
    path: &Path,
    last: bool,
    seed: &foldhash::quality::RandomState,
    out: &mut Scanned,
) -> Result<()> {
    let data =
        tally_world::fs::read(path).map_err(|e| Error::io("read commit log segment", path, e))?;
    if data.len() as u64 > u64::from(u32::MAX) {
        return Err(Error::corruption(path, 0, "segment over 4 GiB"));
    }
    out.stats.bytes += data.len() as u64;
    let segment = u32::try_from(i).expect("fewer than 2^32 segments");
    let parts = &mut out.parts;
    let mut file = |offset: usize, key: &[u8]| {
        let hash = seed.hash_one(key);
        parts[(hash >> (64 - PARTITION_BITS)) as usize].push(RecordRef {
            hash,
            segment,
            offset: offset as u32,
        });
    };
    let scanned = scan::scan(&data, last, &mut file);
    out.stats.records += scanned.records;
    let ending = match scanned.end {
        SegmentEnd::Clean => Ending::Sync,
        SegmentEnd::Zeros { offset } => Ending::Cut(offset),
        SegmentEnd::Torn { offset, reason } => {
            tracing::warn!(path = %path.display(), offset, reason, "torn commit log tail");
            Ending::Cut(offset)
        }
        SegmentEnd::Corrupt { offset, reason } => {
            return Err(Error::corruption(path, offset, reason));
        }
    };
    out.endings.push((i, ending));
    out.data.push((i, data));
    Ok(())
}

/// One thread of a round's second pass: merges the records of one
/// partition at a time into cells, with the buffers it decodes into.
struct Merge<'s> {
    sinks: &'s Sinks<'s>,
    cells: HashMap<RawKey<'s>, Cell, KeyHashBuilder>,
    shards: Vec<Shard>,
    ops: Vec<(ClientId, Applied)>,
    members: Vec<&'s [u8]>,
    tail: Option<TailIds>,
    now: u64,
}

impl<'s> Merge<'s> {
    fn new(sinks: &'s Sinks<'s>) -> Self {
        Merge {
            sinks,
            cells: HashMap::default(),
            shards: Vec::new(),
            ops: Vec::new(),
            members: Vec::new(),
            tail: None,
            now: ids::now_ms(),
        }
    }

    /// Decodes the record `r` points at and merges it into its key's
    /// cell; loads the ids, tail and members it carries.
    fn record(&mut self, segments: &[(&'s Path, &'s [u8])], r: &RecordRef) -> Result<()> {
        let (path, data) = segments[r.segment as usize];
        let offset = r.offset as usize;
        let undecodable = |e: codec::DecodeError| {
            Error::corruption(path, offset as u64, format!("undecodable record: {}", e.0))
        };
        let mut parts = Parts {
            shards: &mut self.shards,
            ops: &mut self.ops,
            members: &mut self.members,
            tail: &mut self.tail,
        };
        let (key, (epoch, list, agreed)) =
            decode_record(data, offset, &mut parts).map_err(undecodable)?;
        let Sinks {
            memtable,
            merger,
            ledger,
            tails,
        } = *self.sinks;
        if let Some(t) = self.tail.take() {
            load_tail(key, t, tails).map_err(undecodable)?;
        }
        if !self.ops.is_empty() {
            load_ops(key, &mut self.ops, ledger, self.now).map_err(undecodable)?;
        }
        if !self.members.is_empty() {
            let admitter = self.shards[0].counter_id;
            load_members(key, epoch, admitter, &mut self.members, memtable, merger)
                .map_err(undecodable)?;
        }
        let key = RawKey {
            hash: r.hash,
            bytes: key,
        };
        match self.cells.get_mut(&key) {
            Some(cell) => {
                let merger = self.sinks.merger;
                cell.merge_unsorted(epoch, &self.shards, list.as_ref(), agreed.as_ref(), merger);
            }
            None => {
                let cell = Cell::from_parts(epoch, self.shards.iter().copied());
                self.cells
                    .insert(key, cell.with_list(list).with_agreed(agreed));
            }
        }
        Ok(())
    }

    /// Puts the partition's cells into the memtable (`first`: a segment's
    /// path, for an error that cannot happen).
    fn hand_over(&mut self, first: &Path) -> Result<()> {
        for (raw, cell) in self.cells.drain() {
            // Decoded once already (in `decode_record`): cannot fail here.
            let key = Cursor::new(raw.bytes)
                .key()
                .map_err(|e| Error::corruption(first, 0, e.0))?;
            self.sinks.memtable.insert(key, cell, self.sinks.merger);
        }
        Ok(())
    }
}

/// Records whose first bytes are loaded together before any is decoded.
const TOUCH_AHEAD: usize = 16;

/// Loads one byte of every record in `chunk` and returns the chunk: the
/// loads are independent, so their cache and TLB misses overlap instead of
/// each stalling the decode that follows (records of a partition are
/// scattered over the whole log).
fn touch<'r>(segments: &[(&Path, &[u8])], chunk: &'r [RecordRef]) -> &'r [RecordRef] {
    let mut sum = 0u8;
    for r in chunk {
        let data = segments[r.segment as usize].1;
        sum ^= data.get(r.offset as usize).copied().unwrap_or(0);
    }
    std::hint::black_box(sum);
    chunk
}

/// Runs `work(t)` on `threads` scoped threads; returns the results in order.
fn in_parallel<T: Send>(
    threads: usize,
    work: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = &work;
                s.spawn(move || work(t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Takes the ids of a record for `key` (encoded) into the ledger, as
/// pending: they must reach an ids file before their segment goes.
fn load_ops(
    key: &[u8],
    ops: &mut Vec<(ClientId, Applied)>,
    ledger: &Ledger,
    now_ms: u64,
) -> std::result::Result<(), codec::DecodeError> {
    let key = ids::fingerprint(&Cursor::new(key).key()?);
    for (client, op) in ops.drain(..) {
        let entry = ids::Entry::Op { key, client, op };
        ledger.load(entry, now_ms, true);
    }
    Ok(())
}

/// Takes the tail of a replica's record for `key` (encoded) into `tails`,
/// as it was taken when the record was written: the watermark each record
/// carries prunes what its applier had made durable by then, whatever the
/// order records are replayed in. An incarnation forgotten for good (in an
/// ids file read before the log) keeps nothing.
fn load_tail(
    key: &[u8],
    tail: TailIds,
    tails: &Tails,
) -> std::result::Result<(), codec::DecodeError> {
    let key = Cursor::new(key).key()?;
    // Refused only for a forgotten incarnation: nothing to keep then.
    let _ = tails.take(&key, &tail);
    Ok(())
}

/// Puts the cells of the members a record for the count `key` (encoded)
/// admitted in `epoch` into `memtable`.
fn load_members(
    key: &[u8],
    epoch: Epoch,
    admitter: u64,
    members: &mut Vec<&[u8]>,
    memtable: &Memtable,
    merger: &Merger,
) -> std::result::Result<(), codec::DecodeError> {
    let count = Cursor::new(key).key()?;
    for m in members.drain(..) {
        let key = unique::member_key(count.partition(), m)
            .map_err(|_| codec::DecodeError("member key over the limits"))?;
        memtable.insert(key, unique::member_cell(epoch, admitter), merger);
    }
    Ok(())
}

/// A record's parts besides its key and epoch, decoded into buffers kept
/// between records.
pub(crate) struct Parts<'p, 'a> {
    pub(crate) shards: &'p mut Vec<Shard>,
    /// The ids its adds applied.
    pub(crate) ops: &'p mut Vec<(ClientId, Applied)>,
    /// The members its count admitted.
    pub(crate) members: &'p mut Vec<&'a [u8]>,
    /// The tail a replica keeps with it.
    pub(crate) tail: &'p mut Option<TailIds>,
}

/// A decoded record's cell but its shards: epoch, list, agreed part.
type Header = (Epoch, Option<List>, Option<Arc<Acceptor>>);

/// Decodes the record framed at `offset` (checked by the scan): its encoded
/// key and its cell's header, with everything else in `parts`.
fn decode_record<'a>(
    data: &'a [u8],
    offset: usize,
    parts: &mut Parts<'_, 'a>,
) -> std::result::Result<(&'a [u8], Header), codec::DecodeError> {
    let Parts {
        shards,
        ops,
        members,
        tail,
    } = parts;
    let frame = data
        .get(offset..offset + FRAME_BYTES)
        .ok_or(codec::DecodeError("frame out of the segment"))?;
    let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    let payload = data
        .get(offset + FRAME_BYTES..offset + FRAME_BYTES + len)
        .ok_or(codec::DecodeError("record out of the segment"))?;
    let mut cur = Cursor::new(payload);
    cur.key_parts()?;
    let key = &payload[..payload.len() - cur.remaining()];
    let (epoch, list, agreed) = cur.cell_into(|c| c.u64(), shards)?;
    ops.clear();
    members.clear();
    **tail = None;
    if cur.remaining() != 0 {
        ids::record_ops(&mut cur, epoch.tag(), ops)?;
    }
    if cur.remaining() != 0 {
        let n = cur.varint()?;
        if n > cur.remaining() as u64 || (n > 0 && shards.len() != 1) {
            return Err(codec::DecodeError(
                "members section that the record cannot hold",
            ));
        }
        for _ in 0..n {
            let len = cur.varint_max(unique::MEMBER_BYTES_MAX, "member too long")?;
            members.push(cur.bytes(len)?);
        }
    }
    if cur.remaining() != 0 {
        if !ops.is_empty() || !members.is_empty() {
            return Err(codec::DecodeError("a tail in a record of this node's ids"));
        }
        **tail = Some(tail::tail(&mut cur)?);
    }
    if cur.remaining() != 0 {
        return Err(codec::DecodeError("trailing bytes in record"));
    }
    Ok((key, (epoch, list, agreed)))
}
