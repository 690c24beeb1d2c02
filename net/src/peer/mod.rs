//! The peer transport: QUIC between nodes, mutual TLS, batched requests.
//!
//! The transport runs on a [`Network`] that only carries bytes: QUIC in a
//! node ([`quic`]: one quinn endpoint that both accepts connections from
//! its peers and dials them), a seeded network in the simulator. Outgoing
//! traffic to a peer goes through one sender task per peer:
//!
//! ```text
//! call(peer, req) ─▶ bounded queue ─▶ sender task: take everything queued
//!   (≤ BATCH_MESSAGES_MAX), open one bidirectional stream, write the batch,
//!   finish ─▶ the peer answers the batch in order on the same stream
//! ```
//!
//! A call may carry several requests ([`Transport::submit`]): a coordinator
//! replicating a batch of adds sends their shards as one call, with one
//! answer channel, and no timer of its own.
//!
//! Batching is what makes a hot counter cheap to replicate: a thousand
//! concurrent adds become a handful of streams, not a thousand. The sender
//! keeps one connection per peer and dials again when it is lost, so a peer
//! that restarts is reached again without anyone noticing.
//!
//! Liveness: a heartbeat task per peer sends `Ping` every
//! `heartbeat_interval`. A peer is up from its first answer and down once it
//! has not answered for `failure_timeout`. Coordinators use this to pick
//! leaders, to fail fast with "unavailable", and to decide when to hint.
//! The answer also says whether the peer can take writes
//! ([`Handler::not_writable`]): a peer whose storage failed stays up, for
//! reads, but is not chosen to lead ([`Transport::not_writable`]).
//!
//! Inbound, each connection and each stream get a task; a batch is decoded
//! under the wire's size limit, its requests run concurrently, the answers
//! go back in order. A malformed or oversized batch closes that connection
//! with an error code; the node goes on serving everyone else.
//!
//! Versions ([`crate::version`]): each connection speaks the peer protocol
//! its TLS handshake agreed on, the highest both builds know. A request a
//! connection's protocol does not know is failed as unreachable, never
//! sent ([`PeerRequest::since`]). On protocol 3 the heartbeat is `Hello`,
//! which carries each side's build and cluster features
//! ([`Transport::build_of`]); a peer whose build lacks a feature this node
//! has enabled ([`Handler::admits`]), or that speaks a protocol older than
//! the enabled features need ([`Handler::oldest_peer`]), is refused both
//! ways and counted down. A clean stop closes every connection and waits
//! until the peers were told ([`Transport::close_and_tell`]).
//!
//! Who sent a batch is the node its connection's certificate names
//! ([`crate::identity`]); the handler gets that node's index with every
//! batch, and a certificate that names no other node of the cluster is
//! refused during the handshake. A connection may have at most
//! [`STREAMS_PER_CONNECTION_MAX`] batches open at once. Cells in answers
//! are checked for clocks near wrapping ([`crate::bounds`]) before a caller
//! sees them. Log lines a stranger can cause are rate-limited
//! ([`crate::log_limit`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::Duration;
use tally_world::Instant;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::encoded::{self, Encoded, Kind};
use crate::log_limit::LogLimit;
use crate::tls::{TlsError, TlsFiles};
use crate::version;
use crate::wire::{
    self, BATCH_MESSAGES_MAX, ErrorKind, PeerRequest, PeerResponse, WireBuild, WireError,
};

mod inbound;
pub mod network;
pub mod quic;

pub use inbound::{BadBatch, Inbound};
pub use network::{Channel, Network, Want};
use quic::Quic;

