//! Hinted handoff: remembering which counters a down replica has missed.
//!
//! When the leader cannot get a shard to a replica (it is down, or the send
//! failed), it records a hint: *this replica is missing state of this key*.
//! A hint holds only the key, not the shard. Delivery reads the leader's
//! current cell for the key and applies it at the replica; that cell holds
//! every shard the replica missed (and perhaps newer ones), and `apply` is a
//! merge, so delivering the whole cell is always correct and a hot counter
//! written a million times while a replica was away needs one hint and one
//! delivery.
//!
//! ```text
//! hints/<node id>.hints   records: len u32 LE | crc32 u32 LE | partition_len u16 LE
//!                                  | partition | column
//! ```
//!
//! Records are appended only for keys not already pending for that node, so
//! a file never holds more records than the node has distinct missed keys.
//! A file is truncated once everything pending for its node is delivered.
//! Writes go to the page cache at once and are fsync'd every
//! `SYNC_INTERVAL`: a killed process loses no hint; a machine crash may lose
//! the last interval, which a read repair or a repair then covers. On start
//! the files are read back; a torn or damaged tail ends a file (logged): a
//! hint is an optimisation of convergence, not acknowledged data.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use parking_lot::Mutex;
use tally_engine::Key;
use tracing::warn;

/// How often hint files are fsync'd.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// Largest record accepted when reading a hint file back.
const RECORD_BYTES_MAX: usize = 4096;

struct NodeHints {
    file: File,
    path: PathBuf,
    /// Key → generation, bumped by every new hint for a pending key: a
    /// delivery that read the cell before the bump must not clear it.
    pending: HashMap<Key, u64>,
    next_gen: u64,
    dirty: bool,
}

/// Every node's pending hints.
pub struct Hints {
    nodes: Mutex<HashMap<usize, NodeHints>>,
}

impl Hints {
    /// Opens (and reads back) the hint files under `dir` for the given nodes,
    /// `(index, id)` pairs.
    pub fn open(dir: &Path, nodes: &[(usize, String)]) -> Result<Hints> {
        fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let mut map = HashMap::new();
        for (index, id) in nodes {
            let path = dir.join(format!("{id}.hints"));
            let (pending, valid_len) = read_back(&path)?;
            let file = OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("open {}", path.display()))?;
            let len = file
                .metadata()
                .with_context(|| format!("stat {}", path.display()))?
                .len();
            if len != valid_len {
                warn!(file = %path.display(), valid_len, len, "dropping a damaged hint file tail");
                file.set_len(valid_len)
                    .with_context(|| format!("truncate {}", path.display()))?;
            }
            map.insert(
                *index,
                NodeHints {
                    file,
                    path,
                    pending: pending.into_iter().map(|k| (k, 0)).collect(),
                    next_gen: 1,
                    dirty: false,
                },
            );
        }
        Ok(Hints {
            nodes: Mutex::new(map),
        })
    }

    /// Records that `node` misses state of `key`.
    pub fn add(&self, node: usize, key: &Key) -> Result<()> {
        let mut nodes = self.nodes.lock();
        let Some(h) = nodes.get_mut(&node) else {
            return Ok(()); // this node itself
        };
        let generation = h.next_gen;
        h.next_gen += 1;
        if h.pending.insert(key.clone(), generation).is_some() {
            return Ok(()); // already in the file
        }
        let mut rec = Vec::with_capacity(16 + key.len_bytes());
        encode(key, &mut rec);
        h.dirty = true;
        h.file
            .write_all(&rec)
            .with_context(|| format!("append to {}", h.path.display()))
    }

    /// Up to `max` keys pending for `node`, each with its generation, taking
    /// turns so that keys that keep failing cannot starve the rest.
    pub fn pending(&self, node: usize, max: usize) -> Vec<(Key, u64)> {
        let nodes = self.nodes.lock();
        let Some(h) = nodes.get(&node) else {
            return Vec::new();
        };
        let skip = if h.pending.len() > max {
            (h.next_gen as usize) % h.pending.len()
        } else {
            0
        };
        h.pending
            .iter()
            .cycle()
            .skip(skip)
            .take(max.min(h.pending.len()))
            .map(|(k, g)| (k.clone(), *g))
            .collect()
    }

    /// Number of keys pending for `node`.
    pub fn count(&self, node: usize) -> usize {
        self.nodes.lock().get(&node).map_or(0, |h| h.pending.len())
    }

    /// Marks keys as delivered to `node`, unless a newer hint came in for a
    /// key since `pending` listed it. Once nothing is pending the file is
    /// emptied (under the same lock as `add`, so no hint is lost) and
    /// fsync'd after the lock is released.
    pub fn delivered(&self, node: usize, keys: &[(Key, u64)]) -> Result<()> {
        let emptied = {
            let mut nodes = self.nodes.lock();
            let Some(h) = nodes.get_mut(&node) else {
                return Ok(());
            };
            for (k, generation) in keys {
                if h.pending.get(k) == Some(generation) {
                    h.pending.remove(k);
                }
            }
            if !h.pending.is_empty() {
                return Ok(());
            }
            h.file
                .set_len(0)
                .with_context(|| format!("empty {}", h.path.display()))?;
            h.dirty = false;
            h.file.try_clone().ok().map(|f| (f, h.path.clone()))
        };
        if let Some((f, path)) = emptied {
            sync_file(&f).with_context(|| format!("fsync {}", path.display()))?;
        }
        Ok(())
    }

    /// Fsyncs files with new records.
    pub fn sync(&self) -> Result<()> {
        let files: Vec<(File, PathBuf)> = {
            let mut nodes = self.nodes.lock();
            nodes
                .values_mut()
                .filter_map(|h| {
                    if !std::mem::take(&mut h.dirty) {
                        return None;
                    }
                    h.file.try_clone().ok().map(|f| (f, h.path.clone()))
                })
                .collect()
        };
        for (f, path) in files {
            // No lock held across the fsync.
            sync_file(&f).with_context(|| format!("fsync {}", path.display()))?;
        }
        Ok(())
    }
}

