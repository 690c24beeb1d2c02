//! Writes this node coordinates but does not lead: sent to a writable replica
//! that leads them.
//!
//! A replica that could not be reached never saw the request, and one that
//! refused it with nothing applied (it cannot write, or its ring moved and
//! it is no replica of the key any more) did nothing with it: the next
//! writable one may lead instead. Any other failure ends the forward with
//! the error it had: a timeout or a lost connection leaves the outcome
//! unknown, and the next leader is never tried then. [`step`] is that
//! rule; [`forward`] only sends.

use tally_net::peer::PeerError;
use tally_net::wire::{ErrorKind, PeerRequest, PeerResponse, WireError};
use tracing::debug;

use crate::cluster::ctx::Ctx;
use crate::cluster::placement;

/// What a coordinator does after one leader's answer to a forwarded write.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// The leader answered: that is the write's answer.
    Done(PeerResponse),
    /// Nothing was applied where the next leader may not refuse alike:
    /// try the next one (this is the error if none is left).
    Next(WireError),
    /// The write ends with this error.
    Stop(WireError),
}

/// The rule of the module doc for one leader's answer: another leader is
/// tried only after nothing was applied, and only for what another leader
/// may not share (see `placement::next_leader_may_try`).
pub(super) fn step(answer: Result<PeerResponse, PeerError>) -> Step {
    match answer {
        Ok(PeerResponse::Error(e)) if placement::next_leader_may_try(&e) => Step::Next(e),
        Ok(PeerResponse::Error(e)) => Step::Stop(e),
        Ok(resp) => Step::Done(resp),
        Err(e @ PeerError::Unreachable { .. }) => Step::Next(WireError::not_applied(
            ErrorKind::Unavailable,
            format!("no replica could lead: {e}"),
        )),
        Err(e) => Step::Stop(WireError::unknown(
            ErrorKind::Timeout,
            format!("{e}; the leader may or may not have applied it"),
        )),
    }
}

/// Sends a leader request to the writable replicas in turn, until one
/// answers ([`step`]).
pub(crate) async fn forward(
    ctx: &Ctx,
    writable: &[usize],
    req: PeerRequest,
) -> Result<PeerResponse, WireError> {
    let mut last: Option<WireError> = None;
    // The leader has write_timeout for its replication: leave it room to
    // answer with its own verdict.
    let patience = ctx.write_timeout() + ctx.write_timeout() / 2;
    for &leader in writable {
        match step(ctx.transport().call(leader, req.clone(), patience).await) {
            Step::Done(resp) => return Ok(resp),
            Step::Next(e) => {
                debug!(leader = %ctx.name(leader), error = %e, "leader refused; trying the next");
                last = Some(e);
            }
            Step::Stop(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        WireError::not_applied(
            ErrorKind::Unavailable,
            "no replica could lead: none writable",
        )
    }))
}

/// A leader's answer of the wrong kind.
pub(crate) fn unexpected(resp: &PeerResponse) -> WireError {
    WireError::unknown(
        ErrorKind::Internal,
        format!("unexpected answer from the leader: {resp:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::Outcome;

    #[test]
    fn the_next_leader_is_tried_only_when_nothing_was_applied() {
        let peer = || "n2".to_string();
        let refused = WireError::not_applied(ErrorKind::Unavailable, "no replica in ring 7");
        let failed = WireError::new(ErrorKind::Overflow, "too big");
        assert_eq!(
            step(Ok(PeerResponse::Added(5))),
            Step::Done(PeerResponse::Added(5))
        );
        assert_eq!(
            step(Ok(PeerResponse::Error(refused.clone()))),
            Step::Next(refused),
            "a moved ring: the next leader may take it"
        );
        assert_eq!(
            step(Ok(PeerResponse::Error(failed.clone()))),
            Step::Stop(failed),
            "every leader would refuse it alike"
        );
        let unreachable = PeerError::Unreachable {
            peer: peer(),
            reason: "refused".into(),
        };
        assert!(matches!(
            step(Err(unreachable)),
            Step::Next(e) if e.outcome == Outcome::NotApplied && e.kind == ErrorKind::Unavailable
        ));
        for e in [
            PeerError::Lost {
                peer: peer(),
                reason: "reset".into(),
            },
            PeerError::Timeout {
                peer: peer(),
                ms: 9,
            },
        ] {
            assert!(matches!(
                step(Err(e)),
                Step::Stop(e) if e.outcome == Outcome::Unknown && e.kind == ErrorKind::Timeout
            ));
        }
    }
}
