//! A list's elements: the value a list key's epoch carries.
//!
//! A list (Redis' `LPUSH`, `LTRIM`, `LINDEX` ..., what rate limiters'
//! moving windows keep their hits in) is not a counter: its elements do not
//! add up. Tally keeps it as a **last-writer-wins register** on the cell's
//! epoch: every change of a list is made by a leader, under the cell lock,
//! as a new epoch `(n + 1, leader)` that carries the whole new list, like a
//! `SET` carries its value (see `crate::list` for the changes). The merge
//! is the cell's: the newer epoch wins whole, list and all, so replication,
//! hints, repair, replay and compaction need nothing new.
//!
//! One identity carries one list, made once by one leader; a copy of the
//! identity without it (none is made so, but a merge must be total) takes
//! it, and two different lists for one identity are corruption: the larger
//! (by element bytes) is kept, so every replica keeps the same one.
//!
//! # Limits
//! A list is written whole on every change (log record, replication), so
//! it is bounded: at most [`LIST_BYTES_MAX`] bytes as encoded (each element
//! its length's varint plus its bytes), which also bounds its length. The
//! bound is what a peer batch of replicated cells can carry (the network's
//! `LIST_BYTES_MAX`, the same number): about 1,500 timestamps, a moving
//! window of 1,500 hits.

use std::sync::Arc;

pub use crate::limits::{LIST_BYTES_MAX, ListTooLong};

/// A list's elements, shared by the copies of a cell.
///
/// # Invariants
/// - `encoded_len() <= LIST_BYTES_MAX`;
/// - never empty (an emptied list is a deleted key).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct List(Arc<Vec<Vec<u8>>>);

impl List {
    /// The list of `elements`, refused when it is over the limit or empty
    /// (`None` then: an empty list is no list).
    pub fn new(elements: Vec<Vec<u8>>) -> Result<Option<List>, ListTooLong> {
        if elements.is_empty() {
            return Ok(None);
        }
        let bytes = encoded_len(&elements);
        if bytes > LIST_BYTES_MAX {
            return Err(ListTooLong { bytes });
        }
        Ok(Some(List(Arc::new(elements))))
    }

    /// The elements, head first.
    pub fn elements(&self) -> &[Vec<u8>] {
        &self.0
    }

    /// How many elements it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false (see the invariants); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes it takes encoded.
    pub fn encoded_len(&self) -> usize {
        encoded_len(&self.0)
    }
}

/// Bytes `elements` take encoded: each a varint length and its bytes.
pub fn encoded_len(elements: &[Vec<u8>]) -> usize {
    elements.iter().map(|e| varint_len(e.len()) + e.len()).sum()
}

fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - n.leading_zeros();
    (bits as usize).div_ceil(7).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_bounded_and_never_empty() {
        assert_eq!(List::new(vec![]), Ok(None));
        let one = List::new(vec![b"a".to_vec()]).unwrap().unwrap();
        assert_eq!(one.elements(), &[b"a".to_vec()]);
        assert_eq!(one.encoded_len(), 2);
        // Each element of 1000 bytes takes 1002 encoded.
        let fit = LIST_BYTES_MAX / 1002;
        let fits = vec![vec![0u8; 1000]; fit];
        assert_eq!(encoded_len(&fits), fit * 1002);
        assert!(List::new(fits).unwrap().is_some());
        let big = vec![vec![0u8; 1000]; fit + 1];
        let bytes = (fit + 1) * 1002;
        assert_eq!(List::new(big), Err(ListTooLong { bytes }));
    }

    #[test]
    fn varint_lengths_match_the_codec() {
        for n in [0usize, 1, 127, 128, 16_383, 16_384, 1 << 21] {
            let mut buf = Vec::new();
            crate::codec::put_varint(&mut buf, n as u64);
            assert_eq!(varint_len(n), buf.len(), "{n}");
        }
    }
}
