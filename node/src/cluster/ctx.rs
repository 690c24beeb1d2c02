//! The handles every role of a node shares: its place in the cluster, its
//! engine, its peer transport, its metrics, and each role's own state as
//! a typed handle (`changes`, `fences`, `repairing`, `hints`, the tails
//! gate, `scripts`, `faults`), which only that role takes. The roles
//! (`write`, `read`, `peer`, `handoff`, `topology`, `repair`) each take
//! this and nothing else of the node, so that none of them imports
//! another's internals or the node that wires them.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tally_engine::{Engine, Epoch, Key};
use tally_net::log_limit::LogLimit;
use tally_net::peer::Transport;
use tally_net::wire::{Consistency, ErrorKind, WireError};
use tracing::warn;

use crate::base::registry::Registry;
use crate::cluster::changes::Changes;
use crate::cluster::faults::{Fault, Faults};
use crate::cluster::hints::Hints;
use crate::cluster::membership::Topology;
use crate::cluster::placement::{self, OnceRefusal, Refusal, Route, Shortfall, State};
use crate::config::Config;
use crate::ring::{Replicas, Ring};

/// A membership and the rings it gives.
pub(crate) struct Placed {
    pub(crate) topology: Topology,
    pub(crate) ring: Arc<Ring>,
    /// The ring once the change in progress is done, if one is.
    pub(crate) next: Option<Arc<Ring>>,
    /// The ring before the last change, for requests from peers that have
    /// not switched yet.
    pub(crate) previous: Option<Arc<Ring>>,
}

impl Placed {
    pub(crate) fn new(topology: Topology, config: &Config) -> Placed {
        let c = &config.cluster;
        let ids = config.node_ids();
        let ring = topology.ring(&ids, c.vnodes, c.replication_factor);
        let next = topology.next_ring(&ids, c.vnodes, c.replication_factor);
        Placed {
            topology,
            ring: Arc::new(ring),
            next: next.map(Arc::new),
            previous: None,
        }
    }
}

/// What a node opens before its [`Ctx`]: the parts every role shares.
pub(crate) struct Parts {
    pub(crate) config: Config,
    pub(crate) me: usize,
    /// The membership stored, or the configured one.
    pub(crate) topology: Topology,
    pub(crate) engine: Engine,
    pub(crate) hints: Hints,
    pub(crate) tails: crate::cluster::tails_gate::Gate,
    /// Whether a replacement of this node is in progress.
    pub(crate) replacing: bool,
    pub(crate) metrics: &'static Registry,
}

/// One node's shared handles.
pub(crate) struct Ctx {
    /// The cluster's configuration.
    config: Config,
    /// This node's index in `config.nodes` and on the ring.
    me: usize,
    /// The ring this node places data by, and the membership it comes from.
    placed: parking_lot::RwLock<Placed>,
    /// The topology role's locks and queues (`topology` alone takes them).
    changes: Changes,
    /// The write role's fences, which a ring switching over closes.
    fences: crate::cluster::fences::Fences,
    engine: Engine,
    hints: Hints,
    /// Whether this node may apply ids yet, after an unclean restart.
    tails: crate::cluster::tails_gate::Gate,
    /// The node being decommissioned, if one is (`usize::MAX`: none): it
    /// leads writes only when no other replica can (see `State::Leaving`).
    /// At most one node leaves at a time.
    leaving: std::sync::atomic::AtomicUsize,
    /// This node is being replaced (`tallyd run --replace`): it syncs its
    /// ranges, takes replicated writes, and neither leads nor answers
    /// replica reads until it is done (see `topology::replace`).
    replacing: std::sync::atomic::AtomicBool,
    /// Why this node could not store a newer ring a peer holds (its disk),
    /// if it could not: it leads and answers nothing until it does.
    ring_unstored: parking_lot::Mutex<Option<String>>,
    /// Whether `ring_unstored` holds a reason (read on every write).
    ring_behind: std::sync::atomic::AtomicBool,
    /// The repair role's state: the repair this node runs (`repair` alone
    /// takes it; the node reports it).
    repairing: crate::cluster::repairing::Repairing,
    /// Set once by `Node::start_peers`, before any request is served.
    transport: OnceLock<Arc<Transport>>,
    /// What this node counts as it serves (every role counts).
    metrics: &'static Registry,
    /// This node's cache of scripts (RESP connections and peers use it).
    scripts: crate::cluster::scripts::Scripts,
    write_timeout: Duration,
    read_timeout: Duration,
    /// The switches that break this node on purpose (tests only).
    faults: Faults,
}

