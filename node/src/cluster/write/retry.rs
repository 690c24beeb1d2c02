//! A write a newer epoch overtook: one rule for what its round's verdicts
//! say to do next ([`next`]), and one catch-up ([`catch_up`]), for every
//! path that makes a write in this node's own shard.
//!
//! A replica that answers `Stale` holds an epoch this node missed (a reset
//! made elsewhere): a shard made in the old epoch is one every replica
//! discards. An add (`batch`), an add with an id (`once`) and an admission
//! (`unique`) catch up to that epoch and are made again in it; the round
//! bounds how often (`round::STALE_ATTEMPTS_MAX`). A SET, a reset and a
//! list change are not made again: the newer epoch is a change it raced,
//! and the two are ordered by their epochs. A deadline (`EXPIRE`,
//! `PERSIST`) is made again ([`made_again`]).
//!
//! An add the engine refused because its counter's deadline passed
//! (`Error::Expired`, see `Options::confirm_restarts`) waits for the
//! restart to be confirmed with the replicas (`change::confirm_restart`)
//! and is made again ([`confirm_again`]).
//!
//! ```text
//! replicate ─▶ verdicts ─▶ next: Answer | Fail(e) | Again(epoch)
//!   Again ─▶ catch_up(epoch) ─▶ batch/once: queue the adds again (attempt + 1)
//!                             ─▶ unique: admit again, in its loop
//! ```
//!
//! Adds (`batch`, `once`) take these steps by their `attempt::Attempt`,
//! and go on after their round or the engine's refusal by `again`.

use tally_engine::{Cell, Epoch, Key, Wait};
use tally_net::wire::{Change, WireError};
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

/// Whether a change that a newer epoch overtook is made again in that
/// epoch (rather than acknowledged as made before it).
///
/// A deadline is: the newer epoch may be the restart of a counter whose
/// old deadline passed at a leader that had not yet heard of this change.
/// An `EXPIRE` made while the counter was live, acknowledged as made
/// first, would have kept it live, so that restart could not have
/// happened; yet the restart wins and the deadline is lost with the old
/// epoch, leaving a counter that never expires. Made again, the deadline
/// lands on the epoch that is there, ordered after the change it raced
/// (and answers that a reset counter does not exist). A SET and a reset
/// replace the epoch whatever it was: made first, they lose nothing.
pub(super) fn made_again(change: &Change) -> bool {
    matches!(change, Change::Expire { .. })
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

/// Whether adds refused for an unconfirmed restart at their `attempt`-th
/// try are confirmed and made again (else they fail: the counter's
/// epoch kept moving under them).
pub(super) fn confirm_again(attempt: u32) -> bool {
    attempt < super::round::STALE_ATTEMPTS_MAX
}

/// The error of adds whose counter's epoch kept moving while they waited
/// for its restart to be confirmed: none of their tries was acknowledged.
pub(super) fn unconfirmed(epoch: Epoch) -> WireError {
    WireError::unknown(
        tally_net::wire::ErrorKind::Timeout,
        format!(
            "the counter's epoch kept moving (now {}) while its restart was confirmed; the add may or may not have been applied",
            epoch.n
        ),
    )
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
    fn only_a_deadline_is_made_again_in_the_epoch_that_overtook_it() {
        use tally_net::wire::{Presence, Ttl, When};
        let expire = |at_ms| Change::Expire {
            at_ms,
            only: When::Always,
        };
        assert!(made_again(&expire(1_000)));
        assert!(made_again(&expire(0)), "PERSIST too");
        assert!(!made_again(&Change::Delete));
        assert!(!made_again(&Change::Set {
            value: 5,
            ttl: Ttl::Keep,
            only: Presence::Live,
        }));
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
