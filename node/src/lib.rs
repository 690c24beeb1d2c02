//! The node (`tallyd`): config, ring, coordinator, replication, hints and
//! the client listener.
//!
//! ```text
//! client ──TCP──▶ server ──▶ coordinator ──▶ leader (this node or a peer)
//!                                              │ engine.leader_add (durable)
//!                                              ▼
//!                               peer transport (QUIC, mTLS) ──▶ replicas apply
//!                                              │ down or silent?
//!                                              ▼
//!                                            hints ──▶ delivered when back up
//! ```
//!
//! - [`config`]: `cluster.toml`, validated with errors that name the field.
//! - [`ring`]: Murmur3 tokens, virtual nodes, replica placement.
//! - [`coordinator`]: the write, read and reset paths and consistency levels;
//!   `adds`: the add pipeline, which runs a node's adds in batches.
//! - [`node`]: one node's parts wired together, and the peer request handler.
//! - [`hints`]: durable hinted handoff.
//! - [`server`]: the client protocol listener; [`resp`]: the RESP2 listener.
//! - [`certs`]: the cluster CA and node certificates.

mod adds;
pub mod certs;
pub mod config;
mod convert;
pub mod coordinator;
pub mod hints;
pub mod node;
pub mod resp;
pub mod server;

pub use node::Node;
pub use tally_net::ring;
