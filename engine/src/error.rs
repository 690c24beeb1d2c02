//! The engine's error type: callers can tell corruption from I/O from misuse.

use std::io;
use std::path::PathBuf;

use crate::limits::{CLOCK_MAX, Limit, ListTooLong, SHARDS_MAX};

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
    /// The column starts with the byte reserved for unique counters (see
    /// `unique`).
    #[error("column names starting with byte 0xff are reserved")]
    ReservedColumn,
    /// A unique counter's member is longer than [`crate::unique::MEMBER_BYTES_MAX`].
    #[error("member is {len} bytes; the limit is {max}")]
    MemberTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The counter's deadline passed, and the caller has not confirmed its
    /// restart (`add::OnExpired::Confirmed`): the add was refused, and is
    /// made again once the caller confirmed ([`crate::Engine::confirm_restart`]).
    #[error("the counter's deadline passed (epoch {}); its restart is not confirmed", epoch.n)]
    Expired {
        /// The epoch it ended.
        epoch: tally_model::Epoch,
    },
    /// Adding `delta` would take the counter (or this node's shard of it)
    /// outside the range of an `i64`, or leave it there; the add was refused.
    #[error("adding {delta} to {value} would overflow a 64-bit counter")]
    Overflow {
        /// The value the add was applied to: the exact sum of the shards,
        /// which replicas' shards may already have taken past an `i64`.
        value: i128,
        /// The refused delta.
        delta: i64,
    },
    /// A cell would hold more shards than any reader accepts (see
    /// [`crate::cell::SHARDS_MAX`]): one arrived that wide, or a merge or a
    /// leader's new shard would make it so. Refused, nothing changed.
    #[error("cell would have {count} shards; the limit is {max}")]
    TooManyShards {
        /// The shard count it would have.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A write the key's value does not allow (see [`Refusal`]). Refused,
    /// nothing changed.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A list change would make the list longer than the limit. Refused,
    /// nothing changed.
    #[error(transparent)]
    ListTooLong(#[from] ListTooLong),
    /// A clock, an epoch or a deadline's stamp is too close to `u64::MAX`
    /// to move on without wrapping (see [`crate::cell::CLOCK_MAX`]).
    /// Refused, nothing changed.
    #[error("{what} {value} is past {max}, too close to the end of its range to move on")]
    ClockExhausted {
        /// `"clock"`, `"epoch"` or `"stamp"`.
        what: &'static str,
        /// The clock, epoch or stamp.
        value: u64,
        /// The largest one a cell takes.
        max: u64,
    },
    /// The disk had no room for a write already applied in memory (ENOSPC,
    /// EDQUOT, EFBIG): `op` on `path` failed. Its record waits in memory
    /// and reaches the log with the next write that finds room, unless the
    /// process stops first: the outcome is unknown.
    #[error("no space left for {op} {}: {source}; the write may still be applied", path.display())]
    NoSpace {
        /// The operation, as a verb phrase.
        op: &'static str,
        /// The file it was applied to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The disk is full (the string says which part found it so): the
    /// write was refused before it changed anything. Writes are taken
    /// again once there is room.
    #[error("the disk is full ({0}): write refused, nothing changed")]
    DiskFull(String),
    /// Ids sent with a shard of a retired incarnation whose node has
    /// asked for its tail already (see `ids::tail`): refused, nothing changed.
    #[error("ids of retired incarnation {counter_id:#018x} refused: its node learned its tail")]
    Fenced {
        /// The retired incarnation.
        counter_id: u64,
    },
    /// An operation id outside its bounds (see [`crate::ids::OpId`]).
    #[error("bad operation id: {0}")]
    BadOpId(String),
    /// This operation id was applied before with another delta: refused,
    /// nothing changed.
    #[error("operation id was used before with delta {delta_was}, not {delta}: refused")]
    IdConflict {
        /// The delta it was applied with.
        delta_was: i64,
        /// The delta of this add.
        delta: i64,
    },
    /// This operation id is older than the retention window: whether it
    /// was applied is no longer known, and it is not applied again.
    #[error(
        "operation id is older than the {window_ms} ms retention window: whether it was applied is unknown, and it is not applied again"
    )]
    IdExpired {
        /// The retention window.
        window_ms: u64,
    },
    /// An add with an id of a client the ledger does not know, while it
    /// remembers as many clients as its budget: refused, nothing changed;
    /// safe to retry once idle clients are forgotten.
    #[error(
        "operation ids of {clients_max} clients are remembered, the node's budget ([cluster.ids] clients_max): an add with a new client id is not applied; retry it later, or reuse a client id"
    )]
    IdsFull {
        /// The budget.
        clients_max: usize,
    },
    /// Another process holds this data directory.
    #[error("data directory {} is in use by another process", .0.display())]
    Locked(PathBuf),
    /// The engine was shut down while the request was in flight.
    #[error("engine is shut down")]
    Closed,
    /// The engine's options do not go together.
    #[error("engine options: {0}")]
    Options(String),
}

