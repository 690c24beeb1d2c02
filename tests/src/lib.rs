//! A harness that runs real `tallyd` processes on 127.0.0.1.
//!
//! [`Cluster::start`] takes the checked-in `cluster.toml`, keeps its cluster
//! settings, and rewrites every address to a free loopback port and every
//! directory into a fresh temporary directory, so tests run side by side
//! and next to a developer's own cluster. It creates the certificates with
//! `tallyd certs`, starts one `tallyd run` per node, and waits until every
//! node sees every other one up. Nodes are killed for real (`SIGKILL` by
//! pid) and restarted on the same data. Dropping the cluster kills what it
//! started, and only that.
//!
//! [`proxy`] puts a UDP proxy in front of a node's QUIC port to cut links;
//! [`chaos`] runs a workload under faults and [`checker`] judges its history.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and benchmarks measure real time, and draw real random bytes"
)]

use std::fs;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub mod chaos;
pub mod checker;
pub mod cql_work;
pub mod exact_sender;
pub mod old_build;
pub mod proxy;
pub mod resp_work;
pub mod unique_sender;
use tally_net::Client;
use tally_node::config::Config;

/// A binary of this workspace, `name` (`tallyd`, `tally`, `tally-bench`):
/// `$TALLY_BIN_DIR/name`, or the one next to the test executable. Cargo
/// builds a package's binaries for its own integration tests, and builds
/// everything before it runs any test, so `cargo test --workspace` has
/// them all in place.
pub fn bin(name: &str) -> Result<PathBuf> {
    let dir = match std::env::var("TALLY_BIN_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => {
            // A test runs from target/<profile>/deps, a binary (chaos) from
            // target/<profile>: look next to it, then one level up.
            let exe = std::env::current_exe().context("find the running executable")?;
            let here = exe.parent().context("executable has no directory")?;
            if here.join(name).exists() {
                here.to_path_buf()
            } else {
                here.parent()
                    .context("executable has no target dir")?
                    .to_path_buf()
            }
        }
    };
    let path = dir.join(name);
    if !path.exists() {
        bail!(
            "{} is missing: run `cargo build --workspace --bins` (cargo test --workspace builds it)",
            path.display()
        );
    }
    Ok(path)
}

