//! The ring, durably: `<data_dir>/ring`.
//!
//! # Format (version 1)
//!
//! ```text
//! magic "TALLYRNG" | format u32 LE | ring version u64 LE | switching u8
//!     | count u32 LE | state u8 * count | crc32 u32 LE (of everything before)
//! ```
//!
//! States: 0 absent, 1 joining, 2 normal, 3 leaving, 4 removing, 5 left.
//! Written to a new file, fsync'd and renamed over the old one, the
//! directory fsync'd: a ring is stored before it is used. A missing file
//! means the node has not stored one yet (it starts from the seed); a
//! damaged one stops the node with the file's name, as a ring guessed at
//! would place data wrongly.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use tally_net::wire::{NodeState, TOPOLOGY_NODES_MAX};

use super::Topology;
use crate::hints::file::{read_small, replace};

const MAGIC: &[u8; 8] = b"TALLYRNG";
const FORMAT: u32 = 1;

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
    if u32_at(8) != FORMAT {
        return Err(format!("unsupported format {}", u32_at(8)));
    }
    let version = u64::from_le_bytes(body[12..20].try_into().expect("8 bytes"));
    let switching = match body[20] {
        0 => false,
        1 => true,
        b => return Err(format!("switching flag {b}")),
    };
    let count = u32_at(21) as usize;
    if count > TOPOLOGY_NODES_MAX || body.len() != 25 + count {
        return Err("node count does not match the file".into());
    }
    let states = body[25..]
        .iter()
        .map(|&c| {
            STATES
                .get(usize::from(c))
                .copied()
                .ok_or(format!("unknown state {c}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Topology {
        version,
        states,
        switching,
    })
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
    fn a_stored_ring_is_loaded_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        let t = Topology::seed(&[false, false, true]);
        save(dir.path(), &t).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(t));
        std::fs::write(path(dir.path()), b"TALLYRNGxxxxxxxxxxxxxxxxxxxxxxxx").unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
    }
}