impl Ctx {
    /// The handles of a node opened with `parts`; its roles' own state
    /// begins empty, its transport unset (`Node::start_peers` sets it).
    pub(crate) fn new(parts: Parts) -> Ctx {
        let c = &parts.config.cluster;
        let (write_timeout, read_timeout) = (
            Duration::from_millis(c.write_timeout_ms),
            Duration::from_millis(c.read_timeout_ms),
        );
        Ctx {
            me: parts.me,
            leaving: std::sync::atomic::AtomicUsize::new(parts.topology.leaving()),
            placed: parking_lot::RwLock::new(Placed::new(parts.topology, &parts.config)),
            changes: Changes::default(),
            fences: Default::default(),
            engine: parts.engine,
            hints: parts.hints,
            tails: parts.tails,
            replacing: std::sync::atomic::AtomicBool::new(parts.replacing),
            ring_unstored: parking_lot::Mutex::new(None),
            ring_behind: std::sync::atomic::AtomicBool::new(false),
            repairing: Default::default(),
            transport: OnceLock::new(),
            metrics: parts.metrics,
            scripts: Default::default(),
            faults: Faults::default(),
            write_timeout,
            read_timeout,
            config: parts.config,
        }
    }

    /// The cluster's configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// This node's index in `config.nodes` and on the ring.
    pub(crate) fn me(&self) -> usize {
        self.me
    }

    /// This node's storage engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The hints this node keeps for its peers.
    pub(crate) fn hints(&self) -> &Hints {
        &self.hints
    }

    /// Whether this node may apply ids yet, after an unclean restart.
    pub(crate) fn tails(&self) -> &crate::cluster::tails_gate::Gate {
        &self.tails
    }

    /// The topology role's locks and queues.
    pub(crate) fn changes(&self) -> &Changes {
        &self.changes
    }

    /// The write role's fences.
    pub(crate) fn fences(&self) -> &crate::cluster::fences::Fences {
        &self.fences
    }

    /// The repair role's state.
    pub(crate) fn repairing(&self) -> &crate::cluster::repairing::Repairing {
        &self.repairing
    }