/// `target/<name>`, where tests keep client libraries they install from
/// their registries; `install` runs there first (its program gets the
/// directory as its last argument) unless `installed` says it is done.
pub fn client_packages(
    name: &str,
    installed: impl Fn(&Path) -> bool,
    mut install: Command,
) -> Result<PathBuf> {
    let dir = bin("tallyd")?
        .parent()
        .context("binaries have no directory")?
        .join("..")
        .join(name);
    // The tests of one binary run at once: one installs, the others wait.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if !installed(&dir) {
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let out = install
            .arg(&dir)
            .output()
            .with_context(|| format!("run {:?}", install.get_program()))?;
        if !out.status.success() {
            bail!(
                "{:?} failed: {}",
                install,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(dir)
}

/// `packages` (`name@version`, pinned) from npm, installed under
/// `target/<dir>` if they are not yet: the `node_modules` directory.
pub fn npm_packages(dir: &str, packages: &[&str]) -> Result<PathBuf> {
    let mut npm = Command::new("npm");
    npm.args(["install", "--no-audit", "--no-fund"])
        .args(packages)
        .arg("--prefix");
    let installed = |dir: &Path| {
        packages.iter().all(|p| {
            let Some((name, version)) = p.rsplit_once('@') else {
                return false;
            };
            std::fs::read_to_string(dir.join("node_modules").join(name).join("package.json"))
                .is_ok_and(|p| p.contains(&format!("\"version\": \"{version}\"")))
        })
    };
    Ok(client_packages(dir, installed, npm)?.join("node_modules"))
}

/// `packages` (`name==version`, pinned) from PyPI, installed under
/// `target/<dir>` if they are not yet: the directory for `PYTHONPATH`.
/// `dist_infos` names each package's `<name>-<version>` as installed.
pub fn pip_packages(dir: &str, packages: &[&str], dist_infos: &[&str]) -> Result<PathBuf> {
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--quiet"])
        .args(packages)
        .arg("--target");
    let installed = |dir: &Path| {
        dist_infos
            .iter()
            .all(|d| dir.join(format!("{d}.dist-info")).exists())
    };
    client_packages(dir, installed, pip)
}

/// One RESP command as an array of bulk strings, as client libraries send it.
pub fn resp_command(words: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
        out.extend_from_slice(w);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Runs `tallyd passwd ARGS` with `password` on its stdin; answers its stdout.
pub fn passwd(args: &[&str], password: &str) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new(bin("tallyd")?)
        .arg("passwd")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("run tallyd passwd")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(format!("{password}\n").as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "tallyd passwd {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The redis-py release the tests use.
pub const REDIS_PY: &str = "redis==8.1.0";

/// Where redis-py ([`REDIS_PY`], from PyPI) is installed for the tests,
/// installing it there if it is not yet (`target/pyredis`).
pub fn redis_py() -> PathBuf {
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--quiet", REDIS_PY, "--target"]);
    let installed = |dir: &Path| dir.join("redis-8.1.0.dist-info").exists();
    client_packages("pyredis", installed, pip).expect("redis-py installs from PyPI")
}

/// Runs a client script that prints `ok` when every check of it passed;
/// panics with its output otherwise (`what` says which run it was).
pub fn assert_script_ok(script: &mut Command, what: &str) {
    let out = script
        .output()
        .unwrap_or_else(|e| panic!("{what}: run {:?}: {e}", script.get_program()));
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A two-worker runtime for tests that drive clients between process faults.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

/// Settings a test may change from `cluster.toml`'s.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of nodes.
    pub nodes: usize,
    /// Replication factor.
    pub replication_factor: usize,
    /// `batch` or `periodic`.
    pub sync: String,
    /// The node binary: `tallyd`, or the test-only `tallyd-faults` (see
    /// [`ClusterOptions::losing_adds`]).
    pub daemon: &'static str,
    /// Extra arguments for every `<daemon> run`.
    pub run_args: Vec<String>,
    /// Put each node's QUIC socket at `peer_bind` and leave `peer` for a
    /// proxy the caller runs (see [`Cluster::configure`]).
    pub proxied: bool,
    /// TOML tables of `[cluster]` to add, like `[cluster.ids]`.
    pub cluster_tables: String,
    /// Extra arguments for one node's `<daemon> run`: `(node index, args)`.
    pub node_args: Vec<(usize, Vec<String>)>,
    /// Nodes after the first `nodes`, configured with `join = true`: not
    /// started by [`Cluster::start_all`]; see [`Cluster::join`].
    pub joining: usize,
    /// Give each node a CQL listener: node `i` at 127.0.0.`i+1`, all on
    /// one port, as drivers expect of a cluster.
    pub cql: bool,
    /// The nodes' `write_timeout_ms` and `read_timeout_ms` (`None`:
    /// `cluster.toml`'s 2 s; see [`PATIENT_TIMEOUT_MS`]).
    pub request_timeout_ms: Option<u64>,
}

/// The write and read timeouts of a test that checks answers, not
/// latency, under a load of its own: six tests at a time on two cores and
/// one disk stall a node's fsyncs and answers for seconds now and then,
/// and CI failed on "1 of 2 copies acknowledged within 2000 ms" (twice)
/// and on a forward's 3 s. Not every test's: those that wait on dead
/// or stopped nodes would wait longer too.
pub const PATIENT_TIMEOUT_MS: u64 = 5_000;

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 3,
            replication_factor: 3,
            sync: "batch".into(),
            daemon: "tallyd",
            run_args: Vec::new(),
            proxied: false,
            cluster_tables: String::new(),
            node_args: Vec::new(),
            joining: 0,
            cql: false,
            request_timeout_ms: None,
        }
    }
}

impl ClusterOptions {
    /// FAULT INJECTION, to prove a checker can fail: the nodes run as
    /// `tallyd-faults`, each acknowledging every `every`th add it leads
    /// without applying it.
    pub fn losing_adds(self, every: u64) -> ClusterOptions {
        ClusterOptions {
            daemon: "tallyd-faults",
            run_args: vec!["--unsafe-drop-every".into(), every.to_string()],
            ..self
        }
    }

    /// FAULT INJECTION, to prove a checker can fail: the nodes run as
    /// `tallyd-faults`, and node `node` applies every add with an
    /// operation id as new (a retry counts twice) and admits members of
    /// unique counters whatever their applier.
    pub fn ignoring_ids(self, node: usize) -> ClusterOptions {
        ClusterOptions {
            daemon: "tallyd-faults",
            node_args: vec![(node, vec!["--unsafe-ignore-ids".into()])],
            ..self
        }
    }
}

/// One node process.
pub struct NodeProc {
    /// Node id.
    pub id: String,
    /// Client protocol address.
    pub client: SocketAddr,
    /// QUIC peer address.
    pub peer: SocketAddr,
    child: Option<Child>,
    log: PathBuf,
}

/// A running cluster of real processes.
pub struct Cluster {
    /// Temporary directory holding config, certs, data and logs.
    pub dir: tempfile::TempDir,
    /// The generated config file.
    pub config_path: PathBuf,
    /// The loaded config.
    pub config: Config,
    /// The nodes, in config order.
    pub nodes: Vec<NodeProc>,
    /// TLS and login of the harness' own connections ([`Cluster::client`],
    /// the waits), for clusters that ask for them.
    pub security: tally_net::client::Security,
    bin: PathBuf,
    /// Per node, the binary it runs instead of `bin` (a rolling upgrade).
    node_bins: Vec<Option<PathBuf>>,
    run_args: Vec<String>,
    node_args: Vec<(usize, Vec<String>)>,
    /// Keep the files when dropped (see [`Cluster::keep_files`]).
    keep: bool,
}

/// The size of the largest file under `dir`.
fn largest_file(dir: &std::path::Path) -> std::io::Result<u64> {
    let mut max = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        max = max.max(if meta.is_dir() {
            largest_file(&entry.path())?
        } else {
            meta.len()
        });
    }
    Ok(max)
}

