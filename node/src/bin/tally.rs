//! `tally`: the command-line client.
//!
//! By default it reads `cluster.toml`, learns the ring from the first node
//! that answers and sends each request to a replica of its partition.
//! `--node` or `--addr` pin one coordinator instead. Output is for people;
//! `--json` prints one JSON object for scripts. An error is one line on
//! stderr and exit status 1. A failed add or reset also says what it left
//! behind, from the error's type and never its wording: `(not applied)`, or
//! `(outcome unknown: ...)` and exit status 3.
//!
//! An add carries an operation id (`--id CLIENT:SEQ`, or a random client id
//! and seq 1) and is retried with it until acknowledged or `--deadline`
//! passes; its id is printed with an unknown outcome, so that running it
//! again with `--id` finds out without counting it twice.

#![allow(
    clippy::disallowed_methods,
    reason = "a process of its own, on the real clock"
)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde_json::json;
use tally_net::once::OpId;
use tally_net::retry::{self, RetryPolicy};
use tally_net::wire::{ClusterStatus, NodeState, NodeStats, NodeStatus, When};
use tally_net::{Client, ClientError, ClusterClient, ClusterOptions, Consistency, Outcome};
use tally_node::config::Config;

#[path = "tally/expiry.rs"]
mod expiry;
#[path = "tally/repair.rs"]
mod repair;
#[path = "tally/ring.rs"]
mod ring;
#[path = "tally/scan.rs"]
mod scan;
#[path = "tally/secure.rs"]
mod secure;
#[path = "tally/snapshot.rs"]
mod snapshot;
#[path = "tally/strings.rs"]
mod strings;
#[path = "tally/versions.rs"]
mod versions;

