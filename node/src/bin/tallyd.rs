//! `tallyd`: runs Tally nodes.
//!
//! - `tallyd run --config cluster.toml --node n1`: one node, in the foreground.
//! - `tallyd up --config cluster.toml`: every node of the config on this host
//!   (as child processes), until Ctrl-C.
//! - `tallyd certs --config cluster.toml`: the cluster CA and node certificates
//!   (missing ones, and renewals of those expiring within 30 days). Only this
//!   needs the CA's key; `run` and `up` work without it.
//! - `tallyd check-log --data DIR [--truncate]`: a stopped node's commit log.
//! - `tallyd restore --config cluster.toml --node n1 --tag T`: a stopped node
//!   put back to its snapshot `T`, data and ring (`tally_node::ops::restore`).

#![allow(
    clippy::disallowed_methods,
    reason = "a process of its own, on the real clock"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tally_node::config::Config;
use tally_node::{security::certs, security::client_certs};

#[path = "tallyd/passwd.rs"]
mod passwd;
use tally_node::ops::daemon::{self, RunArgs, runtime, wait_for_signal};

// A node allocates per request and per message (frames, cells, tasks);
// glibc's malloc spent about a fifth of a node's CPU under load.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tallyd",
    version = tally_node::BUILD,
    about = "Tally: a distributed counter database"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node of the cluster.
    Run(RunArgs),
    /// Run every node of the configuration on this host until Ctrl-C.
    Up {
        /// The cluster's configuration.
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// Async worker threads per node (default: the cores but one
        /// shared out among the nodes, at least 1).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Create the cluster CA, a certificate for each node and for its
    /// client ports (missing or due ones only); with --client, a client
    /// certificate.
    Certs {
        /// The cluster's configuration.
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// Issue a client certificate of this name (`clients/NAME.pem`).
        #[arg(long)]
        client: Option<String>,
    },
    /// Add a user or change its password and role, in the users file; the
    /// password is read from stdin (one line). Nodes take the change up at
    /// their next login.
    Passwd(passwd::Args),
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
    /// Put a stopped node back to one of its snapshots (`tally snapshot
    /// --tag T`): its data and the ring it was taken under, so that data
    /// of databases flushed since reads back. Restore every node from the
    /// same tag to put the cluster back; a node restored alone learns the
    /// newer ring from the others (start it with `--replace`).
    Restore {
        /// The cluster's configuration.
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// The node to restore (it must be stopped).
        #[arg(long)]
        node: String,
        /// The snapshot's tag.
        #[arg(long)]
        tag: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(args) => daemon::run(&args, |_| {}),
        Cmd::Up { config, threads } => up(&config, threads),
        Cmd::Certs { config, client } => certs_command(&config, client.as_deref()),
        Cmd::Passwd(args) => passwd::run(&args),
        Cmd::CheckLog { data, truncate } => {
            tally_node::ops::check_log::run(&data, truncate, &mut std::io::stdout())
        }
        Cmd::Restore { config, node, tag } => restore(&config, &node, &tag),
    };
    if let Err(e) = result {
        eprintln!("tallyd: {e:#}");
        std::process::exit(1);
    }
}

fn restore(config: &Path, node: &str, tag: &str) -> Result<()> {
    let r = tally_node::ops::restore::run(config, node, tag)?;
    let had = r
        .was_version
        .map_or_else(|| "none".to_string(), |v| v.to_string());
    println!(
        "{node}: restored snapshot {tag}: {} files, {} bytes; ring version {} (the node had {had}), \
         database generations {:?}",
        r.files, r.bytes, r.ring_version, r.generations
    );
    Ok(())
}

fn certs_command(path: &Path, client: Option<&str>) -> Result<()> {
    let config = make_certs(path)?;
    if let Some(name) = client {
        let (cert, key) =
            client_certs::issue_client(&config.cluster.certs_dir, &config.cluster.name, name)?;
        println!(
            "client certificate {} and key {}",
            cert.display(),
            key.display()
        );
    }
    Ok(())
}

