//! The simulation in CI: two hundred seeds of the 3-node workload under
//! every fault kind find no violation; a seed replays exactly; and each
//! deliberately broken build is caught within a few seeds.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::time::Duration;

use tally_sim::broken::Broken;
use tally_sim::run::{Plan, Report, run, run_seeds};
use tally_sim::world::SimWorld;

// As `tally-sim`'s: glibc's malloc took about a fifth of a run's time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Seeds CI runs, and the simulated time of each (test builds are a few
/// times slower than release: the long runs are `tally-sim`'s).
const SEEDS: u64 = 200;
const DURATION: Duration = Duration::from_secs(30);
/// Seeds CI runs with the flusher.
const FLUSH_SEEDS: u64 = 60;

fn plan(seed: u64, broken: Option<Broken>) -> Plan {
    plan_of(seed, broken, DURATION)
}

/// A seed's plan as `tally-sim` makes it: each kind of client but the
/// plain ones in half the seeds (`Plan::swarm`).
fn plan_of(seed: u64, broken: Option<Broken>, duration: Duration) -> Plan {
    Plan {
        seed,
        duration,
        clients: 4,
        exact_clients: 2,
        string_clients: 2,
        list_clients: 1,
        resp_clients: 1,
        cql_clients: 1,
        unique_clients: 1,
        spares: 1,
        flushes: false,
        broken,
        print_trace: false,
    }
    .swarm()
}

/// A run with the flusher: `FLUSHALL` now and then, judged as resets of
/// every key at ALL (the clients of ids, strings and lists are off: a
/// flush resets their keys too).
fn flush_plan(seed: u64, broken: Option<Broken>) -> Plan {
    Plan {
        flushes: true,
        exact_clients: 0,
        string_clients: 0,
        list_clients: 0,
        cql_clients: 0,
        unique_clients: 0,
        ..plan(seed, broken)
    }
}

fn print(r: &Report) {
    eprintln!(
        "seed {} trace {:016x} ops {} reads {} violations {}",
        r.seed,
        r.trace,
        r.ops,
        r.reads,
        r.violations.len()
    );
    for v in &r.violations {
        eprintln!("  violation: {v}");
    }
}

#[test]
fn two_hundred_seeds_find_no_violation() {
    SimWorld::install().unwrap();
    let seeds: Vec<u64> = (1..=SEEDS).collect();
    let failed = run_seeds(&seeds, 2, &|s| plan(s, None), &print).unwrap();
    assert!(
        failed.is_empty(),
        "seeds that failed: {failed:?} (replay: tally-sim --seed S --log)"
    );
}

#[test]
fn seeds_with_flushes_find_no_violation() {
    SimWorld::install().unwrap();
    let seeds: Vec<u64> = (1..=FLUSH_SEEDS).collect();
    let failed = run_seeds(&seeds, 2, &|s| flush_plan(s, None), &print).unwrap();
    assert!(
        failed.is_empty(),
        "seeds that failed: {failed:?} (replay: tally-sim --seed S --flushes --log)"
    );
}

/// Seed 5's trace names a file in its run's directory (an error of a
/// failing disk), which is a fresh one each run: the trace must not
/// depend on it (it did until the trace wrote every run's alike).
#[test]
fn a_seed_replays_exactly() {
    SimWorld::install().unwrap();
    let a = run(&plan(5, None)).unwrap();
    let b = run(&plan(5, None)).unwrap();
    assert_eq!((a.trace, a.events, a.ops), (b.trace, b.events, b.ops));
    assert!(a.events > 1_000 && a.ops > 500, "{a:?}");
    let c = run(&plan(6, None)).unwrap();
    assert_ne!(a.trace, c.trace, "two seeds ran alike");
}

/// The violations a run of `broken` finds on `seed`, the seed that caught
/// it when the test was written. Runs are deterministic: the seed that
/// catches a broken build moves only when the code does. If it no longer
/// catches it, the test searches seeds 1..=`within` and fails either way,
/// naming the seed that catches it now (to write in the test) or saying
/// that none did.
fn caught(broken: Broken, seed: u64, within: u64) -> Vec<String> {
    caught_in(broken, seed, within, DURATION)
}

/// [`caught`], with runs of `duration`.
fn caught_in(broken: Broken, seed: u64, within: u64, duration: Duration) -> Vec<String> {
    caught_by(broken, seed, within, &|s, b| plan_of(s, b, duration))
}

