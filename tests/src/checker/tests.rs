//! The checker's rules, one history each, and the fast bounds against a
//! direct transcription of the rules on random histories.

use super::*;

use Consistency::{All, One, Quorum};

fn add(p: usize, d: i64, cl: Consistency, t0: u64, t1: u64, outcome: Outcome) -> Op {
    Op {
        process: p,
        key: 0,
        kind: Kind::Add(d),
        cl,
        node: 0,
        invoke_ns: t0,
        complete_ns: t1,
        outcome,
    }
}

fn read(v: i64, cl: Consistency, t0: u64, t1: u64) -> Op {
    Op {
        process: 9,
        key: 0,
        kind: Kind::Read,
        cl,
        node: 1,
        invoke_ns: t0,
        complete_ns: t1,
        outcome: Outcome::Ok(v),
    }
}

fn reset(cl: Consistency, t0: u64, t1: u64, outcome: Outcome) -> Op {
    Op {
        process: 8,
        key: 0,
        kind: Kind::Reset,
        cl,
        node: 2,
        invoke_ns: t0,
        complete_ns: t1,
        outcome,
    }
}

fn set(v: i64, cl: Consistency, t0: u64, t1: u64, outcome: Outcome) -> Op {
    Op {
        kind: Kind::Set(v),
        ..reset(cl, t0, t1, outcome)
    }
}

fn expire(at_ns: u64, cl: Consistency, t0: u64, t1: u64, outcome: Outcome) -> Op {
    Op {
        kind: Kind::Expire { at_ns },
        ..reset(cl, t0, t1, outcome)
    }
}

/// The deadline of the expiry tests, far past the slop.
const D: u64 = 1_000_000_000;
const SLOP: u64 = epochs::SLOP_NS;

#[test]
fn a_set_starts_the_counter_at_its_value() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        set(100, Quorum, 20, 30, Outcome::Ok(0)),
        add(0, 3, Quorum, 40, 50, Outcome::Ok(103)),
    ];
    // After everything: exactly 103; the adds before the SET are gone.
    assert_read_allows(&h, Quorum, 60, 70, &[103], &[3, 8, 108, 100]);
    // During the SET: either epoch, with what each may hold (the bounds
    // of the adds and of the base are taken apart: 0 and 105 pass too).
    assert_read_allows(&h, Quorum, 25, 26, &[5, 100], &[-1, 106]);
    // A SET whose outcome is unknown may or may not have landed, ever.
    let unknown = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        set(100, Quorum, 20, 30, Outcome::Unknown),
    ];
    assert_read_allows(&unknown, Quorum, 60, 70, &[5, 100], &[-1, 106]);
    // Two SETs racing: either value.
    let race = vec![
        set(7, Quorum, 0, 30, Outcome::Ok(0)),
        set(9, All, 10, 20, Outcome::Ok(0)),
    ];
    assert_read_allows(&race, Quorum, 60, 70, &[7, 9], &[0, 6, 10, 16]);
    // A SET then a reset: 0.
    let reset_after = vec![
        set(9, Quorum, 0, 10, Outcome::Ok(0)),
        reset(Quorum, 20, 30, Outcome::Ok(0)),
    ];
    assert_read_allows(&reset_after, Quorum, 60, 70, &[0], &[9]);
}

#[test]
fn an_expired_counter_reads_zero_and_counts_adds_made_after_its_deadline() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        expire(D, Quorum, 20, 30, Outcome::Ok(1)),
        add(0, 2, Quorum, 40, 50, Outcome::Ok(7)),
        add(1, 4, Quorum, D + SLOP + 10, D + SLOP + 20, Outcome::Ok(4)),
    ];
    // Before the deadline, the adds; after it, only the one made after.
    assert_read_allows(&h, Quorum, 60, 70, &[7], &[0, 5]);
    assert_read_allows(&h, Quorum, D + SLOP + 30, D + SLOP + 40, &[4], &[0, 7, 11]);
    // Around the deadline, either side.
    assert_read_allows(&h, Quorum, D - 5, D + 5, &[0, 7], &[-1, 8, 11]);
}