/// Whether every thread of process `pid` is stopped (state `T` in
/// `/proc/<pid>/task/<tid>/stat`, the field after the command's closing
/// parenthesis). A process that is gone is an error.
fn stopped(pid: u32) -> Result<bool> {
    let tasks = format!("/proc/{pid}/task");
    for task in fs::read_dir(&tasks).with_context(|| format!("read {tasks}"))? {
        let stat = match fs::read_to_string(task?.path().join("stat")) {
            Ok(stat) => stat,
            // A thread that ended since the listing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("read a thread's stat in {tasks}")),
        };
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        match state.and_then(|s| s.chars().next()) {
            Some('T') => {}
            Some('Z' | 'X') => bail!("process {pid} ended"),
            Some(_) => return Ok(false),
            None => bail!("unreadable {tasks} stat: {stat:?}"),
        }
    }
    Ok(true)
}

/// Ports handed out by [`free_port`] come from `[PORT_BASE, PORT_END)`,
/// below Linux's default ephemeral range (32768-60999). A port the kernel
/// picked for `bind(0)` and the test then released can be picked again for
/// the next `bind(0)` or for any outgoing connection before the node binds
/// it; a port outside that range is only ever taken by someone asking for
/// it by number.
const PORT_BASE: u16 = 20_000;
const PORT_END: u16 = 32_000;

/// A loopback address whose port is free for both TCP and UDP right now
/// and that this process has never handed out before, so the client, RESP
/// and peer addresses of every cluster a test binary starts are distinct.
/// Each process starts at its own offset in the range, so test binaries
/// that happen to run at once rarely probe the same ports.
pub fn free_port() -> Result<SocketAddr> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORT_END - PORT_BASE);
    let start = std::process::id().wrapping_mul(7919) % span;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = PORT_BASE + u16::try_from(offset).context("port offset")?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let tcp = TcpListener::bind(addr);
        let udp = UdpSocket::bind(addr);
        if tcp.is_ok() && udp.is_ok() {
            return Ok(addr);
        }
    }
    bail!("no free loopback port in {PORT_BASE}..{PORT_END}")
}