/// [`caught`], with the runs `plan` makes of a seed.
fn caught_by(
    broken: Broken,
    seed: u64,
    within: u64,
    plan: &dyn Fn(u64, Option<Broken>) -> Plan,
) -> Vec<String> {
    SimWorld::install().unwrap();
    let r = run(&plan(seed, Some(broken))).unwrap();
    if !r.violations.is_empty() {
        return r.violations;
    }
    let now = (1..=within).filter(|&s| s != seed).find(|&s| {
        let r = run(&plan(s, Some(broken))).unwrap();
        !r.violations.is_empty()
    });
    match now {
        Some(s) => panic!(
            "{broken:?} is no longer caught at seed {seed}, but at seed {s}: write {s} in the test"
        ),
        None => panic!("{broken:?} ran seed {seed} and seeds 1..={within}, and no run caught it"),
    }
}

#[test]
fn the_simulation_catches_a_cluster_that_loses_adds() {
    let violations = caught(Broken::DropEvery, 1, 5);
    assert!(
        violations.iter().any(|v| v.contains("key")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_lost_list_pushes() {
    let with_lists = |seed, broken| Plan {
        list_clients: 1,
        ..plan(seed, broken)
    };
    let violations = caught_by(Broken::DropEvery, 1, 5, &with_lists);
    assert!(
        violations.iter().any(|v| v.contains("list sim-list-")),
        "{violations:?}"
    );
}

/// RESP pipelines alone (no other client), on nodes that acknowledge
/// every 7th change they lead without making it: the pipelines' adds,
/// run at once by the nodes, are judged like every other.
#[test]
fn the_simulation_catches_lost_adds_sent_in_resp_pipelines() {
    let resp_only = |seed, broken| Plan {
        clients: 0,
        exact_clients: 0,
        string_clients: 0,
        list_clients: 0,
        cql_clients: 0,
        unique_clients: 0,
        resp_clients: 2,
        ..plan(seed, broken)
    };
    let violations = caught_by(Broken::DropEvery, 1, 5, &resp_only);
    assert!(
        violations.iter().any(|v| v.contains("key")),
        "{violations:?}"
    );
}

/// Unsealed script interpreters: the hostile client's scripts plant
/// code, and the others' scripted adds answer without being made.
#[test]
fn the_simulation_catches_scripts_that_plant_code_for_others() {
    let violations = caught(Broken::UnsealedScripts, 3, 5);
    assert!(
        violations.iter().any(|v| v.contains("not refused")),
        "{violations:?}"
    );
    assert!(
        violations.iter().any(|v| v.contains("outside")),
        "the checker saw no scripted add lost: {violations:?}"
    );
}

/// Scripts of one key that apply their result over whatever it holds:
/// the strings clients' compares as scripts both apply.
#[test]
fn the_simulation_catches_a_script_that_skips_its_compare() {
    let violations = caught(Broken::ScriptSkipsCompare, 2, 5);
    assert!(
        violations.iter().any(|v| v.contains("linearizable")),
        "{violations:?}"
    );
}

/// CQL ports that apply adds with ids as adds without: an add whose
/// answer was lost (the port closes the connection once it applied it)
/// is retried with its id, and counts again.
#[test]
fn the_simulation_catches_a_cql_port_that_ignores_ids() {
    let violations = caught(Broken::CqlIgnoreIds, 1, 5);
    assert!(
        violations.iter().any(|v| v.contains("CQL exact key")),
        "{violations:?}"
    );
}

/// Replicas that take the deleted ranges a leader sends them as nothing:
/// their rows come back at ONE, and a repair cannot mend them.
#[test]
fn the_simulation_catches_deletes_that_stale_replicas_undo() {
    let violations = caught(Broken::CqlDropDeletes, 1, 5);
    assert!(
        violations.iter().any(|v| v.contains("row (")),
        "{violations:?}"
    );
}

/// Lightweight transactions that judge their conditions on the cells
/// they read first instead of on the agreed state: two workers that read
/// a free lease both take it.
#[test]
fn the_simulation_catches_transactions_that_skip_the_agreed_read() {
    let violations = caught(Broken::CqlLwtSkipsAgreedRead, 3, 5);
    assert!(
        violations.iter().any(|v| v.contains("lease ")),
        "{violations:?}"
    );
}

/// A batch log that no node replays: batches whose coordinator stopped
/// half way stay half applied.
#[test]
fn the_simulation_catches_logged_batches_left_half_applied() {
    let violations = caught(Broken::BatchLogSkipsReplay, 1, 5);
    assert!(
        violations.iter().any(|v| v.contains("logged batch")),
        "{violations:?}"
    );
}

/// Paged reads that merge the replicas' slices up to the longest answer:
/// a replica that missed a band of a fresh partition's rows (down past
/// the hint window while they were written) answers a slice that ends
/// past its peers', and the rows in between are skipped. 3 of 300 seeds
/// of a minute catch it (`tally-sim --broken slice-trusts-longest`), the
/// first at seed 104.
#[test]
fn the_simulation_catches_slices_that_trust_the_longest_answer() {
    let minute = Duration::from_secs(60);
    let violations = caught_in(Broken::SliceTrustsLongest, 104, 110, minute);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("paged read of partition")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_a_node_that_ignores_ids() {
    let violations = caught(Broken::IgnoreIds, 1, 5);
    assert!(
        violations.iter().any(|v| v.contains("exact key")),
        "{violations:?}"
    );
}

/// Unique counters alone: nodes that let any replica admit members
/// count a member added through two of them twice, and the unique
/// checker sees it on its own.
#[test]
fn the_simulation_catches_unique_counters_counting_a_member_twice() {
    let unique_only = |seed, broken| Plan {
        clients: 0,
        exact_clients: 0,
        string_clients: 0,
        list_clients: 0,
        resp_clients: 0,
        cql_clients: 0,
        unique_clients: 2,
        ..plan(seed, broken)
    };
    let violations = caught_by(Broken::IgnoreIds, 1, 5, &unique_only);
    assert!(
        violations.iter().any(|v| v.contains("unique counter")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_a_node_that_skips_learning_its_lost_ids() {
    let violations = caught(Broken::SkipTails, 30, 60);
    assert!(
        violations.iter().any(|v| v.contains("exact key")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_proposers_that_skip_the_prepare() {
    let violations = caught(Broken::SkipPrepare, 8, 60);
    assert!(
        violations.iter().any(|v| v.contains("linearizable")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_acceptors_that_promise_late() {
    let violations = caught(Broken::PromiseLate, 8, 60);
    assert!(
        violations.iter().any(|v| v.contains("linearizable")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_first_ballots_counted_as_regular_ones() {
    // The agreement round's invariants catch it at its first round.
    let violations = caught(Broken::FirstBallotAsRegular, 1, 5);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("invariant broken: a first ballot decided by 2 of 3")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_reads_that_skip_a_value_in_flight() {
    let violations = caught(Broken::ReadSkipsInFlight, 5, 60);
    assert!(
        violations.iter().any(|v| v.contains("linearizable")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_adds_lost_to_a_deadline_their_leader_missed() {
    let violations = caught(Broken::IgnoreDeadlines, 24, 60);
    assert!(
        violations.iter().any(|v| v.contains("key")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_repairs_that_move_nothing() {
    let violations = caught(Broken::IdleRepair, 1, 60);
    assert!(!violations.is_empty());
}

#[test]
fn the_simulation_catches_a_commit_log_that_is_not_fsynced() {
    // Acknowledged adds the power cuts take back.
    let violations = caught(Broken::LogNotSynced, 5, 60);
    assert!(
        violations.iter().any(|v| v.contains("key")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_merges_that_ignore_fold_generations() {
    let violations = caught(Broken::MergeIgnoringFolds, 1, 20);
    assert!(
        violations.iter().any(|v| v.contains("key")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_ring_changes_that_do_not_sync() {
    // Ring changes come a few times a minute: runs of a minute.
    let violations = caught_in(Broken::SkipSync, 2, 20, Duration::from_secs(60));
    assert!(
        violations.iter().any(|v| v.contains("key")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_ring_changes_that_leave_agreed_state_behind() {
    let violations = caught_in(Broken::SkipAgreedHandoff, 6, 10, Duration::from_secs(60));
    assert!(
        violations.iter().any(|v| v.contains("linearizable")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_a_flush_the_other_nodes_learn_late() {
    let violations = caught_by(Broken::FlushLocally, 1, 30, &flush_plan);
    assert!(
        violations.iter().any(|v| v.contains("reset")),
        "{violations:?}"
    );
}

#[test]
fn the_simulation_catches_a_flush_answered_by_the_one_running() {
    let violations = caught_by(Broken::FlushJoinRunning, 1, 30, &flush_plan);
    assert!(
        violations.iter().any(|v| v.contains("reset")),
        "{violations:?}"
    );
}

/// The same seed, run by two processes of `tally-sim`, prints the same
/// trace, event for event.
#[test]
fn two_processes_run_a_seed_alike() {
    let run = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tally-sim"))
            .args(["--seed", "11", "--duration", "20", "--log"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (a, b) = (run(), run());
    assert!(a.lines().count() > 1_000, "{a}");
    let differ = a.lines().zip(b.lines()).position(|(x, y)| x != y);
    assert_eq!(differ, None, "the runs part at line {differ:?}");
    assert_eq!(a.lines().count(), b.lines().count());
}
