//! Membership: which configured nodes are in the ring, as a versioned
//! state every node stores and agrees on (see `topology::change`).
//!
//! `cluster.toml` names every node that may ever be a member, with its
//! addresses, and which of them form the first ring (those without
//! `join = true`). From then on the ring is this state, not the file:
//!
//! ```text
//!   Absent ──join──▶ Joining ──synced──▶ Normal ──decommission──▶ Leaving ──synced──▶ Left
//!                                          └─────removenode─────▶ Removing ─synced──▶ Left
//! ```
//!
//! At most one node is between states: that is the change in progress,
//! and a second change is refused naming it. While a change is in progress
//! the ring is the one before it with, per range, the replicas the change
//! brings as *pending* replicas (`Ring::during`): they get every write and
//! are synced from every current replica, then the ring switches.
//!
//! Every step is a new version, one higher. A node stores a version
//! durably before it uses it (`topology::store`), takes only newer ones,
//! and learns a newer one from any peer whose heartbeats announce it.

pub(crate) mod change;
pub(crate) mod cleanup;
pub(crate) mod collect;
pub(crate) mod flush;
pub(crate) mod fold;
mod fold_steps;
pub(crate) mod replace;
mod steps;
pub(crate) mod store;

pub use super::membership::status_code;
pub(crate) use super::membership::{Change, Refused, Topology};