#[derive(Parser)]
#[command(name = "tally", version = tally_node::BUILD, about = "Talk to a Tally cluster")]
struct Cli {
    /// The cluster's configuration (for node addresses).
    #[arg(long, default_value = "cluster.toml", global = true)]
    config: PathBuf,
    /// Send every request to this node of the config.
    #[arg(long, global = true, conflicts_with = "addr")]
    node: Option<String>,
    /// Send every request to this client address (no config needed).
    #[arg(long, global = true)]
    addr: Option<SocketAddr>,
    /// Consistency level: one, quorum, all, serial (quorum whose reads
    /// answer once a majority holds what they answer).
    #[arg(long, default_value = "quorum", global = true)]
    cl: Consistency,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
    /// Deadline of a request, in milliseconds.
    #[arg(long, default_value_t = 5000, global = true)]
    timeout_ms: u64,
    #[command(flatten)]
    security: tally_node::security::client_security::Flags,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Add DELTA (default 1, may be negative) to a counter; prints the new value.
    Add {
        /// The counter (its partition).
        key: String,
        /// The amount.
        #[arg(default_value_t = 1, allow_negative_numbers = true)]
        delta: i64,
        /// Column within the partition.
        #[arg(long, default_value = "")]
        column: String,
        /// The add's operation id, CLIENT:SEQ (default: a random client
        /// id, seq 1): applied at most once, however often it is sent.
        #[arg(long)]
        id: Option<String>,
        /// Seconds to keep retrying an add whose outcome is unknown.
        #[arg(long, default_value_t = 30)]
        deadline: u64,
        /// Give the counter a deadline this many seconds away, if it has
        /// none (a rate-limit window: INCR, then EXPIRE NX).
        #[arg(long)]
        ttl: Option<u64>,
    },
    /// Set a counter to VALUE (it starts again from there); a VALUE that
    /// is not an integer, or any with --string, is stored as a string,
    /// agreed by the key's replicas.
    Set {
        /// The counter (its partition).
        key: String,
        /// The value.
        #[arg(allow_negative_numbers = true)]
        value: String,
        /// Column within the partition (counters only).
        #[arg(long, default_value = "")]
        column: String,
        /// Seconds until it expires (default: never).
        #[arg(long)]
        ttl: Option<u64>,
        /// Store VALUE as a string even if it is an integer.
        #[arg(long)]
        string: bool,
        /// Store VALUE as a string, only if the key holds none (exit
        /// status 4 if it does).
        #[arg(long)]
        nx: bool,
    },
    /// Set KEY's string to NEW if it is EXPECTED, keeping its deadline
    /// (exit status 4 if it is not).
    Cas {
        /// The key.
        key: String,
        /// The string it must hold.
        expected: String,
        /// The string it gets.
        new: String,
    },
    /// Leases: a name only one owner holds at a time, until its --ttl
    /// ends (exit status 4 when not taken, renewed or released).
    #[command(subcommand)]
    Lease(strings::LeaseCmd),
    /// Give a counter a deadline SECONDS from now; after it, it reads as
    /// absent and the next add starts it from 0.
    Expire {
        /// The counter (its partition).
        key: String,
        /// Seconds from now.
        seconds: u64,
        /// Column within the partition.
        #[arg(long, default_value = "")]
        column: String,
    },
    /// Remove a counter's deadline.
    Persist {
        /// The counter (its partition).
        key: String,
        /// Column within the partition.
        #[arg(long, default_value = "")]
        column: String,
    },
    /// Print the seconds left before a counter's deadline (-1: none,
    /// -2: no such counter), as Redis' TTL.
    Ttl {
        /// The counter (its partition).
        key: String,
        /// Column within the partition.
        #[arg(long, default_value = "")]
        column: String,
    },
    /// Print a counter's value, or the key's string if it holds one.
    Get {
        /// The counter (its partition).
        key: String,
        /// Column within the partition.
        #[arg(long, default_value = "")]
        column: String,
    },
    /// Print every column of a partition.
    Row {
        /// The partition; with --table, the row's partition key values as
        /// CQL writes them (`0`, `'alice',5`).
        partition: String,
        /// A CQL counter table (`keyspace.table`) whose row to print: its
        /// counters by clustering values and name (`'x':hits`).
        #[arg(long)]
        table: Option<String>,
    },
    /// Reset a counter to zero.
    Reset {
        /// The counter (its partition).
        key: String,
        /// Column within the partition.
        #[arg(long, default_value = "")]
        column: String,
    },
    /// Every node: up or down (UN, DN) and whether it takes writes, address,
    /// share of the ring, counters, bytes on disk, hints, counter id, and
    /// which nodes need a repair.
    Status,
    /// Compare the replicas of a node's token ranges (every node's in turn,
    /// or the one `--node` names) and merge the cells that differ; prints
    /// what moved. Every replica of the ranges must be up.
    Repair {
        /// Only the tokens in START:END (`(START, END]`, signed 64-bit
        /// Murmur3 tokens, wrapping past the largest when START >= END);
        /// a node's "needs repair" stays unless they hold all its ranges.
        #[arg(long, value_parser = repair::parse_range, allow_hyphen_values = true)]
        range: Option<tally_net::wire::WireRange>,
    },
    /// Take the node `--node` names out of the ring: its ranges stream to
    /// their next owners, then it leaves (it may be stopped after).
    Decommission,
    /// Take a dead node out of the ring: the others re-replicate its ranges
    /// among themselves.
    Removenode {
        /// The dead node's id.
        node: String,
    },
    /// After the ring changed: drop the data a node no longer replicates
    /// (every node in turn, or the one `--node` names), but its own shards.
    Cleanup,
    /// Fold the shards of retired incarnations (nodes that left, wiped or
    /// uncleanly restarted) into the counters' bases, cluster-wide, after a
    /// full repair: every cell is then at most a replication factor's
    /// worth of shards wide. Prints each node's widest cell.
    Fold,
    /// Snapshot every node (or the one `--node` names): flush, and
    /// hard-link its SSTables into `<data_dir>/snapshots/<tag>`; or list
    /// or clear them.
    Snapshot {
        /// The snapshot's name (default: now, in ms since the Unix epoch);
        /// with --clear, the one to delete.
        #[arg(long)]
        tag: Option<String>,
        /// List the snapshots.
        #[arg(long)]
        list: bool,
        /// Delete the snapshot --tag names, or every one.
        #[arg(long)]
        clear: bool,
    },
    /// Unique counters: each member counted once.
    #[command(subcommand)]
    Unique(UniqueCmd),
    /// List the live keys (partitions) of the cluster, in key order, one a
    /// line with what each holds: counter, row (columns) or unique.
    Scan {
        /// Only partitions that begin with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// At most this many keys.
        #[arg(long)]
        limit: Option<u64>,
    },
}

