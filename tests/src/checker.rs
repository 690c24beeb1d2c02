//! A Jepsen-style checker for counter histories.
//!
//! Every operation is recorded with when it was invoked and when it
//! completed, and how it ended: `Ok` (with the value read or seen),
//! `Fail` (certainly not applied: unavailable, invalid, overflow) or
//! `Unknown` (timeout, lost connection, storage error: it may or may not
//! have been applied).
//!
//! # The rules
//!
//! With `N` the replication factor, `w(op)` the replicas an operation's
//! level needs (an add at ONE counts as 1, conservatively, though its
//! leader waits for a second answer) and `overlap(a, b) := w(a) + w(b) > N`
//! (their replica sets share one):
//!
//! - a reset `R` is **certainly before** an add `A` iff `R` is Ok,
//!   `R.complete < A.invoke` and `overlap(R, A)`: `A`'s leader knew `R`'s
//!   epoch. An Unknown reset is never certainly before anything;
//! - `R` **certainly discards** `A` for a read `Rd` iff `A` and `R` are
//!   Ok, `A.complete < R.invoke`, `overlap(A, R)` (`R`'s read of epochs saw
//!   `A`'s), `R.complete < Rd.invoke` and `overlap(R, Rd)` (`Rd` sees
//!   `R`'s epoch).
//!
//! A read `Rd` that succeeded with value `v` must lie within bounds built
//! per sign, since deltas may be negative:
//!
//! - it **must** see `A` iff `A` is Ok, `A.complete < Rd.invoke`,
//!   `overlap(A, Rd)`, and every reset not certainly failed that was
//!   invoked before `Rd` completed is certainly before `A`;
//! - it **may** see `A` iff `A` is not Fail, `A.invoke <= Rd.complete`,
//!   and no reset certainly discards `A`.
//!
//! ```text
//! lo = Σ must-see positive + Σ may-see negative
//! hi = Σ may-see positive  + Σ must-see negative
//! ```
//!
//! Keys without resets thus keep the plain rules (must see every
//! overlapping acknowledged add, may see every add not certainly failed);
//! one Unknown reset removes a key's lower bound for good, since it may
//! still land. After every fault is healed and hints are delivered, a read
//! at ALL through every node must give the same value, within the bounds
//! of a read invoked after everything.
//!
//! Bounds come from prefix sums over the adds sorted by completion and by
//! invocation, running aggregates over the resets, and one offline Fenwick
//! pass for the adds that must be seen after resets (`bounds`,
//! `fenwick`), so a history of a million operations checks in seconds.
//!
//! Keys that only get adds with operation ids are judged by [`exact`]
//! instead: their clients retry until they know, so no interval is needed.

mod bounds;
pub mod epochs;
pub mod exact;
mod fenwick;
pub mod folds;
pub mod linear;
pub mod lists;

use std::collections::BTreeMap;
use std::fmt;

use tally_net::Consistency;

use bounds::{KeyIndex, Query};

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Succeeded; the value read, the value the leader saw, or 0 (a reset).
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
    /// A reset to zero (`DEL`).
    Reset,
    /// A SET to this value.
    Set(i64),
    /// An EXPIRE whose deadline is this many ns since the run began; its
    /// outcome `Ok(1)` if it gave the counter that deadline, `Ok(0)` if
    /// the counter did not exist (it changed nothing).
    Expire {
        /// The deadline.
        at_ns: u64,
    },
}

/// One operation of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Which worker issued it.
    pub process: usize,
    /// The counter (an index into the workload's keys).
    pub key: usize,
    /// Add, read or reset.
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
            Kind::Reset => "reset".to_string(),
            Kind::Set(v) => format!("set {v}"),
            Kind::Expire { at_ns } => format!("expire at {:.3} s", at_ns as f64 / 1e9),
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

/// Checks a history. `finals` holds the reads at ALL through every node
/// after healing: `(node, key, value)`.
pub fn check(history: &[Op], rf: usize, finals: &[(usize, usize, i64)]) -> Report {
    check_skewed(history, rf, finals, 0)
}

