//! `cluster-loop`: a simple closed-loop client against a running cluster.
//!
//! `--concurrency` tasks share `--connections` connections per node; each
//! task adds 1 to a uniformly chosen key (or reads it, `--read-ratio`),
//! through the nodes in turn, waits for the answer and goes again, for
//! `--seconds`. It prints throughput and latency percentiles from an HDR
//! histogram. (The full load generator, `tally-bench`, comes later.)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use hdrhistogram::Histogram;
use tally_net::{Client, Consistency};
use tally_node::config::Config;

#[derive(Parser)]
#[command(about = "A closed-loop client for a running Tally cluster")]
struct Args {
    /// The cluster's configuration (client addresses are read from it).
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 128)]
    concurrency: usize,
    /// Connections to each node.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Distinct keys (uniform); 1 makes one hot counter.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Share of reads, 0.0 to 1.0.
    #[arg(long, default_value_t = 0.0)]
    read_ratio: f64,
    /// Consistency level: one, quorum, all.
    #[arg(long, default_value = "quorum")]
    cl: Consistency,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let config = Config::load(&args.config)?;
    let addrs: Vec<SocketAddr> = config.nodes.iter().map(|n| n.client).collect();
    let mut clients = Vec::new();
    for _ in 0..args.connections.max(1) {
        for a in &addrs {
            clients.push(Arc::new(
                Client::connect(*a)
                    .await
                    .with_context(|| format!("connect to {a}"))?,
            ));
        }
    }
    if !(0.0..=1.0).contains(&args.read_ratio) {
        bail!("--read-ratio must be between 0 and 1");
    }
    let stop = Instant::now() + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for w in 0..args.concurrency {
        let clients = clients.clone();
        let (keys, cl, read_per_mille) =
            (args.keys.max(1), args.cl, (args.read_ratio * 1000.0) as u64);
        tasks.push(tokio::spawn(async move {
            let mut hist =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let (mut errors, mut seed) = (0u64, 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64 + 1));
            let mut i = w;
            while Instant::now() < stop {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let key = format!("key:{}", seed % keys);
                let client = &clients[i % clients.len()];
                i += 1;
                let t = Instant::now();
                let result = if (seed >> 40) % 1000 < read_per_mille {
                    client.get(key.as_bytes(), b"", cl).await
                } else {
                    client.add(key.as_bytes(), b"", 1, cl).await
                };
                match result {
                    Ok(_) => {
                        let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                        hist.saturating_record(us.max(1));
                    }
                    Err(_) => errors += 1,
                }
            }
            (hist, errors)
        }));
    }
    let started = Instant::now();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await?;
        hist.add(&h).context("merge histograms")?;
        errors += e;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} ops in {secs:.1} s = {:.0} ops/s at {} ({} in flight, {} keys, read ratio {}); errors {errors}",
        hist.len(),
        hist.len() as f64 / secs,
        args.cl,
        args.concurrency,
        args.keys,
        args.read_ratio
    );
    println!(
        "latency µs: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.9),
        hist.value_at_quantile(0.99),
        hist.value_at_quantile(0.999),
        hist.max()
    );
    Ok(())
}
