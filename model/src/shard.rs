//! A shard: one node incarnation's part of a counter.

use bincode::{Decode, Encode};

/// One node incarnation's contribution to a counter. On the wire: its
/// three fields in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Shard {
    /// The incarnation that owns (and alone writes) this shard.
    pub counter_id: u64,
    /// Version of this shard; the owner bumps it on every change.
    pub clock: u64,
    /// The sum of the owner's adds.
    pub value: i64,
}
