//! The ring, durably: `<data_dir>/ring`.
//!
//! # Format (version 3)
//!
//! ```text
//! magic "TALLYRNG" | format u32 LE | ring version u64 LE | switching u8
//!     | count u32 LE | state u8 * count
//!     | folds_active u32 LE | generations u32 LE | (ids u32 LE | counter_id u64 LE * ids) * generations
//!     | databases u32 LE | flush generation u32 LE * databases
//!     | crc32 u32 LE (of everything before)
//! ```
//!
//! Version 2 ended after the fold generations (no database flushed yet),
//! version 1 after the states (no fold generations either); both still
//! read.
//!
//! States: 0 absent, 1 joining, 2 normal, 3 leaving, 4 removing, 5 left.
//! Written to a new file, fsync'd and renamed over the old one, the
//! directory fsync'd: a ring is stored before it is used. A missing file
//! means the node has not stored one yet (it starts from the seed); a
//! damaged one stops the node with the file's name, as a ring guessed at
//! would place data wrongly.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use tally_net::wire::{FOLD_IDS_MAX, NodeState, TOPOLOGY_NODES_MAX};

use super::Topology;
use crate::cluster::hints::file::{read_small, replace};

const MAGIC: &[u8; 8] = b"TALLYRNG";
const FORMAT: u32 = 3;

/// Where a node keeps its ring.
pub(crate) fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("ring")
}

const STATES: [NodeState; 6] = [
    NodeState::Absent,
    NodeState::Joining,
    NodeState::Normal,
    NodeState::Leaving,
    NodeState::Removing,
    NodeState::Left,
];

fn code(s: NodeState) -> u8 {
    let i = STATES
        .iter()
        .position(|&x| x == s)
        .expect("every state is listed");
    u8::try_from(i).expect("six states")
}