/// The checked-in `cluster.toml`.
pub fn repo_config() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../cluster.toml"))
}

impl Cluster {
    /// Starts a cluster and waits until every node sees every other up.
    pub fn start(opts: ClusterOptions) -> Result<Cluster> {
        let mut cluster = Cluster::configure(opts)?;
        cluster.start_all()?;
        Ok(cluster)
    }

    /// Starts every node of the first ring and waits until they all see
    /// each other up.
    pub fn start_all(&mut self) -> Result<()> {
        for i in 0..self.nodes.len() {
            if !self.config.nodes[i].join {
                self.spawn(i)?;
            }
        }
        self.wait_all_up(Duration::from_secs(30))
    }

    /// Starts node `i` with `run --join` (it joins the ring in the
    /// background) and waits until it serves.
    pub fn join(&mut self, i: usize) -> Result<()> {
        self.spawn_args(i, None, &["--join"])?;
        self.wait_serving(i, Duration::from_secs(30))
    }

    /// Wipes node `i`'s data directory (the node must be stopped), as a
    /// lost disk would, and starts it with `run --replace`; waits until it
    /// serves (its replace goes on in the background).
    pub fn replace_wiped(&mut self, i: usize) -> Result<()> {
        let dir = self.config.nodes[i].data_dir.clone();
        fs::remove_dir_all(&dir).with_context(|| format!("wipe {}", dir.display()))?;
        self.spawn_args(i, None, &["--replace"])?;
        self.wait_serving(i, Duration::from_secs(30))
    }

