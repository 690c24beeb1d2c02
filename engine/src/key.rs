//! Counter addresses: `(partition, column)`, both bounded byte strings.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use foldhash::quality::RandomState;
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};

/// Longest partition key accepted, in bytes.
pub const PARTITION_BYTES_MAX: usize = 1024;
/// Longest column name accepted, in bytes.
pub const COLUMN_BYTES_MAX: usize = 256;

/// The address of one counter: a partition (which decides placement and
/// groups a "wide row") and a column inside it.
///
/// Both parts live in one shared buffer, so cloning a key is a reference-count
/// bump. Keys order by partition, then column, bytewise; that is the order of
/// the memtable, of SSTables and of `get_row`.
///
/// A key carries its hash and its partition's hash, computed once with
/// foldhash under a per-process random seed, and reused by every lock
/// stripe, cache and memtable lookup. The seed keeps collisions from being
/// computed ahead of time; foldhash calls itself only minimally
/// DoS-resistant, a trade made for speed (SipHash cost a sixth of replay).
///
/// # Invariants
/// - `split <= buf.len()`, partition = `buf[..split]`, column = `buf[split..]`.
/// - partition ≤ [`PARTITION_BYTES_MAX`], column ≤ [`COLUMN_BYTES_MAX`].
/// - `hash` and `partition_hash` are the seeded hashes of those parts.
#[derive(Clone)]
pub struct Key {
    buf: Arc<[u8]>,
    split: u16,
    hash: u64,
    partition_hash: u64,
}

/// The per-process seed for key hashes.
fn seed() -> &'static RandomState {
    static SEED: OnceLock<RandomState> = OnceLock::new();
    SEED.get_or_init(RandomState::default)
}

const _: () = assert!(PARTITION_BYTES_MAX <= u16::MAX as usize);

impl Key {
    /// A key from its parts, refusing oversized ones.
    pub fn new(partition: &[u8], column: &[u8]) -> Result<Key> {
        check_lengths(partition.len(), column.len())?;
        // An exact-size iterator: the Arc is allocated once, at its size.
        let buf: Arc<[u8]> = partition.iter().chain(column).copied().collect();
        let split = u16::try_from(partition.len()).expect("partition length checked above");
        let partition_hash = partition_hash(partition);
        let hash = seed().hash_one((partition_hash, column));
        Ok(Key {
            buf,
            split,
            hash,
            partition_hash,
        })
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
        &self.buf[..usize::from(self.split)]
    }

    /// The column part (empty for a plain counter).
    pub fn column(&self) -> &[u8] {
        &self.buf[usize::from(self.split)..]
    }

    /// Bytes held by this key (for memory accounting).
    pub fn len_bytes(&self) -> usize {
        self.buf.len()
    }
}

/// The seeded hash of a partition, as [`Key::partition_hash`] gives it.
pub(crate) fn partition_hash(partition: &[u8]) -> u64 {
    seed().hash_one(partition)
}

/// Checks the size limits of a key's parts.
pub(crate) fn check_lengths(partition: usize, column: usize) -> Result<()> {
    if partition > PARTITION_BYTES_MAX {
        return Err(Error::PartitionTooLong {
            len: partition,
            max: PARTITION_BYTES_MAX,
        });
    }
    if column > COLUMN_BYTES_MAX {
        return Err(Error::ColumnTooLong {
            len: column,
            max: COLUMN_BYTES_MAX,
        });
    }
    Ok(())
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.split == other.split && self.buf == other.buf
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
    fn refuses_oversized_parts() {
        let long = vec![0u8; PARTITION_BYTES_MAX + 1];
        assert!(matches!(
            Key::new(&long, b""),
            Err(Error::PartitionTooLong { .. })
        ));
        assert!(Key::new(&long[1..], &[0; COLUMN_BYTES_MAX]).is_ok());
        assert!(matches!(
            Key::new(b"p", &[0; COLUMN_BYTES_MAX + 1]),
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