#[test]
fn a_skewed_clock_widens_a_deadline_by_its_skew_and_no_more() {
    const SKEW: u64 = 300_000_000;
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        expire(D, Quorum, 20, 30, Outcome::Ok(1)),
    ];
    let with_read = |v, t0, t1| {
        let mut h = h.clone();
        h.push(read(v, Quorum, t0, t1));
        h
    };
    // 100 ms past the deadline: expired for the checker's clock, maybe
    // not yet for a node whose clock is 300 ms behind.
    let (t0, t1) = (D + 100_000_000, D + 100_000_010);
    assert_eq!(check(&with_read(5, t0, t1), 3, &[]).violations.len(), 1);
    assert!(
        check_skewed(&with_read(5, t0, t1), 3, &[], SKEW)
            .violations
            .is_empty()
    );
    assert!(
        check_skewed(&with_read(0, t0, t1), 3, &[], SKEW)
            .violations
            .is_empty()
    );
    // Past the skew, it has expired everywhere.
    let (t0, t1) = (D + SKEW + SLOP + 10, D + SKEW + SLOP + 20);
    assert_eq!(
        check_skewed(&with_read(5, t0, t1), 3, &[], SKEW)
            .violations
            .len(),
        1
    );
    assert!(
        check_skewed(&with_read(0, t0, t1), 3, &[], SKEW)
            .violations
            .is_empty()
    );
}

#[test]
fn a_deadline_that_may_have_moved_never_discards() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        expire(D, Quorum, 20, 30, Outcome::Ok(1)),
        // A second EXPIRE (a PERSIST, say) racing the first.
        expire(0, Quorum, 25, 35, Outcome::Ok(1)),
    ];
    assert_read_allows(&h, Quorum, D + SLOP + 30, D + SLOP + 40, &[0, 5], &[6]);
    // One acknowledged only after its deadline: it may have missed it.
    let late = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        expire(D, Quorum, 20, D, Outcome::Ok(1)),
    ];
    assert_read_allows(&late, Quorum, D + SLOP + 30, D + SLOP + 40, &[0, 5], &[6]);
    // Unknown: no lower bound any more, as for a reset.
    let unknown = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        expire(D, Quorum, 20, 30, Outcome::Unknown),
    ];
    assert_read_allows(
        &unknown,
        Quorum,
        D + SLOP + 30,
        D + SLOP + 40,
        &[0, 5],
        &[6],
    );
}

fn on(key: usize, op: Op) -> Op {
    Op { key, ..op }
}

/// The violations of `history` plus one read of `v` at `cl` in [t0, t1].
fn violations_with_read(history: &[Op], v: i64, cl: Consistency, t0: u64, t1: u64) -> Vec<String> {
    let mut h = history.to_vec();
    h.push(read(v, cl, t0, t1));
    check(&h, 3, &[]).violations
}

/// Asserts which values a read at `cl` in [t0, t1] may give.
#[track_caller]
fn assert_read_allows(history: &[Op], cl: Consistency, t0: u64, t1: u64, ok: &[i64], bad: &[i64]) {
    for &v in ok {
        let found = violations_with_read(history, v, cl, t0, t1);
        assert!(found.is_empty(), "{v} must be allowed: {found:?}");
    }
    for &v in bad {
        let found = violations_with_read(history, v, cl, t0, t1);
        assert_eq!(found.len(), 1, "{v} must be a violation: {found:?}");
    }
}

#[test]
fn a_read_must_see_acknowledged_overlapping_adds() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        read(0, Quorum, 20, 30),
    ];
    let r = check(&h, 3, &[]);
    assert_eq!(r.reads_checked, 1);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    // ONE + QUORUM do not overlap with RF 3: no lower bound.
    let h = vec![
        add(0, 5, One, 0, 10, Outcome::Ok(5)),
        read(0, Quorum, 20, 30),
    ];
    assert!(check(&h, 3, &[]).violations.is_empty());
    // ONE + ALL overlap.
    let h = vec![add(0, 5, One, 0, 10, Outcome::Ok(5)), read(0, All, 20, 30)];
    assert_eq!(check(&h, 3, &[]).violations.len(), 1);
}