/// A boxed future, as handlers return them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the node does with requests from a peer.
pub trait Handler: Send + Sync + 'static {
    /// Answers one batch from node `from` (its index in the settings'
    /// `nodes`, proven by its certificate), in order (one answer per
    /// request). Getting the whole batch lets the node apply a batch of
    /// shards under one fsync. `Ping` never reaches the handler.
    fn handle(&self, from: usize, reqs: Vec<PeerRequest>) -> BoxFuture<Vec<PeerResponse>>;

    /// Why this node takes no writes (its storage failed), or `None` when
    /// it does; every heartbeat answer tells the peers. Asked once per
    /// heartbeat per peer: keep it cheap.
    fn not_writable(&self) -> Option<String> {
        None
    }

    /// The version of the ring this node uses; every heartbeat answer
    /// tells the peers, so that one behind learns it is. Keep it cheap.
    fn ring_version(&self) -> u64 {
        0
    }

    /// This node's build and cluster features, announced in every
    /// heartbeat of peer protocol 3. Keep it cheap.
    fn build(&self) -> WireBuild {
        WireBuild::default()
    }

    /// The oldest peer protocol this node speaks now. Once the cluster has
    /// enabled a feature, a build that speaks only an older protocol (one
    /// that cannot even announce its features) lacks it: its connections
    /// are refused, both ways.
    fn oldest_peer(&self) -> u16 {
        version::PEER_OLDEST
    }

    /// Whether a peer that announces `build` may take part: `Err(why)`
    /// when it lacks a feature this node has enabled. Its heartbeats are
    /// refused, and it is counted down.
    fn admits(&self, build: &WireBuild) -> Result<(), String> {
        let _ = build;
        Ok(())
    }
}

/// Batches in flight to one peer; the sender waits beyond this.
const EXCHANGES_MAX: usize = 256;
/// Longest one batch may take, answer included, before it counts as lost.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Calls that may wait for a peer's sender task.
const QUEUE_CALLS_MAX: usize = 8192;
/// Streams (batches) a peer may have open at once on one connection to
/// this node. Each costs a task and a batch buffer here until it is
/// answered, so a peer holding streams open would otherwise grow both
/// without limit. An honest sender never has more than [`EXCHANGES_MAX`]
/// batches in flight to one peer, so it never waits on this limit.
pub const STREAMS_PER_CONNECTION_MAX: u32 = 256;
const _: () = assert!(EXCHANGES_MAX as u64 <= STREAMS_PER_CONNECTION_MAX as u64);

/// One node of the cluster, as the transport knows it.
#[derive(Debug, Clone)]
pub struct PeerAddr {
    /// Node id; also the name in its certificate.
    pub id: String,
    /// Its QUIC address.
    pub addr: SocketAddr,
}

/// How to run the transport.
#[derive(Debug, Clone)]
pub struct PeerSettings {
    /// Cluster name; heartbeats from another cluster are refused.
    pub cluster: String,
    /// Every node, this one included, in config order.
    pub nodes: Vec<PeerAddr>,
    /// This node's index in `nodes`.
    pub me: usize,
    /// Where to bind, if not this node's address in `nodes`.
    pub bind: Option<SocketAddr>,
    /// TLS material.
    pub tls: TlsFiles,
    /// Time between heartbeats.
    pub heartbeat_interval: Duration,
    /// Silence after which a peer is down.
    pub failure_timeout: Duration,
}

/// Why a call to a peer failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    /// No connection could be made: the request was not delivered.
    #[error("peer {peer} is unreachable: {reason}")]
    Unreachable {
        /// Node id.
        peer: String,
        /// Why.
        reason: String,
    },
    /// The connection failed after the request may have been delivered.
    #[error("connection to peer {peer} failed: {reason}")]
    Lost {
        /// Node id.
        peer: String,
        /// Why.
        reason: String,
    },
    /// No answer in time; the request may or may not have been applied.
    #[error("peer {peer} did not answer within {ms} ms")]
    Timeout {
        /// Node id.
        peer: String,
        /// The deadline.
        ms: u64,
    },
    /// Too many calls are queued for the peer: the request was not sent.
    #[error("peer {peer} has too many requests queued")]
    Overloaded {
        /// Node id.
        peer: String,
    },
    /// The peer's answer did not decode.
    #[error("peer {peer} sent a malformed answer: {reason}")]
    Malformed {
        /// Node id.
        peer: String,
        /// Why.
        reason: String,
    },
}

/// Why the transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// TLS material is missing or bad.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The UDP socket could not be bound.
    #[error("bind QUIC endpoint on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// Requests that travel in one batch and are answered together. Callers
/// keep a call's requests of one kind (see `sender`, which sorts by the first).
struct Call {
    body: Encoded,
    done: oneshot::Sender<Result<Vec<PeerResponse>, PeerError>>,
    /// Sent even when no one waits for the answers (`submit_detached`);
    /// otherwise a call whose caller gave up is not sent at all.
    detached: bool,
}

/// The answers to a [`Transport::submit`], in request order.
pub type Answers = oneshot::Receiver<Result<Vec<PeerResponse>, PeerError>>;

