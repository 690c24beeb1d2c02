//! One running node: the engine, the ring, the peer transport, hints, and
//! the client listener, wired together.
//!
//! Start-up order matters: the engine replays its commit log and the hint
//! files are read back before any port opens, so a node never answers with
//! less than it has acknowledged. Shutdown runs the other way: listeners
//! stop, the transport closes, hints are fsync'd, the engine closes cleanly.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use anyhow::{Context, Result};
use tally_engine::{Engine, Key, Options, ParkCommit, SyncMode};
use tally_net::peer::{BoxFuture, Handler, PeerAddr, PeerSettings, Transport};
use tally_net::wire::{
    ClientOp, ClientReply, ClusterStatus, ErrorKind, NodeStats, NodeStatus, PeerRequest,
    PeerResponse, ROW_COLUMNS_MAX, WireError,
};
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::config::{Config, SyncKind};
use crate::convert::{self, engine_error, wire_cell, wire_key};
use crate::hints::{self, Hints};
use crate::ring::Ring;

/// Keys delivered to one peer per hint round.
const HINT_BATCH_KEYS_MAX: usize = 512;
/// Pause between hint rounds.
const HINT_ROUND_INTERVAL: Duration = Duration::from_millis(200);

/// One replication of a shard version: key, epoch, clock, consistency level.
pub(crate) type SharedKey = (Key, u64, u64, tally_net::wire::Consistency);
/// Its outcome, once known.
pub(crate) type SharedResult =
    tokio::sync::watch::Receiver<Option<Result<(), crate::coordinator::Replication>>>;

/// A node of the cluster.
pub struct Node {
    /// The cluster's configuration.
    pub config: Config,
    /// This node's index in `config.nodes` and on the ring.
    pub me: usize,
    pub(crate) ring: Ring,
    pub(crate) engine: Engine,
    pub(crate) hints: Hints,
    transport: OnceLock<Arc<Transport>>,
    pub(crate) write_timeout: Duration,
    pub(crate) read_timeout: Duration,
    /// Replications shared by adds combined into one shard version.
    pub(crate) shared_replications:
        parking_lot::Mutex<std::collections::HashMap<SharedKey, SharedResult>>,
    /// Fault injection: every Nth led add is acknowledged but not applied.
    drop_every: std::sync::atomic::AtomicU64,
    led_adds: std::sync::atomic::AtomicU64,
    /// Adds waiting for their batch (see `adds`).
    pub(crate) add_queue: Arc<crate::adds::AddQueue>,
}

