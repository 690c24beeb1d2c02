//! The hint file format, version 1: a sequence of records, one key each.
//!
//! ```text
//! hints/<node id>.hints   records: len u32 LE | crc32 u32 LE | partition_len u16 LE
//!                                  | partition | column
//! ```
//!
//! `len` counts the bytes after the crc (`2 + partition + column`, at most
//! [`RECORD_BYTES_MAX`]); the crc covers the same bytes. A file is read
//! as a stream, one record at a time, so its size never decides how much
//! memory reading it takes; the first torn or damaged record ends it.
//!
//! A file is rewritten (compaction, or after a failed write or fsync) by
//! writing `<node id>.hints.new`, fsyncing it, renaming it over the old
//! file and fsyncing the directory: a crash leaves the old file or the
//! new one, each holding every key pending when it was made. A leftover
//! `.new` file is removed at start.

use std::collections::HashSet;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use tally_world::fs::{File, OpenOptions};

use anyhow::{Context, Result};
use tally_engine::Key;

/// Largest record accepted when reading a hint file back.
pub(super) use crate::config::hints::RECORD_BYTES_MAX;
/// Bytes before a record's body: its length and its crc.
const HEADER_BYTES: usize = 8;
/// Read buffer of a hint file being read back.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Appends the record of `key` to `out`.
pub(super) fn encode(key: &Key, out: &mut Vec<u8>) {
    let p = key.partition();
    let c = key.column();
    let body_len = 2 + p.len() + c.len();
    assert!(
        body_len <= RECORD_BYTES_MAX,
        "a key of {body_len} bytes makes a record over {RECORD_BYTES_MAX}"
    );
    let start = out.len();
    out.extend_from_slice(
        &u32::try_from(body_len)
            .expect("keys are small")
            .to_le_bytes(),
    );
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(
        &u16::try_from(p.len())
            .expect("partition ≤ 1 KiB")
            .to_le_bytes(),
    );
    out.extend_from_slice(p);
    out.extend_from_slice(c);
    let crc = crc32fast::hash(&out[start + HEADER_BYTES..]);
    out[start + 4..start + HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
}

/// A hint file as read back.
#[derive(Debug, Default)]
pub(super) struct ReadBack {
    /// The keys of its whole, valid records.
    pub(super) keys: HashSet<Key>,
    /// Its whole, valid records (a key may have several).
    pub(super) records: usize,
    /// The bytes those records take, from the start: the rest is damage.
    pub(super) valid_len: u64,
}

/// Reads the hint file at `path` (none: empty), one record at a time.
pub(super) fn read_back(path: &Path) -> Result<ReadBack> {
    match File::open(path) {
        Ok(f) => read_records(BufReader::with_capacity(READ_BUFFER_BYTES, f))
            .with_context(|| format!("read {}", path.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(ReadBack::default()),
        Err(e) => Err(e).with_context(|| format!("open {}", path.display())),
    }
}

/// Reads records from `r` until its end or the first damaged record.
fn read_records(mut r: impl Read) -> std::io::Result<ReadBack> {
    let mut back = ReadBack::default();
    let mut header = [0u8; HEADER_BYTES];
    let mut body = Vec::with_capacity(RECORD_BYTES_MAX);
    loop {
        if !read_whole(&mut r, &mut header)? {
            return Ok(back);
        }
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if !(2..=RECORD_BYTES_MAX).contains(&len) {
            return Ok(back);
        }
        body.resize(len, 0);
        if !read_whole(&mut r, &mut body)? || crc32fast::hash(&body) != crc {
            return Ok(back);
        }
        let Some(key) = decode_body(&body) else {
            return Ok(back);
        };
        back.keys.insert(key);
        back.records += 1;
        back.valid_len += (HEADER_BYTES + len) as u64;
    }
}

/// Fills `buf`; `false` at the end of the stream, even part way.
fn read_whole(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    match r.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// The key of a record's body (after its header); `None` if malformed.
fn decode_body(body: &[u8]) -> Option<Key> {
    let plen = u16::from_le_bytes([*body.first()?, *body.get(1)?]) as usize;
    let partition = body.get(2..2 + plen)?;
    let column = body.get(2 + plen..)?;
    Key::new(partition, column).ok()
}

/// Where a file's replacement is written before it is renamed over it.
pub(super) fn new_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// Writes the records of `keys` to a fresh `new_path(path)` and fsyncs
/// it; answers it open for appending. The caller renames it over `path`.
pub(super) fn write_new<'k>(path: &Path, keys: impl IntoIterator<Item = &'k Key>) -> Result<File> {
    let new = new_path(path);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&new)
        .with_context(|| format!("create {}", new.display()))?;
    let mut out = BufWriter::new(file);
    let mut rec = Vec::with_capacity(64);
    for key in keys {
        rec.clear();
        encode(key, &mut rec);
        out.write_all(&rec)
            .with_context(|| format!("write {}", new.display()))?;
    }
    let file = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("write {}", new.display()))?;
    super::sync_file(&file).with_context(|| format!("fsync {}", new.display()))?;
    // Appends after the rename go to the end, like the old file's.
    OpenOptions::new()
        .append(true)
        .open(&new)
        .with_context(|| format!("open {}", new.display()))
}

/// Fsyncs a directory, so that a rename in it survives a crash.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).with_context(|| format!("open {}", dir.display()))?;
    super::sync_file(&d).with_context(|| format!("fsync {}", dir.display()))
}

