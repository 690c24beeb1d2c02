//! Changes of a list, as its leader makes them (the engine's
//! `list::decide_list` says how), and what they answer. The wire carries
//! them as they are (bincode: a variant's index, then its fields in order,
//! so the order of variants and fields here is the wire's and never
//! changes). A list itself lives in a cell's epoch (the engine's
//! `cell::list`).

use bincode::{Decode, Encode};

/// Most bytes a list takes encoded (each element its length's varint and
/// its bytes): about 1,500 timestamps, and small enough that a peer batch
/// of replicated list cells, each with a key of the largest size, fits
/// one message (checked in `tally-net`).
pub const LIST_BYTES_MAX: usize = 28 << 10;

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub enum End {
    /// The head (`L...`, index 0).
    Left,
    /// The tail (`R...`, index -1).
    Right,
}

/// A change of a list.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum ListChange {
    /// `LPUSH`/`RPUSH` (each value in turn), `LPUSHX`/`RPUSHX` when
    /// `only_existing`. Answers the new length.
    Push {
        /// Where.
        end: End,
        /// What, in the order given.
        values: Vec<Vec<u8>>,
        /// Only onto a list that exists.
        only_existing: bool,
    },
    /// `LPOP`/`RPOP`: up to `count` elements. Answers them.
    Pop {
        /// From where.
        end: End,
        /// How many at most.
        count: u64,
    },
    /// `LTRIM start stop`: keeps that range (Redis' indexes).
    Trim {
        /// First index kept.
        start: i64,
        /// Last index kept.
        stop: i64,
    },
    /// `LSET index value`.
    Set {
        /// Which element.
        index: i64,
        /// Its new value.
        value: Vec<u8>,
    },
    /// `LREM count value`: removes up to |count| elements equal to
    /// `value`, from the head (count > 0), the tail (< 0) or all (0).
    /// Answers how many.
    Remove {
        /// How many and from where.
        count: i64,
        /// Which.
        value: Vec<u8>,
    },
    /// `LINSERT BEFORE|AFTER pivot value`. Answers the new length, -1
    /// without the pivot.
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
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum ListReply {
    /// A length or a count (`0` for an absent key's push with `X`).
    Int(i64),
    /// Popped elements (none: the key was absent).
    Popped(Vec<Vec<u8>>),
    /// `LTRIM`, `LSET`: done.
    Done,
}

impl ListChange {
    /// What it is called in errors.
    pub fn name(&self) -> &'static str {
        match self {
            ListChange::Push { .. } => "push",
            ListChange::Pop { .. } => "pop",
            ListChange::Trim { .. } => "ltrim",
            ListChange::Set { .. } => "lset",
            ListChange::Remove { .. } => "lrem",
            ListChange::Insert { .. } => "linsert",
        }
    }
}
