//! Counter addresses: `(partition, column)`, both bounded byte strings.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use foldhash::quality::RandomState;
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};

/// Longest partition key a client may use, in bytes.
pub const PARTITION_BYTES_MAX: usize = 1024;
/// Longest partition stored: a client's, behind the few bytes a node may
/// put before it to name its keyspace (Redis' databases).
pub const STORED_PARTITION_BYTES_MAX: usize = PARTITION_BYTES_MAX + 8;
/// Longest column name a client may use, in bytes.
pub const COLUMN_BYTES_MAX: usize = 256;
/// Longest column stored: a client's, or a reserved one, which is a byte
/// longer (a unique counter's member: see `unique`).
pub const STORED_COLUMN_BYTES_MAX: usize = COLUMN_BYTES_MAX + 1;

/// The first byte of every reserved column: client columns may not start
/// with it (unique counters keep their count and members there, see
/// `unique`).
pub const RESERVED: u8 = 0xFF;

/// Whether `column` is reserved (client columns may not start so).
pub fn is_reserved(column: &[u8]) -> bool {
    column.first() == Some(&RESERVED)
}

/// The address of one counter: a partition (which decides placement and
/// groups a "wide row") and a column inside it.
///
/// Both parts live in one buffer: inside the key itself up to
/// [`INLINE_BYTES`] together (no allocation, and a map lookup compares them
/// without following a pointer: most counter names are short), else in one
/// shared allocation, so cloning a key is a copy or a reference-count bump.
/// Keys order by partition, then column, bytewise; that is the order of the
/// memtable, of SSTables and of `get_row`.
///
/// A key carries its hash and its partition's hash, computed once with
/// foldhash under a per-process random seed, and reused by every lock
/// stripe, cache and memtable lookup. The seed keeps collisions from being
/// computed ahead of time; foldhash calls itself only minimally
/// DoS-resistant, a trade made for speed (SipHash cost a sixth of replay).
///
/// # Invariants
/// - `split <= bytes.len()`, partition = `bytes[..split]`, column = `bytes[split..]`.
/// - partition ≤ [`PARTITION_BYTES_MAX`], column ≤ [`COLUMN_BYTES_MAX`].
/// - `hash` and `partition_hash` are the seeded hashes of those parts.
#[derive(Clone)]
pub struct Key {
    hash: u64,
    partition_hash: u64,
    split: u16,
    bytes: Bytes,
}

/// Longest key (partition and column together) held inside the [`Key`]:
/// as much as fits a key in one 64-byte cache line.
pub const INLINE_BYTES: usize = 38;

/// A key's bytes, partition then column.
#[derive(Clone)]
enum Bytes {
    Inline { len: u8, bytes: [u8; INLINE_BYTES] },
    Shared(Arc<[u8]>),
}

const _: () = assert!(std::mem::size_of::<Key>() <= 64);

impl Bytes {
    fn new(partition: &[u8], column: &[u8]) -> Bytes {
        let len = partition.len() + column.len();
        match u8::try_from(len) {
            Ok(short) if len <= INLINE_BYTES => {
                let mut bytes = [0; INLINE_BYTES];
                bytes[..partition.len()].copy_from_slice(partition);
                bytes[partition.len()..len].copy_from_slice(column);
                Bytes::Inline { len: short, bytes }
            }
            // An exact-size iterator: the Arc is allocated once, at its size.
            _ => Bytes::Shared(partition.iter().chain(column).copied().collect()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Bytes::Shared(buf) => buf,
        }
    }
}

/// The per-process seed for key hashes.
fn seed() -> &'static RandomState {
    // Process-wide on purpose: a pure cache; hashes never leave the process.
    static SEED: OnceLock<RandomState> = OnceLock::new();
    SEED.get_or_init(RandomState::default)
}

const _: () = assert!(STORED_PARTITION_BYTES_MAX <= u16::MAX as usize);

impl Key {
    /// A key from its parts, refusing oversized ones.
    pub fn new(partition: &[u8], column: &[u8]) -> Result<Key> {
        check_lengths(partition.len(), column.len())?;
        let bytes = Bytes::new(partition, column);
        let split = u16::try_from(partition.len()).expect("partition length checked above");
        let partition_hash = partition_hash(partition);
        let hash = seed().hash_one((partition_hash, column));
        Ok(Key {
            hash,
            partition_hash,
            split,
            bytes,
        })
    }

    /// A key a client may address: its column within [`COLUMN_BYTES_MAX`]
    /// and not reserved (see `unique`).
    pub fn user(partition: &[u8], column: &[u8]) -> Result<Key> {
        if column.len() > COLUMN_BYTES_MAX {
            return Err(Error::ColumnTooLong {
                len: column.len(),
                max: COLUMN_BYTES_MAX,
            });
        }
        if is_reserved(column) {
            return Err(Error::ReservedColumn);
        }
        Key::new(partition, column)
    }

