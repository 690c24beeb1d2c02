//! The file system, as a node changes it: `std::fs`'s calls that write,
//! rename, remove or fsync, each passed through the installed world's
//! [`Disk`] (none in a real process: the call goes straight to the OS).
//! A simulated disk sees every change, so it can fail one (EIO, ENOSPC),
//! and after a crash give back only what was fsync'd: file contents as of
//! their last `fsync`, directory entries as of their directory's.
//!
//! Reads ([`read`], [`metadata`], [`read_dir`], [`File::read_at`]) are
//! `std::fs`'s own: what a process reads is what the OS holds, simulated
//! or not. Clippy's `disallowed-methods` keeps the writing calls of the
//! library crates here.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub use std::fs::{
    Metadata, Permissions, ReadDir, TryLockError, metadata, read, read_dir, read_to_string,
    set_permissions,
};

/// The next open file's [`File::handle`].
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// A change to the file system, as a [`Disk`] sees it.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// `path` is opened to be written (made if missing when `create`,
    /// emptied when `truncate`).
    Open {
        /// The file.
        path: &'a Path,
        /// The number the open file will have ([`File::handle`]).
        handle: u64,
        /// Made if missing.
        create: bool,
        /// Emptied.
        truncate: bool,
    },
    /// `buf` is written to `file` at `at`, or at its cursor (for a file
    /// opened to append: its end) when `None`.
    Write {
        /// The file written.
        file: &'a std::fs::File,
        /// Its number ([`File::handle`]).
        handle: u64,
        /// Where, if not at the cursor.
        at: Option<u64>,
        /// The bytes.
        buf: &'a [u8],
    },
    /// `file` is cut or extended to `len` bytes.
    SetLen {
        /// The file.
        file: &'a std::fs::File,
        /// Its number ([`File::handle`]).
        handle: u64,
        /// Its new length.
        len: u64,
    },
    /// What was written to `file` is made durable (`fsync`, `fdatasync`).
    Sync {
        /// The file.
        file: &'a std::fs::File,
        /// Its number ([`File::handle`]).
        handle: u64,
    },
    /// `from` is renamed `to` (replacing it).
    Rename {
        /// The old name.
        from: &'a Path,
        /// The new name.
        to: &'a Path,
    },
    /// `path` is removed.
    Remove {
        /// The file.
        path: &'a Path,
    },
    /// `to` is made a second name of `from`.
    Link {
        /// The file.
        from: &'a Path,
        /// Its new name.
        to: &'a Path,
    },
    /// The entries of directory `dir` are made durable.
    SyncDir {
        /// The directory.
        dir: &'a Path,
    },
    /// Directory `dir` is made, with its parents.
    CreateDir {
        /// The directory.
        dir: &'a Path,
    },
    /// Directory `dir` is removed, with all it holds.
    RemoveDir {
        /// The directory.
        dir: &'a Path,
    },
}

/// A disk between the nodes and the OS: a simulated one.
pub trait Disk: Send + Sync + 'static {
    /// Does `op` by calling `call` (the OS's call), or fails it instead;
    /// what the disk keeps of it after a crash is its own to decide.
    fn run(&self, op: Op<'_>, call: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()>;
}

/// Runs `op` through the world's disk, if it has one.
fn run(op: Op<'_>, mut call: impl FnMut() -> io::Result<()>) -> io::Result<()> {
    match crate::world().disk() {
        None => call(),
        Some(disk) => disk.run(op, &mut call),
    }
}

/// Like [`std::fs::write`].
pub fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes.as_ref())
}

/// Like [`std::fs::copy`] (but not of permissions): answers the bytes
/// copied.
pub fn copy(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<u64> {
    let mut from = std::fs::File::open(from)?;
    let mut to = File::create(to)?;
    // In pieces: a table may be larger than memory.
    io::copy(&mut from, &mut to)
}

/// Like [`std::fs::rename`].
pub fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (from, to) = (from.as_ref(), to.as_ref());
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    run(Op::Rename { from, to }, || std::fs::rename(from, to))
}

