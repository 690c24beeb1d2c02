//! A write a newer epoch overtook: one rule for what its round's verdicts
//! say to do next ([`next`]), and one catch-up ([`catch_up`]), for every
//! path that makes a write in this node's own shard.
//!
//! A replica that answers `Stale` holds an epoch this node missed (a reset
//! made elsewhere): a shard made in the old epoch is one every replica
//! discards. An add (`batch`), an add with an id (`once`) and an admission
//! (`unique`) catch up to that epoch and are made again in it; the round
//! bounds how often (`round::STALE_ATTEMPTS_MAX`). A change (`change`,
//! `list`) is not made again: the newer epoch is a change it raced, and
//! the two are ordered by their epochs.
//!
//! ```text
//! replicate ─▶ verdicts ─▶ next: Answer | Fail(e) | Again(epoch)
//!   Again ─▶ catch_up(epoch) ─▶ batch/once: queue the adds again (attempt + 1)
//!                             ─▶ unique: admit again, in its loop
//! ```

use tally_engine::{Cell, Epoch, Key, Wait};
use tally_net::wire::WireError;
use tracing::debug;

use super::round::Verdict;
use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;
use crate::cluster::read;

/// What a write's verdicts say to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Next<'v> {
    /// Acknowledged: answer it.
    Answer,
    /// Not acknowledged, outcome unknown: answer this error.
    Fail(&'v WireError),
    /// Overtaken by this newer epoch: catch up to it and make the write
    /// again (or, for a change, count it as made before that epoch's).
    Again(Epoch),
}

/// What the verdicts of one write's rounds (one per cell it wrote) say to
/// do next: the first failure fails it, whatever the others say; else the
/// first newer epoch makes it again; else it is acknowledged.
pub(super) fn next<'v>(verdicts: impl IntoIterator<Item = &'v Verdict>) -> Next<'v> {
    let mut again = None;
    for verdict in verdicts {
        match verdict {
            Verdict::Ack => {}
            Verdict::Fail(e) => return Next::Fail(e),
            Verdict::Retry { epoch } => {
                again.get_or_insert(*epoch);
            }
        }
    }
    again.map_or(Next::Answer, Next::Again)
}

/// Catches this node up to `key`'s newer `epoch`, which a replica holds and
/// this node missed: merges the epoch (with no shards) here, so that the
/// write made again lands in it.
pub(super) async fn catch_up(ctx: &Ctx, key: &Key, epoch: Epoch) -> Result<(), WireError> {
    debug!(
        epoch = epoch.n,
        "leader was behind a reset; making the write again in the new epoch"
    );
    let cell = Cell::from_parts(epoch, []);
    read::apply_here(ctx, key, &cell, Wait::Durable)
        .await
        .map(|_| ())
        .map_err(|e| engine_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::ErrorKind;

    fn epoch(n: u64) -> Epoch {
        Epoch {
            n,
            ..Epoch::default()
        }
    }

    #[test]
    fn a_failure_wins_then_the_first_newer_epoch_then_the_answer() {
        let fail = Verdict::Fail(WireError::new(ErrorKind::Timeout, "late"));
        let retry = |n| Verdict::Retry { epoch: epoch(n) };
        let e = WireError::new(ErrorKind::Timeout, "late");
        let cases: &[(&[Verdict], Next)] = &[
            (&[], Next::Answer),
            (&[Verdict::Ack], Next::Answer),
            (&[Verdict::Ack, Verdict::Ack], Next::Answer),
            (&[retry(3)], Next::Again(epoch(3))),
            (&[Verdict::Ack, retry(3), retry(5)], Next::Again(epoch(3))),
            (&[retry(3), fail.clone()], Next::Fail(&e)),
            (&[fail.clone(), Verdict::Ack], Next::Fail(&e)),
        ];
        for (verdicts, want) in cases {
            assert_eq!(&next(verdicts.iter()), want, "{verdicts:?}");
        }
    }
}
