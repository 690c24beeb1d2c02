//! The chaos run in CI: every fault kind several times against three real
//! nodes, adds with ids among the workload, and the checkers shown able to
//! fail on builds broken where only real clients reach (CQL, TLS); the
//! same with ring changes (joins, decommissions, removals). Flushes racing
//! the workload, and the broken builds the simulation catches (lost adds,
//! in RESP pipelines too, ids lost in a crash, ring changes without a
//! sync, idle repairs, the agreement path's, scripts that plant code or
//! skip their compare, flushes), are `sim/tests/seeds.rs`'s; adds lost to
//! a missed deadline are `sim/scripts/expiry_ignored.txt`'s, list changes
//! stamped when made `sim/scripts/lists_stamped.txt`'s and slices merged
//! past the shortest `sim/scripts/slices_trusting_longest.txt`'s.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use tally_tests::chaos::{ChaosOptions, FAULT_KINDS, Summary, run};

/// `TALLY_CHAOS_SECONDS` lengthens the run (CI uses the default).
/// Whether the checker reported a violation starting with `prefix`.
fn found(summary: &Summary, prefix: &str) -> bool {
    summary
        .report
        .violations
        .iter()
        .any(|v| v.starts_with(prefix))
}

fn seconds() -> u64 {
    std::env::var("TALLY_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45)
}

#[test]
fn a_short_chaos_run_finds_no_violation() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ChaosOptions {
        duration: Duration::from_secs(seconds()),
        fault_interval: Duration::from_secs(3),
        seed: 7,
        history: Some(dir.path().join("history.txt")),
        // Shorter than the faults: hints are dropped, and nodes converge
        // all the same.
        hint_window: Some(Duration::from_millis(500)),
        // Strings too, judged linearizable.
        string_workers: 2,
        // CQL adds, whose answers a node loses now and then.
        cql_workers: 2,
        cql_drop_answers_every: Some(9),
        // CQL leases by lightweight transactions, judged linearizable,
        // and rows written and deleted, judged last-write-wins.
        cql_lease_workers: 2,
        cql_row_workers: 2,
        // Logged batches whose coordinators stop half way now and then,
        // judged all or nothing once the batch log replayed them.
        cql_batch_workers: 2,
        ..ChaosOptions::default()
    };
    let summary = run(&opts).unwrap();
    println!("{summary}");
    assert!(
        summary.strings.2 >= 100,
        "few string operations answered: {summary}"
    );
    assert!(
        summary.leases.1 >= 50,
        "few lease transactions answered: {summary}"
    );
    assert!(
        summary.leases.2 >= 1,
        "no conditional batch applied: {summary}"
    );
    assert!(
        summary.rows.1 >= 100,
        "few row writes acknowledged: {summary}"
    );
    assert!(
        summary.batches.1 >= 20,
        "few logged batches acknowledged: {summary}"
    );
    let history = std::fs::read_to_string(dir.path().join("history.txt")).unwrap();
    for (cl, (_, acked)) in ["ONE", "QUORUM", "ALL"].iter().zip(summary.resets) {
        assert!(
            history
                .lines()
                .any(|l| l.contains(" reset key ") && l.contains(&format!(" at {cl} "))),
            "no reset at {cl}: {summary}"
        );
        assert!(acked >= 1, "no reset acknowledged at {cl}: {summary}");
    }
    for kind in FAULT_KINDS {
        assert!(
            summary.faults.get(kind).copied().unwrap_or(0) >= 1,
            "no {kind} fault: {summary}"
        );
    }
    let (sets, sets_ok, _, expires_set) = summary.changes;
    assert!(sets > 0 && sets_ok > 0, "no SET acknowledged: {summary}");
    assert!(expires_set > 0, "no EXPIRE gave a deadline: {summary}");
    assert!(summary.report.reads_checked > 100, "{summary}");
    assert!(
        summary.resp.1 > 100,
        "too few RESP pipelined ops answered: {summary}"
    );
    let (scripted, planted, taken) = summary.scripts;
    assert!(scripted > 30, "too few scripts answered: {summary}");
    assert!(planted > 10 && taken == 0, "{summary}");
    assert!(
        !summary.hints_dropped.1.is_empty(),
        "no node dropped hints past the window: {summary}"
    );
    assert!(
        summary.repairs_racing.0 >= 1,
        "no repair finished while the workload ran: {summary}"
    );
    let (id_adds, retries, races, resends, _) = &summary.exact;
    assert!(*id_adds > 100, "too few adds with ids: {summary}");
    let (lists, _, pushes_acked) = summary.lists;
    assert!(
        lists >= 2 && pushes_acked > 100,
        "too few list pushes: {summary}"
    );
    assert!(*retries > 0 && *races > 0 && *resends > 0, "{summary}");
    let (cql_ids, cql_retries, cql_plain, _) = &summary.cql;
    assert!(
        *cql_ids > 50 && *cql_retries > 0 && *cql_plain > 50,
        "too few CQL adds: {summary}"
    );
    assert!(summary.report.violations.is_empty(), "{summary}");
    assert!(
        summary
            .report
            .finals
            .values()
            .all(|(agreed, _, _)| agreed.is_some()),
        "{summary}"
    );
    assert!(history.lines().count() > 1000);
}

