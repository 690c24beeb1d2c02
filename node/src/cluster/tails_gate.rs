//! Whether this node may apply ids for a key yet, after an unclean
//! restart: the state `tails` fills in as its peers answer.

use std::sync::atomic::{AtomicBool, Ordering};

/// Which peers this node has learned its retired incarnations' tails
/// from, and so for which keys it may apply ids.
///
/// # Invariants ([`Gate::check_invariants`])
/// - `open` is set only once every entry of `learned` is.
pub(crate) struct Gate {
    /// The retired incarnations to learn about (empty: nothing to learn).
    retired: Vec<u64>,
    /// Per node: learned from it (this node's own entry is set).
    learned: Box<[AtomicBool]>,
    /// Learned from every node.
    open: AtomicBool,
}

impl Gate {
    /// The retired incarnations to learn about.
    pub(crate) fn retired(&self) -> &[u64] {
        &self.retired
    }

    /// The gate of node `me` of `nodes` with `retired` incarnations to learn about.
    pub(crate) fn new(nodes: usize, me: usize, retired: Vec<u64>) -> Gate {
        let done = retired.is_empty();
        Gate {
            learned: (0..nodes)
                .map(|n| AtomicBool::new(done || n == me))
                .collect(),
            open: AtomicBool::new(done),
            retired,
        }
    }

    /// Whether ids may be applied here for a key of `replicas`.
    pub(crate) fn ready(&self, replicas: &[usize]) -> bool {
        self.open.load(Ordering::Acquire)
            || replicas.iter().all(|&r| {
                self.learned
                    .get(r)
                    .is_some_and(|l| l.load(Ordering::Acquire))
            })
    }

    /// Opens the gate without learning anything: FAULT INJECTION only.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn force_open(&self) {
        self.learned
            .iter()
            .for_each(|l| l.store(true, Ordering::Release));
        self.open.store(true, Ordering::Release);
    }

    pub(crate) fn set_learned(&self, node: usize) {
        if let Some(l) = self.learned.get(node) {
            l.store(true, Ordering::Release);
        }
        if self.learned.iter().all(|l| l.load(Ordering::Acquire)) {
            self.open.store(true, Ordering::Release);
        }
        tally_world::invariant(|| self.check_invariants());
    }

    /// The invariants: which does not hold, if any. (`learned` only
    /// grows, so a gate seen open stays so.)
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let learned: Vec<bool> = self
            .learned
            .iter()
            .map(|l| l.load(Ordering::Acquire))
            .collect();
        if self.is_open() && learned.contains(&false) {
            return Err(format!("the tails gate is open, learned only {learned:?}"));
        }
        Ok(())
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}