#[derive(Subcommand)]
enum UniqueCmd {
    /// Add members (each at most 256 bytes); prints how many were new.
    Add {
        /// The unique counter.
        key: String,
        /// The members.
        #[arg(required = true)]
        members: Vec<String>,
    },
    /// Print the number of distinct members.
    Count {
        /// The unique counter.
        key: String,
    },
}

/// Exit status of a failed command.
const EXIT_FAILED: i32 = 1;
/// Exit status of an add or reset that may or may not have been applied
/// (clap takes 2 for usage errors).
const EXIT_OUTCOME_UNKNOWN: i32 = 3;
/// Exit status of a change whose condition did not hold (`tally cas`,
/// `tally lease`, `tally set --nx`): nothing was written.
const EXIT_CONDITION_FAILED: i32 = 4;

/// Why a command failed, and for an add or reset, what it left behind.
#[derive(Debug)]
struct Failure {
    error: anyhow::Error,
    /// `None` for a command that writes nothing.
    write: Option<Outcome>,
    /// A change whose condition did not hold (a lease held by another).
    condition: bool,
}

impl Failure {
    /// A failed add or reset, as its error classifies it.
    fn write(error: ClientError) -> Failure {
        Failure {
            write: Some(error.outcome()),
            error: error.into(),
            condition: false,
        }
    }