/// [`check`] of a run where a node's clock was set `skew_ns` off (either
/// way) on purpose: a deadline a client gave relative to now (`PEXPIRE`)
/// lands that much off the checker's reading of it, and that node ends
/// an epoch by its own clock, so each deadline is an event within
/// [`epochs::SLOP_NS`] plus `skew_ns` of its instant.
pub fn check_skewed(
    history: &[Op],
    rf: usize,
    finals: &[(usize, usize, i64)],
    skew_ns: u64,
) -> Report {
    let mut report = Report::default();
    let mut by_key: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key).or_default().push(op);
    }
    for f in finals {
        by_key.entry(f.1).or_default();
    }
    for (&key, ops) in &by_key {
        let events = epochs::events(ops, rf, epochs::SLOP_NS + skew_ns);
        let index = KeyIndex::new(ops, &events, rf);
        let bases = epochs::Bases::new(&events, rf);
        let reads: Vec<(&Op, i64)> = ops
            .iter()
            .filter(|o| o.kind == Kind::Read)
            .filter_map(|o| match o.outcome {
                Outcome::Ok(v) => Some((*o, v)),
                _ => None,
            })
            .collect();
        let mut queries: Vec<Query> = reads.iter().map(|(o, _)| Query::of(o)).collect();
        queries.push(Query::after_everything());
        let bounds: Vec<(i64, i64)> = index
            .bounds(&queries)
            .into_iter()
            .zip(&queries)
            .map(|((lo, hi), q)| {
                let (min, max) = bases.range(q);
                (lo.saturating_add(min), hi.saturating_add(max))
            })
            .collect();
        let mut writes: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|o| o.kind != Kind::Read)
            .collect();
        writes.sort_by_key(|o| o.invoke_ns);
        let resets: Vec<&Op> = writes
            .iter()
            .copied()
            .filter(|o| !matches!(o.kind, Kind::Add(_)))
            .collect();
        for (&(read, v), &(lo, hi)) in reads.iter().zip(&bounds) {
            report.reads_checked += 1;
            if v < lo || v > hi {
                let why = explain(read, v, (lo, hi), &writes, &resets);
                report.violations.push(why);
            }
        }
        let (lo, hi) = bounds.last().copied().unwrap_or((0, 0));
        check_finals(&mut report, key, finals, (lo, hi), index.has_resets());
    }
    report
}

/// The final reads of `key`: every node agrees, within `[lo, hi]`.
fn check_finals(
    report: &mut Report,
    key: usize,
    finals: &[(usize, usize, i64)],
    (lo, hi): (i64, i64),
    resets: bool,
) {
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
    let after = if resets { " (a key with resets)" } else { "" };
    for (node, v) in &seen {
        if *v < lo || *v > hi {
            report.violations.push(format!(
                "key {key}: final read at ALL via n{} = {v}, outside [{lo}, {hi}]{after}",
                node + 1
            ));
        }
    }
    report.finals.insert(key, (agreed, lo, hi));
}

/// Describes a bad read with the writes invoked before it completed;
/// `writes` and `resets` are the key's, by invocation.
fn explain(read: &Op, v: i64, (lo, hi): (i64, i64), writes: &[&Op], resets: &[&Op]) -> String {
    let mut s = format!("{read}: value {v} outside [{lo}, {hi}]");
    let resets_before = resets.partition_point(|o| o.invoke_ns <= read.complete_ns);
    if let Some(last) = resets_before.checked_sub(1).map(|i| resets[i]) {
        s.push_str(&format!(
            "\n    {resets_before} resets invoked before it completed, the latest: {last}"
        ));
    }
    let before = writes.partition_point(|o| o.invoke_ns <= read.complete_ns);
    s.push_str("\n    latest writes invoked before it completed:");
    for o in &writes[before.saturating_sub(8)..before] {
        s.push_str(&format!("\n      {o}"));
    }
    s
}

#[cfg(test)]
mod tests;
