//! The node (`tallyd`): config, placement, the write and read paths,
//! replication, hints and the client listeners.
//!
//! ```text
//! client ──TCP──▶ server / resp ──▶ Node ──▶ write: queue ─▶ batch ─▶ engine (leader RMW)
//!                                     │          └─▶ replicate: a Round per counter ──QUIC──▶ peer (replicas apply)
//!                                     │                 └─▶ hints ──▶ handoff delivers when back up
//!                                     └────▶ read: gather ─▶ merge ─▶ read repair
//! ```
//!
//! Each role is one module, and imports run one way: `node` wires the
//! roles; the roles (`peer` → `write` → `read`, `handoff`) share only
//! `ctx` (the engine, ring, transport and hints) and the pure
//! `placement`; the rules each applies are pure functions or state
//! machines (`placement`, `write::round`, `write::combine`) tested without
//! a network.
//!
//! - [`config`]: `cluster.toml`, validated with errors that name the field.
//! - [`ring`]: Murmur3 tokens, virtual nodes, replica placement.
//! - `placement`: who leads a write, who answers a read, availability.
//! - `write`: every add and reset, through one queue, one batch path and
//!   one replication round.
//! - `read`: gets and row reads at a consistency level, with read repair.
//! - `peer`: the handler of peers' requests, each first checked by `authz`
//!   against what its sender may ask; `handoff`: hint delivery.
//! - [`node`]: one node's parts wired together.
//! - [`hints`]: durable hinted handoff files.
//! - [`server`]: the client protocol listener; [`resp`]: the RESP listener (RESP2 and RESP3).
//! - [`limits`]: what clients may hold (connections, file descriptors,
//!   output, time); [`accept`]: the cap on connections both listeners
//!   share; `output`: a native connection's answers and backpressure.
//! - [`auth`]: users, passwords and roles on the client ports;
//!   [`client_tls`]: TLS on them, `stream` the connection either way.
//! - [`certs`]: the cluster CA and node certificates; [`client_certs`]:
//!   the client ports' and the clients' certificates.
//! - [`daemon`]: one node as a process (what `tallyd run` runs).

pub mod base;
pub mod client;
pub mod cluster;
pub mod config;
pub mod node;
pub mod ops;
pub mod security;

pub use node::Node;
pub use tally_net::ring;