/// Without faults nothing is retried for want of an answer: the double
/// counts come from the racing sends and the sends after an
/// acknowledgement that go through the faulty node, which a correct node
/// answers as duplicates. Each exact checker must catch it on its own.
#[test]
fn the_checker_catches_a_node_that_ignores_ids() {
    let opts = ChaosOptions {
        duration: Duration::from_secs(8),
        faults: false,
        seed: 4,
        ignore_ids: Some(0),
        ..ChaosOptions::default()
    };
    let summary = run(&opts).unwrap();
    for (checker, prefix) in [("adds with ids", "exact key"), ("unique", "unique counter")] {
        assert!(
            found(&summary, prefix),
            "the {checker} checker passed a node that ignores ids: {summary}"
        );
    }
}

/// Ring changes under the workload: spare nodes join, members are
/// decommissioned, a cleanup runs while four nodes hold three replicas,
/// among kills and pauses. Every acknowledged add, id and member is read
/// back through the members at the end, and the strings' histories are
/// linearizable across the changes.
#[test]
fn a_chaos_run_with_ring_changes_finds_no_violation() {
    const KINDS: &[&str] = &[
        "join",
        "kill",
        "cleanup",
        "decommission",
        "join",
        "pause",
        "decommission",
        "fold",
    ];
    let opts = ChaosOptions {
        duration: Duration::from_secs(seconds().min(40)),
        fault_interval: Duration::from_secs(3),
        fault_kinds: KINDS,
        min_faults: KINDS.len(),
        spares: 2,
        seed: 9,
        // Enough partitions that a node of four holds only some of them.
        keys: 16,
        // Strings too: their agreed state moves with the ranges.
        string_workers: 2,
        ..ChaosOptions::default()
    };
    let summary = run(&opts).unwrap();
    println!("{summary}");
    let (changes, members) = &summary.topology;
    assert!(changes.joined >= 2, "{summary}");
    assert!(changes.decommissioned >= 2, "{summary}");
    assert!(
        changes.cleanups >= 1 && changes.cells_dropped > 0,
        "{summary}"
    );
    assert_eq!(members.len(), 3, "{summary}");
    // The nodes that left and the killed one's old incarnation, folded:
    // the three members' incarnations are all a cell holds.
    assert!(changes.folds >= 1 && changes.folded >= 3, "{summary}");
    assert!(changes.widest <= 3, "{summary}");
    assert!(summary.exact.0 > 100 && summary.unique.0 > 100, "{summary}");
    assert!(summary.strings.2 >= 100, "few string answers: {summary}");
    assert!(summary.report.violations.is_empty(), "{summary}");
}

