//! The cluster's roles on one node: placement, the write and read paths,
//! the peer handler, hints, repair, topology changes, scans, unique
//! counters, the script cache and snapshots, sharing `ctx`.
//!
//! `Ctx` holds what every role shares (configuration, engine, ring,
//! transport, metrics) and each role's own state as a typed handle with
//! private fields (`changes` for topology, `fences` for write, `repairing`
//! for repair, `hints`, `tails_gate`, `scripts`, `faults`). Those handles
//! are leaves beside `ctx`, not parts of their role's module, so that
//! `Ctx` holds them without an import cycle (each role imports `ctx`).

pub(crate) mod agree;
pub(crate) mod batchlog;
pub(crate) mod changes;
pub(crate) mod ctx;
pub(crate) mod faults;
pub mod features;
pub(crate) mod fences;
pub(crate) mod flush_queue;
pub(crate) mod gather;
pub(crate) mod generations;
pub(crate) mod handoff;
pub mod hints;
pub(crate) mod membership;
pub(crate) mod peer;
pub(crate) mod placement;
pub(crate) mod purge;
pub(crate) mod read;
pub(crate) mod repair;
pub(crate) mod repairing;
pub(crate) mod scan;
pub(crate) mod script_peers;
pub(crate) mod scripts;
pub(crate) mod slice;
pub(crate) mod snapshot;
pub(crate) mod tails;
pub(crate) mod tails_gate;
pub mod topology;
pub(crate) mod unique;
pub(crate) mod write;
