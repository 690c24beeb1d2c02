//! Reading a segment frame by frame, and what damage in it proves.
//!
//! [`scan`] walks a segment's frames up to the first one that is not a
//! whole record or sync mark, and [`judge`] decides what the bytes from
//! there on are, from the rules below (the reasons are in the crash story of
//! the module above). Both are pure: replay and `tallyd check-log` act on
//! their answer.
//!
//! # What a tear can leave, and what it cannot
//!
//! Only the last segment can hold a torn write: every other one was cut to
//! its records and fsync'd before the next was created. In the last one, a
//! tear can only damage writes not yet fsync'd when the power went, and it
//! leaves two kinds of bytes only: bytes that were written, where they were
//! written, and the zeros laid down (durably) ahead of the records where
//! writeback did not get to. Writeback goes by page, in any order, so the
//! zeros come as whole 4 KiB pages, or as the rest of the page where the
//! unsynced writes began. A tear never writes a byte that was not written,
//! nor zeros a byte that was fsync'd.
//!
//! Every write of records ends in a sync mark giving the offset up to which
//! the segment was fsync'd *before* that write was issued. A mark anywhere
//! after damaged bytes that says they were durable proves the damage is not
//! a tear: those bytes were acknowledged.
//!
//! So, in the last segment only, bad bytes at `offset` are:
//! - the **end** of the log when they and everything after them are zeros;
//! - a **torn** last record when its frame runs past the end of the file,
//!   or nothing but zeros follows the end its frame claims (format 1 and 2);
//! - a **torn** write with a zero-filled gap (format 2, which has sync
//!   marks) when the record at `offset` meets zeros where a tear leaves
//!   them, from `offset` to the end of its page or a whole page the record
//!   overlaps, and no sync mark after `offset` says the log was durable
//!   past it;
//! - **corruption** otherwise: garbage, a length no writer makes, a gap a
//!   later mark proves was durable, or any damage in an earlier segment.
//!
//! What no format can prove: a last write lost whole leaves no trace, so the
//! write before it, fsync'd and acknowledged, then looks unsynced, and a
//! zero-filled gap in it is taken for a tear. That needs the disk to have
//! zeroed fsync'd pages, which is the storage breaking its contract; short
//! of that, a zero-filled gap is never acknowledged data.

use super::{FRAME_BYTES, HEADER_BYTES, MAGIC, MARK_BYTES, MARK_LEN, RECORD_BYTES_MAX};
use crate::codec::Cursor;

/// The unit writeback writes a file in.
const PAGE_BYTES: usize = 4096;

/// How a segment ends, as a scan found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentEnd {
    /// Every byte is part of a whole record or sync mark.
    Clean,
    /// Only the zeros laid down ahead of the records from `offset` on: how
    /// the segment being written ends when the process stops uncleanly.
    Zeros {
        /// Where the zeros start: the end of the last record.
        offset: u64,
    },
    /// A torn write from `offset` on (see the module doc): records from
    /// there were never acknowledged, and replay cuts them off.
    Torn {
        /// The first damaged record.
        offset: u64,
        /// What was found there.
        reason: String,
    },
    /// Damage at `offset` that is not provably a tear: replay refuses it.
    Corrupt {
        /// The first damaged record.
        offset: u64,
        /// What was found there.
        reason: String,
    },
}

impl SegmentEnd {
    /// Where the good part of a segment of `len` bytes ends.
    pub fn good_end(&self, len: u64) -> u64 {
        match self {
            SegmentEnd::Clean => len,
            SegmentEnd::Zeros { offset }
            | SegmentEnd::Torn { offset, .. }
            | SegmentEnd::Corrupt { offset, .. } => *offset,
        }
    }
}

/// What [`scan`] found in one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The segment's format version (0 if its header is unreadable).
    pub(crate) version: u32,
    /// Whole records before the end.
    pub(crate) records: u64,
    /// How it ends.
    pub(crate) end: SegmentEnd,
}

