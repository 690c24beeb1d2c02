//! The steps of a repair of one group of ranges, apart from I/O: what to
//! ask the replicas next ([`Walk::step`]) and where a checkpoint may say
//! the repair got to. The task in `run` asks, fixes and saves, and feeds
//! the answers in. Where a repair resumes from a checkpoint is
//! [`resume`]'s rule.
//!
//! # The steps
//! 1. `Digests`: every replica's digest of each slice of the ranges. No
//!    slice differs: the group is done.
//! 2. `Pages` of leaves of the slices that differ, from after the key a
//!    checkpoint or the page before stopped at; compared up to where the
//!    first replica stopped (`compare_pages`).
//! 3. `Fix` the keys that differ, [`FIXES_IN_FLIGHT`] at a time, each
//!    chunk answered (in order) before the next is asked.
//! 4. `Save` where the page ended, once every key of it is fixed; then
//!    the next page, or `Done` when every replica finished.
//!
//! # Invariants ([`Walk::check_invariants`])
//! - Pages start after one another: the key a page starts after only
//!   grows.
//! - A checkpoint is saved only past keys whose fixes were all answered
//!   (a repair resumed from it skips them).
//! - Fixes are answered only for keys asked, once each.

use std::collections::VecDeque;

use tally_engine::Key;
use tally_net::wire::WireRepaired;

use super::checkpoint::Checkpoint;
use super::{Page, compare_pages, differing, runs};

/// Differing keys fixed at once.
pub(crate) const FIXES_IN_FLIGHT: usize = 32;

/// Where a repair of group `group` starts, given the checkpoint `mark` of
/// an unfinished one: `None` to skip the group (the checkpoint is past
/// it), else after which key (`Some(None)`: from its start).
pub(crate) fn resume(mark: &Checkpoint, group: u32) -> Option<Option<Key>> {
    match group.cmp(&mark.group) {
        std::cmp::Ordering::Less => None,
        std::cmp::Ordering::Equal => Some(mark.after.clone()),
        std::cmp::Ordering::Greater => Some(None),
    }
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Ask every replica for its digests of the group's slices.
    Digests,
    /// Ask every replica for a page of leaves of the slices `wanted`
    /// (runs), after key `after`.
    Pages {
        wanted: Vec<(u32, u32)>,
        after: Option<Key>,
    },
    /// Bring every replica of these keys (with each replica's digest) to
    /// their merge; answer each with [`Walk::on_fixed`].
    Fix(Vec<(Key, Vec<Option<u64>>)>),
    /// The page's keys are fixed: a checkpoint may say the group is done
    /// up to `after` (`None`: to its end); answer with [`Walk::saved`].
    Save { after: Option<Key> },
    /// The group is repaired.
    Done,
}

/// Where a walk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Digests,
    Pages,
    Fixing,
    Save,
    Done,
}

/// A repair of one group of ranges (see the module docs).
#[derive(Debug)]
pub(crate) struct Walk {
    phase: Phase,
    /// Slices per range, and the ranges' count.
    slices: u32,
    ranges: usize,
    /// The runs of slices that differ, once the digests came.
    wanted: Vec<(u32, u32)>,
    /// The key the next page starts after.
    after: Option<Key>,
    /// Where the page after the one being fixed starts; `None` when it was
    /// the last.
    next: Option<Key>,
    /// The page's differing keys not fixed yet, in order: the next
    /// chunk of them is asked, and answered in order.
    unfixed: VecDeque<(Key, Vec<Option<u64>>)>,
    done: WireRepaired,
    /// What went out of order: for the invariants.
    broken: Option<String>,
}

impl Walk {
    /// A walk of `ranges` ranges cut into `slices` each, from after key
    /// `from`, adding what it does to `done`.
    pub(crate) fn new(ranges: usize, slices: u32, from: Option<Key>, done: WireRepaired) -> Walk {
        Walk {
            phase: Phase::Digests,
            slices,
            ranges,
            wanted: Vec::new(),
            after: from,
            next: None,
            unfixed: VecDeque::new(),
            done,
            broken: None,
        }
    }

    /// What was done so far (this walk's and what it was given).
    pub(crate) fn done(&self) -> &WireRepaired {
        &self.done
    }

    /// What was done, once the walk ends.
    pub(crate) fn into_done(self) -> WireRepaired {
        self.done
    }

