//! The token-aware client: sends each request to a replica of its partition.
//!
//! It asks any reachable seed node for the cluster's status (node ids and
//! addresses in ring order, replication factor, vnodes), computes the same
//! [`Ring`] the nodes compute, and keeps `connections_per_node` pipelined
//! connections to every node. A request goes to the first replica of its
//! partition (the primary) whose connection is alive, else the next
//! replica; that node coordinates as the leader, so an add costs no extra
//! hop, and all adds to one counter meet at one leader, where they combine.
//!
//! Like [`Client`], it never retries an add: a failed add's outcome is
//! whatever its error says.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::client::{Client, ClientError};
use crate::ring::Ring;
use crate::wire::{ClusterStatus, Consistency};

/// Most nodes a cluster description may list.
const NODES_MAX: usize = 1024;
/// Most vnodes per node a cluster description may ask for (the config's limit).
const VNODES_MAX: usize = 4096;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Pipelined connections to each node.
    pub connections_per_node: usize,
    /// Deadline of each call.
    pub timeout: Duration,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            connections_per_node: 2,
            timeout: crate::client::DEFAULT_TIMEOUT,
        }
    }
}

/// A client that knows where every partition lives.
pub struct ClusterClient {
    status: ClusterStatus,
    ring: Ring,
    conns: Vec<Vec<Arc<Client>>>,
    next: AtomicUsize,
}

impl ClusterClient {
    /// Learns the cluster from the first seed that answers and connects to
    /// every node it can reach.
    pub async fn connect(
        seeds: &[SocketAddr],
        opts: &ClusterOptions,
    ) -> Result<ClusterClient, ClientError> {
        let mut last = None;
        let mut status = None;
        for &seed in seeds {
            match Client::connect_with_timeout(seed, opts.timeout).await {
                Ok(c) => match c.status().await {
                    Ok(s) => {
                        status = Some(s);
                        break;
                    }
                    Err(e) => last = Some(e),
                },
                Err(e) => last = Some(e),
            }
        }
        let Some(status) = status else {
            return Err(
                last.unwrap_or_else(|| ClientError::Protocol("no seed addresses given".into()))
            );
        };
        let ids: Vec<String> = status.nodes.iter().map(|n| n.id.clone()).collect();
        // The answer is not trusted to size the ring: the limits are the config's.
        if ids.is_empty()
            || ids.len() > NODES_MAX
            || status.vnodes == 0
            || status.vnodes as usize > VNODES_MAX
            || status.replication_factor == 0
        {
            return Err(ClientError::Protocol(format!(
                "the cluster described itself as empty: {status:?}"
            )));
        }
        let ring = Ring::new(
            &ids,
            status.vnodes as usize,
            status.replication_factor as usize,
        );
        let mut conns = Vec::with_capacity(ids.len());
        for n in &status.nodes {
            let mut node_conns = Vec::new();
            if let Ok(addr) = n.client_addr.parse::<SocketAddr>() {
                for _ in 0..opts.connections_per_node.max(1) {
                    match Client::connect_with_timeout(addr, opts.timeout).await {
                        Ok(c) => node_conns.push(Arc::new(c)),
                        Err(_) => break, // down now; its replicas' peers serve instead
                    }
                }
            }
            conns.push(node_conns);
        }
        if conns.iter().all(Vec::is_empty) {
            return Err(ClientError::Closed(
                "no node of the cluster accepted a connection".into(),
            ));
        }
        Ok(ClusterClient {
            status,
            ring,
            conns,
            next: AtomicUsize::new(0),
        })
    }

    /// The cluster as the seed described it.
    pub fn status(&self) -> &ClusterStatus {
        &self.status
    }

    /// The connection a request for `partition` goes to.
    fn pick(&self, partition: &[u8]) -> Result<&Client, ClientError> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let replicas = self.ring.replicas(partition);
        let live = |node: usize| {
            let conns = &self.conns[node];
            (!conns.is_empty())
                .then(|| &conns[turn % conns.len()])
                .filter(|c| !c.is_closed())
        };
        if let Some(c) = replicas.iter().find_map(|&r| live(r)) {
            return Ok(c);
        }
        // No replica reachable from here: any node can coordinate.
        (0..self.conns.len())
            .find_map(|i| live((turn + i) % self.conns.len()))
            .map(|c| c.as_ref())
            .ok_or_else(|| ClientError::Closed("no connection to any node is alive".into()))
    }

    /// Adds `delta`; answers the value the leader saw after it.
    pub async fn add(
        &self,
        partition: &[u8],
        column: &[u8],
        delta: i64,
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        self.pick(partition)?
            .add(partition, column, delta, cl)
            .await
    }

    /// Reads a counter.
    pub async fn get(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        self.pick(partition)?.get(partition, column, cl).await
    }

    /// Reads every column of a partition, in column order.
    pub async fn get_row(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<Vec<(Vec<u8>, i64)>, ClientError> {
        self.pick(partition)?.get_row(partition, cl).await
    }

    /// Resets a counter to zero.
    pub async fn reset(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<(), ClientError> {
        self.pick(partition)?.reset(partition, column, cl).await
    }

    /// A connection to node `index` (config order), if one is alive.
    pub fn node(&self, index: usize) -> Option<&Client> {
        self.conns
            .get(index)?
            .iter()
            .find(|c| !c.is_closed())
            .map(|c| c.as_ref())
    }
}