/// Scans a segment: checks every frame and checksum, hands each record's
/// frame offset and encoded key to `file`, and says how the segment ends;
/// `last` says whether it is the log's last segment.
pub(crate) fn scan(data: &[u8], last: bool, file: &mut impl FnMut(usize, &[u8])) -> Scan {
    let version = match header_version(data) {
        Ok(v) => v,
        Err(reason) => {
            // Torn while being created: nothing but zeros after it.
            let rest = data.get(HEADER_BYTES..).unwrap_or_default();
            let end = if last && rest.iter().all(|b| *b == 0) {
                SegmentEnd::Torn {
                    offset: 0,
                    reason: reason.into(),
                }
            } else {
                SegmentEnd::Corrupt {
                    offset: 0,
                    reason: reason.into(),
                }
            };
            return Scan {
                version: 0,
                records: 0,
                end,
            };
        }
    };
    let mut records = 0;
    let mut offset = HEADER_BYTES;
    while offset < data.len() {
        match frame_at(data, offset, version) {
            Ok(Frame::Record(payload)) => {
                let mut cur = Cursor::new(payload);
                if let Err(e) = cur.key_parts() {
                    // The checksum matched: these bytes were written so.
                    let reason = format!("undecodable record: {}", e.0);
                    return Scan {
                        version,
                        records,
                        end: corrupt(offset, reason),
                    };
                }
                file(offset, &payload[..payload.len() - cur.remaining()]);
                records += 1;
                offset += FRAME_BYTES + payload.len();
            }
            Ok(Frame::Mark { .. }) => offset += MARK_BYTES,
            Err(reason) => {
                let end = judge(data, offset, last, version, reason);
                return Scan {
                    version,
                    records,
                    end,
                };
            }
        }
    }
    Scan {
        version,
        records,
        end: SegmentEnd::Clean,
    }
}

/// A whole frame.
#[derive(Debug, PartialEq, Eq)]
enum Frame<'a> {
    /// A record and its payload.
    Record(&'a [u8]),
    /// A sync mark: the segment was durable up to `synced` when the write
    /// it ends was issued.
    Mark {
        /// The offset it vouches for.
        synced: u64,
    },
}

/// The frame at `offset` of a segment of format `version`, or why there is
/// no whole one there.
fn frame_at(data: &[u8], offset: usize, version: u32) -> Result<Frame<'_>, String> {
    let Some(frame) = data.get(offset..offset + FRAME_BYTES) else {
        return Err("truncated record frame".into());
    };
    let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
    let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
    if len == MARK_LEN && version >= 2 {
        return match mark_at(data, offset) {
            Some(synced) => Ok(Frame::Mark { synced }),
            None => Err("bad sync mark".into()),
        };
    }
    let len = len as usize;
    if len > RECORD_BYTES_MAX {
        return Err(format!("record length {len} over the limit"));
    }
    let Some(payload) = data.get(offset + FRAME_BYTES..offset + FRAME_BYTES + len) else {
        return Err("record runs past the end of the segment".into());
    };
    let actual = crc32fast::hash(payload);
    if actual != crc || len == 0 {
        return Err(format!(
            "checksum mismatch (stored {crc:#010x}, computed {actual:#010x})"
        ));
    }
    Ok(Frame::Record(payload))
}

/// The offset a whole, checksummed sync mark at `offset` vouches for. A
/// mark vouches only for bytes before itself.
fn mark_at(data: &[u8], offset: usize) -> Option<u64> {
    let mark = data.get(offset..offset + MARK_BYTES)?;
    if mark[..4] != MARK_LEN.to_le_bytes() {
        return None;
    }
    let crc = u32::from_le_bytes([mark[4], mark[5], mark[6], mark[7]]);
    if crc32fast::hash(&mark[FRAME_BYTES..]) != crc {
        return None;
    }
    let synced = u64::from_le_bytes(mark[FRAME_BYTES..].try_into().ok()?);
    (synced <= offset as u64).then_some(synced)
}

