//! Changes of a counter's epoch: `SET`, `EXPIRE`/`PERSIST` and resets
//! (`DEL`). The leader first reads the cell from every live replica (at
//! least as many as the consistency level requires, within the read
//! timeout) and merges what it learns, so that its epoch is the newest one
//! any reachable replica knows and a condition (`NX`, `XX`, `GT` ...) is
//! judged on it; then the engine makes the change
//! (`tally_engine::change::decide`), and the new epoch, with no shards, is
//! replicated like a shard, by the same round as an add. A newer change
//! that overtook this one (a `Stale` answer) is one it raced: the two are
//! ordered by their epochs, and a SET or reset is acknowledged as made
//! first; a deadline is made again in the newer epoch
//! (`retry::made_again`).
//!
//! Reading only the consistency level's replicas would let a leader that
//! missed a reset make an epoch that already exists (resets to the same
//! epoch merge): the new reset would silently keep every add made since
//! the one it missed. Reading every live replica costs a change one round
//! trip more, and up to the read timeout while a replica is silent but not
//! yet marked down; changes are rare next to adds.

use std::future::Future;
use std::sync::Arc;

use tally_engine::{Key, Wait, now_ms};
use tally_net::wire::{Change, Changed, Consistency, PeerRequest, PeerResponse, WireError};
use tokio::sync::oneshot;

use super::changing::{Changing, Step};
use super::coordinate::{Lead, Leader, Op};
use super::replicate::{Write, replicate};
use super::retry::{self, Next};
use crate::base::convert::{engine_error, wire_key};
use crate::cluster::ctx::Ctx;
use crate::cluster::read;
use crate::ring::Replicas;

/// A change of a counter's epoch, as the coordinator skeleton runs it
/// (`coordinate::run`): led by any writable replica.
pub(crate) struct ChangeOp<'k> {
    key: &'k Key,
    change: Change,
    cl: Consistency,
    /// It answers the value before (refused on a list).
    reads: bool,
}

impl<'k> ChangeOp<'k> {
    /// `change` to the counter `key` at `cl`; `reads`: it answers the
    /// value before.
    pub(crate) fn new(key: &'k Key, change: Change, cl: Consistency, reads: bool) -> Self {
        ChangeOp {
            key,
            change,
            cl,
            reads,
        }
    }
}

impl Op for ChangeOp<'_> {
    type Answer = Changed;

    fn what(&self) -> &'static str {
        match self.change {
            Change::Set { .. } => "set",
            Change::Expire { .. } => "expire",
            Change::Delete => "reset",
        }
    }

    fn key(&self) -> &Key {
        self.key
    }

    fn cl(&self) -> Consistency {
        self.cl
    }

    fn leader(&self) -> Leader<'_> {
        Leader::Any
    }

    fn request(self) -> PeerRequest {
        PeerRequest::LeaderChange {
            key: wire_key(self.key),
            change: self.change,
            reads: self.reads,
            cl: self.cl,
        }
    }

    fn answer(resp: PeerResponse) -> Result<Changed, PeerResponse> {
        match resp {
            PeerResponse::Changed(done) => Ok(done),
            other => Err(other),
        }
    }

    fn respond(done: Changed) -> PeerResponse {
        PeerResponse::Changed(done)
    }
}

impl Lead for ChangeOp<'_> {
    fn lead(
        self,
        ctx: &Arc<Ctx>,
        replicas: Replicas,
    ) -> impl Future<Output = Result<Changed, WireError>> + Send {
        lead(ctx, self.key, (self.change, self.reads), self.cl, replicas)
    }
}

/// The leader's change (and whether it reads the value before): catch
/// up to the newest epoch, change, replicate; made again in a newer epoch
/// that overtook it, if the change is one that is (`retry::made_again`).
/// The steps are `changing::Changing`'s, each done here.
async fn lead(
    ctx: &Arc<Ctx>,
    key: &Key,
    (change, reads): (Change, bool),
    cl: Consistency,
    replicas: Replicas,
) -> Result<Changed, WireError> {
    let mut changing = Changing::new(retry::made_again(&change));
    // The engine's answer, and the new state to replicate.
    let (mut answer, mut state) = (None, None);
    loop {
        match changing.step() {
            Step::CatchUp => {
                catch_up(ctx, key, &replicas, cl).await?;
                changing.on_caught_up();
            }
            Step::Make => {
                let (done, made) = make(ctx, key, change, reads).await?;
                changing.on_made(done.applied);
                (answer, state) = (Some(done), Some(made));
            }
            Step::Settle => {
                settle_unmade(ctx).await?;
                changing.on_settled();
            }
            Step::Replicate { attempt } => {
                let made = state.take().ok_or_else(unmade)?;
                match replicate_header(ctx, key, made, replicas.clone(), (cl, attempt)).await? {
                    Replicated::Held => changing.on_held(),
                    Replicated::Overtaken(newer) => changing.on_overtaken(newer),
                }
            }
            Step::CatchUpTo(newer) => {
                retry::catch_up(ctx, key, newer).await?;
                changing.on_caught_up();
            }
            Step::Answer => return answer.ok_or_else(unmade),
        }
    }
}