    /// Starts node `i` with `run` and `extra` arguments and waits for the
    /// process to end: its log, or an error if it succeeded or kept
    /// running past `timeout`.
    pub fn run_refused(&mut self, i: usize, extra: &[&str], timeout: Duration) -> Result<String> {
        self.spawn_args(i, None, extra)?;
        let deadline = Instant::now() + timeout;
        loop {
            let n = &mut self.nodes[i];
            if let Some(c) = n.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                n.child = None;
                if status.success() {
                    bail!("{} exited successfully", n.id);
                }
                return Ok(self.log_text(i));
            }
            if Instant::now() > deadline {
                bail!("{} kept running: {}", self.nodes[i].id, self.log_tail(i));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Writes the config and certificates without starting any node, so a
    /// caller can put proxies in place first.
    pub fn configure(opts: ClusterOptions) -> Result<Cluster> {
        let base = Config::load(&repo_config())?;
        let dir = tempfile::Builder::new()
            .prefix("tally-cluster-")
            .tempdir()?;
        let c = &base.cluster;
        let mut toml = format!(
            "[cluster]\nname = \"test\"\nreplication_factor = {}\nvnodes = {}\nsync = \"{}\"\nsync_interval_ms = {}\n\
             write_timeout_ms = {}\nread_timeout_ms = {}\nheartbeat_interval_ms = {}\nfailure_timeout_ms = {}\ncerts_dir = \"certs\"\n",
            opts.replication_factor,
            c.vnodes,
            opts.sync,
            c.sync_interval_ms,
            opts.request_timeout_ms.unwrap_or(c.write_timeout_ms),
            opts.request_timeout_ms.unwrap_or(c.read_timeout_ms),
            c.heartbeat_interval_ms,
            c.failure_timeout_ms,
        );
        toml += &opts.cluster_tables;
        let cql_port = match opts.cql {
            true => Some(free_port()?.port()),
            false => None,
        };
        for i in 0..opts.nodes + opts.joining {
            toml += &format!(
                "\n[[node]]\nid = \"n{}\"\npeer = \"{}\"\nclient = \"{}\"\nresp = \"{}\"\nmetrics = \"{}\"\ndata_dir = \"data/n{}\"\n",
                i + 1,
                free_port()?,
                free_port()?,
                free_port()?,
                free_port()?,
                i + 1
            );
            if let Some(port) = cql_port {
                let ip = u8::try_from(i + 1).context("fewer than 255 nodes")?;
                toml += &format!("cql = \"127.0.0.{ip}:{port}\"\n");
            }
            if i >= opts.nodes {
                toml += "join = true\n";
            }
            if opts.proxied {
                // Peers dial `peer` (a proxy the test runs); the node binds this.
                toml += &format!("peer_bind = \"{}\"\n", free_port()?);
            }
        }
        let config_path = dir.path().join("cluster.toml");
        fs::write(&config_path, toml)?;
        let config = Config::load(&config_path)?;
        let out = Command::new(bin("tallyd")?)
            .args(["certs", "--config"])
            .arg(&config_path)
            .output()
            .context("run tallyd certs")?;
        if !out.status.success() {
            bail!(
                "tallyd certs failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let nodes = config
            .nodes
            .iter()
            .map(|n| NodeProc {
                id: n.id.clone(),
                client: n.client,
                peer: n.peer,
                child: None,
                log: dir.path().join(format!("{}.log", n.id)),
            })
            .collect();
        Ok(Cluster {
            dir,
            config_path,
            config,
            nodes,
            security: tally_net::client::Security::default(),
            node_bins: vec![None; opts.nodes + opts.joining],
            bin: bin(opts.daemon)?,
            run_args: opts.run_args.clone(),
            node_args: opts.node_args.clone(),
            keep: false,
        })
    }

    /// Keeps the cluster's files (config, data, each node's log) when it
    /// is dropped, for a post-mortem: a chaos run that found a violation
    /// asks for this.
    pub fn keep_files(&mut self) {
        self.keep = true;
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        self.spawn_with(i, None)
    }

    fn spawn_with(&mut self, i: usize, file_limit_blocks: Option<u64>) -> Result<()> {
        self.spawn_args(i, file_limit_blocks, &[])
    }

    /// Starts node `i` with `extra` arguments, optionally under a file
    /// size limit (`RLIMIT_FSIZE`, in the shell's `ulimit -f` blocks) with
    /// SIGXFSZ ignored, so writes past it fail with EFBIG, as on a full disk.
    fn spawn_args(
        &mut self,
        i: usize,
        file_limit_blocks: Option<u64>,
        extra: &[&str],
    ) -> Result<()> {
        let n = &mut self.nodes[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)?;
        let bin = self.node_bins[i].as_ref().unwrap_or(&self.bin);
        let mut cmd = match file_limit_blocks {
            None => Command::new(bin),
            Some(blocks) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!(
                        "trap '' XFSZ; ulimit -f {blocks}; exec \"$0\" \"$@\""
                    ))
                    .arg(bin);
                c
            }
        };
        let child = cmd
            .args(["run", "--config"])
            .arg(&self.config_path)
            .args(["--node", &n.id])
            .args(&self.run_args)
            .args(extra)
            .args(
                self.node_args
                    .iter()
                    .filter(|(node, _)| *node == i)
                    .flat_map(|(_, args)| args),
            )
            .env("TALLY_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", n.id))?;
        n.child = Some(child);
        Ok(())
    }

    /// Restarts node `i` (which must be stopped) with its files allowed to
    /// grow only a little past the largest one it has: its disk is "full".
    pub fn restart_with_full_disk(&mut self, i: usize) -> Result<()> {
        let dir = &self.config.nodes[i].data_dir;
        let largest = largest_file(dir).with_context(|| format!("size up {}", dir.display()))?;
        // A few KiB of room: enough to start, soon exhausted by the log.
        self.spawn_with(i, Some(largest / 512 + 16))?;
        self.wait_serving(i, Duration::from_secs(30))
    }

    /// Whether node `i`'s process is running (not killed).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// Node `i` runs `daemon` from its next start on (`None`: the
    /// cluster's own): how a rolling upgrade replaces a node's build.
    pub fn set_daemon(&mut self, i: usize, daemon: Option<PathBuf>) {
        self.node_bins[i] = daemon;
    }

    /// The binary node `i` runs from its next start on.
    pub fn daemon(&self, i: usize) -> &std::path::Path {
        self.node_bins[i].as_deref().unwrap_or(&self.bin)
    }

    /// A clean stop of node `i` (SIGTERM, as an operator's), waiting up to
    /// `timeout` for it to exit; past that it is killed, and that is an
    /// error.
    pub fn stop(&mut self, i: usize, timeout: Duration) -> Result<()> {
        if self.nodes[i].child.is_none() {
            return Ok(());
        }
        self.signal(i, libc::SIGTERM)?;
        let deadline = Instant::now() + timeout;
        let n = &mut self.nodes[i];
        let Some(child) = n.child.as_mut() else {
            return Ok(());
        };
        loop {
            if let Some(status) = child.try_wait()? {
                n.child = None;
                if !status.success() {
                    bail!("{} stopped with {status}", n.id);
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                child.kill()?;
                child.wait()?;
                n.child = None;
                bail!("{} did not stop within {timeout:?} of SIGTERM", n.id);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9` of node `i`, waiting until the process is gone.
    pub fn kill(&mut self, i: usize) -> Result<()> {
        let n = &mut self.nodes[i];
        if let Some(mut c) = n.child.take() {
            c.kill().with_context(|| format!("kill {}", n.id))?; // SIGKILL by pid
            c.wait()?;
        }
        Ok(())
    }

    /// SIGSTOP (`resume: false`) or SIGCONT node `i`: a frozen process,
    /// like a long GC pause, that keeps its sockets and its view. A stop
    /// returns once every thread of the node has stopped: `kill(2)` only
    /// starts the stop, and on a busy machine a thread already running
    /// goes on until the one told of the signal gets a CPU (a test froze
    /// n3, then saw it acknowledge an add sent after the `kill`).
    pub fn signal_stop(&mut self, i: usize, resume: bool) -> Result<()> {
        if resume {
            return self.signal(i, libc::SIGCONT);
        }
        self.signal(i, libc::SIGSTOP)?;
        let pid = self.nodes[i]
            .child
            .as_ref()
            .context("node is not running")?
            .id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stopped(pid)? {
            if Instant::now() > deadline {
                bail!(
                    "node {} (pid {pid}) did not stop within 10 s of SIGSTOP",
                    i + 1
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Sends signal `sig` to node `i`'s process.
    pub fn signal(&self, i: usize, sig: libc::c_int) -> Result<()> {
        let child = self.nodes[i]
            .child
            .as_ref()
            .context("node is not running")?;
        let pid = libc::pid_t::try_from(child.id()).context("pid")?;
        // SAFETY: kill(2) takes plain integers; the pid is our own unreaped child.
        #[allow(unsafe_code, reason = "kill(2) has no safe std wrapper")]
        let rc = unsafe { libc::kill(pid, sig) };
        if rc != 0 {
            bail!(
                "kill({pid}, {sig}) failed: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }

    /// Starts node `i` with `run --replace` on whatever its data directory
    /// holds (a restored snapshot, say) and waits until it answers.
    pub fn restart_replacing(&mut self, i: usize) -> Result<()> {
        self.spawn_args(i, None, &["--replace"])?;
        self.wait_serving(i, Duration::from_secs(30))
    }

    /// Starts node `i` again on its data and waits until it answers.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.spawn(i)?;
        self.wait_serving(i, Duration::from_secs(30))
    }

    /// Waits until node `i` accepts client connections.
    pub fn wait_serving(&mut self, i: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if std::net::TcpStream::connect_timeout(
                &self.nodes[i].client,
                Duration::from_millis(200),
            )
            .is_ok()
            {
                return Ok(());
            }
            self.check_alive(i)?;
            if Instant::now() > deadline {
                bail!(
                    "{} did not open its client port: {}",
                    self.nodes[i].id,
                    self.log_tail(i)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn check_alive(&mut self, i: usize) -> Result<()> {
        let n = &mut self.nodes[i];
        if let Some(c) = n.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            n.child = None;
            let id = n.id.clone();
            bail!("{id} exited ({status}): {}", self.log_tail(i));
        }
        Ok(())
    }

    /// Node `i`'s whole log (of every run of it).
    pub fn log_text(&self, i: usize) -> String {
        fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// The last lines of node `i`'s log, for error messages.
    pub fn log_tail(&self, i: usize) -> String {
        let text = fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits until every running node sees every other running node up
    /// (and the killed ones down).
    pub fn wait_all_up(&mut self, timeout: Duration) -> Result<()> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_some() {
                self.wait_serving(i, timeout)?;
            }
        }
        self.wait_view(timeout)
    }

    /// Waits until every running node's view of up and down matches which
    /// processes are running.
    pub fn wait_view(&self, timeout: Duration) -> Result<()> {
        let running: Vec<bool> = self.nodes.iter().map(|n| n.child.is_some()).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let deadline = Instant::now() + timeout;
            'outer: loop {
                if Instant::now() > deadline {
                    bail!("nodes did not agree on who is up within {timeout:?}");
                }
                for (i, n) in self.nodes.iter().enumerate() {
                    if !running[i] {
                        continue;
                    }
                    let ok = match self.connect(n.client).await {
                        Ok(c) => match c.status().await {
                            Ok(status) => {
                                status.nodes.iter().zip(&running).all(|(s, r)| s.up == *r)
                            }
                            Err(_) => false,
                        },
                        Err(_) => false,
                    };
                    if !ok {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue 'outer;
                    }
                }
                return Ok(());
            }
        })
    }

    /// Waits until every running node's view has matched which processes
    /// run for `calm` in a row, at most 30 s. After a restart, the peers
    /// send on their connections to the dead incarnation until they give
    /// up on them, and their view of the restarted node flaps meanwhile.
    pub fn wait_calm(&self, calm: Duration) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut since = Instant::now();
        while since.elapsed() < calm {
            if Instant::now() > deadline {
                bail!("the nodes' views did not stay put for {calm:?} within 30 s");
            }
            if self.wait_view(Duration::from_millis(10)).is_err() {
                since = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Runs the `tally` CLI against this cluster with `args` (logged in
    /// as [`Cluster::security`] says, through `TALLY_USER` and
    /// `TALLY_PASSWORD`; TLS comes from the config).
    pub fn tally(&self, args: &[&str]) -> Result<std::process::Output> {
        self.tally_with(&bin("tally")?, args)
    }

    /// [`Cluster::tally`] with another build's `tally` (an upgrade's old one).
    pub fn tally_with(&self, tally: &Path, args: &[&str]) -> Result<std::process::Output> {
        let mut cmd = Command::new(tally);
        if let Some(login) = &self.security.login {
            cmd.env("TALLY_USER", &login.user)
                .env("TALLY_PASSWORD", &login.password);
        }
        cmd.arg("--config")
            .arg(&self.config_path)
            .args(args)
            .output()
            .context("run tally")
    }

    /// [`Cluster::tally`] with environment variables set (`TALLY_USER`,
    /// `TALLY_PASSWORD`).
    pub fn tally_env(&self, env: &[(&str, &str)], args: &[&str]) -> Result<std::process::Output> {
        Command::new(bin("tally")?)
            .arg("--config")
            .arg(&self.config_path)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .context("run tally")
    }

    /// `tallyd passwd USER --role ROLE`, with `password` on its stdin:
    /// adds or changes a user in the config's users file.
    pub fn passwd(&self, user: &str, role: &str, password: &str) -> Result<()> {
        passwd(
            &[
                "--config",
                &self.config_path.to_string_lossy(),
                user,
                "--role",
                role,
            ],
            password,
        )
        .map(|_| ())
    }

    /// [`Cluster::tally`] that must succeed: its stdout, or an error with
    /// its stderr.
    pub fn tally_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.tally(args)?;
        if !out.status.success() {
            bail!("tally {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `tally status --json` (through node `via`, e.g. "n1", if given).
    pub fn status_json(&self, via: Option<&str>) -> Result<serde_json::Value> {
        let mut args = vec!["status", "--json"];
        if let Some(node) = via {
            args.extend(["--node", node]);
        }
        let out = self.tally(&args)?;
        anyhow::ensure!(
            out.status.success(),
            "tally status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// A client connected to node `i` (with [`Cluster::security`]).
    pub async fn client(&self, i: usize) -> Result<Client> {
        Ok(self.connect(self.nodes[i].client).await?)
    }

    async fn connect(&self, addr: SocketAddr) -> Result<Client, tally_net::ClientError> {
        // Past the nodes' own timeouts, so that theirs reach the test as
        // their answer.
        let c = &self.config.cluster;
        let nodes = Duration::from_millis(2 * c.write_timeout_ms.max(c.read_timeout_ms) + 1_000);
        let timeout = tally_net::client::DEFAULT_TIMEOUT.max(nodes);
        Client::connect_secure(addr, timeout, &self.security).await
    }

    /// Client addresses of every node.
    pub fn client_addrs(&self) -> Vec<std::net::SocketAddr> {
        self.nodes.iter().map(|n| n.client).collect()
    }

    /// RESP address of node `i`.
    pub fn resp_addr(&self, i: usize) -> std::net::SocketAddr {
        self.config.nodes[i].resp
    }

    /// CQL address of node `i` (with [`ClusterOptions::cql`]).
    pub fn cql_addr(&self, i: usize) -> Option<std::net::SocketAddr> {
        self.config.nodes[i].cql
    }

    /// Metrics address of node `i` (every test node has one).
    pub fn metrics_addr(&self, i: usize) -> std::net::SocketAddr {
        self.config.nodes[i]
            .metrics
            .expect("test configs give every node a metrics address")
    }

    /// Runs `redis-cli ARGS` against node `i`'s RESP port; answers its
    /// output (which holds Redis errors too: redis-cli exits 0 on them).
    pub fn redis_cli(&self, i: usize, args: &[&str]) -> String {
        let port = self.resp_addr(i).port().to_string();
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .expect("redis-cli is installed (apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("redis-cli prints text")
    }

    /// Waits until every running node (a member: nodes not started yet,
    /// to join later, are not) has enabled `features`; answers them.
    pub fn wait_features(&self, features: &[&str], timeout: Duration) -> Result<Vec<usize>> {
        let members: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.is_running(i))
            .collect();
        chaos::upgrade::wait_enabled(self, &members, features, timeout)?;
        Ok(members)
    }

    /// Waits until every node has enabled agreement (the cluster feature
    /// strings need) and CQL's counter and regular tables (in token
    /// order, with the batch log, their rows sorted and read slice by
    /// slice), and takes string writes: a node writes
    /// once it has heard every member up enabled it too (a heartbeat
    /// later).
    pub fn wait_agreement(&self) -> Result<()> {
        use tally_node::cluster::features::{
            AGREEMENT, CQL_BATCH_LOG, CQL_REGULAR_TABLES, CQL_TABLES, CQL_TOKEN_ORDER, ROW_SLICES,
        };
        let timeout = Duration::from_secs(30);
        let features = [
            AGREEMENT,
            CQL_TABLES,
            CQL_REGULAR_TABLES,
            CQL_TOKEN_ORDER,
            CQL_BATCH_LOG,
            ROW_SLICES,
        ];
        let members = self.wait_features(&features, timeout)?;
        let deadline = Instant::now() + timeout;
        for i in members {
            while self.redis_cli(i, &["SET", "tally:probe", "agreed"]) != "OK\n" {
                if Instant::now() > deadline {
                    bail!("{} takes no string writes", self.nodes[i].id);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The certificates directory.
    pub fn certs_dir(&self) -> PathBuf {
        self.config.cluster.certs_dir.clone()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let asked = self.keep || std::env::var_os("TALLY_KEEP_CLUSTER").is_some();
        if std::thread::panicking() || asked {
            // Keep the logs and data of a failed test (or of any, when
            // asked) for a post-mortem.
            let kept =
                std::mem::replace(&mut self.dir, tempfile::TempDir::new().expect("a temp dir"))
                    .keep();
            eprintln!("cluster files kept in {}", kept.display());
        }
    }
}