/// The format version of a segment's header, or why it is not one.
fn header_version(data: &[u8]) -> Result<u32, &'static str> {
    let Some(h) = data.get(..HEADER_BYTES) else {
        return Err("segment shorter than its header");
    };
    let crc = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    if &h[..8] != MAGIC || crc32fast::hash(&h[..12]) != crc {
        return Err("bad commit log segment header");
    }
    match u32::from_le_bytes([h[8], h[9], h[10], h[11]]) {
        v @ 1..=super::VERSION => Ok(v),
        _ => Err("unsupported commit log segment version"),
    }
}

fn corrupt(offset: usize, reason: String) -> SegmentEnd {
    SegmentEnd::Corrupt {
        offset: offset as u64,
        reason,
    }
}

/// What the bytes of a segment from `offset` on are, `offset` being the
/// first that is not a whole record or mark (the rules of the module doc):
/// `reason` says what is wrong there.
pub(crate) fn judge(
    data: &[u8],
    offset: usize,
    last: bool,
    version: u32,
    reason: String,
) -> SegmentEnd {
    if !last {
        return corrupt(offset, reason);
    }
    let rest = data.get(offset..).unwrap_or_default();
    if rest.iter().all(|b| *b == 0) {
        return SegmentEnd::Zeros {
            offset: offset as u64,
        };
    }
    let torn = |why: &str| SegmentEnd::Torn {
        offset: offset as u64,
        reason: format!("{reason}: {why}"),
    };
    let claimed_end = claimed_end(data, offset);
    let nothing_after = match claimed_end {
        None => data.len() < offset + FRAME_BYTES,
        Some(end) => data.get(end..).is_none_or(|r| r.iter().all(|b| *b == 0)),
    };
    if nothing_after {
        return torn("the log's last record, torn");
    }
    let record_end = claimed_end.unwrap_or(offset + FRAME_BYTES);
    if version < 2 || !zero_gap_at(data, offset, record_end) {
        return corrupt(offset, reason);
    }
    match durable_past(data, offset) {
        Some((mark, synced)) => corrupt(
            offset,
            format!(
                "{reason}: zeros where the sync mark at offset {mark} says the log was durable up to {synced}"
            ),
        ),
        None => torn("a zero-filled gap in writes no sync mark says were durable"),
    }
}

/// The end the frame at `offset` claims for its record or mark, if its
/// length is one a writer makes.
fn claimed_end(data: &[u8], offset: usize) -> Option<usize> {
    let f = data.get(offset..offset + 4)?;
    let len = u32::from_le_bytes([f[0], f[1], f[2], f[3]]);
    if len == MARK_LEN {
        return Some(offset + MARK_BYTES);
    }
    let len = len as usize;
    (len <= RECORD_BYTES_MAX).then_some(offset + FRAME_BYTES + len)
}

/// Whether the record at `offset` (ending at `record_end`) meets zeros as
/// writeback leaves them: zeros from `offset` to the end of its page, or a
/// whole page (as far as the file goes) it overlaps.
pub(crate) fn zero_gap_at(data: &[u8], offset: usize, record_end: usize) -> bool {
    let zeros = |from: usize, to: usize| {
        let to = to.min(data.len());
        from < to && data[from..to].iter().all(|b| *b == 0)
    };
    let page_end = (offset / PAGE_BYTES + 1) * PAGE_BYTES;
    if zeros(offset, page_end) {
        return true;
    }
    (page_end..record_end.min(data.len()))
        .step_by(PAGE_BYTES)
        .any(|page| zeros(page, page + PAGE_BYTES))
}

