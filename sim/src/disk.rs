//! The simulated disk: the nodes' files are real files (on tmpfs), but
//! every change reaches them through [`SimDisk`] (the world's
//! [`Disk`]), which keeps what a power cut would leave: each file's
//! contents as of its last fsync, each directory's entries as of its last
//! fsync. A node's crash gives its directory back only that (strict POSIX,
//! as ALICE and LazyFS model it: a file made and fsync'd but whose
//! directory was not is gone; a rename not followed by the directory's
//! fsync is undone).
//!
//! A node's disk can also fail for a while: every change fails with EIO
//! (and, as Linux does, an fsync that failed forgets the writes it was to
//! make durable: a later fsync does not bring them back), or it is full:
//! a write or `set_len` that grows a file fails with ENOSPC.
//!
//! Each node's data directory is one volume. Directories themselves are
//! kept from when they are made (only files are judged). One run at a
//! time per thread; each thread keeps its own.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{self, Seek};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tally_world::fs::{Disk, Op};

/// The data directory's lock file: held by a run until its last task lets
/// go, so a crash leaves it as it is.
const LOCK: &str = "LOCK";

/// What a failing disk does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Every change fails (EIO).
    Failing,
    /// A write or `set_len` that grows a file fails (ENOSPC).
    Full,
}

/// The world's disk; its state is the running thread's.
#[derive(Debug, Clone, Copy)]
pub struct SimDisk;

/// A file, as the disk knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct FileId(u64);

#[derive(Debug, Default)]
struct Contents {
    volume: Option<usize>,
    /// Its extension when it was made (`log`).
    ext: Option<OsString>,
    /// What a crash leaves of it.
    durable: Vec<u8>,
    /// Its changes since the last fsync, in order (the page cache's).
    pending: Vec<Change>,
}

/// A change to a file's bytes.
#[derive(Debug)]
enum Change {
    Write { at: u64, bytes: Vec<u8> },
    SetLen(u64),
}

impl Change {
    /// Makes the change to `bytes`.
    fn apply(self, bytes: &mut Vec<u8>) {
        match self {
            Change::Write { at, bytes: new } => {
                let at = at as usize;
                if bytes.len() < at + new.len() {
                    bytes.resize(at + new.len(), 0);
                }
                bytes[at..at + new.len()].copy_from_slice(&new);
            }
            Change::SetLen(len) => bytes.resize(len as usize, 0),
        }
    }
}

#[derive(Debug)]
struct Volume {
    root: PathBuf,
    /// Crashed: nothing changes it until its node starts again.
    down: bool,
    fault: Option<Fault>,
    /// A broken build: fsyncs of files with this extension do nothing.
    unsynced: Option<&'static str>,
}

#[derive(Debug, Default)]
struct State {
    volumes: Vec<Volume>,
    /// Live files by the OS's inode number.
    inodes: HashMap<u64, FileId>,
    /// Files opened to write, by their handle (`File::handle`): found
    /// without a `statx` of the descriptor on every write.
    handles: HashMap<u64, FileId>,
    files: HashMap<FileId, Contents>,
    /// Each fsync'd directory's entries, as of its last fsync.
    dirs: HashMap<PathBuf, BTreeMap<OsString, FileId>>,
    next: u64,
}

/// A file a directory keeps through a crash: its name, the file, and
/// what it holds.
type Kept = (OsString, FileId, Vec<u8>);

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

fn with<T>(f: impl FnOnce(&mut State) -> T) -> Option<T> {
    STATE.with(|s| s.borrow_mut().as_mut().map(f))
}

impl SimDisk {
    /// Starts this thread's disk for a run: it keeps nothing yet.
    pub fn begin() {
        STATE.with(|s| *s.borrow_mut() = Some(State::default()));
    }

    /// Ends this thread's run's disk.
    pub fn end() {
        STATE.with(|s| *s.borrow_mut() = None);
    }

    /// Makes `root` (a node's data directory) volume number `i`, the
    /// order they are mounted in.
    pub fn mount(root: &Path) -> usize {
        with(|s| {
            s.volumes.push(Volume {
                root: root.to_path_buf(),
                down: false,
                fault: None,
                unsynced: None,
            });
            s.volumes.len() - 1
        })
        .unwrap_or(0)
    }

