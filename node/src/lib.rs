//! The node (`tallyd`): the engine and the peer transport wired into one
//! server, in layers by role. Each layer imports only from itself and the
//! layers below it, and no modules import each other in a cycle (the
//! `layers` test below checks both on every build):
//!
//! ```text
//! ops/       the daemon (`tallyd run`), metrics, check-log, restore
//!   │
//! client/    the client ports: accept (caps, TLS), server (native), resp/
//!   │
//! node.rs    one node's roles wired together; the API the clients call
//!   │
//! cluster/   ctx (config, engine, ring, transport, metrics, and the roles'
//!            own handles: changes, fences, repairing, hints, tails gate,
//!            scripts, faults) and the roles on it: placement, write/,
//!            read, peer, hints/, handoff, repair/, topology/ over the
//!            pure membership, scan/, tails, unique, snapshot, features
//!            (what every member's build has: cluster features), agree/
//!            (linearizable registers: Paxos per partition)
//!   │
//! security/  logins, users and roles (auth/), what a peer may ask (authz),
//!            certificates, client TLS
//!   │
//! base/ config/   the command table, the metrics registry, keyspaces,
//!                 conversions; `cluster.toml` and its tables
//! ```
//!
//! A client's add enters through `client` (`resp` or `server`), is
//! authorized by `security::auth`, and goes through `Node` to
//! `cluster::write`: a queue, a batch led by one replica's engine
//! (its locked read-modify-write), and one replication round to the
//! others over QUIC; `cluster::read` gathers and merges. Every other
//! write (a change, a whole key's `EXPIRE`, a list change, an admission)
//! and every write a peer forwards takes one coordinator skeleton
//! (`write::coordinate`: route, lead here or forward, the answer
//! expected). The rules each role applies are pure functions or state
//! machines (`placement`, `write::coordinate`, `write::round`,
//! `write::retry`, `membership`, `flush_queue`; the combiner's arithmetic
//! is the engine's `add::Combined`, which cells an `EXPIRE` of a key
//! changes its `change::expire_targets`), tested without a network.

pub mod base;
pub mod client;
pub mod cluster;
pub mod config;
pub mod node;
pub mod ops;
pub mod security;

pub use cluster::features::BUILD;
pub use node::Node;
pub use tally_net::ring;

#[cfg(test)]
mod layers {
    /// The node's layers, lowest first: each imports only from its own
    /// and lower ones, and no modules anywhere import each other in a
    /// cycle.
    const LAYERS: &[&[&str]] = &[
        &["base", "config"],
        &["security"],
        &["cluster"],
        &["node"],
        &["client"],
        &["ops"],
    ];

    #[test]
    fn imports_run_one_way() {
        let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        if let Err(wrong) = tally_layers::check(src, LAYERS) {
            panic!("{wrong}");
        }
    }
}