    /// A failure of a command that writes nothing.
    fn other(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            error: error.into(),
            write: None,
            condition: false,
        }
    }

    /// A change not made because its condition did not hold.
    fn condition(error: anyhow::Error) -> Failure {
        Failure {
            error,
            write: Some(Outcome::NotApplied),
            condition: true,
        }
    }

    /// The line for stderr and the exit status.
    fn report(&self) -> (String, i32) {
        let error = &self.error;
        if self.condition {
            return (format!("tally: {error:#}"), EXIT_CONDITION_FAILED);
        }
        match self.write {
            None => (format!("tally: {error:#}"), EXIT_FAILED),
            Some(Outcome::NotApplied) => (format!("tally: {error:#} (not applied)"), EXIT_FAILED),
            Some(Outcome::Unknown) => (
                format!("tally: {error:#} (outcome unknown: it may or may not have been applied)"),
                EXIT_OUTCOME_UNKNOWN,
            ),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Failure {
        Failure::other(error)
    }
}

/// Where requests go.
enum Target {
    One(Client),
    Ring(Box<ClusterClient>),
}

fn main() {
    die_quietly_on_a_closed_pipe();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tally: start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(failure) = rt.block_on(run(&cli)) {
        let (line, status) = failure.report();
        eprintln!("{line}");
        std::process::exit(status);
    }
}

/// `tally repair | head -3`: once the reader closes the pipe, the next
/// write ends the process as it ends `cat` or `grep` (Rust's runtime
/// ignores SIGPIPE, and `println!` would panic on the failed write).
fn die_quietly_on_a_closed_pipe() {
    #[expect(unsafe_code, reason = "signal(2) has no safe std wrapper")]
    // SAFETY: called first in main, before any thread exists; SIG_DFL is
    // no handler, so nothing runs in a signal context.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

async fn connect(cli: &Cli) -> Result<Target> {
    let timeout = Duration::from_millis(cli.timeout_ms);
    if let Some(addr) = cli.addr {
        return Ok(Target::One(crate::secure::dial(addr, timeout).await?));
    }
    let config = Config::load(&cli.config)?;
    if let Some(id) = &cli.node {
        let (_, n) = config.node(id)?;
        return Ok(Target::One(crate::secure::dial(n.client, timeout).await?));
    }
    let seeds: Vec<SocketAddr> = config.nodes.iter().map(|n| n.client).collect();
    let deadline = match &cli.command {
        Cmd::Add { deadline, .. } => Duration::from_secs(*deadline),
        _ => RetryPolicy::default().deadline,
    };
    let opts = ClusterOptions {
        connections_per_node: 1,
        timeout,
        exactly_once: true,
        retry: RetryPolicy {
            deadline,
            ..RetryPolicy::default()
        },
        security: secure::security(),
    };
    let client = ClusterClient::connect(&seeds, &opts)
        .await
        .with_context(|| format!("connect to the cluster of {}", cli.config.display()))?;
    Ok(Target::Ring(Box::new(client)))
}

async fn run(cli: &Cli) -> Result<(), Failure> {
    let config = Config::load(&cli.config).ok();
    secure::init(&cli.security, config.as_ref()).map_err(Failure::other)?;
    match &cli.command {
        Cmd::Repair { range } => return repair::run(cli, *range).await.map_err(Failure::other),
        Cmd::Decommission => return ring::decommission(cli).await.map_err(Failure::other),
        Cmd::Removenode { node } => {
            return ring::removenode(cli, node).await.map_err(Failure::other);
        }
        Cmd::Cleanup => return ring::cleanup(cli).await.map_err(Failure::other),
        Cmd::Fold => return ring::fold(cli).await.map_err(Failure::other),
        Cmd::Snapshot { tag, list, clear } => {
            let op = snapshot::op(tag.clone(), *list, *clear).map_err(Failure::other)?;
            return snapshot::run(cli, op).await.map_err(Failure::other);
        }
        _ => {}
    }
    let writes = matches!(
        cli.command,
        Cmd::Add { .. }
            | Cmd::Reset { .. }
            | Cmd::Set { .. }
            | Cmd::Cas { .. }
            | Cmd::Lease(_)
            | Cmd::Expire { .. }
            | Cmd::Persist { .. }
            | Cmd::Unique(UniqueCmd::Add { .. })
    );
    let target = connect(cli).await.map_err(|error| Failure {
        error,
        // Nothing is sent before there is a connection.
        write: writes.then_some(Outcome::NotApplied),
        condition: false,
    })?;
    let cl = cli.cl;
    match &cli.command {
        Cmd::Add {
            key,
            delta,
            column,
            id,
            deadline,
            ttl,
        } => {
            let id = match id {
                Some(text) => OpId::parse(text).map_err(|e| Failure {
                    error: anyhow::anyhow!("--id: {}", e.message),
                    write: Some(Outcome::NotApplied),
                    condition: false,
                })?,
                None => OpId::random_first(),
            };
            let (k, c) = (key.as_bytes(), column.as_bytes());
            let v = match &target {
                Target::One(one) => add_once_to(one, k, c, *delta, &id, cl, *deadline).await,
                Target::Ring(ring) => ring.add_once(k, c, *delta, &id, cl).await,
            }
            .map_err(|e| {
                let unknown = e.outcome() == Outcome::Unknown;
                let mut f = Failure::write(e);
                if unknown {
                    f.error = f.error.context(format!(
                        "add with id {id}: run it again with --id {id} to find out (it is applied at most once)"
                    ));
                }
                f
            })?;
            if let Some(secs) = ttl {
                let change = expiry::expire(Some(*secs), When::NoDeadline);
                expiry::change(&target, k, c, change, cl)
                    .await
                    .map_err(Failure::write)?;
            }
            print_value(cli, key, column, v);
        }
        Cmd::Set {
            key,
            value,
            column,
            ttl,
            string,
            nx,
        } => return set(cli, &target, (key, column), value, (*ttl, *string, *nx)).await,
        Cmd::Expire {
            key,
            seconds,
            column,
        } => {
            let change = expiry::expire(Some(*seconds), When::Always);
            let done = expiry::change(&target, key.as_bytes(), column.as_bytes(), change, cl)
                .await
                .map_err(Failure::write)?;
            expiry::print_changed(cli.json, key, column, "expire", &done);
        }
        Cmd::Persist { key, column } => {
            let change = expiry::expire(None, When::Always);
            let done = expiry::change(&target, key.as_bytes(), column.as_bytes(), change, cl)
                .await
                .map_err(Failure::write)?;
            expiry::print_changed(cli.json, key, column, "persist", &done);
        }
        Cmd::Ttl { key, column } => {
            let left = expiry::ttl(&target, key.as_bytes(), column.as_bytes(), cl)
                .await
                .map_err(Failure::other)?;
            if cli.json {
                println!("{}", json!({ "key": key, "column": column, "ttl": left }));
            } else {
                println!("{left}");
            }
        }
        Cmd::Unique(cmd) => unique(cli, &target, cmd).await?,
        Cmd::Get { key, column } => return get(cli, &target, key, column).await,
        Cmd::Cas { key, expected, new } => {
            return strings::cas(cli.json, &target, key, (expected, new)).await;
        }
        Cmd::Lease(cmd) => return strings::lease(cli.json, &target, cmd).await,
        Cmd::Row { partition, table } => {
            let stored = match table {
                Some(table) => [b"\xffcql:", table.as_bytes(), b":", partition.as_bytes()].concat(),
                None => partition.as_bytes().to_vec(),
            };
            let row = match &target {
                Target::One(c) => c.get_row(&stored, cl).await,
                Target::Ring(c) => c.get_row(&stored, cl).await,
            }
            .map_err(Failure::other)?;
            if cli.json {
                let cols: serde_json::Map<String, serde_json::Value> = row
                    .iter()
                    .map(|(c, v)| (String::from_utf8_lossy(c).into_owned(), json!(v)))
                    .collect();
                println!("{}", json!({ "partition": partition, "columns": cols }));
            } else if row.is_empty() {
                println!("(no columns)");
            } else {
                let width = row.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
                for (c, v) in &row {
                    println!("{:<width$}  {v}", String::from_utf8_lossy(c));
                }
            }
        }
        Cmd::Reset { key, column } => {
            match &target {
                Target::One(c) => c.reset(key.as_bytes(), column.as_bytes(), cl).await,
                Target::Ring(c) => c.reset(key.as_bytes(), column.as_bytes(), cl).await,
            }
            .map_err(Failure::write)?;
            if cli.json {
                println!("{}", json!({ "key": key, "column": column, "reset": true }));
            } else {
                println!("OK");
            }
        }
        Cmd::Scan { prefix, limit } => {
            scan::run(&target, prefix.as_bytes(), *limit, cl, cli.json)
                .await
                .map_err(Failure::other)?;
        }
        Cmd::Status => {
            let status = match &target {
                Target::One(c) => c.status().await.map_err(Failure::other)?,
                Target::Ring(c) => c.status().clone(),
            };
            print_status(cli, &status).await?;
        }
        // Repaired node by node above, before any connection.
        Cmd::Repair { .. }
        | Cmd::Decommission
        | Cmd::Removenode { .. }
        | Cmd::Cleanup
        | Cmd::Fold
        | Cmd::Snapshot { .. } => {}
    }
    Ok(())
}

/// An add with an id through one pinned node, retried there until the
/// deadline (see `tally_net::retry`).
async fn add_once_to(
    client: &Client,
    key: &[u8],
    column: &[u8],
    delta: i64,
    id: &OpId,
    cl: Consistency,
    deadline_s: u64,
) -> Result<i64, ClientError> {
    let policy = RetryPolicy {
        deadline: Duration::from_secs(deadline_s),
        ..RetryPolicy::default()
    };
    retry::until_known(&policy, |_| client.add_once(key, column, delta, id, cl)).await
}

/// `tally unique ...`.
async fn unique(cli: &Cli, target: &Target, cmd: &UniqueCmd) -> Result<(), Failure> {
    let cl = cli.cl;
    match cmd {
        UniqueCmd::Add { key, members } => {
            let refs: Vec<&[u8]> = members.iter().map(String::as_bytes).collect();
            let new = match target {
                Target::One(c) => c.unique_add(key.as_bytes(), &refs, cl).await,
                Target::Ring(c) => c.unique_add(key.as_bytes(), &refs, cl).await,
            }
            .map_err(Failure::write)?;
            if cli.json {
                println!("{}", json!({ "key": key, "new": new }));
            } else {
                println!("{new}");
            }
        }
        UniqueCmd::Count { key } => {
            let n = match target {
                Target::One(c) => c.unique_count(key.as_bytes(), cl).await,
                Target::Ring(c) => c.unique_count(key.as_bytes(), cl).await,
            }
            .map_err(Failure::other)?;
            if cli.json {
                println!("{}", json!({ "key": key, "count": n }));
            } else {
                println!("{n}");
            }
        }
    }
    Ok(())
}

/// `tally set`: a counter's value, or a string (a value that is not an
/// integer, or any with `--string` or `--nx`).
async fn set(
    cli: &Cli,
    target: &Target,
    (key, column): (&str, &str),
    value: &str,
    (ttl, string, nx): (Option<u64>, bool, bool),
) -> Result<(), Failure> {
    let Some(value) = value.parse().ok().filter(|_| !string && !nx) else {
        if !column.is_empty() {
            return Err(Failure {
                error: anyhow::anyhow!("--column: strings are values of keys, not of columns"),
                write: Some(Outcome::NotApplied),
                condition: false,
            });
        }
        return strings::set(cli.json, target, key, value, (ttl, nx)).await;
    };
    let change = expiry::set(value, ttl);
    let done = expiry::change(target, key.as_bytes(), column.as_bytes(), change, cli.cl)
        .await
        .map_err(Failure::write)?;
    expiry::print_changed(cli.json, key, column, "set", &done);
    Ok(())
}

/// `tally get`: the key's string if it holds one, else its counter (a
/// string read that fails falls back to the counter's, which a lower
/// `--cl` may still answer).
async fn get(cli: &Cli, target: &Target, key: &str, column: &str) -> Result<(), Failure> {
    if column.is_empty()
        && speaks_strings(target)
        && let Ok(Some(s)) = strings::get(target, key).await
    {
        strings::print_string(cli.json, key, &s);
        return Ok(());
    }
    let v = match target {
        Target::One(c) => c.get(key.as_bytes(), column.as_bytes(), cli.cl).await,
        Target::Ring(c) => c.get(key.as_bytes(), column.as_bytes(), cli.cl).await,
    }
    .map_err(Failure::other)?;
    print_value(cli, key, column, v);
    Ok(())
}

/// Whether the node answering speaks client protocol 3 (strings).
fn speaks_strings(target: &Target) -> bool {
    match target {
        Target::One(c) => c.protocol() >= 3,
        Target::Ring(c) => c.any().is_ok_and(|c| c.protocol() >= 3),
    }
}

fn print_value(cli: &Cli, key: &str, column: &str, v: i64) {
    if cli.json {
        println!("{}", json!({ "key": key, "column": column, "value": v }));
    } else {
        println!("{v}");
    }
}

/// One node's row of `tally status`.
struct Row<'a> {
    node: &'a NodeStatus,
    /// Its own numbers, if it answered.
    stats: Option<NodeStats>,
    /// Why it takes no writes: its own word if it answered, else the seed's.
    not_writable: Option<String>,
    /// Its place in the ring, as the seed knows it.
    ring: NodeState,
    /// Its build, as it says, if it answered.
    build: Option<versions::NodeBuild>,
}

/// The nodes that dropped hints for `id` (see `tally_node::cluster::hints::bound`):
/// it needs a repair if any did.
fn dropped_hints_for<'r>(id: &str, rows: &'r [Row<'_>]) -> Vec<&'r str> {
    rows.iter()
        .filter(|r| {
            r.stats
                .as_ref()
                .is_some_and(|s| s.hints.iter().any(|h| h.node == id && h.needs_repair))
        })
        .map(|r| r.node.id.as_str())
        .collect()
}

impl Row<'_> {
    /// Like `nodetool status`: U(p) or D(own), then N(ormal), J(oining) or
    /// L(eaving); and whether it takes writes.
    fn state(&self) -> String {
        let code = tally_node::cluster::topology::status_code(self.node.up, self.ring);
        match (self.node.up, &self.not_writable) {
            (true, Some(_)) => format!("{code} not writable"),
            _ => code.to_string(),
        }
    }
}

async fn print_status(cli: &Cli, status: &ClusterStatus) -> Result<()> {
    // Each node reports its own numbers; a node that does not answer is shown as such.
    let mut rows = Vec::new();
    let ring = &status.stats.ring;
    for (i, n) in status.nodes.iter().enumerate() {
        let addr: SocketAddr = n.client_addr.parse().context("node address")?;
        let (own, build) = match crate::secure::dial(addr, Duration::from_millis(1000)).await {
            Ok(c) => (c.status().await.ok(), versions::of(&c, &n.id).await),
            Err(_) => (None, None),
        };
        let not_writable = match &own {
            Some(s) => s
                .nodes
                .iter()
                .find(|m| m.id == n.id)
                .and_then(|m| m.not_writable.clone()),
            None => n.not_writable.clone(),
        };
        rows.push(Row {
            node: n,
            stats: own.map(|s| s.stats),
            not_writable,
            ring: ring.states.get(i).copied().unwrap_or_default(),
            build,
        });
    }
    if rows.is_empty() {
        bail!("the cluster lists no nodes");
    }
    if cli.json {
        let nodes: Vec<_> = rows.iter().map(|r| node_json(r, &rows)).collect();
        println!(
            "{}",
            json!({ "cluster": status.cluster, "seen_from": status.node, "replication_factor": status.replication_factor, "vnodes": status.vnodes, "ring_version": ring.version, "nodes": nodes })
        );
        return Ok(());
    }
    println!(
        "cluster {} (replication factor {}, {} vnodes per node, ring version {}), seen from {}",
        status.cluster, status.replication_factor, status.vnodes, ring.version, status.node
    );
    println!(
        "state: U(p) or D(own), N(ormal), J(oining), L(eaving); LE left, -- not a member; \
         load: commit log and SSTables on disk"
    );
    println!(
        "{:<6} {:<15} {:<22} {:>6} {:>10} {:>10} {:>6}  {:<16}  build",
        "node", "state", "client", "owns", "counters", "load", "hints", "counter id"
    );
    for r in &rows {
        let n = r.node;
        let (cells, load, hints, id) = match &r.stats {
            Some(s) => (
                s.cells.to_string(),
                human(s.log_bytes + s.table_bytes),
                s.hints_pending.to_string(),
                format!("{:016x}", s.counter_id),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let build = r.build.as_ref().map_or("-", |b| b.version.as_str());
        println!(
            "{:<6} {:<15} {:<22} {:>5.1}% {:>10} {:>10} {:>6}  {id:<16}  {build}",
            n.id,
            r.state(),
            n.client_addr,
            n.ownership * 100.0,
            cells,
            load,
            hints
        );
    }
    let builds = rows
        .iter()
        .filter_map(|r| Some((r.node.id.as_str(), r.build.as_ref()?)));
    println!("{}", versions::features_line(builds));
    for r in rows.iter().filter(|r| r.node.up) {
        if let Some(why) = &r.not_writable {
            println!("{}: not writable: {why}", r.node.id);
        }
    }
    for line in needs_repair_lines(&rows) {
        println!("{line}");
    }
    Ok(())
}

/// One node's entry of `tally status --json`.
fn node_json(r: &Row<'_>, rows: &[Row<'_>]) -> serde_json::Value {
    let (n, s) = (r.node, &r.stats);
    let hints: Vec<_> = s
        .iter()
        .flat_map(|s| &s.hints)
        .map(|h| {
            json!({
                "node": h.node, "pending": h.pending, "dropped": h.dropped,
                "since_ms": (h.since_ms > 0).then_some(h.since_ms), "needs_repair": h.needs_repair,
            })
        })
        .collect();
    json!({
        "id": n.id, "up": n.up, "client": n.client_addr, "ownership": n.ownership,
        "state": format!("{:?}", r.ring).to_lowercase(), "status": r.state(),
        "writable": n.up && r.not_writable.is_none(), "not_writable": r.not_writable,
        "counter_id": s.as_ref().map(|s| format!("{:016x}", s.counter_id)),
        "cells": s.as_ref().map(|s| s.cells), "log_bytes": s.as_ref().map(|s| s.log_bytes),
        "table_bytes": s.as_ref().map(|s| s.table_bytes), "hints_pending": s.as_ref().map(|s| s.hints_pending),
        "hints": hints, "needs_repair": !dropped_hints_for(&n.id, rows).is_empty(),
        "build": r.build.as_ref().map(|b| &b.version),
        "features_enabled": r.build.as_ref().map(|b| &b.enabled),
    })
}

/// A line for each node some node dropped hints for.
fn needs_repair_lines(rows: &[Row<'_>]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            let by = dropped_hints_for(&r.node.id, rows);
            (!by.is_empty()).then(|| {
                format!(
                    "{}: needs repair: {} dropped hints for it (past the hint window or size limit)",
                    r.node.id,
                    by.join(", ")
                )
            })
        })
        .collect()
}

fn human(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::{ErrorKind, WireError};

    #[test]
    fn a_node_whose_hints_were_dropped_is_named_with_who_dropped_them() {
        let status = |id: &str| NodeStatus {
            id: id.into(),
            client_addr: String::new(),
            up: true,
            not_writable: None,
            ownership: 1.0 / 3.0,
        };
        let dropped = |node: &str| tally_net::wire::PeerHints {
            node: node.into(),
            pending: 0,
            dropped: 50,
            since_ms: 0,
            needs_repair: true,
        };
        let nodes = [status("n1"), status("n2"), status("n3")];
        let row = |i: usize, hints: Vec<tally_net::wire::PeerHints>| Row {
            node: &nodes[i],
            stats: Some(NodeStats {
                hints,
                ..NodeStats::default()
            }),
            not_writable: None,
            ring: NodeState::Normal,
            build: None,
        };
        let rows = [
            row(0, vec![dropped("n3")]),
            row(1, vec![dropped("n3")]),
            row(2, vec![]),
        ];
        assert_eq!(
            needs_repair_lines(&rows),
            vec![
                "n3: needs repair: n1, n2 dropped hints for it (past the hint window or size limit)"
            ]
        );
        assert!(needs_repair_lines(&rows[2..]).is_empty());
        // The same in `--json`: the node's flag, and each holder's hints.
        let n3 = node_json(&rows[2], &rows);
        assert_eq!(n3["needs_repair"], true, "{n3}");
        let n1 = node_json(&rows[0], &rows);
        assert_eq!(n1["needs_repair"], false, "{n1}");
        let held = &n1["hints"][0];
        assert_eq!(
            (&held["node"], &held["dropped"], &held["needs_repair"]),
            (&"n3".into(), &50.into(), &true.into()),
            "{n1}"
        );
        assert!(held["since_ms"].is_null(), "no pending hints: {held}");
    }

    #[test]
    fn a_failed_write_says_what_it_left_behind() {
        let server = |e: WireError| Failure::write(ClientError::Server(e));
        let table = [
            (
                server(WireError::new(ErrorKind::Unavailable, "1 of 3 replicas")),
                "tally: unavailable: 1 of 3 replicas (not applied)",
                EXIT_FAILED,
            ),
            (
                Failure::write(ClientError::Timeout(5000)),
                "tally: no answer within 5000 ms (an add may or may not have been applied) \
                 (outcome unknown: it may or may not have been applied)",
                EXIT_OUTCOME_UNKNOWN,
            ),
            (
                // The type decides, not the kind nor the words.
                server(WireError::not_applied(ErrorKind::Storage, "poisoned")),
                "tally: storage error: poisoned (not applied)",
                EXIT_FAILED,
            ),
            (
                Failure::other(ClientError::Timeout(5000)),
                "tally: no answer within 5000 ms (an add may or may not have been applied)",
                EXIT_FAILED,
            ),
            (
                Failure::other(anyhow::anyhow!("root cause").context("read cluster.toml")),
                "tally: read cluster.toml: root cause",
                EXIT_FAILED,
            ),
        ];
        for (failure, line, status) in table {
            assert_eq!(failure.report(), (line.to_string(), status), "{failure:?}");
        }
    }
}
