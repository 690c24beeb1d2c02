//! Small file-system helpers that keep the crash story honest.

use std::path::Path;
use tally_world::fs::File;

use crate::error::{Error, Result};

/// Fsyncs a directory, so that files created, renamed or removed in it
/// survive a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    tally_world::fs::sync_dir(dir).map_err(|e| Error::io("fsync directory", dir, e))
}

/// Replaces `path` (in `dir`) with `bytes`, durably and whole: written to
/// `<path>.tmp`, fsync'd, renamed into place, the directory fsync'd. `what`
/// names the file in errors ("identity").
pub fn replace_file(dir: &Path, path: &Path, bytes: &[u8], what: &'static str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    tally_world::fs::write(&tmp, bytes)
        .and_then(|()| File::open(&tmp)?.sync_all())
        .map_err(|e| Error::io(what, &tmp, e))?;
    tally_world::fs::rename(&tmp, path).map_err(|e| Error::io(what, path, e))?;
    sync_dir(dir)
}

/// Lists the files in `dir` named `<number>.<ext>`, sorted by number.
pub fn numbered_files(dir: &Path, ext: &str) -> Result<Vec<(u64, std::path::PathBuf)>> {
    let mut out = Vec::new();
    let entries =
        tally_world::fs::read_dir(dir).map_err(|e| Error::io("list directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list directory", dir, e))?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(ext) {
            continue;
        }
        if let Some(n) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
        {
            out.push((n, path));
        }
    }
    out.sort();
    Ok(out)
}

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshotted {
    /// Files linked (SSTables and ids files).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Hard-links `from` into `dir` under its own name; adds it to `done`.
pub(crate) fn link(from: &Path, dir: &Path, done: &mut Snapshotted) -> Result<()> {
    let name = from.file_name().ok_or_else(|| {
        Error::io(
            "link into a snapshot",
            from,
            std::io::ErrorKind::InvalidInput.into(),
        )
    })?;
    let to = dir.join(name);
    tally_world::fs::hard_link(from, &to).map_err(|e| Error::io("link into a snapshot", &to, e))?;
    done.files += 1;
    done.bytes += tally_world::fs::metadata(&to).map(|m| m.len()).unwrap_or(0);
    Ok(())
}
