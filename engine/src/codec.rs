//! Byte-level encoding shared by the commit log and SSTables.
//!
//! Integers are LEB128 varints (signed values zigzag-encoded first); a key is
//! `varint plen | partition | varint clen | column`; a cell is
//! `varint n | varint (nshards | EXTENDED) | [header] | shard*`, where a shard is
//! `id | varint clock | zigzag varint value` and `id` is a fixed `u64` (commit
//! log) or a varint index into the table's counter-id dictionary (SSTable).
//! The header (`varint origin | zigzag base | varint at_ms | varint stamp ms |
//! varint stamp id`) is there only when the `EXTENDED` bit is set: an epoch
//! that was SET or expires. A `varint fold` (the fold generation its base
//! includes, see `cell::fold`) follows when the `FOLDED` bit is set, and
//! then the `zigzag base` if the header is not there. A list key's cell
//! has the `LISTED` bit set, and its list follows (`varint count |
//! (varint len | bytes)*`, see `cell::list`) before the shards. A cell
//! with an agreed part (a partition's Paxos state, see `cell::agreed`) has
//! the `AGREED` bit set, and that part follows the list: `ballot promised |
//! u8 has-accepted | [ballot | registers] | ballot | registers`
//! (committed), where a ballot is `varint ms | varint seq | u64 proposer`
//! and registers are `varint count | (varint clen | column | varint vlen |
//! value | varint at_ms)*`. A plain counter's cell is written as before
//! either existed, so files of older versions read the same. Builds before
//! agreement refuse a cell with the `AGREED` bit as a shard count over the
//! limit: none is written until the cluster enables agreement, after which
//! they cannot join.
//!
//! Decoding never trusts a length: each one is checked against its limit and
//! against the bytes that remain before anything is allocated.

use std::sync::Arc;

use tally_model::paxos::{
    Accepted, Acceptor, Ballot, REGISTERS_BYTES_MAX, Register, Registers, VALUE_BYTES_MAX,
};

use crate::cell::{Cell, Epoch, Expiry, LIST_BYTES_MAX, List, SHARDS_MAX, Shard, Stamp};

/// The bit of a cell's shard count that says a header follows: above any
/// count a cell may hold, so no older file has it set.
const EXTENDED: u64 = 1 << 13;
/// The bit of a cell's shard count that says a fold generation follows.
const FOLDED: u64 = 1 << 14;
/// The bit of a cell's shard count that says a list follows.
const LISTED: u64 = 1 << 15;
/// The bit of a cell's shard count that says an agreed part follows.
const AGREED: u64 = 1 << 16;
const _: () = assert!(SHARDS_MAX < EXTENDED as usize);
use crate::key::{self, Key};

/// Which optional parts of a cell follow its epoch.
#[derive(Clone, Copy)]
struct Parts {
    listed: bool,
    agreed: bool,
}

/// Why a byte string failed to decode (the caller adds file and offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

/// Appends `v` as a LEB128 varint.
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends `v` zigzag-encoded as a varint.
pub fn put_zigzag(buf: &mut Vec<u8>, v: i64) {
    put_varint(buf, ((v << 1) ^ (v >> 63)) as u64);
}

/// Appends a key.
pub fn put_key(buf: &mut Vec<u8>, key: &Key) {
    put_varint(buf, key.partition().len() as u64);
    buf.extend_from_slice(key.partition());
    put_varint(buf, key.column().len() as u64);
    buf.extend_from_slice(key.column());
}

/// Appends a cell, writing each shard's counter id with `put_id`.
pub fn put_cell(buf: &mut Vec<u8>, cell: &Cell, put_id: impl FnMut(&mut Vec<u8>, u64)) {
    let agreed = cell.agreed().map(|a| &**a);
    put_cell_parts(
        buf,
        (cell.epoch(), cell.shards()),
        cell.list(),
        agreed,
        put_id,
    );
}

