//! The bounds of one key's reads under the rules of [`super`]: prefix sums
//! of adds and running aggregates of resets, each found by a binary
//! search, plus one offline pass of [`super::fenwick`] for the adds that
//! must be seen after resets.

use tally_net::Consistency;

use super::epochs::Event;
use super::fenwick::{self, Point, Sums, Window};
use super::{Kind, Op, Outcome};

/// The consistency levels, by the index [`level_index`] gives them.
pub(super) const LEVELS: [Consistency; 3] =
    [Consistency::One, Consistency::Quorum, Consistency::All];

fn level_index(cl: Consistency) -> usize {
    match cl {
        Consistency::One => 0,
        Consistency::Quorum | Consistency::Serial => 1,
        Consistency::All => 2,
    }
}

/// A successful read to bound: when it ran and at which level.
#[derive(Debug, Clone, Copy)]
pub(super) struct Query {
    /// When it was invoked.
    pub invoke_ns: u64,
    /// When it completed.
    pub complete_ns: u64,
    /// Its level.
    pub cl: Consistency,
}

impl Query {
    /// The read `op` was.
    pub(super) fn of(op: &Op) -> Query {
        Query {
            invoke_ns: op.invoke_ns,
            complete_ns: op.complete_ns,
            cl: op.cl,
        }
    }

    /// A read at ALL invoked after every operation: the final reads.
    pub(super) fn after_everything() -> Query {
        Query {
            invoke_ns: u64::MAX,
            complete_ns: u64::MAX,
            cl: Consistency::All,
        }
    }
}

/// Prefix sums of positive and negative deltas over adds ordered by a time.
#[derive(Default)]
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

/// What the resets invoked so far (and not certainly failed) allow a read
/// to require: an add is certainly after all of them, or none is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resets {
    /// None yet.
    None,
    /// All acknowledged: an add is after them all iff it was invoked after
    /// `latest_complete_ns` at a level overlapping `min_w`.
    Acked {
        latest_complete_ns: u64,
        min_w: usize,
    },
    /// One's outcome is unknown: no add is certainly after it.
    Unknown,
}

impl Resets {
    fn and(self, reset: &Event, w: usize) -> Resets {
        match (self, reset.outcome) {
            (so_far, Outcome::Fail) => so_far,
            (Resets::Unknown, _) | (_, Outcome::Unknown) => Resets::Unknown,
            (Resets::None, Outcome::Ok(_)) => Resets::Acked {
                latest_complete_ns: reset.complete_ns,
                min_w: w,
            },
            (
                Resets::Acked {
                    latest_complete_ns,
                    min_w,
                },
                Outcome::Ok(_),
            ) => Resets::Acked {
                latest_complete_ns: latest_complete_ns.max(reset.complete_ns),
                min_w: min_w.min(w),
            },
        }
    }
}

/// One key's adds and resets, indexed to bound its reads.
pub(super) struct KeyIndex {
    rf: usize,
    /// Replicas each level needs, by level index.
    w: [usize; 3],
    /// Acknowledged adds by completion, per level.
    acked: [Prefix; 3],
    /// Adds not certainly failed, by invocation.
    maybe: Prefix,
    /// Resets not certainly failed, by invocation, with what those up to
    /// each one allow.
    resets: Vec<(u64, Resets)>,
    /// Acknowledged resets by completion, per level, with the latest
    /// invocation among those up to each one.
    acked_resets: [Vec<(u64, u64)>; 3],
    /// Acknowledged adds, for the window sums.
    points: Vec<Point>,
}

