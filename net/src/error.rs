//! Errors as they travel, in a form both protocols carry (`wire`
//! re-exports them).

use bincode::{Decode, Encode};

/// What went wrong, in a form both protocols carry. Whether a write that
/// failed so may have happened is [`WireError::outcome`], not the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum ErrorKind {
    /// Too few live replicas.
    Unavailable,
    /// The deadline passed.
    Timeout,
    /// The add would overflow an i64.
    Overflow,
    /// The request is malformed or out of bounds.
    Invalid,
    /// The node cannot write (its engine is poisoned or closing).
    Storage,
    /// A bug or an unexpected state; the message says more.
    Internal,
    /// An add's operation id was used before with another delta: refused,
    /// nothing applied.
    IdConflict,
    /// An add's operation id is older than the retention window: whether
    /// it was applied is no longer known, and it is not applied again.
    IdExpired,
    /// The node has users and the connection has not logged in.
    NoAuth,
    /// A wrong user or password, or a role that may not do this.
    Denied,
    /// A counter's request of a list key, or a list's of a counter.
    WrongType,
}

impl ErrorKind {
    /// The outcome an error of this kind has unless whoever raised it knows
    /// better (see [`WireError::not_applied`] and [`WireError::unknown`]).
    /// A storage error is unknown: an fsync can fail after the shard
    /// reached other replicas.
    pub const fn default_outcome(self) -> Outcome {
        match self {
            ErrorKind::Unavailable
            | ErrorKind::Overflow
            | ErrorKind::Invalid
            | ErrorKind::IdConflict
            | ErrorKind::NoAuth
            | ErrorKind::Denied
            | ErrorKind::WrongType => Outcome::NotApplied,
            ErrorKind::Timeout
            | ErrorKind::Storage
            | ErrorKind::Internal
            | ErrorKind::IdExpired => Outcome::Unknown,
        }
    }
}

/// What the caller of a failed write may conclude about it.
///
/// It is part of the error so that nobody has to read the message: only
/// [`Outcome::NotApplied`] makes a retry safe for an add, which is not
/// idempotent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum Outcome {
    /// Certainly not applied, anywhere: retrying cannot count it twice.
    NotApplied,
    /// May or may not have been applied, on some replicas or all.
    Unknown,
}

/// An error as it travels. On the wire: the kind, the message, the outcome.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct WireError {
    /// The class of error, for programs.
    pub kind: ErrorKind,
    /// One line for people.
    pub message: String,
    /// Whether a write that failed so may have happened; for programs.
    pub outcome: Outcome,
}

impl WireError {
    /// Builds an error with the outcome its kind implies
    /// ([`ErrorKind::default_outcome`]).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> WireError {
        WireError::with_outcome(kind, kind.default_outcome(), message)
    }

    /// Builds an error that certainly left nothing applied, whatever its
    /// kind (a storage error from an engine poisoned before the write).
    pub fn not_applied(kind: ErrorKind, message: impl Into<String>) -> WireError {
        WireError::with_outcome(kind, Outcome::NotApplied, message)
    }

    /// Builds an error after which a write may or may not have been
    /// applied, whatever its kind (unavailable after a forward timed out).
    pub fn unknown(kind: ErrorKind, message: impl Into<String>) -> WireError {
        WireError::with_outcome(kind, Outcome::Unknown, message)
    }

    fn with_outcome(kind: ErrorKind, outcome: Outcome, message: impl Into<String>) -> WireError {
        WireError {
            kind,
            message: message.into(),
            outcome,
        }
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Overflow => "overflow",
            ErrorKind::Invalid => "invalid request",
            ErrorKind::Storage => "storage error",
            ErrorKind::Internal => "internal error",
            ErrorKind::IdConflict => "operation id conflict",
            ErrorKind::IdExpired => "outcome unknown",
            ErrorKind::NoAuth => "authentication required",
            ErrorKind::Denied => "denied",
            ErrorKind::WrongType => "wrong type",
        };
        write!(f, "{what}: {}", self.message)
    }
}
