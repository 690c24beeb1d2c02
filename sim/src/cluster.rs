//! The simulated cluster: real [`Node`]s, each on its own data directory
//! (on tmpfs where there is one), their engines stepped by the runtime's
//! park hook, their transports on the simulated network, their files on
//! the simulated disk. Nodes crash as at a power cut and restart on what
//! their disks kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use parking_lot::Mutex;
use tally_engine::ParkCommit;
use tally_net::peer::Network;
use tally_node::Node;
use tally_node::client::memory::MemoryDoors;
use tally_node::config::Config;
use tokio::io::DuplexStream;

use crate::broken::Broken;
use crate::disk::{Fault, SimDisk};
use crate::net::Net;
use crate::trace;

/// How long a restart waits for the crashed run's last tasks to let go
/// of its data directory.
const RELEASE_WAIT_MAX: Duration = Duration::from_secs(60);

/// The settings every run's cluster shares.
pub struct Shape {
    /// Nodes.
    pub nodes: usize,
    /// Replicas of each key.
    pub replication_factor: usize,
    /// Nodes configured to join later (`join = true`), beyond `nodes`.
    pub spares: usize,
    /// The broken build every node runs, if any.
    pub broken: Option<Broken>,
    /// Whether the nodes' CQL ports lose answers and stop logged batches
    /// half way ([`CQL_DROP_EVERY`], [`BATCH_CRASH_EVERY`]).
    pub cql_faults: bool,
    /// Settings of `cluster.toml` over the simulation's own, as TOML
    /// values: `write_timeout_ms` for `[cluster]`'s, `hints.window_ms`
    /// for `[cluster.hints]`'s.
    pub settings: BTreeMap<String, String>,
}

/// With CQL faults, every this many statements that change counters a
/// node closes the connection instead of answering, once applied.
pub const CQL_DROP_EVERY: u64 = 5;
/// With CQL faults, every this many logged batches a node coordinates it
/// stops after the batch's log entry and first partition.
pub const BATCH_CRASH_EVERY: u64 = 7;

/// One node's place in the cluster.
struct Slot {
    id: String,
    node: Option<Arc<Node>>,
    /// The running node's client ports, in memory: closed with it.
    doors: Option<MemoryDoors>,
    /// While set, the node's disk takes no commit log writes: what it
    /// acknowledges waits in memory, and a crash loses it.
    stall: Arc<AtomicBool>,
    /// Writes the node's group commits as the runtime parks: kept across
    /// its runs (it serves the engine opened last).
    hook: ParkCommit,
}

/// The nodes of one run.
pub struct Cluster {
    config: Config,
    broken: Option<Broken>,
    cql_faults: bool,
    membership: Mutex<Membership>,
    slots: Mutex<Vec<Slot>>,
    net: Arc<Net>,
    _dir: tempfile::TempDir,
}

/// Which nodes are members of the ring, which are spares (configured to
/// join, never started), which left it for good.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    /// Members of the ring (up or down).
    pub members: Vec<usize>,
    /// Spares, in the order they join.
    pub spares: Vec<usize>,
    /// Left the ring; stopped for good.
    pub gone: Vec<usize>,
}

/// The park hooks of a runtime's nodes, for its `on_thread_park`.
pub type Hooks = Arc<Mutex<Vec<ParkCommit>>>;

/// A simulation's runtime: one thread, its clock paused (time jumps to the
/// next timer when every task waits), `hooks` run each time it parks.
pub fn runtime(hooks: &Hooks) -> Result<tokio::runtime::Runtime> {
    let on_park = hooks.clone();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .on_thread_park(move || {
            for hook in on_park.lock().iter() {
                hook.on_park();
            }
        })
        .build()
        .context("start the simulation's runtime")
}

impl Cluster {
    /// A cluster of `shape` in a fresh directory, its nodes down, their
    /// hooks in `hooks`.
    pub fn new(shape: &Shape, net: Arc<Net>, hooks: &Hooks) -> Result<Arc<Cluster>> {
        let dir = tempfile::Builder::new()
            .prefix(crate::trace::RUN_DIR_PREFIX)
            .tempdir_in(scratch())
            .context("make the run's directory")?;
        let config = config(shape, dir.path())?;
        let slots: Vec<Slot> = config
            .nodes
            .iter()
            .map(|n| Slot {
                id: n.id.clone(),
                node: None,
                doors: None,
                stall: Arc::default(),
                hook: ParkCommit::new(),
            })
            .collect();
        *hooks.lock() = slots.iter().map(|s| s.hook.clone()).collect();
        for node in &config.nodes {
            let volume = SimDisk::mount(&node.data_dir);
            if let Some(ext) = shape.broken.and_then(Broken::unsynced) {
                SimDisk::ignore_syncs(volume, ext);
            }
        }
        let membership = Membership {
            members: (0..shape.nodes).collect(),
            spares: (shape.nodes..shape.nodes + shape.spares).collect(),
            gone: Vec::new(),
        };
        Ok(Arc::new(Cluster {
            config,
            broken: shape.broken,
            cql_faults: shape.cql_faults,
            membership: Mutex::new(membership),
            slots: Mutex::new(slots),
            net,
            _dir: dir,
        }))
    }