#[test]
fn concurrent_and_unknown_adds_widen_the_bounds_by_sign() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        add(1, -3, Quorum, 15, 40, Outcome::Unknown),
        add(2, 7, Quorum, 25, 50, Outcome::Ok(12)),
        add(3, 100, Quorum, 26, 50, Outcome::Fail),
        read(2, Quorum, 20, 30),  // 5 - 3
        read(12, Quorum, 20, 30), // 5 + 7
        read(9, Quorum, 20, 30),  // 5 - 3 + 7
    ];
    assert!(
        check(&h, 3, &[]).violations.is_empty(),
        "{:?}",
        check(&h, 3, &[]).violations
    );
    for bad in [1, 13, 105] {
        let mut h2 = h.clone();
        h2.push(read(bad, Quorum, 20, 30));
        assert_eq!(
            check(&h2, 3, &[]).violations.len(),
            1,
            "{bad} must be a violation"
        );
    }
    // An add invoked after the read completed cannot be seen.
    let h = vec![
        add(0, 5, Quorum, 40, 50, Outcome::Ok(5)),
        read(5, All, 20, 30),
    ];
    assert_eq!(check(&h, 3, &[]).violations.len(), 1);
}

#[test]
fn finals_must_agree_and_hold_everything_acknowledged() {
    let h = vec![
        add(0, 5, One, 0, 10, Outcome::Ok(5)),
        add(1, 2, Quorum, 0, 10, Outcome::Unknown),
    ];
    assert!(
        check(&h, 3, &[(0, 0, 5), (1, 0, 5), (2, 0, 5)])
            .violations
            .is_empty()
    );
    assert!(
        check(&h, 3, &[(0, 0, 7), (1, 0, 7), (2, 0, 7)])
            .violations
            .is_empty()
    );
    assert_eq!(
        check(&h, 3, &[(0, 0, 5), (1, 0, 7), (2, 0, 5)])
            .violations
            .len(),
        1
    );
    assert_eq!(
        check(&h, 3, &[(0, 0, 4), (1, 0, 4), (2, 0, 4)])
            .violations
            .len(),
        3
    );
}

#[test]
fn a_read_after_an_acknowledged_quorum_reset_sees_only_the_adds_acknowledged_after_it() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        reset(Quorum, 20, 30, Outcome::Ok(0)),
        add(1, 7, Quorum, 40, 50, Outcome::Ok(7)),
    ];
    // The +5 was discarded by the reset; the +7 came after it.
    assert_read_allows(&h, Quorum, 60, 70, &[7], &[0, 5, 12]);
    // Between the reset and the +7: nothing, or the +7 if it landed first
    // (bounds are an interval: [0, 7]).
    assert_read_allows(&h, Quorum, 35, 45, &[0, 7], &[-1, 8, 12]);
}

#[test]
fn a_reset_concurrent_with_an_add_may_or_may_not_discard_it() {
    let h = vec![
        add(0, 5, Quorum, 0, 30, Outcome::Ok(5)),
        reset(Quorum, 10, 20, Outcome::Ok(0)),
    ];
    assert_read_allows(&h, Quorum, 40, 50, &[0, 5], &[-1, 6]);
    // An add that began before the reset ended is not certainly after it.
    let h = vec![
        reset(Quorum, 10, 20, Outcome::Ok(0)),
        add(0, 5, Quorum, 15, 30, Outcome::Ok(5)),
    ];
    assert_read_allows(&h, Quorum, 40, 50, &[0, 5], &[6]);
}

#[test]
fn an_unknown_reset_removes_the_lower_bound_and_discards_nothing() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        reset(Quorum, 20, 30, Outcome::Unknown),
        add(1, 3, Quorum, 40, 50, Outcome::Ok(3)),
    ];
    assert_read_allows(&h, Quorum, 60, 70, &[0, 3, 8], &[-1, 9]);
    // Even long after it: an unknown reset may still land.
    assert_read_allows(&h, All, 1000, 1010, &[0, 3, 8], &[9]);
}

#[test]
fn a_failed_reset_changes_nothing() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        reset(All, 20, 30, Outcome::Fail),
        add(1, 3, Quorum, 40, 50, Outcome::Ok(3)),
    ];
    assert_read_allows(&h, Quorum, 60, 70, &[8], &[0, 3, 5]);
}

