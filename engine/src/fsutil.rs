//! Small file-system helpers that keep the crash story honest.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// Fsyncs a directory, so that files created, renamed or removed in it
/// survive a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync directory", dir, e))
}

/// Lists the files in `dir` named `<number>.<ext>`, sorted by number.
pub fn numbered_files(dir: &Path, ext: &str) -> Result<Vec<(u64, std::path::PathBuf)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list directory", dir, e))?;
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
