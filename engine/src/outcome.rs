//! What writes answer: a leaf, importing only cells and errors.

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

/// The durability of staged adds (see `Engine::leader_add_staged` and
/// `Engine::leader_add_batch`).
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

/// What [`Engine::leader_add_batch`](crate::Engine::leader_add_batch) did
/// with one add.
#[derive(Debug)]
pub enum Staged {
    /// Sealed on the calling thread: durable once the batch's [`Durable`] is.
    Sealed(AddOutcome),
    /// Not touched: adds are waiting to be combined into the cell (lone
    /// adds, from `leader_add`), or writes are stalled. Add it with
    /// `leader_add_staged`, which joins them.
    Hot,
    /// Refused (it would overflow); nothing was applied.
    Refused(Error),
}

impl AddOutcome {
    /// The cell to send to the other replicas.
    pub fn replica_cell(&self) -> Cell {
        Cell::from_parts(self.epoch, [self.shard])
    }
}