struct Link {
    /// The peer's index in the cluster's nodes.
    node: usize,
    id: String,
    queue: mpsc::Sender<Call>,
    up: AtomicBool,
    /// Why the peer takes no writes, as its last heartbeat answer said.
    not_writable: Mutex<Option<String>>,
    /// The peer's ring version, as its last heartbeat answer said.
    ring: std::sync::atomic::AtomicU64,
    /// The peer protocol of the last connection to the peer (0: none yet).
    protocol: AtomicU16,
    /// The peer's build, as its last heartbeat answer of protocol 3 said.
    build: Mutex<Option<WireBuild>>,
    /// What this node answers, and which protocols it speaks now.
    handler: Arc<dyn Handler>,
    last_ok: Mutex<Option<Instant>>,
    /// The heartbeat found the peer down: the sender's next batch goes on
    /// a new connection (the cached one may be a dead incarnation's).
    redial: AtomicBool,
    /// What carries the batches.
    network: Arc<dyn Network>,
}

/// The running transport. Cheap to share (`Arc`).
pub struct Transport {
    network: Arc<dyn Network>,
    settings: PeerSettings,
    links: Vec<Option<Arc<Link>>>,
    closed: AtomicBool,
}

impl Transport {
    /// Starts QUIC ([`quic`]: binds the endpoint, accepts the peers),
    /// then the transport on it. Must run inside a tokio runtime.
    pub fn start(
        settings: PeerSettings,
        handler: Arc<dyn Handler>,
    ) -> Result<Arc<Transport>, StartError> {
        let inbound = Transport::inbound(&settings, handler.clone());
        let network = Quic::start(&settings, inbound)?;
        Ok(Transport::start_on(settings, handler, network))
    }

    /// What answers this node's peers: for the network to hand their
    /// batches to.
    pub fn inbound(settings: &PeerSettings, handler: Arc<dyn Handler>) -> Arc<Inbound> {
        Arc::new(Inbound {
            handler,
            cluster: settings.cluster.clone(),
        })
    }

