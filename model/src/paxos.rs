//! Agreement on a partition's registers: the acceptor's rules of
//! single-decree Paxos, one instance per change (CASPaxos: every round
//! proposes the partition's whole next state, made from the newest state a
//! quorum reported).
//!
//! ```text
//! Ballot   = (ms, seq, proposer)               // a hybrid clock reading, then who
//! Acceptor = { promised: Ballot, accepted: Option<(Ballot, Registers)>,
//!              committed: (Ballot, Registers) }
//! prepare(b):   b >= promised  → promised = b; answer accepted and committed
//!               otherwise      → rejected, with promised
//! accept(b, v): b >= promised  → promised = b; accepted = (b, v)
//!               otherwise      → rejected, with promised
//!               (a first ballot: only by an acceptor that holds nothing)
//! commit(b, v): committed = the later of (b, v) and committed; promised
//!               rises to it; an accepted value it supersedes is dropped
//! merge(a, b):  each part the later (repair, replay): a join
//! ```
//!
//! A proposer's ballot is unique (its proposer part is the node's
//! incarnation) and it proposes one value per ballot, so one ballot never
//! carries two values.
//!
//! **First ballots** ([`Ballot::first`]) are below every other ballot,
//! and a proposer proposes at one without a prepare: the value of a change
//! made on a partition that holds nothing (a lock taken on a new key), in
//! one round trip instead of two. This is Paxos' own shortcut for its
//! lowest ballot: no value can have been accepted below it, so phase 1
//! has nothing to find. Here many proposers share the lowest rank, so an
//! acceptor takes a first ballot only while it holds nothing at all (no
//! promise, nothing accepted or committed): of two first ballots, each
//! acceptor takes the one that reaches it first. A value decided at a
//! first ballot thus had a quorum that held nothing, so nothing was
//! decided before it; and once any acceptor of every quorum holds
//! something (every value decided since), no first ballot can be decided
//! again. Each first ballot is unique (a random proposer part), so one
//! still never carries two values. An acceptor's state only grows: `promised`,
//! `accepted` and `committed` never go back, which is what makes the
//! answers of a quorum prove something (see the node's `agree::round`).
//! The node must make the new state durable before it answers.

use bincode::{Decode, Encode};

/// Most bytes a register's value may hold: Redis' string limit is larger,
/// but an agreed value travels whole in every round.
pub const VALUE_BYTES_MAX: usize = 512 << 10;

/// Most bytes a partition's registers take together (every column, value
/// and deadline): one round carries them all.
pub const REGISTERS_BYTES_MAX: usize = 1 << 20;

/// A Paxos ballot: a hybrid logical clock reading (wall-clock ms, then a
/// sequence within it) and the proposer's incarnation (its counter_id).
/// Ordered by its fields in turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct Ballot {
    /// The proposer's hybrid clock, ms since the Unix epoch.
    pub ms: u64,
    /// Ballots made within one ms of that clock.
    pub seq: u32,
    /// The proposer's counter_id.
    pub proposer: u64,
}

impl Ballot {
    /// No ballot: below every ballot a proposer makes.
    pub const ZERO: Ballot = Ballot {
        ms: 0,
        seq: 0,
        proposer: 0,
    };

    /// A first ballot (see the module doc): above [`Ballot::ZERO`] and
    /// below every ballot [`Ballot::next`] makes, made unique by `nonce`
    /// (drawn at random, so that no two attempts of any proposer share
    /// one; 0 is taken as 1).
    pub fn first(nonce: u64) -> Ballot {
        Ballot {
            ms: 0,
            seq: 0,
            proposer: nonce.max(1),
        }
    }

    /// Whether it is a first ballot.
    pub fn is_first(&self) -> bool {
        self.ms == 0 && *self != Ballot::ZERO
    }

    /// The next ballot of `proposer`: later than every ballot it has
    /// `seen` (its own included), at its wall clock `now_ms` when that is
    /// later, so that a proposer's ballots follow real time where clocks
    /// agree and still increase where they do not.
    pub fn next(now_ms: u64, seen: Ballot, proposer: u64) -> Ballot {
        if now_ms > seen.ms {
            return Ballot {
                ms: now_ms,
                seq: 0,
                proposer,
            };
        }
        match seen.seq.checked_add(1) {
            Some(seq) => Ballot {
                ms: seen.ms,
                seq,
                proposer,
            },
            None => Ballot {
                ms: seen.ms.saturating_add(1),
                seq: 0,
                proposer,
            },
        }
    }
}

impl std::fmt::Display for Ballot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}@{:x}", self.ms, self.seq, self.proposer)
    }
}