/// Fsyncs a hint file's data; the one place hint files are fsync'd, so
/// that tests can make it fail (`fault::fail_next_syncs`).
fn sync_file(f: &File) -> std::io::Result<()> {
    #[cfg(test)]
    fault::sync()?;
    f.sync_data()
}

/// Test-only fault seam: fsyncs that fail, on the calling thread.
#[cfg(test)]
mod fault {
    use std::cell::Cell;

    thread_local! {
        static FAIL: Cell<usize> = const { Cell::new(0) };
        static SYNCS: Cell<usize> = const { Cell::new(0) };
    }

    /// Makes this thread's next `n` hint fsyncs fail.
    pub(super) fn fail_next_syncs(n: usize) {
        FAIL.with(|f| f.set(n));
    }

    /// Hint fsyncs this thread asked for, failed ones included.
    pub(super) fn syncs() -> usize {
        SYNCS.with(Cell::get)
    }

    /// Counts an fsync; fails it if told to.
    pub(super) fn sync() -> std::io::Result<()> {
        SYNCS.with(|s| s.set(s.get() + 1));
        FAIL.with(|f| match f.get() {
            0 => Ok(()),
            n => {
                f.set(n - 1);
                Err(std::io::Error::other("injected fsync failure"))
            }
        })
    }
}

fn encode(key: &Key, out: &mut Vec<u8>) {
    let p = key.partition();
    let c = key.column();
    let body_len = 2 + p.len() + c.len();
    let start = out.len();
    out.extend_from_slice(
        &u32::try_from(body_len)
            .expect("keys are small")
            .to_le_bytes(),
    );
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(
        &u16::try_from(p.len())
            .expect("partition ≤ 1 KiB")
            .to_le_bytes(),
    );
    out.extend_from_slice(p);
    out.extend_from_slice(c);
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Reads a hint file: the keys of its whole valid records and their length.
fn read_back(path: &Path) -> Result<(HashSet<Key>, u64)> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)
                .with_context(|| format!("read {}", path.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((HashSet::new(), 0)),
        Err(e) => return Err(e).with_context(|| format!("open {}", path.display())),
    }
    let mut keys = HashSet::new();
    let mut at = 0usize;
    while let Some(key) = decode_at(&bytes, at) {
        keys.insert(key.0);
        at = key.1;
    }
    Ok((keys, at as u64))
}