    /// What this node counts as it serves.
    pub(crate) fn metrics(&self) -> &'static Registry {
        self.metrics
    }

    /// This node's cache of scripts.
    pub(crate) fn scripts(&self) -> &crate::cluster::scripts::Scripts {
        &self.scripts
    }

    /// The switches that break this node on purpose (tests only).
    pub(crate) fn faults(&self) -> &Faults {
        &self.faults
    }

    /// How long a write this node coordinates may take.
    pub(crate) fn write_timeout(&self) -> Duration {
        self.write_timeout
    }

    /// How long a read this node coordinates may take.
    pub(crate) fn read_timeout(&self) -> Duration {
        self.read_timeout
    }

    /// Stores and switches to `placed` (`topology::change::adopt`, under
    /// its lock and the fences it takes).
    pub(crate) fn switch_to(&self, placed: Placed) {
        *self.placed.write() = placed;
    }

    /// The ring and membership this node places data by, read-locked:
    /// drop it at once.
    pub(crate) fn placed(&self) -> parking_lot::RwLockReadGuard<'_, Placed> {
        self.placed.read()
    }

    /// Records the node being decommissioned (`usize::MAX`: none).
    pub(crate) fn set_leaving(&self, node: usize) {
        self.leaving
            .store(node, std::sync::atomic::Ordering::Relaxed);
    }

    /// This node's replacement is done: it leads and answers reads again.
    pub(crate) fn replaced(&self) {
        self.replacing
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Sets the transport, once (`Node::start_peers`); answers it back
    /// if one was set already.
    pub(crate) fn set_transport(&self, transport: Arc<Transport>) -> Result<(), Arc<Transport>> {
        self.transport.set(transport)
    }

    /// The transport, if the peers were started.
    pub(crate) fn started_transport(&self) -> Option<&Arc<Transport>> {
        self.transport.get()
    }

    /// Whether a replica holding `mine` must answer `Stale` to a shard
    /// sent in epoch `sent` (see `tally_engine::Epoch::outdates`).
    pub(crate) fn outdates(&self, mine: &Epoch, sent: &Epoch, now_ms: u64) -> bool {
        if self.faults.has(Fault::IgnoreDeadlines) {
            return mine.id() > sent.id();
        }
        mine.outdates(sent, now_ms)
    }

    pub(crate) fn transport(&self) -> &Transport {
        self.transport
            .get()
            .expect("start_peers runs before any request")
    }

    /// The replicas of a partition, primary first, with the pending ones
    /// of a ring change in progress.
    pub(crate) fn replicas(&self, partition: &[u8]) -> Replicas {
        self.placed.read().ring.replicas(partition)
    }

    /// The ring this node places data by now.
    pub(crate) fn ring(&self) -> Arc<Ring> {
        self.placed.read().ring.clone()
    }

    /// Whether an add with an id from `client` to `partition` must wait:
    /// the ring is switching over and moves its applier (see
    /// `topology::change`).
    pub(crate) fn applier_moving(&self, partition: &[u8], client: &[u8]) -> bool {
        let placed = self.placed.read();
        if !placed.topology.switching {
            return false;
        }
        let Some(next) = &placed.next else {
            return false;
        };
        let (now, then) = (placed.ring.replicas(partition), next.replicas(partition));
        tally_net::once::applier(&now, client) != tally_net::once::applier(&then, client)
    }

    /// The keyspace database `db` writes to now (no copy of the ring).
    pub(crate) fn keyspace(&self, db: u8) -> crate::base::keyspace::Keyspace {
        self.placed.read().topology.keyspace(db)
    }

    /// The refusal of a peer's request for the stored `partition` when it
    /// is of a generation of its database other than this node's (see
    /// `generations`).
    pub(crate) fn fence_generation(&self, partition: &[u8]) -> Option<WireError> {
        let placed = self.placed.read();
        super::generations::fence(partition, |db| placed.topology.keyspace(db))
    }

    /// The version of the ring this node uses (no copy of the ring).
    pub(crate) fn ring_version(&self) -> u64 {
        self.placed.read().topology.version
    }

    /// Where `node` stands in this node's ring (no copy of the ring).
    pub(crate) fn node_state(&self, node: usize) -> tally_net::wire::NodeState {
        self.placed.read().topology.states[node]
    }

    /// The membership this node knows.
    pub(crate) fn topology(&self) -> Topology {
        self.placed.read().topology.clone()
    }

    /// Whether `node` answers heartbeats (this node always does).
    pub(crate) fn is_up(&self, node: usize) -> bool {
        node == self.me || self.transport().is_up(node)
    }

    /// What this node's view says of `node`: this node is always up to
    /// itself, and writable unless its engine is poisoned, its disk full,
    /// it is being replaced or it could not store a newer ring it learned;
    /// a peer is as its heartbeats say; a writable
    /// node being decommissioned is `Leaving`.
    pub(crate) fn state(&self, node: usize) -> State {
        let writable = if node == self.me {
            // Atomic loads: every add asks.
            self.engine.is_writable()
                && !self.is_replacing()
                && !self.ring_behind.load(std::sync::atomic::Ordering::Acquire)
        } else if !self.transport().is_up(node) {
            return State::Down;
        } else {
            self.transport().is_writable(node)
        };
        match (
            writable,
            self.leaving.load(std::sync::atomic::Ordering::Relaxed) == node,
        ) {
            (true, false) => State::Writable,
            (true, true) => State::Leaving,
            (false, _) => State::ReadOnly,
        }
    }

    /// Why `node` takes no writes, if it is up and does not.
    pub(crate) fn not_writable(&self, node: usize) -> Option<String> {
        if node == self.me {
            self.own_not_writable()
        } else {
            self.transport().not_writable(node)
        }
    }

    /// Why this node leads no writes: its engine's reason, or that it is
    /// being replaced; what its heartbeats tell the peers.
    pub(crate) fn own_not_writable(&self) -> Option<String> {
        self.engine
            .not_writable()
            .or_else(|| {
                self.is_replacing()
                    .then(|| crate::cluster::membership::NOT_READY.to_string())
            })
            .or_else(|| self.ring_unstored())
    }

    /// Why this node could not store the newer ring it learned, if so:
    /// it still places data by an older one (a flushed generation of a
    /// database, a ring change it missed), so it leads no writes until it
    /// stores it (`topology::change::catch_up` tries again).
    fn ring_unstored(&self) -> Option<String> {
        if !self.ring_behind.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.ring_unstored.lock().clone()
    }

    /// Records that this node could not store a newer ring, and why
    /// (`None`: it stored the newest it learned).
    pub(crate) fn set_ring_unstored(&self, why: Option<String>) {
        let mut unstored = self.ring_unstored.lock();
        self.ring_behind
            .store(why.is_some(), std::sync::atomic::Ordering::Release);
        *unstored = why;
    }

    /// Whether this node is being replaced (see [`Ctx::replacing`]).
    pub(crate) fn is_replacing(&self) -> bool {
        self.replacing.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Refuses a replica read while this node is being replaced (its
    /// ranges are not synced yet) or could not store a newer ring it
    /// learned (it reads by an older one): its answer must not count.
    pub(crate) fn check_readable(&self) -> Result<(), WireError> {
        let why = match self.is_replacing() {
            true => Some(crate::cluster::membership::NOT_READY.to_string()),
            false => self.ring_unstored(),
        };
        match why {
            None => Ok(()),
            Some(why) => Err(WireError::new(
                ErrorKind::Unavailable,
                format!("{} {why}", self.name(self.me)),
            )),
        }
    }

    /// A node's id, for messages.
    pub(crate) fn name(&self, node: usize) -> &str {
        self.config.nodes.get(node).map_or("?", |n| n.id.as_str())
    }

    /// Who leads a write of `key` from a client (see `placement::route`).
    pub(crate) fn route(&self, key: &Key, cl: Consistency, what: &str) -> Result<Route, WireError> {
        placement::route(
            self.replicas(key.partition()),
            self.me,
            |r| self.state(r),
            cl,
        )
        .map_err(|s| self.unavailable(&s, cl, what))
    }

    /// Who leads a change of the list `key` at `cl` (see
    /// `placement::route_first`).
    pub(crate) fn route_first(
        &self,
        key: &Key,
        cl: Consistency,
        what: &str,
    ) -> Result<Route, WireError> {
        placement::route_first(
            self.replicas(key.partition()),
            self.me,
            |r| self.state(r),
            cl,
        )
        .map_err(|s| self.unavailable(&s, cl, what))
    }

    /// The replicas of a write a peer forwarded here to lead; refused as
    /// not applied when this node cannot write, so that the peer tries the
    /// next replica.
    pub(crate) fn lead_here(
        &self,
        key: &Key,
        cl: Consistency,
        what: &str,
    ) -> Result<Replicas, WireError> {
        placement::lead_here(
            self.replicas(key.partition()),
            self.me,
            |r| self.state(r),
            cl,
        )
        .map_err(|refusal| self.refused(refusal, cl, what))
    }

    /// Who leads an add with an operation id from a client: its applier
    /// alone (see `placement::route_once`).
    pub(crate) fn route_once(
        &self,
        key: &Key,
        client: &[u8],
        cl: Consistency,
    ) -> Result<Route, WireError> {
        let replicas = self.replicas(key.partition());
        let applier = tally_net::once::applier(&replicas, client);
        placement::route_once(replicas, self.me, applier, |r| self.state(r), cl).map_err(
            |r| match r {
                OnceRefusal::Shortfall(s) => self.unavailable(&s, cl, "add"),
                OnceRefusal::ApplierUnavailable { applier, state } => WireError::not_applied(
                    ErrorKind::Unavailable,
                    format!(
                        "{} applies this client's ids for the partition and is {}; \
                         nothing was applied: retry the same id",
                        self.name(applier),
                        if state == State::Down {
                            "down"
                        } else {
                            "not writable"
                        }
                    ),
                ),
            },
        )
    }

    /// The replicas of an add with an operation id a peer forwarded here:
    /// led only by its applier (see `placement::lead_once_here`).
    pub(crate) fn lead_once_here(
        &self,
        key: &Key,
        client: &[u8],
        cl: Consistency,
    ) -> Result<Replicas, WireError> {
        let replicas = self.replicas(key.partition());
        let applier = tally_net::once::applier(&replicas, client);
        placement::lead_once_here(replicas, self.me, applier, |r| self.state(r), cl)
            .map_err(|refusal| self.refused(refusal, cl, "add"))
    }

    fn refused(&self, refusal: Refusal, cl: Consistency, what: &str) -> WireError {
        match refusal {
            Refusal::ReadOnly => WireError::not_applied(
                ErrorKind::Storage,
                format!(
                    "{} cannot lead the {what}: {}; nothing was applied",
                    self.name(self.me),
                    self.not_writable(self.me).unwrap_or_default()
                ),
            ),
            // Unavailable, so that the coordinator tries the next
            // replica: the two rings differ for the moment a change takes
            // to reach every node.
            Refusal::NotAReplica => WireError::not_applied(
                ErrorKind::Unavailable,
                format!(
                    "{} is not a replica of the key in ring version {} and leads no {what} \
                     for it; nothing was applied",
                    self.name(self.me),
                    self.ring_version()
                ),
            ),
            // Unavailable, so that it is retried: the sender's ring may
            // be a version behind this node's for a moment.
            Refusal::NotTheApplier { applier } => WireError::not_applied(
                ErrorKind::Unavailable,
                format!(
                    "{} does not apply this client's ids for the key in ring version {} \
                     ({} does); nothing was applied",
                    self.name(self.me),
                    self.ring_version(),
                    self.name(applier)
                ),
            ),
            Refusal::Shortfall(s) => self.unavailable(&s, cl, what),
        }
    }

    /// `Unavailable` when fewer of `replicas` are live than a read at `cl` needs.
    pub(crate) fn check_available(
        &self,
        replicas: &[usize],
        cl: Consistency,
        what: &str,
    ) -> Result<(), WireError> {
        placement::check(replicas, |r| self.state(r), cl)
            .map_err(|s| self.unavailable(&s, cl, what))
    }

    /// The live replicas, this node first.
    pub(crate) fn live(&self, replicas: &[usize]) -> Vec<usize> {
        placement::live_first(replicas, self.me, |r| self.state(r))
    }

    fn unavailable(&self, s: &Shortfall, cl: Consistency, what: &str) -> WireError {
        let names = |nodes: &[usize]| {
            nodes
                .iter()
                .map(|&r| self.name(r))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut missing = Vec::new();
        if !s.down.is_empty() {
            missing.push(format!("{} down", names(&s.down)));
        }
        if !s.read_only.is_empty() {
            missing.push(format!("{} not writable", names(&s.read_only)));
        }
        let able = s.replicas - s.down.len() - s.read_only.len();
        let adjective = if s.read_only.is_empty() {
            "live"
        } else {
            "writable"
        };
        WireError::new(
            ErrorKind::Unavailable,
            format!(
                "{what} at {cl} needs {} of {} replicas, {able} {adjective} ({}); nothing was applied",
                s.required,
                s.replicas,
                missing.join("; ")
            ),
        )
    }

    /// Records a hint; a failure to write one is logged, not fatal: the
    /// shard is durable on this node and read repair still reaches the replica.
    pub(crate) fn hint(&self, replica: usize, key: &Key) {
        if let Err(e) = self.hints.add(replica, key) {
            // A full disk fails every hint at once: one line a second.
            static LOG: LogLimit = LogLimit::per_second();
            if let Some(suppressed) = LOG.admit() {
                warn!(replica = %self.name(replica), error = %e, suppressed, "could not record a hint");
            }
        }
    }
}
