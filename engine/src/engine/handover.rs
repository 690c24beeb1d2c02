//! Handing the operation ids this node applied to other appliers: a ring
//! change moves partitions between appliers (one fixed replica applies a
//! client's ids for a partition), and the new applier must answer a retry
//! of an add the old one applied. The node's whole ledger goes (adds in the
//! window and forgotten marks): entries are facts, so a node that takes in
//! another's learns nothing wrong about its own, and taking them twice
//! changes nothing.

use super::Engine;
use crate::codec::Cursor;
use crate::error::{Error, Result};
use crate::ids::Entry;
use crate::ids::pending::Encoded;

/// Most bytes one block of handed-over ids may hold.
pub const IDS_BLOCK_BYTES_MAX: usize = 1 << 20;

impl Engine {
    /// Every id this node remembers, encoded in blocks of about 64 KiB
    /// (each at most [`IDS_BLOCK_BYTES_MAX`]) for [`Engine::ids_import`].
    pub fn ids_export(&self) -> Vec<Vec<u8>> {
        let mut encoded = Encoded::default();
        for entry in self.ids.ledger().snapshot(crate::ids::now_ms()) {
            encoded.push(&entry);
        }
        encoded.all_blocks().map(<[u8]>::to_vec).collect()
    }

    /// Takes in a block another node exported: written to an ids file of
    /// its own (fsync'd) before its adds are answered here. Answers how
    /// many entries it held; a malformed block is refused whole.
    pub fn ids_import(&self, block: &[u8]) -> Result<u64> {
        let bad = |why: String| Error::BadOpId(format!("handed-over ids: {why}"));
        if block.len() > IDS_BLOCK_BYTES_MAX {
            return Err(bad(format!("a block of {} bytes", block.len())));
        }
        let mut entries = Vec::new();
        let mut cur = Cursor::new(block);
        while cur.remaining() > 0 {
            let entry = cur
                .bytes(1)
                .and_then(|kind| Entry::decode_kind(kind[0], &mut cur))
                .map_err(|e| bad(e.0.to_string()))?;
            entries.push(entry);
        }
        self.ids.import(&entries)?;
        Ok(entries.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use crate::ids::OpId;
    use crate::{Engine, Key, Once, OnceAdd, Options};

    fn add_once(e: &Engine, key: &Key, delta: i64, seq: u64) -> Once {
        let add = [OnceAdd {
            delta,
            id: OpId::new(b"client", seq).unwrap(),
            reapply_stale: false,
        }];
        let (mut sealed, _durable) = e.add_once([(key, &add[..])]).unwrap();
        sealed.remove(0).answers.remove(0).unwrap()
    }

    #[test]
    fn a_retry_at_the_new_applier_answers_the_old_ones_value() {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = Engine::open(a_dir.path(), Options::default()).unwrap();
        let b = Engine::open(b_dir.path(), Options::default()).unwrap();
        let key = Key::new(b"p", b"").unwrap();
        let first = add_once(&a, &key, 5, 7);
        assert_eq!(first.value(), 5);
        let ids_files =
            |dir: &std::path::Path| crate::fsutil::numbered_files(dir, "ids").unwrap().len();
        let before = ids_files(b_dir.path());
        let mut entries = 0;
        for block in a.ids_export() {
            entries += b.ids_import(&block).unwrap();
        }
        assert_eq!(entries, 1);
        assert_eq!(
            ids_files(b_dir.path()),
            before + 1,
            "durable before it answers"
        );
        let retried = add_once(&b, &key, 5, 7);
        assert!(!matches!(retried, Once::Applied(_)), "{retried:?}");
        assert_eq!(retried.value(), 5, "answered with the first value");
        assert_eq!(b.get(&key).unwrap().value(), Ok(0), "b applied nothing");
        assert_eq!(
            add_once(&b, &key, 1, 8),
            Once::Applied(1),
            "a new id applies"
        );
        assert!(b.ids_import(&[0xff, 1, 2]).is_err());
    }
}