    /// What to do next.
    pub(crate) fn step(&self) -> Step {
        match self.phase {
            Phase::Digests => Step::Digests,
            Phase::Pages => Step::Pages {
                wanted: self.wanted.clone(),
                after: self.after.clone(),
            },
            Phase::Fixing => {
                let chunk = self.unfixed.iter().take(FIXES_IN_FLIGHT).cloned();
                Step::Fix(chunk.collect())
            }
            Phase::Save => Step::Save {
                after: self.next.clone(),
            },
            Phase::Done => Step::Done,
        }
    }

    /// Every replica's digests, one list each of `ranges × slices`.
    pub(crate) fn on_digests(&mut self, digests: &[Vec<u64>]) {
        self.expect(Phase::Digests, "digests");
        let total = self.ranges * self.slices as usize;
        let wanted = differing(digests);
        self.done.ranges += self.ranges as u64;
        self.done.segments += total as u64;
        self.done.segments_differing += wanted.len() as u64;
        self.wanted = runs(&wanted);
        self.phase = match self.wanted.is_empty() {
            true => Phase::Done,
            false => Phase::Pages,
        };
        tally_world::invariant(|| self.check_invariants());
    }

    /// Every replica's page of leaves.
    pub(crate) fn on_pages(&mut self, pages: &[Page]) {
        self.expect(Phase::Pages, "pages");
        let compared = compare_pages(pages);
        self.done.keys_compared += compared.keys as u64;
        self.done.keys_differing += compared.differing.len() as u64;
        if let (Some(next), Some(after)) = (&compared.next, &self.after)
            && next <= after
        {
            self.broke(format!("a page ends at {next:?}, not after {after:?}"));
        }
        self.next = compared.next;
        self.unfixed = compared.differing.into();
        self.phase = self.after_fixes();
        tally_world::invariant(|| self.check_invariants());
    }

    /// The first key of the chunk [`Step::Fix`] asked was fixed (the
    /// answers come in the chunk's order), by sending `moved` cells of
    /// `bytes`.
    pub(crate) fn on_fixed(&mut self, moved: u64, bytes: u64) {
        if self.phase != Phase::Fixing || self.unfixed.pop_front().is_none() {
            self.broke("a fix answered that was not asked".to_string());
        }
        self.done.cells_moved += moved;
        self.done.bytes_moved += bytes;
        self.phase = self.after_fixes();
        tally_world::invariant(|| self.check_invariants());
    }

    /// The checkpoint [`Step::Save`] asked for is written (or could not
    /// be: it costs only work again).
    pub(crate) fn saved(&mut self) {
        self.expect(Phase::Save, "a checkpoint");
        if !self.unfixed.is_empty() {
            self.broke("a checkpoint saved past keys not fixed".to_string());
        }
        self.phase = match self.next.take() {
            Some(next) => {
                self.after = Some(next);
                Phase::Pages
            }
            None => Phase::Done,
        };
        tally_world::invariant(|| self.check_invariants());
    }

    /// Fixing while keys of the page wait, else saving where it ended.
    fn after_fixes(&self) -> Phase {
        match self.unfixed.is_empty() {
            true => Phase::Save,
            false => Phase::Fixing,
        }
    }

    fn expect(&mut self, phase: Phase, what: &str) {
        if self.phase != phase {
            self.broke(format!("{what} came in phase {:?}", self.phase));
        }
    }

    fn broke(&mut self, what: String) {
        self.broken.get_or_insert(what);
    }