/// Appends the cell `{epoch, shards, list, agreed}`.
pub fn put_cell_parts(
    buf: &mut Vec<u8>,
    (epoch, shards): (Epoch, &[Shard]),
    list: Option<&List>,
    agreed: Option<&Acceptor>,
    mut put_id: impl FnMut(&mut Vec<u8>, u64),
) {
    put_varint(buf, epoch.n);
    let folded = epoch.fold != 0;
    // A folded cell's base goes with its generation, unless the header
    // is there anyway (a SET or a deadline).
    let plain = Epoch {
        fold: 0,
        base: if folded { 0 } else { epoch.base },
        ..epoch
    };
    let extended = plain != Epoch::at(epoch.n);
    put_varint(
        buf,
        shards.len() as u64
            | if extended { EXTENDED } else { 0 }
            | if folded { FOLDED } else { 0 }
            | if list.is_some() { LISTED } else { 0 }
            | if agreed.is_some() { AGREED } else { 0 },
    );
    if extended {
        put_varint(buf, epoch.origin);
        put_zigzag(buf, epoch.base);
        put_varint(buf, epoch.expiry.at_ms);
        put_varint(buf, epoch.expiry.stamp.ms);
        put_varint(buf, epoch.expiry.stamp.id);
    }
    if folded {
        put_varint(buf, u64::from(epoch.fold));
        if !extended {
            put_zigzag(buf, epoch.base);
        }
    }
    if let Some(list) = list {
        put_varint(buf, list.len() as u64);
        for e in list.elements() {
            put_varint(buf, e.len() as u64);
            buf.extend_from_slice(e);
        }
    }
    if let Some(a) = agreed {
        put_agreed(buf, a);
    }
    for s in shards {
        put_id(buf, s.counter_id);
        put_varint(buf, s.clock);
        put_zigzag(buf, s.value);
    }
}

fn put_ballot(buf: &mut Vec<u8>, b: Ballot) {
    put_varint(buf, b.ms);
    put_varint(buf, u64::from(b.seq));
    buf.extend_from_slice(&b.proposer.to_le_bytes());
}

fn put_registers(buf: &mut Vec<u8>, r: &Registers) {
    put_varint(buf, r.0.len() as u64);
    for x in &r.0 {
        put_varint(buf, x.column.len() as u64);
        buf.extend_from_slice(&x.column);
        put_varint(buf, x.value.len() as u64);
        buf.extend_from_slice(&x.value);
        put_varint(buf, x.at_ms);
    }
}

/// Appends an agreed part (see the module doc).
fn put_agreed(buf: &mut Vec<u8>, a: &Acceptor) {
    put_ballot(buf, a.promised);
    match &a.accepted {
        Some(x) => {
            buf.push(1);
            put_ballot(buf, x.ballot);
            put_registers(buf, &x.value);
        }
        None => buf.push(0),
    }
    put_ballot(buf, a.committed.ballot);
    put_registers(buf, &a.committed.value);
}