/// One record at `at`: the key and the offset after it; `None` at the end
/// or at damage.
fn decode_at(bytes: &[u8], at: usize) -> Option<(Key, usize)> {
    let header = bytes.get(at..at + 8)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    if !(2..=RECORD_BYTES_MAX).contains(&len) {
        return None;
    }
    let body = bytes.get(at + 8..at + 8 + len)?;
    if crc32fast::hash(body) != crc {
        return None;
    }
    let plen = u16::from_le_bytes([body[0], body[1]]) as usize;
    let partition = body.get(2..2 + plen)?;
    let column = body.get(2 + plen..)?;
    let key = Key::new(partition, column).ok()?;
    Some((key, at + 8 + len))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn key(p: &str, c: &str) -> Key {
        Key::new(p.as_bytes(), c.as_bytes()).unwrap()
    }

    #[test]
    fn hints_survive_reopen_dedupe_and_empty_when_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string()), (2, "n3".to_string())];
        let h = Hints::open(dir.path(), &nodes).unwrap();
        h.add(1, &key("a", "")).unwrap();
        h.add(1, &key("a", "")).unwrap();
        h.add(1, &key("b", "x")).unwrap();
        h.add(2, &key("c", "")).unwrap();
        h.sync().unwrap();
        drop(h);

        let h = Hints::open(dir.path(), &nodes).unwrap();
        assert_eq!(h.count(1), 2);
        assert_eq!(h.count(2), 1);
        let len = fs::metadata(dir.path().join("n2.hints")).unwrap().len();
        assert_eq!(
            len as usize,
            2 * 8 + (2 + 1) + (2 + 2),
            "one record per distinct key"
        );
        h.delivered(1, &h.pending(1, 10)).unwrap();
        assert_eq!(fs::metadata(dir.path().join("n2.hints")).unwrap().len(), 0);
        drop(h);
        let h = Hints::open(dir.path(), &nodes).unwrap();
        assert_eq!(h.count(1), 0);
        assert_eq!(h.count(2), 1);
    }

    #[test]
    fn a_hint_renewed_during_delivery_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let h = Hints::open(dir.path(), &[(1, "n2".to_string())]).unwrap();
        h.add(1, &key("a", "")).unwrap();
        let listed = h.pending(1, 10);
        h.add(1, &key("a", "")).unwrap(); // a newer version missed the replica meanwhile
        h.delivered(1, &listed).unwrap();
        assert_eq!(
            h.count(1),
            1,
            "the newer hint must survive the older delivery"
        );
        h.delivered(1, &h.pending(1, 10)).unwrap();
        assert_eq!(h.count(1), 0);
    }

    #[test]
    fn a_torn_tail_keeps_the_whole_records() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes).unwrap();
        for i in 0..5 {
            h.add(1, &key(&format!("k{i}"), "")).unwrap();
        }
        drop(h);
        let path = dir.path().join("n2.hints");
        let full = fs::read(&path).unwrap();
        for cut in 0..full.len() {
            fs::write(&path, &full[..cut]).unwrap();
            let h = Hints::open(dir.path(), &nodes).unwrap();
            let record = full.len() / 5;
            assert_eq!(h.count(1), cut / record, "cut at {cut}");
            assert_eq!(
                fs::metadata(&path).unwrap().len() as usize,
                cut / record * record
            );
        }
    }

    /// Bytes of the record of a key with these parts.
    fn record_bytes(p: &str, c: &str) -> usize {
        8 + 2 + p.len() + c.len()
    }

    /// What the module docs promise of a hint the moment `add` returns:
    /// it is in the file (a killed process keeps it), and the next `sync`
    /// fsyncs it.
    #[test]
    fn a_hint_is_in_the_file_when_add_returns_and_fsyncd_by_the_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes).unwrap();
        h.add(1, &key("a", "b")).unwrap();
        let path = dir.path().join("n2.hints");
        assert_eq!(
            fs::metadata(&path).unwrap().len() as usize,
            record_bytes("a", "b")
        );
        let again = Hints::open(dir.path(), &nodes).unwrap();
        assert_eq!(again.count(1), 1, "a second reader sees the unsynced hint");
        let before = fault::syncs();
        h.sync().unwrap();
        assert_eq!(fault::syncs(), before + 1, "sync fsyncs the new record");
        h.sync().unwrap();
        assert_eq!(fault::syncs(), before + 1, "nothing new, no fsync");
    }

    /// A peer whose deliveries keep partly failing never lets a file empty:
    /// it must be compacted all the same.
    #[test]
    fn files_are_compacted_while_keys_are_still_pending() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes).unwrap();
        h.add(1, &key("stuck", "")).unwrap();
        for round in 0..100 {
            for i in 0..100 {
                h.add(1, &key(&format!("r{round:03}k{i:03}"), "")).unwrap();
            }
            let delivered: Vec<(Key, u64)> = h
                .pending(1, usize::MAX)
                .into_iter()
                .filter(|(k, _)| k.partition() != b"stuck")
                .collect();
            h.delivered(1, &delivered).unwrap();
            h.sync().unwrap();
        }
        assert_eq!(h.count(1), 1);
        let path = dir.path().join("n2.hints");
        let len = fs::metadata(&path).unwrap().len() as usize;
        let bound = 2048 * record_bytes("r000k000", "");
        assert!(
            len <= bound,
            "the hint file is {len} bytes for one pending key (bound {bound}): never compacted"
        );
        drop(h);
        let h = Hints::open(dir.path(), &nodes).unwrap();
        assert_eq!(h.count(1), 1, "the pending key survives compaction");
        assert_eq!(h.pending(1, 1)[0].0, key("stuck", ""));
    }

    #[test]
    fn a_huge_damaged_tail_is_not_read_into_memory() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes).unwrap();
        h.add(1, &key("a", "")).unwrap();
        h.add(1, &key("b", "")).unwrap();
        drop(h);
        let path = dir.path().join("n2.hints");
        let valid = fs::metadata(&path).unwrap().len();
        // A sparse terabyte of zeros after the records: no disk used, but
        // more memory than the machine has, were the file read whole.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let h = Hints::open(dir.path(), &nodes).expect("open reads a hint file as a stream");
        assert_eq!(h.count(1), 2);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            valid,
            "the damaged tail is cut"
        );
    }

    #[test]
    fn a_failed_fsync_is_an_error_and_the_file_is_written_and_synced_again() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let path = dir.path().join("n2.hints");
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let h = Hints::open(dir.path(), &nodes).unwrap();
        h.add(1, &key("a", "")).unwrap();
        let first = inode(&path);
        fault::fail_next_syncs(1);
        assert!(h.sync().is_err(), "a failed fsync is an error");
        let before = fault::syncs();
        h.sync().unwrap();
        assert!(
            fault::syncs() > before,
            "the file whose fsync failed was marked clean and never fsync'd again"
        );
        // Linux may drop the pages behind a failed fsync and let the next
        // one succeed: the file is written anew from memory.
        assert_ne!(inode(&path), first, "the file was not written anew");
        assert_eq!(Hints::open(dir.path(), &nodes).unwrap().count(1), 1);

        // Emptied once delivered: a failed fsync of that is an error too.
        fault::fail_next_syncs(1);
        assert!(h.delivered(1, &h.pending(1, 10)).is_err());
        let before = fault::syncs();
        h.sync().unwrap();
        assert!(
            fault::syncs() > before,
            "the emptied file whose fsync failed was never fsync'd again"
        );
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        assert_eq!(Hints::open(dir.path(), &nodes).unwrap().count(1), 0);
    }
}
