//! Where an unfinished repair stopped, so that the next one resumes there.
//!
//! The repairing node writes a checkpoint after each page of leaves it
//! settled and after each group of ranges; a repair that finds one (of
//! the same ring) skips the groups before it and, in its group, the keys
//! up to its cursor. The digests of that group are compared again: they
//! are what says which slices still differ. A finished repair removes it.
//!
//! The checkpoint keeps the time the interrupted repair began: hints
//! dropped before then are covered by the keys repaired since, so that is
//! the time the finished repair reports (see `hints::bound`).
//!
//! # Format (version 1)
//!
//! ```text
//! <data_dir>/repair.checkpoint   magic "TALLYRCP" | version u32 LE
//!     | ring u64 LE | started_ms u64 LE | group u32 LE
//!     | after: 0u8, or 1u8 | partition_len u16 LE | partition | column_len u16 LE | column
//!     | crc32 u32 LE (of everything before)
//! ```
//!
//! Written to a temporary file and renamed into place (not fsync'd: a
//! checkpoint lost to a crash costs only the work again). A damaged or
//! foreign one is ignored.

use std::path::{Path, PathBuf};

use tally_engine::Key;

const MAGIC: &[u8; 8] = b"TALLYRCP";
const VERSION: u32 = 1;

/// Where an unfinished repair stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// The ring it was made on ([`ring_id`]).
    pub(crate) ring: u64,
    /// When the interrupted repair began, ms since the Unix epoch.
    pub(crate) started_ms: u64,
    /// The group of ranges it was in (their order is the ring's).
    pub(crate) group: u32,
    /// The last key settled in that group, if any.
    pub(crate) after: Option<Key>,
}

/// An id of a ring: node ids, vnodes and replication factor.
pub(crate) fn ring_id(node_ids: &[String], vnodes: usize, rf: usize) -> u64 {
    let mut bytes = Vec::new();
    for id in node_ids {
        bytes.extend_from_slice(id.as_bytes());
        bytes.push(0); // ids hold no NUL
    }
    bytes.extend_from_slice(&(vnodes as u64).to_le_bytes());
    bytes.extend_from_slice(&(rf as u64).to_le_bytes());
    // Any stable hash will do: a mismatch only means starting over.
    u64::from(crc32fast::hash(&bytes)) | (bytes.len() as u64) << 32
}

/// The bytes of `c`.
pub(crate) fn encode(c: &Checkpoint) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&c.ring.to_le_bytes());
    out.extend_from_slice(&c.started_ms.to_le_bytes());
    out.extend_from_slice(&c.group.to_le_bytes());
    match &c.after {
        None => out.push(0),
        Some(k) => {
            out.push(1);
            for part in [k.partition(), k.column()] {
                let len = u16::try_from(part.len()).expect("key parts are under 64 KiB");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(part);
            }
        }
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The checkpoint in `bytes`, if they are a whole one.
pub(crate) fn decode(bytes: &[u8]) -> Option<Checkpoint> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body).to_le_bytes()[..] != *crc || body.get(..8)? != MAGIC {
        return None;
    }
    let mut r = Reader(&body[8..]);
    if u32::from_le_bytes(r.take()?) != VERSION {
        return None;
    }
    let ring = u64::from_le_bytes(r.take()?);
    let started_ms = u64::from_le_bytes(r.take()?);
    let group = u32::from_le_bytes(r.take()?);
    let after = match r.take::<1>()? {
        [0] => None,
        [1] => {
            let p = r.bytes()?;
            let c = r.bytes()?;
            Some(Key::new(p, c).ok()?)
        }
        _ => return None,
    };
    r.0.is_empty().then_some(Checkpoint {
        ring,
        started_ms,
        group,
        after,
    })
}

/// Reads fixed-size fields off the front of a buffer.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::from(u16::from_le_bytes(self.take()?));
        let (head, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(head)
    }
}

/// The checkpoint file in `data_dir`.
pub(crate) fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("repair.checkpoint")
}

/// The checkpoint in `data_dir` made on `ring`, if there is a whole one.
pub(crate) fn load(data_dir: &Path, ring: u64) -> Option<Checkpoint> {
    let bytes = tally_world::fs::read(path(data_dir)).ok()?;
    decode(&bytes).filter(|c| c.ring == ring)
}

/// Writes `c` into `data_dir`, replacing the last one.
pub(crate) fn save(data_dir: &Path, c: &Checkpoint) -> std::io::Result<()> {
    let tmp = data_dir.join("repair.checkpoint.tmp");
    tally_world::fs::write(&tmp, encode(c))?;
    tally_world::fs::rename(&tmp, path(data_dir))
}

/// Removes the checkpoint in `data_dir`, if any.
pub(crate) fn clear(data_dir: &Path) -> std::io::Result<()> {
    match tally_world::fs::remove_file(path(data_dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_damage_is_ignored() {
        let ring = ring_id(&["n1".into(), "n2".into()], 16, 3);
        for after in [None, Some(Key::new(b"part", b"col").unwrap())] {
            let c = Checkpoint {
                ring,
                started_ms: 1_764_000_000_000,
                group: 3,
                after,
            };
            let bytes = encode(&c);
            assert_eq!(decode(&bytes), Some(c));
            for cut in 0..bytes.len() {
                assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
            }
            let mut flipped = bytes.clone();
            flipped[20] ^= 1;
            assert_eq!(decode(&flipped), None);
        }
    }

    #[test]
    fn a_checkpoint_of_another_ring_is_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let a = ring_id(&["n1".into(), "n2".into()], 16, 3);
        let b = ring_id(&["n1".into(), "n2".into(), "n3".into()], 16, 3);
        assert_ne!(a, b);
        let c = Checkpoint {
            ring: a,
            started_ms: 7,
            group: 0,
            after: None,
        };
        save(dir.path(), &c).unwrap();
        assert_eq!(load(dir.path(), a), Some(c));
        assert_eq!(load(dir.path(), b), None);
        clear(dir.path()).unwrap();
        assert_eq!(load(dir.path(), a), None);
        clear(dir.path()).unwrap();
    }
}