/// Like [`std::fs::remove_file`].
pub fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    run(Op::Remove { path }, || std::fs::remove_file(path))
}

/// Like [`std::fs::hard_link`].
pub fn hard_link(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (from, to) = (from.as_ref(), to.as_ref());
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    run(Op::Link { from, to }, || std::fs::hard_link(from, to))
}

/// Like [`std::fs::create_dir_all`].
pub fn create_dir_all(dir: impl AsRef<Path>) -> io::Result<()> {
    let dir = dir.as_ref();
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    run(Op::CreateDir { dir }, || std::fs::create_dir_all(dir))
}

/// Like [`std::fs::create_dir`].
pub fn create_dir(dir: impl AsRef<Path>) -> io::Result<()> {
    let dir = dir.as_ref();
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    run(Op::CreateDir { dir }, || std::fs::create_dir(dir))
}

/// Like [`std::fs::remove_dir_all`].
pub fn remove_dir_all(dir: impl AsRef<Path>) -> io::Result<()> {
    let dir = dir.as_ref();
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    run(Op::RemoveDir { dir }, || std::fs::remove_dir_all(dir))
}

/// Fsyncs directory `dir`, so that files made, renamed or removed in it
/// survive a crash.
pub fn sync_dir(dir: impl AsRef<Path>) -> io::Result<()> {
    let dir = dir.as_ref();
    #[allow(clippy::disallowed_methods, reason = "the seam itself")]
    run(Op::SyncDir { dir }, || std::fs::File::open(dir)?.sync_all())
}

/// Like [`std::fs::OpenOptions`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    std: std::fs::OpenOptions,
    write: bool,
    append: bool,
    create: bool,
    truncate: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// Options to open a file that exists, for nothing yet.
    pub fn new() -> OpenOptions {
        OpenOptions {
            std: std::fs::OpenOptions::new(),
            write: false,
            append: false,
            create: false,
            truncate: false,
        }
    }

    /// To read it.
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.std.read(on);
        self
    }

    /// To write it.
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.std.write(on);
        self.write |= on;
        self
    }

    /// To append to it.
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.std.append(on);
        self.write |= on;
        self.append = on;
        self
    }

    /// Made if missing.
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.std.create(on);
        self.create |= on;
        self
    }

    /// Made, and refused if it exists.
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.std.create_new(on);
        self.create |= on;
        self
    }

    /// Emptied.
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.std.truncate(on);
        self.truncate = on;
        self
    }

    /// Made with permissions `mode` (Unix).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(&mut self.std, mode);
        self
    }

    /// Opens `path`.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        let mut opened = None;
        let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        let op = Op::Open {
            path,
            handle,
            create: self.create,
            truncate: self.truncate,
        };
        #[allow(clippy::disallowed_methods, reason = "the seam itself")]
        let mut call = || {
            opened = Some(self.std.open(path)?);
            Ok(())
        };
        match self.write || self.create {
            true => run(op, call)?,
            false => call()?,
        }
        let std = opened.ok_or_else(|| io::Error::other("the disk opened nothing"))?;
        Ok(File {
            std,
            handle,
            append: self.append,
        })
    }
}

/// Like [`std::fs::File`]: its writes, length changes and fsyncs pass
/// through the world's [`Disk`].
#[derive(Debug)]
pub struct File {
    std: std::fs::File,
    /// Its number (see [`File::handle`]).
    handle: u64,
    /// Opened to append: every write goes to the end (Linux's positioned
    /// writes too).
    append: bool,
}

impl File {
    /// Opens `path` to read it.
    pub fn open(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(path)
    }