    /// Starts a sender and a heartbeat task per peer, sending over
    /// `network` (QUIC, or the simulator's).
    pub fn start_on(
        settings: PeerSettings,
        handler: Arc<dyn Handler>,
        network: Arc<dyn Network>,
    ) -> Arc<Transport> {
        let mut receivers = Vec::new();
        let links = settings
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                if i == settings.me {
                    return None;
                }
                let (queue, rx) = mpsc::channel(QUEUE_CALLS_MAX);
                let link = Arc::new(Link {
                    node: i,
                    id: node.id.clone(),
                    queue,
                    up: AtomicBool::new(false),
                    not_writable: Mutex::new(None),
                    ring: std::sync::atomic::AtomicU64::new(0),
                    protocol: AtomicU16::new(0),
                    build: Mutex::new(None),
                    handler: handler.clone(),
                    last_ok: Mutex::new(None),
                    redial: AtomicBool::new(false),
                    network: network.clone(),
                });
                receivers.push((link.clone(), rx));
                Some(link)
            })
            .collect();
        let transport = Arc::new(Transport {
            network,
            settings,
            links,
            closed: AtomicBool::new(false),
        });
        for (link, rx) in receivers {
            tokio::spawn(sender(link.clone(), rx));
            tokio::spawn(heartbeat(Arc::downgrade(&transport), link));
        }
        transport
    }

    /// Reads the TLS files again and uses them for every connection made
    /// from now on, accepted or dialled; established ones keep theirs. On
    /// an error nothing changes.
    pub fn reload_tls(&self) -> Result<(), TlsError> {
        self.network.reload_tls()
    }

    /// Whether [`Transport::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether `node` answers heartbeats (this node always does).
    pub fn is_up(&self, node: usize) -> bool {
        match self.links.get(node) {
            Some(Some(link)) => link.up.load(Ordering::Acquire),
            Some(None) => true,
            None => false,
        }
    }

    /// Why `node`, up, takes no writes, as its last heartbeat answer said;
    /// `None` when it can write, is down, or is this node (whose own state
    /// the transport does not know).
    pub fn not_writable(&self, node: usize) -> Option<String> {
        match self.links.get(node) {
            Some(Some(link)) if link.up.load(Ordering::Acquire) => link.not_writable.lock().clone(),
            _ => None,
        }
    }

    /// Whether `node` answers heartbeats and can take writes (this node:
    /// see [`Transport::not_writable`]).
    pub fn is_writable(&self, node: usize) -> bool {
        match self.links.get(node) {
            Some(Some(link)) => {
                link.up.load(Ordering::Acquire) && link.not_writable.lock().is_none()
            }
            Some(None) => true,
            None => false,
        }
    }

    /// The ring version `node` last said it uses (0 before it answered).
    pub fn ring_version(&self, node: usize) -> u64 {
        match self.links.get(node) {
            Some(Some(link)) => link.ring.load(Ordering::Acquire),
            _ => 0,
        }
    }

    /// The peer protocol of the last connection to `node` (0: none yet;
    /// this node: the newest it speaks).
    pub fn protocol(&self, node: usize) -> u16 {
        match self.links.get(node) {
            Some(Some(link)) => link.protocol.load(Ordering::Acquire),
            Some(None) => version::PEER_NEWEST,
            None => 0,
        }
    }

    /// `node`'s build as its last heartbeat answer of protocol 3 said
    /// (`None`: not heard yet, or a build that does not announce itself).
    pub fn build_of(&self, node: usize) -> Option<WireBuild> {
        match self.links.get(node) {
            Some(Some(link)) => link.build.lock().clone(),
            _ => None,
        }
    }

    /// Whether `node`'s last announced build has enabled `feature`
    /// (`None`: none heard from it), without a copy of the build.
    pub fn has_enabled(&self, node: usize, feature: &str) -> Option<bool> {
        match self.links.get(node) {
            Some(Some(link)) => link
                .build
                .lock()
                .as_ref()
                .map(|b| b.enabled.iter().any(|f| f == feature)),
            _ => None,
        }
    }

    /// Counts `node` down at once (it said it is leaving): coordinators
    /// stop choosing it, and the next batch to it dials afresh. Its next
    /// heartbeat answer counts it up again.
    pub fn mark_down(&self, node: usize) {
        if let Some(Some(link)) = self.links.get(node) {
            *link.last_ok.lock() = None;
            link.redial.store(true, Ordering::Release);
            if link.up.swap(false, Ordering::AcqRel) {
                info!(peer = %link.id, "peer is leaving: counted down");
            }
        }
    }

    fn link(&self, node: usize) -> Result<&Link, PeerError> {
        match self.links.get(node) {
            Some(Some(link)) => Ok(link),
            _ => Err(PeerError::Unreachable {
                peer: format!("#{node}"),
                reason: "not a peer of this node".into(),
            }),
        }
    }

    /// Sends one request to `node` (batched with others) and waits up to
    /// `timeout` for its answer.
    pub async fn call(
        &self,
        node: usize,
        req: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, PeerError> {
        let link = self.link(node)?;
        let (done, rx) = oneshot::channel();
        let call = Call {
            body: Encoded::new(&[req]),
            done,
            detached: false,
        };
        let timed_out = || PeerError::Timeout {
            peer: link.id.clone(),
            ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        };
        let deadline = tally_world::Instant::now() + timeout;
        match tokio::time::timeout_at(deadline, link.queue.send(call)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(stopped(link)),
            Err(_) => return Err(timed_out()),
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(mut answers))) if answers.len() == 1 => Ok(answers.remove(0)),
            Ok(Ok(Ok(answers))) => Err(PeerError::Malformed {
                peer: link.id.clone(),
                reason: format!("{} answers to one request", answers.len()),
            }),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(lost(link)),
            Err(_) => Err(timed_out()),
        }
    }

    /// Queues `reqs` for `node` as one call, without waiting: the answers
    /// (one per request, in order) arrive on the receiver. There is no
    /// timer: the caller bounds its wait. Fails at once, with nothing sent,
    /// when the peer's queue is full. At most `BATCH_MESSAGES_MAX` requests.
    pub fn submit(&self, node: usize, reqs: Vec<PeerRequest>) -> Result<Answers, PeerError> {
        self.submit_encoded(node, Encoded::new(&reqs))
    }

    /// [`Transport::submit`] of requests already encoded: the same ones
    /// go to several peers for the cost of one encoding. Dropping the
    /// answers' receiver before the call is sent drops the call: a
    /// request whose answer no one waits for any more is not sent.
    pub fn submit_encoded(&self, node: usize, body: Encoded) -> Result<Answers, PeerError> {
        self.queue(node, body, false)
    }

    /// Queues requests that must go out whether or not anyone waits for
    /// their answers (which are dropped): news a peer is better for
    /// having, like a decided value. Fails at once, with nothing sent,
    /// when the peer's queue is full.
    pub fn submit_detached(&self, node: usize, body: Encoded) -> Result<(), PeerError> {
        self.queue(node, body, true).map(drop)
    }

    fn queue(&self, node: usize, body: Encoded, detached: bool) -> Result<Answers, PeerError> {
        let link = self.link(node)?;
        if body.len() > BATCH_MESSAGES_MAX {
            return Err(PeerError::Unreachable {
                peer: link.id.clone(),
                reason: format!(
                    "{} requests in one call, over the {BATCH_MESSAGES_MAX} of a batch",
                    body.len()
                ),
            });
        }
        let (done, rx) = oneshot::channel();
        match link.queue.try_send(Call {
            body,
            done,
            detached,
        }) {
            Ok(()) => Ok(rx),
            Err(mpsc::error::TrySendError::Full(_)) => Err(PeerError::Overloaded {
                peer: link.id.clone(),
            }),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(stopped(link)),
        }
    }

    /// Closes every connection; calls fail from now on.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.network.close();
    }

    /// [`Transport::close`], then waits up to `linger` for the peers to
    /// have been told: each drops its connection at once and dials afresh,
    /// so a node restarted within its failure timeout (a rolling upgrade)
    /// is not sent batches on a connection that no longer leads anywhere.
    pub async fn close_and_tell(&self, linger: Duration) {
        self.close();
        let _ = tokio::time::timeout(linger, self.network.told()).await;
    }
}

