//! `tallyd`: runs Tally nodes.
//!
//! - `tallyd run --config cluster.toml --node n1`: one node, in the foreground.
//! - `tallyd up --config cluster.toml`: every node of the config on this host
//!   (as child processes), until Ctrl-C.
//! - `tallyd certs --config cluster.toml`: the cluster CA and node certificates.
//! - `tallyd check-log --data DIR [--truncate]`: a stopped node's commit log.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tally_engine::ParkCommit;
use tally_node::config::Config;
use tally_node::{Node, certs, resp, server};

// A node allocates per request and per message (frames, cells, tasks);
// glibc's malloc spent about a fifth of a node's CPU under load.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tallyd",
    version,
    about = "Tally: a distributed counter database"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node of the cluster.
    Run {
        /// The cluster's configuration.
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// Which node of the configuration this is.
        #[arg(long)]
        node: String,
        /// Async worker threads (default: one per core; 1 runs everything
        /// on one thread).
        #[arg(long)]
        threads: Option<usize>,
        /// FAULT INJECTION, for tests of the checkers only: acknowledge every
        /// Nth add this node leads without applying it.
        #[arg(long, hide = true)]
        unsafe_drop_every: Option<u64>,
    },
    /// Run every node of the configuration on this host until Ctrl-C.
    Up {
        /// The cluster's configuration.
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// Async worker threads per node (default: the cores shared out
        /// among the nodes, at least 1).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Create the cluster CA and a certificate for each node (missing ones only).
    Certs {
        /// The cluster's configuration.
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
    },
    /// Check a stopped node's commit log as start-up would; optionally cut
    /// a torn or corrupt tail (the records after it are given up).
    CheckLog {
        /// The node's data directory (its `engine` directory holds the log).
        #[arg(long)]
        data: PathBuf,
        /// Cut every torn or corrupt tail.
        #[arg(long)]
        truncate: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run {
            config,
            node,
            threads,
            unsafe_drop_every,
        } => run(&config, &node, threads, unsafe_drop_every),
        Cmd::Up { config, threads } => up(&config, threads),
        Cmd::Certs { config } => make_certs(&config).map(|_| ()),
        Cmd::CheckLog { data, truncate } => {
            tally_node::check_log::run(&data, truncate, &mut std::io::stdout())
        }
    };
    if let Err(e) = result {
        eprintln!("tallyd: {e:#}");
        std::process::exit(1);
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TALLY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// The async runtime: one thread runs everything when `threads` is 1 (no
/// hand-offs between threads: the fastest for several nodes sharing a few
/// cores), and writes the engine's group commits whenever it is about to
/// park (returned hook); else a work-stealing pool.
fn runtime(threads: Option<usize>) -> Result<(tokio::runtime::Runtime, Option<ParkCommit>)> {
    let mut hook = None;
    let mut b = match threads {
        Some(n) if n <= 1 => {
            let mut b = tokio::runtime::Builder::new_current_thread();
            let on_park = ParkCommit::new();
            hook = Some(on_park.clone());
            b.on_thread_park(move || on_park.on_park());
            b
        }
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = b.enable_all().build().context("start the async runtime")?;
    Ok((runtime, hook))
}

/// Runs blocking work (replay, close) from inside the runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::current().runtime_flavor() {
        // Neither needs another task to make progress.
        tokio::runtime::RuntimeFlavor::CurrentThread => f(),
        _ => tokio::task::block_in_place(f),
    }
}

fn make_certs(path: &Path) -> Result<Config> {
    let config = Config::load(path)?;
    let dir = &config.cluster.certs_dir;
    let written = certs::ensure(dir, &config.cluster.name, &config.node_ids())?;
    if written.is_empty() {
        println!("certificates in {} are complete", dir.display());
    } else {
        println!("wrote {} files to {}", written.len(), dir.display());
    }
    Ok(config)
}

fn run(path: &Path, id: &str, threads: Option<usize>, drop_every: Option<u64>) -> Result<()> {
    init_logging();
    let config = Config::load(path)?;
    let (_, me) = config.node(id)?;
    let me = me.clone();
    if !certs::complete(&config.cluster.certs_dir, &[id.to_string()]) {
        bail!(
            "no TLS certificates for node {id} in {}: run `tallyd certs --config {}` (or `tallyd up`)",
            config.cluster.certs_dir.display(),
            path.display()
        );
    }
    let (runtime, park_commit) = runtime(threads)?;
    runtime.block_on(async {
        // Replay before any port opens: never answer with less than was acknowledged.
        let node = blocking(|| Node::open(config, id, park_commit))?;
        if let Some(n) = drop_every {
            tracing::warn!(every = n, "FAULT INJECTION: acknowledging adds without applying them");
            node.inject_drop_every(n);
        }
        node.start_peers()?;
        let listener = tokio::net::TcpListener::bind(me.client)
            .await
            .with_context(|| format!("bind the client address {}", me.client))?;
        tokio::spawn(server::serve(listener, node.clone()));
        let resp = tokio::net::TcpListener::bind(me.resp)
            .await
            .with_context(|| format!("bind the RESP address {}", me.resp))?;
        tokio::spawn(resp::serve(resp, node.clone()));
        tracing::info!(node = %id, peer = %me.peer, client = %me.client, resp = %me.resp, data = %me.data_dir.display(), "node is serving");
        wait_for_signal().await?;
        tracing::info!(node = %id, "shutting down");
        blocking(|| node.close())
    })
}

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("listen for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

fn up(path: &Path, threads: Option<usize>) -> Result<()> {
    let config = make_certs(path)?;
    let exe = std::env::current_exe().context("find the tallyd executable")?;
    // The nodes share this host's cores; more threads than cores only adds
    // hand-offs between them (a single thread per node on 2 cores and 3
    // nodes served about half again as many redis-benchmark INCRs).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = threads.unwrap_or((cores / config.nodes.len()).max(1));
    let mut children: Vec<(String, Child)> = Vec::new();
    for n in &config.nodes {
        let mut child = Command::new(&exe)
            .args(["run", "--config"])
            .arg(path)
            .args(["--node", &n.id, "--threads", &threads.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("start node {}", n.id))?;
        if let Some(err) = child.stderr.take() {
            let id = n.id.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    eprintln!("[{id}] {line}");
                }
            });
        }
        children.push((n.id.clone(), child));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in &config.nodes {
        while std::net::TcpStream::connect_timeout(&n.client, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                stop(&mut children);
                bail!("node {} did not open {} within 60 s", n.id, n.client);
            }
            if let Some((id, status)) = exited(&mut children) {
                stop(&mut children);
                bail!("node {id} exited during start-up ({status}); see its log above");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let c = &config.cluster;
    println!(
        "cluster {:?} is up: {} nodes, replication factor {}, sync {:?}, {threads} thread(s) per node",
        c.name,
        config.nodes.len(),
        c.replication_factor,
        c.sync
    );
    for n in &config.nodes {
        println!(
            "  {:<4} client {}  resp {}  peer {} (QUIC)  data {}",
            n.id,
            n.client,
            n.resp,
            n.peer,
            n.data_dir.display()
        );
    }
    let (rt, _no_engine) = runtime(Some(1))?;
    if let Err(e) = rt.block_on(smoke_check(&config)) {
        eprintln!("tallyd: smoke check failed: {e:#}");
    }
    println!("connect a client (tally_net::Client) to any client address; Ctrl-C stops every node");
    rt.block_on(async {
        let signal = wait_for_signal();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                r = &mut signal => { r?; break; }
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if let Some((id, status)) = exited(&mut children) {
                        eprintln!("tallyd: node {id} exited ({status})");
                        children.retain(|(i, _)| *i != id);
                    }
                }
            }
        }
        anyhow::Ok(())
    })?;
    println!("stopping {} nodes", children.len());
    stop(&mut children);
    Ok(())
}