    /// Makes `path` an empty file to write (emptying it if it exists).
    pub fn create(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    /// The OS's file, to read or map it.
    pub fn std(&self) -> &std::fs::File {
        &self.std
    }

    /// This open file's number, given when it was opened and never again
    /// in the process: a [`Disk`] knows the file by it without asking the
    /// OS (a descriptor's number is reused once it is closed).
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// Like [`std::fs::File::sync_all`].
    pub fn sync_all(&self) -> io::Result<()> {
        #[allow(clippy::disallowed_methods, reason = "the seam itself")]
        run(self.sync_op(), || self.std.sync_all())
    }

    /// Like [`std::fs::File::sync_data`].
    pub fn sync_data(&self) -> io::Result<()> {
        #[allow(clippy::disallowed_methods, reason = "the seam itself")]
        run(self.sync_op(), || self.std.sync_data())
    }

    /// Like [`std::fs::File::set_len`].
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        let op = Op::SetLen {
            file: &self.std,
            handle: self.handle,
            len,
        };
        #[allow(clippy::disallowed_methods, reason = "the seam itself")]
        run(op, || self.std.set_len(len))
    }

    /// Like [`FileExt::write_all_at`].
    pub fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()> {
        let op = Op::Write {
            file: &self.std,
            handle: self.handle,
            at: (!self.append).then_some(at),
            buf,
        };
        #[allow(clippy::disallowed_methods, reason = "the seam itself")]
        run(op, || self.std.write_all_at(buf, at))
    }

    /// Like [`FileExt::read_at`].
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        self.std.read_at(buf, at)
    }

    /// Like [`FileExt::read_exact_at`].
    pub fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.std.read_exact_at(buf, at)
    }

    /// Like [`std::fs::File::metadata`].
    pub fn metadata(&self) -> io::Result<Metadata> {
        self.std.metadata()
    }

    /// Like [`std::fs::File::try_lock`].
    pub fn try_lock(&self) -> Result<(), TryLockError> {
        self.std.try_lock()
    }

    fn sync_op(&self) -> Op<'_> {
        Op::Sync {
            file: &self.std,
            handle: self.handle,
        }
    }

    /// Writes all of `buf` at the cursor.
    fn write_at_cursor(&self, buf: &[u8]) -> io::Result<usize> {
        let op = Op::Write {
            file: &self.std,
            handle: self.handle,
            at: None,
            buf,
        };
        #[allow(clippy::disallowed_methods, reason = "the seam itself")]
        run(op, || (&self.std).write_all(buf))?;
        Ok(buf.len())
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_at_cursor(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_at_cursor(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.std.read(buf)
    }
}

impl Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.std).read(buf)
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.std.seek(pos)
    }
}

impl Seek for &File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        (&self.std).seek(pos)
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.std.as_raw_fd()
    }
}

impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.std.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_disk_writes_renames_and_syncs_through_to_the_os() {
        let dir = std::env::temp_dir().join(format!("tally-world-fs-{}", std::process::id()));
        create_dir_all(&dir).unwrap();
        let a = dir.join("a");
        write(&a, b"hello").unwrap();
        let f = OpenOptions::new().append(true).open(&a).unwrap();
        (&f).write_all(b" world").unwrap();
        // (Linux appends a positioned write to a file opened to append.)
        let f = OpenOptions::new().write(true).open(&a).unwrap();
        f.write_all_at(b"J", 0).unwrap();
        f.sync_data().unwrap();
        let b = dir.join("b");
        rename(&a, &b).unwrap();
        sync_dir(&dir).unwrap();
        assert_eq!(read(&b).unwrap(), b"Jello world");
        f.set_len(5).unwrap();
        assert_eq!(read(&b).unwrap(), b"Jello");
        hard_link(&b, &a).unwrap();
        remove_file(&b).unwrap();
        assert_eq!(read(&a).unwrap(), b"Jello");
        assert_eq!(copy(&a, &b).unwrap(), 5);
        assert_eq!(read(&b).unwrap(), b"Jello");
        remove_dir_all(&dir).unwrap();
        assert!(!dir.exists());
    }
}
