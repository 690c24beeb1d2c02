//! A Jepsen-style checker for counter histories.
//!
//! Every operation is recorded with when it was invoked and when it
//! completed, and how it ended: `Ok` (with the value read or seen),
//! `Fail` (certainly not applied: unavailable, invalid, overflow) or
//! `Unknown` (timeout, lost connection, storage error: it may or may not
//! have been applied).
//!
//! For each key, a read at level `r` that succeeded with value `v` must lie
//! within bounds built per sign, since deltas may be negative:
//!
//! - it **must** see every add acknowledged before the read was invoked at a
//!   level `w` with `w + r > RF` (the write and read sets overlap);
//! - it **may** see any add invoked before the read completed that did not
//!   certainly fail.
//!
//! ```text
//! lo = Σ must-see positive + Σ may-see negative
//! hi = Σ may-see positive  + Σ must-see negative
//! ```
//!
//! Reads at ONE (whose set may miss a QUORUM write) get only the upper
//! bound. After every fault is healed and hints are delivered, a read at
//! ALL through every node must give the same value, within
//! `[Σ acknowledged + Σ unknown negative, Σ acknowledged + Σ unknown positive]`.
//!
//! Bounds come from prefix sums over the adds sorted by completion and by
//! invocation, so a history of a million operations checks in seconds.

use std::collections::BTreeMap;
use std::fmt;

use tally_net::Consistency;

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Succeeded; the value read, or the value the leader saw.
    Ok(i64),
    /// Certainly not applied.
    Fail,
    /// May or may not have been applied.
    Unknown,
}

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An add of this amount.
    Add(i64),
    /// A read.
    Read,
}

/// One operation of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Which worker issued it.
    pub process: usize,
    /// The counter (an index into the workload's keys).
    pub key: usize,
    /// Add or read.
    pub kind: Kind,
    /// Consistency level.
    pub cl: Consistency,
    /// The node it was sent to.
    pub node: usize,
    /// Nanoseconds since the run began, at invocation.
    pub invoke_ns: u64,
    /// Nanoseconds since the run began, at completion.
    pub complete_ns: u64,
    /// How it ended.
    pub outcome: Outcome,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            Kind::Add(d) => format!("add {d:+}"),
            Kind::Read => "read".to_string(),
        };
        write!(
            f,
            "p{} {what} key {} at {} via n{} [{:.3} s .. {:.3} s] -> {:?}",
            self.process,
            self.key,
            self.cl,
            self.node + 1,
            self.invoke_ns as f64 / 1e9,
            self.complete_ns as f64 / 1e9,
            self.outcome
        )
    }
}

/// The verdict.
#[derive(Debug, Default)]
pub struct Report {
    /// Reads whose bounds were checked.
    pub reads_checked: usize,
    /// Every violation, described with the operations involved.
    pub violations: Vec<String>,
    /// Per key: final value agreed by all nodes (if they agreed), and the bounds.
    pub finals: BTreeMap<usize, (Option<i64>, i64, i64)>,
}

fn level(cl: Consistency, rf: usize) -> usize {
    cl.required(rf)
}

/// Prefix sums of positive and negative deltas over adds ordered by a time.
struct Prefix {
    times: Vec<u64>,
    pos: Vec<i64>,
    neg: Vec<i64>,
}

impl Prefix {
    fn new(mut adds: Vec<(u64, i64)>) -> Prefix {
        adds.sort_unstable_by_key(|a| a.0);
        let mut p = Prefix {
            times: Vec::with_capacity(adds.len()),
            pos: vec![0],
            neg: vec![0],
        };
        for (t, d) in adds {
            p.times.push(t);
            p.pos.push(p.pos.last().copied().unwrap_or(0) + d.max(0));
            p.neg.push(p.neg.last().copied().unwrap_or(0) + d.min(0));
        }
        p
    }

    /// Sums over adds with time strictly before `t`.
    fn before(&self, t: u64) -> (i64, i64) {
        let n = self.times.partition_point(|&x| x < t);
        (self.pos[n], self.neg[n])
    }
}

