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
//! Each node's hints are one file, `hints/<node id>.hints` (format: `file`).
//! A record is appended only for a key not already pending for that node;
//! a file is emptied once everything pending for its node is delivered,
//! and rewritten with just the pending keys (compacted) by the sync task
//! once it holds more than twice as many records as keys are pending, plus
//! [`COMPACT_SLACK_RECORDS`]: a peer whose deliveries keep partly failing
//! never lets its file empty, yet the file stays within a constant factor
//! of what is pending. A record may name a key delivered since; reading it
//! back delivers that cell again, which is a merge and changes nothing.
//!
//! # What a hint guarantees
//!
//! A hint is in its file (the page cache) when [`Hints::add`] returns,
//! which is before the add that needed it is acknowledged: a killed process
//! loses no hint. It is fsync'd by the sync task within [`SYNC_INTERVAL`],
//! not before the acknowledgement: a machine crash (power loss, kernel
//! panic) may lose the hints of the last interval.
//!
//! We chose not to fsync before acknowledging, because a hint is not the
//! data. An add is acknowledged only once its shard is durable on as many
//! copies as its level asks (`write::round`: the leader's fsync'd log is
//! one, each replica that applied it another); a hint says which replica
//! is behind, and delivery reads the leader's own cell.
//! A hint thus never holds anything the leader's log does not, and it lives
//! on the same disk as that log: fsyncing it first protects no acknowledged
//! add against any failure. A lost hint costs convergence time only: the
//! replica that was away catches up by read repair (any read at `QUORUM`
//! or `ALL` that reaches it) or by `tally repair` instead of by handoff,
//! and reads at `QUORUM` see every acknowledged `QUORUM` add meanwhile.
//! Fsyncing first would instead put a second fsync on the answer path of
//! every batch that hints a new key, exactly while a replica is down, from
//! the replication task that must not block on a disk.
//!
//! # Bounded
//!
//! Hints for a peer are kept for `[cluster.hints] window_ms` (three hours)
//! and up to `bytes_max` of records; past either the peer's hints are
//! dropped and it is marked as needing repair (see `bound`, which also
//! gives the `<node id>.state` file that remembers it).
//!
//! An fsync or write that fails is an error, and the file is then taken as
//! lost: after a failed fsync Linux may drop the dirty pages and let the
//! next fsync succeed, so the next sync rewrites the file from memory
//! rather than fsyncing it again. On start the files are read back as a
//! stream; a torn or damaged tail ends a file (logged).

pub mod bound;
pub(crate) mod file;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tally_world::fs::{self, File, OpenOptions};

use anyhow::{Context, Result};
use parking_lot::Mutex;
use tally_engine::Key;

use crate::base::registry::Registry;
use tracing::{info, warn};

pub use bound::HintLimits;
use bound::State;

/// How often hint files are fsync'd (and compacted when they need it).
pub const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// Records a file may hold beyond twice its pending keys before it is
/// compacted: small files are never rewritten.
pub const COMPACT_SLACK_RECORDS: usize = 1024;

/// One node's hints.
///
/// # Invariants
/// - Unless `broken`, the file holds a record of every key in `pending`
///   (fsync'd unless `dirty`), and `records` whole records in all.
/// - `rewriting` is `Some` exactly while `sync` writes a new file from a
///   snapshot of `pending`; it collects the keys hinted meanwhile.
/// - `pending_bytes` is the sum of the records of the `pending` keys, and
///   `state.since_ms` is `Some` exactly when `pending` is not empty.
struct NodeHints {
    /// The peer's id, for the logs.
    id: String,
    file: Arc<File>,
    path: PathBuf,
    /// Key → generation, bumped by every new hint for a pending key: a
    /// delivery that read the cell before the bump must not clear it.
    pending: HashMap<Key, u64>,
    next_gen: u64,
    records: usize,
    dirty: bool,
    /// A write or fsync of the file failed: it must be rewritten from
    /// `pending` before it can be trusted.
    broken: bool,
    rewriting: Option<Vec<Key>>,
    /// Bytes of the records of the pending keys.
    pending_bytes: u64,
    /// The episode and the repair flag, and whether the state file lags.
    state: State,
    state_dirty: bool,
    /// The last episode overflowed and the peer has not been seen up since.
    refusing: bool,
    /// Hints dropped since this node started.
    dropped: u64,
}

