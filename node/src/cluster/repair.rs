//! Anti-entropy repair: bringing every replica of a node's token ranges to
//! the same cells (`tally repair`).
//!
//! The node that repairs (the one asked, for the ranges it replicates)
//! compares replicas without moving what they agree on:
//!
//! 1. **Digests.** Each range is cut into equal token slices
//!    ([`slices_per_range`]); every replica answers, per slice, the
//!    wrapping sum of the digests of its cells there
//!    (`tally_engine::cell_digest`: key and whole cell). One scan each.
//! 2. **Leaves.** For the slices whose sums differ, every replica lists its
//!    keys and cell digests there, in key order, a page at a time. Pages of
//!    all replicas are compared up to the smallest key where one stopped
//!    ([`compare_pages`]), so memory holds a page per replica whatever the
//!    data.
//! 3. **Cells.** For each key whose digests differ, the repairing node
//!    reads the cell from every replica, merges them, and sends the merged
//!    cell to each replica that did not hold exactly it: whole cells, both
//!    ways, as merges (idempotent, so a write racing the repair is safe).
//!
//! A repair needs every replica of its ranges up. One that stops half way
//! (a replica went down, the node restarted) leaves a `checkpoint`, and the
//! next one resumes there. A repair of every range the node replicates
//! ends by telling every node that the repaired node is repaired as of
//! when it began, which clears hints' "needs repair" flags set before then
//! (`hints::bound`); a repair of some of its ranges (`--range`) leaves the
//! flags, which do not say where the dropped hints' keys were
//! ([`clears_needs_repair`]).
//!
//! The rules are pure functions here, and the steps of a group's repair
//! a state machine (`walk`); `serve` answers replicas' side, `run` moves
//! the bytes.

mod checkpoint;
pub(crate) mod run;
pub(crate) mod serve;
mod walk;

use std::cmp::Ordering;

use tally_engine::Key;
use tally_net::ring::TokenRange;
use tally_net::wire::{REPAIR_RANGES_MAX, REPAIR_SEGMENTS_MAX};

/// Token slices per repair, about: a finer cut moves fewer cells that
/// agree but costs 8 bytes a slice per replica.
const SLICES_TARGET: usize = 1 << 18;

/// Slices per range for a repair of `ranges` ranges: about
/// [`SLICES_TARGET`] in all, 16 to 4096 a range, within
/// [`REPAIR_SEGMENTS_MAX`].
pub(crate) fn slices_per_range(ranges: usize) -> u32 {
    let per = (SLICES_TARGET / ranges.max(1)).clamp(16, 4096);
    let per = per.min(REPAIR_SEGMENTS_MAX / ranges.clamp(1, REPAIR_RANGES_MAX));
    u32::try_from(per.max(1)).expect("at most 4096")
}

/// Finds the slice of a token among disjoint ranges, by binary search.
pub(crate) struct Locator {
    /// The ranges that do not wrap, by end: `(end, index)`.
    by_end: Vec<(i64, usize)>,
    /// The one range that wraps past `i64::MAX`, if any.
    wrapping: Option<usize>,
    ranges: Vec<TokenRange>,
    slices: u32,
}

impl Locator {
    /// A locator over `ranges` (disjoint), each cut into `slices`.
    pub(crate) fn new(ranges: &[TokenRange], slices: u32) -> Locator {
        let mut by_end = Vec::with_capacity(ranges.len());
        let mut wrapping = None;
        for (i, r) in ranges.iter().enumerate() {
            if r.start < r.end {
                by_end.push((r.end, i));
            } else {
                wrapping = Some(i);
            }
        }
        by_end.sort_unstable();
        Locator {
            by_end,
            wrapping,
            ranges: ranges.to_vec(),
            slices,
        }
    }

    /// The flat index (range × slices + slice) of `token`'s slice, if it
    /// is in one of the ranges.
    pub(crate) fn locate(&self, token: i64) -> Option<u32> {
        let at = self.by_end.partition_point(|&(end, _)| end < token);
        let candidates = self
            .by_end
            .get(at)
            .map(|&(_, i)| i)
            .into_iter()
            .chain(self.wrapping);
        for i in candidates {
            if let Some(slice) = self.ranges[i].slice_of(token, self.slices) {
                let i = u32::try_from(i).expect("at most REPAIR_RANGES_MAX ranges");
                return Some(i * self.slices + slice);
            }
        }
        None
    }
}

