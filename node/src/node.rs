//! One running node: the engine, the ring, the peer transport, hints and
//! the roles that use them, wired together. Nothing here decides anything:
//! `write`, `read`, `peer` and `handoff` do, over the shared `Ctx`.
//!
//! Start-up order matters: the engine replays its commit log and the hint
//! files are read back before any port opens, so a node never answers with
//! less than it has acknowledged. Shutdown runs the other way: listeners
//! stop, the transport closes, hints are fsync'd, the engine closes cleanly.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tally_engine::{Engine, Options, ParkCommit, SyncMode};
use tally_net::peer::quic::Quic;
use tally_net::peer::{Inbound, Network, PeerAddr, PeerSettings, StartError, Transport};
use tally_net::wire::{
    Change, Changed, ClientOp, ClientReply, ClusterStatus, Consistency, NodeStats, NodeStatus,
    PeerHints, PeerRequest, Registers, WireError, WireKey, WireKeys, WireNodeVersion, WireScan,
    WireSnapshotOp, WireSnapshots, WireVersions,
};

use crate::base::convert;
use crate::base::registry::{Op, Registry};
use crate::cluster::agree::Proposer;
use crate::cluster::agree::queue::{self, Answer};
use crate::cluster::ctx::{Ctx, Parts};
#[cfg(feature = "fault-injection")]
use crate::cluster::faults::Fault;
use crate::cluster::features::Features;
use crate::cluster::hints::Hints;
use crate::cluster::peer::PeerHandler;
use crate::cluster::read;
use crate::cluster::write::Writes;
use crate::cluster::write::queue::{Origin, QueuedAdd};
use crate::config::{Config, SyncKind};

mod strings;

/// Most cells one read of a whole partition holds (slice by slice):
/// about 100,000 rows of one column, some tens of MB.
pub(crate) const WIDE_CELLS_MAX: usize = 200_000;

