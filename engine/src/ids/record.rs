//! What one applier remembers of one client's adds, and the rule that says
//! whether an add is new: pure, tested here.

use std::collections::VecDeque;

use super::Retention;

/// One applied add, kept for the retention window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The add's sequence number within its client.
    pub seq: u64,
    /// Its delta (a retry with another one is a conflict).
    pub delta: i64,
    /// The value it produced, answered again to every retry.
    pub value: i64,
    /// The cell's epoch it was applied in ([`crate::Epoch::tag`]).
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
    /// A client the ledger does not know, past its budget of clients
    /// ([`Retention::clients_max`]): refused, nothing applied.
    Full,
}

/// An applied add to the counter whose key has fingerprint `key`
/// (`ids::fingerprint`): 48 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Logged {
    /// The counter's key fingerprint.
    pub key: u64,
    /// The add.
    pub op: Applied,
}

/// One client's applied adds at this node, whatever their counters: its
/// window of recent adds and a high-water mark below which its adds are
/// forgotten. A client numbers its adds with increasing seqs (the thin
/// client does), so they arrive nearly in order: a new add is pushed at
/// the back, the window is pruned at the front, and the whole record of a
/// client costs one entry per add in the window plus 40 bytes.
///
/// # Invariants
/// - `ops` is sorted by `(seq, key)`, without repeats, and every `seq` in
///   it is greater than `forgotten_through`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientLog {
    /// Every seq up to here is forgotten, on every counter: a retry of
    /// one is [`Check::Expired`].
    pub forgotten_through: u64,
    /// When this client last added here (ms).
    pub last_at_ms: u64,
    /// Adds within the window.
    pub ops: VecDeque<Logged>,
    /// Adds of the client this node knows of (saturating); a mark read
    /// back counts as two, since how many adds it covers is not kept.
    pub adds: u32,
}

impl ClientLog {
    /// What an add of `delta` with `seq` to counter `key` is. Seqs are a
    /// client's, not a counter's: the same seq on another counter is
    /// another add while both are in the window, and expired with the
    /// rest once the mark passes it. `reapply_unless`: an add applied in an
    /// epoch other than this one (a [`crate::Epoch::tag`]) is new again (its leader found its epoch stale
    /// before anyone saw it acknowledged; see `Engine::add_once`).
    pub fn check(&self, key: u64, seq: u64, delta: i64, reapply_unless: Option<u64>) -> Check {
        match self.find(key, seq) {
            Ok(i) => {
                let op = self.ops[i].op;
                if op.delta != delta {
                    Check::Conflict(op)
                } else if reapply_unless.is_some_and(|tag| op.epoch != tag) {
                    Check::New
                } else {
                    Check::Duplicate(op)
                }
            }
            Err(_) if seq <= self.forgotten_through => Check::Expired,
            Err(_) => Check::New,
        }
    }

    /// Remembers an applied add (replacing one with the same seq and
    /// counter); answers whether it took a new entry. A seq already
    /// forgotten is not remembered again.
    pub fn record(&mut self, key: u64, op: Applied) -> bool {
        self.last_at_ms = self.last_at_ms.max(op.at_ms);
        if op.seq <= self.forgotten_through {
            return false;
        }
        if self.ops.capacity() == 0 {
            // Many clients add once in a window: room for one.
            self.ops.reserve_exact(1);
        }
        match self.find(key, op.seq) {
            Ok(i) => {
                self.ops[i].op = op;
                false
            }
            Err(i) => {
                self.ops.insert(i, Logged { key, op });
                self.adds = self.adds.saturating_add(1);
                true
            }
        }
    }

    /// Raises the forgotten mark (from a file or another copy), dropping
    /// what it covers; answers how many adds it dropped.
    pub fn forget_through(&mut self, seq: u64, last_at_ms: u64) -> usize {
        self.last_at_ms = self.last_at_ms.max(last_at_ms);
        if seq <= self.forgotten_through {
            return 0;
        }
        self.forgotten_through = seq;
        let before = self.ops.len();
        while self.ops.front().is_some_and(|l| l.op.seq <= seq) {
            self.ops.pop_front();
        }
        before - self.ops.len()
    }

