//! The engine's error type: callers can tell corruption from I/O from misuse.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong inside the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call failed; `op` says which, `path` on what.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation, as a verb phrase ("open commit log segment").
        op: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Bytes on disk are not what was written: a checksum mismatch, a bad
    /// magic number, an impossible length.
    #[error("{reason} in {} at offset {offset}", file.display())]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damaged record, block or footer.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// An fsync failed, or an engine thread panicked, earlier; the engine
    /// accepts no more writes because it cannot know what reached the disk.
    #[error("engine is poisoned and accepts no writes: {0}")]
    Poisoned(String),
    /// The partition key is longer than [`crate::PARTITION_BYTES_MAX`].
    #[error("partition key is {len} bytes; the limit is {max}")]
    PartitionTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The column name is longer than [`crate::COLUMN_BYTES_MAX`].
    #[error("column name is {len} bytes; the limit is {max}")]
    ColumnTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Adding `delta` would take the counter (or this node's shard of it)
    /// outside the range of an `i64`; the add was refused.
    #[error("adding {delta} to {value} would overflow a 64-bit counter")]
    Overflow {
        /// The value the add was applied to.
        value: i64,
        /// The refused delta.
        delta: i64,
    },
    /// A cell arrived with more shards than any real cluster can produce.
    #[error("cell has {count} shards; the limit is {max}")]
    TooManyShards {
        /// Its shard count.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Another process holds this data directory.
    #[error("data directory {} is in use by another process", .0.display())]
    Locked(PathBuf),
    /// The engine was shut down while the request was in flight.
    #[error("engine is shut down")]
    Closed,
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds an [`Error::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corruption`].
    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}
