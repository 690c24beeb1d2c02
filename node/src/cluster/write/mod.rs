//! The write path: every add and reset this node coordinates or leads.
//!
//! One way in for adds: [`Writes::submit`] queues a [`QueuedAdd`], whether
//! it came from the client protocol (answered as a frame), the RESP
//! listener or a peer that forwarded it here to lead (answered to a
//! waiting task, [`Writes::add`]). The batch task (`batch`) takes the
//! queue once per scheduler turn: it routes each add (`coordinate::route`,
//! by `placement`), forwards the ones another node leads
//! (`coordinate::ask`), combines the adds to one counter (`combine`),
//! seals them in the engine, and replicates them (`replicate`), whose
//! every decision is a pure [`round::Round`]; a round overtaken by a
//! newer epoch catches up and makes the write again (`retry`, by each
//! add's `attempt`).
//!
//! ```text
//! server / resp / peer ─▶ Writes::submit ─▶ queue ─▶ batch::run_batch
//!    ─▶ coordinate::route ─▶ combine ─▶ engine.add
//!    ─▶ replicate (Round per counter) ─▶ settle: answer, or catch up and queue again
//! ```
//!
//! Every other write takes the coordinator skeleton whole
//! (`coordinate::run`: route, then lead here or forward, then the answer
//! it expects): changes of a counter (`change`: SET, EXPIRE, resets), of
//! a whole key's deadline (`expire`: EXPIRE, PERSIST of a counter, a hash
//! or a set, one leader-side change of the row), of a list (`list`),
//! admissions to a unique counter (`unique`), each by the same round. An
//! admission's lead step waits in the adds' queue and is taken by the same
//! batch task, at the same pace. A write a peer forwarded here (`PeerRequest::Leader*`)
//! enters by [`serve`], into the same skeleton (an add, into the same
//! queue), and is led here or refused, never forwarded again.
//!
//! # What an add answers
//!
//! The value its leader sees right after it, as if the adds combined with
//! it ran one after another in arrival order (see `combine`). Through one
//! leader, adds of +1 to a counter thus answer distinct values, like Redis
//! `INCR`. Adds to one counter led by different nodes (clients of
//! different nodes, a leader that changed) each see their own shard at
//! once and the others' as far as replication has brought them: values
//! may repeat or step back between leaders, and every add is counted in
//! the final value either way.
//!
//! # Errors
//!
//! An error says whether the add was not applied (`Unavailable`, `Invalid`,
//! `Overflow`, and `Storage` when the leader refused before it wrote: a
//! full disk, a node that cannot write) or its outcome is unknown
//! (`Timeout`, or a `Storage` error after the shard may have left this
//! node): see `WireError::outcome`.

mod admission;
mod again;
mod attempt;
mod batch;
mod cells;
mod change;
mod changing;
mod combine;
mod coordinate;
mod expire;
mod forward;
mod in_flight;
mod list;
mod once;
pub(crate) mod queue;
mod replicate;
mod retry;
pub(crate) mod round;
mod serve;
pub(crate) mod strings;
pub(crate) mod unique;

pub(crate) use cells::{Partitions, keyed};
pub(crate) use list::Asked;
pub(crate) use serve::serve;

use std::sync::Arc;
#[cfg(feature = "fault-injection")]
use std::sync::atomic::{AtomicU64, Ordering};

use tally_engine::{Key, OpId};
use tally_net::wire::{Change, Changed, Consistency, ErrorKind, WireError};
use tokio::sync::oneshot;

use crate::cluster::ctx::Ctx;
use queue::{Origin, QueuedAdd, Reply, WriteQueue};

/// An add in the queue (see [`Writes::queue`]).
pub(crate) struct Queued {
    rx: oneshot::Receiver<Result<i64, WireError>>,
    /// A client's add is timed for the metrics.
    timer: Option<queue::Timer>,
}

impl Queued {
    /// The add's answer: the value its leader sees after it (see the
    /// module docs).
    pub(crate) async fn answer(self) -> Result<i64, WireError> {
        // Unanswered: the node stopped, perhaps after the batch was made.
        let answer = self.rx.await.unwrap_or_else(|_| {
            Err(WireError::unknown(
                ErrorKind::Storage,
                "the node is shutting down; the add may or may not have been applied",
            ))
        });
        if let Some(t) = self.timer {
            t.stop(&answer);
        }
        answer
    }
}

/// The write path of one node.
pub(crate) struct Writes {
    ctx: Arc<Ctx>,
    /// Adds and admissions waiting for their batch.
    queue: Arc<WriteQueue>,
    /// Fault injection: every Nth led add is acknowledged but not applied.
    #[cfg(feature = "fault-injection")]
    drop_every: AtomicU64,
    #[cfg(feature = "fault-injection")]
    led_adds: AtomicU64,
    /// Fault injection: adds with ids are applied without checking them.
    #[cfg(feature = "fault-injection")]
    ignore_ids: std::sync::atomic::AtomicBool,
    /// Fault injection and a test seam for list changes.
    #[cfg(feature = "fault-injection")]
    list_faults: list::ListFaults,
}

