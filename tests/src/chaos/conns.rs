//! A chaos worker's connections to the nodes, and the run's stop flag:
//! what the exact and unique workers' senders reach the nodes through.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tally_net::Client;

/// How long an add keeps being retried once the workload has stopped.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);
/// The wait before a retry: short, so retries overlap the original.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// One connection per node, made when first needed and again once broken.
pub(crate) struct Conns {
    addrs: Vec<SocketAddr>,
    conns: Vec<Option<Client>>,
    stop: Arc<AtomicBool>,
    /// When the worker first saw the stop.
    stopped_at: Option<Instant>,
}

impl Conns {
    /// No connection yet to any of `addrs`; the workload ends at `stop`.
    pub(crate) fn new(addrs: Vec<SocketAddr>, stop: Arc<AtomicBool>) -> Conns {
        Conns {
            conns: addrs.iter().map(|_| None).collect(),
            addrs,
            stop,
            stopped_at: None,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.addrs.len()
    }

    /// Node `node`'s address.
    pub(crate) fn addr(&self, node: usize) -> SocketAddr {
        self.addrs[node]
    }

    /// The connection to `node`, if [`Conns::ready`] made one.
    pub(crate) fn conn(&self, node: usize) -> Option<&Client> {
        self.conns[node].as_ref()
    }

    /// (Re)connects to `node` if it has no open connection.
    pub(crate) async fn ready(&mut self, node: usize) {
        if self.conns[node].as_ref().is_none_or(|c| c.is_closed()) {
            self.conns[node] =
                super::secure::dial(self.addrs[node], tally_net::client::DEFAULT_TIMEOUT)
                    .await
                    .ok();
        }
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Whether an add still unknown is given up: the workload stopped
    /// more than [`SETTLE_RETRY_MAX`] ago (the cluster is healed by then).
    pub(crate) fn give_up(&mut self) -> bool {
        if !self.stopped() {
            return false;
        }
        self.stopped_at.get_or_insert_with(Instant::now).elapsed() > SETTLE_RETRY_MAX
    }

    pub(crate) async fn backoff(&self) {
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}