    /// Takes in an add read back already out of the window: it raises the
    /// mark, and counts as an add if it was not known; answers how many
    /// adds it dropped.
    pub fn load_expired(&mut self, op: &Applied) -> usize {
        if op.seq > self.forgotten_through {
            self.adds = self.adds.saturating_add(1);
        }
        self.forget_through(op.seq, op.at_ms)
    }

    /// Takes in a mark read back (see [`ClientLog::adds`]); answers how
    /// many adds it dropped.
    pub fn load_mark(&mut self, through: u64, last_at_ms: u64) -> usize {
        self.adds = self.adds.max(2);
        self.forget_through(through, last_at_ms)
    }

    /// Forgets the adds applied before `expired_before` (ms), oldest seq
    /// first: it stops at the first one still in the window, so an add
    /// that came out of order may be kept a little longer, never shorter.
    /// Answers how many it forgot.
    pub fn prune(&mut self, expired_before: u64) -> usize {
        let before = self.ops.len();
        while let Some(l) = self.ops.front().copied() {
            if l.op.at_ms >= expired_before {
                break;
            }
            self.ops.pop_front();
            self.forgotten_through = self.forgotten_through.max(l.op.seq);
        }
        before - self.ops.len()
    }

    /// Whether the whole record may go at `now_ms`: nothing left in the
    /// window, and no add for `forget_ms`, or for `one_add_forget_ms` if
    /// the client made one add only (one-off clients, the most numerous,
    /// are forgotten first). After that its old ids read as new.
    pub fn idle(&self, now_ms: u64, r: &Retention) -> bool {
        let keep_ms = if self.adds <= 1 {
            r.one_add_forget_ms.min(r.forget_ms)
        } else {
            r.forget_ms
        };
        self.ops.is_empty() && self.last_at_ms < now_ms.saturating_sub(keep_ms)
    }

    /// The position of `(seq, key)`, or where it would go. A new add is
    /// usually the newest: that costs one comparison.
    fn find(&self, key: u64, seq: u64) -> Result<usize, usize> {
        let at = (seq, key);
        match self.ops.back() {
            None => Err(0),
            Some(last) if (last.op.seq, last.key) < at => Err(self.ops.len()),
            Some(_) => self.ops.binary_search_by_key(&at, |l| (l.op.seq, l.key)),
        }
    }

    /// Asserts the invariants (debug builds).
    pub fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            let mut last = (self.forgotten_through, u64::MAX);
            for l in &self.ops {
                let at = (l.op.seq, l.key);
                assert!(
                    at > last && l.op.seq > self.forgotten_through,
                    "ops out of order: {at:?} after {last:?}"
                );
                last = at;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 7;

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
        let mut c = ClientLog::default();
        assert_eq!(c.check(K, 5, 1, None), Check::New);
        assert!(c.record(K, op(5, 1, 100)));
        assert_eq!(c.check(K, 5, 1, None), Check::Duplicate(op(5, 1, 100)));
        assert_eq!(c.check(K, 5, 2, None), Check::Conflict(op(5, 1, 100)));
        // The same seq on another counter is another add.
        assert_eq!(c.check(K + 1, 5, 2, None), Check::New);
        assert!(c.record(K + 1, op(5, 2, 100)));
        assert_eq!(c.check(K + 1, 5, 2, None), Check::Duplicate(op(5, 2, 100)));
        assert_eq!(c.check(K - 1, 5, 1, None), Check::New);
        // Out of order: a lower seq never seen is new.
        assert_eq!(c.check(K, 3, 1, None), Check::New);
        assert!(c.record(K, op(3, 7, 101)));
        assert!(c.record(K, op(9, 7, 102)));
        assert!(!c.record(K, op(9, 7, 103)), "replaced, not added");
        let seqs: Vec<(u64, u64)> = c.ops.iter().map(|l| (l.op.seq, l.key)).collect();
        assert_eq!(seqs, [(3, K), (5, K), (5, K + 1), (9, K)]);
        c.check_invariants();
    }

