//! Unique counters under chaos: workers add members as
//! [`crate::unique_sender`] does, over client connections, and its checker
//! judges the counters exactly after healing. Adds not yet acknowledged
//! when the workload stops are retried (the cluster is healed by then) for
//! a while (`conns`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tally_net::{Client, Consistency};

use super::conns::Conns;
pub(crate) use crate::unique_sender::UniqueLog;
use crate::unique_sender::{Counts, Sets};

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
    crate::unique_sender::worker(&mut Conns::new(addrs, stop), sets, seed).await
}

fn refs(members: &[String]) -> Vec<&[u8]> {
    members.iter().map(String::as_bytes).collect()
}

impl Sets for Conns {
    fn count(&self) -> usize {
        Conns::count(self)
    }

    async fn ready(&mut self, node: usize) {
        Conns::ready(self, node).await
    }

    async fn add(&self, node: usize, set: usize, members: &[String], cl: Consistency) -> bool {
        match self.conn(node) {
            Some(c) => c
                .unique_add(&set_name(set), &refs(members), cl)
                .await
                .is_ok(),
            None => false,
        }
    }

    /// Through a connection of its own, as a second client would.
    fn race(&self, node: usize, set: usize, members: Vec<String>) {
        let addr = self.addr(node);
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
        Conns::stopped(self)
    }

    fn give_up(&mut self) -> bool {
        Conns::give_up(self)
    }

    async fn backoff(&self) {
        Conns::backoff(self).await
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
