//! How far from wrapping a cell from a peer must be.
//!
//! Clocks and epochs are `u64`s that only ever grow by one: a leader's add
//! takes its shard's clock to `clock + 1`, a reset takes the epoch to
//! `epoch + 1`. No honest node comes within 2^32 of `u64::MAX` (at a
//! billion adds a second to one counter that is 580 years away), but a peer
//! can *send* any value, and a shard merged in at `u64::MAX` would make the
//! next `+ 1` wrap, or be refused forever. So a cell whose clock or epoch
//! is within [`WRAP_MARGIN`] of the end is refused where it comes in from a
//! peer, in a request ([`check_cell`], by the node's authorization) or in
//! an answer ([`check_answer`], by the transport), before it reaches any
//! merge. So is a `Stale` answer's epoch, which a writer would catch up to,
//! and an agreement ballot's clock ([`check_ballot`]), which a proposer
//! makes its next ballot above.

use crate::wire::{Acceptor, Ballot, PeerResponse, Promise, WireCell};

/// Clocks and epochs above `u64::MAX - WRAP_MARGIN` (the engine's
/// `CLOCK_MAX`, the largest it makes) are refused.
pub const WRAP_MARGIN: u64 = 1 << 32;

/// The first value refused: one past the engine's `CLOCK_MAX`.
pub const WRAP_FLOOR: u64 = u64::MAX - WRAP_MARGIN + 1;

/// A clock or epoch too close to `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value} is within 2^32 of u64::MAX")]
pub struct NearWrap {
    /// `"clock"`, `"epoch"` or `"stamp"`.
    pub what: &'static str,
    /// The value.
    pub value: u64,
}

/// Whether every clock, the epoch and its deadline's stamp in `cell` are
/// far from wrapping (a stamp at the end of its range would win over
/// every later change of the deadline).
pub fn check_cell(cell: &WireCell) -> Result<(), NearWrap> {
    if cell.epoch.n >= WRAP_FLOOR {
        return Err(NearWrap {
            what: "epoch",
            value: cell.epoch.n,
        });
    }
    if cell.epoch.expiry.stamp.ms >= WRAP_FLOOR {
        return Err(NearWrap {
            what: "stamp",
            value: cell.epoch.expiry.stamp.ms,
        });
    }
    match cell.shards.iter().find(|s| s.clock >= WRAP_FLOOR) {
        Some(s) => Err(NearWrap {
            what: "clock",
            value: s.clock,
        }),
        None => Ok(()),
    }
}

/// Whether an agreement ballot's clock is far from wrapping (a proposer
/// must always be able to make a later one).
pub fn check_ballot(ballot: Ballot) -> Result<(), NearWrap> {
    if ballot.ms >= WRAP_FLOOR {
        return Err(NearWrap {
            what: "ballot",
            value: ballot.ms,
        });
    }
    Ok(())
}

/// [`check_ballot`] of every ballot in an acceptor's state.
pub fn check_acceptor(a: &Acceptor) -> Result<(), NearWrap> {
    check_ballot(a.promised)?;
    check_ballot(a.committed.ballot)?;
    a.accepted
        .as_ref()
        .map_or(Ok(()), |x| check_ballot(x.ballot))
}