fn stopped(link: &Link) -> PeerError {
    PeerError::Unreachable {
        peer: link.id.clone(),
        reason: "transport stopped".into(),
    }
}

fn lost(link: &Link) -> PeerError {
    PeerError::Lost {
        peer: link.id.clone(),
        reason: "sender stopped".into(),
    }
}

/// Drains a peer's queue in batches, one stream per batch.
async fn sender(link: Arc<Link>, mut rx: mpsc::Receiver<Call>) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(EXCHANGES_MAX));
    // A call that did not fit in the last batch.
    let mut carried: Option<Call> = None;
    loop {
        let first = match carried.take() {
            Some(call) => call,
            None => match rx.recv().await {
                Some(call) => call,
                None => return,
            },
        };
        // Let the tasks that are ready run first, so that the calls they
        // make (one fsync's worth of replications) share this batch.
        tokio::task::yield_now().await;
        let mut requests = first.body.len();
        let mut batch = vec![first];
        while requests < BATCH_MESSAGES_MAX {
            match rx.try_recv() {
                Ok(call) if requests + call.body.len() > BATCH_MESSAGES_MAX => {
                    carried = Some(call);
                    break;
                }
                Ok(call) => {
                    requests += call.body.len();
                    batch.push(call);
                }
                Err(_) => break,
            }
        }
        // Callers that gave up need no answer, and their requests are not
        // sent; detached ones go out all the same.
        batch.retain(|c| c.detached || !c.done.is_closed());
        if batch.is_empty() {
            continue;
        }
        let want = match link.redial.swap(false, Ordering::AcqRel) {
            true => Want::Fresh,
            false => Want::Any,
        };
        let c = match connection(&link, want).await {
            Ok(c) => c,
            Err(reason) => {
                debug!(peer = %link.id, %reason, "dial failed");
                for call in batch {
                    let _ = call.done.send(Err(PeerError::Unreachable {
                        peer: link.id.clone(),
                        reason: reason.clone(),
                    }));
                }
                continue;
            }
        };
        // A request the peer's protocol does not know is never sent.
        let protocol = link.protocol.load(Ordering::Acquire);
        if batch.iter().any(|c| c.body.since() > protocol) {
            let unknown;
            (unknown, batch) = batch.into_iter().partition(|c| c.body.since() > protocol);
            for call in unknown {
                let _ = call.done.send(Err(PeerError::Unreachable {
                    peer: link.id.clone(),
                    reason: format!("the peer speaks peer protocol {protocol} only"),
                }));
            }
        }
        // A peer answers a batch when its slowest request is done: keep
        // heartbeats and leader requests (which wait for replication) out
        // of batches whose answers they would hold up, or be held up by.
        let (pings, rest): (Vec<Call>, Vec<Call>) =
            batch.into_iter().partition(|c| c.body.kind() == Kind::Ping);
        let (leads, rest): (Vec<Call>, Vec<Call>) =
            rest.into_iter().partition(|c| c.body.kind() == Kind::Lead);
        // A row answer can be megabytes: one per stream keeps every answer
        // under the message limit.
        let (rows, plain): (Vec<Call>, Vec<Call>) =
            rest.into_iter().partition(|c| c.body.kind() == Kind::Row);
        let groups = [pings, plain, leads]
            .into_iter()
            .chain(rows.into_iter().map(|r| vec![r]));
        for group in groups {
            if group.is_empty() {
                continue;
            }
            let Ok(permit) = in_flight.clone().acquire_owned().await else {
                return;
            };
            let (c, link) = (c.clone(), link.clone());
            tokio::spawn(async move {
                exchange(c, link, group).await;
                drop(permit);
            });
        }
    }
}

