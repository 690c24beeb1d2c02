//! Entries recorded since the last ids file, kept encoded as the file will
//! hold them: a few dozen bytes an add, not a copy of its key and client
//! in a struct, and no re-encoding when the file is written.

use super::record::Applied;
use super::{ClientId, Entry};
/// Entries are cut into blocks of about this size (see `file`).
pub(crate) const BLOCK_BYTES: usize = 64 << 10;

/// Encoded entries, in blocks of whole entries.
///
/// # Invariants
/// - Every block holds whole entries, at most [`BLOCK_BYTES`] plus one entry.
#[derive(Default)]
pub(crate) struct Encoded {
    /// Full blocks.
    pub(crate) blocks: Vec<Vec<u8>>,
    /// How many entries the blocks and `current` hold.
    pub(crate) count: u64,
    current: Vec<u8>,
}

impl Encoded {
    /// Appends an applied add.
    pub(crate) fn push_op(&mut self, key: u64, client: &ClientId, op: &Applied) {
        Entry::encode_op(self.block(), key, client, op);
        self.count += 1;
    }

    /// Appends any entry.
    pub(crate) fn push(&mut self, entry: &Entry) {
        entry.encode(self.block());
        self.count += 1;
    }

    /// Appends a tail's entry (see `tail`).
    pub(crate) fn push_tail(&mut self, entry: &super::tail::TailEntry) {
        entry.encode(self.block());
        self.count += 1;
    }

    fn block(&mut self) -> &mut Vec<u8> {
        if self.current.len() >= BLOCK_BYTES {
            self.blocks.push(std::mem::take(&mut self.current));
        }
        &mut self.current
    }

    /// Takes everything, leaving this empty.
    pub(crate) fn take(&mut self) -> Encoded {
        std::mem::take(self)
    }

    /// Appends everything of `other`.
    pub(crate) fn append(&mut self, mut other: Encoded) {
        self.blocks.append(&mut other.blocks);
        if !other.current.is_empty() {
            self.blocks.push(other.current);
        }
        self.count += other.count;
    }

    /// The blocks, the last one partly full.
    pub(crate) fn all_blocks(&self) -> impl Iterator<Item = &[u8]> {
        self.blocks
            .iter()
            .map(Vec::as_slice)
            .chain(Some(self.current.as_slice()).filter(|c| !c.is_empty()))
    }

    /// Whether it holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::codec::Cursor;

    #[test]
    fn blocks_hold_whole_entries_that_decode_back() {
        let key = u64::MAX;
        let client = ClientId::from_slice(b"client");
        let mut e = Encoded::default();
        for seq in 1..=2_000u64 {
            let op = Applied {
                seq,
                delta: 1,
                value: seq as i64,
                epoch: 0,
                at_ms: 9,
            };
            e.push_op(key, &client, &op);
        }
        let mut more = Encoded::default();
        more.push(&Entry::Forgotten {
            client: client.clone(),
            through: 3,
            last_at_ms: 4,
        });
        e.append(more);
        assert_eq!(e.count, 2_001);
        let mut n = 0;
        for block in e.all_blocks() {
            assert!(block.len() <= BLOCK_BYTES + 100);
            let mut cur = Cursor::new(block);
            while cur.remaining() > 0 {
                Entry::decode(&mut cur).unwrap();
                n += 1;
            }
        }
        assert_eq!(n, 2_001);
        assert!(e.take().count == 2_001 && e.is_empty());
    }
}