/// What a node holds for one peer, for `tally status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HintReport {
    /// Keys pending.
    pub pending: u64,
    /// Hints dropped since this node started (overflows and refusals).
    pub dropped: u64,
    /// When the pending episode began (ms since the epoch).
    pub since_ms: Option<u64>,
    /// The peer needs a repair: hints for it were dropped.
    pub needs_repair: bool,
}

/// Bytes of the hint record of `key`.
fn record_bytes(key: &Key) -> u64 {
    (8 + 2 + key.partition().len() + key.column().len()) as u64
}

/// The state file beside the hints file at `hints_path`.
fn state_path(hints_path: &Path) -> PathBuf {
    hints_path.with_extension("state")
}

/// What `sync` does with one node's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upkeep {
    /// Nothing: the file is durable, or another sync is rewriting it.
    Nothing,
    /// Fsync the records appended since the last fsync.
    Fsync,
    /// Write a new file holding the pending keys and rename it over this one.
    Rewrite,
}

/// The upkeep a file needs: rewritten when broken or when stale records
/// outnumber the pending ones (see the module docs), else fsync'd if dirty.
fn upkeep(records: usize, pending: usize, dirty: bool, broken: bool, rewriting: bool) -> Upkeep {
    if rewriting {
        Upkeep::Nothing
    } else if broken || records > 2 * pending + COMPACT_SLACK_RECORDS {
        Upkeep::Rewrite
    } else if dirty {
        Upkeep::Fsync
    } else {
        Upkeep::Nothing
    }
}

/// Every node's pending hints.
pub struct Hints {
    dir: PathBuf,
    limits: HintLimits,
    nodes: Mutex<HashMap<usize, NodeHints>>,
    /// The node's metrics, which count hints written and sent.
    metrics: &'static Registry,
}