impl Node {
    /// Opens the node's storage (replaying its commit log) and hint files.
    /// `park_commit` is the hook of a runtime that writes group commits as
    /// it parks, if it does.
    pub fn open(
        config: Config,
        node_id: &str,
        park_commit: Option<ParkCommit>,
    ) -> Result<Arc<Node>> {
        let (me, node) = config.node(node_id)?;
        let dir = node.data_dir.clone();
        let c = &config.cluster;
        let opts = Options {
            sync: match c.sync {
                SyncKind::Batch => SyncMode::Batch,
                SyncKind::Periodic => SyncMode::Periodic {
                    interval_ms: c.sync_interval_ms,
                },
            },
            group_commit_window_us: c.group_commit_window_us,
            // Every waiter is a task on the node's runtime.
            answer_on: tokio::runtime::Handle::try_current().ok(),
            park_commit,
            ..Options::default()
        };
        let engine_dir = dir.join("engine");
        let engine = Engine::open(&engine_dir, opts)
            .with_context(|| format!("open the engine in {}", engine_dir.display()))?;
        let others: Vec<(usize, String)> = config
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != me)
            .map(|(i, n)| (i, n.id.clone()))
            .collect();
        let hints = Hints::open(&dir.join("hints"), &others)?;
        let ring = Ring::new(&config.node_ids(), c.vnodes, c.replication_factor);
        Ok(Arc::new(Node {
            me,
            ring,
            engine,
            hints,
            transport: OnceLock::new(),
            write_timeout: Duration::from_millis(c.write_timeout_ms),
            read_timeout: Duration::from_millis(c.read_timeout_ms),
            shared_replications: parking_lot::Mutex::new(std::collections::HashMap::new()),
            drop_every: std::sync::atomic::AtomicU64::new(0),
            led_adds: std::sync::atomic::AtomicU64::new(0),
            add_queue: Arc::default(),
            config,
        }))
    }

    /// Starts the peer transport and the background tasks. Returns the
    /// transport so the caller can close it.
    pub fn start_peers(self: &Arc<Self>) -> Result<Arc<Transport>> {
        let c = &self.config.cluster;
        let settings = PeerSettings {
            cluster: c.name.clone(),
            nodes: self
                .config
                .nodes
                .iter()
                .map(|n| PeerAddr {
                    id: n.id.clone(),
                    addr: n.peer,
                })
                .collect(),
            me: self.me,
            bind: self.config.nodes[self.me].peer_bind,
            tls: crate::certs::node_files(&c.certs_dir, &self.config.nodes[self.me].id),
            heartbeat_interval: Duration::from_millis(c.heartbeat_interval_ms),
            failure_timeout: Duration::from_millis(c.failure_timeout_ms),
        };
        let handler = Arc::new(PeerHandler(Arc::downgrade(self)));
        let transport = Transport::start(settings, handler).context("start the peer transport")?;
        if self.transport.set(transport.clone()).is_err() {
            anyhow::bail!("the peer transport is already running");
        }
        tokio::spawn(crate::adds::run(Arc::downgrade(self)));
        tokio::spawn(deliver_hints(Arc::downgrade(self)));
        tokio::spawn(sync_hints(Arc::downgrade(self)));
        Ok(transport)
    }

    /// FAULT INJECTION for testing checkers: from now on, every `n`th add
    /// this node leads is acknowledged without being applied (a lost write).
    pub fn inject_drop_every(&self, n: u64) {
        self.drop_every
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether fault injection says to drop this led add.
    pub(crate) fn drop_this_add(&self) -> bool {
        let every = self.drop_every.load(std::sync::atomic::Ordering::Relaxed);
        every > 0
            && self
                .led_adds
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                % every
                == every - 1
    }

    pub(crate) fn transport(&self) -> &Transport {
        self.transport
            .get()
            .expect("start_peers runs before any request")
    }

    /// The client address of this node.
    pub fn client_addr(&self) -> SocketAddr {
        self.config.nodes[self.me].client
    }

    /// The replicas of a partition, primary first.
    pub(crate) fn replicas(&self, partition: &[u8]) -> crate::ring::Replicas {
        self.ring.replicas(partition)
    }

    /// Records a hint; a failure to write one is logged, not fatal: the
    /// shard is durable on this node and read repair still reaches the replica.
    pub(crate) fn hint(&self, replica: usize, key: &Key) {
        if let Err(e) = self.hints.add(replica, key) {
            warn!(replica = %self.config.nodes[replica].id, error = %e, "could not record a hint");
        }
    }

    /// Runs one client operation.
    pub async fn execute(self: &Arc<Self>, op: ClientOp) -> Result<ClientReply, WireError> {
        match op {
            ClientOp::Ping => Ok(ClientReply::Pong),
            ClientOp::Add { key, delta, cl } => {
                self.add(&key, delta, cl).await.map(ClientReply::Value)
            }
            ClientOp::Get { key, cl } => self.get(&key, cl).await.map(ClientReply::Value),
            ClientOp::GetRow { partition, cl } => {
                self.get_row(&partition, cl).await.map(ClientReply::Row)
            }
            ClientOp::Reset { key, cl } => self.reset(&key, cl).await.map(|()| ClientReply::Done),
            ClientOp::Status => Ok(self.status()),
        }
    }

    fn status(&self) -> ClientReply {
        let ownership = self.ring.ownership();
        let nodes = self
            .config
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeStatus {
                id: n.id.clone(),
                client_addr: n.client.to_string(),
                up: self.transport().is_up(i),
                ownership: ownership.get(i).copied().unwrap_or(0.0),
            })
            .collect();
        let e = self.engine.stats();
        let hints_pending = (0..self.config.nodes.len())
            .map(|i| self.hints.count(i) as u64)
            .sum();
        ClientReply::Status(ClusterStatus {
            cluster: self.config.cluster.name.clone(),
            node: self.config.nodes[self.me].id.clone(),
            replication_factor: u32::try_from(self.config.cluster.replication_factor)
                .unwrap_or(u32::MAX),
            vnodes: u32::try_from(self.config.cluster.vnodes).unwrap_or(u32::MAX),
            nodes,
            stats: NodeStats {
                cells: e.table_cells + e.memtable_cells as u64,
                log_bytes: e.log_bytes,
                table_bytes: e.table_bytes,
                hints_pending,
                adds_led: e.adds,
            },
        })
    }

    /// Stops the engine and syncs the hints; called once at shutdown.
    pub fn close(&self) -> Result<()> {
        if let Some(t) = self.transport.get() {
            t.close();
        }
        self.hints.sync().context("sync hints")?;
        self.engine.shutdown().context("close the engine")?;
        Ok(())
    }
}

