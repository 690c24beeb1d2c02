//! What adds do once the engine or their round answered, by their
//! attempt (`attempt::Attempt`): the same for a batch's combined adds
//! (`batch`) and for adds with ids (`once`). A catch-up to a newer epoch
//! (`retry::catch_up`) and a confirmation of a restart
//! (`change::confirm_restart`) run on a task of their own, off the batch.

use std::sync::Arc;

use tally_engine::{Epoch, Key};
use tally_net::wire::{Consistency, WireError};

use super::Writes;
use super::attempt::{Attempt, Step, Why};
use super::queue::Replies;
use super::retry;
use super::round::Verdict;
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

/// Takes in the verdict of `adds`' round and goes on.
pub(super) fn settle<A: Attempted>(
    writes: &Arc<Writes>,
    adds: &mut A,
    verdict: Option<&Verdict>,
    replies: &mut Replies,
) {
    let verdict = verdict.expect("replicate reports once every round has a verdict");
    adds.attempt().on_verdict(verdict);
    go_on(writes, adds, replies);
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
        Step::CatchUp(epoch) => {
            tokio::spawn(catch_up(writes.clone(), adds.take(), epoch));
        }
        Step::Confirm(epoch) => {
            tokio::spawn(confirm(writes.clone(), adds.take(), epoch));
        }
        // The lead's own steps.
        Step::Seal | Step::Wait | Step::Replicate => {}
    }
}

/// Off the batch: catches `adds`' counter up to `epoch`, then goes on.
async fn catch_up<A: Attempted>(writes: Arc<Writes>, mut adds: A, epoch: Epoch) {
    let key = adds.at().0.clone();
    let caught_up = retry::catch_up(&writes.ctx, &key, epoch).await;
    adds.attempt().on_caught_up(caught_up);
    go_on_alone(&writes, adds);
}

/// Off the batch: confirms the restart of `adds`' counter at `epoch`,
/// then goes on.
async fn confirm<A: Attempted>(writes: Arc<Writes>, mut adds: A, epoch: Epoch) {
    let (key, replicas, cl) = adds.at();
    let (key, replicas) = (key.clone(), replicas.clone());
    let at = (&replicas, cl);
    let confirmed = super::change::confirm_restart(&writes.ctx, &key, at, epoch).await;
    adds.attempt().on_confirmed(confirmed);
    go_on_alone(&writes, adds);
}

fn go_on_alone<A: Attempted>(writes: &Arc<Writes>, mut adds: A) {
    let mut replies = Replies::default();
    go_on(writes, &mut adds, &mut replies);
    replies.send();
}