#[test]
fn a_one_reset_and_a_quorum_add_do_not_overlap() {
    // The reset's epoch may be unknown to the add's leader, and win later.
    let h = vec![
        reset(One, 0, 10, Outcome::Ok(0)),
        add(0, 5, Quorum, 20, 30, Outcome::Ok(5)),
    ];
    assert_read_allows(&h, Quorum, 40, 50, &[0, 5], &[6]);
    // The reset's read of epochs may miss the add: it may survive.
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        reset(One, 20, 30, Outcome::Ok(0)),
    ];
    assert_read_allows(&h, All, 40, 50, &[0, 5], &[6]);
    // An add at ALL reaches the reset's replica: it is after the reset.
    let h = vec![
        reset(One, 0, 10, Outcome::Ok(0)),
        add(0, 5, All, 20, 30, Outcome::Ok(5)),
    ];
    assert_read_allows(&h, Quorum, 40, 50, &[5], &[0]);
    // A reset at ALL discards a ONE add, for a read at ONE too.
    let h = vec![
        add(0, 5, One, 0, 10, Outcome::Ok(5)),
        reset(All, 20, 30, Outcome::Ok(0)),
    ];
    assert_read_allows(&h, One, 40, 50, &[0], &[5]);
}

#[test]
fn a_read_that_may_miss_the_reset_may_see_what_it_discarded() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        reset(Quorum, 20, 30, Outcome::Ok(0)),
    ];
    // ONE + QUORUM: the read's replica may not have the new epoch yet.
    assert_read_allows(&h, One, 40, 50, &[0, 5], &[6]);
    // A read invoked before the reset completed may see either.
    assert_read_allows(&h, Quorum, 25, 45, &[0, 5], &[6]);
}

#[test]
fn finals_after_resets_hold_what_came_after_the_last_one() {
    let h = vec![
        add(0, 5, Quorum, 0, 10, Outcome::Ok(5)),
        reset(Quorum, 20, 30, Outcome::Ok(0)),
        add(1, 2, Quorum, 40, 50, Outcome::Ok(2)),
        add(2, -1, One, 40, 50, Outcome::Unknown),
    ];
    let all = |v: i64| [(0, 0, v), (1, 0, v), (2, 0, v)];
    for v in [1, 2] {
        let r = check(&h, 3, &all(v));
        assert!(r.violations.is_empty(), "{v}: {:?}", r.violations);
        assert_eq!(r.finals[&0], (Some(v), 1, 2));
    }
    for v in [0, 5, 6, 7] {
        assert_eq!(check(&h, 3, &all(v)).violations.len(), 3, "{v}");
    }
    // An unknown reset at the end: anything from nothing to everything.
    let mut h2 = h.clone();
    h2.push(reset(All, 60, 70, Outcome::Unknown));
    let r = check(&h2, 3, &all(0));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.finals[&0], (Some(0), -1, 2));
}

#[test]
fn keys_without_resets_keep_the_old_bounds() {
    let h = vec![
        on(0, add(0, 5, Quorum, 0, 10, Outcome::Ok(5))),
        on(1, add(0, 5, Quorum, 0, 10, Outcome::Ok(5))),
        on(1, reset(Quorum, 12, 14, Outcome::Unknown)),
        on(0, read(0, Quorum, 20, 30)),
        on(1, read(0, Quorum, 20, 30)),
    ];
    let r = check(&h, 3, &[]);
    assert_eq!(r.reads_checked, 2);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert!(r.violations[0].contains("key 0"), "{:?}", r.violations);
}

/// The rules of the module docs, written out pair by pair: `[lo, hi]` of
/// a read `q` over one key's `ops`.
fn rules(ops: &[Op], rf: usize, q: &bounds::Query) -> (i64, i64) {
    let overlap = |a: Consistency, b: Consistency| a.required(rf) + b.required(rf) > rf;
    let ok = |o: &Op| matches!(o.outcome, Outcome::Ok(_));
    let resets: Vec<&Op> = ops.iter().filter(|o| o.kind == Kind::Reset).collect();
    let certainly_before =
        |r: &Op, a: &Op| ok(r) && r.complete_ns < a.invoke_ns && overlap(r.cl, a.cl);
    let certainly_discards = |r: &Op, a: &Op| {
        ok(a)
            && ok(r)
            && a.complete_ns < r.invoke_ns
            && overlap(a.cl, r.cl)
            && r.complete_ns < q.invoke_ns
            && overlap(r.cl, q.cl)
    };
    let (mut lo, mut hi) = (0, 0);
    for a in ops {
        let Kind::Add(d) = a.kind else { continue };
        let must = ok(a)
            && a.complete_ns < q.invoke_ns
            && overlap(a.cl, q.cl)
            && resets
                .iter()
                .filter(|r| r.outcome != Outcome::Fail && r.invoke_ns <= q.complete_ns)
                .all(|r| certainly_before(r, a));
        let may = a.outcome != Outcome::Fail
            && a.invoke_ns <= q.complete_ns
            && !resets.iter().any(|r| certainly_discards(r, a));
        if must {
            *(if d > 0 { &mut lo } else { &mut hi }) += d;
        }
        if may {
            *(if d > 0 { &mut hi } else { &mut lo }) += d;
        }
    }
    (lo, hi)
}

