//! One node as a process: logging, the async runtime, start-up in the safe
//! order, and a clean stop on SIGTERM or Ctrl-C. `tallyd run` is this; the
//! test-only `tallyd-faults run` (package tally-tests) is this plus a
//! fault injected through the `prepare` hook.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use tally_engine::ParkCommit;

use crate::client::accept::{ClientGate, Doors};
use crate::config::Config;
use crate::{Node, client::resp, client::server, config::limits, security::certs};

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TALLY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Worker threads for each of `nodes` nodes run on one host of `cores`
/// cores: one core is left to the clients (a local cluster's clients and
/// benchmarks run beside it), the rest shared out, at least one each.
/// More threads than that only add hand-offs: on 2 cores, a single thread
/// per node served about half again as many redis-benchmark INCRs, with 3
/// nodes and with one.
pub fn threads_per_node(cores: usize, nodes: usize) -> usize {
    (cores.saturating_sub(1) / nodes.max(1)).max(1)
}

/// The async runtime: one thread runs everything when `threads` is 1 (no
/// hand-offs between threads: the fastest for several nodes sharing a few
/// cores), and writes the engine's group commits whenever it is about to
/// park (returned hook); else a work-stealing pool.
pub fn runtime(threads: Option<usize>) -> Result<(tokio::runtime::Runtime, Option<ParkCommit>)> {
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

/// The options of `run`, shared by `tallyd run` and the test-only
/// `tallyd-faults run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The cluster's configuration.
    #[arg(long, default_value = "cluster.toml")]
    pub config: PathBuf,
    /// Which node of the configuration this is.
    #[arg(long)]
    pub node: String,
    /// Async worker threads (default: one per core; 1 runs everything on
    /// one thread).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Join a running cluster: become a member of the ring (the node's
    /// `[[node]]` has `join = true`), syncing its ranges from the members.
    /// A join that stopped half way is finished by starting the node again.
    #[arg(long)]
    pub join: bool,
    /// This node's data directory was lost: come back under a new
    /// incarnation, sync its ranges from the other replicas, and only then
    /// lead and answer reads. Refused when the directory holds data. A
    /// replace that stopped half way resumes at the next start.
    #[arg(long, conflicts_with = "join")]
    pub replace: bool,
}

/// Runs the node `args` name in the foreground until SIGTERM or Ctrl-C.
/// `prepare` sees the node once its commit log is replayed, before any
/// port opens.
pub fn run(args: &RunArgs, prepare: impl FnOnce(&Node)) -> Result<()> {
    run_with(args, |_| {}, prepare)
}