/// The first sync mark after `offset` that says the segment was durable
/// past it: the mark's offset and the offset it vouches for.
pub(crate) fn durable_past(data: &[u8], offset: usize) -> Option<(usize, u64)> {
    let tag = MARK_LEN.to_le_bytes();
    let last = data.len().checked_sub(MARK_BYTES)?;
    (offset + 1..=last)
        .filter(|&at| data[at..at + 4] == tag)
        .find_map(|at| {
            mark_at(data, at)
                .filter(|synced| *synced > offset as u64)
                .map(|synced| (at, synced))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Cell, Shard};
    use crate::commitlog::{encode_mark, encode_record, header};
    use crate::key::Key;

    /// A format-2 segment: `writes` writes of `per_write` records of about
    /// 100 bytes, each write ending in its sync mark (every write before
    /// it fsync'd). Answers the bytes and each write's record offsets.
    fn segment(writes: usize, per_write: usize) -> (Vec<u8>, Vec<Vec<usize>>) {
        segment_of_version(2, writes, per_write)
    }

    /// [`segment`] in format `version` (1: without marks).
    fn segment_of_version(
        version: u32,
        writes: usize,
        per_write: usize,
    ) -> (Vec<u8>, Vec<Vec<usize>>) {
        let mut buf = header().to_vec();
        buf[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&buf[..12]);
        buf[12..16].copy_from_slice(&crc.to_le_bytes());
        let mut offsets = Vec::new();
        for w in 0..writes {
            let synced = buf.len() as u64;
            let mut these = Vec::new();
            for r in 0..per_write {
                these.push(buf.len());
                let key = Key::new(format!("w{w}").as_bytes(), &[b'x'; 60]).expect("short");
                let id = (w * per_write + r) as u64 + 1;
                let shard = Shard {
                    counter_id: id,
                    clock: 1,
                    value: 1,
                };
                encode_record(&mut buf, &key, &Cell::from_parts(0, [shard]));
            }
            if version >= 2 {
                encode_mark(&mut buf, synced);
            }
            offsets.push(these);
        }
        (buf, offsets)
    }

    fn scanned(data: &[u8], last: bool) -> Scan {
        scan(data, last, &mut |_, _| {})
    }

    fn zero(data: &mut [u8], from: usize, to: usize) {
        let to = to.min(data.len());
        data[from..to].fill(0);
    }

    /// The first record of `offsets` that zeros from `at` on touch.
    fn touched(offsets: &[usize], data_len: usize, at: usize) -> usize {
        let ends = offsets.iter().skip(1).copied().chain([data_len]);
        offsets
            .iter()
            .zip(ends)
            .find(|(_, end)| *end > at)
            .map(|(o, _)| *o)
            .expect("a record past `at`")
    }

    #[test]
    fn a_whole_segment_is_clean_and_its_records_counted() {
        let (data, _) = segment(3, 10);
        let scan = scanned(&data, true);
        assert_eq!((scan.version, scan.records), (2, 30));
        assert_eq!(scan.end, SegmentEnd::Clean);
    }

    #[test]
    fn zeros_after_the_records_are_the_end_of_the_log() {
        let (mut data, _) = segment(2, 5);
        let len = data.len();
        data.resize(64 << 10, 0);
        assert_eq!(
            scanned(&data, true).end,
            SegmentEnd::Zeros { offset: len as u64 }
        );
        // Not in an earlier segment: those were cut back to their records.
        assert!(matches!(
            scanned(&data, false).end,
            SegmentEnd::Corrupt { offset, .. } if offset == len as u64
        ));
    }

    #[test]
    fn a_zero_page_in_the_last_write_is_a_torn_tail() {
        for version in [2, 1] {
            let (mut data, writes) = segment_of_version(version, 3, 120);
            let last = &writes[2];
            let page = (last[0] + 1).next_multiple_of(PAGE_BYTES);
            assert!(page + PAGE_BYTES < data.len() - 200, "write spans pages");
            zero(&mut data, page, page + PAGE_BYTES);
            let at = touched(last, data.len(), page) as u64;
            let scan = scanned(&data, true);
            if version == 2 {
                assert!(
                    matches!(&scan.end, SegmentEnd::Torn { offset, reason } if *offset == at && reason.contains("zero-filled gap")),
                    "{scan:?}"
                );
            } else {
                // Format 1 has no marks: nothing tells the last write apart.
                assert!(
                    matches!(&scan.end, SegmentEnd::Corrupt { offset, .. } if *offset == at),
                    "{scan:?}"
                );
            }
        }
    }

    #[test]
    fn a_zero_page_a_later_mark_vouches_for_is_corruption() {
        let (mut data, writes) = segment(3, 120);
        let middle = &writes[1];
        let page = (middle[0] + 1).next_multiple_of(PAGE_BYTES);
        zero(&mut data, page, page + PAGE_BYTES);
        let at = touched(middle, data.len(), page);
        let scan = scanned(&data, true);
        assert!(
            matches!(&scan.end, SegmentEnd::Corrupt { offset, reason } if *offset == at as u64 && reason.contains("durable up to")),
            "{scan:?}"
        );
        assert!(durable_past(&data, at).is_some());
        assert_eq!(durable_past(&data, data.len() - 10), None);
    }

    #[test]
    fn zeros_from_where_the_last_write_began_are_a_torn_tail() {
        let (mut data, writes) = segment(3, 120);
        let start = writes[2][0];
        zero(&mut data, start, start.next_multiple_of(PAGE_BYTES));
        assert!(matches!(
            scanned(&data, true).end,
            SegmentEnd::Torn { offset, .. } if offset == start as u64
        ));
    }

    #[test]
    fn garbage_is_corruption_even_in_the_last_write() {
        let (mut data, writes) = segment(3, 120);
        let at = writes[2][30];
        for (i, b) in data[at + 4..at + 60].iter_mut().enumerate() {
            *b = 0x5a ^ i as u8;
        }
        assert!(matches!(
            scanned(&data, true).end,
            SegmentEnd::Corrupt { offset, .. } if offset == at as u64
        ));
        // A length no writer makes, even if zeros follow it somewhere.
        let (mut data, writes) = segment(3, 120);
        let at = writes[2][30];
        data[at + 3] = 0x40;
        assert!(matches!(
            scanned(&data, true).end,
            SegmentEnd::Corrupt { offset, .. } if offset == at as u64
        ));
    }

    #[test]
    fn a_frame_across_a_lost_page_is_a_gap() {
        // A frame whose first bytes end a page and the rest start a zero page.
        let mut data = vec![0x11u8; 3 * PAGE_BYTES];
        let at = PAGE_BYTES * 2 - 3;
        zero(&mut data, at, at + 3);
        assert!(zero_gap_at(&data, at, at + FRAME_BYTES));
        let mut data = vec![0x11u8; 3 * PAGE_BYTES];
        zero(&mut data, PAGE_BYTES, 2 * PAGE_BYTES);
        assert!(
            zero_gap_at(&data, 100, PAGE_BYTES + 5),
            "a whole page inside"
        );
        assert!(
            !zero_gap_at(&data, 100, PAGE_BYTES),
            "the page is past the record"
        );
        data[PAGE_BYTES + 7] = 1;
        assert!(!zero_gap_at(&data, 100, 3 * PAGE_BYTES), "not a whole page");
        // The last page counts as far as the file goes.
        let mut data = vec![0x11u8; PAGE_BYTES + 100];
        zero(&mut data, PAGE_BYTES, PAGE_BYTES + 100);
        assert!(zero_gap_at(&data, 10, PAGE_BYTES + 50));
    }

    #[test]
    fn a_torn_header_or_a_bad_one() {
        let (data, _) = segment(1, 3);
        let mut torn = data[..10].to_vec();
        torn.resize(4096, 0);
        assert!(matches!(
            scanned(&torn, true).end,
            SegmentEnd::Torn { offset: 0, .. }
        ));
        assert!(matches!(
            scanned(&torn, false).end,
            SegmentEnd::Corrupt { offset: 0, .. }
        ));
        let mut bad = data.clone();
        bad[3] ^= 1;
        assert!(matches!(
            scanned(&bad, true).end,
            SegmentEnd::Corrupt { offset: 0, .. }
        ));
    }

    #[test]
    fn a_mark_vouches_only_for_bytes_before_itself() {
        let mut data = header().to_vec();
        encode_mark(&mut data, 10_000);
        assert_eq!(mark_at(&data, HEADER_BYTES), None);
        let mut data = header().to_vec();
        encode_mark(&mut data, 16);
        assert_eq!(mark_at(&data, HEADER_BYTES), Some(16));
        data[20] ^= 1;
        assert_eq!(mark_at(&data, HEADER_BYTES), None, "checksummed");
    }
}