fn random_history(rng: &mut SmallRng, ops: usize, reset_share: f64) -> Vec<Op> {
    let levels = [One, Quorum, All];
    let outcomes = [
        Outcome::Ok(0),
        Outcome::Ok(0),
        Outcome::Fail,
        Outcome::Unknown,
    ];
    (0..ops)
        .map(|i| {
            let t0 = rng.random_range(0..200);
            let kind = match rng.random_range(0.0..1.0) {
                x if x < reset_share => Kind::Reset,
                x if x < 0.65 => Kind::Add(rng.random_range(-5..=9)),
                _ => Kind::Read,
            };
            let outcome = if kind == Kind::Read {
                Outcome::Ok(0)
            } else {
                outcomes[rng.random_range(0..outcomes.len())]
            };
            Op {
                process: i,
                key: 0,
                kind,
                cl: levels[rng.random_range(0..3)],
                node: 0,
                invoke_ns: t0,
                complete_ns: t0 + rng.random_range(0..40),
                outcome,
            }
        })
        .collect()
}

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
fn the_fast_bounds_follow_the_rules_on_random_histories() {
    let mut rng = SmallRng::seed_from_u64(23);
    for round in 0..600 {
        let rf = [1, 2, 3, 3][round % 4];
        let share = [0.0, 0.02, 0.1, 0.3][round / 4 % 4];
        let len = rng.random_range(1..60);
        let ops = random_history(&mut rng, len, share);
        let refs: Vec<&Op> = ops.iter().collect();
        let mut queries: Vec<bounds::Query> = ops
            .iter()
            .filter(|o| o.kind == Kind::Read)
            .map(bounds::Query::of)
            .collect();
        queries.push(bounds::Query::after_everything());
        let events = epochs::events(&refs, rf, SLOP);
        let fast = bounds::KeyIndex::new(&refs, &events, rf).bounds(&queries);
        for (q, got) in queries.iter().zip(fast) {
            assert_eq!(
                got,
                rules(&ops, rf, q),
                "rf {rf}, read {q:?} over:\n{}",
                ops.iter().map(|o| format!("  {o}\n")).collect::<String>()
            );
        }
    }
}

#[test]
fn a_million_operations_with_resets_check_in_seconds() {
    let mut rng = SmallRng::seed_from_u64(1);
    let levels = [One, Quorum, All];
    let mut t = 0u64;
    let history: Vec<Op> = (0..1_000_000)
        .map(|i| {
            t += rng.random_range(0..20_000);
            let kind = match rng.random_range(0..1000) {
                0 => Kind::Reset,
                x if x < 600 => Kind::Add(rng.random_range(-5..=10)),
                _ => Kind::Read,
            };
            // Unknown adds keep every read of 0 within bounds: the time
            // of the check is the point here, not its verdicts.
            let outcome = match kind {
                Kind::Add(_) if rng.random_ratio(1, 2) => Outcome::Unknown,
                Kind::Add(_) => Outcome::Ok(0),
                _ => Outcome::Ok(0),
            };
            Op {
                process: i % 8,
                key: rng.random_range(0..4),
                kind,
                cl: levels[rng.random_range(0..3)],
                node: i % 3,
                invoke_ns: t,
                complete_ns: t + rng.random_range(0..2_000_000),
                outcome,
            }
        })
        .collect();
    let started = std::time::Instant::now();
    let report = check(&history, 3, &[]);
    let took = started.elapsed();
    println!(
        "checked {} reads in {took:?}: {} violations",
        report.reads_checked,
        report.violations.len()
    );
    assert!(report.reads_checked > 300_000);
    // Seconds even unoptimised; a quadratic check would take hours.
    assert!(took < std::time::Duration::from_secs(60), "{took:?}");
}

mod exact_rule {
    use tally_net::once::OpId;