/// The link's channel as `want` says, dialled once for all who wait; a
/// peer whose protocol is older than the cluster's features need is
/// refused.
async fn connection(link: &Link, want: Want) -> Result<Arc<dyn Channel>, String> {
    let channel = link.network.channel(link.node, want).await?;
    let protocol = channel.protocol();
    link.protocol.store(protocol, Ordering::Release);
    let oldest = link.handler.oldest_peer();
    if protocol < oldest {
        channel.refuse(&network::refusal(oldest));
        return Err(format!(
            "the peer speaks peer protocol {protocol}, and this cluster needs {oldest} or newer"
        ));
    }
    Ok(channel)
}

/// Sends one batch on its own stream and hands out the answers.
///
/// When the connection fails (typically a peer that restarted: its new
/// incarnation resets the old connection), a batch of idempotent requests
/// is sent once more on a fresh connection. A batch holding a leader
/// request is not: the old incarnation may have run it just before it
/// died, and an add must not run twice, so it fails with an unknown outcome.
async fn exchange(channel: Arc<dyn Channel>, link: Arc<Link>, batch: Vec<Call>) {
    let bytes = encoded::join(batch.iter().map(|c| &c.body));
    let requests: usize = batch.iter().map(|c| c.body.len()).sum();
    let idempotent = batch.iter().all(|c| c.body.idempotent());
    let dones: Vec<_> = batch.into_iter().map(|c| (c.body.len(), c.done)).collect();
    let peer = link.id.clone();
    let bytes = bytes::Bytes::from(bytes);
    let timed = |channel: Arc<dyn Channel>, bytes: bytes::Bytes| async move {
        tokio::time::timeout(EXCHANGE_TIMEOUT, channel.exchange(bytes))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", EXCHANGE_TIMEOUT.as_secs())))
    };
    let mut answer = timed(channel.clone(), bytes.clone()).await;
    if let Err(why) = &answer
        && idempotent
    {
        // Only a dead connection is replaced, once for every batch that
        // was on it; a failed stream on a live one is not a reason to
        // break the batches still on it.
        let want = match channel.is_closed() {
            true => Want::Not(channel.id()),
            false => Want::Any,
        };
        debug!(peer = %peer, reason = %why, "batch failed; sending it once more");
        answer = match connection(&link, want).await {
            Ok(c) => timed(c, bytes).await,
            Err(reason) => Err(reason),
        };
    }
    let fail = |dones: Vec<(usize, oneshot::Sender<_>)>, err: PeerError| {
        for (_, d) in dones {
            let _ = d.send(Err(err.clone()));
        }
    };
    match answer {
        Err(reason) => fail(dones, PeerError::Lost { peer, reason }),
        Ok(bytes) => match wire::decode::<Vec<PeerResponse>>(&bytes) {
            Ok(resps) if resps.len() == requests => {
                let mut resps = screen_answers(&peer, resps).into_iter();
                for (n, d) in dones {
                    let _ = d.send(Ok(resps.by_ref().take(n).collect()));
                }
            }
            Ok(resps) => {
                let reason = format!("{} answers to {requests} requests", resps.len());
                fail(dones, PeerError::Malformed { peer, reason })
            }
            Err(e) => fail(
                dones,
                PeerError::Malformed {
                    peer,
                    reason: e.to_string(),
                },
            ),
        },
    }
}

