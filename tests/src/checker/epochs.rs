//! What resets, SETs and deadlines mean for the bounds: each ends the
//! counter's epoch, and the next epoch starts at a base (0, or the SET's
//! value). A read's value is `base + Σ adds in its epoch`.
//!
//! - A **reset** (`DEL`) and a **SET v** are epoch events in their own
//!   interval, with base 0 and `v`.
//! - An **EXPIRE** with deadline `D` ends the epoch at `D` (the wall clock
//!   every node reads, within [`SLOP_NS`]), not when it is sent: an Ok one
//!   is an event in `[max(D - SLOP, invoke), max(D + SLOP, complete)]`,
//!   at its level (a replica that knows the deadline tells a leader that
//!   missed it: its add is made again in the next epoch). It certainly
//!   happened only if it was acknowledged before `D` and nothing else
//!   could change the epoch or the deadline before `D` (another EXPIRE,
//!   a reset or SET not certainly before it). An Unknown one may land at
//!   any time, like an Unknown reset.
//!
//! The adds of the epoch a read sees are bounded by the reset rules of
//! [`super`], every event taken as a reset, except that an event that may
//! not have happened never discards adds. Its base is one of the
//! **candidates**: the events (and the first epoch, base 0) invoked before
//! the read completed that no certain event certainly replaced for it: `E`
//! is replaced for `Rd` by a certain `E2` iff `E` is Ok, `E.complete <
//! E2.invoke`, `overlap(E, E2)`, `E2.complete < Rd.invoke` and
//! `overlap(E2, Rd)`. So `lo += min(bases)`, `hi += max(bases)`.

use tally_net::Consistency;

use super::bounds::Query;
use super::{Kind, Op, Outcome};

/// How far apart the nodes' and the checker's readings of one wall-clock
/// instant may be (one machine: ms rounding and scheduling).
pub const SLOP_NS: u64 = 25_000_000;

/// An operation that ends the counter's epoch, as the bounds see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Event {
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub cl: Consistency,
    pub outcome: Outcome,
    /// The value the next epoch starts at.
    pub base: i64,
    /// Whether it certainly happened if it is Ok (an Ok deadline may
    /// have been moved or made moot before it passed).
    pub certain: bool,
}

impl Event {
    /// Whether it certainly happened in its interval.
    pub(super) fn sure(&self) -> bool {
        self.certain && matches!(self.outcome, Outcome::Ok(_))
    }
}

/// Whether `a` certainly happened before `b` began: `a` Ok, completed
/// before `b` was invoked, at levels that share a replica.
fn before(a: &Op, b: &Op, rf: usize) -> bool {
    matches!(a.outcome, Outcome::Ok(_))
        && a.complete_ns < b.invoke_ns
        && a.cl.required(rf) + b.cl.required(rf) > rf
}

/// The epoch events of one key's operations, by invocation; a deadline
/// is read by every node within `slop_ns` of the checker's clock
/// ([`SLOP_NS`], more where a node's clock is skewed on purpose).
pub(super) fn events(ops: &[&Op], rf: usize, slop_ns: u64) -> Vec<Event> {
    let mut out = Vec::new();
    // An EXPIRE of a counter that did not exist changed nothing.
    let changed = |o: &&&Op| !matches!((o.kind, o.outcome), (Kind::Expire { .. }, Outcome::Ok(0)));
    for op in ops
        .iter()
        .filter(|o| o.outcome != Outcome::Fail)
        .filter(changed)
    {
        let plain = |base| Event {
            invoke_ns: op.invoke_ns,
            complete_ns: op.complete_ns,
            cl: op.cl,
            outcome: op.outcome,
            base,
            certain: true,
        };
        match op.kind {
            Kind::Reset => out.push(plain(0)),
            Kind::Set(v) => out.push(plain(v)),
            Kind::Expire { .. } if op.outcome == Outcome::Unknown => out.push(plain(0)),
            Kind::Expire { at_ns } => {
                let until = at_ns.saturating_add(slop_ns);
                let moved = ops.iter().filter(changed).any(|o| {
                    !std::ptr::eq(*o, *op)
                        && matches!(o.kind, Kind::Reset | Kind::Set(_) | Kind::Expire { .. })
                        && o.outcome != Outcome::Fail
                        && o.invoke_ns < until
                        && !before(o, op, rf)
                });
                out.push(Event {
                    invoke_ns: at_ns.saturating_sub(slop_ns).max(op.invoke_ns),
                    complete_ns: until.max(op.complete_ns),
                    certain: !moved && op.complete_ns < at_ns.saturating_sub(slop_ns),
                    ..plain(0)
                });
            }
            Kind::Add(_) | Kind::Read => {}
        }
    }
    out.sort_unstable_by_key(|e| e.invoke_ns);
    out
}

/// When each event stops being a candidate base, per level of the read:
/// a read of level `l` invoked after `replaced_at[e][l]` cannot see `e`'s.
pub(super) struct Bases<'e> {
    events: &'e [Event],
    replaced_at: Vec<[u64; 3]>,
    /// The same for the first epoch (base 0).
    first_at: [u64; 3],
}

const LEVELS: [Consistency; 3] = [Consistency::One, Consistency::Quorum, Consistency::All];

fn level(cl: Consistency) -> usize {
    LEVELS.iter().position(|l| *l == cl).unwrap_or(0)
}

impl<'e> Bases<'e> {
    /// Indexes `events` (by invocation) for replication factor `rf`.
    pub(super) fn new(events: &'e [Event], rf: usize) -> Bases<'e> {
        let overlap = |a: Consistency, b: Consistency| a.required(rf) + b.required(rf) > rf;
        // The earliest completion of a sure event a read of each level sees.
        let seen_from = |e: Option<&Event>| {
            LEVELS.map(|l| {
                events
                    .iter()
                    .filter(|e2| e2.sure() && overlap(e2.cl, l))
                    .filter(|e2| {
                        e.is_none_or(|e| e.complete_ns < e2.invoke_ns && overlap(e.cl, e2.cl))
                    })
                    .map(|e2| e2.complete_ns)
                    .min()
                    .unwrap_or(u64::MAX)
            })
        };
        let replaced_at = events
            .iter()
            .map(|e| match e.outcome {
                // An Unknown event may land at any time: never replaced.
                Outcome::Ok(_) => seen_from(Some(e)),
                _ => [u64::MAX; 3],
            })
            .collect();
        Bases {
            events,
            replaced_at,
            first_at: seen_from(None),
        }
    }

    /// The smallest and largest base a read `q` may see.
    pub(super) fn range(&self, q: &Query) -> (i64, i64) {
        let l = level(q.cl);
        let mut range: Option<(i64, i64)> = (self.first_at[l] >= q.invoke_ns).then_some((0, 0));
        for (e, at) in self.events.iter().zip(&self.replaced_at) {
            if e.invoke_ns > q.complete_ns {
                break;
            }
            if at[l] >= q.invoke_ns {
                range = Some(range.map_or((e.base, e.base), |(lo, hi)| {
                    (lo.min(e.base), hi.max(e.base))
                }));
            }
        }
        // Some sure event was seen, and the last of those is a candidate.
        range.unwrap_or((0, 0))
    }
}
