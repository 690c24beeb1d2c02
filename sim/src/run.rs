//! One run: a seed, a cluster, a workload and its faults for a span of
//! simulated time, then every fault healed, every member repaired twice
//! (the second repair must find nothing apart), a read of every key at
//! ALL through every member, and the checkers' verdict on the history.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::wire::{ClientOp, ClientReply, Consistency, WireError, WireKey};
use tally_tests::checker;
use tally_tests::checker::exact::check_exact;
use tally_tests::unique_sender;

use crate::broken::Broken;
use crate::cluster::{self, Cluster, Hooks, Shape};
use crate::exact::{self, EXACT_KEYS};
use crate::lists::{self, Lists};
use crate::net::{Faults, Net};
use crate::workload::{self, KEYS};
use crate::world::{SimWorld, Stream, stream};
use crate::{cql, flushes, repairs, resp, strings, unique};
use crate::{trace, trace as tr};

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The seed every choice of the run is drawn from.
    pub seed: u64,
    /// Simulated time of workload and faults.
    pub duration: Duration,
    /// Clients of plain adds and reads.
    pub clients: usize,
    /// Clients of adds with operation ids.
    pub exact_clients: usize,
    /// Clients of agreed strings.
    pub string_clients: usize,
    /// Clients of lists.
    pub list_clients: usize,
    /// Clients adding members to unique counters.
    pub unique_clients: usize,
    /// Clients pipelining counter commands and scripts over RESP (and,
    /// with any, a hostile one planting code in scripts).
    pub resp_clients: usize,
    /// CQL workers of each kind (counters, rows, logged batches; twice
    /// as many of leases), with answers lost and batches stopped half
    /// way (`cql`).
    pub cql_clients: usize,
    /// Nodes that may join the ring (and let members be decommissioned).
    pub spares: usize,
    /// Flushes of the whole cluster now and then (`flushes`); they reset
    /// every key, so a plan with them has no clients of ids, strings,
    /// lists, unique counters or CQL.
    pub flushes: bool,
    /// The broken build every node runs, if any.
    pub broken: Option<Broken>,
    /// Print every event as it happens.
    pub print_trace: bool,
}

