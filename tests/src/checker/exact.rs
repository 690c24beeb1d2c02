//! The exact rule, for keys that only ever get adds with operation ids.
//!
//! An id makes a retry safe, so a client can retry an add whose outcome it
//! does not know until it does know: acknowledged (applied once, whatever
//! the number of sends) or refused (never applied). Once every add of a
//! key is known, its value is not an interval but one number: the sum of
//! the deltas of its distinct acknowledged ids. After healing, every
//! node's read at ALL must equal it; one more means an id counted twice,
//! one less an acknowledged add lost.
//!
//! The rules, per distinct id (records of one id are one add):
//!
//! - an acknowledged id counts its delta once, and every later answer for
//!   it (a racing send, a send after the acknowledgement) must be the
//!   value of the first acknowledgement;
//! - a refused id counts nothing, and is itself a violation: the workload
//!   uses fresh ids with their own delta on small values, which a correct
//!   node never refuses for good;
//! - an id that never knew is a harness failure (its client stopped
//!   retrying too early), reported as such: the key's sum cannot be judged.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;

use tally_net::once::OpId;

/// How an add with an id ended, as its client finally knew it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Acknowledged; the value its first acknowledgement answered.
    Acked(i64),
    /// Refused for good (invalid, overflow, id conflict): never applied.
    Refused(String),
    /// Never known: the client gave up.
    Unknown,
}

/// One logical add with an id, recorded once with its final outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdAdd {
    /// The exact key (an index into the exact keys).
    pub key: usize,
    /// Its operation id.
    pub id: OpId,
    /// Its delta, the same in every send.
    pub delta: i64,
    /// How it ended.
    pub ended: Ended,
    /// Sends until it knew (1: no retry), the racing twin not included.
    pub attempts: u32,
    /// Whether its first send raced a twin through another node.
    pub raced: bool,
    /// Whether it was sent again after its acknowledgement, on purpose.
    pub resent: bool,
    /// What the same id answered again: the racing twin, and the send
    /// after the acknowledgement. `Unknown` ones tell nothing.
    pub again: Vec<Ended>,
}

/// What the workers did: every logical add once.
#[derive(Debug, Default)]
pub struct ExactLog {
    /// The adds, each with its final outcome.
    pub adds: Vec<IdAdd>,
}

impl ExactLog {
    /// Merges another worker's log into this one.
    pub fn absorb(&mut self, other: ExactLog) {
        self.adds.extend(other.adds);
    }

    /// Adds, retries (attempts past the first), racing adds, adds sent again.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let retries = self.adds.iter().map(|a| a.attempts.saturating_sub(1));
        (
            self.adds.len(),
            retries.map(|r| r as usize).sum(),
            self.adds.iter().filter(|a| a.raced).count(),
            self.adds.iter().filter(|a| a.resent).count(),
        )
    }
}

impl fmt::Display for IdAdd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raced = if self.raced { ", raced" } else { "" };
        let resent = if self.resent { ", resent" } else { "" };
        write!(
            f,
            "exact add {:+} key {} id {} -> {:?} after {} attempts{raced}{resent}",
            self.delta, self.key, self.id, self.ended, self.attempts
        )?;
        if !self.again.is_empty() {
            write!(f, ", answered again {:?}", self.again)?;
        }
        Ok(())
    }
}

/// The exact verdict.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExactReport {
    /// Every violation, harness failures included.
    pub violations: Vec<String>,
    /// Per exact key, the sum of its distinct acknowledged ids.
    pub sums: Vec<(usize, i64)>,
}

/// Judges `keys` exact keys: `adds` as their clients knew them, `finals`
/// the reads at ALL through every node after healing, `(node, key, value)`.
pub fn check_exact(adds: &[IdAdd], keys: usize, finals: &[(usize, usize, i64)]) -> ExactReport {
    let (distinct, mut per_id) = distinct_ids(adds);
    let mut sums = vec![0i64; keys];
    let mut unknown: Vec<&IdAdd> = Vec::new();
    for add in distinct {
        assert!(add.key < keys, "{add}: an exact key out of 0..{keys}");
        match &add.ended {
            Ended::Acked(v) => {
                // Saturating: a sum past i64 is a violation the finals show.
                sums[add.key] = sums[add.key].saturating_add(add.delta);
                per_id.extend(answers_again(add, *v));
            }
            Ended::Refused(why) => per_id.push(format!(
                "id {} to exact key {} refused for good: {why}",
                add.id, add.key
            )),
            Ended::Unknown => unknown.push(add),
        }
    }
    // The headlines first: whether the run could be judged, and the values.
    let mut violations = Vec::new();
    if let Some(first) = unknown.first() {
        violations.push(format!(
            "harness failure: {} adds with ids never knew their outcome, so their keys \
             cannot be judged exactly; the first: {first}",
            unknown.len()
        ));
    }
    for (key, &want) in sums.iter().enumerate() {
        violations.extend(final_values(key, want, finals));
    }
    violations.extend(per_id);
    ExactReport {
        violations,
        sums: sums.into_iter().enumerate().collect(),
    }
}

/// The adds, each id once, in id order; records of one id that disagree
/// on what the add was are a harness bug.
fn distinct_ids(adds: &[IdAdd]) -> (Vec<&IdAdd>, Vec<String>) {
    let mut by_id = BTreeMap::new();
    let mut violations = Vec::new();
    for add in adds {
        match by_id.entry((add.id.client.as_slice(), add.id.seq)) {
            Entry::Vacant(e) => {
                e.insert(add);
            }
            Entry::Occupied(e) if (e.get().key, e.get().delta) != (add.key, add.delta) => {
                violations.push(format!(
                    "harness failure: id {} recorded for two adds: {} and {add}",
                    add.id,
                    e.get()
                ));
            }
            // The same add recorded twice: still one add, known if either knew.
            Entry::Occupied(mut e) => match (&e.get().ended, &add.ended) {
                (Ended::Unknown, _) => {
                    e.insert(add);
                }
                (Ended::Acked(a), Ended::Acked(b)) if a != b => violations.push(format!(
                    "id {} answered {a}, then {b} when sent again",
                    add.id
                )),
                _ => {}
            },
        }
    }
    (by_id.into_values().collect(), violations)
}

/// What is wrong with the id's other answers, its acknowledgement having
/// answered `acked`: another value, or a refusal.
fn answers_again(add: &IdAdd, acked: i64) -> Vec<String> {
    add.again
        .iter()
        .filter_map(|a| match a {
            Ended::Acked(v) if *v != acked => Some(format!(
                "id {} answered {acked}, then {v} when sent again",
                add.id
            )),
            Ended::Refused(why) => Some(format!(
                "id {} answered {acked}, then was refused when sent again: {why}",
                add.id
            )),
            _ => None,
        })
        .collect()
}

/// Every final read of `key` must be `want`, and there must be one.
fn final_values(key: usize, want: i64, finals: &[(usize, usize, i64)]) -> Vec<String> {
    let seen: Vec<(usize, i64)> = finals
        .iter()
        .filter(|f| f.1 == key)
        .map(|f| (f.0, f.2))
        .collect();
    if seen.is_empty() {
        return vec![format!("exact key {key}: no final read to judge")];
    }
    seen.into_iter()
        .filter(|&(_, v)| v != want)
        .map(|(node, v)| {
            format!(
                "exact key {key} via n{}: {v}, but its distinct acknowledged ids sum to {want} \
                 ({:+})",
                node + 1,
                i128::from(v) - i128::from(want)
            )
        })
        .collect()
}
