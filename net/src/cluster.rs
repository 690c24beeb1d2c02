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
//! An add or a reset skips a replica that cannot take writes (its storage
//! failed; it still serves reads): the client learns which nodes can write
//! from the status it connects with, and asks again at most every
//! [`HEALTH_REFRESH`], in the background, while it writes. A node that
//! cannot write forwards what it gets anyway, so a stale view costs a hop,
//! never an error.
//!
//! Every add carries an operation id by default (a random client id per
//! `ClusterClient`, a sequence number per add; see [`crate::once`]) and
//! goes straight to the replica that applies that client's ids for its
//! partition. A failed add is retried with the same id (through another
//! node when its connection failed: that node forwards it) until the
//! deadline of [`ClusterOptions::retry`] ([`crate::retry`] decides): it is
//! applied once, however often it is sent. Only then does its error say
//! "outcome unknown". With `exactly_once` off, adds carry no id and are
//! never retried: a failed add's outcome is whatever its error says.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tally_world::Instant;

use crate::client::{Client, ClientError, Security};
use crate::once::{self, OpId};
use crate::retry::{self, RetryPolicy};
use crate::ring::Ring;
use crate::wire::{Change, Changed, ClusterStatus, Consistency, NodeState, WireCell};

/// Most nodes a cluster description may list.
const NODES_MAX: usize = 1024;
/// Most vnodes per node a cluster description may ask for (the config's limit).
const VNODES_MAX: usize = 4096;
/// How often a writing client asks the cluster again which nodes can write.
pub const HEALTH_REFRESH: Duration = Duration::from_secs(1);

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Pipelined connections to each node.
    pub connections_per_node: usize,
    /// Deadline of each call.
    pub timeout: Duration,
    /// Give every add an operation id and retry it until `retry.deadline`.
    pub exactly_once: bool,
    /// How adds with ids are retried.
    pub retry: RetryPolicy,
    /// TLS and login on every connection.
    pub security: Security,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            connections_per_node: 2,
            timeout: crate::client::DEFAULT_TIMEOUT,
            exactly_once: true,
            retry: RetryPolicy::default(),
            security: Security::default(),
        }
    }
}

/// A client that knows where every partition lives.
pub struct ClusterClient {
    status: ClusterStatus,
    ring: Ring,
    conns: Vec<Vec<Arc<Client>>>,
    next: AtomicUsize,
    health: Arc<Health>,
    /// This instance's client id (random) and its next sequence number.
    client_id: [u8; 16],
    next_seq: AtomicU64,
    exactly_once: bool,
    retry: RetryPolicy,
}

/// Which nodes can take writes, as the cluster last said.
struct Health {
    /// Per node, config order.
    writable: Vec<AtomicBool>,
    /// When the cluster was last asked, in ms since `since`.
    asked_ms: AtomicU64,
    since: Instant,
}

impl Health {
    fn new(status: &ClusterStatus) -> Health {
        let health = Health {
            writable: status.nodes.iter().map(|_| AtomicBool::new(true)).collect(),
            asked_ms: AtomicU64::new(0),
            since: Instant::now(),
        };
        health.learn(status);
        health
    }

    /// Takes what a node's status says of every node's writes.
    fn learn(&self, status: &ClusterStatus) {
        for (flag, node) in self.writable.iter().zip(&status.nodes) {
            flag.store(node.not_writable.is_none(), Ordering::Relaxed);
        }
    }

    fn is_writable(&self, node: usize) -> bool {
        self.writable
            .get(node)
            .is_none_or(|w| w.load(Ordering::Relaxed))
    }