impl Hints {
    /// Opens (and reads back) the hint files under `dir` for the given nodes,
    /// `(index, id)` pairs, kept within `limits`, counted in `metrics`.
    pub(crate) fn open(
        dir: &Path,
        nodes: &[(usize, String)],
        limits: HintLimits,
        metrics: &'static Registry,
    ) -> Result<Hints> {
        fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let mut map = HashMap::new();
        for (index, id) in nodes {
            let path = dir.join(format!("{id}.hints"));
            // A rewrite that did not finish: the file it was to replace is whole.
            let new = file::new_path(&path);
            match fs::remove_file(&new) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("remove {}", new.display()));
                }
                _ => {}
            }
            let back = file::read_back(&path)?;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("open {}", path.display()))?;
            let len = file
                .metadata()
                .with_context(|| format!("stat {}", path.display()))?
                .len();
            if len != back.valid_len {
                warn!(file = %path.display(), valid_len = back.valid_len, len, "dropping a damaged hint file tail");
                file.set_len(back.valid_len)
                    .with_context(|| format!("truncate {}", path.display()))?;
            }
            let pending: HashMap<Key, u64> = back.keys.into_iter().map(|k| (k, 0)).collect();
            let (state, state_dirty) = open_state(&path, !pending.is_empty())?;
            map.insert(
                *index,
                NodeHints {
                    id: id.clone(),
                    file: Arc::new(file),
                    path,
                    pending_bytes: pending.keys().map(record_bytes).sum(),
                    pending,
                    next_gen: 1,
                    records: back.records,
                    dirty: false,
                    broken: false,
                    rewriting: None,
                    state,
                    state_dirty,
                    refusing: false,
                    dropped: 0,
                },
            );
        }
        Ok(Hints {
            dir: dir.to_path_buf(),
            limits,
            nodes: Mutex::new(map),
            metrics,
        })
    }

    /// Records that `node` misses state of `key`. On an error the key is
    /// still pending (delivered from memory) and the file is rewritten by
    /// the next `sync`.
    pub fn add(&self, node: usize, key: &Key) -> Result<()> {
        self.metrics
            .hints_written
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.add_at(node, key, tally_engine::now_ms())
    }

    /// [`Hints::add`] at `now_ms`. A hint past the limits drops the
    /// peer's hints instead (see `bound`).
    fn add_at(&self, node: usize, key: &Key, now_ms: u64) -> Result<()> {
        let mut nodes = self.nodes.lock();
        let Some(h) = nodes.get_mut(&node) else {
            return Ok(()); // this node itself
        };
        if h.refusing {
            // Away longer than hints are for: it is repaired, not hinted.
            h.dropped += 1;
            return Ok(());
        }
        let generation = h.next_gen;
        h.next_gen += 1;
        if h.pending.insert(key.clone(), generation).is_some() {
            return Ok(()); // already in the file
        }
        h.pending_bytes += record_bytes(key);
        if h.state.since_ms.is_none() {
            h.state.since_ms = Some(now_ms);
            h.state_dirty = true;
        }
        if let Some(why) = bound::overflow(&self.limits, h.state.since_ms, h.pending_bytes, now_ms)
        {
            return drop_all(h, why, now_ms);
        }
        if let Some(added) = h.rewriting.as_mut() {
            added.push(key.clone());
        }
        let mut rec = Vec::with_capacity(16 + key.len_bytes());
        file::encode(key, &mut rec);
        h.dirty = true;
        h.records += 1;
        // A failed append may leave a torn record that would end the file
        // at the next start, hiding every record after it.
        let written = (&*h.file).write_all(&rec);
        h.broken |= written.is_err();
        written.with_context(|| format!("append to {}", h.path.display()))
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
        self.metrics
            .hints_sent
            .fetch_add(keys.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let (f, path) = {
            let mut nodes = self.nodes.lock();
            let Some(h) = nodes.get_mut(&node) else {
                return Ok(());
            };
            for (k, generation) in keys {
                if h.pending.get(k) == Some(generation) {
                    h.pending.remove(k);
                    h.pending_bytes -= record_bytes(k);
                }
            }
            if h.pending.is_empty() && h.state.since_ms.is_some() {
                h.state.since_ms = None; // the episode is over
                h.state_dirty = true;
            }
            if !h.pending.is_empty() || (h.records == 0 && !h.dirty && !h.broken) {
                return Ok(());
            }
            if let Err(e) = h.file.set_len(0) {
                h.broken = true;
                return Err(e).with_context(|| format!("empty {}", h.path.display()));
            }
            h.records = 0;
            h.dirty = false;
            (h.file.clone(), h.path.clone())
        };
        // No lock held across the fsync.
        sync_file(&f).or_else(|e| {
            self.mark_broken(node);
            Err(e).with_context(|| format!("fsync {}", path.display()))
        })
    }

    /// Fsyncs files with new records, and rewrites files that are broken
    /// or due for compaction. Every file is seen to; the first error is
    /// answered.
    pub fn sync(&self) -> Result<()> {
        let nodes: Vec<usize> = self.nodes.lock().keys().copied().collect();
        let mut first = Ok(());
        for node in nodes {
            let result = self.sync_one(node).and_then(|()| self.sync_state(node));
            if first.is_ok() {
                first = result;
            }
        }
        first
    }

    /// Drops the hints of every peer whose episode is past the window at
    /// `now_ms` (see `bound`). Errors are the emptied files' (rewritten by
    /// the next `sync`).
    pub fn enforce(&self, now_ms: u64) -> Result<()> {
        let mut first = Ok(());
        for h in self.nodes.lock().values_mut() {
            if h.pending.is_empty() {
                continue;
            }
            if let Some(why) =
                bound::overflow(&self.limits, h.state.since_ms, h.pending_bytes, now_ms)
            {
                let result = drop_all(h, why, now_ms);
                if first.is_ok() {
                    first = result;
                }
            }
        }
        first
    }

    /// `node` left the ring: its hints are dropped and it needs no repair
    /// (its ranges were synced into their next owners).
    pub fn forget(&self, node: usize) -> Result<()> {
        let all = self.pending(node, usize::MAX);
        self.repaired(node, tally_engine::now_ms());
        self.delivered(node, &all)
    }

    /// `node` was seen up: hints for it are recorded again.
    pub fn seen_up(&self, node: usize) {
        if let Some(h) = self.nodes.lock().get_mut(&node)
            && h.refusing
        {
            h.refusing = false;
            info!(peer = %h.id, "peer is back: hinting it again (it still needs a repair)");
        }
    }

    /// A repair of `node` that began at `started_ms` completed (see
    /// `bound::State::repaired`).
    pub fn repaired(&self, node: usize, started_ms: u64) {
        if let Some(h) = self.nodes.lock().get_mut(&node)
            && h.state.repaired(started_ms)
        {
            h.state_dirty = true;
            info!(peer = %h.id, "peer repaired: it no longer needs a repair");
        }
    }

    /// What this node holds for `node`.
    pub fn report(&self, node: usize) -> HintReport {
        self.nodes
            .lock()
            .get(&node)
            .map_or_else(HintReport::default, |h| HintReport {
                pending: h.pending.len() as u64,
                dropped: h.dropped,
                since_ms: h.state.since_ms,
                needs_repair: h.state.repair_due_ms.is_some(),
            })
    }

    /// Writes `node`'s state file if it lags; on an error it is tried
    /// again by the next `sync`.
    fn sync_state(&self, node: usize) -> Result<()> {
        let (state, path) = {
            let mut nodes = self.nodes.lock();
            let Some(h) = nodes.get_mut(&node) else {
                return Ok(());
            };
            if !std::mem::take(&mut h.state_dirty) {
                return Ok(());
            }
            (h.state, state_path(&h.path))
        };
        file::replace(&path, &bound::encode(&state)).inspect_err(|_| {
            if let Some(h) = self.nodes.lock().get_mut(&node) {
                h.state_dirty = true;
            }
        })
    }

    /// One file's upkeep, decided under the lock and done outside it.
    fn sync_one(&self, node: usize) -> Result<()> {
        let (f, path) = {
            let mut nodes = self.nodes.lock();
            let Some(h) = nodes.get_mut(&node) else {
                return Ok(());
            };
            let step = upkeep(
                h.records,
                h.pending.len(),
                h.dirty,
                h.broken,
                h.rewriting.is_some(),
            );
            match step {
                Upkeep::Nothing => return Ok(()),
                Upkeep::Fsync => h.dirty = false,
                Upkeep::Rewrite => {
                    let keys = begin_rewrite(h);
                    let path = h.path.clone();
                    drop(nodes);
                    return self.finish_rewrite(node, &path, &keys);
                }
            }
            (h.file.clone(), h.path.clone())
        };
        sync_file(&f).or_else(|e| {
            self.mark_broken(node);
            Err(e).with_context(|| format!("fsync {}", path.display()))
        })
    }

    /// Writes a new file for `node` holding `keys` (pending when the
    /// rewrite began), then, under the lock, appends the keys hinted since
    /// and renames it over the old one, so that no hint lands in a file
    /// already copied.
    fn finish_rewrite(&self, node: usize, path: &Path, keys: &[Key]) -> Result<()> {
        let written = file::write_new(path, keys);
        let mut nodes = self.nodes.lock();
        let h = nodes.get_mut(&node).expect("nodes are never removed");
        let added = h.rewriting.take().unwrap_or_default();
        let new = file::new_path(path);
        let swapped = written.and_then(|f| {
            let mut rec = Vec::new();
            let mut extra = 0;
            for key in added.iter().filter(|k| h.pending.contains_key(*k)) {
                file::encode(key, &mut rec);
                extra += 1;
            }
            (&f).write_all(&rec)
                .with_context(|| format!("append to {}", new.display()))?;
            fs::rename(&new, path)
                .with_context(|| format!("rename {} to {}", new.display(), path.display()))?;
            h.file = Arc::new(f);
            h.records = keys.len() + extra;
            h.dirty = extra > 0;
            h.broken = false;
            Ok(())
        });
        drop(nodes);
        if let Err(e) = swapped {
            self.mark_broken(node);
            let _ = fs::remove_file(&new);
            return Err(e);
        }
        // Until the directory is fsync'd a crash may bring back the old
        // file, which holds every pending key too.
        file::sync_dir(&self.dir).inspect_err(|_| self.mark_broken(node))
    }

    /// The file of `node` failed a write or an fsync: rewrite it.
    fn mark_broken(&self, node: usize) {
        if let Some(h) = self.nodes.lock().get_mut(&node) {
            h.broken = true;
        }
    }
}