/// One register of a partition: a column's byte string and its deadline.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct Register {
    /// The column.
    pub column: Vec<u8>,
    /// The value, at most [`VALUE_BYTES_MAX`] bytes.
    pub value: Vec<u8>,
    /// When it expires, ms since the Unix epoch; 0 for never. Part of the
    /// agreed value: every replica reads the same deadline, and a reader
    /// whose clock has passed it reads the register as absent.
    pub at_ms: u64,
}

impl Register {
    /// Whether it reads as absent at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.at_ms != 0 && self.at_ms <= now_ms
    }

    /// Bytes it takes, as [`REGISTERS_BYTES_MAX`] counts them.
    pub fn size(&self) -> usize {
        self.column.len() + self.value.len() + 8
    }
}

/// A partition's registers, sorted by column, one per column. Empty: the
/// partition has none (every one deleted, or never set).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct Registers(pub Vec<Register>);

impl Registers {
    /// The register of `column`, unless it is absent or expired at `now_ms`.
    pub fn get(&self, column: &[u8], now_ms: u64) -> Option<&Register> {
        let i = self
            .0
            .binary_search_by(|r| r.column.as_slice().cmp(column))
            .ok()?;
        Some(&self.0[i]).filter(|r| !r.expired(now_ms))
    }

    /// Sets `column`'s register (replacing the one there).
    pub fn put(&mut self, r: Register) {
        match self.0.binary_search_by(|x| x.column.cmp(&r.column)) {
            Ok(i) => self.0[i] = r,
            Err(i) => self.0.insert(i, r),
        }
    }

    /// Removes `column`'s register; whether there was one (expired or not).
    pub fn remove(&mut self, column: &[u8]) -> bool {
        match self.0.binary_search_by(|r| r.column.as_slice().cmp(column)) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Drops every register expired at `now_ms`: a proposer does so as it
    /// makes the next state, so that nothing expired is agreed again.
    pub fn drop_expired(&mut self, now_ms: u64) {
        self.0.retain(|r| !r.expired(now_ms));
    }

    /// Bytes they take together.
    pub fn size(&self) -> usize {
        self.0.iter().map(Register::size).sum()
    }

    /// Whether they keep this module's rules: sorted by column, one per
    /// column, each value and the whole within its limit. Checked on every
    /// state that comes off the wire or a disk.
    pub fn check(&self) -> Result<(), String> {
        if let Some(r) = self.0.iter().find(|r| r.value.len() > VALUE_BYTES_MAX) {
            return Err(format!(
                "a register of {} bytes, over the limit of {VALUE_BYTES_MAX}",
                r.value.len()
            ));
        }
        if self.size() > REGISTERS_BYTES_MAX {
            return Err(format!(
                "registers of {} bytes, over the limit of {REGISTERS_BYTES_MAX}",
                self.size()
            ));
        }
        if self.0.windows(2).any(|w| w[0].column >= w[1].column) {
            return Err("registers not sorted by column, or one column twice".into());
        }
        Ok(())
    }
}

/// A value an acceptor accepted, or learned was decided, at a ballot.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct Accepted {
    /// The ballot it was proposed at.
    pub ballot: Ballot,
    /// The partition's registers it proposes.
    pub value: Registers,
}

/// One acceptor's state for one partition (see the module doc).
///
/// # Invariants
/// - `promised >= committed.ballot`, and `promised >= accepted.ballot`.
/// - `accepted`, when there is one, is later than `committed`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Acceptor {
    /// No proposal of a lower ballot is accepted any more.
    pub promised: Ballot,
    /// The latest value accepted and not yet known decided.
    pub accepted: Option<Accepted>,
    /// The latest value known decided (ballot ZERO: none yet).
    pub committed: Accepted,
}

/// An acceptor's answer to a prepare.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum Promise {
    /// Promised: no lower ballot will be accepted. With what it holds.
    Promised {
        /// Its accepted value, if later than its committed one.
        accepted: Option<Accepted>,
        /// Its committed value.
        committed: Accepted,
    },
    /// It has promised a later ballot.
    Rejected {
        /// That ballot.
        promised: Ballot,
    },
}

impl Acceptor {
    /// A prepare of `ballot`: promises it unless a later one was promised.
    pub fn prepare(&mut self, ballot: Ballot) -> Promise {
        if ballot < self.promised {
            return Promise::Rejected {
                promised: self.promised,
            };
        }
        self.promised = ballot;
        Promise::Promised {
            accepted: self.accepted.clone(),
            committed: self.committed.clone(),
        }
    }