/// Replaces the file at `path` with `bytes`, durably: a fresh
/// `new_path(path)`, fsync'd, renamed over it, the directory fsync'd.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let new = new_path(path);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&new)
        .with_context(|| format!("create {}", new.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("write {}", new.display()))?;
    super::sync_file(&file).with_context(|| format!("fsync {}", new.display()))?;
    tally_world::fs::rename(&new, path)
        .with_context(|| format!("rename {} to {}", new.display(), path.display()))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Removes the file at `path` (if it is there), durably.
pub(crate) fn remove(path: &Path) -> Result<()> {
    match tally_world::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("remove {}", path.display())),
    }
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// The bytes of the file at `path`; `None` if there is none.
pub(crate) fn read_small(path: &Path) -> Result<Option<Vec<u8>>> {
    match tally_world::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn key(p: &str, c: &str) -> Key {
        Key::new(p.as_bytes(), c.as_bytes()).unwrap()
    }

    /// A reader that hands out at most `chunk` bytes per call and records
    /// the largest buffer it was asked to fill.
    struct Trickle<'a> {
        bytes: &'a [u8],
        chunk: usize,
        largest_ask: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.largest_ask = self.largest_ask.max(buf.len());
            let n = buf.len().min(self.chunk).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    #[test]
    fn records_are_read_one_at_a_time_whatever_the_reads_return() {
        let mut bytes = Vec::new();
        for i in 0..50 {
            encode(&key(&format!("p{i}"), "col"), &mut bytes);
        }
        encode(&key("p0", "col"), &mut bytes); // a key twice: two records
        for chunk in [1, 3, 7, 4096] {
            let mut r = Trickle {
                bytes: &bytes,
                chunk,
                largest_ask: 0,
            };
            let back = read_records(&mut r).unwrap();
            assert_eq!(back.keys.len(), 50, "chunk {chunk}");
            assert_eq!(back.records, 51, "chunk {chunk}");
            assert_eq!(back.valid_len as usize, bytes.len(), "chunk {chunk}");
            assert!(
                r.largest_ask <= RECORD_BYTES_MAX,
                "asked for {} bytes at once",
                r.largest_ask
            );
        }
    }

    #[test]
    fn damage_ends_the_file_at_the_last_whole_record() {
        let mut bytes = Vec::new();
        encode(&key("a", ""), &mut bytes);
        let one = bytes.len();
        encode(&key("b", "c"), &mut bytes);
        let two = bytes.len();
        let cases: Vec<(Vec<u8>, u64)> = vec![
            // A flipped body byte: bad crc.
            (
                {
                    let mut b = bytes.clone();
                    b[two - 1] ^= 1;
                    b
                },
                one as u64,
            ),
            // A length over the limit.
            (
                {
                    let mut b = bytes.clone();
                    b[one..one + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                    b
                },
                one as u64,
            ),
            // A partition length past the body.
            (
                {
                    let mut b = bytes[..one].to_vec();
                    let mut body = vec![9u8, 0, b'x'];
                    let mut rec = (body.len() as u32).to_le_bytes().to_vec();
                    rec.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
                    rec.append(&mut body);
                    b.extend_from_slice(&rec);
                    b
                },
                one as u64,
            ),
            // Zeros.
            ([bytes.clone(), vec![0; 100]].concat(), two as u64),
        ];
        for (i, (b, want)) in cases.into_iter().enumerate() {
            let back = read_records(&b[..]).unwrap();
            assert_eq!(back.valid_len, want, "case {i}");
        }
    }

    #[test]
    fn a_new_file_holds_exactly_its_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n2.hints");
        let keys = [key("a", ""), key("b", "x")];
        let mut f = write_new(&path, &keys).unwrap();
        let mut rec = Vec::new();
        encode(&key("c", ""), &mut rec);
        f.write_all(&rec).unwrap();
        tally_world::fs::rename(new_path(&path), &path).unwrap();
        let back = read_back(&path).unwrap();
        assert_eq!(back.records, 3);
        assert!(back.keys.contains(&key("c", "")));
        assert!(
            read_back(&dir.path().join("none.hints"))
                .unwrap()
                .keys
                .is_empty()
        );
    }
}