/// Why a write was refused by what the key holds, nothing changed: the
/// request, not the engine, is at fault. Each front door words these in
/// its own protocol (the node renders Redis' errors for RESP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An add to, or a list change of, a key that holds the other kind of
    /// value (a list; a counter).
    #[error("the key holds another kind of value")]
    WrongType,
    /// A change of an element of a key that holds nothing (`LSET`).
    #[error("no such key")]
    NoSuchKey,
    /// A change of an element past either end of the list (`LSET`).
    #[error("index out of range")]
    IndexOutOfRange,
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Limit> for Error {
    fn from(limit: Limit) -> Error {
        match limit {
            Limit::WrongType => Error::Refused(Refusal::WrongType),
            Limit::Expired(epoch) => Error::Expired { epoch },
            Limit::Shards { count } => Error::TooManyShards {
                count,
                max: SHARDS_MAX,
            },
            Limit::Clock { what, value } => Error::ClockExhausted {
                what,
                value,
                max: CLOCK_MAX,
            },
        }
    }
}

impl Error {
    /// Builds an [`Error::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// An [`Error::Io`], or [`Error::NoSpace`] when `source` says the disk
    /// had no room.
    pub(crate) fn io_or_space(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: io::Error,
    ) -> Self {
        if is_out_of_space(&source) {
            Error::NoSpace {
                op,
                path: path.into(),
                source,
            }
        } else {
            Error::io(op, path, source)
        }
    }

    /// Whether a write to the commit log found no room ([`Error::NoSpace`],
    /// made by the log's writes only). A failed fsync is never this, whatever
    /// its errno: the kernel may have dropped the pages it could not write,
    /// so the engine must poison itself rather than wait for room.
    pub(crate) fn is_log_out_of_space(&self) -> bool {
        matches!(self, Error::NoSpace { .. })
    }

    /// Whether the disk had no room for what failed (a flush's table: its
    /// data is in the commit log, so even a failed fsync of it only means
    /// the flush is tried again).
    pub(crate) fn is_out_of_space(&self) -> bool {
        match self {
            Error::NoSpace { .. } => true,
            Error::Io { source, .. } => is_out_of_space(source),
            _ => false,
        }
    }

    /// A copy of an [`Error::NoSpace`], for each of the waiters it answers.
    pub(crate) fn no_space_again(&self) -> Option<Error> {
        match self {
            Error::NoSpace { op, path, source } => Some(Error::NoSpace {
                op,
                path: path.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            }),
            _ => None,
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

/// Whether an I/O error means the disk (or the quota, or the file size
/// limit) has no room for the write: ENOSPC, EDQUOT, EFBIG.
fn is_out_of_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_full_disk_counts_as_one() {
        for kind in [
            io::ErrorKind::StorageFull,
            io::ErrorKind::QuotaExceeded,
            io::ErrorKind::FileTooLarge,
        ] {
            assert!(is_out_of_space(&io::Error::from(kind)), "{kind:?}");
        }
        assert!(is_out_of_space(
            &io::Error::from_raw_os_error(libc_enospc())
        ));
        for kind in [io::ErrorKind::Other, io::ErrorKind::PermissionDenied] {
            assert!(!is_out_of_space(&io::Error::from(kind)), "{kind:?}");
        }
    }

    /// ENOSPC on Linux.
    fn libc_enospc() -> i32 {
        28
    }
}