    /// A proposal: accepted unless a later ballot was promised, or, at a
    /// first ballot, unless this acceptor holds anything; else the ballot
    /// promised.
    pub fn accept(&mut self, proposal: Accepted) -> Result<(), Ballot> {
        if proposal.ballot < self.promised
            || (proposal.ballot.is_first() && *self != Acceptor::default())
        {
            return Err(self.promised);
        }
        self.promised = proposal.ballot;
        if proposal.ballot > self.committed.ballot {
            self.accepted = Some(proposal);
        }
        Ok(())
    }

    /// A value decided at its ballot: kept if later than the committed one.
    pub fn commit(&mut self, decided: Accepted) {
        if decided.ballot > self.committed.ballot
            || (decided.ballot == self.committed.ballot && decided.value > self.committed.value)
        {
            self.committed = decided;
        }
        self.promised = self.promised.max(self.committed.ballot);
        if self
            .accepted
            .as_ref()
            .is_some_and(|a| a.ballot <= self.committed.ballot)
        {
            self.accepted = None;
        }
    }

    /// Another copy of this partition's state (repair, replay): each part
    /// the later. Commutative, associative and idempotent.
    pub fn merge(&mut self, other: &Acceptor) {
        self.promised = self.promised.max(other.promised);
        let later = match (&self.accepted, &other.accepted) {
            (Some(a), Some(b)) => Some(a.max(b).clone()),
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        self.accepted = later;
        self.commit(other.committed.clone());
    }

    /// Whether its parts keep the invariants and their values the limits.
    pub fn check(&self) -> Result<(), String> {
        self.committed.value.check()?;
        if let Some(a) = &self.accepted {
            a.value.check()?;
            if a.ballot <= self.committed.ballot || a.ballot > self.promised {
                return Err("an accepted value out of order with its ballots".into());
            }
        }
        if self.committed.ballot > self.promised {
            return Err("a committed value later than the promise".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(ms: u64, proposer: u64) -> Ballot {
        Ballot {
            ms,
            seq: 0,
            proposer,
        }
    }

    fn value(s: &str) -> Registers {
        Registers(vec![Register {
            column: Vec::new(),
            value: s.as_bytes().to_vec(),
            at_ms: 0,
        }])
    }

    fn at(ballot: Ballot, s: &str) -> Accepted {
        Accepted {
            ballot,
            value: value(s),
        }
    }

    #[test]
    fn ballots_order_by_clock_then_sequence_then_proposer() {
        assert!(b(5, 9) < b(6, 1));
        assert!(b(5, 1) < b(5, 2));
        let one = Ballot {
            ms: 5,
            seq: 1,
            proposer: 1,
        };
        assert!(b(5, 9) < one);
    }

    #[test]
    fn a_next_ballot_is_later_than_all_seen_even_with_a_clock_behind() {
        assert_eq!(Ballot::next(10, b(5, 2), 1), b(10, 1));
        let behind = Ballot::next(3, b(5, 2), 1);
        assert!(behind > b(5, 2));
        assert_eq!((behind.ms, behind.seq, behind.proposer), (5, 1, 1));
        let full = Ballot {
            ms: 5,
            seq: u32::MAX,
            proposer: 2,
        };
        assert_eq!(Ballot::next(5, full, 1), b(6, 1));
    }

    #[test]
    fn a_promise_refuses_every_lower_ballot_after_it() {
        let mut a = Acceptor::default();
        assert!(matches!(a.prepare(b(5, 1)), Promise::Promised { .. }));
        assert_eq!(a.prepare(b(4, 1)), Promise::Rejected { promised: b(5, 1) });
        assert_eq!(a.accept(at(b(4, 1), "x")), Err(b(5, 1)));
        assert_eq!(a.accepted, None);
        // The same ballot again (a resent prepare) is promised again.
        assert!(matches!(a.prepare(b(5, 1)), Promise::Promised { .. }));
        assert_eq!(a.accept(at(b(5, 1), "x")), Ok(()));
        assert_eq!(a.accepted, Some(at(b(5, 1), "x")));
        a.check().unwrap();
    }

    #[test]
    fn a_promise_answers_what_was_accepted_and_committed() {
        let mut a = Acceptor::default();
        a.accept(at(b(5, 1), "x")).unwrap();
        assert_eq!(
            a.prepare(b(6, 2)),
            Promise::Promised {
                accepted: Some(at(b(5, 1), "x")),
                committed: Accepted::default(),
            }
        );
        a.commit(at(b(5, 1), "x"));
        assert_eq!(
            a.prepare(b(7, 2)),
            Promise::Promised {
                accepted: None,
                committed: at(b(5, 1), "x"),
            }
        );
        a.check().unwrap();
    }

    #[test]
    fn a_first_ballot_is_below_every_other_and_taken_only_by_an_acceptor_holding_nothing() {
        let (first, other) = (Ballot::first(7), Ballot::first(9));
        assert!(first.is_first() && !Ballot::ZERO.is_first() && !b(1, 1).is_first());
        assert!(Ballot::ZERO < first && first < b(1, 1));
        assert!(Ballot::next(5, Ballot::ZERO, 1) > other);
        assert!(Ballot::first(0).is_first(), "a nonce of 0 is taken as 1");
        let mut a = Acceptor::default();
        assert_eq!(a.accept(at(first, "x")), Ok(()));
        assert_eq!(a.accepted, Some(at(first, "x")));
        a.check().unwrap();
        // Another first ballot, even a higher one, finds it holding a value.
        assert!(other > first);
        assert_eq!(a.accept(at(other, "y")), Err(first));
        assert_eq!(a.accepted, Some(at(first, "x")));
        // Nor does one holding only a promise, or a commit, take one.
        let mut promised = Acceptor::default();
        promised.prepare(b(5, 1));
        assert_eq!(promised.accept(at(first, "x")), Err(b(5, 1)));
        let mut committed = Acceptor::default();
        committed.commit(at(b(5, 1), "v"));
        assert_eq!(committed.accept(at(first, "x")), Err(b(5, 1)));
        // Regular ballots go on above a value accepted at a first one.
        assert!(matches!(
            a.prepare(b(6, 2)),
            Promise::Promised {
                accepted: Some(_),
                ..
            }
        ));
        assert_eq!(a.accept(at(b(6, 2), "x")), Ok(()));
        a.check().unwrap();
    }

    #[test]
    fn a_commit_only_moves_forward_and_raises_the_promise() {
        let mut a = Acceptor::default();
        a.commit(at(b(9, 1), "new"));
        a.commit(at(b(5, 1), "old"));
        assert_eq!(a.committed, at(b(9, 1), "new"));
        assert_eq!(a.promised, b(9, 1));
        // A proposal below a decided ballot is refused.
        assert_eq!(a.accept(at(b(8, 2), "late")), Err(b(9, 1)));
        a.check().unwrap();
    }

    #[test]
    fn an_accepted_value_a_commit_supersedes_is_dropped() {
        let mut a = Acceptor::default();
        a.accept(at(b(5, 1), "x")).unwrap();
        a.commit(at(b(6, 2), "y"));
        assert_eq!(a.accepted, None);
        a.accept(at(b(7, 1), "z")).unwrap();
        a.commit(at(b(6, 2), "y"));
        assert_eq!(a.accepted, Some(at(b(7, 1), "z")));
        a.check().unwrap();
    }

    #[test]
    fn merge_is_a_join() {
        let mut states = Vec::new();
        let mut a = Acceptor::default();
        a.prepare(b(3, 1));
        states.push(a.clone());
        a.accept(at(b(3, 1), "x")).unwrap();
        states.push(a.clone());
        let mut c = Acceptor::default();
        c.commit(at(b(3, 1), "x"));
        c.prepare(b(8, 2));
        states.push(c.clone());
        let mut d = Acceptor::default();
        d.accept(at(b(6, 3), "w")).unwrap();
        states.push(d);
        states.push(Acceptor::default());
        let join = |x: &Acceptor, y: &Acceptor| {
            let mut m = x.clone();
            m.merge(y);
            m
        };
        for x in &states {
            assert_eq!(&join(x, x), x, "idempotent");
            for y in &states {
                assert_eq!(join(x, y), join(y, x), "commutative");
                join(x, y).check().unwrap();
                for z in &states {
                    assert_eq!(join(&join(x, y), z), join(x, &join(y, z)), "associative");
                }
            }
        }
    }

    #[test]
    fn registers_read_absent_once_expired_and_stay_sorted() {
        let mut r = Registers::default();
        r.put(Register {
            column: b"b".to_vec(),
            value: b"2".to_vec(),
            at_ms: 100,
        });
        r.put(Register {
            column: b"a".to_vec(),
            value: b"1".to_vec(),
            at_ms: 0,
        });
        r.check().unwrap();
        assert!(r.get(b"b", 99).is_some());
        assert!(r.get(b"b", 100).is_none());
        r.drop_expired(100);
        assert_eq!(r.0.len(), 1);
        assert!(r.remove(b"a"));
        assert!(!r.remove(b"a"));
        let unsorted = Registers(vec![
            Register {
                column: b"b".to_vec(),
                ..Register::default()
            },
            Register::default(),
        ]);
        assert!(unsorted.check().is_err());
        let big = Registers(vec![Register {
            value: vec![0; VALUE_BYTES_MAX + 1],
            ..Register::default()
        }]);
        assert!(big.check().is_err());
    }
}