    /// Whether the cluster is due to be asked again; if so, this caller
    /// asks (the others are told no until the next refresh).
    fn due(&self) -> bool {
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let asked = self.asked_ms.load(Ordering::Relaxed);
        let every = u64::try_from(HEALTH_REFRESH.as_millis()).unwrap_or(u64::MAX);
        now.saturating_sub(asked) >= every
            && self
                .asked_ms
                .compare_exchange(asked, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// The node an add with an id goes to: `applier` if `ok` says it can be
/// used, else the next usable node after it, starting the search at
/// `turn` to spread retries; `None` if none is.
fn once_target(
    applier: usize,
    nodes: usize,
    turn: usize,
    ok: impl Fn(usize) -> bool,
) -> Option<usize> {
    if ok(applier) {
        return Some(applier);
    }
    (0..nodes)
        .map(|i| (turn + i) % nodes)
        .find(|&i| i != applier && ok(i))
}

/// The node a request for a partition with `replicas` (ring order) goes
/// to: the first replica with a live connection, skipping, for a write,
/// replicas that cannot write; for a write no writable replica can take,
/// the first connected one (it forwards, or says why nothing can be
/// written). `None` when no replica is connected.
fn choose(
    replicas: &[usize],
    connected: impl Fn(usize) -> bool,
    writable: impl Fn(usize) -> bool,
    write: bool,
) -> Option<usize> {
    let first = |ok: &dyn Fn(usize) -> bool| replicas.iter().copied().find(|&r| ok(r));
    let any = first(&|r| connected(r));
    if write {
        first(&|r| connected(r) && writable(r)).or(any)
    } else {
        any
    }
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
            match Client::connect_secure(seed, opts.timeout, &opts.security).await {
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
        // The members of the ring as the seed knows them (every node when
        // it does not say): a node not yet joined, or gone, leads nothing.
        let states = &status.stats.ring.states;
        let mut members: Vec<bool> = if states.len() == ids.len() {
            states
                .iter()
                .map(|s| {
                    matches!(
                        s,
                        NodeState::Normal | NodeState::Leaving | NodeState::Removing
                    )
                })
                .collect()
        } else {
            vec![true; ids.len()]
        };
        if !members.contains(&true) {
            members = vec![true; ids.len()];
        }
        let ring = Ring::with_members(
            &ids,
            &members,
            status.vnodes as usize,
            status.replication_factor as usize,
        );
        let mut conns = Vec::with_capacity(ids.len());
        for n in &status.nodes {
            let mut node_conns = Vec::new();
            if let Ok(addr) = n.client_addr.parse::<SocketAddr>() {
                for _ in 0..opts.connections_per_node.max(1) {
                    match Client::connect_secure(addr, opts.timeout, &opts.security).await {
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
            health: Arc::new(Health::new(&status)),
            status,
            ring,
            conns,
            next: AtomicUsize::new(0),
            client_id: {
                let mut id = [0; 16];
                tally_world::fill_random(&mut id);
                id
            },
            next_seq: AtomicU64::new(1),
            exactly_once: opts.exactly_once,
            retry: opts.retry,
        })
    }

    /// The cluster as the seed described it.
    pub fn status(&self) -> &ClusterStatus {
        &self.status
    }

    /// A live connection to `node`, taking turns among its connections.
    fn conn(&self, node: usize, turn: usize) -> Option<&Arc<Client>> {
        let conns = self.conns.get(node)?;
        (!conns.is_empty())
            .then(|| &conns[turn % conns.len()])
            .filter(|c| !c.is_closed())
    }

    /// The node (config order) an add or a reset of `partition` goes to
    /// now; `None` when no replica of it is connected (any node then
    /// coordinates it).
    pub fn writer_for(&self, partition: &[u8]) -> Option<usize> {
        let replicas = self.ring.replicas(partition);
        choose(
            &replicas,
            |n| self.conn(n, 0).is_some(),
            |n| self.health.is_writable(n),
            true,
        )
    }

    /// The connection a request for `partition` goes to (see [`choose`]).
    fn pick(&self, partition: &[u8], write: bool) -> Result<&Client, ClientError> {
        if write {
            self.refresh_health();
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let replicas = self.ring.replicas(partition);
        let chosen = choose(
            &replicas,
            |n| self.conn(n, turn).is_some(),
            |n| self.health.is_writable(n),
            write,
        );
        if let Some(c) = chosen.and_then(|n| self.conn(n, turn)) {
            return Ok(c);
        }
        // No replica reachable from here: any node can coordinate.
        self.any()
    }

    /// A connection to any node that has one alive, in turn.
    pub fn any(&self) -> Result<&Client, ClientError> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        (0..self.conns.len())
            .find_map(|i| self.conn((turn + i) % self.conns.len(), turn))
            .map(|c| c.as_ref())
            .ok_or_else(|| ClientError::Closed("no connection to any node is alive".into()))
    }

    /// Asks a node, in the background, which nodes can write, once every
    /// [`HEALTH_REFRESH`].
    fn refresh_health(&self) {
        if !self.health.due() {
            return;
        }
        let turn = self.next.load(Ordering::Relaxed);
        let n = self.conns.len();
        let Some(c) = (0..n).find_map(|i| self.conn((turn + i) % n, turn)) else {
            return;
        };
        let (c, health) = (c.clone(), self.health.clone());
        tokio::spawn(async move {
            if let Ok(status) = c.status().await {
                health.learn(&status);
            }
        });
    }

    /// Adds `delta`; answers the value the add produced. With
    /// `exactly_once` (the default) the add gets the next operation id of
    /// this client and is retried until the deadline (see
    /// [`ClusterClient::add_once`]); otherwise it is sent once.
    pub async fn add(
        &self,
        partition: &[u8],
        column: &[u8],
        delta: i64,
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        if self.exactly_once {
            let id = self.next_id();
            return self.add_once(partition, column, delta, &id, cl).await;
        }
        self.pick(partition, true)?
            .add(partition, column, delta, cl)
            .await
    }

    /// This client's next operation id.
    pub fn next_id(&self) -> OpId {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        OpId {
            client: self.client_id.to_vec(),
            seq,
        }
    }

    /// This client's id (random per instance).
    pub fn client_id(&self) -> &[u8] {
        &self.client_id
    }

    /// Adds `delta` at most once for `id`: sent to the node that applies
    /// it, and retried with the same id (through another node when the
    /// connection failed) until acknowledged, refused for good, or the
    /// deadline passed. Answers the value the add produced.
    pub async fn add_once(
        &self,
        partition: &[u8],
        column: &[u8],
        delta: i64,
        id: &OpId,
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        id.check().map_err(ClientError::Server)?;
        // The node the last attempt went through (`usize::MAX`: none yet).
        let last = AtomicUsize::new(usize::MAX);
        let last = &last;
        retry::until_known(&self.retry, |switch| async move {
            let before = last.load(Ordering::Relaxed);
            let avoid = (switch && before != usize::MAX).then_some(before);
            let (node, conn) = self.pick_once(partition, &id.client, avoid)?;
            last.store(node, Ordering::Relaxed);
            conn.add_once(partition, column, delta, id, cl).await
        })
        .await
    }

    /// Adds members to the unique counter `partition`; answers how many
    /// were new. Retried (through another node when the connection failed)
    /// until the deadline, as adds with ids are: adding a member again
    /// never counts it twice.
    pub async fn unique_add(
        &self,
        partition: &[u8],
        members: &[&[u8]],
        cl: Consistency,
    ) -> Result<u64, ClientError> {
        retry::until_known(&self.retry, |_| async {
            self.pick(partition, true)?
                .unique_add(partition, members, cl)
                .await
        })
        .await
    }

    /// The number of distinct members of the unique counter `partition`.
    pub async fn unique_count(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        self.pick(partition, false)?
            .unique_count(partition, cl)
            .await
    }

    /// The node an add with `client`'s ids to `partition` goes to: its
    /// applier when connected and not `avoid`, else another connected
    /// node (which forwards it there).
    fn pick_once(
        &self,
        partition: &[u8],
        client: &[u8],
        avoid: Option<usize>,
    ) -> Result<(usize, &Client), ClientError> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let applier = once::applier(&self.ring.replicas(partition), client);
        let n = self.conns.len();
        let ok = |i: usize| Some(i) != avoid && self.conn(i, turn).is_some();
        let node = once_target(applier, n, turn, ok)
            .or_else(|| (0..n).find(|&i| self.conn(i, turn).is_some()))
            .ok_or_else(|| ClientError::Closed("no connection to any node is alive".into()))?;
        let conn = self
            .conn(node, turn)
            .expect("chosen among live connections");
        Ok((node, conn.as_ref()))
    }

    /// Reads a counter.
    pub async fn get(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        self.pick(partition, false)?
            .get(partition, column, cl)
            .await
    }

    /// Reads every column of a partition, in column order.
    pub async fn get_row(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<Vec<(Vec<u8>, i64)>, ClientError> {
        self.pick(partition, false)?.get_row(partition, cl).await
    }

    /// Resets a counter to zero.
    pub async fn reset(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<(), ClientError> {
        self.pick(partition, true)?
            .reset(partition, column, cl)
            .await
    }

    /// Changes a counter's epoch (see [`Client::change`]).
    pub async fn change(
        &self,
        partition: &[u8],
        column: &[u8],
        change: Change,
        cl: Consistency,
    ) -> Result<Changed, ClientError> {
        self.pick(partition, true)?
            .change(partition, column, change, cl)
            .await
    }

    /// A counter's merged state (see [`Client::get_cell`]).
    pub async fn get_cell(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<WireCell, ClientError> {
        self.pick(partition, false)?
            .get_cell(partition, column, cl)
            .await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_add_with_an_id_goes_to_its_applier_else_another_node() {
        let all = |_| true;
        assert_eq!(once_target(2, 3, 0, all), Some(2));
        // The applier unusable: the others in turn, from `turn`.
        let not_2 = |i| i != 2;
        assert_eq!(once_target(2, 3, 0, not_2), Some(0));
        assert_eq!(once_target(2, 3, 1, not_2), Some(1));
        assert_eq!(once_target(2, 3, 2, not_2), Some(0));
        assert_eq!(once_target(2, 3, 0, |_| false), None);
    }

    /// One case: replicas connected, replicas that can write, a write?, the choice.
    type Case = (&'static [usize], &'static [usize], bool, Option<usize>);

    #[test]
    fn writes_go_to_the_first_connected_writable_replica() {
        let replicas = [2, 0, 1];
        let cases: &[Case] = &[
            (&[0, 1, 2], &[0, 1, 2], true, Some(2)),
            (&[0, 1, 2], &[0, 1, 2], false, Some(2)),
            (&[0, 1], &[0, 1, 2], true, Some(0)),
            // The primary cannot write: the next writable replica leads.
            (&[0, 1, 2], &[0, 1], true, Some(0)),
            (&[0, 1, 2], &[1], true, Some(1)),
            // It still serves reads.
            (&[0, 1, 2], &[1], false, Some(2)),
            // None can write: the first connected one says why.
            (&[0, 1, 2], &[], true, Some(2)),
            (&[1], &[0], true, Some(1)),
            (&[], &[0, 1, 2], true, None),
        ];
        for (connected, writable, write, want) in cases {
            let got = choose(
                &replicas,
                |n| connected.contains(&n),
                |n| writable.contains(&n),
                *write,
            );
            assert_eq!(
                got, *want,
                "connected {connected:?}, writable {writable:?}, write {write}"
            );
        }
    }

    #[test]
    fn health_is_asked_again_once_per_refresh() {
        let status = |not_writable: Option<&str>| ClusterStatus {
            cluster: "c".into(),
            node: "n1".into(),
            replication_factor: 3,
            vnodes: 4,
            nodes: ["n1", "n2"]
                .iter()
                .map(|id| crate::wire::NodeStatus {
                    id: (*id).into(),
                    client_addr: "127.0.0.1:1".into(),
                    up: true,
                    not_writable: (*id == "n1")
                        .then_some(not_writable)
                        .flatten()
                        .map(Into::into),
                    ownership: 0.5,
                })
                .collect(),
            stats: Default::default(),
        };
        let health = Health::new(&status(Some("disk full")));
        assert!(!health.is_writable(0));
        assert!(health.is_writable(1));
        assert!(health.is_writable(7), "unknown nodes are not ruled out");
        assert!(!health.due(), "the connect's status is fresh");
        health.asked_ms.store(0, Ordering::Relaxed);
        let health = Health {
            since: Instant::now() - HEALTH_REFRESH,
            ..health
        };
        assert!(health.due());
        assert!(!health.due(), "one caller asks per refresh");
        health.learn(&status(None));
        assert!(health.is_writable(0));
    }
}