/// The peer state kept beside the hints file at `hints_path`, and whether
/// it must be written again: an episode begins (now) if hints were read
/// back without one, and ends if none were. A damaged state file reads as
/// needing repair.
fn open_state(hints_path: &Path, pending: bool) -> Result<(State, bool)> {
    let path = state_path(hints_path);
    let mut state = match file::read_small(&path)? {
        None => State::default(),
        Some(bytes) => bound::decode(&bytes).unwrap_or_else(|why| {
            warn!(file = %path.display(), why, "damaged hint state: the peer is taken to need a repair");
            State {
                since_ms: None,
                repair_due_ms: Some(tally_engine::now_ms()),
            }
        }),
    };
    let before = state;
    match (pending, state.since_ms) {
        (true, None) => state.since_ms = Some(tally_engine::now_ms()),
        (false, Some(_)) => state.since_ms = None,
        _ => {}
    }
    Ok((state, state != before))
}

/// Drops every hint pending for `h`'s peer (it overflowed: `why`), marks
/// it as needing repair and refuses its hints until it is seen up. The
/// emptied file is fsync'd by the next `sync`; on an error it is rewritten.
fn drop_all(h: &mut NodeHints, why: bound::Overflow, now_ms: u64) -> Result<()> {
    warn!(
        peer = %h.id,
        dropped = h.pending.len(),
        reason = %why,
        "dropping hints: the peer needs a repair (`tally repair`)"
    );
    h.dropped += h.pending.len() as u64;
    h.pending.clear();
    h.pending_bytes = 0;
    h.state.dropped(now_ms);
    h.state_dirty = true;
    h.refusing = true;
    if let Err(e) = h.file.set_len(0) {
        h.broken = true;
        return Err(e).with_context(|| format!("empty {}", h.path.display()));
    }
    h.records = 0;
    h.dirty = true;
    Ok(())
}