/// Members killed and removed, and one wiped and replaced, under the
/// workload. Without adds with ids: a removed or wiped node takes the ids
/// it alone remembered with it, so a retry of an add it applied but whose
/// answer was lost is applied again (`docs/exactly-once.md` says so, and
/// the exact checker reports it when it happens).
#[test]
fn a_chaos_run_with_removed_nodes_finds_no_violation() {
    const KINDS: &[&str] = &[
        "join",
        "kill",
        "removenode",
        "replace",
        "join",
        "pause",
        "removenode",
    ];
    let opts = ChaosOptions {
        duration: Duration::from_secs(seconds().min(30)),
        fault_interval: Duration::from_secs(3),
        fault_kinds: KINDS,
        min_faults: KINDS.len(),
        spares: 2,
        seed: 10,
        exact_workers: 0,
        // A replaced node's agreed state comes back from the others.
        string_workers: 2,
        ..ChaosOptions::default()
    };
    let summary = run(&opts).unwrap();
    println!("{summary}");
    let (changes, members) = &summary.topology;
    assert!(changes.joined >= 2 && changes.removed >= 2, "{summary}");
    assert!(changes.replaced >= 1, "{summary}");
    assert_eq!(members.len(), 3, "{summary}");
    assert!(summary.unique.0 > 100, "{summary}");
    assert!(summary.strings.2 >= 100, "few string answers: {summary}");
    assert!(summary.report.violations.is_empty(), "{summary}");
}

/// The checker still sees lost adds when every connection speaks TLS.
#[test]
fn the_checker_catches_lost_adds_over_tls() {
    let opts = ChaosOptions {
        duration: Duration::from_secs(8),
        faults: false,
        seed: 12,
        drop_every: Some(25),
        secure: true,
        ..ChaosOptions::default()
    };
    let summary = run(&opts).unwrap();
    assert!(summary.resp.1 > 100, "{summary}");
    assert!(
        !summary.report.violations.is_empty(),
        "a lossy cluster passed over TLS: {summary}"
    );
}

/// String workers alone, 4 of them for 10 s without faults, with decided
/// changes' commits held `commit_delay`.
fn strings_alone(commit_delay: Option<Duration>) -> Summary {
    let opts = ChaosOptions {
        duration: Duration::from_secs(10),
        faults: false,
        seed: 17,
        workers: 0,
        resp_workers: 0,
        unique_workers: 0,
        exact_workers: 0,
        list_workers: 0,
        string_workers: 4,
        commit_delay,
        ..ChaosOptions::default()
    };
    let summary = run(&opts).unwrap();
    assert!(summary.strings.2 >= 300, "{summary}");
    summary
}

/// Decided changes' commits held a second (the seam that lets a read find
/// a value in flight; its broken build, reads that skip it, is the
/// simulation's), on a correct build: reads finish the held values, and
/// the histories are linearizable.
#[test]
fn strings_stay_linearizable_while_commits_are_held() {
    let summary = strings_alone(Some(Duration::from_millis(1000)));
    assert!(summary.report.violations.is_empty(), "{summary}");
}

/// One node's clock 400 ms ahead of the others', under kills, pauses and
/// partitions: ballots come from a hybrid clock (later than any seen) and
/// no rule of agreement reads the wall clock to decide, so every string's
/// history stays linearizable. (Deadlines do read it: a lease is as good
/// as the clocks, `docs/counters.md` says how.)
#[test]
fn strings_stay_linearizable_with_a_skewed_clock() {
    let opts = ChaosOptions {
        duration: Duration::from_secs(20),
        fault_interval: Duration::from_secs(3),
        fault_kinds: &["kill", "pause", "partition"],
        min_faults: 3,
        seed: 19,
        workers: 0,
        resp_workers: 0,
        unique_workers: 0,
        exact_workers: 0,
        list_workers: 0,
        string_workers: 4,
        clock_skew_ms: Some(400),
        ..ChaosOptions::default()
    };
    let summary = run(&opts).unwrap();
    println!("{summary}");
    assert!(summary.strings.2 >= 300, "{summary}");
    assert!(summary.report.violations.is_empty(), "{summary}");
}
