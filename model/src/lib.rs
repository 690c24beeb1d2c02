//! Tally's shared data: the plain types the storage engine keeps and the
//! wire carries, defined once so that neither side mirrors the other.
//!
//! - [`epoch`]: a cell's epoch (generation, base, deadline, fold
//!   generation) and the rule that merges two of them;
//! - [`shard`]: one node incarnation's part of a counter;
//! - [`change`]: `SET`, `EXPIRE`/`PERSIST` and `DEL` of a counter's epoch,
//!   and what a change answers;
//! - [`list`]: the changes of a list and what they answer;
//! - [`paxos`]: ballots, a partition's registers and the acceptor's rules
//!   of agreement.
//!
//! No I/O, no clock, no runtime: only data and the pure rules that belong
//! to it. Every type derives bincode's `Encode`/`Decode`, and `tally-net`
//! puts them on the wire as they are: a variant's index, then the fields
//! in order. So the order of the variants and of the fields is part of the
//! wire protocol (a golden test in `tally-net` holds the bytes), and a new
//! variant goes last.
//!
//! Above this crate, `tally-engine` decides what the changes do to a cell,
//! and `tally-net` moves them between nodes; `tally-net` never depends on
//! the engine, and this crate on neither.

pub mod change;
pub mod epoch;
pub mod list;
pub mod paxos;
pub mod shard;

pub use change::{Change, Changed, Presence, Ttl, When};
pub use epoch::{Epoch, Expiry, Order, Stamp};
pub use list::{End, ListChange, ListReply};
pub use shard::Shard;