/// A node of the cluster.
pub struct Node {
    ctx: Arc<Ctx>,
    writes: Arc<Writes>,
    features: Arc<Features>,
    proposer: Arc<Proposer>,
    /// Every member up placed CQL tables' cells as this node does, once:
    /// then for good (a build without the feature can no longer join).
    cql_tables: std::sync::atomic::AtomicBool,
    /// Likewise, every member up writes CQL regular tables' cells.
    cql_regular_tables: std::sync::atomic::AtomicBool,
    cql_token_order: std::sync::atomic::AtomicBool,
    cql_batch_log: std::sync::atomic::AtomicBool,
    row_slices: std::sync::atomic::AtomicBool,
    list_asked_at: std::sync::atomic::AtomicBool,
    /// What the engine's compactions forget (`cluster::purge`).
    purge: Arc<crate::cluster::purge::Rules>,
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
        Node::open_with(config, node_id, park_commit, |_| {})
    }

    /// [`Node::open`], with `tweak` changing the engine's options last
    /// (test seams, for `tallyd-faults`).
    pub fn open_with(
        config: Config,
        node_id: &str,
        park_commit: Option<ParkCommit>,
        tweak: impl FnOnce(&mut Options),
    ) -> Result<Arc<Node>> {
        let (me, node) = config.node(node_id)?;
        let dir = node.data_dir.clone();
        // A build that lacks a feature the data has enabled stops here.
        let features = Arc::new(Features::open(&dir)?);
        let c = &config.cluster;
        let purge = Arc::new(crate::cluster::purge::Rules::default());
        let mut opts = Options {
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
            ids_retention: c.ids.retention(),
            // The batch log's deleted entries and the regular tables' dead
            // cells go in time.
            purge: Some(purge.clone()),
            // An add reads the replicas before it restarts an expired
            // counter: one may hold a later deadline (`write::retry`).
            confirm_restarts: true,
            ..Options::default()
        };
        tweak(&mut opts);
        let topology = crate::cluster::topology::change::initial(&config, me)?;
        // Replay merges cells of every fold generation the ring agreed.
        opts.folds = topology.engine_folds();
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
        let metrics = Registry::leak();
        let hints = Hints::open(&dir.join("hints"), &others, c.hints.clone(), metrics)?;
        let retired = engine.retired().context("read the retired incarnations")?;
        let tails = crate::cluster::tails::Gate::new(config.nodes.len(), me, retired);
        let ctx = Arc::new(Ctx::new(Parts {
            me,
            topology,
            engine,
            hints,
            tails,
            replacing: crate::cluster::topology::replace::in_progress(&dir),
            metrics,
            config,
        }));
        let writes = Writes::new(ctx.clone());
        Ok(Arc::new(Node {
            ctx,
            writes,
            features,
            proposer: Arc::new(Proposer::default()),
            cql_tables: std::sync::atomic::AtomicBool::new(false),
            cql_regular_tables: std::sync::atomic::AtomicBool::new(false),
            cql_token_order: std::sync::atomic::AtomicBool::new(false),
            cql_batch_log: std::sync::atomic::AtomicBool::new(false),
            row_slices: std::sync::atomic::AtomicBool::new(false),
            list_asked_at: std::sync::atomic::AtomicBool::new(false),
            purge,
        }))
    }

    /// Starts the peer transport on QUIC and the background tasks.
    /// Returns the transport so the caller can close it.
    pub fn start_peers(self: &Arc<Self>) -> Result<Arc<Transport>> {
        self.start_peers_on(|settings, inbound| {
            let quic: Arc<dyn Network> = Quic::start(settings, inbound)?;
            Ok(quic)
        })
    }

    /// [`Node::start_peers`] on the network `network` makes of the
    /// transport's settings and what answers the peers: QUIC, or the
    /// simulator's.
    pub fn start_peers_on(
        self: &Arc<Self>,
        network: impl FnOnce(&PeerSettings, Arc<Inbound>) -> Result<Arc<dyn Network>, StartError>,
    ) -> Result<Arc<Transport>> {
        let ctx = &self.ctx;
        let c = &ctx.config().cluster;
        let settings = PeerSettings {
            cluster: c.name.clone(),
            nodes: ctx
                .config()
                .nodes
                .iter()
                .map(|n| PeerAddr {
                    id: n.id.clone(),
                    addr: n.peer,
                })
                .collect(),
            me: ctx.me(),
            bind: ctx.config().nodes[ctx.me()].peer_bind,
            tls: crate::security::certs::node_files(&c.certs_dir, &ctx.config().nodes[ctx.me()].id),
            heartbeat_interval: Duration::from_millis(c.heartbeat_interval_ms),
            failure_timeout: Duration::from_millis(c.failure_timeout_ms),
        };
        let handler = Arc::new(PeerHandler {
            ctx: Arc::downgrade(ctx),
            writes: Arc::downgrade(&self.writes),
            features: self.features.clone(),
        });
        let inbound = Transport::inbound(&settings, handler.clone());
        let network = network(&settings, inbound).context("start the peer transport")?;
        let transport = Transport::start_on(settings, handler, network);
        if ctx.set_transport(transport.clone()).is_err() {
            anyhow::bail!("the peer transport is already running");
        }
        self.writes.start();
        crate::cluster::handoff::start(Arc::downgrade(ctx));
        crate::cluster::tails::start(Arc::downgrade(ctx));
        crate::cluster::topology::change::start(Arc::downgrade(ctx));
        crate::cluster::features::start(Arc::downgrade(ctx), self.features.clone());
        crate::cluster::batchlog::start(Arc::downgrade(ctx), Arc::downgrade(&self.writes));
        Ok(transport)
    }

    /// Makes `change` to `partition`'s registers through agreement
    /// (`cluster::agree`): linearizable through any node, while nodes
    /// crash and messages are lost. `change` gets the registers decided so
    /// far and the wall clock, and answers the next ones and the reply (or
    /// an error, which changes nothing); it may run once per attempt.
    /// Refused until the cluster has enabled the `agreement` feature.
    pub async fn agree<R: Send + 'static>(
        &self,
        partition: &[u8],
        mut change: impl FnMut(&Registers, u64) -> Result<(Registers, R), WireError> + Send + 'static,
    ) -> Result<R, WireError> {
        if !self.agrees() {
            return Err(WireError::new(
                tally_net::wire::ErrorKind::Unavailable,
                "agreement is not enabled yet: every member of the cluster must be up on a \
                 build that has it, and have enabled it (see `tally status`)",
            ));
        }
        if self.features.has(crate::cluster::features::FIRST_BALLOTS) {
            self.proposer.enable_first_ballots();
        }
        let change: queue::Change = Box::new(move |registers, now| {
            change(registers, now).map(|(next, r)| (next, Box::new(r) as Answer))
        });
        let answer = self.proposer.agree(&self.ctx, partition, change).await?;
        answer.downcast::<R>().map(|r| *r).map_err(|_| {
            WireError::new(
                tally_net::wire::ErrorKind::Internal,
                "an agreed change answered another type",
            )
        })
    }

    /// Whether this node sees node `n` up.
    pub(crate) fn is_up(&self, n: usize) -> bool {
        self.ctx.is_up(n)
    }

    /// Whether this node replicates `partition` (as the ring it routes
    /// by places it).
    pub(crate) fn replicates(&self, partition: &[u8]) -> bool {
        self.ctx.replicas(partition).all().contains(&self.ctx.me())
    }

    /// Whether this node may write CQL counter tables' cells: every
    /// member up places them as it does (`features::CQL_TABLES`).
    pub(crate) fn serves_cql_tables(&self) -> bool {
        self.sticky(&self.cql_tables, crate::cluster::features::CQL_TABLES)
    }

    /// Whether this node may make CQL regular tables and write their
    /// cells: every member up has the feature
    /// (`features::CQL_REGULAR_TABLES`).
    pub(crate) fn serves_cql_regular_tables(&self) -> bool {
        let feature = crate::cluster::features::CQL_REGULAR_TABLES;
        self.sticky(&self.cql_regular_tables, feature)
    }

    /// Whether this node may make CQL tables in token order: every member
    /// up has the feature (`features::CQL_TOKEN_ORDER`).
    pub(crate) fn serves_cql_token_order(&self) -> bool {
        let feature = crate::cluster::features::CQL_TOKEN_ORDER;
        self.sticky(&self.cql_token_order, feature)
    }

    /// Whether this node writes CQL logged batches through the batch log:
    /// every member up has the feature (`features::CQL_BATCH_LOG`), so
    /// every node replays its entries.
    pub(crate) fn serves_batch_log(&self) -> bool {
        let feature = crate::cluster::features::CQL_BATCH_LOG;
        self.sticky(&self.cql_batch_log, feature)
    }

    /// Whether this node reads partitions slice by slice: every member up
    /// answers `ReadSlice` (`features::ROW_SLICES`).
    pub(crate) fn serves_row_slices(&self) -> bool {
        let feature = crate::cluster::features::ROW_SLICES;
        self.sticky(&self.row_slices, feature)
    }

    /// Whether this node tells the leaders it forwards list changes to
    /// when it was asked for them: every member up reads `LeaderListAt`
    /// (`features::LIST_ASKED_AT`).
    fn serves_list_asked_at(&self) -> bool {
        let feature = crate::cluster::features::LIST_ASKED_AT;
        self.sticky(&self.list_asked_at, feature)
    }

    /// Each CQL regular table's prefix and gc grace (ms): the dead cells
    /// compactions may forget (`cluster::purge`).
    pub(crate) fn set_table_graces(
        &self,
        graces: Vec<([u8; tally_net::ring::TABLE_PREFIX_BYTES], u64)>,
    ) {
        self.purge.set_tables(graces);
    }

    /// Whether `feature` is enabled by every member up, remembered in
    /// `flag` once it is (then for good).
    fn sticky(&self, flag: &std::sync::atomic::AtomicBool, feature: &str) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if flag.load(Relaxed) {
            return true;
        }
        let on = crate::cluster::features::enabled_by_all_up(&self.ctx, &self.features, feature);
        flag.fetch_or(on, Relaxed) || on
    }

    /// Whether this node may change registers through agreement: it and
    /// every member up have enabled it, so that every member reads what
    /// is written (`features::enabled_by_all_up`).
    pub fn agrees(&self) -> bool {
        use crate::cluster::features::{AGREEMENT, enabled_by_all_up};
        enabled_by_all_up(&self.ctx, &self.features, AGREEMENT)
    }

    /// Whether `partition` holds a live string in `column` (the key's own,
    /// empty, or a hash's field), or a sorted set for the key's own, as
    /// far as this node saw: its cached Paxos state
    /// (`write::strings::holds_register_cached`) or its own last round
    /// shows one. A hint, cheap for nearly every counter (a partition no round
    /// here saw hold a string answers at once): what makes an integer
    /// `SET` (or `HSET`) of a string set the string, as Redis does, rather
    /// than start a counter beside it.
    pub(crate) fn holds_string_here(&self, partition: &[u8], column: &[u8]) -> bool {
        let now = tally_engine::now_ms();
        let cached = tally_engine::Key::new(partition, column).is_ok_and(|k| {
            crate::cluster::write::strings::holds_register_cached(self.ctx.engine(), &k, now)
        });
        cached
            || self
                .last_seen_registers(partition)
                .is_some_and(|r| crate::base::strings::holds_register(&r, column, now))
    }

    /// A wake-up for a client waiting on the list `key` (a blocking pop):
    /// it comes when this node changes the list, as its leader or its
    /// replica (`Engine::list_changed`); `None` for a key no list can have.
    pub(crate) fn list_changed(&self, key: &[u8]) -> Option<tokio::sync::futures::Notified<'_>> {
        let key = tally_engine::Key::new(key, b"").ok()?;
        Some(self.ctx.engine().list_changed(&key))
    }

    /// What this node last saw `partition`'s registers hold: a hint, not
    /// an answer (another node may have changed them since).
    pub(crate) fn last_seen_registers(&self, partition: &[u8]) -> Option<Registers> {
        self.proposer.last_seen(partition)
    }

    /// The registers of `partition` decided so far, those live now,
    /// linearizably (`cluster::agree::propose`); none, at once, where this
    /// node heard every member say it has not enabled agreement (nothing
    /// can have written one).
    pub async fn read_registers(&self, partition: &[u8]) -> Result<Registers, WireError> {
        use crate::cluster::features::{AGREEMENT, known_unused};
        // Nothing was ever agreed. A node that has not heard every member
        // yet cannot know that, and reads as agreement does.
        if known_unused(&self.ctx, &self.features, AGREEMENT) {
            return Ok(Registers::default());
        }
        self.proposer.read(&self.ctx, partition).await
    }

    /// Tells every peer that is up that this node stops, where the cluster
    /// has enabled the leaving notice, and waits up to half a second for
    /// their answers: they count it down at once instead of after the
    /// failure timeout. Called before [`Node::close`] on a clean stop.
    pub async fn say_leaving(&self) {
        if !self.features.has(crate::cluster::features::LEAVING_NOTICE) {
            return;
        }
        let Some(t) = self.ctx.started_transport() else {
            return;
        };
        let answers: Vec<_> = (0..self.ctx.config().nodes.len())
            .filter(|&i| i != self.ctx.me() && t.is_up(i))
            .filter_map(|i| t.submit(i, vec![PeerRequest::Leaving]).ok())
            .collect();
        // Sent at once; the answers arrive together.
        let deadline = tally_world::Instant::now() + Duration::from_millis(500);
        for answer in answers {
            let _ = tokio::time::timeout_at(deadline, answer).await;
        }
    }

    /// Closes the peer connections and waits (half a second at most) until
    /// the peers were told, so that they dial this node's next run afresh.
    /// Called before [`Node::close`] on a clean stop.
    pub async fn close_peers(&self) {
        if let Some(t) = self.ctx.started_transport() {
            t.close_and_tell(Duration::from_millis(500)).await;
        }
    }

    /// Each node's build and peer protocol, and the enabled features.
    fn versions(&self) -> ClientReply {
        let ctx = &self.ctx;
        let t = ctx.started_transport();
        let nodes = ctx
            .config()
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| WireNodeVersion {
                id: n.id.clone(),
                build: match i == ctx.me() {
                    true => Some(self.features.build()),
                    false => t.and_then(|t| t.build_of(i)),
                },
                protocol: t.map_or(0, |t| t.protocol(i)),
            })
            .collect();
        ClientReply::Versions(WireVersions {
            node: ctx.config().nodes[ctx.me()].id.clone(),
            nodes,
            enabled: self.features.enabled(),
        })
    }

    /// Learns the newest ring the peers that answer within a second hold;
    /// what a node does before it serves clients.
    pub async fn learn_ring(&self) {
        crate::cluster::topology::change::learn(&self.ctx).await;
    }

    /// Makes this node a member of the ring (`tallyd run --join`), or
    /// finishes its join if one was begun; nothing if it is a member.
    pub async fn join(&self) -> Result<(), WireError> {
        use tally_net::wire::NodeState;
        let state = self.ctx.node_state(self.ctx.me());
        if state == NodeState::Normal {
            tracing::info!("this node is a member of the ring already");
            return Ok(());
        }
        let change = crate::cluster::topology::Change::Join(self.ctx.me());
        loop {
            match crate::cluster::topology::change::run(&self.ctx, change).await {
                Ok(_) => return Ok(()),
                // Refused (another change running, not absent): nothing to
                // wait for.
                Err(e) if e.kind == tally_net::wire::ErrorKind::Invalid => return Err(e),
                // This node is stopping: whoever starts it again resumes.
                Err(e) if self.ctx.transport().is_closed() => return Err(e),
                // A node down or not answering, or a race lost to another
                // change (a flush): the join resumes, or begins again.
                Err(e) => {
                    let ctx = &self.ctx;
                    if (0..ctx.config().nodes.len()).all(|n| n == ctx.me() || !ctx.is_up(n)) {
                        tracing::warn!(
                            error = %e,
                            "no node of the cluster answers this one: check the cluster name, \
                             the CA and the addresses of the configuration; trying again in 2 s"
                        );
                    } else {
                        tracing::warn!(error = %e, "the join stopped; trying again in 2 s");
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    }

    /// Finishes a replace of this node (`tallyd run --replace`) if one is
    /// in progress: syncs its ranges, then it serves them; nothing if none
    /// is.
    pub async fn replace(&self) -> Result<(), WireError> {
        if !self.ctx.is_replacing() {
            return Ok(());
        }
        crate::cluster::topology::replace::run(&self.ctx)
            .await
            .map(|_| ())
    }

    /// The cluster's configuration.
    pub fn config(&self) -> &Config {
        self.ctx.config()
    }

    /// Node `node`'s state in the ring this node holds.
    pub fn ring_state(&self, node: usize) -> tally_net::wire::NodeState {
        self.ctx.node_state(node)
    }

    /// The ring this node holds: its version, every node's state, and
    /// whether the change in progress is switching over.
    pub fn topology(&self) -> tally_net::wire::WireTopology {
        self.ctx.topology().to_wire()
    }

    /// This node's index in the configuration's node list.
    pub fn me(&self) -> usize {
        self.ctx.me()
    }

    /// The ring this node routes by now.
    pub(crate) fn ring(&self) -> Arc<tally_net::ring::Ring> {
        self.ctx.ring()
    }

    /// FAULT INJECTION for testing checkers: from now on, every `n`th add
    /// this node leads is acknowledged without being applied (a lost write).
    /// Only with the `fault-injection` feature, which `tallyd` never needs.
    #[cfg(feature = "fault-injection")]
    pub fn inject_drop_every(&self, n: u64) {
        self.writes.inject_drop_every(n);
    }

    /// FAULT INJECTION for testing checkers: from now on, this node applies
    /// every add with an operation id it applies as new, without looking
    /// at the ids it has applied (retries count twice), and admits members
    /// of unique counters whatever their applier (a member added through
    /// two nodes counts twice). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_ignore_ids(&self) {
        self.writes.inject_ignore_ids();
    }

    /// FAULT INJECTION for testing checkers: as a replica, this node never
    /// tells a leader that a deadline it did not know has passed, so an
    /// add made after the deadline into the expired epoch is acknowledged
    /// and then invisible (lost). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_ignore_deadlines(&self) {
        self.ctx.faults().inject(Fault::IgnoreDeadlines);
    }

    /// FAULT INJECTION for testing checkers: repairs this node runs find
    /// what differs and report it moved, but send nothing, so replicas stay
    /// apart. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_idle_repair(&self) {
        self.ctx.faults().inject(Fault::IdleRepair);
    }

    /// TEST SEAM: a push of `value` onto a list this node leads waits
    /// `hold` between its catch-up and its change, as a leader paused
    /// there would. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_hold_list_push(&self, value: Vec<u8>, hold: std::time::Duration) {
        self.writes.inject_hold_list_push(value, hold);
    }

    /// FAULT INJECTION for testing checks: list changes this node leads
    /// take the time they are made, not the time their catch-up began.
    /// Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_list_stamp_when_made(&self) {
        self.writes.inject_list_stamp_when_made();
    }

    /// FAULT INJECTION for testing checkers: script interpreters this node
    /// makes from now on leave their libraries and globals writable, so a
    /// script can plant code another user's script then runs. Only with
    /// the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_unsealed_scripts(&self) {
        self.ctx.faults().inject(Fault::UnsealedScripts);
    }

    /// FAULT INJECTION for testing checkers: agreed changes this node
    /// proposes skip the prepare (two proposers that read the same state
    /// both get their changes accepted). Only with the `fault-injection`
    /// feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_skip_prepare(&self) {
        self.ctx.faults().inject(Fault::SkipPrepare);
    }

    /// FAULT INJECTION for testing checkers: this node answers a prepare
    /// before its promise is stored (it is stored a second later), so it may
    /// accept a lower ballot after promising a higher one. Only with the
    /// `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_promise_late(&self) {
        self.ctx.faults().inject(Fault::PromiseLate);
    }

    /// FAULT INJECTION for testing checkers: agreed reads this node runs
    /// answer the committed value and leave a newer one in flight
    /// unfinished (a read may miss a change already acknowledged). Only
    /// with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_read_skips_in_flight(&self) {
        self.ctx.faults().inject(Fault::ReadSkipsInFlight);
    }

    /// FAULT INJECTION for testing checkers: scripts this node runs as one
    /// agreed change apply their result over whatever the key holds, not
    /// only over what they read (two compare-and-sets from one value both
    /// apply). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_script_skips_compare(&self) {
        self.ctx.faults().inject(Fault::ScriptSkipsCompare);
    }

    /// FAULT INJECTION for testing checkers: syncs this node runs (ring
    /// changes, a replace) leave agreed state behind, as the builds before
    /// `agreed-handoff` did. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_skip_agreed_handoff(&self) {
        self.ctx.faults().inject(Fault::SkipAgreedHandoff);
    }

    /// FAULT INJECTION for testing checkers: proposals at first ballots
    /// this node makes count as regular ones (decided by a quorum, the
    /// highest first ballot read as the value in flight), so that of two
    /// first ballots racing for a new key one is decided and the other
    /// finished over it. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_first_ballot_as_regular(&self) {
        self.ctx.faults().inject(Fault::FirstBallotAsRegular);
    }

    /// Whether agreed scripts skip their compare (fault injection only:
    /// [`Node::inject_script_skips_compare`]).
    pub(crate) fn scripts_skip_compare(&self) -> bool {
        self.ctx
            .faults()
            .has(crate::cluster::faults::Fault::ScriptSkipsCompare)
    }

    /// TEST SEAM: this node's proposers wait `ms` after a change is decided
    /// before they send its commit (reads meanwhile find it in flight).
    #[cfg(feature = "fault-injection")]
    pub fn inject_commit_delay(&self, ms: u64) {
        self.ctx.faults().set_commit_delay_ms(ms);
    }

    /// TEST SEAM: the CQL port closes the connection instead of answering
    /// every `n`th statement that changes counters, once it is applied (a
    /// connection lost with the answer), so a driver retries it elsewhere.
    #[cfg(feature = "fault-injection")]
    pub fn inject_cql_drop_every(&self, n: u64) {
        self.ctx.faults().set_cql_drop_every(n);
    }

    /// FAULT INJECTION for testing checkers: the CQL port applies adds
    /// with an operation id as adds without, so a retry counts again.
    /// Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_cql_ignore_ids(&self) {
        self.ctx.faults().inject(Fault::CqlIgnoresIds);
    }

    /// FAULT INJECTION for testing checkers: CQL lightweight transactions
    /// judge their conditions on the cells they read before their round,
    /// not on the agreed state. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_cql_lwt_skips_agreed_read(&self) {
        self.ctx.faults().inject(Fault::CqlLwtSkipsAgreedRead);
    }

    /// FAULT INJECTION for testing checkers: this node takes the deleted
    /// ranges of CQL tables a leader sends it as nothing. Only with the
    /// `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_cql_drop_deletes(&self) {
        self.ctx.faults().inject(Fault::CqlDropsDeletes);
    }

    /// FAULT INJECTION for testing checkers: this node never replays the
    /// batch log's entries. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_batch_log_skips_replay(&self) {
        self.ctx.faults().inject(Fault::BatchLogSkipsReplay);
    }

    /// FAULT INJECTION for testing checkers: slices this node reads merge
    /// up to the longest answer, not the shortest full one. Only with the
    /// `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_slice_trusts_longest(&self) {
        self.ctx.faults().inject(Fault::SliceTrustsLongest);
    }

    /// Test seam: every `n`th logged batch this node coordinates stops
    /// after its log entry and first partition, as if the node crashed
    /// there. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_batch_crash_every(&self, n: u64) {
        self.ctx.faults().set_batch_crash_every(n);
    }

    /// Whether CQL lightweight transactions skip the agreed read (fault
    /// injection only: [`Node::inject_cql_lwt_skips_agreed_read`]).
    pub(crate) fn cql_lwt_skips_agreed_read(&self) -> bool {
        self.ctx
            .faults()
            .has(crate::cluster::faults::Fault::CqlLwtSkipsAgreedRead)
    }

    /// Whether the CQL port ignores operation ids (fault injection only:
    /// [`Node::inject_cql_ignore_ids`]).
    pub(crate) fn cql_ignores_ids(&self) -> bool {
        self.ctx
            .faults()
            .has(crate::cluster::faults::Fault::CqlIgnoresIds)
    }

    /// Whether the CQL port drops this answer (fault injection only:
    /// [`Node::inject_cql_drop_every`]).
    pub(crate) fn drops_cql_answer(&self) -> bool {
        self.ctx.faults().drop_cql_answer()
    }

    /// TEST SEAM: a topology change this node runs waits `ms` between
    /// beginning (every node storing the ring with it) and syncing, so
    /// that tests can act while it is in progress.
    #[cfg(feature = "fault-injection")]
    pub fn inject_sync_delay(&self, ms: u64) {
        self.ctx.faults().set_sync_delay_ms(ms);
    }

    /// FAULT INJECTION for testing checkers: topology changes this node
    /// runs do not sync the ranges that move (the new replicas start
    /// empty). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_skip_sync(&self) {
        self.ctx.faults().inject(Fault::SkipSync);
    }

    /// FAULT INJECTION for testing checkers: flushes this node runs answer
    /// once it stored the flush itself; the others learn it later, from
    /// its heartbeats. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_flush_locally(&self) {
        self.ctx.faults().inject(Fault::FlushLocally);
    }

    /// FAULT INJECTION for testing checkers: a flush asked while this
    /// node runs another answers at once, as if the running one covered
    /// it (adds acknowledged meanwhile survive it). Only with the
    /// `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_flush_join_running(&self) {
        self.ctx.faults().inject(Fault::FlushJoinRunning);
    }

    /// FAULT INJECTION for testing checkers: this node applies ids at once
    /// after an unclean restart, without learning the ids its last run
    /// applied from its peers (a retry of one that its log lost counts
    /// twice). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn inject_skip_tails(&self) {
        self.ctx.tails().force_open();
    }

    /// Coordinates an add; answers the value the leader sees after it (see
    /// `write`).
    pub async fn add(&self, key: &WireKey, delta: i64, cl: Consistency) -> Result<i64, WireError> {
        let key = convert::user_key(key)?;
        self.writes.add(key, delta, cl, Origin::Client).await
    }

    /// Queues a client's add to `(partition, column)` without waiting for
    /// it (see [`Node::add`]): a pipeline's adds share batches.
    pub(crate) fn queue_add(
        &self,
        partition: &[u8],
        column: &[u8],
        delta: i64,
        cl: Consistency,
    ) -> Result<crate::cluster::write::Queued, WireError> {
        let key = convert::user_key_of(partition, column)?;
        Ok(self.writes.queue(key, delta, cl))
    }

    /// Coordinates an add with an operation id: applied at most once,
    /// answering the value it produced to every retry (see `write::once`).
    pub async fn add_once(
        &self,
        key: &WireKey,
        delta: i64,
        id: &tally_net::once::OpId,
        cl: Consistency,
    ) -> Result<i64, WireError> {
        let key = convert::user_key(key)?;
        let id = convert::op_id(id)?;
        self.writes
            .add_with(key, delta, Some(id), cl, Origin::Client)
            .await
    }

    /// Adds members to the unique counter `partition` (see `write::unique`);
    /// answers, per member, whether it was new.
    pub async fn unique_add(
        &self,
        partition: &[u8],
        members: &[Vec<u8>],
        cl: Consistency,
    ) -> Result<Vec<bool>, WireError> {
        self.writes.admit(partition, members, cl).await
    }

    /// The number of distinct members of the unique counter `partition`.
    pub async fn unique_count(&self, partition: &[u8], cl: Consistency) -> Result<i64, WireError> {
        crate::cluster::unique::count(&self.ctx, partition, cl).await
    }

    /// Whether each of `members` is in the unique counter `partition`.
    pub async fn unique_contains(
        &self,
        partition: &[u8],
        members: &[Vec<u8>],
        cl: Consistency,
    ) -> Result<Vec<bool>, WireError> {
        crate::cluster::unique::contains(&self.ctx, partition, members, cl).await
    }

    /// The merged cell of the unique counter `partition`'s count: its epoch
    /// holds the counter's deadline (see `unique`).
    pub async fn unique_count_cell(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<tally_engine::Cell, WireError> {
        timed_read(
            self.ctx.metrics(),
            cl,
            crate::cluster::unique::count_cell(&self.ctx, partition, cl),
        )
        .await
    }

    /// Gives the key `partition` the deadline `at_ms` (0: none) if `only`
    /// allows (`EXPIRE`, `PERSIST`): its counter when it has one, else
    /// every live column of its hash, else its unique counter, in one
    /// leader-side change of its row. Answers whether any cell changed.
    pub async fn expire(
        &self,
        partition: &[u8],
        deadline: (u64, tally_net::wire::When),
        cl: Consistency,
    ) -> Result<bool, WireError> {
        self.writes.expire(partition, deadline, cl).await
    }

    /// Resets the unique counter `partition` if it has members; answers
    /// whether it had.
    pub async fn unique_reset(&self, partition: &[u8], cl: Consistency) -> Result<bool, WireError> {
        crate::cluster::unique::reset(&self.ctx, &self.writes, partition, cl).await
    }

    /// Queues a client's add whose answer goes where `add.reply` says.
    pub(crate) fn submit(&self, add: QueuedAdd) {
        self.writes.submit(add);
    }

    /// Resets a counter to zero at `cl`.
    pub async fn reset(&self, key: &WireKey, cl: Consistency) -> Result<(), WireError> {
        let key = convert::user_key(key)?;
        self.writes.reset(&key, cl).await
    }

    /// Changes a counter's epoch at `cl`: SET, EXPIRE, PERSIST, reset.
    pub async fn change(
        &self,
        key: &WireKey,
        change: Change,
        cl: Consistency,
    ) -> Result<Changed, WireError> {
        let key = convert::user_key(key)?;
        self.writes.change(&key, change, cl, false).await
    }

    /// [`Node::change`] of a change that answers the value before
    /// (`GETSET`, `GETDEL` ...): refused on a list (`WRONGTYPE`), nothing
    /// changed, as Redis refuses them.
    pub async fn change_reading(
        &self,
        key: &WireKey,
        change: Change,
        cl: Consistency,
    ) -> Result<Changed, WireError> {
        let key = convert::user_key(key)?;
        self.writes.change(&key, change, cl, true).await
    }

    /// Changes a list at `cl` (`LPUSH`, `LTRIM` ...): led by its first
    /// writable replica (see `write::list`).
    pub async fn change_list(
        &self,
        key: &WireKey,
        change: tally_net::list::ListChange,
        cl: Consistency,
    ) -> Result<tally_net::list::ListReply, WireError> {
        let key = convert::user_key(key)?;
        let asked = crate::cluster::write::Asked {
            ms: Some(tally_engine::now_ms()),
            tell: self.serves_list_asked_at(),
        };
        self.writes.change_list(&key, change, cl, asked).await
    }

    /// Reads a counter at `cl`: 0 when it is absent (never written, reset,
    /// or expired).
    pub async fn get(&self, key: &WireKey, cl: Consistency) -> Result<i64, WireError> {
        convert::live_value(&self.get_cell(key, cl).await?, tally_engine::now_ms())
            .map(|v| v.unwrap_or(0))
    }

    /// Reads a counter's merged cell at `cl` (no shards: never written, or
    /// reset and not written since).
    pub async fn get_cell(
        &self,
        key: &WireKey,
        cl: Consistency,
    ) -> Result<tally_engine::Cell, WireError> {
        timed_read(self.ctx.metrics(), cl, async {
            read::get_cell(&self.ctx, &convert::user_key(key)?, cl).await
        })
        .await
    }

    /// Writes each partition's cells (by column) at `cl`, all partitions
    /// at once (each its own write: not atomic across them).
    pub(crate) async fn put_partitions(
        &self,
        partitions: crate::cluster::write::Partitions,
        cl: Consistency,
    ) -> Result<(), WireError> {
        self.writes.put_partitions(partitions, cl).await
    }

    /// Writes whole cells of several partitions at `cl`, all or none:
    /// through the batch log (`cluster::batchlog`).
    pub(crate) async fn put_cells_logged(
        &self,
        batch: crate::cluster::batchlog::Batch,
        cl: Consistency,
    ) -> Result<(), crate::cluster::batchlog::Failed> {
        crate::cluster::batchlog::write(&self.ctx, &self.writes, batch, cl).await
    }

    /// Reads the merged cell of every column of a partition at `cl`, live
    /// or not.
    pub async fn get_row_cells(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<std::collections::BTreeMap<Vec<u8>, tally_engine::Cell>, WireError> {
        timed_read(
            self.ctx.metrics(),
            cl,
            read::get_row_cells(&self.ctx, partition, cl),
        )
        .await
    }

    /// Reads the merged cell of every column of a partition at `cl`, live
    /// or not, slice by slice once the cluster can (a partition of up to
    /// [`WIDE_CELLS_MAX`] cells); else as [`Node::get_row_cells`].
    pub(crate) async fn get_wide_row_cells(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<std::collections::BTreeMap<Vec<u8>, tally_engine::Cell>, WireError> {
        if !self.serves_row_slices() {
            return self.get_row_cells(partition, cl).await;
        }
        let read = crate::cluster::slice::read_wide(&self.ctx, partition, WIDE_CELLS_MAX, cl);
        timed_read(self.ctx.metrics(), cl, read).await
    }

    /// Reads the merged cells of a partition's columns in `range` at
    /// `cl`: about `limit` of them, and where the rest begins. Only once
    /// the cluster reads slices ([`Node::serves_row_slices`]): an older
    /// peer cannot answer.
    pub(crate) async fn get_slice(
        &self,
        partition: &[u8],
        range: crate::cluster::slice::Range,
        limit: usize,
        cl: Consistency,
    ) -> Result<crate::cluster::slice::Slice, WireError> {
        let read = crate::cluster::slice::read_slice(&self.ctx, partition, range, limit, cl);
        timed_read(self.ctx.metrics(), cl, read).await
    }

    /// Reads every column of a partition at `cl`.
    pub async fn get_row(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<Vec<(Vec<u8>, i64)>, WireError> {
        timed_read(
            self.ctx.metrics(),
            cl,
            read::get_row(&self.ctx, partition, cl),
        )
        .await
    }

    /// The keyspace database `db` reads and writes now.
    pub(crate) fn keyspace(&self, db: u8) -> crate::base::keyspace::Keyspace {
        self.ctx.keyspace(db)
    }

    /// Empties each of `dbs`, cluster-wide (see `topology::flush`).
    pub(crate) async fn flush(&self, dbs: &[u8]) -> Result<(), WireError> {
        crate::cluster::topology::flush::run(&self.ctx, dbs).await
    }

    /// Empties every database, cluster-wide: `FLUSHALL`.
    pub async fn flush_all(&self) -> Result<(), WireError> {
        let all: Vec<u8> = (0..crate::base::keyspace::DATABASES).collect();
        self.flush(&all).await
    }

    /// The Lua script of `sha`, from this node or another (see `script_peers`).
    pub(crate) async fn find_script(&self, sha: &str) -> Option<Arc<[u8]>> {
        crate::cluster::script_peers::find(&self.ctx, sha).await
    }

    /// Empties every node's cache of scripts.
    pub(crate) async fn flush_scripts(&self) {
        crate::cluster::script_peers::flush_everywhere(&self.ctx).await;
    }

    /// Takes, lists or clears this node's snapshots (see `snapshot`).
    pub async fn snapshot(&self, op: WireSnapshotOp) -> Result<WireSnapshots, WireError> {
        crate::cluster::snapshot::run(&self.ctx, op).await
    }

    /// One page of the live keys of a keyspace, cluster-wide (see `scan`).
    pub async fn scan(&self, scan: WireScan, cl: Consistency) -> Result<WireKeys, WireError> {
        crate::cluster::scan::page(&self.ctx, scan, cl).await
    }

    /// Lists a page of the live partitions of the CQL table whose stored
    /// partitions begin with `table`, at `cl` (see `scan`).
    pub(crate) async fn scan_table(
        &self,
        table: [u8; tally_net::ring::TABLE_PREFIX_BYTES],
        scan: WireScan,
        cl: Consistency,
    ) -> Result<WireKeys, WireError> {
        crate::cluster::scan::table_page(&self.ctx, table, scan, cl).await
    }

    /// Runs one client operation.
    pub async fn execute(&self, op: ClientOp) -> Result<ClientReply, WireError> {
        let op = crate::base::keyspace::op_in(op, self.ctx.keyspace(0))?;
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
            ClientOp::Versions => Ok(self.versions()),
            ClientOp::GetString { key } => self.string(&key).await.map(ClientReply::String),
            ClientOp::SetString {
                key,
                value,
                condition,
                deadline,
            } => self
                .swap_string(key, value, condition, deadline)
                .await
                .map(ClientReply::Swapped),
            ClientOp::UniqueAdd {
                partition,
                members,
                cl,
            } => self
                .unique_add(&partition, &members, cl)
                .await
                .map(|new| ClientReply::Value(new.iter().filter(|n| **n).count() as i64)),
            ClientOp::UniqueCount { partition, cl } => {
                crate::cluster::unique::count(&self.ctx, &partition, cl)
                    .await
                    .map(ClientReply::Value)
            }
            ClientOp::UniqueContains {
                partition,
                members,
                cl,
            } => self
                .unique_contains(&partition, &members, cl)
                .await
                .map(ClientReply::Flags),
            ClientOp::AddOnce { key, delta, id, cl } => self
                .add_once(&key, delta, &id, cl)
                .await
                .map(ClientReply::Value),
            ClientOp::Change { key, change, cl } => self
                .change(&key, change, cl)
                .await
                .map(ClientReply::Changed),
            ClientOp::GetCell { key, cl } => self
                .get_cell(&key, cl)
                .await
                .map(|c| ClientReply::Cell(convert::wire_cell(&c))),
            ClientOp::Repair { range } => crate::cluster::repair::run::repair(&self.ctx, range)
                .await
                .map(ClientReply::Repaired),
            ClientOp::Decommission { node } => self.change_ring(&node, false).await,
            ClientOp::RemoveNode { node } => self.change_ring(&node, true).await,
            ClientOp::Cleanup => crate::cluster::topology::cleanup::run(&self.ctx)
                .await
                .map(ClientReply::Cleaned),
            ClientOp::Fold => crate::cluster::topology::fold::run(&self.ctx)
                .await
                .map(ClientReply::Folded),
            ClientOp::Scan { scan, cl } => self.scan(scan, cl).await.map(ClientReply::Keys),
            ClientOp::Snapshot(op) => self.snapshot(op).await.map(ClientReply::Snapshots),
            // The connection answers logins and hellos itself, and
            // unwraps a request at SERIAL (see `server`).
            ClientOp::Auth { .. } | ClientOp::Hello { .. } | ClientOp::Serial { .. } => {
                Err(WireError::not_applied(
                    tally_net::wire::ErrorKind::Invalid,
                    "a login, a hello or a SERIAL wrapper is answered by the connection",
                ))
            }
        }
    }

    /// Takes `node` out of the ring: decommissioned, or `removed` (down).
    async fn change_ring(&self, node: &str, removed: bool) -> Result<ClientReply, WireError> {
        use crate::cluster::topology::Change;
        let Some(n) = self.ctx.config().nodes.iter().position(|c| c.id == node) else {
            return Err(WireError::not_applied(
                tally_net::wire::ErrorKind::Invalid,
                format!("no node {node:?} in the configuration"),
            ));
        };
        let change = if removed {
            Change::Remove(n)
        } else {
            Change::Decommission(n)
        };
        crate::cluster::topology::change::run(&self.ctx, change)
            .await
            .map(|t| ClientReply::Ring(t.to_wire()))
    }

    fn status(&self) -> ClientReply {
        let ctx = &self.ctx;
        let topology = ctx.topology();
        let c = &ctx.config().cluster;
        let ownership = crate::ring::Ring::with_members(
            &ctx.config().node_ids(),
            &topology.members_now(),
            c.vnodes,
            c.replication_factor,
        )
        .ownership();
        let nodes = ctx
            .config()
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeStatus {
                id: n.id.clone(),
                client_addr: n.client.to_string(),
                up: ctx.is_up(i),
                not_writable: ctx.not_writable(i),
                ownership: ownership.get(i).copied().unwrap_or(0.0),
            })
            .collect();
        let e = ctx.engine().stats();
        let hints: Vec<PeerHints> = self
            .hint_reports()
            .into_iter()
            .map(|(node, r)| PeerHints {
                node,
                pending: r.pending,
                dropped: r.dropped,
                since_ms: r.since_ms.unwrap_or(0),
                needs_repair: r.needs_repair,
            })
            .collect();
        let hints_pending = hints.iter().map(|h| h.pending).sum();
        let c = &ctx.config().cluster;
        ClientReply::Status(ClusterStatus {
            cluster: c.name.clone(),
            node: ctx.config().nodes[ctx.me()].id.clone(),
            replication_factor: u32::try_from(c.replication_factor).unwrap_or(u32::MAX),
            vnodes: u32::try_from(c.vnodes).unwrap_or(u32::MAX),
            nodes,
            stats: NodeStats {
                cells: e.table_cells + e.memtable_cells as u64,
                log_bytes: e.log_bytes,
                table_bytes: e.table_bytes,
                hints_pending,
                adds_led: e.adds,
                counter_id: e.counter_id,
                hints,
                repairing: ctx.repairing().running(),
                ring: topology.to_wire(),
            },
        })
    }

    /// Whether the script interpreters this node makes are sealed (all
    /// but under fault injection: [`Node::inject_unsealed_scripts`]).
    pub(crate) fn seals_scripts(&self) -> bool {
        !self
            .ctx
            .faults()
            .has(crate::cluster::faults::Fault::UnsealedScripts)
    }

    /// This node's cache of scripts.
    pub(crate) fn scripts(&self) -> &crate::cluster::scripts::Scripts {
        self.ctx.scripts()
    }

    /// What this node counts as it serves.
    pub(crate) fn metrics(&self) -> &'static Registry {
        self.ctx.metrics()
    }

    /// The engine's numbers.
    pub(crate) fn engine_stats(&self) -> tally_engine::Stats {
        self.ctx.engine().stats()
    }

    /// Each other node's hints held here, by its id.
    pub(crate) fn hint_reports(&self) -> Vec<(String, crate::cluster::hints::HintReport)> {
        let ctx = &self.ctx;
        (0..ctx.config().nodes.len())
            .filter(|&i| i != ctx.me())
            .map(|i| (ctx.config().nodes[i].id.clone(), ctx.hints().report(i)))
            .collect()
    }

    /// Stops as a killed process does (for the simulator): the engine
    /// writes nothing more and answers its waiters with errors, the peers
    /// are no longer answered, and the data directory is left as a kill
    /// leaves it. The node's tasks end as they find it gone.
    pub fn crash(&self) {
        if let Some(t) = self.ctx.started_transport() {
            t.close();
        }
        self.ctx.engine().crash();
    }

    /// Stops the engine and syncs the hints; called once at shutdown.
    pub fn close(&self) -> Result<()> {
        if let Some(t) = self.ctx.started_transport() {
            t.close();
        }
        self.ctx.hints().sync().context("sync hints")?;
        self.ctx.engine().shutdown().context("close the engine")?;
        Ok(())
    }
}