impl Plan {
    /// Swarm testing: the clients of each kind but the plain ones (ids,
    /// strings, lists, RESP, CQL, unique counters) run in a seed with
    /// probability one half, drawn from the seed. Neighbouring seeds try
    /// different mixes, each cheaper than every kind at once, and a kind's
    /// faults meet different company (as FoundationDB's simulation draws
    /// its workloads).
    pub fn swarm(mut self) -> Plan {
        let mut rng = SmallRng::seed_from_u64(stream(self.seed, Stream::Swarm));
        let kinds = [
            &mut self.exact_clients,
            &mut self.string_clients,
            &mut self.list_clients,
            &mut self.resp_clients,
            &mut self.cql_clients,
            // Last: the kinds before it are drawn as before it came.
            &mut self.unique_clients,
        ];
        for clients in kinds {
            if !rng.random_bool(0.5) {
                *clients = 0;
            }
        }
        self
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The hash of every event of the run, in order.
    pub trace: u64,
    /// How many events.
    pub events: u64,
    /// Operations the clients made.
    pub ops: usize,
    /// Reads the checker judged.
    pub reads: usize,
    /// What is wrong, if anything.
    pub violations: Vec<String>,
}

/// The hint window of a run's nodes, ms.
const HINT_WINDOW_MS: u64 = 2_000;

/// How long after the faults end the cluster has to settle (hints
/// delivered, nodes back) before the final reads.
const SETTLE: Duration = Duration::from_secs(10);

/// Runs `plan` on this thread, in a runtime of its own.
pub fn run(plan: &Plan) -> Result<Report> {
    let hooks: Hooks = Arc::default();
    let rt = cluster::runtime(&hooks)?;
    trace::begin(plan.print_trace);
    let result = tokio::task::LocalSet::new().block_on(&rt, async {
        SimWorld::begin(plan.seed);
        let outcome = simulate(plan, &hooks).await;
        SimWorld::end();
        outcome
    });
    drop(rt);
    let (hash, events) = trace::end();
    let (ops, reads, violations) = result?;
    Ok(Report {
        seed: plan.seed,
        trace: hash,
        events,
        ops,
        reads,
        violations,
    })
}

async fn simulate(plan: &Plan, hooks: &Hooks) -> Result<(usize, usize, Vec<String>)> {
    anyhow::ensure!(
        !plan.flushes
            || plan.exact_clients
                + plan.string_clients
                + plan.list_clients
                + plan.cql_clients
                + plan.unique_clients
                == 0,
        "flushes reset the keys of the clients of ids, strings, lists, unique counters and CQL: \
         a plan has one or the others"
    );
    let shape = Shape {
        nodes: 3,
        replication_factor: 3,
        spares: plan.spares,
        broken: plan.broken,
        cql_faults: plan.cql_clients > 0,
        // A short hint window: a node down longer misses writes that only
        // reads at ALL and repairs bring back.
        settings: [("hints.window_ms".to_string(), HINT_WINDOW_MS.to_string())].into(),
    };
    // QUIC's idle timeout is five failure timeouts; a dial waits one.
    let failure_timeout = Duration::from_secs(1);
    let net = Net::new(
        shape.nodes + shape.spares,
        plan.seed,
        Faults::calm(),
        failure_timeout * 5,
        failure_timeout,
    );
    tr!(
        "clients: {} plain, {} of ids, {} of strings, {} of lists, {} of RESP, {} of CQL, {} of unique counters",
        plan.clients,
        plan.exact_clients,
        plan.string_clients,
        plan.list_clients,
        plan.resp_clients,
        plan.cql_clients,
        plan.unique_clients
    );
    let cluster = Cluster::new(&shape, net.clone(), hooks)?;
    for i in cluster.membership().members {
        cluster.start(i).await?;
    }
    tr!("cluster up");
    if plan.cql_clients > 0 {
        cql::setup(&cluster).await.map_err(anyhow::Error::msg)?;
        tr!("CQL tables made");
    }
    let until = tally_world::Instant::now() + plan.duration;
    let clients: Vec<_> = (0..plan.clients)
        .map(|c| tokio::spawn(workload::client(c, cluster.clone(), plan.seed, until)))
        .collect();
    let nemesis = tokio::spawn(workload::nemesis(
        cluster.clone(),
        net.clone(),
        plan.seed,
        until,
    ));
    let exact: Vec<_> = (0..plan.exact_clients)
        .map(|c| {
            let id = plan.clients + c;
            tokio::spawn(exact::client(id, cluster.clone(), plan.seed, until))
        })
        .collect();
    // The clients of RESP connections run in the runtime's local set,
    // as the connections do (see `MemoryDoors`).
    let strings: Vec<_> = (0..plan.string_clients)
        .map(|c| {
            let id = plan.clients + plan.exact_clients + c;
            tokio::task::spawn_local(strings::client(id, cluster.clone(), plan.seed, until))
        })
        .collect();
    let lists: Vec<_> = (0..plan.list_clients)
        .map(|c| {
            let id = plan.clients + plan.exact_clients + plan.string_clients + c;
            tokio::spawn(lists::client(id, cluster.clone(), plan.seed, until))
        })
        .collect();
    let flusher = plan.flushes.then(|| {
        let id = plan.clients + plan.exact_clients + plan.string_clients + plan.list_clients;
        tokio::spawn(flushes::flusher(id, cluster.clone(), plan.seed, until))
    });
    // After the flusher's id.
    let resp_first =
        plan.clients + plan.exact_clients + plan.string_clients + plan.list_clients + 1;
    let resp: Vec<_> = (0..plan.resp_clients)
        .map(|c| {
            tokio::task::spawn_local(resp::client(
                resp_first + c,
                cluster.clone(),
                plan.seed,
                until,
            ))
        })
        .collect();
    let hostile = (plan.resp_clients > 0).then(|| {
        let id = resp_first + plan.resp_clients;
        tokio::task::spawn_local(resp::hostile(id, cluster.clone(), plan.seed, until))
    });
    let cql_first = resp_first + plan.resp_clients + 1;
    let cql_workers = cql::start(&cluster, (plan.cql_clients, cql_first), plan.seed, until);
    // After the CQL workers' ids (five of them per CQL client).
    let unique_first = cql_first + 5 * plan.cql_clients;
    let uniques: Vec<_> = (0..plan.unique_clients)
        .map(|c| {
            let id = unique_first + c;
            tokio::spawn(unique::client(id, cluster.clone(), plan.seed, until))
        })
        .collect();
    let mut history = Vec::new();
    if let Some(f) = flusher {
        history.extend(f.await.context("the flusher panicked")?);
    }
    for c in resp {
        history.extend(c.await.context("a RESP client panicked")?);
    }
    let mut violations = Vec::new();
    if let Some(h) = hostile {
        let (sent, taken) = h.await.context("the hostile client panicked")?;
        tr!("hostile scripts: {sent} answered, {taken} not refused");
        if taken > 0 {
            violations.push(format!(
                "{taken} of the hostile client's {sent} scripts planting code were not refused"
            ));
        }
    }
    for c in clients {
        history.extend(c.await.context("a client panicked")?);
    }
    let mut id_adds = Vec::new();
    for c in exact {
        id_adds.extend(c.await.context("an exact client panicked")?);
    }
    let mut string_ops = Vec::new();
    for c in strings {
        string_ops.extend(c.await.context("a strings client panicked")?);
    }
    let mut pushes = Lists::new();
    for c in lists {
        pushes.extend(c.await.context("a list client panicked")?);
    }
    let mut members = unique_sender::UniqueLog::default();
    for c in uniques {
        members.absorb(c.await.context("a unique client panicked")?);
    }
    let mut cql_logs = match cql_workers {
        Some(w) => Some(w.join().await.context("a CQL worker panicked")?),
        None => None,
    };
    violations.extend(nemesis.await.context("the nemesis panicked")?);
    // Every fault healed, every node up, time to settle.
    net.heal();
    net.set_faults(Faults::calm());
    for i in cluster.membership().members {
        violations.extend(workload::restart(&cluster, i).await.err());
    }
    tokio::time::sleep(SETTLE).await;
    violations.extend(repairs::twice(&cluster).await);
    // After the repair, as the chaos run does: a batch at ONE is whole
    // once each partition is on one replica, and the others may wait
    // for a repair (their hints dropped past the hint window). A repair
    // makes no row that was never written, so a batch left half way
    // and never replayed is still caught.
    if let Some(logs) = &cql_logs {
        violations.extend(logs.check_batches(&cluster).await);
    }
    let finals = final_reads(&cluster, KEYS, workload::key, &mut violations).await;
    let report = checker::check(&history, cluster.replication_factor(), &finals);
    violations.extend(report.violations);
    let finals = final_reads(&cluster, EXACT_KEYS, exact::exact_key, &mut violations).await;
    violations.extend(check_exact(&id_adds, EXACT_KEYS, &finals).violations);
    let string_keys = strings::keys_of(&string_ops);
    string_ops.extend(strings::final_reads(&cluster, &string_keys, &mut violations).await);
    violations.extend(strings::check(&string_ops));
    violations.extend(lists::check(&cluster, &pushes).await);
    if plan.unique_clients > 0 {
        violations.extend(unique::check(&cluster, &members).await);
    }
    if let Some(logs) = &mut cql_logs {
        violations.extend(logs.check(&cluster).await);
    }
    cluster.close()?;
    violations.extend(SimWorld::broken_invariants());
    let ops = history.len()
        + id_adds.len()
        + string_ops.len()
        + pushes.values().flatten().count()
        + members.adds;
    Ok((ops, report.reads_checked, violations))
}

/// A read's value.
fn value(reply: ClientReply) -> Result<i64, WireError> {
    match reply {
        ClientReply::Value(v) => Ok(v),
        other => Err(WireError::new(
            tally_net::wire::ErrorKind::Internal,
            format!("a read answered {other:?}"),
        )),
    }
}

/// Every one of `keys` counters (`key` names them) read at ALL through
/// every node: `(node, key, value)`.
async fn final_reads(
    cluster: &Cluster,
    keys: usize,
    key: fn(usize) -> WireKey,
    violations: &mut Vec<String>,
) -> Vec<(usize, usize, i64)> {
    let mut finals = Vec::new();
    for n in cluster.membership().members {
        let Some(node) = cluster.node(n) else {
            violations.push(format!("n{} is down at the end", n + 1));
            continue;
        };
        for k in 0..keys {
            // As a native client reads: in database 0's current keyspace.
            let read = ClientOp::Get {
                key: key(k),
                cl: Consistency::All,
            };
            match node.execute(read).await.and_then(value) {
                Ok(v) => {
                    tr!("final read of {:?} through n{}: {v}", key(k), n + 1);
                    finals.push((n, k, v));
                }
                Err(e) => violations.push(format!(
                    "the final read of {:?} at ALL through n{} failed: {e}",
                    key(k),
                    n + 1
                )),
            }
        }
    }
    finals
}

/// Runs `seeds` on `threads` threads side by side, `plan` giving each
/// seed's plan and `report` seeing each report as it comes; answers the
/// seeds that found a violation, in order.
pub fn run_seeds(
    seeds: &[u64],
    threads: usize,
    plan: &(dyn Fn(u64) -> Plan + Sync),
    report: &(dyn Fn(&Report) + Sync),
) -> Result<Vec<u64>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = parking_lot::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&seed) = seeds.get(i) else {
                            return Ok(());
                        };
                        let r = run(&plan(seed))?;
                        report(&r);
                        if !r.violations.is_empty() {
                            failed.lock().push(seed);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            match w.join() {
                Ok(r) => r?,
                Err(_) => anyhow::bail!("a simulation thread panicked"),
            }
        }
        Ok(())
    })?;
    let mut failed = failed.into_inner();
    failed.sort_unstable();
    Ok(failed)
}
