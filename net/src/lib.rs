//! Tally's wire: what crosses the network, and how.
//!
//! - [`wire`]: every message, and the one bincode configuration (with a size
//!   limit) that encodes them; [`error`] the errors and [`limits`] the
//!   sizes they share with the rest.
//! - [`tls`] and [`peer`]: node-to-node QUIC with mutual TLS under the
//!   cluster's own CA; requests to a peer are batched onto one stream,
//!   each call [`encoded`] once whatever the number of peers it goes to.
//!   [`identity`] names the node a certificate belongs to, [`tls_reload`]
//!   takes up renewed certificates, [`bounds`] refuses cells near wrapping,
//!   and [`log_limit`] keeps what outsiders can trigger out of the logs.
//! - [`once`]: operation ids for exactly-once adds, and which replica
//!   applies them.
//! - [`retry`]: when a client retries an add with an id.
//! - [`ring`]: token placement, shared by nodes and token-aware clients.
//! - [`frame`] and [`client`]: the client protocol, length-prefixed frames
//!   over TCP with request ids, the thin async client, and [`cluster`], its
//!   token-aware form that sends each request to a replica; [`client_tls`]
//!   secures the client ports (both ends).
//!   [`serial`] carries a request at SERIAL.
//! - [`version`]: the peer and client protocol versions each build speaks,
//!   and how two sides agree on one (peers in the TLS handshake, clients
//!   in their first request), so that a cluster upgrades node by node.
//!
//! Imports run one way, lowest first: `error`, `limits`, `ring` and the
//! other leaves; `list`, `once`, `tls`; `wire`; the framing; `client` and
//! `peer`; `retry`; `cluster`; `scan` (the `layers` test checks it).
//!
//! `net` knows nothing of storage: it depends on `tally-model` alone for
//! the data it carries as is (epochs, shards, changes, list changes), and
//! keys and cells travel as [`wire::WireKey`] and [`wire::WireCell`],
//! untrusted wire forms the node checks into the engine's.

pub mod bounds;
pub mod client;
pub mod client_tls;
pub mod cluster;
pub mod cql;
mod dial;
pub mod encoded;
pub mod error;
pub mod frame;
#[cfg(test)]
mod golden;
pub mod identity;
pub mod limits;
pub mod list;
pub mod log_limit;
pub mod once;
pub mod peer;
pub mod retry;
pub mod ring;
pub mod scan;
pub mod serial;
pub mod tls;
pub mod tls_reload;
pub mod version;
pub mod wire;

pub use client::{Client, ClientError};
pub use cluster::{ClusterClient, ClusterOptions};
pub use wire::{Consistency, ErrorKind, Outcome, Shard, WireCell, WireError, WireKey};

#[cfg(test)]
mod layers {
    /// The crate's layers, lowest first: each module imports only from its
    /// own layer and lower ones, and no modules import each other in a
    /// cycle.
    const LAYERS: &[&[&str]] = &[
        &[
            "error",
            "limits",
            "ring",
            "log_limit",
            "identity",
            "version",
        ],
        &["list", "once", "tls", "dial"],
        &["wire", "tls_reload", "client_tls"],
        &["bounds", "encoded", "frame", "serial"],
        &["client", "peer", "cql"],
        &["retry"],
        &["cluster"],
        &["scan", "golden"],
    ];

    #[test]
    fn imports_run_one_way() {
        let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        if let Err(wrong) = tally_layers::check(src, LAYERS) {
            panic!("{wrong}");
        }
    }
}
