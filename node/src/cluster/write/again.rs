//! What adds do once the engine or their round answered, by their
//! attempt (`attempt::Attempt`): the same for a batch's combined adds
//! (`batch`) and for adds with ids (`once`). A catch-up to a newer epoch
//! (`retry::catch_up`) and a confirmation of a restart
//! (`change::confirm_restart`) run on a task of their own, off the batch.

use std::sync::Arc;

use tally_engine::Key;
use tally_net::wire::{Consistency, WireError};

use super::Writes;
use super::attempt::{Attempt, Step, Why};
use super::queue::Replies;
use super::retry;
use crate::ring::Replicas;

/// Adds at an [`Attempt`]: a combined add (`batch`), or adds with ids to
/// one counter (`once`).
pub(super) trait Attempted: Send + Sized + 'static {
    fn attempt(&mut self) -> &mut Attempt;
    /// Their counter, its replicas and the level they were asked at.
    fn at(&self) -> (&Key, &Replicas, Consistency);
    /// Answers each of them what it made.
    fn succeed(&mut self, replies: &mut Replies);
    /// Answers each of them `e`.
    fn fail(&mut self, replies: &mut Replies, e: &WireError);
    /// Takes them out (to go on elsewhere), leaving none.
    fn take(&mut self) -> Self;
    /// Queues them again, at `attempt`, for `why`.
    fn queue_again(self, writes: &Writes, attempt: u32, why: Why);
}

/// Does what `adds`' attempt says next, once the engine or the round
/// answered: answers them, queues them again, or catches up (or confirms
/// their counter's restart) on a task of its own and then goes on.
pub(super) fn go_on<A: Attempted>(writes: &Arc<Writes>, adds: &mut A, replies: &mut Replies) {
    match adds.attempt().step() {
        Step::Answer => adds.succeed(replies),
        Step::Fail(e) => adds.fail(replies, &e),
        Step::Unconfirmed(epoch) => adds.fail(replies, &retry::unconfirmed(epoch)),
        Step::Again { attempt, why } => adds.take().queue_again(writes, attempt, why),
        Step::CatchUp(_) | Step::Confirm(_) => {
            tokio::spawn(off_batch(writes.clone(), adds.take()));
        }
        // The lead's own steps.
        Step::Seal | Step::Wait | Step::Replicate => {}
    }
}

/// A catch-up, or a confirmation of a restart, then what comes after.
async fn off_batch<A: Attempted>(writes: Arc<Writes>, mut adds: A) {
    let step = adds.attempt().step();
    let (key, replicas, cl) = adds.at();
    let (ctx, key, replicas) = (&writes.ctx, key.clone(), replicas.clone());
    match step {
        Step::CatchUp(epoch) => {
            let caught_up = retry::catch_up(ctx, &key, epoch).await;
            adds.attempt().on_caught_up(caught_up);
        }
        Step::Confirm(epoch) => {
            let at = (&replicas, cl);
            let confirmed = super::change::confirm_restart(ctx, &key, at, epoch).await;
            adds.attempt().on_confirmed(confirmed);
        }
        _ => {}
    }
    let mut replies = Replies::default();
    go_on(&writes, &mut adds, &mut replies);
    replies.send();
}
