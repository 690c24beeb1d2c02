//! The cluster's roles on one node: placement, the write and read paths,
//! the peer handler, hints, repair, topology changes, scans, unique
//! counters, the script cache and snapshots, sharing `ctx`.

pub(crate) mod changes;
pub(crate) mod ctx;
pub(crate) mod faults;
pub(crate) mod fences;
pub(crate) mod flush_queue;
pub(crate) mod handoff;
pub mod hints;
pub(crate) mod membership;
pub(crate) mod peer;
pub(crate) mod placement;
pub(crate) mod read;
pub(crate) mod repair;
pub(crate) mod repairing;
pub(crate) mod scan;
pub(crate) mod script_peers;
pub(crate) mod scripts;
pub(crate) mod snapshot;
pub(crate) mod tails;
pub(crate) mod tails_gate;
pub mod topology;
pub(crate) mod unique;
pub(crate) mod write;
