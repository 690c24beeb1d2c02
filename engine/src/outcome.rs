//! What writes answer: a leaf, importing only cells and errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::oneshot;

use crate::cell::{Cell, Epoch, Shard};
use crate::error::{Error, Result};

/// What a leader add (or a group of combined adds) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddOutcome {
    /// The cell's epoch the add landed in.
    pub epoch: Epoch,
    /// This node's new own shard: what the cluster replicates.
    pub shard: Shard,
    /// The counter's value as this node saw it just after this add. Adds
    /// combined into one read-modify-write answer as if they had run one
    /// after another in arrival order: the k-th kept add answers the value
    /// before the RMW plus the kept deltas up to and including its own, the
    /// last one the cell's value after all of them. Refused adds count for
    /// nothing. The other fields are the same for all of them.
    pub value: i64,
    /// How many concurrent adds this one read-modify-write combined.
    pub combined: u32,
}

/// The durability of adds (see `Engine::add`).
pub struct Durable(pub(crate) DurableBy);

/// What a [`Durable`] waits for.
pub(crate) enum DurableBy {
    /// One add's own answer.
    Add(oneshot::Receiver<Result<AddOutcome>>),
    /// An ack behind records already in the group commit's outbox.
    Ack(oneshot::Receiver<Result<()>>),
    /// Nothing was written.
    Nothing,
}

impl Durable {
    /// Resolves once the commit log records are durable.
    pub async fn wait(self) -> Result<()> {
        let closed = |_| Error::Closed;
        match self.0 {
            DurableBy::Add(rx) => rx.await.map_err(closed)?.map(|_| ()),
            DurableBy::Ack(rx) => rx.await.map_err(closed)?,
            DurableBy::Nothing => Ok(()),
        }
    }
}

/// What [`Engine::add`](crate::Engine::add) did with one add.
#[derive(Debug)]
pub enum Staged {
    /// Sealed on the calling thread: durable once the batch's [`Durable`] is.
    Sealed(AddOutcome),
    /// Handed to the sealer, which combines it with the adds already
    /// waiting on the cell (or holds it through a write stall, or until a
    /// record with ids is durable): [`Queued::wait`] answers it.
    Queued(Queued),
    /// Refused (it would overflow); nothing was applied.
    Refused(Error),
}

/// An add the sealer holds (see [`Staged::Queued`]).
#[derive(Debug)]
pub struct Queued {
    /// Fires when the add is sealed, before its fsync; dropped unsent if
    /// the add is refused, or its outcome waits for durability.
    pub(crate) sealed: oneshot::Receiver<AddOutcome>,
    /// Fires once the add is durable, or refused.
    pub(crate) done: oneshot::Receiver<Result<AddOutcome>>,
    /// Where a refusal is counted.
    pub(crate) refusals: Arc<Refusals>,
}

impl Queued {
    /// Answers the add's outcome as soon as it is sealed, before its
    /// fsync, with a [`Durable`] that resolves once it is on disk: as for
    /// a sealed add, replicate while the fsync runs and count this node's
    /// copy only after `Durable::wait`. An add sealed while a record with
    /// ids was not durable answers once durable (see `group_commit::once`).
    pub async fn wait(self) -> Result<(AddOutcome, Durable)> {
        match self.sealed.await {
            Ok(outcome) => Ok((outcome, Durable(DurableBy::Add(self.done)))),
            // Refused at sealing (overflow, a limit, poisoned): the reason
            // is in `done`. Or its outcome waited for durability.
            Err(_) => match self.done.await {
                Ok(Err(e)) => {
                    self.refusals.count(&e);
                    Err(e)
                }
                Ok(Ok(outcome)) => Ok((outcome, Durable(DurableBy::Nothing))),
                Err(_) => Err(Error::Closed),
            },
        }
    }
}

/// Writes refused because the cell would have held too many shards (see
/// `Stats::shard_limit_refusals`).
#[derive(Debug, Default)]
pub(crate) struct Refusals(AtomicU64);

impl Refusals {
    /// Counts `e` if it is a refusal for a limit of the cell.
    pub(crate) fn count(&self, e: &Error) {
        if matches!(e, Error::TooManyShards { .. }) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The refusals counted so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What [`Engine::apply`](crate::Engine::apply) waits for before it
/// answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Every item's state durable here, the state of a cell that brings
    /// nothing new included (it may come from a record not durable yet).
    Durable,
    /// Only what the items changed: a batch that changed nothing answers
    /// at once (a leader's catch-up before a change, which then logs its
    /// whole cell, or waits for `Engine::barrier` if it makes none).
    IfChanged,
}

impl AddOutcome {
    /// The cell to send to the other replicas.
    pub fn replica_cell(&self) -> Cell {
        Cell::from_parts(self.epoch, [self.shard])
    }
}