/// Starts a rewrite of `h`: the keys the new file starts with.
fn begin_rewrite(h: &mut NodeHints) -> Vec<Key> {
    assert!(
        h.rewriting.is_none(),
        "two rewrites of {}",
        h.path.display()
    );
    h.rewriting = Some(Vec::new());
    h.pending.keys().cloned().collect()
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
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        h.add(1, &key("a", "")).unwrap();
        h.add(1, &key("a", "")).unwrap();
        h.add(1, &key("b", "x")).unwrap();
        h.add(2, &key("c", "")).unwrap();
        h.sync().unwrap();
        drop(h);

        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
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
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        assert_eq!(h.count(1), 0);
        assert_eq!(h.count(2), 1);
    }

    #[test]
    fn a_hint_renewed_during_delivery_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let h = Hints::open(
            dir.path(),
            &[(1, "n2".to_string())],
            HintLimits::default(),
            Registry::leak(),
        )
        .unwrap();
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
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        for i in 0..5 {
            h.add(1, &key(&format!("k{i}"), "")).unwrap();
        }
        drop(h);
        let path = dir.path().join("n2.hints");
        let full = fs::read(&path).unwrap();
        for cut in 0..full.len() {
            fs::write(&path, &full[..cut]).unwrap();
            let h =
                Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
            let record = full.len() / 5;
            assert_eq!(h.count(1), cut / record, "cut at {cut}");
            assert_eq!(
                fs::metadata(&path).unwrap().len() as usize,
                cut / record * record
            );
        }
    }

    #[test]
    fn upkeep_by_records_pending_and_state() {
        use Upkeep::{Fsync, Nothing, Rewrite};
        let slack = COMPACT_SLACK_RECORDS;
        // (records, pending, dirty, broken, rewriting) => upkeep
        let table = [
            ((0, 0, false, false, false), Nothing),
            ((5, 5, true, false, false), Fsync),
            ((5, 5, false, false, false), Nothing),
            ((2 * 10 + slack, 10, false, false, false), Nothing),
            ((2 * 10 + slack + 1, 10, false, false, false), Rewrite),
            ((2 * 10 + slack + 1, 10, true, false, false), Rewrite),
            // A failed write or fsync: rewritten, however small.
            ((1, 1, false, true, false), Rewrite),
            ((0, 0, true, true, false), Rewrite),
            // One rewrite at a time.
            ((1, 1, true, true, true), Nothing),
            ((10 * slack, 0, true, false, true), Nothing),
        ];
        for ((records, pending, dirty, broken, rewriting), want) in table {
            assert_eq!(
                upkeep(records, pending, dirty, broken, rewriting),
                want,
                "records {records}, pending {pending}, dirty {dirty}, broken {broken}, rewriting {rewriting}"
            );
        }
    }

    /// Hints added and delivered while a new file is being written end up
    /// in it (or not) as if they had come before or after the rewrite.
    #[test]
    fn hints_that_come_during_a_rewrite_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let path = dir.path().join("n2.hints");
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        h.add(1, &key("before", "")).unwrap();
        h.add(1, &key("gone", "")).unwrap();
        let keys = begin_rewrite(h.nodes.lock().get_mut(&1).unwrap());
        h.add(1, &key("during", "")).unwrap();
        let gone = h
            .pending(1, 10)
            .into_iter()
            .filter(|(k, _)| k.partition() == b"gone")
            .collect::<Vec<_>>();
        h.delivered(1, &gone).unwrap();
        assert_eq!(h.sync_one(1).ok(), Some(()), "one rewrite at a time");
        h.finish_rewrite(1, &path, &keys).unwrap();
        assert!(!file::new_path(&path).exists());
        h.add(1, &key("after", "")).unwrap();
        h.sync().unwrap();
        drop(h);
        let back = file::read_back(&path).unwrap();
        for k in ["before", "during", "after"] {
            assert!(back.keys.contains(&key(k, "")), "{k} lost");
        }
        // "gone" was delivered during the rewrite: its record may stay.
        assert_eq!(back.records, 4);
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
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        h.add(1, &key("a", "b")).unwrap();
        let path = dir.path().join("n2.hints");
        assert_eq!(
            fs::metadata(&path).unwrap().len() as usize,
            record_bytes("a", "b")
        );
        let again =
            Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        assert_eq!(again.count(1), 1, "a second reader sees the unsynced hint");
        let before = fault::syncs();
        h.sync().unwrap();
        assert_eq!(
            fault::syncs(),
            before + 3,
            "sync fsyncs the new record, and the new episode's state file and its directory"
        );
        h.sync().unwrap();
        assert_eq!(fault::syncs(), before + 3, "nothing new, no fsync");
    }

    /// A peer whose deliveries keep partly failing never lets a file empty:
    /// it must be compacted all the same.
    #[test]
    fn files_are_compacted_while_keys_are_still_pending() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
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
        let bound = (2 + COMPACT_SLACK_RECORDS + 100) * record_bytes("r000k000", "");
        assert!(
            len <= bound,
            "the hint file is {len} bytes for one pending key (bound {bound}): never compacted"
        );
        drop(h);
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        // Records of keys delivered since the last compaction come back
        // too (delivering them again is a merge); the pending key must.
        assert!(
            h.pending(1, usize::MAX)
                .iter()
                .any(|(k, _)| *k == key("stuck", "")),
            "the pending key survives compaction"
        );
    }

    #[test]
    fn a_huge_damaged_tail_is_not_read_into_memory() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
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
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak())
            .expect("open reads a hint file as a stream");
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
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
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
        assert_eq!(
            Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak())
                .unwrap()
                .count(1),
            1
        );

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
        assert_eq!(
            Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak())
                .unwrap()
                .count(1),
            0
        );
    }

    const T0: u64 = 1_764_000_000_000;

    fn bounded(window_ms: u64, bytes_max: u64) -> HintLimits {
        HintLimits {
            window_ms,
            bytes_max,
        }
    }

    /// Past the window, a peer's hints are dropped and it needs a repair,
    /// durably; hints for it are dropped until it is seen up, and then a
    /// new episode starts.
    #[test]
    fn hints_past_the_window_are_dropped_and_the_peer_needs_repair() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes, bounded(1000, 1 << 20), Registry::leak()).unwrap();
        h.add_at(1, &key("a", ""), T0).unwrap();
        h.add_at(1, &key("b", ""), T0 + 500).unwrap();
        h.enforce(T0 + 1000).unwrap();
        assert_eq!(h.report(1).pending, 2, "within the window");
        assert_eq!(h.report(1).since_ms, Some(T0));

        h.enforce(T0 + 1001).unwrap();
        let r = h.report(1);
        assert_eq!(
            (r.pending, r.dropped, r.needs_repair),
            (0, 2, true),
            "{r:?}"
        );
        h.add_at(1, &key("c", ""), T0 + 1100).unwrap();
        assert_eq!(h.report(1).dropped, 3, "refused while the peer is away");
        assert_eq!(h.report(1).pending, 0);

        h.seen_up(1);
        h.add_at(1, &key("d", ""), T0 + 2000).unwrap();
        let r = h.report(1);
        assert_eq!(
            (r.pending, r.since_ms, r.needs_repair),
            (1, Some(T0 + 2000), true)
        );
        h.sync().unwrap();
        drop(h);

        let again =
            Hints::open(dir.path(), &nodes, bounded(1000, 1 << 20), Registry::leak()).unwrap();
        let r = again.report(1);
        assert_eq!(
            (r.pending, r.since_ms, r.needs_repair),
            (1, Some(T0 + 2000), true),
            "the episode and the repair flag survive a restart"
        );
        assert_eq!(again.pending(1, 10)[0].0, key("d", ""));
    }

    /// Records past `bytes_max` drop the peer's hints at once.
    #[test]
    fn hints_past_the_size_limit_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        // Keys "k000".."k999": 14 bytes a record; 4200 bytes hold 300.
        let h = Hints::open(
            dir.path(),
            &nodes,
            bounded(u64::MAX, 4200),
            Registry::leak(),
        )
        .unwrap();
        for i in 0..300 {
            h.add_at(1, &key(&format!("k{i:03}"), ""), T0).unwrap();
        }
        assert_eq!(h.report(1).pending, 300);
        assert!(!h.report(1).needs_repair);
        h.add_at(1, &key("k300", ""), T0).unwrap();
        let r = h.report(1);
        assert_eq!(
            (r.pending, r.dropped, r.needs_repair),
            (0, 301, true),
            "{r:?}"
        );
        h.sync().unwrap();
        assert_eq!(fs::metadata(dir.path().join("n2.hints")).unwrap().len(), 0);
    }

    /// Delivering the last pending hint ends the episode: the next hint
    /// starts a window of its own.
    #[test]
    fn delivering_every_hint_ends_the_episode() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        let h = Hints::open(dir.path(), &nodes, bounded(1000, 1 << 20), Registry::leak()).unwrap();
        h.add_at(1, &key("a", ""), T0).unwrap();
        h.delivered(1, &h.pending(1, 10)).unwrap();
        assert_eq!(h.report(1).since_ms, None);
        h.add_at(1, &key("b", ""), T0 + 5000).unwrap();
        h.enforce(T0 + 5500).unwrap();
        let r = h.report(1);
        assert_eq!(
            (r.pending, r.since_ms, r.needs_repair),
            (1, Some(T0 + 5000), false)
        );
    }

    /// A damaged state file reads as needing repair: hints may have been
    /// dropped.
    #[test]
    fn a_damaged_state_file_reads_as_needing_repair() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = [(1, "n2".to_string())];
        fs::write(dir.path().join("n2.state"), b"TALLYHST garbage").unwrap();
        let h = Hints::open(dir.path(), &nodes, HintLimits::default(), Registry::leak()).unwrap();
        assert!(h.report(1).needs_repair);
    }
}
