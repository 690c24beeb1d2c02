//! The seam under the transport: how a node's batches reach a peer.
//!
//! The transport ([`super::Transport`]) keeps the links, the batching, the
//! heartbeats and the retries; a [`Network`] only carries bytes. In a node
//! that is QUIC ([`super::quic`]); in the simulator (`tally-sim`) it is a
//! seeded network in one process, which drops, delays and partitions. The
//! receiving side hands each batch to [`super::Inbound::answer`], however
//! it came.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::BoxFuture;
pub use crate::dial::Want;
use crate::tls::TlsError;

/// Error code a connection is closed with when a peer sent a bad batch,
/// or speaks a protocol too old for the cluster.
pub(crate) const CLOSE_PROTOCOL: u32 = 1;
/// Error code of an orderly shutdown.
pub(crate) const CLOSE_SHUTDOWN: u32 = 0;

/// A channel on its way.
pub type Dialled<'a> = Pin<Box<dyn Future<Output = Result<Arc<dyn Channel>, String>> + Send + 'a>>;

/// What carries a node's batches to its peers.
pub trait Network: Send + Sync + 'static {
    /// A channel to node `to` (its index in the cluster's nodes), as
    /// `want` says: the one in use if it serves, else a new one, dialled
    /// once for every caller waiting meanwhile.
    fn channel(&self, to: usize, want: Want) -> Dialled<'_>;

    /// Closes every channel, both ways: nothing more is sent or answered.
    fn close(&self);

    /// After [`Network::close`]: done once the peers were told (the
    /// caller bounds the wait).
    fn told(&self) -> BoxFuture<()>;

    /// Reads the TLS files again, for channels made from now on.
    fn reload_tls(&self) -> Result<(), TlsError> {
        Ok(())
    }
}

/// One channel to a peer, as [`Network::channel`] gives it.
pub trait Channel: Send + Sync {
    /// Names this channel among the peer's channels (`Want::Not`).
    fn id(&self) -> usize;

    /// The peer protocol both sides agreed on.
    fn protocol(&self) -> u16;

    /// Whether the channel is closed: nothing more goes over it.
    fn is_closed(&self) -> bool;

    /// Closes the channel: the peer speaks a protocol too old for the
    /// cluster (`why` tells it so).
    fn refuse(&self, why: &str);

    /// Sends one batch and waits for its answer (no timer: the caller
    /// bounds the wait).
    fn exchange(&self, batch: bytes::Bytes) -> BoxFuture<Result<Vec<u8>, String>>;
}

/// What a node of a build too old for the cluster is told as its
/// connection is closed.
pub(crate) fn refusal(oldest: u16) -> String {
    format!(
        "this cluster has enabled features that need peer protocol {oldest} or newer: \
         upgrade this node's build"
    )
}
