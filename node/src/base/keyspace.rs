//! Keyspaces: Redis' sixteen databases (`SELECT 0..15`), as prefixes of
//! the stored partition.
//!
//! A keyspace is a database number and a generation (which a flush of the
//! database will move on; it is 0 until then). Database 0 at generation 0
//! stores a client's partition as it is, so data written before keyspaces
//! existed is database 0's. Every other keyspace puts [`PREFIX_BYTES`]
//! before the partition: [`MARK`], the database, the generation (u32,
//! big-endian). Client partitions may not begin with [`MARK`], so no
//! client key of one keyspace is ever a key of another; the engine's
//! stored partitions are a few bytes longer than a client's for that
//! (`STORED_PARTITION_BYTES_MAX`).
//!
//! Keys sort bytewise, so a keyspace's keys are contiguous in the engine's
//! order: database 0's (generation 0) are every key before the first
//! [`MARK`], the others' every key that begins with their prefix. A scan
//! of one keyspace starts at its prefix and ends at its first key that is
//! not the keyspace's (see `scan`).

use std::borrow::Cow;

use tally_engine::PARTITION_BYTES_MAX;
use tally_net::wire::{ClientOp, ErrorKind, WireError, WireKey};

/// How many databases there are (`SELECT 0` to `SELECT 15`).
pub(crate) use tally_net::wire::DATABASES;
/// The first byte of every prefixed partition, which client partitions may
/// not begin with.
pub(crate) const MARK: u8 = 0xFF;
/// Bytes of a keyspace's prefix: the mark, the database, the generation.
pub(crate) const PREFIX_BYTES: usize = 6;

const _: () =
    assert!(PARTITION_BYTES_MAX + PREFIX_BYTES <= tally_engine::STORED_PARTITION_BYTES_MAX);

/// One keyspace: a database at a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Keyspace {
    /// The database, below [`DATABASES`].
    pub(crate) db: u8,
    /// How many times the database was flushed.
    pub(crate) generation: u32,
}

/// Why a client's partition has no place in a keyspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Longer than `PARTITION_BYTES_MAX`.
    TooLong(usize),
    /// It begins with [`MARK`].
    Reserved,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::TooLong(len) => write!(
                f,
                "partition key is {len} bytes; the limit is {PARTITION_BYTES_MAX}"
            ),
            Refused::Reserved => write!(f, "keys beginning with the byte 0xff are reserved"),
        }
    }
}

impl From<Refused> for WireError {
    fn from(r: Refused) -> WireError {
        WireError::not_applied(ErrorKind::Invalid, r.to_string())
    }
}

impl Keyspace {
    /// Database 0 at generation 0: the native protocol's, and the one a
    /// Redis connection starts in.
    pub(crate) const DEFAULT: Keyspace = Keyspace {
        db: 0,
        generation: 0,
    };

    /// The bytes put before a client's partition (none for the default).
    pub(crate) fn prefix(self) -> Vec<u8> {
        if self == Keyspace::DEFAULT {
            return Vec::new();
        }
        self.prefix_bytes()
    }

    /// [`MARK`], the database and the generation: the prefix every
    /// keyspace but the default stores its partitions under.
    fn prefix_bytes(self) -> Vec<u8> {
        let mut p = Vec::with_capacity(PREFIX_BYTES);
        p.push(MARK);
        p.push(self.db);
        p.extend_from_slice(&self.generation.to_be_bytes());
        p
    }

    /// Checks a client's partition for this keyspace.
    pub(crate) fn check(partition: &[u8]) -> Result<(), Refused> {
        if partition.len() > PARTITION_BYTES_MAX {
            return Err(Refused::TooLong(partition.len()));
        }
        if partition.first() == Some(&MARK) {
            return Err(Refused::Reserved);
        }
        Ok(())
    }

    /// The stored partition of a client's.
    pub(crate) fn stored(self, partition: &[u8]) -> Result<Vec<u8>, Refused> {
        Keyspace::check(partition)?;
        let mut stored = self.prefix();
        stored.extend_from_slice(partition);
        Ok(stored)
    }

    /// The stored partition of a client's, borrowed in the default
    /// keyspace (which stores it as it is), so the hot path copies nothing
    /// there.
    pub(crate) fn place(self, partition: &[u8]) -> Result<Cow<'_, [u8]>, Refused> {
        if self == Keyspace::DEFAULT {
            Keyspace::check(partition)?;
            return Ok(Cow::Borrowed(partition));
        }
        self.stored(partition).map(Cow::Owned)
    }

    /// The keyspace a stored partition is of.
    pub(crate) fn of(stored: &[u8]) -> Option<Keyspace> {
        match stored {
            [MARK, db, g0, g1, g2, g3, ..] if *db < DATABASES => Some(Keyspace {
                db: *db,
                generation: u32::from_be_bytes([*g0, *g1, *g2, *g3]),
            }),
            [MARK, ..] => None,
            _ => Some(Keyspace::DEFAULT),
        }
    }

    /// The client's partition of a stored one, if it is this keyspace's.
    pub(crate) fn client(self, stored: &[u8]) -> Option<&[u8]> {
        if self == Keyspace::DEFAULT {
            return (stored.first() != Some(&MARK)).then_some(stored);
        }
        stored.strip_prefix(self.prefix().as_slice())
    }
}

