//! A bloom filter over keys, so most point reads skip most tables.

use crate::codec::hash64;

/// Bits per key: with 7 probes that is about a 1% false-positive rate.
pub(crate) const BITS_PER_KEY: usize = 10;
const PROBES: u32 = 7;

/// A fixed-size bit array with double hashing (Kirsch–Mitzenmacher).
pub(crate) struct Bloom {
    bits: Vec<u8>,
}

impl Bloom {
    /// An empty filter sized for `keys` keys.
    pub(crate) fn with_keys(keys: usize) -> Self {
        let bytes = (keys * BITS_PER_KEY).div_ceil(8).max(8);
        Bloom {
            bits: vec![0; bytes],
        }
    }

    /// A filter from its serialized bits.
    pub(crate) fn from_bytes(bits: Vec<u8>) -> Self {
        Bloom { bits }
    }

    /// The serialized bits.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bits
    }

    /// Hash of a key for this filter.
    pub(crate) fn hash(partition: &[u8], column: &[u8]) -> u64 {
        hash64(&[partition, column])
    }

    /// Adds a key by its hash.
    pub(crate) fn insert(&mut self, hash: u64) {
        let nbits = self.bits.len() as u64 * 8;
        for i in probes(hash, nbits) {
            self.bits[(i / 8) as usize] |= 1 << (i % 8);
        }
    }

    /// False means the key is certainly absent.
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        let nbits = self.bits.len() as u64 * 8;
        if nbits == 0 {
            return true;
        }
        probes(hash, nbits).all(|i| self.bits[(i / 8) as usize] & (1 << (i % 8)) != 0)
    }
}

fn probes(hash: u64, nbits: u64) -> impl Iterator<Item = u64> {
    let h1 = hash;
    let h2 = hash.rotate_left(32) | 1;
    (0..u64::from(PROBES)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % nbits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut b = Bloom::with_keys(10_000);
        for i in 0..10_000u32 {
            b.insert(Bloom::hash(&i.to_le_bytes(), b""));
        }
        for i in 0..10_000u32 {
            assert!(b.may_contain(Bloom::hash(&i.to_le_bytes(), b"")));
        }
        let fp = (10_000..110_000u32)
            .filter(|i| b.may_contain(Bloom::hash(&i.to_le_bytes(), b"")))
            .count();
        assert!(fp < 2_000, "false-positive rate {fp}/100000 over 2%");
    }
}
