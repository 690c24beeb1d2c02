//! Ids files: the ledger's entries on disk once their log segments go.
//!
//! # Format (version 3)
//!
//! ```text
//! NNNNNN.ids = header block* footer
//! header = magic "TALLYIDS" | version u32 LE | crc32(magic, version) u32 LE  (16 bytes)
//! block  = len u32 LE | crc32(payload) u32 LE | payload (entries)             (len <= 1 MiB)
//! entry  = kind u8 | fields: 4, 5 the ledger's (see `ids`), 2, 3 the tails' (see `tail`)
//! footer = 0xFFFF_FFFF u32 LE | crc32(count) u32 LE | count u64 LE           (16 bytes)
//! ```
//!
//! A file is written as `NNNNNN.ids.tmp`, fsync'd, renamed into place and
//! the directory fsync'd, so a file under its final name is whole; open
//! removes temporaries. Anything that does not read back exactly (a bad
//! checksum, a missing footer, a count that differs) is a corruption error
//! naming the file and offset, never skipped: an entry lost could let a
//! retry count twice.
//!
//! Files are numbered in write order, but order does not matter: entries
//! are facts, and loading them in any order gives the same ledger. Every
//! file holds the tails as they were when it was written, so a tail
//! outlives the log segments that held it. Versions 1 (no tails) and 2
//! are still read: their ledger entries (kinds 0 and 1) name whole keys.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Entry;
use super::ledger::Ledger;
use super::pending::{BLOCK_BYTES, Encoded};
use super::tail::{self, TailEntry, Tails};
use crate::codec::Cursor;
use crate::error::{Error, Result};
use crate::fsutil;

const MAGIC: &[u8; 8] = b"TALLYIDS";
const VERSION: u32 = 3;
const HEADER_BYTES: usize = 16;
const FOOTER_LEN: u32 = u32::MAX;
/// Largest block payload.
const BLOCK_BYTES_MAX: usize = 1 << 20;
/// More files than this and the next write is a snapshot replacing them all.
pub(crate) const FILES_MAX: usize = 8;

/// The path of ids file `id` in `dir`.
pub(crate) fn path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.ids"))
}

/// Writes `entries` and `tails` to a new file `id`, durably.
pub(crate) fn write(
    dir: &Path,
    id: u64,
    entries: &[Entry],
    tails: &[TailEntry],
) -> Result<PathBuf> {
    let mut encoded = Encoded::default();
    entries.iter().for_each(|e| encoded.push(e));
    tails.iter().for_each(|t| encoded.push_tail(t));
    write_encoded(dir, id, &encoded)
}

/// Writes entries already encoded to a new file `id`, durably.
pub(crate) fn write_encoded(dir: &Path, id: u64, encoded: &Encoded) -> Result<PathBuf> {
    let path = path(dir, id);
    let tmp = path.with_extension("ids.tmp");
    let mut bytes =
        Vec::with_capacity(HEADER_BYTES + encoded.blocks.len() * (BLOCK_BYTES + 8) + 64);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    for block in encoded.all_blocks() {
        put_block(&mut bytes, block);
    }
    let count = encoded.count.to_le_bytes();
    bytes.extend_from_slice(&FOOTER_LEN.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&count).to_le_bytes());
    bytes.extend_from_slice(&count);
    let tmp = &tmp;
    let io = |op: &'static str| move |e| Error::io(op, tmp, e);
    let mut f = tally_world::fs::File::create(tmp).map_err(io("create ids file"))?;
    f.write_all(&bytes).map_err(io("write ids file"))?;
    f.sync_all().map_err(io("fsync ids file"))?;
    drop(f);
    tally_world::fs::rename(tmp, &path).map_err(|e| Error::io("rename ids file", &path, e))?;
    fsutil::sync_dir(dir)?;
    Ok(path)
}

