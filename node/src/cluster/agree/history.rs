//! The rounds a partition's agreed state came through, kept in the state
//! itself, so that a proposer outbid after it proposed can tell whether
//! its value took effect.
//!
//! Outbid after proposing, a proposer cannot know from ballots alone
//! whether another proposer found its value in flight and finished it
//! under a ballot of its own (then the change took effect, maybe with
//! more changes on top by now), or whether its value was dropped. So
//! every proposed state carries, in a reserved register, the number of
//! rounds decided before it plus one ([`Rounds::seq`]) and the ballots of
//! its last [`WINDOW`] rounds, its own last, each as a 64-bit hash (two
//! ballots of one window alike by chance: about one in 2^52). A retry that reads a state
//! whose window holds one of its ballots knows that attempt is in the
//! partition's history; a window without it, covering the round the
//! attempt would have been, says it is not, and never will be (a state
//! decided later descends from the one read). Only when the attempt's
//! round has left the window is the outcome unknown.

use tally_net::wire::{Ballot, Register, Registers};

/// The register of a partition's rounds (a column no client names: keys'
/// strings are column "", hash fields are not registers).
pub(crate) const COLUMN: &[u8] = b"\xff\xffrounds";

/// The rounds a state remembers: enough for a hot lock's retries, which
/// back off for up to a second or so while other clients' rounds go by.
pub(crate) const WINDOW: usize = 64;

/// A state's round and the ballots of its last rounds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rounds {
    /// The rounds decided up to and including this state (0: none yet).
    pub(crate) seq: u64,
    /// The ballots of rounds `seq - len + 1 ..= seq` ([`id`]s), oldest
    /// first.
    recent: Vec<u64>,
}

impl Rounds {
    /// The rounds `registers` record (none when they record none, or
    /// bytes that do not parse, which no proposer writes).
    pub(crate) fn of(registers: &Registers) -> Rounds {
        let Some(r) = registers.get(COLUMN, 0) else {
            return Rounds::default();
        };
        let (seq, rest) = r.value.split_at_checked(8).unwrap_or((&[], &[]));
        let Ok(seq) = seq.try_into().map(u64::from_le_bytes) else {
            return Rounds::default();
        };
        let recent = rest
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect();
        Rounds { seq, recent }
    }

    /// The rounds of a state proposed at `ballot` on top of this one.
    pub(crate) fn next(&self, ballot: Ballot) -> Rounds {
        let mut recent = self.recent.clone();
        recent.push(id(ballot));
        let over = recent.len().saturating_sub(WINDOW);
        recent.drain(..over);
        Rounds {
            seq: self.seq + 1,
            recent,
        }
    }

    /// `registers` with these rounds recorded.
    pub(crate) fn stamp(&self, registers: &mut Registers) {
        let mut value = Vec::with_capacity(8 + self.recent.len() * 8);
        value.extend_from_slice(&self.seq.to_le_bytes());
        for id in &self.recent {
            value.extend_from_slice(&id.to_le_bytes());
        }
        registers.put(Register {
            column: COLUMN.to_vec(),
            value,
            at_ms: 0,
        });
    }

    /// Whether the round of `ballot` is among the remembered ones.
    pub(crate) fn holds(&self, ballot: Ballot) -> bool {
        self.recent.contains(&id(ballot))
    }

    /// Whether round `seq` is remembered, or not reached yet: whether
    /// [`Rounds::holds`] can say if a state of that round is in this
    /// state's history.
    pub(crate) fn covers(&self, seq: u64) -> bool {
        seq + self.recent.len() as u64 > self.seq
    }
}

/// A ballot as a 64-bit hash (splitmix64 over its parts).
fn id(b: Ballot) -> u64 {
    fn mix(x: u64) -> u64 {
        let x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
    mix(b.ms ^ mix(u64::from(b.seq) ^ mix(b.proposer)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(ms: u64) -> Ballot {
        Ballot {
            ms,
            seq: 3,
            proposer: 7,
        }
    }

    #[test]
    fn rounds_round_trip_through_their_register() {
        let mut r = Registers::default();
        assert_eq!(Rounds::of(&r), Rounds::default());
        let rounds = Rounds::default().next(b(1)).next(b(2));
        rounds.stamp(&mut r);
        assert_eq!(Rounds::of(&r), rounds);
        assert_eq!(rounds.seq, 2);
        assert!(rounds.holds(b(1)) && rounds.holds(b(2)) && !rounds.holds(b(3)));
    }

    #[test]
    fn the_window_keeps_the_last_rounds_and_says_what_it_covers() {
        let mut rounds = Rounds::default();
        for ms in 1..=20 {
            rounds = rounds.next(b(ms));
        }
        assert_eq!(rounds.seq, 20);
        assert!(rounds.holds(b(1)) && rounds.covers(1), "within the window");
        for ms in 21..=WINDOW as u64 + 12 {
            rounds = rounds.next(b(ms));
        }
        assert!(!rounds.holds(b(12)) && rounds.holds(b(13)));
        assert!(!rounds.covers(12) && rounds.covers(13));
        // A round not reached yet is covered: no state of it is in the
        // history so far.
        assert!(rounds.covers(rounds.seq + 1));
        // Early on, every round so far is remembered.
        let two = Rounds::default().next(b(1)).next(b(2));
        assert!(two.covers(1));
    }

    #[test]
    fn bytes_no_proposer_wrote_are_no_rounds() {
        let mut r = Registers::default();
        r.put(Register {
            column: COLUMN.to_vec(),
            value: b"short".to_vec(),
            at_ms: 0,
        });
        assert_eq!(Rounds::of(&r), Rounds::default());
    }
}
