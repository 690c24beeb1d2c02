//! Unique counters under chaos: workers add members as
//! [`crate::unique_sender`] does, over client connections, and its checker
//! judges the counters exactly after healing. Adds not yet acknowledged
//! when the workload stops are retried (the cluster is healed by then) at
//! most [`SETTLE_RETRY_MAX`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tally_net::{Client, Consistency};

pub(crate) use crate::unique_sender::UniqueLog;
use crate::unique_sender::{Counts, Sets};

/// How long an add keeps being retried once the workload has stopped.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(60);
/// The wait before a retry.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// The unique counter `i`'s name.
pub(crate) fn set_name(i: usize) -> Vec<u8> {
    format!("chaos-set-{i}").into_bytes()
}

/// One worker: adds members to `sets` counters until `stop`.
pub(crate) async fn worker(
    addrs: Vec<SocketAddr>,
    sets: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> UniqueLog {
    let mut conns = Conns {
        conns: addrs.iter().map(|_| None).collect(),
        addrs,
        stop,
        stopped_at: None,
    };
    crate::unique_sender::worker(&mut conns, sets, seed).await
}

/// A worker's connections to the nodes, and the stop flag.
struct Conns {
    addrs: Vec<SocketAddr>,
    conns: Vec<Option<Client>>,
    stop: Arc<AtomicBool>,
    /// When the worker first saw the stop.
    stopped_at: Option<Instant>,
}

fn refs(members: &[String]) -> Vec<&[u8]> {
    members.iter().map(String::as_bytes).collect()
}

impl Sets for Conns {
    fn count(&self) -> usize {
        self.addrs.len()
    }

    /// (Re)connects to `node` if it has no open connection.
    async fn ready(&mut self, node: usize) {
        if self.conns[node].as_ref().is_none_or(|c| c.is_closed()) {
            self.conns[node] =
                super::secure::dial(self.addrs[node], tally_net::client::DEFAULT_TIMEOUT)
                    .await
                    .ok();
        }
    }

    async fn add(&self, node: usize, set: usize, members: &[String], cl: Consistency) -> bool {
        match &self.conns[node] {
            Some(c) => c
                .unique_add(&set_name(set), &refs(members), cl)
                .await
                .is_ok(),
            None => false,
        }
    }

    /// Through a connection of its own, as a second client would.
    fn race(&self, node: usize, set: usize, members: Vec<String>) {
        let addr = self.addrs[node];
        tokio::spawn(async move {
            if let Ok(c) = super::secure::dial(addr, tally_net::client::DEFAULT_TIMEOUT).await {
                let _ = c
                    .unique_add(&set_name(set), &refs(&members), Consistency::Quorum)
                    .await;
            }
        });
    }

    /// None: the chaos run's workers add as fast as the cluster answers.
    async fn think(&self, _pause: Duration) {}

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn give_up(&mut self) -> bool {
        if !self.stopped() {
            return false;
        }
        self.stopped_at.get_or_insert_with(Instant::now).elapsed() > SETTLE_RETRY_MAX
    }

    async fn backoff(&self) {
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}

/// Reads every counter at ALL through every node and checks it exactly;
/// answers the violations, and each counter's expected count.
pub(crate) async fn check(
    addrs: &[SocketAddr],
    log: &UniqueLog,
    sets: usize,
) -> (Vec<String>, Vec<(usize, usize)>) {
    let nodes: Vec<usize> = (0..addrs.len()).collect();
    crate::unique_sender::check(&Readers { addrs }, &nodes, log, sets).await
}

/// Final reads, each over a connection of its own.
struct Readers<'a> {
    addrs: &'a [SocketAddr],
}

impl Readers<'_> {
    async fn dial(&self, node: usize) -> Result<Client, String> {
        super::secure::dial(self.addrs[node], tally_net::client::DEFAULT_TIMEOUT)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Counts for Readers<'_> {
    async fn count(&self, node: usize, set: usize) -> Result<i64, String> {
        let c = self.dial(node).await?;
        c.unique_count(&set_name(set), Consistency::All)
            .await
            .map_err(|e| e.to_string())
    }

    async fn contains(
        &self,
        node: usize,
        set: usize,
        members: &[&String],
    ) -> Result<Vec<bool>, String> {
        let c = self.dial(node).await?;
        let refs: Vec<&[u8]> = members.iter().map(|m| m.as_bytes()).collect();
        c.unique_contains(&set_name(set), &refs, Consistency::All)
            .await
            .map_err(|e| e.to_string())
    }

    async fn pause(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}