    #[test]
    fn forgotten_seqs_are_expired_never_new() {
        let mut c = ClientLog::default();
        c.record(K, op(1, 1, 100));
        c.record(K + 1, op(2, 1, 200));
        c.record(K, op(4, 1, 300));
        assert_eq!(c.prune(250), 2, "4 is still in the window");
        assert!(!c.idle(0, &Retention::default()));
        assert_eq!(c.forgotten_through, 2);
        assert_eq!(c.check(K, 1, 1, None), Check::Expired);
        assert_eq!(c.check(K + 1, 2, 1, None), Check::Expired);
        // Below the mark on any counter: unknown, never guessed new.
        assert_eq!(c.check(K + 5, 2, 1, None), Check::Expired);
        let mut d = c.clone();
        assert_eq!(d.forget_through(3, 0), 0);
        assert_eq!(d.check(K, 3, 1, None), Check::Expired);
        assert_eq!(c.check(K, 3, 1, None), Check::New);
        assert_eq!(c.check(K, 4, 1, None), Check::Duplicate(op(4, 1, 300)));
        // A late record of a forgotten seq is not remembered again.
        assert!(!c.record(K, op(2, 1, 400)));
        assert_eq!(c.check(K, 2, 1, None), Check::Expired);
        c.check_invariants();
    }

    fn retention(forget_ms: u64, one_add_forget_ms: u64) -> Retention {
        Retention {
            window_ms: 50,
            forget_ms,
            one_add_forget_ms,
            clients_max: usize::MAX,
        }
    }

    #[test]
    fn a_record_goes_only_when_empty_and_idle() {
        let r = retention(1_000, 1_000);
        let mut c = ClientLog::default();
        c.record(K, op(1, 1, 100));
        assert_eq!(c.prune(50), 0, "still in the window");
        assert!(!c.idle(2_000, &r));
        assert_eq!(c.prune(150), 1);
        assert!(
            !c.idle(1_090, &r),
            "forgotten, but the client was active since"
        );
        assert!(c.idle(1_101, &r));
    }

    #[test]
    fn one_add_clients_are_forgotten_sooner() {
        let r = retention(10_000, 1_000);
        let mut once = ClientLog::default();
        once.record(K, op(1, 1, 100));
        let mut twice = once.clone();
        twice.record(K + 1, op(2, 1, 100));
        assert!(!once.record(K, op(1, 1, 100)), "a retry is not another add");
        for c in [&mut once, &mut twice] {
            assert!(c.prune(200) > 0);
        }
        assert_eq!((once.adds, twice.adds), (1, 2));
        assert!(once.idle(1_101, &r) && !twice.idle(1_101, &r));
        assert!(twice.idle(10_101, &r));
        // Read back: an expired add counts once however often it is read;
        // a mark counts as many (how many it covers is not kept).
        let mut back = ClientLog::default();
        assert_eq!(back.load_expired(&op(1, 1, 100)), 0);
        back.load_expired(&op(1, 1, 100));
        assert_eq!(back.adds, 1);
        back.load_mark(1, 100);
        assert!(
            !back.idle(1_101, &r),
            "kept as long as a client of many adds"
        );
    }

    #[test]
    fn a_stale_epoch_makes_an_add_new_again_only_when_asked() {
        let mut c = ClientLog::default();
        c.record(
            K,
            Applied {
                epoch: 3,
                ..op(1, 1, 100)
            },
        );
        assert!(matches!(c.check(K, 1, 1, None), Check::Duplicate(_)));
        assert!(matches!(c.check(K, 1, 1, Some(3)), Check::Duplicate(_)));
        assert_eq!(c.check(K, 1, 1, Some(4)), Check::New);
        // A SET's epoch is another epoch, whatever its tag's size.
        assert_eq!(
            c.check(
                K,
                1,
                1,
                Some(crate::Epoch::at(2).set(9, 0, crate::Expiry::NONE).tag())
            ),
            Check::New
        );
        // A conflict stays a conflict.
        assert!(matches!(c.check(K, 1, 2, Some(4)), Check::Conflict(_)));
    }
}
