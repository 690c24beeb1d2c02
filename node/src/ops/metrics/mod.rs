//! Prometheus metrics: what the node counts as it serves (`Registry`),
//! what its engine, hints and client gate report, rendered as Prometheus'
//! text format (`text`) and served over HTTP at `/metrics` (`http`) on the
//! node's `metrics` address.
//!
//! The registry is the node's (`Node::metrics`).

pub(crate) mod http;
pub(crate) mod slots;
pub(crate) mod text;

use std::sync::atomic::Ordering::Relaxed;

use crate::base::commands::COMMANDS;
use crate::base::registry::{ACCEPTOR_KINDS, CQL_ROUTES, ERROR_KINDS, LEVELS, OPS, Registry};
use crate::client::accept::ClientGate;
use crate::node::Node;
use text::Page;

/// Every metric of `node`, in Prometheus' text format.
pub(crate) fn render(node: &Node, gate: &ClientGate) -> String {
    let r = node.metrics();
    let mut p = Page::default();
    coordinator(&mut p, r);
    let e = node.engine_stats();
    p.single(
        "tally_leader_adds_total",
        "counter",
        "Adds this node applied as leader.",
        e.adds as f64,
    );
    p.single(
        "tally_leader_add_records_total",
        "counter",
        "Commit log records those adds took (fewer when concurrent adds to a cell were combined).",
        e.add_records as f64,
    );
    p.single(
        "tally_replica_applies_total",
        "counter",
        "Cells merged here for other nodes' writes (replication and hints).",
        r.replica_applies.load(Relaxed) as f64,
    );
    storage(&mut p, &e);
    hints(&mut p, node, r);
    p.single(
        "tally_read_repairs_total",
        "counter",
        "Read repairs sent.",
        r.read_repairs.load(Relaxed) as f64,
    );
    p.family(
        "tally_acceptor_requests_total",
        "counter",
        "Agreement requests this node served as an acceptor, by kind.",
    );
    for (i, kind) in ACCEPTOR_KINDS.iter().enumerate() {
        let n = r.acceptor[i].load(Relaxed) as f64;
        p.sample("tally_acceptor_requests_total", &[("kind", kind)], n);
    }
    p.family(
        "tally_cql_statements_total",
        "counter",
        "CQL statements on named partitions, by whether this node replicates them all \
         (replica) or forwarded them to their replicas (forwarded).",
    );
    for (i, routed) in CQL_ROUTES.iter().enumerate() {
        let n = r.cql_statements[i].load(Relaxed) as f64;
        p.sample("tally_cql_statements_total", &[("routed", routed)], n);
    }
    p.single(
        "tally_client_connections",
        "gauge",
        "Client connections open (native and RESP).",
        gate.open() as f64,
    );
    p.family(
        "tally_resp_commands_total",
        "counter",
        "RESP commands received, by name.",
    );
    for (i, n) in r.resp_commands().enumerate() {
        if n > 0 {
            let name = COMMANDS.get(i).map_or("unknown", |c| c.name);
            p.sample("tally_resp_commands_total", &[("command", name)], n as f64);
        }
    }
    p.finish()
}

fn coordinator(p: &mut Page, r: &Registry) {
    for (op, what) in OPS.iter().enumerate() {
        let name = format!("tally_coordinator_{what}_seconds");
        p.family(
            &name,
            "histogram",
            &format!("How long {what}s this node coordinated took, by consistency level."),
        );
        for (i, (_, cl)) in LEVELS.iter().enumerate() {
            p.histogram(&name, &[("cl", cl)], &r.latency(op, i));
        }
    }
    p.family(
        "tally_coordinator_errors_total",
        "counter",
        "Coordinated operations that failed, by operation and kind.",
    );
    for (op, what) in OPS.iter().enumerate() {
        for (k, kind) in ERROR_KINDS.iter().enumerate() {
            let n = r.errors(op, k) as f64;
            p.sample(
                "tally_coordinator_errors_total",
                &[("op", what), ("kind", kind)],
                n,
            );
        }
    }
}

fn storage(p: &mut Page, e: &tally_engine::Stats) {
    let gauges: [(&str, &str, f64); 7] = [
        (
            "tally_commitlog_bytes",
            "Bytes of commit log on disk.",
            e.log_bytes as f64,
        ),
        (
            "tally_commitlog_segments",
            "Commit log segments.",
            e.log_segments as f64,
        ),
        (
            "tally_memtables",
            "Memtables (the active one and those waiting to flush).",
            e.memtables as f64,
        ),
        (
            "tally_memtable_bytes",
            "Bytes in memtables.",
            e.memtable_bytes as f64,
        ),
        ("tally_sstables", "Live SSTables.", e.tables as f64),
        (
            "tally_sstable_bytes",
            "Bytes of live SSTables.",
            e.table_bytes as f64,
        ),
        (
            "tally_cached_cells",
            "Cells in the counter cache.",
            e.cached_cells as f64,
        ),
    ];
    for (name, help, v) in gauges {
        p.single(name, "gauge", help, v);
    }
    p.single(
        "tally_commitlog_syncs_total",
        "counter",
        "Commit log fsyncs.",
        e.log_syncs as f64,
    );
    p.family(
        "tally_commitlog_sync_seconds",
        "histogram",
        "How long commit log fsyncs took.",
    );
    p.histogram("tally_commitlog_sync_seconds", &[], &e.log_sync_latency);
    p.single(
        "tally_compactions_total",
        "counter",
        "SSTable compactions.",
        e.compactions as f64,
    );
}

fn hints(p: &mut Page, node: &Node, r: &Registry) {
    p.single(
        "tally_hints_written_total",
        "counter",
        "Hints written for nodes that did not acknowledge a write.",
        r.hints_written.load(Relaxed) as f64,
    );
    p.single(
        "tally_hints_sent_total",
        "counter",
        "Hints delivered.",
        r.hints_sent.load(Relaxed) as f64,
    );
    let peers = node.hint_reports();
    p.family(
        "tally_hints_pending",
        "gauge",
        "Keys with hints waiting, by the node they wait for.",
    );
    for (peer, report) in &peers {
        p.sample(
            "tally_hints_pending",
            &[("peer", peer)],
            report.pending as f64,
        );
    }
    p.family(
        "tally_hints_dropped_total",
        "counter",
        "Hints dropped (past the hint window or size), by the node they were for.",
    );
    for (peer, report) in &peers {
        p.sample(
            "tally_hints_dropped_total",
            &[("peer", peer)],
            report.dropped as f64,
        );
    }
}
