//! `tally-bench`: Tally's load generator, in the spirit of cassandra-stress
//! and scylla-bench.
//!
//! `--concurrency` tasks share a token-aware client; each picks a key from
//! the workload (`uniform`, `zipf:S`, `hot`), adds `--delta` or reads (by
//! `--read-ratio`) at `--cl`, waits, and goes again, until `--duration`
//! seconds or `--ops` operations are done. A line every second shows
//! throughput, p99 and errors; the end prints a latency table from an HDR
//! histogram (or JSON with `--json`, which holds the per-second series
//! too), and `--plot out.svg` draws throughput and p50/p99 over time.
//!
//! `--verify` keeps, per key, the sum of acknowledged adds and of adds whose
//! outcome is unknown (timeouts, lost connections), then reads every key it
//! touched at ALL: each must lie within [acknowledged + unknown negatives,
//! acknowledged + unknown positives], which is exact when nothing timed
//! out. Keys carry a per-run prefix, so earlier runs do not disturb it.
//!
//! `--exactly-once` gives every add an operation id and retries it, with
//! the same id, until it is acknowledged (or its 30 s deadline passes):
//! `--verify` then demands the exact sum, and an add whose outcome stayed
//! unknown fails the run.
//!
//! `--protocol cql` speaks CQL to each node's `cql` address instead, with
//! prepared statements sent to a replica of their partition
//! (`tally_net::cql`): `--cql-statement add` adds to and reads
//! `tally_bench.counters`, `counter_update` and `counter_read` run
//! scylla-bench's statements on `scylla_bench.test_counters`.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and benchmarks measure real time, and draw real random bytes"
)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde_json::json;
use tally_benches::plot::Second;
use tally_benches::target::{CqlStatement, CqlTarget, Target};
use tally_net::cql::CqlClient;
use tally_net::{ClusterClient, ClusterOptions, Consistency};
use tally_node::config::Config;

#[derive(Parser)]
#[command(name = "tally-bench", about = "Load generator for a Tally cluster")]
struct Args {
    /// The cluster's configuration (seed addresses).
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// Seed client addresses instead of the config's.
    #[arg(long)]
    addr: Vec<SocketAddr>,
    /// uniform, zipf:S (for example zipf:1.1) or hot (one counter).
    #[arg(long, default_value = "uniform")]
    workload: String,
    /// Distinct counters.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Share of operations that are reads, 0.0 to 1.0.
    #[arg(long, default_value_t = 0.0)]
    read_ratio: f64,
    /// Operations in flight.
    #[arg(long, default_value_t = 128)]
    concurrency: usize,
    /// Seconds to run (ignored with --ops).
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Stop after this many operations.
    #[arg(long)]
    ops: Option<u64>,
    /// Consistency level: one, quorum, all.
    #[arg(long, default_value = "quorum")]
    cl: Consistency,
    /// Amount of each add (negative allowed).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    delta: i64,
    /// Random seed (keys, read/add choice).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Connections to each node. One pipelined connection carries any
    /// concurrency; more split each node's answers into smaller writes.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Check every touched counter at ALL against the acknowledged adds.
    #[arg(long)]
    verify: bool,
    /// Key prefix (default: a fresh one per run).
    #[arg(long)]
    prefix: Option<String>,
    /// Give every add an operation id and retry it until acknowledged;
    /// `--verify` then checks the exact sum.
    #[arg(long)]
    exactly_once: bool,
    /// Draw throughput and p50/p99 latency per second into this SVG file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// native (the client port) or cql (each node's `cql` address).
    #[arg(long, default_value = "native")]
    protocol: Protocol,
    /// With `--protocol cql`, the statement, prepared: `add` (`UPDATE
    /// tally_bench.counters SET c = c + ? WHERE pk = ?`, and reads of it
    /// by `--read-ratio`), or scylla-bench's `counter_update` and
    /// `counter_read` on `scylla_bench.test_counters`, or a regular
    /// table's `insert` (`INSERT INTO tally_bench.rows (pk, v) VALUES
    /// (?, ?)`), `insert-if-not-exists` (each of a new key), and
    /// `logged-batch` / `unlogged-batch` (three such inserts, of the key
    /// and the two after it, in one batch), or `wide-page` (rows of one
    /// partition of `--keys` rows, and pages of 100 of them to read).
    #[arg(long, default_value = "add")]
    cql_statement: CqlStatement,
    /// TLS and login (as `tally`'s).
    #[command(flatten)]
    security: tally_node::security::client_security::Flags,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Protocol {
    Native,
    Cql,
}

#[derive(Clone, Copy)]
enum Workload {
    Uniform,
    Zipf(f64),
    Hot,
}

fn parse_workload(s: &str) -> Result<Workload> {
    match s {
        "uniform" => Ok(Workload::Uniform),
        "hot" => Ok(Workload::Hot),
        z if z.starts_with("zipf:") => {
            let exp: f64 = z[5..]
                .parse()
                .with_context(|| format!("bad zipf exponent in {z:?}"))?;
            if exp <= 0.0 {
                bail!("the zipf exponent must be positive, got {exp}");
            }
            Ok(Workload::Zipf(exp))
        }
        _ => bail!("unknown workload {s:?}: uniform, zipf:S or hot"),
    }
}

/// Acknowledged sum, unknown positive sum, unknown negative sum.
type Sums = (i64, i64, i64);
/// Per key: its sums.
type Ledger = HashMap<u64, Sums>;

/// Latencies of acknowledged operations, shared by every worker: one
/// histogram for the run and one for the live line (a histogram per worker
/// would be 128 of them, each far bigger than a cache).
struct Recorded {
    total: Histogram<u64>,
    interval: Histogram<u64>,
    interval_errors: u64,
}

#[derive(Default)]
struct WorkerResult {
    /// When the worker's last operation ended.
    finished: Option<Instant>,
    ledger: Ledger,
    errors: HashMap<String, u64>,
    unknown: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

// One thread: the tasks only wait for answers, and a single thread needs
// no cross-thread wake-ups (about 1 us of CPU per operation less).
#[tokio::main(flavor = "current_thread")]
async fn main() {
    match run(Args::parse()).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("tally-bench: {e:#}");
            std::process::exit(2);
        }
    }
}