/// Checks a history. `finals` holds the reads at ALL through every node
/// after healing: `(node, key, value)`.
pub fn check(history: &[Op], rf: usize, finals: &[(usize, usize, i64)]) -> Report {
    let mut report = Report::default();
    let mut by_key: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key).or_default().push(op);
    }
    let keys: Vec<usize> = by_key
        .keys()
        .copied()
        .chain(finals.iter().map(|f| f.1))
        .collect();
    for key in keys {
        if report.finals.contains_key(&key) {
            continue;
        }
        let ops = by_key.get(&key).cloned().unwrap_or_default();
        // Must-see: acknowledged adds by completion time, one prefix per level.
        let levels = [Consistency::One, Consistency::Quorum, Consistency::All];
        let must: Vec<(Consistency, Prefix)> = levels
            .iter()
            .map(|&w| {
                let adds = ops
                    .iter()
                    .filter_map(|o| match (o.kind, o.outcome) {
                        (Kind::Add(d), Outcome::Ok(_)) if o.cl == w => Some((o.complete_ns, d)),
                        _ => None,
                    })
                    .collect();
                (w, Prefix::new(adds))
            })
            .collect();
        // May-see: adds not certainly failed, by invocation time.
        let may = Prefix::new(
            ops.iter()
                .filter_map(|o| match (o.kind, o.outcome) {
                    (Kind::Add(d), Outcome::Ok(_) | Outcome::Unknown) => Some((o.invoke_ns, d)),
                    _ => None,
                })
                .collect(),
        );
        for read in ops.iter().filter(|o| o.kind == Kind::Read) {
            let Outcome::Ok(v) = read.outcome else {
                continue;
            };
            let r = level(read.cl, rf);
            let (must_pos, must_neg) = must
                .iter()
                .filter(|(w, _)| level(*w, rf) + r > rf)
                .map(|(_, p)| p.before(read.invoke_ns))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            // Adds invoked at the read's completion instant could still count.
            let (may_pos, may_neg) = may.before(read.complete_ns.saturating_add(1));
            let (lo, hi) = (must_pos + may_neg, may_pos + must_neg);
            report.reads_checked += 1;
            if v < lo || v > hi {
                report.violations.push(explain(read, v, lo, hi, &ops));
            }
        }
        // Final: everything acknowledged, plus what may have been applied.
        let (mut acked, mut unk_pos, mut unk_neg) = (0i64, 0i64, 0i64);
        for o in &ops {
            match (o.kind, o.outcome) {
                (Kind::Add(d), Outcome::Ok(_)) => acked += d,
                (Kind::Add(d), Outcome::Unknown) if d > 0 => unk_pos += d,
                (Kind::Add(d), Outcome::Unknown) => unk_neg += d,
                _ => {}
            }
        }
        let (lo, hi) = (acked + unk_neg, acked + unk_pos);
        let seen: Vec<(usize, i64)> = finals
            .iter()
            .filter(|f| f.1 == key)
            .map(|f| (f.0, f.2))
            .collect();
        let agreed = seen
            .first()
            .map(|f| f.1)
            .filter(|v| seen.iter().all(|s| s.1 == *v));
        if !seen.is_empty() && agreed.is_none() {
            report.violations.push(format!(
                "key {key}: nodes disagree after healing: {seen:?} (node, value)"
            ));
        }
        for (node, v) in &seen {
            if *v < lo || *v > hi {
                report.violations.push(format!(
                    "key {key}: final read at ALL via n{} = {v}, outside [{lo}, {hi}] (acknowledged sum {acked})",
                    node + 1
                ));
            }
        }
        report.finals.insert(key, (agreed, lo, hi));
    }
    report
}

/// Describes a bad read with the operations around it.
fn explain(read: &Op, v: i64, lo: i64, hi: i64, ops: &[&Op]) -> String {
    let mut s = format!("{read}: value {v} outside [{lo}, {hi}]");
    let near: Vec<&&Op> = ops
        .iter()
        .filter(|o| matches!(o.kind, Kind::Add(_)) && o.invoke_ns <= read.complete_ns)
        .rev()
        .take(8)
        .collect();
    s.push_str("\n    latest adds invoked before it completed:");
    for o in near.into_iter().rev() {
        s.push_str(&format!("\n      {o}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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

    use Consistency::{All, One, Quorum};

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
}
