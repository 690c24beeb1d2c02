//! Changes of a counter's epoch: `SET`, `EXPIRE`/`PERSIST` and `DEL`, with
//! Redis' conditions, and what a change answers. The engine's
//! `change::decide` says what each does to a cell; the wire carries them
//! as they are (bincode: a variant's index, then its fields in order, so
//! the order of variants and fields here is the wire's and never changes).

use bincode::{Decode, Encode};

/// A change of a counter's epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub enum Change {
    /// `SET`: the counter becomes `value`.
    Set {
        /// The new value.
        value: i64,
        /// Its deadline.
        ttl: Ttl,
        /// Only if the counter is (or is not) live.
        only: Presence,
    },
    /// `EXPIRE`: a new deadline, ms since the Unix epoch (0: none, `PERSIST`).
    Expire {
        /// The deadline; a past one makes the counter absent at once.
        at_ms: u64,
        /// Redis' `NX`, `XX`, `GT`, `LT`.
        only: When,
    },
    /// `DEL`: back to nothing, whatever it was.
    Delete,
}

/// The deadline a `SET` gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub enum Ttl {
    /// None.
    Clear,
    /// The one the counter has (`KEEPTTL`).
    Keep,
    /// This one, ms since the Unix epoch.
    At(u64),
}

/// Whether a `SET` needs the counter live or absent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub enum Presence {
    /// Either.
    Any,
    /// Absent (`NX`).
    Absent,
    /// Live (`XX`).
    Live,
}

/// Which deadlines an `EXPIRE` may replace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub enum When {
    /// Any.
    Always,
    /// None yet (`NX`).
    NoDeadline,
    /// One already (`XX`).
    HasDeadline,
    /// A nearer one (`GT`; no deadline is the farthest).
    Later,
    /// A farther one, or none (`LT`).
    Sooner,
    /// A farther one, not none (`XX LT`).
    SoonerThanOne,
}

impl When {
    /// Whether a live key whose deadline is `current` takes the deadline
    /// `at_ms` (0 is none, for both) under this condition, as Redis'
    /// `EXPIRE` options (and `PERSIST`, `Always` to none) decide: a change
    /// to the same nothing is no change.
    pub fn allows(self, current: u64, at_ms: u64) -> bool {
        match self {
            When::Always => at_ms != 0 || current != 0,
            When::NoDeadline => current == 0,
            When::HasDeadline => current != 0,
            When::Later => current != 0 && (at_ms == 0 || at_ms > current),
            When::Sooner => at_ms != 0 && (current == 0 || at_ms < current),
            When::SoonerThanOne => at_ms != 0 && current != 0 && at_ms < current,
        }
    }
}

/// What a change answered: whether it applied, and the value before
/// (`None` when the counter was absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Changed {
    /// Whether its condition held.
    pub applied: bool,
    /// The value before.
    pub before: Option<i64>,
}