async fn run(args: Args) -> Result<bool> {
    let workload = parse_workload(&args.workload)?;
    if !(0.0..=1.0).contains(&args.read_ratio) {
        bail!("--read-ratio must be between 0 and 1");
    }
    let seeds = if args.addr.is_empty() {
        Config::load(&args.config)?
            .nodes
            .iter()
            .map(|n| n.client)
            .collect()
    } else {
        args.addr.clone()
    };
    let config = Config::load(&args.config).ok();
    let security =
        tally_node::security::client_security::security(&args.security, config.as_ref())?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
        ^ u128::from(std::process::id());
    let client = Arc::new(match args.protocol {
        Protocol::Native => {
            let opts = ClusterOptions {
                connections_per_node: args.connections.max(1),
                timeout: Duration::from_secs(5),
                exactly_once: args.exactly_once,
                security,
                ..ClusterOptions::default()
            };
            let client = ClusterClient::connect(&seeds, &opts)
                .await
                .context("connect to the cluster")?;
            Target::Native(Box::new(client))
        }
        Protocol::Cql => {
            let config = config
                .as_ref()
                .context("--protocol cql reads the nodes' CQL addresses from --config")?;
            let run = (nanos as i64) & 0x7FFF_FFFF;
            let login = security
                .login
                .as_ref()
                .map(|l| (l.user.as_str(), l.password.as_str()));
            if args.verify && !args.cql_statement.adds() {
                bail!(
                    "--verify checks the sums of adds: {:?} adds nothing",
                    args.cql_statement
                );
            }
            let client = cql_client(config, login).await?;
            let rf = config.cluster.replication_factor;
            let setup = CqlTarget::setup(client, args.cql_statement, (rf, args.keys), run);
            Target::Cql(setup.await?)
        }
    });
    let prefix = args
        .prefix
        .clone()
        .unwrap_or_else(|| format!("bench-{nanos:x}"));
    let keys = match workload {
        Workload::Hot => 1,
        _ => args.keys.max(1),
    };
    let zipf = match workload {
        Workload::Zipf(s) => Some(Zipf::new(keys as f64, s).context("zipf distribution")?),
        _ => None,
    };

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration);
    let budget = Arc::new(AtomicU64::new(args.ops.unwrap_or(u64::MAX)));
    let recorded = Arc::new(Mutex::new(Recorded {
        total: histogram(),
        interval: histogram(),
        interval_errors: 0,
    }));
    let mut tasks = Vec::new();
    for w in 0..args.concurrency.max(1) {
        let client = client.clone();
        let (budget, recorded, prefix) = (budget.clone(), recorded.clone(), prefix.clone());
        let (cl, delta, read_ratio, track) = (args.cl, args.delta, args.read_ratio, args.verify);
        let by_ops = args.ops.is_some();
        let mut rng =
            SmallRng::seed_from_u64(args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ w as u64);
        tasks.push(tokio::spawn(async move {
            let mut r = WorkerResult::default();
            let mut key = String::new();
            loop {
                if (!by_ops && Instant::now() >= deadline)
                    || budget
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                        .is_err()
                {
                    break;
                }
                let k = match (workload, &zipf) {
                    (Workload::Zipf(_), Some(z)) => (z.sample(&mut rng) as u64).saturating_sub(1),
                    (Workload::Hot, _) => 0,
                    _ => rng.random_range(0..keys),
                };
                key.clear();
                let _ = write!(key, "{prefix}:{k}");
                let read = rng.random_bool(read_ratio);
                let t = Instant::now();
                let outcome = client.op(read, (k, &key), delta, cl).await;
                let delta = client.added(delta);
                let us = u64::try_from(t.elapsed().as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                match outcome {
                    Ok(()) => {
                        let mut rec = recorded.lock();
                        rec.total.saturating_record(us);
                        rec.interval.saturating_record(us);
                        drop(rec);
                        if track && !read {
                            r.ledger.entry(k).or_default().0 += delta;
                        }
                    }
                    Err(e) => {
                        recorded.lock().interval_errors += 1;
                        *r.errors.entry(e.kind).or_default() += 1;
                        if e.unknown {
                            r.unknown += 1;
                            let entry = r.ledger.entry(k).or_default();
                            if delta >= 0 {
                                entry.1 += delta;
                            } else {
                                entry.2 += delta;
                            }
                        }
                    }
                }
            }
            r.finished = Some(Instant::now());
            r
        }));
    }

    let bar = ProgressBar::new(args.ops.unwrap_or(args.duration));
    bar.set_style(
        ProgressStyle::default_bar()
            .template("{elapsed_precise} [{bar:30}] {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut last = Instant::now();
    let mut done_ops = 0u64;
    let mut seconds: Vec<Second> = Vec::new();
    while !tasks.iter().all(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let (h, errs) = {
            let mut g = recorded.lock();
            let snapshot = (g.interval.clone(), g.interval_errors);
            g.interval.reset();
            g.interval_errors = 0;
            snapshot
        };
        let secs = last.elapsed().as_secs_f64();
        last = Instant::now();
        done_ops += h.len();
        seconds.push(Second {
            at: started.elapsed().as_secs_f64(),
            ops_per_s: h.len() as f64 / secs,
            p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
            errors: errs,
        });
        let line = format!(
            "{:>8.0} ops/s  p99 {:>6.2} ms  errors {}",
            h.len() as f64 / secs,
            h.value_at_quantile(0.99) as f64 / 1000.0,
            errs
        );
        bar.set_position(if args.ops.is_some() {
            done_ops
        } else {
            started.elapsed().as_secs()
        });
        if bar.is_hidden() {
            eprintln!("[{:>4.0}s] {line}", started.elapsed().as_secs_f64());
        } else {
            bar.set_message(line);
        }
    }
    bar.finish_and_clear();
    // The run ends with its last operation, not when the loop above
    // notices (up to 100 ms later: a short run's rate would be quantized).
    let mut ended = started;

    let mut ledger = Ledger::new();
    let mut errors: HashMap<String, u64> = HashMap::new();
    let mut unknown = 0;
    for t in tasks {
        let r = t.await.context("a worker panicked")?;
        ended = ended.max(r.finished.unwrap_or(ended));
        for (k, (a, p, n)) in r.ledger {
            let e = ledger.entry(k).or_default();
            e.0 += a;
            e.1 += p;
            e.2 += n;
        }
        for (k, n) in r.errors {
            *errors.entry(k).or_default() += n;
        }
        unknown += r.unknown;
    }
    let elapsed = ended.duration_since(started).as_secs_f64().max(1e-6);
    let hist = std::mem::replace(&mut recorded.lock().total, histogram());
    let q = |x: f64| hist.value_at_quantile(x) as f64 / 1000.0;
    let ops_per_s = hist.len() as f64 / elapsed;
    let error_total: u64 = errors.values().sum();

    let verified = if args.verify {
        let mut v = verify(&client, &prefix, &ledger).await?;
        if args.exactly_once && unknown > 0 {
            eprintln!(
                "violation: {unknown} adds with ids never knew their outcome: the sums are not exact"
            );
            v.violations += 1;
            v.exact = false;
        }
        Some(v)
    } else {
        None
    };
    if args.json {
        println!(
            "{}",
            json!({
                "workload": args.workload, "exactly_once": args.exactly_once, "cl": args.cl.to_string(), "concurrency": args.concurrency,
                "keys": keys, "read_ratio": args.read_ratio, "seconds": elapsed, "ops": hist.len(),
                "ops_per_s": ops_per_s, "errors": errors, "unknown_outcome_adds": unknown,
                "latency_ms": { "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999), "max": hist.max() as f64 / 1000.0 },
                "verify": verified.as_ref().map(|v| json!({ "keys": v.keys, "violations": v.violations, "exact": v.exact })),
                "per_second": seconds.iter().map(|s| json!({
                    "at": s.at, "ops_per_s": s.ops_per_s, "p50_ms": s.p50_ms, "p99_ms": s.p99_ms, "errors": s.errors,
                })).collect::<Vec<_>>(),
            })
        );
    } else {
        println!(
            "{}{} at {}, {} in flight, {} keys, read ratio {}: {} ops in {elapsed:.1} s",
            args.workload,
            if args.exactly_once { " with ids" } else { "" },
            args.cl,
            args.concurrency,
            keys,
            args.read_ratio,
            hist.len()
        );
        println!("  throughput  {ops_per_s:>10.0} ops/s");
        println!(
            "  latency ms  p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            hist.max() as f64 / 1000.0
        );
        println!("  errors      {error_total} {errors:?} ({unknown} adds with unknown outcome)");
        if let Some(v) = &verified {
            println!(
                "  verify      {} keys read at ALL: {}{} ({} violations)",
                v.keys,
                if v.violations == 0 { "OK" } else { "FAILED" },
                if v.exact {
                    ", exact"
                } else {
                    ", within bounds"
                },
                v.violations
            );
        }
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "tally-bench {}{} at {}, {} in flight: {ops_per_s:.0} ops/s",
            args.workload,
            if args.exactly_once { " with ids" } else { "" },
            args.cl,
            args.concurrency
        );
        tally_benches::plot::draw(path, &title, &seconds)
            .with_context(|| format!("write the plot {}", path.display()))?;
    }
    Ok(verified.is_none_or(|v| v.violations == 0))
}

struct Verified {
    keys: usize,
    violations: usize,
    exact: bool,
}

/// Reads every touched key at ALL and checks it against the ledger.
async fn verify(client: &Arc<Target>, prefix: &str, ledger: &Ledger) -> Result<Verified> {
    let entries: Vec<(u64, Sums)> = ledger.iter().map(|(k, v)| (*k, *v)).collect();
    let chunks: Vec<Vec<(u64, Sums)>> = entries
        .chunks(entries.len().div_ceil(64).max(1))
        .map(<[_]>::to_vec)
        .collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let (client, prefix) = (client.clone(), prefix.to_string());
        tasks.push(tokio::spawn(async move {
            let mut bad = Vec::new();
            for (k, (acked, unk_pos, unk_neg)) in chunk {
                let key = format!("{prefix}:{k}");
                let (lo, hi) = (acked + unk_neg, acked + unk_pos);
                match client.value((k, &key), Consistency::All).await {
                    Ok(v) if (lo..=hi).contains(&v) => {}
                    Ok(v) => bad.push(format!("{key}: read {v} at ALL, expected within [{lo}, {hi}] (acknowledged {acked})")),
                    Err(e) => bad.push(format!("{key}: read at ALL failed: {e}")),
                }
            }
            bad
        }));
    }
    let mut violations = Vec::new();
    for t in tasks {
        violations.extend(t.await.context("a verifier panicked")?);
    }
    for v in violations.iter().take(20) {
        eprintln!("violation: {v}");
    }
    Ok(Verified {
        keys: ledger.len(),
        violations: violations.len(),
        exact: ledger.values().all(|(_, p, n)| *p == 0 && *n == 0),
    })
}

/// A CQL connection to every node of `config`, token-aware by its ring.
async fn cql_client(config: &Config, login: Option<(&str, &str)>) -> Result<CqlClient> {
    let addrs = config
        .nodes
        .iter()
        .map(|n| {
            n.cql
                .with_context(|| format!("node {} has no `cql` address", n.id))
        })
        .collect::<Result<Vec<_>>>()?;
    let ids: Vec<String> = config.nodes.iter().map(|n| n.id.clone()).collect();
    let c = &config.cluster;
    let ring = tally_net::ring::Ring::new(&ids, c.vnodes, c.replication_factor);
    Ok(CqlClient::connect(&addrs, ring, login).await?)
}