/// The slices on which the replicas' digests (one list each, equally
/// long) do not all agree, ascending.
pub(crate) fn differing(digests: &[Vec<u64>]) -> Vec<u32> {
    let Some(first) = digests.first() else {
        return Vec::new();
    };
    (0..first.len())
        .filter(|&s| digests.iter().any(|d| d[s] != first[s]))
        .map(|s| u32::try_from(s).expect("slices fit u32"))
        .collect()
}

/// `slices` (ascending) as runs `(first, count)` of consecutive indices:
/// what a repair sends for them, however many differ.
pub(crate) fn runs(slices: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &s in slices {
        match out.last_mut() {
            Some((first, count)) if *first + *count == s => *count += 1,
            _ => out.push((s, 1)),
        }
    }
    out
}

/// Whether slice `s` is in `runs` (ascending, disjoint).
pub(crate) fn in_runs(runs: &[(u32, u32)], s: u32) -> bool {
    let at = runs.partition_point(|&(first, _)| first <= s);
    at > 0 && {
        let (first, count) = runs[at - 1];
        u64::from(s) < u64::from(first) + u64::from(count)
    }
}

/// Whether `runs` are ascending, disjoint, non-empty and below `total`.
pub(crate) fn runs_valid(runs: &[(u32, u32)], total: usize) -> bool {
    let mut next = 0u64;
    runs.iter().all(|&(first, count)| {
        let ok = count > 0 && u64::from(first) >= next;
        next = u64::from(first) + u64::from(count);
        ok
    }) && next <= total as u64
}

/// Whether a repair of the tokens in `only` (every token when `None`) may
/// clear the repaired node's "needs repair": only when it repaired every
/// range the node replicates, `replicated`. The writes whose hints were
/// dropped may be in any of them, and the flag does not say which.
pub(crate) fn clears_needs_repair(replicated: &[TokenRange], only: Option<TokenRange>) -> bool {
    only.is_none_or(|only| replicated.iter().all(|&r| only.covers(r)))
}

/// One replica's page of leaves: keys and cell digests in key order, and
/// the last key it scanned if it stopped early.
#[derive(Debug, Clone, Default)]
pub(crate) struct Page {
    pub(crate) leaves: Vec<(Key, u64)>,
    pub(crate) more: Option<Key>,
}

/// What one round of pages settles.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Compared {
    /// Keys compared this round.
    pub(crate) keys: usize,
    /// Keys on which the replicas differ, with each replica's digest
    /// (`None`: it has no cell).
    pub(crate) differing: Vec<(Key, Vec<Option<u64>>)>,
    /// Where the next round starts after; `None` when every replica is done.
    pub(crate) next: Option<Key>,
}

