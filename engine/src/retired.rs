//! Retired incarnations whose tails are not learned yet.
//!
//! An unclean open retires the node's counter id (see `identity`). Its
//! shards may have reached replicas with ids its log lost; until the node
//! has learned those ids from every replica (`ids::tail`), it must not
//! apply ids, and the list says which incarnations to ask about. It lives
//! across restarts: a node that crashes again before it has learned them
//! asks about every incarnation still listed.
//!
//! # Format (version 1)
//!
//! `RETIRED` = magic "TALLYRET" | version u32 LE | count u32 LE | counter_id u64 LE * count | crc32 u32 LE
//!
//! Written to a temporary file, fsync'd and renamed into place; a missing
//! file is an empty list.

use std::path::Path;

use crate::error::{Error, Result};
use crate::fsutil::replace_file;

const MAGIC: &[u8; 8] = b"TALLYRET";
const VERSION: u32 = 1;
const FILE: &str = "RETIRED";
/// More retired incarnations than anyone waits for; a longer list is corrupt.
const COUNT_MAX: usize = 1 << 16;

/// The retired incarnations listed in `dir`, oldest first.
pub(crate) fn read(dir: &Path) -> Result<Vec<u64>> {
    let path = dir.join(FILE);
    let bytes = match tally_world::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read retired incarnations", &path, e)),
    };
    let corrupt = |why: &str| Error::corruption(&path, 0, why.to_string());
    if bytes.len() < 20 || &bytes[..8] != MAGIC {
        return Err(corrupt("not a retired-incarnations file"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes()[..] != *crc {
        return Err(corrupt("retired-incarnations checksum mismatch"));
    }
    let word = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    if word(8) != VERSION {
        return Err(corrupt("unsupported retired-incarnations version"));
    }
    let count = word(12) as usize;
    if count > COUNT_MAX || body.len() != 16 + 8 * count {
        return Err(corrupt(
            "retired-incarnations count does not match the file",
        ));
    }
    Ok(body[16..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// Adds `counter_id` to the list in `dir`, durably.
pub(crate) fn add(dir: &Path, counter_id: u64) -> Result<()> {
    let mut ids = read(dir)?;
    if !ids.contains(&counter_id) {
        ids.push(counter_id);
        write(dir, &ids)?;
    }
    Ok(())
}

/// Removes `learned` from the list in `dir`, durably.
pub(crate) fn remove(dir: &Path, learned: &[u64]) -> Result<()> {
    let mut ids = read(dir)?;
    let before = ids.len();
    ids.retain(|id| !learned.contains(id));
    if ids.len() != before {
        write(dir, &ids)?;
    }
    Ok(())
}

fn write(dir: &Path, ids: &[u64]) -> Result<()> {
    let path = dir.join(FILE);
    let count = u32::try_from(ids.len())
        .ok()
        .filter(|&n| n as usize <= COUNT_MAX)
        .ok_or_else(|| Error::corruption(&path, 0, "too many retired incarnations"))?;
    let mut b = Vec::with_capacity(20 + 8 * ids.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&count.to_le_bytes());
    ids.iter()
        .for_each(|id| b.extend_from_slice(&id.to_le_bytes()));
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    replace_file(dir, &path, &b, "write retired incarnations")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_list_reads_back_and_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        add(dir.path(), 7).unwrap();
        add(dir.path(), u64::MAX).unwrap();
        add(dir.path(), 7).unwrap();
        assert_eq!(read(dir.path()).unwrap(), [7, u64::MAX]);
        remove(dir.path(), &[7]).unwrap();
        assert_eq!(read(dir.path()).unwrap(), [u64::MAX]);
        remove(dir.path(), &[u64::MAX]).unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn every_damage_is_a_corruption_error() {
        let dir = tempfile::tempdir().unwrap();
        add(dir.path(), 7).unwrap();
        add(dir.path(), 8).unwrap();
        let path = dir.path().join(FILE);
        let good = tally_world::fs::read(&path).unwrap();
        for cut in 0..good.len() {
            tally_world::fs::write(&path, &good[..cut]).unwrap();
            assert!(
                matches!(read(dir.path()), Err(Error::Corruption { .. })),
                "cut at {cut}"
            );
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x04;
            tally_world::fs::write(&path, &bad).unwrap();
            assert!(
                matches!(read(dir.path()), Err(Error::Corruption { .. })),
                "flip at {at}"
            );
        }
    }
}