/// A bounds-checked reader over a byte slice.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Reads `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError("length runs past the end"));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Reads a little-endian u32.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    /// Reads a little-endian u64.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// Reads a LEB128 varint of at most 10 bytes.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(DecodeError("varint runs past the end"));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(DecodeError("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint longer than 10 bytes"))
    }

    /// Reads a varint that must not exceed `max`.
    pub fn varint_max(&mut self, max: usize, what: &'static str) -> Result<usize, DecodeError> {
        let v = self.varint()?;
        usize::try_from(v)
            .ok()
            .filter(|v| *v <= max)
            .ok_or(DecodeError(what))
    }

    /// Reads a zigzag varint.
    pub fn zigzag(&mut self) -> Result<i64, DecodeError> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// Reads a key's raw parts without copying.
    pub fn key_parts(&mut self) -> Result<(&'a [u8], &'a [u8]), DecodeError> {
        let plen = self.varint_max(
            key::STORED_PARTITION_BYTES_MAX,
            "partition length over the limit",
        )?;
        let partition = self.bytes(plen)?;
        let clen = self.varint_max(key::STORED_COLUMN_BYTES_MAX, "column length over the limit")?;
        let column = self.bytes(clen)?;
        Ok((partition, column))
    }

    /// Reads a key.
    pub fn key(&mut self) -> Result<Key, DecodeError> {
        let (p, c) = self.key_parts()?;
        Key::new(p, c).map_err(|_| DecodeError("key over the size limits"))
    }

    /// Skips a cell whose shard ids are varints (an SSTable entry).
    pub fn skip_cell(&mut self) -> Result<(), DecodeError> {
        let (_, n, parts) = self.epoch()?;
        if parts.listed {
            self.list()?;
        }
        if parts.agreed {
            self.agreed()?;
        }
        for _ in 0..n * 3 {
            self.varint()?;
        }
        Ok(())
    }

    /// Reads a cell, decoding each shard's id with `get_id`.
    pub fn cell(
        &mut self,
        get_id: impl FnMut(&mut Self) -> Result<u64, DecodeError>,
    ) -> Result<Cell, DecodeError> {
        let mut shards = Vec::new();
        let (epoch, list, agreed) = self.cell_into(get_id, &mut shards)?;
        Ok(Cell::from_parts(epoch, shards)
            .with_list(list)
            .with_agreed(agreed))
    }

    /// Reads a cell's shards into `shards` (cleared first, in stored order,
    /// unchecked for order or repeats) and returns its epoch, list and
    /// agreed part.
    #[allow(clippy::type_complexity, reason = "a cell's parts, named at once")]
    pub fn cell_into(
        &mut self,
        mut get_id: impl FnMut(&mut Self) -> Result<u64, DecodeError>,
        shards: &mut Vec<Shard>,
    ) -> Result<(Epoch, Option<List>, Option<Arc<Acceptor>>), DecodeError> {
        shards.clear();
        let (epoch, n, parts) = self.epoch()?;
        let list = if parts.listed {
            Some(self.list()?)
        } else {
            None
        };
        let agreed = if parts.agreed {
            Some(Arc::new(self.agreed()?))
        } else {
            None
        };
        // Each shard takes at least three bytes: refuse counts the input cannot hold.
        if n > self.remaining() / 3 {
            return Err(DecodeError("shard count larger than the record"));
        }
        shards.reserve(n);
        for _ in 0..n {
            let counter_id = get_id(self)?;
            let clock = self.varint()?;
            let value = self.zigzag()?;
            shards.push(Shard {
                counter_id,
                clock,
                value,
            });
        }
        Ok((epoch, list, agreed))
    }

    /// Reads a list (see `cell::list`), within its limit.
    fn list(&mut self) -> Result<List, DecodeError> {
        // Each element takes at least one byte.
        let count = self.varint_max(self.remaining().min(LIST_BYTES_MAX), "list over the limit")?;
        let mut elements = Vec::with_capacity(count);
        for _ in 0..count {
            let len = self.varint_max(LIST_BYTES_MAX, "list element over the limit")?;
            elements.push(self.bytes(len)?.to_vec());
        }
        match List::new(elements) {
            Ok(Some(list)) => Ok(list),
            Ok(None) => Err(DecodeError("an empty list")),
            Err(_) => Err(DecodeError("list over the limit")),
        }
    }

    fn ballot(&mut self) -> Result<Ballot, DecodeError> {
        Ok(Ballot {
            ms: self.varint()?,
            seq: u32::try_from(self.varint()?).map_err(|_| DecodeError("ballot over the limit"))?,
            proposer: self.u64()?,
        })
    }

    fn registers(&mut self) -> Result<Registers, DecodeError> {
        // Each register takes at least three bytes.
        let count = self.varint_max(self.remaining() / 3, "registers larger than the record")?;
        let mut registers = Vec::with_capacity(count);
        for _ in 0..count {
            let clen =
                self.varint_max(key::STORED_COLUMN_BYTES_MAX, "column length over the limit")?;
            let column = self.bytes(clen)?.to_vec();
            let vlen = self.varint_max(VALUE_BYTES_MAX, "register over the limit")?;
            let value = self.bytes(vlen)?.to_vec();
            let at_ms = self.varint()?;
            registers.push(Register {
                column,
                value,
                at_ms,
            });
        }
        let registers = Registers(registers);
        if registers.size() > REGISTERS_BYTES_MAX
            || registers.0.windows(2).any(|w| w[0].column >= w[1].column)
        {
            return Err(DecodeError("registers over the limit or out of order"));
        }
        Ok(registers)
    }

    /// Reads an agreed part (see the module doc), checked.
    fn agreed(&mut self) -> Result<Acceptor, DecodeError> {
        let promised = self.ballot()?;
        let accepted = match self.bytes(1)?[0] {
            0 => None,
            1 => Some(Accepted {
                ballot: self.ballot()?,
                value: self.registers()?,
            }),
            _ => return Err(DecodeError("bad agreed part")),
        };
        let committed = Accepted {
            ballot: self.ballot()?,
            value: self.registers()?,
        };
        let a = Acceptor {
            promised,
            accepted,
            committed,
        };
        a.check()
            .map_err(|_| DecodeError("agreed part out of order"))?;
        Ok(a)
    }

    /// Reads a cell's epoch, shard count and which parts follow.
    fn epoch(&mut self) -> Result<(Epoch, usize, Parts), DecodeError> {
        let n = self.varint()?;
        let count = self.varint()?;
        let shards = usize::try_from(count & !(EXTENDED | FOLDED | LISTED | AGREED))
            .ok()
            .filter(|c| *c <= SHARDS_MAX)
            .ok_or(DecodeError("shard count over the limit"))?;
        let mut epoch = Epoch::at(n);
        if count & EXTENDED != 0 {
            epoch.origin = self.varint()?;
            epoch.base = self.zigzag()?;
            epoch.expiry = Expiry {
                at_ms: self.varint()?,
                stamp: Stamp {
                    ms: self.varint()?,
                    id: self.varint()?,
                },
            };
        }
        if count & FOLDED != 0 {
            epoch.fold = u32::try_from(self.varint()?)
                .map_err(|_| DecodeError("fold generation over the limit"))?;
            if count & EXTENDED == 0 {
                epoch.base = self.zigzag()?;
            }
        }
        let parts = Parts {
            listed: count & LISTED != 0,
            agreed: count & AGREED != 0,
        };
        Ok((epoch, shards, parts))
    }
}