fn make_certs(path: &Path) -> Result<Config> {
    let config = Config::load(path)?;
    let dir = &config.cluster.certs_dir;
    let mut written = certs::ensure(dir, &config.cluster.name, &config.node_ids())?;
    let c = &config.cluster;
    match client_certs::ensure_listeners(dir, &c.name, &config.nodes, renewal_horizon()) {
        Ok(files) => written.extend(files),
        Err(e) if c.client_tls.is_some() => return Err(e),
        Err(e) => eprintln!("tallyd: client-port certificates (for client TLS) not issued: {e:#}"),
    }
    if written.is_empty() {
        println!("certificates in {} are complete", dir.display());
    } else {
        println!("wrote {} files to {}", written.len(), dir.display());
    }
    // Left as they are only when the CA key is away.
    for (id, why) in certs::invalid_at(dir, &config.node_ids(), renewal_horizon()) {
        eprintln!(
            "tallyd: the certificate of node {id} is due for renewal ({why}): \
             put ca.key back in {} and run `tallyd certs`",
            dir.display()
        );
    }
    Ok(config)
}

/// The time by which every node certificate must still be valid.
fn renewal_horizon() -> std::time::SystemTime {
    std::time::SystemTime::now() + Duration::from_secs(86_400 * certs::RENEW_BEFORE_DAYS)
}

fn up(path: &Path, threads: Option<usize>) -> Result<()> {
    let config = make_certs(path)?;
    let exe = std::env::current_exe().context("find the tallyd executable")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = threads.unwrap_or(daemon::threads_per_node(cores, config.nodes.len()));
    let mut children: Vec<(String, Child)> = Vec::new();
    for n in config.nodes.iter().filter(|n| n.join) {
        println!(
            "  {} has join = true: not started; add it with `tallyd run --config {} --node {} --join`",
            n.id,
            path.display(),
            n.id
        );
    }
    for n in config.nodes.iter().filter(|n| !n.join) {
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
    for n in config.nodes.iter().filter(|n| !n.join) {
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
        let metrics = n
            .metrics
            .map(|m| format!("  metrics http://{m}/metrics"))
            .unwrap_or_default();
        let cql = n.cql.map(|a| format!("  cql {a}")).unwrap_or_default();
        println!(
            "  {:<4} client {}  resp {}{cql}  peer {} (QUIC){metrics}  data {}",
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
    let members: Vec<_> = config.nodes.iter().filter(|n| !n.join).collect();
    let first = members.first().context("no nodes")?;
    let last = members.last().context("no nodes")?;
    let Some(security) = passwd::smoke_security(config)? else {
        println!(
            "smoke check skipped: the cluster wants a login (set TALLY_USER and TALLY_PASSWORD) or a client certificate"
        );
        return Ok(());
    };
    let mut clients = Vec::with_capacity(members.len());
    for n in &members {
        clients.push(Client::connect_secure(n.client, Duration::from_secs(5), &security).await?);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    // Each node's own view: one that started before a peer listened
    // takes up to a dial timeout to see it.
    'wait: loop {
        for c in &clients {
            let status = c.status().await?;
            let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
            if !status
                .nodes
                .iter()
                .all(|n| n.up || !ids.contains(&n.id.as_str()))
            {
                if Instant::now() > deadline {
                    bail!("peers did not see each other within 10 s");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'wait;
            }
        }
        break;
    }
    let (a, b) = (clients.first(), clients.last());
    let (a, b) = a.zip(b).context("no nodes")?;
    let seen = a.add(b"tally:up", b"", 1, Consistency::All).await?;
    let read = b.get(b"tally:up", b"", Consistency::All).await?;
    println!(
        "smoke check: INCR tally:up through {} gave {seen}; read through {} at ALL gives {read}",
        first.id, last.id
    );
    wait_agreement(&clients).await
}

/// Waits until every node takes agreed changes (strings, locks, the CQL
/// schema): each enables them once it has heard every member has, a
/// heartbeat or two after they all came up. A probe string, gone in a
/// minute, is set through each.
async fn wait_agreement(clients: &[tally_net::Client]) -> Result<()> {
    use tally_net::wire::{Deadline, StringCondition};
    let deadline = Instant::now() + Duration::from_secs(10);
    for c in clients {
        let probe = || {
            let when = Deadline::After(60_000);
            c.set_string(
                b"tally:up:agreed",
                Some(b"yes"),
                StringCondition::Always,
                when,
            )
        };
        while let Err(e) = probe().await {
            if Instant::now() > deadline {
                bail!("agreement was not enabled within 10 s: {e}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    println!("agreement: every node takes agreed changes (strings, locks, the CQL schema)");
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