/// Whether the cells (or the epoch, or the ballots) in a peer's answer are
/// far from wrapping.
pub fn check_answer(answer: &PeerResponse) -> Result<(), NearWrap> {
    match answer {
        PeerResponse::Promise(Promise::Rejected { promised }) => check_ballot(*promised),
        PeerResponse::Promise(Promise::Promised {
            accepted,
            committed,
        }) => {
            check_ballot(committed.ballot)?;
            accepted.as_ref().map_or(Ok(()), |x| check_ballot(x.ballot))
        }
        PeerResponse::Proposed(promised) => promised.map_or(Ok(()), check_ballot),
        PeerResponse::Agreed(a) => check_acceptor(a),
        PeerResponse::AgreedStates { states, .. } => {
            states.iter().try_for_each(|(_, a)| check_acceptor(a))
        }
        PeerResponse::Cell(c) => check_cell(c),
        PeerResponse::Row(rows) => rows.iter().try_for_each(|(_, c)| check_cell(c)),
        PeerResponse::Tails { learned, .. } => learned.iter().try_for_each(|l| check_cell(&l.cell)),
        PeerResponse::Stale { epoch } if epoch.n >= WRAP_FLOOR => Err(NearWrap {
            what: "epoch",
            value: epoch.n,
        }),
        PeerResponse::Pong { .. }
        | PeerResponse::PongNotWritable { .. }
        | PeerResponse::Hello { .. }
        | PeerResponse::Topology(_)
        | PeerResponse::Survey { .. }
        | PeerResponse::Folded(_)
        | PeerResponse::Applied
        | PeerResponse::Listed(_)
        | PeerResponse::Added(_)
        | PeerResponse::Admitted(_)
        | PeerResponse::Reset
        | PeerResponse::Changed(_)
        | PeerResponse::Digests(_)
        | PeerResponse::Leaves { .. }
        | PeerResponse::Keys(_)
        | PeerResponse::Script(_)
        | PeerResponse::Error(_)
        | PeerResponse::Stale { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Epoch, Expiry, Shard, Stamp};

    fn cell(epoch: u64, clocks: &[u64]) -> WireCell {
        WireCell {
            list: None,
            epoch: Epoch::at(epoch),
            shards: clocks
                .iter()
                .enumerate()
                .map(|(i, &clock)| Shard {
                    counter_id: i as u64,
                    clock,
                    value: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn values_within_2_pow_32_of_the_end_are_refused() {
        let near = |what, value| Err(NearWrap { what, value });
        let cases = [
            (cell(0, &[]), Ok(())),
            (cell(7, &[1, 2, 3]), Ok(())),
            (cell(WRAP_FLOOR - 1, &[WRAP_FLOOR - 1]), Ok(())),
            (cell(WRAP_FLOOR, &[1]), near("epoch", WRAP_FLOOR)),
            (cell(u64::MAX, &[]), near("epoch", u64::MAX)),
            (
                WireCell {
                    list: None,
                    epoch: Epoch {
                        expiry: Expiry {
                            at_ms: 0,
                            stamp: Stamp {
                                ms: u64::MAX,
                                id: 0,
                            },
                        },
                        ..Epoch::at(1)
                    },
                    ..cell(1, &[])
                },
                near("stamp", u64::MAX),
            ),
            (cell(0, &[1, WRAP_FLOOR]), near("clock", WRAP_FLOOR)),
            (cell(0, &[u64::MAX, 1]), near("clock", u64::MAX)),
            (cell(u64::MAX, &[u64::MAX]), near("epoch", u64::MAX)),
        ];
        for (c, want) in cases {
            assert_eq!(check_cell(&c), want, "{c:?}");
        }
    }

    #[test]
    fn answers_carrying_cells_or_epochs_near_wrapping_are_refused() {
        let near = |what, value| Err(NearWrap { what, value });
        let ok = cell(3, &[5]);
        let bad = cell(3, &[5, u64::MAX]);
        let cases = [
            (PeerResponse::Cell(ok.clone()), Ok(())),
            (PeerResponse::Cell(bad.clone()), near("clock", u64::MAX)),
            (PeerResponse::Row(vec![]), Ok(())),
            (
                PeerResponse::Row(vec![(b"a".to_vec(), ok.clone()), (b"b".to_vec(), bad)]),
                near("clock", u64::MAX),
            ),
            (PeerResponse::Row(vec![(b"a".to_vec(), ok)]), Ok(())),
            (
                PeerResponse::Stale {
                    epoch: Epoch::at(9),
                },
                Ok(()),
            ),
            (
                PeerResponse::Stale {
                    epoch: Epoch::at(WRAP_FLOOR),
                },
                near("epoch", WRAP_FLOOR),
            ),
            (PeerResponse::Added(i64::MAX), Ok(())),
            (PeerResponse::Applied, Ok(())),
        ];
        for (answer, want) in cases {
            assert_eq!(check_answer(&answer), want, "{answer:?}");
        }
    }

    #[test]
    fn the_margin_is_2_pow_32() {
        // The engine makes clocks up to u64::MAX - 2^32 and no further.
        assert_eq!(WRAP_FLOOR, 0xFFFF_FFFF_0000_0000);
        assert_eq!(u64::MAX - (WRAP_FLOOR - 1), 1 << 32);
    }
}