/// A stable 64-bit hash for on-disk structures (bloom filters): FNV-1a
/// followed by a splitmix64 finalizer. Stable across Rust releases, unlike
/// `std`'s hasher.
pub fn hash64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separate the parts so ("a","b") and ("ab","") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(v: u64, s: i64) {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            put_zigzag(&mut buf, s);
            let mut c = Cursor::new(&buf);
            prop_assert_eq!(c.varint().unwrap(), v);
            prop_assert_eq!(c.zigzag().unwrap(), s);
            prop_assert_eq!(c.remaining(), 0);
        }

        #[test]
        fn cells_round_trip(
            n: u64,
            header in proptest::option::of((any::<u64>(), any::<i64>(), any::<u64>(), any::<u64>(), any::<u64>())),
            fold in proptest::option::of((any::<u32>(), any::<i64>())),
            shards in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<i64>()), 0..8),
            list in proptest::option::of(proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..8)),
        ) {
            let mut epoch = Epoch::at(n);
            if let Some((origin, base, at_ms, ms, id)) = header {
                epoch = Epoch { n, origin, base, expiry: Expiry { at_ms, stamp: Stamp { ms, id } }, fold: 0 };
            }
            if let Some((fold, base)) = fold {
                epoch.fold = fold;
                if header.is_none() {
                    epoch.base = base;
                }
            }
            let list = list.and_then(|l| List::new(l).unwrap());
            let cell = Cell::from_parts(epoch, shards.into_iter().map(|(counter_id, clock, value)| Shard { counter_id, clock, value })).with_list(list);
            let key = Key::new(b"part", b"col").unwrap();
            let mut buf = Vec::new();
            put_key(&mut buf, &key);
            put_cell(&mut buf, &cell, |b, id| b.extend_from_slice(&id.to_le_bytes()));
            let mut c = Cursor::new(&buf);
            prop_assert_eq!(c.key().unwrap(), key);
            prop_assert_eq!(c.cell(|c| c.u64()).unwrap(), cell);
            prop_assert_eq!(c.remaining(), 0);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut c = Cursor::new(&bytes);
            let _ = c.key().and_then(|_| c.cell(|c| c.varint()));
        }
    }

    #[test]
    fn a_plain_cell_is_written_as_before_epochs_had_a_header() {
        // `varint epoch | varint nshards | (u64 id | varint clock | zigzag value)*`
        let old = [3, 1, 9, 0, 0, 0, 0, 0, 0, 0, 5, 4];
        let cell = Cursor::new(&old).cell(|c| c.u64()).unwrap();
        let shard = Shard {
            counter_id: 9,
            clock: 5,
            value: 2,
        };
        assert_eq!(cell, Cell::from_parts(3, [shard]));
        let mut buf = Vec::new();
        put_cell(&mut buf, &cell, |b, id| {
            b.extend_from_slice(&id.to_le_bytes())
        });
        assert_eq!(buf, old);
    }

    #[test]
    fn refuses_lists_over_the_limit_and_empty_ones() {
        let cell_with = |count: u64, element: &[u8]| {
            let mut buf = Vec::new();
            put_varint(&mut buf, 0);
            put_varint(&mut buf, LISTED);
            put_varint(&mut buf, count);
            for _ in 0..count {
                put_varint(&mut buf, element.len() as u64);
                buf.extend_from_slice(element);
            }
            buf
        };
        assert!(
            Cursor::new(&cell_with(1, b"a"))
                .cell(|c| c.varint())
                .is_ok()
        );
        let empty = cell_with(0, b"");
        assert_eq!(
            Cursor::new(&empty).cell(|c| c.varint()),
            Err(DecodeError("an empty list"))
        );
        let over = cell_with(30, &[7; 1000]);
        assert_eq!(
            Cursor::new(&over).cell(|c| c.varint()),
            Err(DecodeError("list over the limit"))
        );
        let mut lying = Vec::new();
        put_varint(&mut lying, 0);
        put_varint(&mut lying, LISTED);
        put_varint(&mut lying, 1 << 40);
        assert!(Cursor::new(&lying).cell(|c| c.varint()).is_err());
    }

    #[test]
    fn refuses_huge_shard_counts_before_allocating() {
        let mut buf = Vec::new();
        put_varint(&mut buf, 0);
        put_varint(&mut buf, 4000);
        assert!(Cursor::new(&buf).cell(|c| c.varint()).is_err());
    }

    #[test]
    fn an_agreed_part_round_trips_and_every_cut_of_it_is_refused() {
        let ballot = |ms| Ballot {
            ms,
            seq: 3,
            proposer: u64::MAX,
        };
        let registers = |v: &str| {
            Registers(vec![
                Register {
                    column: Vec::new(),
                    value: v.as_bytes().to_vec(),
                    at_ms: 99,
                },
                Register {
                    column: b"f".to_vec(),
                    value: Vec::new(),
                    at_ms: 0,
                },
            ])
        };
        let agreed = Acceptor {
            promised: ballot(9),
            accepted: Some(Accepted {
                ballot: ballot(8),
                value: registers("new"),
            }),
            committed: Accepted {
                ballot: ballot(4),
                value: registers("old"),
            },
        };
        let cell = Cell::from_parts(
            Epoch::at(2),
            [Shard {
                counter_id: 5,
                clock: 1,
                value: 3,
            }],
        )
        .with_agreed(Some(Arc::new(agreed)));
        let mut buf = Vec::new();
        put_cell(&mut buf, &cell, put_varint);
        let mut c = Cursor::new(&buf);
        assert_eq!(c.cell(|c| c.varint()).unwrap(), cell);
        assert_eq!(c.remaining(), 0);
        let mut c = Cursor::new(&buf);
        c.skip_cell().unwrap();
        assert_eq!(c.remaining(), 0);
        for cut in 0..buf.len() {
            assert!(
                Cursor::new(&buf[..cut]).cell(|c| c.varint()).is_err(),
                "cut at {cut}"
            );
        }
        // Out of order (accepted older than committed) is refused.
        let mut bad = cell.clone();
        let a = bad.agreed_mut();
        a.accepted.as_mut().unwrap().ballot = ballot(1);
        let mut buf = Vec::new();
        put_cell(&mut buf, &bad, put_varint);
        assert!(Cursor::new(&buf).cell(|c| c.varint()).is_err());
    }
}