/// [`run`], with `tweak` changing the engine's options last (test seams,
/// for `tallyd-faults`).
pub fn run_with(
    args: &RunArgs,
    tweak: impl FnOnce(&mut tally_engine::Options),
    prepare: impl FnOnce(&Node),
) -> Result<()> {
    let (path, id, threads) = (args.config.as_path(), args.node.as_str(), args.threads);
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
    let horizon =
        tally_world::wall() + std::time::Duration::from_secs(86_400 * certs::RENEW_BEFORE_DAYS);
    for (_, why) in certs::invalid_at(&config.cluster.certs_dir, &[id.to_string()], horizon) {
        tracing::warn!(reason = %why, "this node's certificate is due for renewal: run `tallyd certs` where ca.key is");
    }
    // Before anything opens a file: the engine's reserve is counted on it.
    let files = limits::raise_files_limit().context("raise the open files limit")?;
    limits::no_transparent_huge_pages();
    let (runtime, park_commit) = runtime(threads)?;
    // A `tallyd restore` cut short is finished before anything reads the data.
    if crate::ops::restore::finish(&me.data_dir).context("finish a restore staged before")? {
        tracing::info!(node = %id, "finished a restore staged before the node started");
    }
    let replacing = crate::cluster::topology::replace::prepare(&me.data_dir, args.replace)?;
    runtime.block_on(async {
        // Replay before any port opens: never answer with less than was acknowledged.
        let node = blocking(|| Node::open_with(config, id, park_commit, tweak))?;
        prepare(&node);
        node.start_peers()?;
        // A node that was away may hold an old ring: learn the newest first.
        node.learn_ring().await;
        let listener = tokio::net::TcpListener::bind(me.client)
            .await
            .with_context(|| format!("bind the client address {}", me.client))?;
        let resp = tokio::net::TcpListener::bind(me.resp)
            .await
            .with_context(|| format!("bind the RESP address {}", me.resp))?;
        let metrics = crate::ops::metrics::http::bind(me.metrics).await?;
        let cql = match me.cql {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("bind the CQL address {addr}"))?,
            ),
            None => None,
        };
        let gate = client_gate(&node, files)?;
        let (native_doors, resp_doors, cql_doors) = doors(&node)?;
        let auth = native_doors.auth.clone();
        tokio::spawn(auth.clone().watch_file());
        tokio::spawn(server::serve(listener, node.clone(), gate.clone(), native_doors));
        if let Some(cql) = cql {
            let serve = crate::client::cql::serve::serve(cql, node.clone(), gate.clone(), cql_doors);
            tokio::spawn(serve);
        }
        tokio::spawn(resp::serve(resp, node.clone(), gate.clone(), resp_doors));
        if let Some(metrics) = metrics {
            tokio::spawn(crate::ops::metrics::http::serve(metrics, node.clone(), gate, auth));
        }
        let metrics = me.metrics.map_or_else(|| "none".to_string(), |m| m.to_string());
        let cql = me.cql.map_or_else(|| "none".to_string(), |c| c.to_string());
        tracing::info!(node = %id, build = crate::cluster::features::BUILD, peer = %me.peer, client = %me.client, resp = %me.resp, %cql, %metrics, data = %me.data_dir.display(), "node is serving");
        if replacing {
            tokio::select! {
                replaced = node.replace() => {
                    if let Err(e) = replaced {
                        blocking(|| node.close())?;
                        bail!("{id} could not be replaced: {e}");
                    }
                }
                signal = wait_for_signal() => {
                    signal?;
                    tracing::info!(node = %id, "shutting down during the replace");
                    return blocking(|| node.close());
                }
            }
        }
        if args.join {
            tokio::select! {
                joined = node.join() => {
                    if let Err(e) = joined {
                        blocking(|| node.close())?;
                        bail!("{id} could not join the cluster: {e}");
                    }
                    tracing::info!(node = %id, "joined the ring");
                }
                signal = wait_for_signal() => {
                    signal?;
                    tracing::info!(node = %id, "shutting down during the join");
                    return blocking(|| node.close());
                }
            }
        }
        wait_for_signal().await?;
        tracing::info!(node = %id, "shutting down");
        node.say_leaving().await;
        node.close_peers().await;
        blocking(|| node.close())
    })
}

/// What the native and RESP ports need besides the node: its users (the
/// same for both), and TLS where `[cluster.client_tls]` asks for it.
fn doors(node: &Node) -> Result<(Doors, Doors, Doors)> {
    let config = node.config();
    let auth = Arc::new(
        crate::security::auth::Auth::load(&config.cluster.auth).map_err(anyhow::Error::msg)?,
    );
    auth.announce();
    let me = &config.nodes[node.me()];
    let (native, resp, cql) = crate::security::client_tls::acceptors(
        config.cluster.client_tls.as_ref(),
        &config.cluster.certs_dir,
        &me.id,
    )?;
    tracing::info!(
        native = native.is_some(),
        resp = resp.is_some(),
        cql = cql.is_some(),
        "client TLS"
    );
    let door = |tls| Doors {
        auth: auth.clone(),
        tls,
    };
    Ok((door(native), door(resp), door(cql)))
}

/// The cap on client connections: what the file limit leaves once the
/// node is open (engine, hints, peers, listeners) and the engine's reserve
/// is set aside, at most `clients_max`.
fn client_gate(node: &Node, files: limits::FilesLimit) -> Result<Arc<ClientGate>> {
    let l = &node.config().cluster.limits;
    let open = limits::files_open().context("count the open files")?;
    let cap = limits::clients_max(files.now, open, l.fd_reserve, l.clients_max);
    tracing::info!(
        files_limit = files.now,
        raised_from = files.was,
        files_open = open,
        fd_reserve = l.fd_reserve,
        clients_max = cap,
        "client connections capped"
    );
    if cap < l.clients_max {
        tracing::warn!(
            cap,
            clients_max = l.clients_max,
            "the open files limit leaves room for fewer clients than clients_max (raise `ulimit -Hn`)"
        );
    }
    Ok(ClientGate::new(cap))
}

/// Waits for SIGTERM or Ctrl-C.
pub async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("listen for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::threads_per_node;

    #[test]
    fn one_core_is_left_to_the_clients_and_the_rest_shared_out() {
        assert_eq!(threads_per_node(2, 1), 1);
        assert_eq!(threads_per_node(2, 3), 1);
        assert_eq!(threads_per_node(1, 1), 1);
        assert_eq!(threads_per_node(8, 1), 7);
        assert_eq!(threads_per_node(8, 3), 2);
        assert_eq!(threads_per_node(0, 0), 1);
    }
}