/// Answers whose cells come near wrapping ([`crate::bounds`]) become
/// errors, so no caller merges them or catches up to their epoch.
fn screen_answers(peer: &str, answers: Vec<PeerResponse>) -> Vec<PeerResponse> {
    static REFUSED: LogLimit = LogLimit::per_second();
    answers
        .into_iter()
        .map(|answer| match crate::bounds::check_answer(&answer) {
            Ok(()) => answer,
            Err(e) => {
                if let Some(suppressed) = REFUSED.admit() {
                    warn!(%peer, error = %e, suppressed, "refused a peer's answer");
                }
                PeerResponse::Error(WireError::new(
                    ErrorKind::Invalid,
                    format!("peer {peer} answered a cell whose {e}"),
                ))
            }
        })
        .collect()
}

/// Pings one peer forever (until the transport is dropped), keeping its
/// up/down state.
async fn heartbeat(transport: std::sync::Weak<Transport>, link: Arc<Link>) {
    let (interval, failure_timeout, cluster, node) = match transport.upgrade() {
        Some(t) => {
            let node = t
                .links
                .iter()
                .position(|l| l.as_ref().is_some_and(|l| Arc::ptr_eq(l, &link)));
            (
                t.settings.heartbeat_interval,
                t.settings.failure_timeout,
                t.settings.cluster.clone(),
                node.expect("the link belongs to the transport"),
            )
        }
        None => return,
    };
    let started = Instant::now();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(t) = transport.upgrade() else { return };
        if t.closed.load(Ordering::Acquire) {
            return;
        }
        let result = t.call(node, ping(&link, &cluster), failure_timeout).await;
        drop(t);
        let ok = match result {
            Ok(answer) => heard(&link, answer),
            Err(_) => false,
        };
        let now = Instant::now();
        let mut last_ok = link.last_ok.lock();
        if ok {
            *last_ok = Some(now);
            if !link.up.swap(true, Ordering::AcqRel) {
                info!(peer = %link.id, "peer is up");
            }
        } else {
            let silent_since = last_ok.unwrap_or(started);
            if now.duration_since(silent_since) >= failure_timeout {
                link.redial.store(true, Ordering::Release);
                // It may come back on another build.
                *link.build.lock() = None;
                if link.up.swap(false, Ordering::AcqRel) {
                    info!(peer = %link.id, "peer is down");
                }
            }
        }
    }
}

/// The heartbeat to send on `link`: `Hello` where the last connection
/// speaks protocol 3, else `Ping` (a first heartbeat, or a peer of the
/// previous build).
fn ping(link: &Link, cluster: &str) -> PeerRequest {
    let cluster = cluster.to_string();
    match link.protocol.load(Ordering::Acquire) {
        p if p >= 3 => PeerRequest::Hello {
            cluster,
            build: link.handler.build(),
        },
        _ => PeerRequest::Ping { cluster },
    }
}

/// Keeps what a peer's heartbeat answer says; whether it counts the peer up.
fn heard(link: &Link, answer: PeerResponse) -> bool {
    let (ring, why) = match answer {
        // A build that does not announce itself (the previous one: a
        // downgraded node) has no features, whatever it said before.
        PeerResponse::Pong { ring } => {
            *link.build.lock() = None;
            (ring, None)
        }
        PeerResponse::PongNotWritable { why, ring } => {
            *link.build.lock() = None;
            (ring, Some(why))
        }
        PeerResponse::Hello {
            ring,
            not_writable,
            build,
        } => {
            let admitted = build.check().and_then(|()| link.handler.admits(&build));
            if let Err(why) = admitted {
                refused_heartbeat(link, &why);
                return false;
            }
            *link.build.lock() = Some(build);
            (ring, not_writable.map(|w| wire::bounded_reason(&w)))
        }
        other => {
            refused_heartbeat(link, &format!("{other:?}"));
            return false;
        }
    };
    link.ring.store(ring, Ordering::Release);
    note_writable(link, why);
    true
}

/// Logs, at most once a second, why a peer's heartbeat did not count.
fn refused_heartbeat(link: &Link, why: &str) {
    static REFUSED: LogLimit = LogLimit::per_second();
    if let Some(suppressed) = REFUSED.admit() {
        warn!(peer = %link.id, answer = %why, suppressed, "peer refused the heartbeat");
    }
}

/// Keeps what a peer's heartbeat answer said of its writes, logging changes.
fn note_writable(link: &Link, why: Option<String>) {
    let mut known = link.not_writable.lock();
    if *known == why {
        return;
    }
    match &why {
        Some(why) => warn!(peer = %link.id, %why, "peer cannot take writes"),
        None => info!(peer = %link.id, "peer takes writes"),
    }
    *known = why;
}