    /// The configuration every node reads.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How many nodes the configuration names, spares included.
    pub fn len(&self) -> usize {
        self.config.nodes.len()
    }

    /// Who is a member, a spare, gone.
    pub fn membership(&self) -> Membership {
        self.membership.lock().clone()
    }

    /// Changes the membership.
    pub fn update(&self, f: impl FnOnce(&mut Membership)) {
        f(&mut self.membership.lock())
    }

    /// Node `i`'s id.
    pub fn id(&self, i: usize) -> &str {
        &self.config.nodes[i].id
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.config.nodes.is_empty()
    }

    /// The replication factor.
    pub fn replication_factor(&self) -> usize {
        self.config.cluster.replication_factor
    }

    /// Node `i`, if it is up.
    pub fn node(&self, i: usize) -> Option<Arc<Node>> {
        self.slots.lock().get(i).and_then(|s| s.node.clone())
    }

    /// Node `i` as a client reaches it: up, and not paused (a client's
    /// connection to a paused node hears nothing).
    pub fn serving(&self, i: usize) -> Option<Arc<Node>> {
        self.node(i).filter(|_| !self.net.is_paused(i))
    }

    /// A new connection to node `i`'s RESP port, if it serves clients
    /// (none if it is down, paused, or at its cap).
    pub fn resp(&self, i: usize) -> Option<DuplexStream> {
        self.connect(i, MemoryDoors::resp)
    }

    /// A new connection to node `i`'s CQL port, as [`Cluster::resp`].
    pub fn cql(&self, i: usize) -> Option<DuplexStream> {
        self.connect(i, MemoryDoors::cql)
    }

    fn connect(
        &self,
        i: usize,
        port: fn(&MemoryDoors) -> std::io::Result<DuplexStream>,
    ) -> Option<DuplexStream> {
        if self.net.is_paused(i) {
            return None;
        }
        let slots = self.slots.lock();
        port(slots.get(i)?.doors.as_ref()?).ok()
    }

    /// Whether node `i` is up.
    pub fn is_up(&self, i: usize) -> bool {
        self.node(i).is_some()
    }

    /// Starts node `i` on what its directory holds (a new run), once the
    /// last run's tasks let go of it.
    pub async fn start(&self, i: usize) -> Result<()> {
        let (id, hook, stall) = {
            let slots = self.slots.lock();
            let s = &slots[i];
            (s.id.clone(), s.hook.clone(), s.stall.clone())
        };
        stall.store(false, Ordering::Release);
        SimDisk::up(i);
        let node = self.open(i, &id, hook, stall).await?;
        if let Some(broken) = self.broken {
            broken.inject(&node);
        }
        if self.cql_faults {
            node.inject_cql_drop_every(CQL_DROP_EVERY);
            node.inject_batch_crash_every(BATCH_CRASH_EVERY);
        }
        let net = self.net.clone();
        node.start_peers_on(|_settings, inbound| {
            net.up(i, inbound);
            let network: Arc<dyn Network> = net.of(i);
            Ok(network)
        })?;
        // As `tallyd run`: the newest ring first, then the clients.
        node.learn_ring().await;
        trace!("n{} up", i + 1);
        let doors = MemoryDoors::new(&node)?;
        let mut slots = self.slots.lock();
        slots[i].node = Some(node);
        slots[i].doors = Some(doors);
        Ok(())
    }