/// Compares one page from each replica up to the smallest key where a
/// replica stopped early (beyond it, that replica's leaves are not known
/// yet): keys past it are asked for again next round.
pub(crate) fn compare_pages(pages: &[Page]) -> Compared {
    let upto = pages.iter().filter_map(|p| p.more.as_ref()).min().cloned();
    let within = |k: &Key| upto.as_ref().is_none_or(|u| k <= u);
    let mut at = vec![0usize; pages.len()];
    let mut out = Compared {
        keys: 0,
        differing: Vec::new(),
        next: upto.clone(),
    };
    loop {
        // The smallest key not yet compared, within the window.
        let next = pages
            .iter()
            .zip(&at)
            .filter_map(|(p, &i)| p.leaves.get(i).map(|(k, _)| k))
            .filter(|k| within(k))
            .min()
            .cloned();
        let Some(key) = next else { break };
        let mut digests = Vec::with_capacity(pages.len());
        for (p, i) in pages.iter().zip(at.iter_mut()) {
            match p.leaves.get(*i) {
                Some((k, d)) if k.cmp(&key) == Ordering::Equal => {
                    digests.push(Some(*d));
                    *i += 1;
                }
                _ => digests.push(None),
            }
        }
        out.keys += 1;
        if digests.iter().any(|d| *d != digests[0] || d.is_none()) {
            out.differing.push((key, digests));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn key(p: &str) -> Key {
        Key::new(p.as_bytes(), b"").unwrap()
    }

    #[test]
    fn only_a_repair_of_every_replicated_range_clears_the_flag() {
        let r = |start, end| TokenRange { start, end };
        let (min, max) = (i64::MIN, i64::MAX);
        let replicated = [r(-100, -50), r(10, 20), r(max - 5, min + 5)];
        let cases = [
            (None, true),
            (Some(r(0, 0)), true),
            (Some(r(-200, -50)), false),
            (Some(r(-100, 20)), false),
            (Some(r(max - 10, 20)), true),
            (Some(r(max - 5, 20)), true),
            (Some(r(max - 4, 20)), false),
            (Some(r(min, 0)), false),
            (Some(r(11, 20)), false),
        ];
        for (only, want) in cases {
            assert_eq!(clears_needs_repair(&replicated, only), want, "{only:?}");
        }
        assert!(
            clears_needs_repair(&[], Some(r(1, 2))),
            "a node with no ranges"
        );
    }

    fn page(leaves: &[(&str, u64)], more: Option<&str>) -> Page {
        Page {
            leaves: leaves.iter().map(|(k, d)| (key(k), *d)).collect(),
            more: more.map(key),
        }
    }

    #[test]
    fn slices_stay_within_the_request_bounds() {
        assert_eq!(slices_per_range(48), 4096);
        assert_eq!(slices_per_range(1), 4096);
        assert_eq!(slices_per_range(4096), 64);
        for ranges in [1, 7, 48, 256, 1000, 4096] {
            let total = ranges * slices_per_range(ranges) as usize;
            assert!(total <= REPAIR_SEGMENTS_MAX, "{ranges}: {total}");
        }
    }

    #[test]
    fn the_locator_finds_the_slice_of_any_token_in_the_ranges() {
        let ranges = [
            TokenRange {
                start: 100,
                end: 200,
            },
            TokenRange {
                start: i64::MAX - 50,
                end: -100,
            },
            TokenRange { start: 0, end: 100 },
        ];
        let l = Locator::new(&ranges, 4);
        assert_eq!(l.locate(101), Some(0));
        assert_eq!(l.locate(200), Some(3));
        assert_eq!(l.locate(1), Some(8));
        assert_eq!(l.locate(100), Some(11));
        assert_eq!(l.locate(i64::MAX), Some(4));
        assert_eq!(l.locate(-101), Some(7));
        assert_eq!(l.locate(-100), Some(7));
        assert_eq!(l.locate(-99), None, "between the ranges");
        assert_eq!(l.locate(201), None);
        assert_eq!(l.locate(0), None);
    }

    #[test]
    fn slices_differ_where_any_replica_disagrees() {
        assert_eq!(
            differing(&[vec![1, 2, 3], vec![1, 2, 3]]),
            Vec::<u32>::new()
        );
        assert_eq!(
            differing(&[vec![1, 2, 3], vec![1, 9, 3], vec![0, 2, 3]]),
            [0, 1]
        );
        assert_eq!(differing(&[]), Vec::<u32>::new());
    }

    #[test]
    fn slices_travel_as_runs() {
        let slices = [0, 1, 2, 7, 9, 10];
        let r = runs(&slices);
        assert_eq!(r, [(0, 3), (7, 1), (9, 2)]);
        for s in 0..12 {
            assert_eq!(in_runs(&r, s), slices.contains(&s), "{s}");
        }
        assert!(runs_valid(&r, 11));
        assert!(!runs_valid(&r, 10), "past the end");
        assert!(!runs_valid(&[(3, 2), (4, 1)], 10), "overlapping");
        assert!(!runs_valid(&[(3, 0)], 10), "empty run");
        assert!(runs_valid(&[(0, u32::MAX)], u32::MAX as usize));
        assert!(!runs_valid(&[(1, u32::MAX)], u32::MAX as usize));
        assert_eq!(runs(&[]), []);
    }

    #[test]
    fn pages_are_compared_up_to_where_the_first_replica_stopped() {
        let pages = [
            page(&[("a", 1), ("b", 2), ("c", 3)], Some("c")),
            page(&[("a", 1), ("b", 7), ("d", 4), ("e", 5)], None),
        ];
        let c = compare_pages(&pages);
        assert_eq!(c.keys, 3, "a, b and c; d and e wait for the next round");
        assert_eq!(
            c.differing,
            [
                (key("b"), vec![Some(2), Some(7)]),
                (key("c"), vec![Some(3), None]),
            ]
        );
        assert_eq!(c.next, Some(key("c")));

        let last = [page(&[("d", 4)], None), page(&[("d", 4), ("e", 5)], None)];
        let c = compare_pages(&last);
        assert_eq!(c.keys, 2);
        assert_eq!(c.differing, [(key("e"), vec![None, Some(5)])]);
        assert_eq!(c.next, None, "every replica is done");
    }
}
