//! Clients over CQL in the simulation: the chaos run's CQL workers
//! ([`tally_tests::cql_work`]) reaching the nodes' CQL ports through
//! pipes in memory (`MemoryDoors`), and their checks.
//!
//! - counters: adds with operation ids (retried until known) and
//!   without, judged exactly at ALL;
//! - rows: last-write-wins writes and range deletes, with paged reads;
//! - logged batches, all or nothing;
//! - leases taken by lightweight transactions, linearizable.
//!
//! With them the nodes lose answers as a network does and stop logged
//! batches half way as a coordinator that crashes does (`Shape`'s
//! `cql_faults`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tally_net::cql::{CqlClient, CqlError};
use tally_tests::cql_work::{Dial, Dialing, batches, counters, leases, rows};
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::trace;
use crate::world::{Stream, stream};

/// The replication factor of the CQL tables.
const RF: usize = 3;
/// Counters with ids, and as many without.
const COUNTER_KEYS: usize = 4;
/// A worker's think time between its statements.
const THINK: Duration = Duration::from_millis(100);

/// The nodes' CQL ports, through the simulation's pipes.
struct Ports {
    cluster: Arc<Cluster>,
    /// The nodes dialed, by index.
    nodes: Vec<usize>,
}

impl Dial for Ports {
    fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn dial(&self, n: usize) -> Dialing<'_> {
        let node = self.nodes[n];
        let pipe = self.cluster.cql(node);
        Box::pin(async move {
            let pipe = pipe.ok_or_else(|| CqlError::Closed(format!("n{} is down", node + 1)))?;
            CqlClient::over(pipe, None).await
        })
    }

    fn think(&self) -> Duration {
        THINK
    }
}

/// The CQL workers of a run, `n` of each kind (twice as many of leases):
/// their tasks, and when the leases' history began.
pub struct Workers {
    started: tally_world::Instant,
    counters: Vec<JoinHandle<counters::CqlLog>>,
    rows: Vec<JoinHandle<rows::RowLog>>,
    batches: Vec<JoinHandle<batches::BatchLog>>,
    leases: Vec<JoinHandle<leases::LeaseLog>>,
}

/// What the CQL workers did.
pub struct Logs {
    started: tally_world::Instant,
    counters: counters::CqlLog,
    rows: rows::RowLog,
    batches: batches::BatchLog,
    leases: leases::LeaseLog,
}

/// Makes the tables, through the first node that answers.
pub async fn setup(cluster: &Arc<Cluster>) -> Result<(), String> {
    let ports = members(cluster);
    counters::setup(&ports, RF).await?;
    rows::setup(&ports, RF).await?;
    batches::setup(&ports, RF).await?;
    leases::setup(&ports, RF).await
}

/// Starts `n` workers of each kind (none: `None`), client ids from
/// `first`, until `until`; from a task of the runtime's local set.
pub fn start(
    cluster: &Arc<Cluster>,
    (n, first): (usize, usize),
    seed: u64,
    until: tally_world::Instant,
) -> Option<Workers> {
    if n == 0 {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = stop.clone();
    tokio::task::spawn_local(async move {
        tokio::time::sleep_until(until).await;
        stopper.store(true, Ordering::Release);
    });
    let ports: Arc<dyn Dial> = Arc::new(Ports {
        cluster: cluster.clone(),
        nodes: (0..cluster.len()).collect(),
    });
    let seed_of = |i: usize| stream(seed, Stream::Client((first + i) as u64));
    let started = tally_world::Instant::now();
    let (p, s) = (&ports, &stop);
    Some(Workers {
        counters: (0..n)
            .map(|i| {
                let w = counters::worker(p.clone(), COUNTER_KEYS, seed_of(i), s.clone());
                tokio::task::spawn_local(w)
            })
            .collect(),
        rows: (0..n)
            .map(|i| {
                tokio::task::spawn_local(rows::worker(i, p.clone(), seed_of(n + i), s.clone()))
            })
            .collect(),
        batches: (0..n)
            .map(|i| {
                let w = batches::worker(i, p.clone(), seed_of(2 * n + i), s.clone());
                tokio::task::spawn_local(w)
            })
            .collect(),
        leases: (0..2 * n)
            .map(|i| {
                let w = leases::worker(i, p.clone(), seed_of(3 * n + i), started, s.clone());
                tokio::task::spawn_local(w)
            })
            .collect(),
        started,
    })
}

impl Workers {
    /// Waits for every worker to stop: what they did.
    pub async fn join(self) -> anyhow::Result<Logs> {
        let mut logs = Logs {
            started: self.started,
            counters: counters::CqlLog::default(),
            rows: rows::RowLog::default(),
            batches: batches::BatchLog::default(),
            leases: leases::LeaseLog::default(),
        };
        for w in self.counters {
            logs.counters.absorb(w.await?);
        }
        for w in self.rows {
            logs.rows.absorb(w.await?);
        }
        for w in self.batches {
            logs.batches.absorb(w.await?);
        }
        for w in self.leases {
            logs.leases.absorb(w.await?);
        }
        Ok(logs)
    }
}

impl Logs {
    /// Judges the logged batches: before the repairs compare replicas
    /// (the batch log's replays finish batches left half way, and write).
    pub async fn check_batches(&self, cluster: &Arc<Cluster>) -> Vec<String> {
        let (sent, acked) = self.batches.counts();
        trace!("CQL batches: {sent} sent, {acked} acknowledged");
        batches::check(&members(cluster), &self.batches).await
    }

    /// Judges the counters, rows and leases through every member.
    pub async fn check(&mut self, cluster: &Arc<Cluster>) -> Vec<String> {
        let ports = members(cluster);
        let (adds, retries, ..) = self.counters.exact.counts();
        let (changes, acked, reads) = self.rows.counts();
        let (ops, known, batched) = self.leases.counts();
        trace!(
            "CQL: {adds} adds with ids ({retries} retries), {} without; {changes} row changes \
             ({acked} acknowledged), {reads} paged reads; {ops} lease operations ({known} \
             answered, {batched} as batches)",
            self.counters.plain_adds
        );
        let mut violations = counters::check(&ports, &self.counters, COUNTER_KEYS)
            .await
            .violations;
        violations.extend(rows::check(&ports, &self.rows).await);
        violations.extend(leases::check_all(&ports, &mut self.leases, self.started).await);
        violations
    }
}

/// The members' CQL ports.
fn members(cluster: &Arc<Cluster>) -> Ports {
    Ports {
        cluster: cluster.clone(),
        nodes: cluster.membership().members,
    }
}