impl Writes {
    /// The write path over `ctx`; [`Writes::start`] starts its batch task.
    pub(crate) fn new(ctx: Arc<Ctx>) -> Arc<Writes> {
        Arc::new(Writes {
            ctx,
            queue: Arc::default(),
            #[cfg(feature = "fault-injection")]
            drop_every: AtomicU64::new(0),
            #[cfg(feature = "fault-injection")]
            led_adds: AtomicU64::new(0),
            #[cfg(feature = "fault-injection")]
            ignore_ids: std::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "fault-injection")]
            list_faults: list::ListFaults::default(),
        })
    }

    /// Starts the batch task; it ends once the write path is dropped.
    pub(crate) fn start(self: &Arc<Self>) {
        tokio::spawn(batch::run(Arc::downgrade(self)));
    }

    /// Queues an add; its answer goes where `add.reply` says.
    pub(crate) fn submit(&self, mut add: QueuedAdd) {
        if self.ignores_ids() {
            add.id = None; // fault injection: applied as new, every time
        }
        self.queue.push(add);
    }

    /// Queues an add and waits for its answer: the value the leader sees
    /// after it (see the module docs).
    pub(crate) async fn add(
        &self,
        key: Key,
        delta: i64,
        cl: Consistency,
        origin: Origin,
    ) -> Result<i64, WireError> {
        self.add_with(key, delta, None, cl, origin).await
    }

    /// [`Writes::add`] for an add with an operation id, if it has one.
    pub(crate) async fn add_with(
        &self,
        key: Key,
        delta: i64,
        id: Option<OpId>,
        cl: Consistency,
        origin: Origin,
    ) -> Result<i64, WireError> {
        self.queue_with(key, delta, id, cl, origin).answer().await
    }

    /// Queues a client's add now and answers it later ([`Queued::answer`]):
    /// a pipeline queues all of its adds before it waits for any.
    pub(crate) fn queue(&self, key: Key, delta: i64, cl: Consistency) -> Queued {
        self.queue_with(key, delta, None, cl, Origin::Client)
    }

    /// Queues an add, with its operation id if it has one; a client's is
    /// timed for the metrics.
    fn queue_with(
        &self,
        key: Key,
        delta: i64,
        id: Option<OpId>,
        cl: Consistency,
        origin: Origin,
    ) -> Queued {
        let timer = (origin == Origin::Client).then(|| queue::Timer::start(cl, self.ctx.metrics()));
        let (tx, rx) = oneshot::channel();
        let reply = Reply::Task(tx);
        self.submit(match id {
            Some(id) => QueuedAdd::with_id(key, delta, id, cl, origin, reply),
            None => QueuedAdd::new(key, delta, cl, origin, reply),
        });
        Queued { rx, timer }
    }

    /// Adds `members` to the unique counter `partition` at `cl` (see
    /// `unique`); answers, per member, whether it was new.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        partition: &[u8],
        members: &[Vec<u8>],
        cl: Consistency,
    ) -> Result<Vec<bool>, WireError> {
        unique::add(self, partition, members, cl).await
    }

    /// Changes a counter's epoch at `cl`: SET, EXPIRE, reset (see
    /// `change`); `reads`: the change answers the value before.
    pub(crate) async fn change(
        &self,
        key: &Key,
        c: Change,
        cl: Consistency,
        reads: bool,
    ) -> Result<Changed, WireError> {
        let op = change::ChangeOp::new(key, c, cl, reads);
        coordinate::run(&self.ctx, op, Origin::Client).await
    }

    /// Gives the key `partition` (its counter, else every live column of
    /// its hash, else its unique counter) the deadline `at_ms` (0: none)
    /// if `only` allows, at `cl`: one leader-side change of its row
    /// (`expire`). Answers whether any cell changed.
    pub(crate) async fn expire(
        &self,
        partition: &[u8],
        deadline: (u64, tally_net::wire::When),
        cl: Consistency,
    ) -> Result<bool, WireError> {
        let op = expire::ExpireRowOp::new(partition, deadline, cl)?;
        coordinate::run(&self.ctx, op, Origin::Client)
            .await
            .map(|done| done.applied)
    }

    /// Resets a counter at `cl`.
    pub(crate) async fn reset(&self, key: &Key, cl: Consistency) -> Result<(), WireError> {
        self.change(key, Change::Delete, cl, false)
            .await
            .map(|_| ())
    }

    /// FAULT INJECTION for testing checkers: from now on, every `n`th add
    /// this node leads is acknowledged without being applied (a lost write).
    #[cfg(feature = "fault-injection")]
    pub(crate) fn inject_drop_every(&self, n: u64) {
        self.drop_every.store(n, Ordering::Relaxed);
    }

    /// FAULT INJECTION for testing checkers: adds with ids are applied as
    /// new, never checked against the ids applied before.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn inject_ignore_ids(&self) {
        self.ignore_ids.store(true, Ordering::Relaxed);
    }

    /// Whether fault injection says to apply adds with ids unchecked (and
    /// to let any replica admit members to a unique counter, so that one
    /// member can count twice).
    #[cfg(feature = "fault-injection")]
    fn ignores_ids(&self) -> bool {
        self.ignore_ids.load(Ordering::Relaxed)
    }

    /// Never: this build has no fault injection.
    #[cfg(not(feature = "fault-injection"))]
    fn ignores_ids(&self) -> bool {
        false
    }

    /// Whether fault injection says to drop this led add.
    #[cfg(feature = "fault-injection")]
    fn drop_this_add(&self) -> bool {
        let every = self.drop_every.load(Ordering::Relaxed);
        every > 0 && self.led_adds.fetch_add(1, Ordering::Relaxed) % every == every - 1
    }

    /// Never: this build has no fault injection.
    #[cfg(not(feature = "fault-injection"))]
    fn drop_this_add(&self) -> bool {
        false
    }
}