/// The partitions of database `db`'s generations other than `current`,
/// as ranges `[from, to)` (`to` `None`: to the end), in the engine's
/// order: each prefix of a generation before `current` (and, for database
/// 0 flushed at least once, every unprefixed partition), and each after
/// it (only a ring put back by a restore leaves such cells). What a flush
/// of `db` to `current` leaves for collection lies within them.
pub(crate) fn other_generations(db: u8, current: u32) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let at = |g: u32| Keyspace { db, generation: g }.prefix_bytes();
    let mut out = Vec::new();
    if current > 0 {
        if db == 0 {
            out.push((Vec::new(), Some(vec![MARK])));
        }
        out.push((vec![MARK, db], Some(at(current))));
    }
    if let Some(next) = current.checked_add(1) {
        out.push((at(next), Some(vec![MARK, db + 1])));
    }
    out
}

/// A native client's operation with the partition it names as stored in
/// `space` (the native protocol addresses database 0), checked.
pub(crate) fn op_in(mut op: ClientOp, space: Keyspace) -> Result<ClientOp, Refused> {
    let partition: &mut Vec<u8> = match &mut op {
        ClientOp::Add { key, .. }
        | ClientOp::AddOnce { key, .. }
        | ClientOp::Get { key, .. }
        | ClientOp::GetCell { key, .. }
        | ClientOp::Reset { key, .. }
        | ClientOp::Change { key, .. } => {
            Keyspace::check(key.partition())?;
            if space != Keyspace::DEFAULT {
                *key = WireKey::new(&space.stored(key.partition())?, key.column());
            }
            return Ok(op);
        }
        ClientOp::GetRow { partition, .. }
        | ClientOp::UniqueAdd { partition, .. }
        | ClientOp::UniqueCount { partition, .. }
        | ClientOp::UniqueContains { partition, .. }
        | ClientOp::GetString { key: partition }
        | ClientOp::SetString { key: partition, .. } => partition,
        ClientOp::Ping
        | ClientOp::Status
        | ClientOp::Repair { .. }
        | ClientOp::Decommission { .. }
        | ClientOp::RemoveNode { .. }
        | ClientOp::Cleanup
        | ClientOp::Fold
        | ClientOp::Scan { .. }
        | ClientOp::Snapshot(_)
        | ClientOp::Versions
        | ClientOp::Hello { .. }
        | ClientOp::Auth { .. }
        | ClientOp::Serial { .. } => return Ok(op),
    };
    *partition = space.stored(partition)?;
    Ok(op)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use tally_engine::Key;

    fn space(db: u8, generation: u32) -> Keyspace {
        Keyspace { db, generation }
    }

    #[test]
    fn the_default_keyspace_stores_partitions_as_they_are() {
        let d = Keyspace::DEFAULT;
        assert_eq!(d.stored(b"likes").unwrap(), b"likes");
        assert_eq!(d.client(b"likes"), Some(&b"likes"[..]));
    }

    #[test]
    fn other_keyspaces_prefix_the_database_and_generation() {
        let s = space(3, 258);
        let stored = s.stored(b"k").unwrap();
        assert_eq!(stored, [MARK, 3, 0, 0, 1, 2, b'k']);
        assert_eq!(s.client(&stored), Some(&b"k"[..]));
        assert_eq!(space(3, 0).client(&stored), None, "another generation");
        assert_eq!(space(4, 258).client(&stored), None, "another database");
        assert_eq!(Keyspace::DEFAULT.client(&stored), None);
        assert_eq!(Keyspace::of(&stored), Some(s));
        assert_eq!(Keyspace::of(b"k"), Some(Keyspace::DEFAULT));
        assert_eq!(
            Keyspace::of(&[MARK, 16, 0, 0, 0, 0]),
            None,
            "no such database"
        );
        assert_eq!(Keyspace::of(&[MARK, 1, 0]), None, "cut short");
        assert_eq!(space(0, 1).stored(b"").unwrap(), [MARK, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn placing_borrows_in_the_default_keyspace_only() {
        assert!(matches!(
            Keyspace::DEFAULT.place(b"k"),
            Ok(Cow::Borrowed(b"k"))
        ));
        for s in [space(3, 0), space(0, 1)] {
            assert_eq!(s.place(b"k").unwrap().as_ref(), s.stored(b"k").unwrap());
        }
        assert_eq!(Keyspace::DEFAULT.place(&[MARK]), Err(Refused::Reserved));
        assert_eq!(space(3, 0).place(&[MARK]), Err(Refused::Reserved));
    }

    #[test]
    fn client_partitions_are_bounded_and_may_not_begin_with_the_mark() {
        let long = vec![b'a'; PARTITION_BYTES_MAX];
        assert!(space(15, u32::MAX).stored(&long).is_ok());
        let longer = vec![b'a'; PARTITION_BYTES_MAX + 1];
        assert_eq!(
            Keyspace::DEFAULT.stored(&longer),
            Err(Refused::TooLong(PARTITION_BYTES_MAX + 1))
        );
        assert_eq!(space(2, 0).stored(&[MARK, 1]), Err(Refused::Reserved));
        assert!(Keyspace::DEFAULT.stored(&[0xFE, MARK]).is_ok());
    }

    #[test]
    fn native_operations_name_partitions_of_database_0_at_its_generation() {
        let add = |p: &[u8]| ClientOp::Add {
            key: WireKey::new(p, b"c"),
            delta: 1,
            cl: tally_net::wire::Consistency::One,
        };
        let key_of = |op: ClientOp| match op {
            ClientOp::Add { key, .. } => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            key_of(op_in(add(b"k"), Keyspace::DEFAULT).unwrap()),
            WireKey::new(b"k", b"c")
        );
        let flushed = space(0, 2);
        let stored = key_of(op_in(add(b"k"), flushed).unwrap());
        assert_eq!(stored, WireKey::new(&flushed.stored(b"k").unwrap(), b"c"));
        assert_eq!(
            op_in(add(&[MARK]), Keyspace::DEFAULT).unwrap_err(),
            Refused::Reserved
        );
        let row = ClientOp::GetRow {
            partition: b"p".to_vec(),
            cl: tally_net::wire::Consistency::One,
        };
        match op_in(row, flushed).unwrap() {
            ClientOp::GetRow { partition, .. } => {
                assert_eq!(partition, flushed.stored(b"p").unwrap())
            }
            other => panic!("{other:?}"),
        }
    }

    /// Every partition of another generation of the database, and none of
    /// the current one or of another database, lies in its ranges.
    #[test]
    fn other_generations_cover_exactly_the_flushed_keyspaces_of_a_database() {
        let inside = |p: &[u8], ranges: &[(Vec<u8>, Option<Vec<u8>>)]| {
            ranges.iter().any(|(from, to)| {
                p >= from.as_slice() && to.as_ref().is_none_or(|to| p < to.as_slice())
            })
        };
        for (db, current) in [
            (0u8, 0u32),
            (0, 1),
            (0, 300),
            (3, 0),
            (3, 2),
            (15, 7),
            (4, u32::MAX),
        ] {
            let ranges = other_generations(db, current);
            for other_db in [0u8, 2, 3, 4, 15] {
                for g in [0u32, 1, 2, 7, 299, 300, 301, u32::MAX] {
                    for user in [&b""[..], b"k", &[0xFE, 0xFF]] {
                        let p = space(other_db, g).stored(user).unwrap();
                        let flushed = other_db == db && g != current;
                        assert_eq!(
                            inside(&p, &ranges),
                            flushed,
                            "db {db} at {current}: {p:?} of db {other_db} generation {g}"
                        );
                    }
                }
            }
        }
    }

    /// Each keyspace's keys are one run of the engine's order, which
    /// begins at its prefix: a scan from there to the first key that is not
    /// the keyspace's sees all of them.
    #[test]
    fn a_keyspace_is_contiguous_in_key_order() {
        let spaces = [
            space(0, 0),
            space(0, 1),
            space(1, 0),
            space(3, 7),
            space(15, 0),
        ];
        let users: [&[u8]; 5] = [b"", b"a", b"zz", &[0xFE; 3], &[0x00]];
        let mut keys: Vec<(Key, Keyspace)> = Vec::new();
        for s in spaces {
            for u in users {
                keys.push((Key::new(&s.stored(u).unwrap(), b"c").unwrap(), s));
            }
        }
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        for s in spaces {
            let start = Key::new(&s.prefix(), b"").unwrap();
            let from: Vec<&(Key, Keyspace)> = keys.iter().filter(|(k, _)| *k >= start).collect();
            let run = from
                .iter()
                .take_while(|(k, _)| s.client(k.partition()).is_some())
                .count();
            assert_eq!(run, users.len(), "{s:?}");
            assert!(from[..run].iter().all(|(_, o)| *o == s), "{s:?}");
        }
    }
}