/// The bytes of `t`.
pub(crate) fn encode(t: &Topology) -> Vec<u8> {
    let mut out = Vec::with_capacity(29 + t.states.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&t.version.to_le_bytes());
    out.push(u8::from(t.switching));
    let count = u32::try_from(t.states.len()).expect("at most TOPOLOGY_NODES_MAX nodes");
    out.extend_from_slice(&count.to_le_bytes());
    out.extend(t.states.iter().map(|&s| code(s)));
    out.extend_from_slice(&t.folds_active.to_le_bytes());
    let generations = u32::try_from(t.folds.len()).expect("at most FOLD_IDS_MAX generations");
    out.extend_from_slice(&generations.to_le_bytes());
    for ids in &t.folds {
        let n = u32::try_from(ids.len()).expect("at most FOLD_IDS_MAX ids");
        out.extend_from_slice(&n.to_le_bytes());
        for id in ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    let databases = u32::try_from(t.flushes.len()).expect("at most DATABASES databases");
    out.extend_from_slice(&databases.to_le_bytes());
    for g in &t.flushes {
        out.extend_from_slice(&g.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The ring in `bytes`, or why they are not one.
pub(crate) fn decode(bytes: &[u8]) -> Result<Topology, String> {
    if bytes.len() < 29 || &bytes[..8] != MAGIC {
        return Err("not a ring file".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes()[..] != *crc {
        return Err("checksum mismatch".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    let format = u32_at(8);
    if !(1..=FORMAT).contains(&format) {
        return Err(format!("unsupported format {format}"));
    }
    let version = u64::from_le_bytes(body[12..20].try_into().expect("8 bytes"));
    let switching = match body[20] {
        0 => false,
        1 => true,
        b => return Err(format!("switching flag {b}")),
    };
    let count = u32_at(21) as usize;
    if count > TOPOLOGY_NODES_MAX || body.len() < 25 + count {
        return Err("node count does not match the file".into());
    }
    let states = body[25..25 + count]
        .iter()
        .map(|&c| {
            STATES
                .get(usize::from(c))
                .copied()
                .ok_or(format!("unknown state {c}"))
        })
        .collect::<Result<_, _>>()?;
    let mut rest = &body[25 + count..];
    let (folds_active, folds) = match format {
        1 => (0, Vec::new()),
        _ => decode_folds(&mut rest)?,
    };
    let flushes = match format {
        1 | 2 => Vec::new(),
        _ => decode_flushes(&mut rest)?,
    };
    if !rest.is_empty() {
        return Err("the ring does not match the file's length".into());
    }
    Ok(Topology {
        version,
        states,
        switching,
        folds,
        folds_active,
        flushes,
    })
}

/// The next u32 of `rest`, taken off it.
fn u32_next(rest: &mut &[u8], what: &str) -> Result<u32, String> {
    let (head, tail) = rest
        .split_first_chunk::<4>()
        .ok_or(format!("{what} cut short"))?;
    *rest = tail;
    Ok(u32::from_le_bytes(*head))
}

/// The databases' flush generations at the end of a ring file (format 3).
fn decode_flushes(rest: &mut &[u8]) -> Result<Vec<u32>, String> {
    let n = u32_next(rest, "flush generations")? as usize;
    if n > usize::from(crate::base::keyspace::DATABASES) {
        return Err(format!("{n} databases"));
    }
    (0..n)
        .map(|_| u32_next(rest, "flush generations"))
        .collect()
}

/// The fold generations after the states of a ring file (formats 2, 3).
fn decode_folds(rest: &mut &[u8]) -> Result<(u32, Vec<Vec<u64>>), String> {
    let active = u32_next(rest, "fold generations")?;
    let generations = u32_next(rest, "fold generations")? as usize;
    let mut folds = Vec::new();
    let mut total = 0usize;
    for _ in 0..generations {
        let n = u32_next(rest, "fold generations")? as usize;
        total += n;
        if total > FOLD_IDS_MAX || rest.len() < n * 8 {
            return Err("fold generations do not match the file".into());
        }
        let (ids, tail) = rest.split_at(n * 8);
        folds.push(
            ids.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        );
        *rest = tail;
    }
    if active as usize > folds.len() {
        return Err("fold generations do not match the file".into());
    }
    Ok((active, folds))
}

/// The ring stored in `data_dir`, if one is.
pub(crate) fn load(data_dir: &Path) -> Result<Option<Topology>> {
    let path = path(data_dir);
    let Some(bytes) = read_small(&path)? else {
        return Ok(None);
    };
    match decode(&bytes) {
        Ok(t) => Ok(Some(t)),
        Err(why) => bail!(
            "{} is damaged ({why}); the node cannot know its ring",
            path.display()
        ),
    }
}

/// Stores `t` in `data_dir`, durably.
pub(crate) fn save(data_dir: &Path, t: &Topology) -> Result<()> {
    let path = path(data_dir);
    replace(&path, &encode(t)).with_context(|| format!("store the ring in {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_ring_round_trips_and_damage_is_refused() {
        let t = Topology {
            version: 7,
            states: STATES.to_vec(),
            switching: true,
            folds: vec![vec![3, u64::MAX], vec![], vec![9]],
            folds_active: 2,
            flushes: vec![0, 4, u32::MAX],
        };
        let bytes = encode(&t);
        assert_eq!(decode(&bytes), Ok(t));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "flipped byte {i}");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(b"").is_err());
    }

    #[test]
    fn a_ring_of_format_1_reads_with_no_fold_generations() {
        let mut v1 = MAGIC.to_vec();
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&5u64.to_le_bytes());
        v1.push(0);
        v1.extend_from_slice(&2u32.to_le_bytes());
        v1.extend_from_slice(&[2, 0]);
        let crc = crc32fast::hash(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let t = decode(&v1).unwrap();
        assert_eq!((t.version, t.states.len()), (5, 2));
        assert_eq!((t.folds.len(), t.folds_active), (0, 0));
    }

    #[test]
    fn a_ring_of_format_2_reads_with_no_database_flushed() {
        let t = Topology {
            folds: vec![vec![3]],
            folds_active: 1,
            ..Topology::seed(&[false, true])
        };
        let v3 = encode(&t);
        // Format 2: no flush generations.
        let mut v2 = v3[..v3.len() - 8].to_vec();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32fast::hash(&v2);
        v2.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&v2), Ok(t));
    }

    #[test]
    fn a_stored_ring_is_loaded_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        let t = Topology::seed(&[false, false, true]);
        save(dir.path(), &t).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(t));
        tally_world::fs::write(path(dir.path()), b"TALLYRNGxxxxxxxxxxxxxxxxxxxxxxxx").unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
    }
}
