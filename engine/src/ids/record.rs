//! What one applier remembers of one client's adds to one counter, and the
//! rule that says whether an add is new: pure, tested here.

use std::collections::VecDeque;

/// One applied add, kept for the retention window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The add's sequence number within its client.
    pub seq: u64,
    /// Its delta (a retry with another one is a conflict).
    pub delta: i64,
    /// The value it produced, answered again to every retry.
    pub value: i64,
    /// The cell's epoch it was applied in.
    pub epoch: u64,
    /// When it was applied, wall-clock ms since the Unix epoch.
    pub at_ms: u64,
}

/// What an add with an id is, for the applier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Never applied: apply it.
    New,
    /// Applied before: answer this again, apply nothing.
    Duplicate(Applied),
    /// Applied before with another delta: refuse.
    Conflict(Applied),
    /// Older than what is remembered: whether it was applied is unknown.
    Expired,
}

/// One client's applied adds to one counter.
///
/// # Invariants
/// - `ops` is sorted by `seq`, without repeats, and every `seq` in it is
///   greater than `forgotten_through`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientOps {
    /// Every seq up to here is forgotten: a retry of one is [`Check::Expired`].
    pub forgotten_through: u64,
    /// When this client last added to the counter (ms).
    pub last_at_ms: u64,
    /// Adds within the window.
    pub ops: VecDeque<Applied>,
}

impl ClientOps {
    /// What an add of `delta` with `seq` is. `reapply_below`: an add applied
    /// in an epoch below it is new again (its leader found its epoch stale
    /// before anyone saw it acknowledged; see `Engine::leader_add_once`).
    pub fn check(&self, seq: u64, delta: i64, reapply_below: u64) -> Check {
        match self.find(seq) {
            Ok(i) => {
                let op = self.ops[i];
                if op.delta != delta {
                    Check::Conflict(op)
                } else if op.epoch < reapply_below {
                    Check::New
                } else {
                    Check::Duplicate(op)
                }
            }
            Err(_) if seq <= self.forgotten_through => Check::Expired,
            Err(_) => Check::New,
        }
    }

    /// Remembers an applied add (replacing one with the same seq). A seq
    /// already forgotten is not remembered again.
    pub fn record(&mut self, op: Applied) {
        self.last_at_ms = self.last_at_ms.max(op.at_ms);
        if op.seq <= self.forgotten_through {
            return;
        }
        if self.ops.capacity() == 0 {
            // Most clients add to a counter once in a window: room for one.
            self.ops.reserve_exact(1);
        }
        match self.find(op.seq) {
            Ok(i) => self.ops[i] = op,
            Err(i) => self.ops.insert(i, op),
        }
    }

    /// Raises the forgotten mark (from a file or another copy), dropping
    /// what it covers.
    pub fn forget_through(&mut self, seq: u64, last_at_ms: u64) {
        self.last_at_ms = self.last_at_ms.max(last_at_ms);
        if seq <= self.forgotten_through {
            return;
        }
        self.forgotten_through = seq;
        while self.ops.front().is_some_and(|op| op.seq <= seq) {
            self.ops.pop_front();
        }
    }

    /// Forgets the adds applied before `expired_before` (ms), oldest seq
    /// first: it stops at the first one still in the window, so an add
    /// that came out of order may be kept a little longer, never shorter.
    /// Answers whether the whole record may go: nothing left in the window
    /// and no add since `idle_before`.
    pub fn prune(&mut self, expired_before: u64, idle_before: u64) -> bool {
        while let Some(op) = self.ops.front().copied() {
            if op.at_ms >= expired_before {
                break;
            }
            self.ops.pop_front();
            self.forgotten_through = self.forgotten_through.max(op.seq);
        }
        self.ops.is_empty() && self.last_at_ms < idle_before
    }

    fn find(&self, seq: u64) -> Result<usize, usize> {
        self.ops.binary_search_by_key(&seq, |op| op.seq)
    }

    /// Asserts the invariants (debug builds).
    pub fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            let mut last = self.forgotten_through;
            for op in &self.ops {
                assert!(op.seq > last, "ops out of order: {} after {last}", op.seq);
                last = op.seq;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(seq: u64, delta: i64, at_ms: u64) -> Applied {
        Applied {
            seq,
            delta,
            value: delta * 10,
            epoch: 0,
            at_ms,
        }
    }

    #[test]
    fn new_duplicate_conflict() {
        let mut c = ClientOps::default();
        assert_eq!(c.check(5, 1, 0), Check::New);
        c.record(op(5, 1, 100));
        assert_eq!(c.check(5, 1, 0), Check::Duplicate(op(5, 1, 100)));
        assert_eq!(c.check(5, 2, 0), Check::Conflict(op(5, 1, 100)));
        // Out of order: a lower seq never seen is new.
        assert_eq!(c.check(3, 1, 0), Check::New);
        c.record(op(3, 7, 101));
        c.record(op(9, 7, 102));
        let seqs: Vec<u64> = c.ops.iter().map(|o| o.seq).collect();
        assert_eq!(seqs, [3, 5, 9]);
        c.check_invariants();
    }

    #[test]
    fn forgotten_seqs_are_expired_never_new() {
        let mut c = ClientOps::default();
        c.record(op(1, 1, 100));
        c.record(op(2, 1, 200));
        c.record(op(4, 1, 300));
        assert!(!c.prune(250, 0), "4 is still in the window");
        assert_eq!(c.forgotten_through, 2);
        assert_eq!(c.check(1, 1, 0), Check::Expired);
        assert_eq!(c.check(2, 1, 0), Check::Expired);
        // Never seen, but below the mark: unknown, not guessed new.
        let mut d = c.clone();
        d.forget_through(3, 0);
        assert_eq!(d.check(3, 1, 0), Check::Expired);
        assert_eq!(c.check(3, 1, 0), Check::New);
        assert_eq!(c.check(4, 1, 0), Check::Duplicate(op(4, 1, 300)));
        // A late record of a forgotten seq is not remembered again.
        c.record(op(2, 1, 400));
        assert_eq!(c.check(2, 1, 0), Check::Expired);
        c.check_invariants();
    }

    #[test]
    fn a_record_goes_only_when_empty_and_idle() {
        let mut c = ClientOps::default();
        c.record(op(1, 1, 100));
        assert!(!c.prune(50, 1000), "still in the window");
        assert!(
            !c.prune(150, 90),
            "forgotten, but the client was active since"
        );
        assert!(c.prune(150, 101));
    }

    #[test]
    fn a_stale_epoch_makes_an_add_new_again_only_when_asked() {
        let mut c = ClientOps::default();
        c.record(Applied {
            epoch: 3,
            ..op(1, 1, 100)
        });
        assert!(matches!(c.check(1, 1, 3), Check::Duplicate(_)));
        assert_eq!(c.check(1, 1, 4), Check::New);
        // A conflict stays a conflict.
        assert!(matches!(c.check(1, 2, 4), Check::Conflict(_)));
    }
}