    /// Volume `i` fails as `fault` says, or works again (`None`).
    pub fn set_fault(i: usize, fault: Option<Fault>) {
        with(|s| s.volumes[i].fault = fault);
    }

    /// A broken build on volume `i`: fsyncs of files named `*.ext` do
    /// nothing (a commit log that acknowledges before its fsync, or a
    /// disk whose cache lies).
    pub fn ignore_syncs(i: usize, ext: &'static str) {
        with(|s| s.volumes[i].unsynced = Some(ext));
    }

    /// Volume `i`'s node crashed: its directory is cut back to what was
    /// fsync'd, and nothing changes it until [`SimDisk::up`].
    pub fn crash(i: usize) -> io::Result<()> {
        with(|s| s.crash(i)).unwrap_or(Ok(()))
    }

    /// Volume `i`'s node starts again.
    pub fn up(i: usize) {
        with(|s| s.volumes[i].down = false);
    }

    /// Volume `i`'s disk is replaced by an empty one.
    pub fn wipe(i: usize) -> io::Result<()> {
        let root = with(|s| {
            s.forget(i);
            s.volumes[i].root.clone()
        });
        match root {
            #[allow(clippy::disallowed_methods, reason = "the disk's own change")]
            Some(root) => match std::fs::remove_dir_all(&root) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }
}

impl Disk for SimDisk {
    fn run(&self, op: Op<'_>, call: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
        let before = with(|s| s.before(&op)).unwrap_or(Ok(Before::Go(None)));
        match before? {
            Before::Fail(e) => Err(e),
            Before::Skip => Ok(()),
            Before::Go(file) => {
                call()?;
                with(|s| s.after(&op, file)).unwrap_or(Ok(()))
            }
            Before::Existed(existed) => {
                call()?;
                with(|s| s.opened(&op, existed));
                Ok(())
            }
        }
    }
}

/// What the disk decides before a change.
enum Before {
    /// Do it; it changes this file, if the disk knows it.
    Go(Option<FileId>),
    /// Fail it.
    Fail(io::Error),
    /// Answer that it was done, and do nothing.
    Skip,
    /// An open, of a file that existed as this inode (if it did).
    Existed(Option<u64>),
}

/// Whether `op` (a write or `set_len`) makes its file longer.
fn grows(op: &Op<'_>) -> io::Result<bool> {
    Ok(match *op {
        Op::Write { at: None, .. } => true,
        Op::Write {
            file,
            at: Some(at),
            buf,
            ..
        } => at + buf.len() as u64 > file.metadata()?.len(),
        Op::SetLen { file, len, .. } => len > file.metadata()?.len(),
        _ => false,
    })
}

fn inode(file: &std::fs::File) -> io::Result<u64> {
    Ok(file.metadata()?.ino())
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

impl State {
    fn volume_of(&self, path: &Path) -> Option<usize> {
        self.volumes.iter().position(|v| path.starts_with(&v.root))
    }

    /// The file open as `handle` (the OS's `file`), and its volume.
    fn volume_of_file(&self, file: &std::fs::File, handle: u64) -> Option<(FileId, Option<usize>)> {
        let id = match self.handles.get(&handle) {
            Some(id) => *id,
            // Opened only to read (an fsync of it, or of a directory).
            None => *self.inodes.get(&inode(file).ok()?)?,
        };
        Some((id, self.files.get(&id)?.volume))
    }

    fn before(&mut self, op: &Op<'_>) -> io::Result<Before> {
        let volume = match *op {
            Op::Open { path, .. } => {
                if let Some(e) = self.refuse(self.volume_of(path)) {
                    return Ok(Before::Fail(e));
                }
                let existed = std::fs::symlink_metadata(path).ok().map(|m| m.ino());
                return Ok(Before::Existed(existed));
            }
            Op::Write { file, handle, .. } | Op::SetLen { file, handle, .. } => {
                let Some((id, volume)) = self.volume_of_file(file, handle) else {
                    return Ok(Before::Go(None));
                };
                if let Some(e) = self.refuse(volume) {
                    return Ok(Before::Fail(e));
                }
                let full = volume.is_some_and(|v| self.volumes[v].fault == Some(Fault::Full));
                if full && grows(op)? {
                    return Ok(Before::Fail(enospc()));
                }
                return Ok(Before::Go(Some(id)));
            }
            Op::Sync { file, handle } => {
                let Some((id, volume)) = self.volume_of_file(file, handle) else {
                    return Ok(Before::Go(None));
                };
                if self.ignores_sync(id) {
                    return Ok(Before::Skip);
                }
                let Some(e) = self.refuse(volume) else {
                    return Ok(Before::Go(Some(id)));
                };
                if let Some(c) = self.files.get_mut(&id) {
                    // Linux marks the pages clean: what they held is lost.
                    c.pending.clear();
                }
                return Ok(Before::Fail(e));
            }
            Op::Rename { from: path, .. }
            | Op::Remove { path }
            | Op::Link { from: path, .. }
            | Op::SyncDir { dir: path }
            | Op::CreateDir { dir: path }
            | Op::RemoveDir { dir: path } => self.volume_of(path),
        };
        Ok(self.refuse(volume).map_or(Before::Go(None), Before::Fail))
    }

    /// Whether a broken build skips fsyncs of file `id`.
    fn ignores_sync(&self, id: FileId) -> bool {
        let Some(c) = self.files.get(&id) else {
            return false;
        };
        let unsynced = c.volume.and_then(|v| self.volumes[v].unsynced);
        unsynced.is_some_and(|ext| c.ext.as_deref() == Some(ext.as_ref()))
    }

    /// The error a change to `volume` fails with (one that does not grow
    /// a file), if it does.
    fn refuse(&self, volume: Option<usize>) -> Option<io::Error> {
        let v = &self.volumes[volume?];
        match (v.down, v.fault) {
            (true, _) | (_, Some(Fault::Failing)) => Some(eio()),
            _ => None,
        }
    }

    fn new_file(&mut self, path: &Path, durable: Vec<u8>) -> FileId {
        self.next += 1;
        let id = FileId(self.next);
        let contents = Contents {
            volume: self.volume_of(path),
            ext: path.extension().map(|e| e.to_os_string()),
            durable,
            pending: Vec::new(),
        };
        self.files.insert(id, contents);
        id
    }

    fn opened(&mut self, op: &Op<'_>, existed: Option<u64>) {
        let Op::Open {
            path,
            handle,
            truncate,
            ..
        } = *op
        else {
            return;
        };
        let Ok(ino) = std::fs::metadata(path).map(|m| m.ino()) else {
            return;
        };
        let known = self.inodes.get(&ino).copied();
        let id = match known {
            Some(id) if existed == Some(ino) => {
                if truncate && let Some(c) = self.files.get_mut(&id) {
                    c.pending.push(Change::SetLen(0));
                }
                id
            }
            Some(_) | None if existed != Some(ino) => {
                // A new file (or an inode number the OS gave again).
                self.new_file(path, Vec::new())
            }
            _ => {
                // Made before the disk knew it: durable as it was.
                let durable = match truncate {
                    true => Vec::new(),
                    false => std::fs::read(path).unwrap_or_default(),
                };
                self.new_file(path, durable)
            }
        };
        self.inodes.insert(ino, id);
        self.handles.insert(handle, id);
    }

    fn after(&mut self, op: &Op<'_>, id: Option<FileId>) -> io::Result<()> {
        let Some(id) = id else {
            return match *op {
                Op::SyncDir { dir } => self.dir_synced(dir),
                // An fsync of a directory opened as a file.
                Op::Sync { file, .. } if file.metadata()?.is_dir() => {
                    let dir = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
                    self.dir_synced(&dir)
                }
                _ => Ok(()),
            };
        };
        let change = match *op {
            Op::Write { file, at, buf, .. } => {
                let at = match at {
                    Some(at) => at,
                    None => (&*file).stream_position()?.saturating_sub(buf.len() as u64),
                };
                let bytes = buf.to_vec();
                Change::Write { at, bytes }
            }
            Op::SetLen { len, .. } => Change::SetLen(len),
            Op::Sync { .. } => {
                self.synced(id);
                return Ok(());
            }
            _ => return Ok(()),
        };
        if let Some(c) = self.files.get_mut(&id) {
            c.pending.push(change);
        }
        Ok(())
    }

    /// File `id` was fsync'd: its changes since the last fsync are
    /// durable now. Changes an earlier, failed fsync lost stay lost: later
    /// ones land on what was durable (zeros where it was shorter).
    fn synced(&mut self, id: FileId) {
        if let Some(c) = self.files.get_mut(&id) {
            for change in c.pending.drain(..) {
                change.apply(&mut c.durable);
            }
        }
    }

    /// `dir`'s entries are durable as they are now.
    fn dir_synced(&mut self, dir: &Path) -> io::Result<()> {
        let mut entries = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if !meta.is_file() {
                continue;
            }
            let id = match self.inodes.get(&meta.ino()) {
                Some(id) => *id,
                None => {
                    // Made before the disk knew it: durable as it is.
                    let id = self.new_file(&entry.path(), std::fs::read(entry.path())?);
                    self.inodes.insert(meta.ino(), id);
                    id
                }
            };
            entries.insert(entry.file_name(), id);
        }
        self.dirs.insert(dir.to_path_buf(), entries);
        Ok(())
    }

    /// Forgets what volume `i` held.
    fn forget(&mut self, i: usize) {
        self.files.retain(|_, c| c.volume != Some(i));
        let files = &self.files;
        self.inodes.retain(|_, id| files.contains_key(id));
        self.handles.retain(|_, id| files.contains_key(id));
        let root = self.volumes[i].root.clone();
        self.dirs.retain(|d, _| !d.starts_with(&root));
    }

    fn crash(&mut self, i: usize) -> io::Result<()> {
        self.volumes[i].down = true;
        self.volumes[i].fault = None;
        let root = self.volumes[i].root.clone();
        let mut dirs = Vec::new();
        walk(&root, &mut dirs)?;
        // What each directory holds after the crash, read before any is
        // touched (a file can have a name in two).
        let kept: Vec<(PathBuf, Vec<Kept>)> = dirs
            .into_iter()
            .map(|d| {
                let entries = self.dirs.get(&d).cloned().unwrap_or_default();
                let files = entries
                    .into_iter()
                    .filter(|(name, _)| name != LOCK)
                    .map(|(name, id)| {
                        let bytes = self.files.get(&id).map(|c| c.durable.clone());
                        (name, id, bytes.unwrap_or_default())
                    })
                    .collect();
                (d, files)
            })
            .collect();
        self.forget(i);
        for (dir, files) in kept {
            self.restore(&dir, files)?;
        }
        Ok(())
    }

    /// Replaces the files in `dir` with `files`, all durable.
    #[allow(clippy::disallowed_methods, reason = "the disk's own changes")]
    fn restore(&mut self, dir: &Path, files: Vec<(OsString, FileId, Vec<u8>)>) -> io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() && entry.file_name() != LOCK {
                std::fs::remove_file(entry.path())?;
            }
        }
        let mut written: HashMap<FileId, (PathBuf, FileId)> = HashMap::new();
        let mut entries = BTreeMap::new();
        for (name, old, bytes) in files {
            let path = dir.join(&name);
            let id = match written.get(&old) {
                Some((first, id)) => {
                    std::fs::hard_link(first, &path)?;
                    *id
                }
                None => {
                    std::fs::write(&path, &bytes)?;
                    let id = self.new_file(&path, bytes);
                    written.insert(old, (path.clone(), id));
                    id
                }
            };
            self.inodes.insert(std::fs::metadata(&path)?.ino(), id);
            entries.insert(name, id);
        }
        self.dirs.insert(dir.to_path_buf(), entries);
        Ok(())
    }
}