    /// What does not hold of the invariants (see the module docs).
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        match &self.broken {
            Some(what) => Err(format!("repair: {what}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: &str) -> Key {
        Key::new(p.as_bytes(), b"").unwrap()
    }

    fn page(leaves: &[(&str, u64)], more: Option<&str>) -> Page {
        Page {
            leaves: leaves.iter().map(|(k, d)| (key(k), *d)).collect(),
            more: more.map(key),
        }
    }

    /// Fixes every key of a `Fix` step, one cell moved each.
    fn fix_all(walk: &mut Walk) -> Vec<Key> {
        let Step::Fix(keys) = walk.step() else {
            panic!("not fixing: {:?}", walk.step())
        };
        for _ in &keys {
            walk.on_fixed(1, 10);
        }
        keys.into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_group_whose_digests_agree_is_done_at_once() {
        let mut walk = Walk::new(2, 4, None, WireRepaired::default());
        assert_eq!(walk.step(), Step::Digests);
        walk.on_digests(&[vec![1; 8], vec![1; 8]]);
        assert_eq!(walk.step(), Step::Done);
        assert_eq!((walk.done().ranges, walk.done().segments), (2, 8));
        assert_eq!(walk.check_invariants(), Ok(()));
    }

    #[test]
    fn pages_are_fixed_then_saved_then_followed_to_the_end() {
        let mut walk = Walk::new(1, 4, None, WireRepaired::default());
        walk.step();
        walk.on_digests(&[vec![1, 2, 3, 4], vec![1, 9, 9, 4]]);
        assert_eq!(
            walk.step(),
            Step::Pages {
                wanted: vec![(1, 2)],
                after: None
            }
        );
        walk.on_pages(&[
            page(&[("a", 1), ("b", 2)], Some("b")),
            page(&[("a", 1), ("b", 3), ("c", 4)], None),
        ]);
        assert_eq!(fix_all(&mut walk), [key("b")]);
        assert_eq!(
            walk.step(),
            Step::Save {
                after: Some(key("b"))
            }
        );
        walk.saved();
        let Step::Pages { after, .. } = walk.step() else {
            panic!("no second page")
        };
        assert_eq!(after, Some(key("b")));
        walk.on_pages(&[page(&[], None), page(&[("c", 4)], None)]);
        assert_eq!(fix_all(&mut walk), [key("c")]);
        assert_eq!(walk.step(), Step::Save { after: None });
        walk.saved();
        assert_eq!(walk.step(), Step::Done);
        let done = walk.into_done();
        assert_eq!((done.keys_compared, done.keys_differing), (3, 2));
        assert_eq!((done.cells_moved, done.bytes_moved), (2, 20));
    }

    #[test]
    fn differing_keys_are_fixed_a_chunk_at_a_time() {
        let mut walk = Walk::new(1, 1, None, WireRepaired::default());
        walk.step();
        walk.on_digests(&[vec![1], vec![2]]);
        walk.step();
        let names: Vec<String> = (0..FIXES_IN_FLIGHT + 5)
            .map(|i| format!("k{i:03}"))
            .collect();
        let leaves: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 1)).collect();
        walk.on_pages(&[page(&leaves, None), page(&[], None)]);
        assert_eq!(fix_all(&mut walk).len(), FIXES_IN_FLIGHT);
        assert_eq!(fix_all(&mut walk).len(), 5);
        assert_eq!(walk.step(), Step::Save { after: None });
        assert_eq!(walk.check_invariants(), Ok(()));
    }

    #[test]
    fn a_page_with_nothing_differing_is_saved_at_once() {
        let mut walk = Walk::new(1, 1, Some(key("a")), WireRepaired::default());
        walk.step();
        walk.on_digests(&[vec![1], vec![2]]);
        walk.step();
        walk.on_pages(&[page(&[("b", 1)], Some("b")), page(&[("b", 1)], None)]);
        assert_eq!(
            walk.step(),
            Step::Save {
                after: Some(key("b"))
            }
        );
    }

    #[test]
    fn a_resumed_repair_skips_the_groups_before_its_checkpoint() {
        let mark = Checkpoint {
            ring: 1,
            started_ms: 0,
            group: 2,
            after: Some(key("m")),
        };
        assert_eq!(resume(&mark, 1), None);
        assert_eq!(resume(&mark, 2), Some(Some(key("m"))));
        assert_eq!(resume(&mark, 3), Some(None));
    }

    /// A checkpoint saved while a fix of the page is unanswered would let
    /// a resumed repair skip that key: caught where the world checks
    /// invariants (debug builds, simulations), and by `check_invariants`.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(
            expected = "invariant broken: repair: a checkpoint saved past keys not fixed"
        )
    )]
    fn a_checkpoint_past_an_unanswered_fix_breaks_the_invariants() {
        let mut walk = Walk::new(1, 1, None, WireRepaired::default());
        walk.step();
        walk.on_digests(&[vec![1], vec![2]]);
        walk.step();
        walk.on_pages(&[page(&[("a", 1)], None), page(&[], None)]);
        let Step::Fix(_) = walk.step() else { panic!() };
        walk.phase = Phase::Save; // the shell skipped the answer
        walk.saved();
        assert!(walk.check_invariants().is_err());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "invariant broken: repair: a page ends at")
    )]
    fn a_page_that_goes_back_breaks_the_invariants() {
        let mut walk = Walk::new(1, 1, Some(key("m")), WireRepaired::default());
        walk.step();
        walk.on_digests(&[vec![1], vec![2]]);
        walk.step();
        walk.on_pages(&[page(&[("b", 1)], Some("b")), page(&[], None)]);
        assert!(walk.check_invariants().is_err());
    }
}