fn put_block(out: &mut Vec<u8>, payload: &[u8]) {
    debug_assert!(payload.len() <= BLOCK_BYTES_MAX);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Reads file `path` into `ledger` (entries past the retention at
/// `now_ms` only raise marks) and `tails`; answers how many entries it held.
pub(crate) fn load(path: &Path, ledger: &Ledger, tails: &Tails, now_ms: u64) -> Result<u64> {
    let data = tally_world::fs::read(path).map_err(|e| Error::io("read ids file", path, e))?;
    let corrupt = |offset: usize, why: &str| Error::corruption(path, offset as u64, why);
    let header = data
        .get(..HEADER_BYTES)
        .ok_or_else(|| corrupt(0, "ids file shorter than its header"))?;
    if &header[..8] != MAGIC
        || crc32fast::hash(&header[..12]).to_le_bytes() != header[12..16]
        || !(1..=VERSION).contains(&u32::from_le_bytes([
            header[8], header[9], header[10], header[11],
        ]))
    {
        return Err(corrupt(0, "not an ids file of a known version"));
    }
    let mut offset = HEADER_BYTES;
    let mut count = 0u64;
    loop {
        let frame = data
            .get(offset..offset + 8)
            .ok_or_else(|| corrupt(offset, "ids file ends without its footer"))?;
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let crc = [frame[4], frame[5], frame[6], frame[7]];
        if len == FOOTER_LEN {
            let tail = data
                .get(offset + 8..)
                .filter(|t| t.len() == 8)
                .ok_or_else(|| corrupt(offset, "ids file footer is cut or followed by bytes"))?;
            if crc32fast::hash(tail).to_le_bytes() != crc
                || u64::from_le_bytes(tail.try_into().expect("8 bytes")) != count
            {
                return Err(corrupt(
                    offset,
                    "ids file footer does not match its entries",
                ));
            }
            return Ok(count);
        }
        let len = len as usize;
        if len > BLOCK_BYTES_MAX {
            return Err(corrupt(offset, "ids block over the size limit"));
        }
        let payload = data
            .get(offset + 8..offset + 8 + len)
            .ok_or_else(|| corrupt(offset, "ids block runs past the end of the file"))?;
        if crc32fast::hash(payload).to_le_bytes() != crc {
            return Err(corrupt(offset, "ids block checksum mismatch"));
        }
        let mut cur = Cursor::new(payload);
        while cur.remaining() > 0 {
            let undecodable = |e: crate::codec::DecodeError| {
                corrupt(offset, &format!("undecodable ids entry: {}", e.0))
            };
            let kind = cur.bytes(1).map_err(undecodable)?[0];
            if kind == tail::KIND_OP || kind == tail::KIND_FORGOTTEN {
                tails.load(TailEntry::decode(kind, &mut cur).map_err(undecodable)?);
            } else {
                let entry = Entry::decode_kind(kind, &mut cur).map_err(undecodable)?;
                ledger.load(entry, now_ms, false);
            }
            count += 1;
        }
        offset += 8 + len;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::ids::record::{Applied, Check};
    use crate::ids::{ClientId, OpId, Retention, fingerprint};
    use crate::key::Key;

    fn ledger() -> Ledger {
        Ledger::new(Retention {
            window_ms: 60_000,
            forget_ms: 600_000,
            ..Retention::default()
        })
    }

    fn entries(n: u64) -> Vec<Entry> {
        (1..=n)
            .map(|seq| Entry::Op {
                key: fingerprint(&Key::new(b"p", format!("c{}", seq % 7).as_bytes()).unwrap()),
                client: ClientId::from_slice(b"client"),
                op: Applied {
                    seq,
                    delta: 1,
                    value: seq as i64,
                    epoch: 0,
                    at_ms: 1_000,
                },
            })
            .collect()
    }

    fn tail_entries() -> Vec<TailEntry> {
        let key = Key::new(b"p", b"t").unwrap();
        vec![
            TailEntry::Forgotten { source: 3 },
            TailEntry::Op {
                source: 4,
                key,
                op: crate::ids::tail::TailOp {
                    batch: 9,
                    client: ClientId::from_slice(b"client"),
                    op: entries(1)
                        .into_iter()
                        .next()
                        .map(|e| match e {
                            Entry::Op { op, .. } => op,
                            Entry::Forgotten { .. } => unreachable!(),
                        })
                        .unwrap(),
                },
            },
        ]
    }

    #[test]
    fn tails_read_back_beside_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), 1, &entries(3), &tail_entries()).unwrap();
        let (l, t) = (ledger(), Tails::default());
        assert_eq!(load(&path, &l, &t, 2_000).unwrap(), 5);
        assert_eq!(l.len(), 3);
        assert_eq!(t.fence(&[4]).len(), 1);
        t.load(tail_entries().remove(1));
        assert_eq!(t.fence(&[3]), [], "source 3 stays forgotten");
    }

    #[test]
    fn a_file_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let all = entries(20_000); // several blocks
        let path = write(dir.path(), 3, &all, &[]).unwrap();
        let l = ledger();
        assert_eq!(load(&path, &l, &Tails::default(), 2_000).unwrap(), 20_000);
        let key = Key::new(b"p", b"c5").unwrap();
        let id = OpId::new(b"client", 5).unwrap();
        assert!(
            matches!(l.check(fingerprint(&key), &id, 1, None, 2_000), Check::Duplicate(op) if op.value == 5)
        );
        let empty = write(dir.path(), 4, &[], &[]).unwrap();
        assert_eq!(load(&empty, &l, &Tails::default(), 2_000).unwrap(), 0);
    }

    #[test]
    fn every_damage_is_a_corruption_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), 1, &entries(50), &tail_entries()).unwrap();
        let good = tally_world::fs::read(&path).unwrap();
        // Every cut, and a flipped bit at every offset.
        for cut in 0..good.len() {
            tally_world::fs::write(&path, &good[..cut]).unwrap();
            let e = load(&path, &ledger(), &Tails::default(), 2_000).unwrap_err();
            assert!(matches!(e, Error::Corruption { .. }), "cut at {cut}: {e}");
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            tally_world::fs::write(&path, &bad).unwrap();
            let e = load(&path, &ledger(), &Tails::default(), 2_000).unwrap_err();
            assert!(matches!(e, Error::Corruption { .. }), "flip at {at}: {e}");
        }
    }
}