    use super::super::exact::{Ended, IdAdd, check_exact};

    fn id_add(seq: u64, key: usize, delta: i64, ended: Ended) -> IdAdd {
        IdAdd {
            key,
            id: OpId::new(b"c1".to_vec(), seq).unwrap(),
            delta,
            ended,
            attempts: 1,
            raced: false,
            resent: false,
            again: Vec::new(),
        }
    }

    /// Every node of three read `values[key]` at the end.
    fn finals(values: &[i64]) -> Vec<(usize, usize, i64)> {
        (0..3)
            .flat_map(|node| values.iter().enumerate().map(move |(k, &v)| (node, k, v)))
            .collect()
    }

    fn history() -> Vec<IdAdd> {
        vec![
            id_add(1, 0, 5, Ended::Acked(5)),
            id_add(2, 0, -2, Ended::Acked(3)),
            id_add(3, 1, 7, Ended::Acked(7)),
            // Id 2 recorded again (as a careless client might): one add.
            id_add(2, 0, -2, Ended::Acked(3)),
        ]
    }

    #[test]
    fn each_acknowledged_id_counts_once() {
        let report = check_exact(&history(), 3, &finals(&[3, 7, 0]));
        assert_eq!(report.violations, Vec::<String>::new());
        assert_eq!(report.sums, vec![(0, 3), (1, 7), (2, 0)]);
    }

    #[test]
    fn a_double_count_is_flagged() {
        // Id 1 applied twice, seen by one node: 3 + 5.
        let mut values = finals(&[3, 7, 0]);
        values[3] = (1, 0, 8);
        let report = check_exact(&history(), 3, &values);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
        assert!(
            report.violations[0].starts_with("exact key 0 via n2: 8, but"),
            "{:?}",
            report.violations
        );
        // Everywhere, as when the double count reached every replica.
        let report = check_exact(&history(), 3, &finals(&[8, 7, 0]));
        assert_eq!(report.violations.len(), 3, "{:?}", report.violations);
    }

    #[test]
    fn a_lost_acknowledged_add_is_flagged() {
        let report = check_exact(&history(), 3, &finals(&[3, 0, 0]));
        assert_eq!(report.violations.len(), 3, "{:?}", report.violations);
        assert!(report.violations.iter().all(|v| v.contains("(-7)")));
    }

    #[test]
    fn an_add_that_never_knew_is_a_harness_failure() {
        let mut adds = history();
        adds.push(id_add(4, 1, 2, Ended::Unknown));
        let report = check_exact(&adds, 3, &finals(&[3, 7, 0]));
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
        assert!(report.violations[0].starts_with("harness failure: 1 adds"));
        // Known through another record of the same id: judged as acknowledged.
        adds.push(id_add(4, 1, 2, Ended::Acked(9)));
        let report = check_exact(&adds, 3, &finals(&[3, 9, 0]));
        assert_eq!(report.violations, Vec::<String>::new());
    }

    #[test]
    fn a_duplicate_must_answer_the_original_value() {
        let mut adds = history();
        adds[0].again = vec![Ended::Acked(5), Ended::Unknown, Ended::Acked(10)];
        let report = check_exact(&adds, 3, &finals(&[3, 7, 0]));
        assert_eq!(
            report.violations,
            vec!["id c1:1 answered 5, then 10 when sent again".to_string()]
        );
        adds[0].again = vec![Ended::Refused("id conflict".into())];
        let report = check_exact(&adds, 3, &finals(&[3, 7, 0]));
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    }

    #[test]
    fn refusals_and_confused_records_are_flagged() {
        let mut adds = history();
        adds.push(id_add(5, 2, 4, Ended::Refused("invalid".into())));
        adds.push(id_add(3, 1, 8, Ended::Acked(8)));
        let report = check_exact(&adds, 3, &finals(&[3, 7, 0]));
        assert_eq!(report.violations.len(), 2, "{:?}", report.violations);
        assert!(report.violations[0].contains("recorded for two adds"));
        assert!(report.violations[1].contains("refused for good: invalid"));
    }

    #[test]
    fn every_key_needs_a_final_read() {
        let report = check_exact(&history(), 3, &finals(&[3, 7]));
        assert_eq!(
            report.violations,
            vec!["exact key 2: no final read to judge".to_string()]
        );
    }
}
