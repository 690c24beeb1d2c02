//! The coordinator skeleton: every write a client asks of this node, and
//! every write a peer forwards here to lead, takes the same steps.
//!
//! ```text
//! client's write ─▶ run(op, Client) ─▶ route ─▶ Lead: op.lead(replicas) here
//!                                            └▶ Forward: ask, the op's
//!                                               PeerRequest::Leader* to the leaders in
//!                                               turn ─▶ Op::answer (the kind it expects)
//! peer's Leader* ─▶ serve::serve ─▶ run(op, Lead) ─▶ route: lead here or refuse,
//!                                               never forward again ─▶ op.lead ─▶ Op::respond
//! ```
//!
//! An operation ([`Op`]) says who may lead it ([`Leader`]), how it is asked
//! of a leader and what that leader answers; its lead step ([`Lead`]) is
//! its own: a change of a counter (`change`), of a list (`list`), an
//! admission of members (`unique`). An add's lead step is the batch
//! (`batch`): its adds are queued, then routed by the same [`route`] and
//! forwarded by the same [`ask`], in bulk.
//!
//! Which placement rule routes a write is [`rule`], a pure function of who
//! may lead it and where it came from; the rules themselves are
//! `placement`'s. A coordinator whose leader refuses a write with nothing
//! applied (it cannot write, or its ring moved and it is no replica any
//! more) tries the next leader: `forward::step`.

use std::future::Future;
use std::sync::Arc;

use tally_engine::Key;
use tally_net::wire::{Consistency, PeerRequest, PeerResponse, WireError};

use super::forward::{forward, unexpected};
use super::queue::Origin;
use crate::cluster::ctx::Ctx;
use crate::cluster::placement::Route;
use crate::ring::Replicas;

/// Who may lead a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leader<'a> {
    /// Any writable replica, this node first when it is one (an add, a
    /// change of a counter).
    Any,
    /// The first writable replica in ring order (a change of a list).
    First,
    /// The applier of these bytes alone (`tally_net::once::applier`): an
    /// add with an id (its client), an admission (its members').
    Applier(&'a [u8]),
}

/// The placement rule that routes a write (see `placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule<'a> {
    /// A client's write: led here when this node is a writable replica,
    /// else forwarded to the writable ones in turn.
    Route,
    /// A client's list change: led by the first writable replica.
    RouteFirst,
    /// A client's write only the applier of these bytes may lead.
    RouteOnce(&'a [u8]),
    /// A write a peer forwarded here: led here or refused.
    LeadHere,
    /// A forwarded write only the applier of these bytes may lead: led
    /// here when this node is that applier, or refused.
    LeadOnceHere(&'a [u8]),
}

/// Which rule routes a write that `leader` may lead and that came from
/// `origin`: a forwarded one (or one queued again here) is led here or
/// refused, never forwarded again, so that it cannot go round the ring.
#[inline]
pub(crate) fn rule(leader: Leader<'_>, origin: Origin) -> Rule<'_> {
    match (origin, leader) {
        (Origin::Client, Leader::Any) => Rule::Route,
        (Origin::Client, Leader::First) => Rule::RouteFirst,
        (Origin::Client, Leader::Applier(of)) => Rule::RouteOnce(of),
        (Origin::Lead, Leader::Any | Leader::First) => Rule::LeadHere,
        (Origin::Lead, Leader::Applier(of)) => Rule::LeadOnceHere(of),
    }
}

/// Where a write of `key` at `cl` goes: `rule` asked of this node's view.
/// A forwarded write is only ever `Route::Lead`.
#[inline]
pub(crate) fn route(
    ctx: &Ctx,
    key: &Key,
    cl: Consistency,
    what: &str,
    rule: Rule<'_>,
) -> Result<Route, WireError> {
    match rule {
        Rule::Route => ctx.route(key, cl, what),
        Rule::RouteFirst => ctx.route_first(key, cl, what),
        Rule::RouteOnce(of) => ctx.route_once(key, of, cl),
        Rule::LeadHere => ctx.lead_here(key, cl, what).map(Route::Lead),
        Rule::LeadOnceHere(of) => ctx.lead_once_here(key, of, cl).map(Route::Lead),
    }
}

/// A write as the coordinator skeleton sees it.
pub(crate) trait Op: Sized + Send {
    /// What its leader answers.
    type Answer: Send;

    /// What it is called in errors.
    fn what(&self) -> &'static str;
    /// The key whose replicas lead it.
    fn key(&self) -> &Key;
    /// Its consistency level.
    fn cl(&self) -> Consistency;
    /// Who may lead it.
    fn leader(&self) -> Leader<'_>;
    /// The request that asks a leader for it.
    fn request(self) -> PeerRequest;
    /// A leader's answer as this write's, or the answer back when it is of
    /// another kind.
    #[allow(
        clippy::result_large_err,
        reason = "an answer of another kind is rare, and goes back whole to be named in the error"
    )]
    fn answer(resp: PeerResponse) -> Result<Self::Answer, PeerResponse>;
    /// The answer a leader sends back for it.
    fn respond(answer: Self::Answer) -> PeerResponse;
}

/// A write this node leads on its own, not in a batch.
pub(crate) trait Lead: Op {
    /// The lead step: makes the write here, replicated to `replicas`.
    fn lead(
        self,
        ctx: &Arc<Ctx>,
        replicas: Replicas,
    ) -> impl Future<Output = Result<Self::Answer, WireError>> + Send;
}

/// Routes `op`, which came from `origin`, and leads it here or forwards it
/// to its leader, answering what the leader answers.
pub(crate) async fn run<O: Lead>(
    ctx: &Arc<Ctx>,
    op: O,
    origin: Origin,
) -> Result<O::Answer, WireError> {
    let rule = rule(op.leader(), origin);
    match route(ctx, op.key(), op.cl(), op.what(), rule)? {
        Route::Lead(replicas) => op.lead(ctx, replicas).await,
        Route::Forward(leaders) => ask(ctx, &leaders, op).await,
    }
}

/// Asks `op` of the `leaders` in turn (`forward`): the answer of the kind
/// it expects, or an error (a wrong kind is one, of unknown outcome).
pub(crate) async fn ask<O: Op>(
    ctx: &Ctx,
    leaders: &[usize],
    op: O,
) -> Result<O::Answer, WireError> {
    let resp = forward(ctx, leaders, op.request()).await?;
    O::answer(resp).map_err(|other| unexpected(&other))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_write_is_led_here_or_refused_by_the_rule_of_its_leader() {
        let of: &[u8] = b"client";
        let table = [
            (Leader::Any, Origin::Client, Rule::Route),
            (Leader::First, Origin::Client, Rule::RouteFirst),
            (Leader::Applier(of), Origin::Client, Rule::RouteOnce(of)),
            (Leader::Any, Origin::Lead, Rule::LeadHere),
            // A list's first replica may have changed on the way: any
            // writable replica the coordinator chose leads it.
            (Leader::First, Origin::Lead, Rule::LeadHere),
            (Leader::Applier(of), Origin::Lead, Rule::LeadOnceHere(of)),
        ];
        for (leader, origin, want) in table {
            assert_eq!(rule(leader, origin), want, "{leader:?} from {origin:?}");
        }
    }
}