/// `dir` and every directory under it.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        entries => entries?,
    };
    out.push(dir.to_path_buf());
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use std::io::Write;

    use tally_world::fs::{self, OpenOptions};

    use super::*;
    use crate::world::SimWorld;

    /// A run's disk on this thread, with one volume in a fresh directory.
    fn volume() -> tempfile::TempDir {
        SimWorld::install().unwrap();
        SimDisk::begin();
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(SimDisk::mount(dir.path()), 0);
        dir
    }

    fn append(path: &Path, bytes: &[u8]) -> fs::File {
        let f = OpenOptions::new().append(true).open(path).unwrap();
        (&f).write_all(bytes).unwrap();
        f
    }

    #[test]
    fn a_crash_keeps_what_was_fsynced_and_the_entries_of_synced_directories() {
        let dir = volume();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        fs::write(&a, b"one").unwrap();
        fs::File::open(&a).unwrap().sync_all().unwrap();
        fs::write(&c, b"old").unwrap();
        fs::File::open(&c).unwrap().sync_all().unwrap();
        fs::sync_dir(dir.path()).unwrap();
        append(&a, b" two");
        // Made and fsync'd, but its directory was not.
        fs::write(&b, b"bee").unwrap();
        fs::File::open(&b).unwrap().sync_all().unwrap();
        // Renamed over a durable file, the directory not fsync'd after.
        let tmp = dir.path().join("c.tmp");
        fs::write(&tmp, b"new").unwrap();
        fs::File::open(&tmp).unwrap().sync_all().unwrap();
        fs::rename(&tmp, &c).unwrap();
        assert_eq!(fs::read(&c).unwrap(), b"new");

        SimDisk::crash(0).unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"one");
        assert!(!b.exists(), "its directory was not fsync'd");
        assert_eq!(fs::read(&c).unwrap(), b"old", "the rename is undone");
        assert!(!tmp.exists());
        // Down until its node starts again.
        assert_eq!(fs::write(&b, b"x").unwrap_err().raw_os_error(), Some(5));
        SimDisk::up(0);
        fs::write(&b, b"x").unwrap();
        SimDisk::end();
    }

    #[test]
    fn a_directory_fsynced_through_a_handle_keeps_its_entries() {
        let dir = volume();
        let a = dir.path().join("a");
        fs::write(&a, b"one").unwrap();
        fs::File::open(&a).unwrap().sync_all().unwrap();
        fs::File::open(dir.path()).unwrap().sync_data().unwrap();
        SimDisk::crash(0).unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"one");
        SimDisk::end();
    }

    #[test]
    fn an_fsync_that_failed_loses_its_writes_for_good() {
        let dir = volume();
        let a = dir.path().join("a");
        fs::write(&a, b"one").unwrap();
        fs::File::open(&a).unwrap().sync_all().unwrap();
        fs::sync_dir(dir.path()).unwrap();
        let f = append(&a, b"X");
        SimDisk::set_fault(0, Some(Fault::Failing));
        assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(5));
        SimDisk::set_fault(0, None);
        (&f).write_all(b"y").unwrap();
        f.sync_data().unwrap();
        SimDisk::crash(0).unwrap();
        assert_eq!(
            fs::read(&a).unwrap(),
            b"one\0y",
            "the X is lost, as Linux loses it"
        );
        SimDisk::end();
    }

    #[test]
    fn a_full_disk_refuses_only_what_grows_a_file() {
        let dir = volume();
        let a = dir.path().join("a");
        fs::write(&a, [0u8; 10]).unwrap();
        let f = OpenOptions::new().write(true).open(&a).unwrap();
        SimDisk::set_fault(0, Some(Fault::Full));
        f.write_all_at(b"in place", 2).unwrap();
        assert_eq!(
            f.write_all_at(b"beyond", 8).unwrap_err().raw_os_error(),
            Some(28)
        );
        assert_eq!(f.set_len(20).unwrap_err().raw_os_error(), Some(28));
        assert_eq!(append(&a, b"").metadata().unwrap().len(), 10);
        f.set_len(4).unwrap();
        f.sync_all().unwrap();
        SimDisk::set_fault(0, None);
        f.set_len(20).unwrap();
        SimDisk::end();
    }

    #[test]
    fn a_broken_build_s_fsyncs_of_logs_do_nothing() {
        let dir = volume();
        SimDisk::ignore_syncs(0, "log");
        let (log, table) = (dir.path().join("1.log"), dir.path().join("1.sst"));
        fs::write(&log, b"records").unwrap();
        fs::write(&table, b"cells").unwrap();
        fs::File::open(&log).unwrap().sync_all().unwrap();
        fs::File::open(&table).unwrap().sync_all().unwrap();
        fs::sync_dir(dir.path()).unwrap();
        SimDisk::crash(0).unwrap();
        assert_eq!(fs::read(&log).unwrap(), b"");
        assert_eq!(fs::read(&table).unwrap(), b"cells");
        SimDisk::end();
    }
}