impl KeyIndex {
    /// Indexes one key's adds and its epoch `events` (resets, SETs,
    /// deadlines: see `epochs`) for replication factor `rf`. An event that
    /// may not have happened bounds which adds must be seen, never which
    /// are discarded.
    pub(super) fn new(ops: &[&Op], events: &[Event], rf: usize) -> KeyIndex {
        let w = LEVELS.map(|cl| cl.required(rf));
        let points: Vec<Point> = ops
            .iter()
            .filter_map(|o| match (o.kind, o.outcome) {
                (Kind::Add(delta), Outcome::Ok(_)) => Some(Point {
                    invoke_ns: o.invoke_ns,
                    complete_ns: o.complete_ns,
                    level: level_index(o.cl),
                    delta,
                }),
                _ => None,
            })
            .collect();
        let acked = [0, 1, 2].map(|l| {
            let at = points.iter().filter(|p| p.level == l);
            Prefix::new(at.map(|p| (p.complete_ns, p.delta)).collect())
        });
        let maybe = Prefix::new(
            ops.iter()
                .filter_map(|o| match (o.kind, o.outcome) {
                    (Kind::Add(d), Outcome::Ok(_) | Outcome::Unknown) => Some((o.invoke_ns, d)),
                    _ => None,
                })
                .collect(),
        );
        let mut tried: Vec<&Event> = events
            .iter()
            .filter(|e| e.outcome != Outcome::Fail)
            .collect();
        tried.sort_unstable_by_key(|e| e.invoke_ns);
        let mut so_far = Resets::None;
        let resets = tried
            .iter()
            .map(|o| {
                so_far = so_far.and(o, o.cl.required(rf));
                (o.invoke_ns, so_far)
            })
            .collect();
        let acked_resets = [0, 1, 2].map(|l| {
            let mut at: Vec<&&Event> = tried
                .iter()
                .filter(|e| e.sure() && level_index(e.cl) == l)
                .collect();
            at.sort_unstable_by_key(|o| o.complete_ns);
            let mut latest = 0;
            at.iter()
                .map(|o| {
                    latest = latest.max(o.invoke_ns);
                    (o.complete_ns, latest)
                })
                .collect()
        });
        KeyIndex {
            rf,
            w,
            acked,
            maybe,
            resets,
            acked_resets,
            points,
        }
    }

    /// Whether this key has resets that were not certainly failed.
    pub(super) fn has_resets(&self) -> bool {
        !self.resets.is_empty()
    }

    /// The resets invoked at or before `t_ns`.
    fn resets_by(&self, t_ns: u64) -> Resets {
        let n = self.resets.partition_point(|r| r.0 <= t_ns);
        n.checked_sub(1).map_or(Resets::None, |i| self.resets[i].1)
    }

    /// Acknowledged adds at level `l` completed before this time were
    /// certainly discarded for `q`: the latest invocation of an
    /// acknowledged reset that overlaps them and `q`'s level, and
    /// completed before `q` was invoked (0: none).
    fn discarded_before(&self, l: usize, q: &Query) -> u64 {
        let r = q.cl.required(self.rf);
        (0..3)
            .filter(|&j| self.w[j] + self.w[l] > self.rf && self.w[j] + r > self.rf)
            .filter_map(|j| {
                let at = &self.acked_resets[j];
                let n = at.partition_point(|x| x.0 < q.invoke_ns);
                n.checked_sub(1).map(|i| at[i].1)
            })
            .max()
            .unwrap_or(0)
    }

    /// `[lo, hi]` for each query, in order.
    pub(super) fn bounds(&self, queries: &[Query]) -> Vec<(i64, i64)> {
        let mut windows = Vec::with_capacity(queries.len());
        let mut masks = Vec::with_capacity(queries.len());
        for q in queries {
            let r = q.cl.required(self.rf);
            let overlaps = |l: usize, w: usize| self.w[l] + w > self.rf;
            let (from_ns, mask) = match self.resets_by(q.complete_ns) {
                Resets::None => (0, [0, 1, 2].map(|l| overlaps(l, r))),
                Resets::Acked {
                    latest_complete_ns,
                    min_w,
                } => (
                    latest_complete_ns.saturating_add(1),
                    [0, 1, 2].map(|l| overlaps(l, r) && overlaps(l, min_w)),
                ),
                Resets::Unknown => (u64::MAX, [false; 3]),
            };
            windows.push(Window {
                from_ns,
                before_ns: q.invoke_ns,
            });
            masks.push(mask);
        }
        let must: Vec<Sums> = fenwick::window_sums(&self.points, &windows);
        queries
            .iter()
            .zip(must.iter().zip(&masks))
            .map(|(q, (sums, mask))| {
                let (mut must_pos, mut must_neg) = (0, 0);
                for l in (0..3).filter(|&l| mask[l]) {
                    must_pos += sums[l][0];
                    must_neg += sums[l][1];
                }
                // Adds invoked at the read's completion instant could still count.
                let (mut may_pos, mut may_neg) = self.maybe.before(q.complete_ns.saturating_add(1));
                for l in 0..3 {
                    let (pos, neg) = self.acked[l].before(self.discarded_before(l, q));
                    may_pos -= pos;
                    may_neg -= neg;
                }
                (must_pos + may_neg, may_pos + must_neg)
            })
            .collect()
    }
}