/// A step that needs the change made came before it was (see
/// `changing`'s invariants).
pub(super) fn unmade() -> WireError {
    WireError::new(
        tally_net::wire::ErrorKind::Internal,
        "a change's step came before the change was made",
    )
}

/// The engine's change of `key` here, and the cell's new state.
async fn make(
    ctx: &Ctx,
    key: &Key,
    change: Change,
    reads: bool,
) -> Result<(Changed, tally_engine::Cell), WireError> {
    let (done, state) = ctx
        .engine()
        .change(key, change, now_ms(), reads)
        .await
        .map_err(|e| engine_error(&e))?;
    let before = match done.before.map(i64::try_from) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => {
            return Err(WireError::new(
                tally_net::wire::ErrorKind::Overflow,
                "the counter's value before is outside the range of a 64-bit counter",
            ));
        }
    };
    let done = Changed {
        applied: done.applied,
        before,
    };
    Ok((done, state))
}

/// The leader's first step of a change: reads the cell from every live
/// replica (at least `cl`'s count) and merges it here, so that the change
/// is judged on, and made after, the newest epoch any of them knows. What
/// it learns is durable here before the change; what it already had may
/// not be yet: a change made logs its whole cell, and one not made waits
/// for [`settle_unmade`] before it answers.
pub(super) async fn catch_up(
    ctx: &Arc<Ctx>,
    key: &Key,
    replicas: &Replicas,
    cl: Consistency,
) -> Result<(), WireError> {
    let (merged, _) = read::read_key(ctx, key, replicas, cl, read::Reach::AllLive).await?;
    read::apply_here(ctx, key, &merged, Wait::IfChanged)
        .await
        .map(|_| ())
        .map_err(|e| engine_error(&e))
}

/// Confirms the restart of `key`'s counter, expired here in `epoch`
/// (the engine refused an add with `Error::Expired`): reads its cell from
/// every live replica (at least `cl`'s count) and merges it here, as a
/// change catches up ([`catch_up`]), then tells the engine. A
/// replica that holds a later deadline this node missed (an `EXPIRE`
/// acknowledged at a level this node was not part of) keeps the counter
/// live, and the adds made again land in it; one that holds a newer epoch
/// moves it on; else the next add restarts it.
pub(super) async fn confirm_restart(
    ctx: &Arc<Ctx>,
    key: &Key,
    (replicas, cl): (&Replicas, Consistency),
    epoch: tally_engine::Epoch,
) -> Result<(), WireError> {
    tracing::debug!(
        epoch = epoch.n,
        "deadline passed; reading the replicas before the counter restarts"
    );
    catch_up(ctx, key, replicas, cl).await?;
    ctx.engine()
        .confirm_restart(key, epoch)
        .map_err(|e| engine_error(&e))
}

/// Waits until the state a change that was not made was judged on is
/// durable here, so that its answer never rests on state a crash loses.
pub(super) async fn settle_unmade(ctx: &Ctx) -> Result<(), WireError> {
    ctx.engine().barrier().await.map_err(|e| engine_error(&e))
}

/// How a change's replication was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Replicated {
    /// Held by as many replicas as the level asks.
    Held,
    /// A replica answered `Stale`: it holds this newer epoch, which wins
    /// over this change's (made by a later change, which saw this one if
    /// it was led here too).
    Overtaken(tally_engine::Epoch),
}

/// Replicates a change's new header (`state`, durable here) to `replicas`
/// by an add's round, the change's `attempt`-th (a round past the last
/// attempt fails where it would be overtaken); answers at the verdict of
/// `cl`, and the replication goes on for its hints.
pub(super) async fn replicate_header(
    ctx: &Arc<Ctx>,
    key: &Key,
    state: tally_engine::Cell,
    replicas: Replicas,
    (cl, attempt): (Consistency, u32),
) -> Result<Replicated, WireError> {
    let write = Write::new(ctx, key.clone(), state, replicas, cl, attempt);
    let (tx, rx) = oneshot::channel();
    let task_ctx = ctx.clone();
    tokio::spawn(async move {
        // The change returned once the new state was durable here.
        let local = std::future::ready(Ok(()));
        replicate(&task_ctx, &mut [write], local, |w| {
            let _ = tx.send(w[0].round.verdict().cloned());
        })
        .await;
    });
    match rx.await {
        Ok(Some(verdict)) => match retry::next([&verdict]) {
            Next::Answer => Ok(Replicated::Held),
            Next::Again(epoch) => Ok(Replicated::Overtaken(epoch)),
            Next::Fail(e) => Err(e.clone()),
        },
        Ok(None) | Err(_) => Err(WireError::unknown(
            tally_net::wire::ErrorKind::Internal,
            "the change's replication ended without a verdict",
        )),
    }
}