    /// Seeded hash of the whole key (stable within this process only).
    pub fn hash_u64(&self) -> u64 {
        self.hash
    }

    /// Seeded hash of the partition (stable within this process only).
    pub fn partition_hash(&self) -> u64 {
        self.partition_hash
    }

    /// The partition part.
    pub fn partition(&self) -> &[u8] {
        &self.bytes.as_slice()[..usize::from(self.split)]
    }

    /// The column part (empty for a plain counter).
    pub fn column(&self) -> &[u8] {
        &self.bytes.as_slice()[usize::from(self.split)..]
    }

    /// Bytes held by this key (for memory accounting).
    pub fn len_bytes(&self) -> usize {
        self.bytes.as_slice().len()
    }
}

/// The seeded hash of a partition, as [`Key::partition_hash`] gives it.
pub(crate) fn partition_hash(partition: &[u8]) -> u64 {
    seed().hash_one(partition)
}

/// Checks the size limits of a key's parts.
pub(crate) fn check_lengths(partition: usize, column: usize) -> Result<()> {
    if partition > STORED_PARTITION_BYTES_MAX {
        return Err(Error::PartitionTooLong {
            len: partition,
            max: STORED_PARTITION_BYTES_MAX,
        });
    }
    if column > STORED_COLUMN_BYTES_MAX {
        return Err(Error::ColumnTooLong {
            len: column,
            max: STORED_COLUMN_BYTES_MAX,
        });
    }
    Ok(())
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.split == other.split
            && self.bytes.as_slice() == other.bytes.as_slice()
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.partition()
            .cmp(other.partition())
            .then_with(|| self.column().cmp(other.column()))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            String::from_utf8_lossy(self.partition()),
            String::from_utf8_lossy(self.column())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_partition_then_column() {
        let a = Key::new(b"a", b"zz").unwrap();
        let b = Key::new(b"ab", b"").unwrap();
        let c = Key::new(b"ab", b"a").unwrap();
        assert!(a < b && b < c, "{a:?} {b:?} {c:?}");
        // Concatenation alone would put "a"+"b" == "ab"+"": the split keeps them apart.
        assert_ne!(Key::new(b"a", b"b").unwrap(), Key::new(b"ab", b"").unwrap());
    }

    #[test]
    fn short_and_long_keys_behave_alike() {
        // Around the inline limit: stored inside the key, or shared.
        for len in [0, 1, INLINE_BYTES - 1, INLINE_BYTES, INLINE_BYTES + 1, 250] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            for split in [0, len / 3, len] {
                let (p, c) = bytes.split_at(split);
                let k = Key::new(p, c).unwrap();
                assert_eq!(
                    (k.partition(), k.column()),
                    (p, c),
                    "len {len} split {split}"
                );
                assert_eq!(k.len_bytes(), len);
                let again = Key::new(p, c).unwrap();
                assert_eq!(k, again);
                assert_eq!(k.hash_u64(), again.hash_u64());
                assert_eq!(k.clone(), k);
                if len > 0 {
                    let mut other = bytes.clone();
                    other[len - 1] ^= 1;
                    let (p2, c2) = other.split_at(split);
                    assert_ne!(k, Key::new(p2, c2).unwrap(), "len {len} split {split}");
                }
            }
        }
    }

    #[test]
    fn refuses_oversized_parts() {
        let long = vec![0u8; STORED_PARTITION_BYTES_MAX + 1];
        assert!(matches!(
            Key::new(&long, b""),
            Err(Error::PartitionTooLong { .. })
        ));
        assert!(Key::new(&long[1..], &[0; COLUMN_BYTES_MAX]).is_ok());
        assert!(Key::user(b"p", &[0; COLUMN_BYTES_MAX]).is_ok());
        assert!(Key::user(b"p", &[0; COLUMN_BYTES_MAX + 1]).is_err());
        assert!(Key::user(b"p", &[0xff]).is_err(), "reserved");
        assert!(matches!(
            Key::new(b"p", &[0; STORED_COLUMN_BYTES_MAX + 1]),
            Err(Error::ColumnTooLong { .. })
        ));
    }
}

/// A hasher for maps keyed by [`Key`]: the key already carries a good hash.
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached for non-Key types; fold bytes so it is still a hash.
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Builds [`KeyHasher`]s.
pub(crate) type KeyHashBuilder = std::hash::BuildHasherDefault<KeyHasher>;