/// Answers peers' requests.
struct PeerHandler(Weak<Node>);

impl Handler for PeerHandler {
    fn handle(&self, reqs: Vec<PeerRequest>) -> BoxFuture<Vec<PeerResponse>> {
        let node = self.0.upgrade();
        Box::pin(async move {
            let Some(node) = node else {
                let e = WireError::new(ErrorKind::Storage, "node is shutting down");
                return reqs
                    .iter()
                    .map(|_| PeerResponse::Error(e.clone()))
                    .collect();
            };
            let mut out: Vec<Option<PeerResponse>> = vec![None; reqs.len()];
            // Shards are merged as one batch under one fsync; everything
            // else runs on its own task.
            let mut applies = Vec::new();
            let mut slots = Vec::new();
            let mut others = Vec::new();
            for (i, req) in reqs.into_iter().enumerate() {
                match req {
                    PeerRequest::Apply { key, cell } => match convert::key(&key) {
                        Ok(k) => {
                            applies.push((k, convert::cell(&cell)));
                            slots.push(i);
                        }
                        Err(e) => out[i] = Some(PeerResponse::Error(e)),
                    },
                    req => others.push((i, tokio::spawn(handle_one(node.clone(), req)))),
                }
            }
            if !applies.is_empty() {
                match node.engine.apply_many(&applies).await {
                    Ok(results) => {
                        for ((i, (_, cell)), r) in slots.into_iter().zip(&applies).zip(results) {
                            out[i] = Some(match r {
                                Ok(epoch) if epoch > cell.epoch() => PeerResponse::Stale { epoch },
                                Ok(_) => PeerResponse::Applied,
                                Err(e) => PeerResponse::Error(engine_error(&e)),
                            });
                        }
                    }
                    Err(e) => {
                        for i in slots {
                            out[i] = Some(PeerResponse::Error(engine_error(&e)));
                        }
                    }
                }
            }
            for (i, task) in others {
                out[i] = Some(task.await.unwrap_or_else(|e| {
                    PeerResponse::Error(WireError::new(
                        ErrorKind::Internal,
                        format!("request failed: {e}"),
                    ))
                }));
            }
            out.into_iter()
                .map(|a| a.expect("every request got an answer above"))
                .collect()
        })
    }
}