/// Runs a coordinated read at `cl`, counted in the metrics.
async fn timed_read<T>(
    metrics: &Registry,
    cl: Consistency,
    read: impl std::future::Future<Output = Result<T, WireError>>,
) -> Result<T, WireError> {
    let started = tally_world::Instant::now();
    let answer = read.await;
    metrics.coordinated(Op::Read, cl, started.elapsed(), &answer);
    answer
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    /// A one-node cluster whose data lives under `dir`.
    fn config(dir: &std::path::Path) -> Config {
        let text = "[cluster]\nname = \"two\"\nreplication_factor = 1\nsync = \"batch\"\nwrite_timeout_ms = 1000\nread_timeout_ms = 1000\n\n[[node]]\nid = \"a\"\n\
                    peer = \"127.0.0.1:1\"\nclient = \"127.0.0.1:2\"\nresp = \"127.0.0.1:3\"\n\
                    data_dir = \"a\"\n";
        Config::parse(text, &dir.join("cluster.toml")).unwrap()
    }

    #[tokio::test]
    async fn two_nodes_in_one_process_keep_their_own_state() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let one = Node::open(config(d1.path()), "a", None).unwrap();
        let two = Node::open(config(d2.path()), "a", None).unwrap();
        // Scripts.
        let body: Arc<[u8]> = b"return 1".to_vec().into();
        assert!(one.scripts().insert_loaded("s", body));
        assert!(!two.scripts().contains("s"));
        // Metrics.
        one.metrics().read_repairs.fetch_add(3, Relaxed);
        assert_eq!(two.metrics().read_repairs.load(Relaxed), 0);
        // Fold generations.
        let folds = tally_engine::Folds::new(vec![vec![7]], 1);
        one.ctx.engine().merger().install(folds);
        assert_eq!(two.ctx.engine().merger().installed().known(), 0);
        one.close().unwrap();
        two.close().unwrap();
    }
}
