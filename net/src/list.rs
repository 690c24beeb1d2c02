//! Lists on the wire: the changes a list's leader makes (as the engine's
//! `list::ListChange`) and what they answer. A list itself travels in its
//! cell ([`crate::wire::WireCell::list`]).

use bincode::{Decode, Encode};

use crate::limits::{BATCH_MESSAGES_MAX, MESSAGE_BYTES_MAX};

/// Most bytes a list takes encoded (each element its length's varint and
/// its bytes): a peer batch of replicated list cells, each with a key of
/// the largest size, must fit one message.
pub const LIST_BYTES_MAX: usize = 28 << 10;

const _: () = assert!(BATCH_MESSAGES_MAX * (LIST_BYTES_MAX + 2 * 1024) <= MESSAGE_BYTES_MAX);

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum WireEnd {
    /// The head.
    Left,
    /// The tail.
    Right,
}

/// A change of a list (see the engine's `list::ListChange`).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum WireListChange {
    /// `LPUSH`/`RPUSH`, `LPUSHX`/`RPUSHX` when `only_existing`.
    Push {
        /// Where.
        end: WireEnd,
        /// What, in the order given.
        values: Vec<Vec<u8>>,
        /// Only onto a list that exists.
        only_existing: bool,
    },
    /// `LPOP`/`RPOP`.
    Pop {
        /// From where.
        end: WireEnd,
        /// How many at most.
        count: u64,
    },
    /// `LTRIM`.
    Trim {
        /// First index kept.
        start: i64,
        /// Last index kept.
        stop: i64,
    },
    /// `LSET`.
    Set {
        /// Which element.
        index: i64,
        /// Its new value.
        value: Vec<u8>,
    },
    /// `LREM`.
    Remove {
        /// How many and from where.
        count: i64,
        /// Which.
        value: Vec<u8>,
    },
    /// `LINSERT`.
    Insert {
        /// Before the pivot (else after).
        before: bool,
        /// The element to insert next to.
        pivot: Vec<u8>,
        /// What.
        value: Vec<u8>,
    },
}

/// What a list change answers.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum WireListReply {
    /// A length or a count.
    Int(i64),
    /// Popped elements (none: the key was absent).
    Popped(Vec<Vec<u8>>),
    /// Done.
    Done,
}

impl WireListChange {
    /// What it is called in errors.
    pub fn name(&self) -> &'static str {
        match self {
            WireListChange::Push { .. } => "push",
            WireListChange::Pop { .. } => "pop",
            WireListChange::Trim { .. } => "ltrim",
            WireListChange::Set { .. } => "lset",
            WireListChange::Remove { .. } => "lrem",
            WireListChange::Insert { .. } => "linsert",
        }
    }
}