/// Adds 1 through the first node and reads it back at ALL through the last,
/// once every node sees the others: proof the cluster works end to end.
async fn smoke_check(config: &Config) -> Result<()> {
    use tally_net::{Client, Consistency};
    let first = config.nodes.first().context("no nodes")?;
    let last = config.nodes.last().context("no nodes")?;
    let a = Client::connect(first.client).await?;
    let b = Client::connect(last.client).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if a.status().await?.nodes.iter().all(|n| n.up) {
            break;
        }
        if Instant::now() > deadline {
            bail!("peers did not see each other within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = a.add(b"tally:up", b"", 1, Consistency::All).await?;
    let read = b.get(b"tally:up", b"", Consistency::All).await?;
    println!(
        "smoke check: INCR tally:up through {} gave {seen}; read through {} at ALL gives {read}",
        first.id, last.id
    );
    Ok(())
}

fn exited(children: &mut [(String, Child)]) -> Option<(String, String)> {
    children.iter_mut().find_map(|(id, c)| match c.try_wait() {
        Ok(Some(status)) => Some((id.clone(), status.to_string())),
        _ => None,
    })
}

/// SIGTERM to every child, then SIGKILL to any still running after 20 s.
fn stop(children: &mut Vec<(String, Child)>) {
    for (_, c) in children.iter() {
        let pid = libc::pid_t::try_from(c.id()).expect("pids fit in pid_t");
        // SAFETY: kill(2) takes plain integers; the pid is a child we spawned and have not reaped.
        #[allow(
            unsafe_code,
            reason = "kill(2) has no safe std wrapper; pid is our child's"
        )]
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !children.is_empty() && Instant::now() < deadline {
        children.retain_mut(|(_, c)| !matches!(c.try_wait(), Ok(Some(_))));
        std::thread::sleep(Duration::from_millis(50));
    }
    for (id, c) in children.iter_mut() {
        eprintln!("tallyd: node {id} did not stop in 20 s; killing it");
        let _ = c.kill();
        let _ = c.wait();
    }
}