    async fn open(
        &self,
        i: usize,
        id: &str,
        hook: ParkCommit,
        stall: Arc<AtomicBool>,
    ) -> Result<Arc<Node>> {
        let started = tally_world::Instant::now();
        loop {
            let keep_expired = self.broken == Some(Broken::IgnoreDeadlines);
            let ignore_folds = self.broken == Some(Broken::MergeIgnoringFolds);
            let unconfirmed = self.broken == Some(Broken::RestartUnconfirmed);
            let opened = Node::open_with(self.config.clone(), id, Some(hook.clone()), |o| {
                o.stepped = true;
                o.stall_writes = Some(stall.clone());
                o.keep_expired = keep_expired;
                o.merge_ignoring_generations = ignore_folds;
                o.confirm_restarts &= !unconfirmed;
            });
            match opened {
                Ok(node) => return Ok(node),
                Err(e) if started.elapsed() < RELEASE_WAIT_MAX && in_use(&e) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.context(format!("start n{}", i + 1))),
            }
        }
    }

    /// Node `i`'s disk stops taking commit log writes (until it crashes,
    /// or until this is called again with `on` false).
    pub fn stall(&self, i: usize, on: bool) {
        trace!(
            "n{} disk {}",
            i + 1,
            if on { "stalls" } else { "writes again" }
        );
        self.slots.lock()[i].stall.store(on, Ordering::Release);
    }

    /// Pauses node `i` (`on`), as SIGSTOP does, or resumes it: its peers
    /// hear nothing from it, and what they sent it waits (see `net`).
    pub fn pause(&self, i: usize, on: bool) {
        trace!("n{} {}", i + 1, if on { "paused" } else { "resumed" });
        self.net.pause(i, on);
    }

    /// Node `i`'s disk fails as `fault` says, or works again (`None`),
    /// until it crashes.
    pub fn disk_fault(&self, i: usize, fault: Option<Fault>) {
        trace!("n{} disk {fault:?}", i + 1);
        SimDisk::set_fault(i, fault);
    }

    /// Kills node `i` as a process is killed: it stops answering, writes
    /// nothing more, and its disk keeps what it wrote (the OS's page cache
    /// outlives the process).
    pub fn crash(&self, i: usize) {
        let (node, doors) = {
            let mut slots = self.slots.lock();
            (slots[i].node.take(), slots[i].doors.take())
        };
        drop(doors);
        let Some(node) = node else {
            return;
        };
        trace!("n{} crashes", i + 1);
        self.net.down(i);
        node.crash();
    }

    /// Cuts node `i`'s power: it stops as at [`Cluster::crash`], and its
    /// disk keeps only what was fsync'd.
    pub fn power_cut(&self, i: usize) -> Result<()> {
        trace!("n{} loses power", i + 1);
        self.crash(i);
        SimDisk::crash(i).with_context(|| format!("cut n{}'s disk back to what it synced", i + 1))
    }

    /// Deletes down node `i`'s data directory, as an operator replacing
    /// its disk does: it starts again empty, under a new counter id.
    pub fn wipe(&self, i: usize) -> Result<()> {
        anyhow::ensure!(!self.is_up(i), "n{} is up: kill it first", i + 1);
        trace!("n{} wiped", i + 1);
        SimDisk::wipe(i).with_context(|| format!("wipe n{}'s disk", i + 1))
    }

    /// Stops every node cleanly.
    pub fn close(&self) -> Result<()> {
        let nodes: Vec<_> = self
            .slots
            .lock()
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| {
                s.doors = None;
                Some((i, s.node.take()?))
            })
            .collect();
        for (i, node) in nodes {
            self.net.down(i);
            node.close()?;
        }
        Ok(())
    }
}

/// Whether opening a node failed because its last run still holds the
/// directory.
fn in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tally_engine::Error>()
            .is_some_and(|e| matches!(e, tally_engine::Error::Locked(_)))
    })
}

/// Where runs keep their directories: tmpfs if the machine has one, where
/// an fsync costs nothing.
fn scratch() -> PathBuf {
    let shm = Path::new("/dev/shm");
    match shm.is_dir() {
        true => shm.to_path_buf(),
        false => std::env::temp_dir(),
    }
}

/// The simulation's `[cluster]` settings, before a shape's own.
const SETTINGS: &[(&str, &str)] = &[
    ("name", "\"sim\""),
    ("vnodes", "8"),
    ("sync", "\"batch\""),
    ("write_timeout_ms", "2000"),
    ("read_timeout_ms", "2000"),
    ("heartbeat_interval_ms", "200"),
    ("failure_timeout_ms", "1000"),
];

/// The cluster's configuration: addresses no one binds (the network is
/// simulated; each CQL address has a host of its own, as the CQL port
/// names nodes by host), directories under `dir`.
fn config(shape: &Shape, dir: &Path) -> Result<Config> {
    let mut text = cluster_tables(shape);
    for i in 1..=shape.nodes + shape.spares {
        text.push_str(&format!(
            "\n[[node]]\nid = \"n{i}\"\npeer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\n\
             resp = \"127.0.0.1:{}\"\ncql = \"127.0.0.{i}:9042\"\ndata_dir = \"n{i}\"\n\
             join = {}\n",
            17100 + i,
            17200 + i,
            17300 + i,
            i > shape.nodes
        ));
    }
    Config::parse(&text, &dir.join("cluster.toml")).context("the simulated cluster's config")
}

/// `[cluster]` and its tables: the simulation's settings, the shape's
/// over them.
fn cluster_tables(shape: &Shape) -> String {
    let mut tables: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    let rf = shape.replication_factor.to_string();
    let ours = SETTINGS
        .iter()
        .copied()
        .chain([("replication_factor", rf.as_str())]);
    for (key, value) in ours.chain(shape.settings.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        let (table, key) = key.rsplit_once('.').unwrap_or(("", key));
        tables.entry(table).or_default().insert(key, value);
    }
    let mut text = String::new();
    for (table, keys) in tables {
        match table {
            "" => text.push_str("[cluster]\n"),
            t => text.push_str(&format!("[cluster.{t}]\n")),
        }
        for (key, value) in keys {
            text.push_str(&format!("{key} = {value}\n"));
        }
    }
    text
}