/// Answers one request that is not part of an apply batch.
async fn handle_one(node: Arc<Node>, req: PeerRequest) -> PeerResponse {
    let result = match req {
        PeerRequest::Apply { .. } => Err(WireError::new(
            ErrorKind::Internal,
            "applies are handled as a batch",
        )),
        PeerRequest::Read { key } => convert::key(&key).and_then(|k| {
            node.engine
                .get(&k)
                .map(|c| PeerResponse::Cell(wire_cell(&c)))
                .map_err(|e| engine_error(&e))
        }),
        PeerRequest::ReadRow { partition } => match node.engine.get_row(&partition) {
            Ok(row) if row.len() > ROW_COLUMNS_MAX => Err(row_too_long(row.len())),
            Ok(row) => Ok(PeerResponse::Row(
                row.into_iter()
                    .map(|(k, c)| (k.column().to_vec(), wire_cell(&c)))
                    .collect(),
            )),
            Err(e) => Err(engine_error(&e)),
        },
        PeerRequest::LeaderAdd { key, delta, cl } => match convert::key(&key) {
            Ok(k) => node.lead_add(k, delta, cl).await.map(PeerResponse::Added),
            Err(e) => Err(e),
        },
        PeerRequest::LeaderReset { key, cl } => match convert::key(&key) {
            Ok(k) => node.lead_reset(&k, cl).await.map(|()| PeerResponse::Reset),
            Err(e) => Err(e),
        },
        PeerRequest::Ping { .. } => Ok(PeerResponse::Pong),
    };
    result.unwrap_or_else(PeerResponse::Error)
}

/// The error for a row over [`ROW_COLUMNS_MAX`] columns.
pub(crate) fn row_too_long(columns: usize) -> WireError {
    WireError::new(
        ErrorKind::Invalid,
        format!(
            "the row has {columns} columns, over the {ROW_COLUMNS_MAX} one read returns; read its columns one by one"
        ),
    )
}

/// Delivers hints to peers that are up, in rounds, until the node stops.
async fn deliver_hints(node: Weak<Node>) {
    loop {
        tokio::time::sleep(HINT_ROUND_INTERVAL).await;
        let Some(node) = node.upgrade() else { return };
        for peer in 0..node.config.nodes.len() {
            if peer == node.me || node.hints.count(peer) == 0 || !node.transport().is_up(peer) {
                continue;
            }
            let keys = node.hints.pending(peer, HINT_BATCH_KEYS_MAX);
            let mut sends = JoinSet::new();
            for (key, generation) in keys {
                let cell = match node.engine.get(&key) {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(error = %e, "cannot read a hinted cell");
                        continue;
                    }
                };
                let n = node.clone();
                sends.spawn(async move {
                    let req = PeerRequest::Apply {
                        key: wire_key(&key),
                        cell: wire_cell(&cell),
                    };
                    let ok = matches!(
                        n.transport().call(peer, req, n.write_timeout).await,
                        Ok(PeerResponse::Applied | PeerResponse::Stale { .. })
                    );
                    (key, generation, ok)
                });
            }
            let mut delivered = Vec::new();
            while let Some(joined) = sends.join_next().await {
                if let Ok((key, generation, true)) = joined {
                    delivered.push((key, generation));
                }
            }
            let count = delivered.len();
            if let Err(e) = node.hints.delivered(peer, &delivered) {
                warn!(error = %e, "could not record delivered hints");
            }
            if count > 0 {
                info!(peer = %node.config.nodes[peer].id, delivered = count, left = node.hints.count(peer), "delivered hints");
            }
        }
    }
}

/// Fsyncs hint files every `hints::SYNC_INTERVAL`.
async fn sync_hints(node: Weak<Node>) {
    loop {
        tokio::time::sleep(hints::SYNC_INTERVAL).await;
        let Some(node) = node.upgrade() else { return };
        let result = tokio::task::spawn_blocking(move || node.hints.sync()).await;
        if let Ok(Err(e)) = result {
            warn!(error = %e, "could not fsync hints");
        }
    }
}
