//! The batch task: every queued add and admission, taken once per
//! scheduler turn and run as one batch (admissions: see `unique`).
//!
//! ```text
//! queue ─▶ batch: route each add (forward the ones another node leads),
//!   combine the adds to one counter ─▶ engine.add (one
//!   read-modify-write per counter, one waiter for the fsync) ─▶ replicate
//!   (one call per replica with every shard, a round per counter) ─▶
//!   answer, grouped per client connection (one write each)
//! ```
//!
//! A batch costs one task, one timer, one fsync waiter and one peer call
//! per replica, where adds one by one cost all of these each. Nothing waits
//! for a batch to fill: it holds what arrived while the node was busy, so
//! an idle node answers an add as soon as it would have alone.
//!
//! At most [`IN_FLIGHT_MAX`] (two) batches are in flight at a time: the
//! next one starts when fewer are answering, and holds every add that
//! arrived meanwhile (group commit for the whole pipeline). A batch costs a
//! few hundred microseconds of CPU across the cluster (fsyncs, datagrams,
//! wake-ups) whatever its size, so batches must not be cut small: one
//! every scheduler turn split 50 Redis clients on one node into about
//! three batches in flight. With one at a time, the clients split into two
//! halves taking turns: the half answered by a batch comes back while the
//! next is in flight and waits out all of it before its own starts. A
//! second batch in flight lets it start at once: 3-node `redis-benchmark
//! -c 50 -P 16` INCRBY went from 192k to 215k a second (medians of five
//! alternated runs; three in flight gave 203k). A batch that takes much
//! longer than the one before it (it waits for a slow replica at `ALL`, or
//! for its timeout) stops holding the next back after [`OVERLAP_FACTOR`]
//! times that one's time, at least [`OVERLAP_MIN`] and at most
//! [`OVERLAP_MAX`].
//!
//! The few adds the batch cannot seal at once stay on this path too, each
//! ending in the same round and the same answer rule:
//! - a cell that adds are waiting on, a write stall, or a record with
//!   operation ids not durable yet: the engine's sealer takes it, combined
//!   with the others waiting on its cell (`Staged::Queued`, awaited by
//!   `lead_hot` on a task of its own);
//! - a sum that would overflow where its adds alone may not: each is
//!   queued again on its own;
//! - an add a replica answered `Stale` for: this node catches up to the
//!   newer epoch and queues it again;
//! - an add to a counter whose deadline passed here: this node reads the
//!   replicas before it restarts the counter (`change::confirm_restart`),
//!   and queues it again.
//!
//! Each combined add takes these steps by its `attempt::Attempt`, a state
//! machine; what comes after the engine's refusal or the round's verdict
//! is `again::go_on`'s, as for adds with ids (`once`).

use super::in_flight::InFlight;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tally_engine::{Key, Queued, Staged};
use tally_net::wire::{BATCH_MESSAGES_MAX, Consistency, PeerRequest, PeerResponse};
use tally_world::Instant;
use tokio::sync::oneshot;

use super::Writes;
use super::again::{self, Attempted};
use super::combine::{Combined, combine};
use super::coordinate::{self, Leader, Op};
use super::queue::{QueuedAdd, Replies, Waiting, reply_one};
use super::replicate::replicate;
use crate::base::convert::{engine_error, wire_key, wire_op_id};
use crate::cluster::placement::Route;
use crate::ring::Replicas;

/// Batches in flight at once (see the module docs).
const IN_FLIGHT_MAX: usize = 2;
/// How long the next batch waits for a slow one, in multiples of the time
/// the last batch took.
const OVERLAP_FACTOR: u32 = 2;
/// The next batch waits at least this long for the one in flight.
const OVERLAP_MIN: Duration = Duration::from_millis(1);
/// The next batch never waits longer than this for the one in flight.
const OVERLAP_MAX: Duration = Duration::from_millis(10);

/// Takes the queue's adds and admissions in batches and runs each batch on
/// tasks of its own, until the node's write path is gone.
pub(crate) async fn run(writes: Weak<Writes>) {
    let Some(queue) = writes.upgrade().map(|w| w.queue.clone()) else {
        return;
    };
    let mut spare = Waiting::default();
    // The batches in flight, oldest first: when each started, and its end.
    let mut in_flight: VecDeque<(Instant, oneshot::Receiver<Instant>)> = VecDeque::new();
    // How long the last batch that ended took.
    let mut last = OVERLAP_MIN;
    loop {
        queue.ready().await;
        in_flight.retain_mut(|(started, done)| match done.try_recv() {
            Ok(ended) => {
                last = ended - *started;
                false
            }
            Err(oneshot::error::TryRecvError::Empty) => true,
            Err(oneshot::error::TryRecvError::Closed) => false,
        });
        if in_flight.len() >= IN_FLIGHT_MAX
            && let Some((started, done)) = in_flight.pop_front()
        {
            let patience = (last * OVERLAP_FACTOR).clamp(OVERLAP_MIN, OVERLAP_MAX);
            if let Ok(Ok(ended)) = tokio::time::timeout_at(started + patience, done).await {
                last = ended - started;
            }
        }
        // Let the tasks that are ready run first, so that the adds they
        // make join this batch.
        tokio::task::yield_now().await;
        let Some(writes) = writes.upgrade() else {
            return;
        };
        let mut waiting = queue.take(std::mem::take(&mut spare));
        let (done, end) = oneshot::channel();
        let batch = Arc::new(InFlight(Some(done)));
        in_flight.push_back((Instant::now(), end));
        if !waiting.admissions.is_empty() {
            let admissions = std::mem::take(&mut waiting.admissions);
            super::unique::lead_batch(&writes, admissions, &batch);
        }
        let adds = &mut waiting.adds;
        while !adds.is_empty() {
            let rest = adds.split_off(adds.len().min(BATCH_MESSAGES_MAX));
            let adds = std::mem::replace(adds, rest);
            tokio::spawn(run_batch(writes.clone(), adds, batch.clone()));
        }
        spare = waiting;
    }
}

/// Routes a batch's adds, seals the ones this node leads and replicates them.
async fn run_batch(writes: Arc<Writes>, adds: Vec<QueuedAdd>, in_flight: Arc<InFlight>) {
    let mut replies = Replies::default();
    let (once, lead) = route(&writes, adds, &mut replies);
    if !once.is_empty() {
        tokio::spawn(super::once::lead(writes.clone(), once, in_flight.clone()));
    }
    if lead.is_empty() {
        replies.send();
        return;
    }
    let mut combined = combine(lead);
    let ctx = &writes.ctx;
    super::strings::refuse_beside_strings(ctx, &mut combined, &mut replies);
    if combined.is_empty() {
        replies.send();
        return;
    }
    let (staged, durable) = match ctx
        .engine()
        .add(combined.iter().map(|c| (&c.key, c.delta())))
    {
        Ok(s) => s,
        Err(e) => {
            let e = engine_error(&e);
            combined.iter_mut().for_each(|c| c.fail(&mut replies, &e));
            replies.send();
            return;
        }
    };
    // The sealed ones, by their place in `combined`.
    let mut led = Vec::with_capacity(combined.len());
    let mut shards = Vec::with_capacity(combined.len());
    for (i, staged) in staged.into_iter().enumerate() {
        let adds = &mut combined[i];
        match staged {
            Staged::Sealed(outcome) => {
                sealed(adds, outcome.value);
                shards.push(adds.write(ctx, outcome.replica_cell()));
                led.push(i);
            }
            Staged::Queued(queued) => {
                adds.attempt.on_queued();
                tokio::spawn(lead_hot(writes.clone(), adds.take(), queued));
            }
            Staged::Refused(e) => {
                refused(adds, &e);
                again::go_on(&writes, adds, &mut replies);
            }
        }
    }
    // Early answers first: they need nothing from the replicas.
    replies.send();
    if shards.is_empty() {
        return;
    }
    let local = async { durable.wait().await.map_err(|e| engine_error(&e)) };
    replicate(ctx, &mut shards, local, |shards| {
        for (&i, shard) in led.iter().zip(shards.iter()) {
            again::settle(
                &writes,
                &mut combined[i],
                shard.round.verdict(),
                &mut replies,
            );
        }
        replies.send();
        // Answered: the next batch may start.
        drop(in_flight);
    })
    .await;
}

/// The engine sealed `adds`, making `value`.
fn sealed(adds: &mut Combined, value: i64) {
    adds.attempt.on_sealed();
    adds.value = value;
}

/// The engine refused `adds` with `e`.
fn refused(adds: &mut Combined, e: &tally_engine::Error) {
    match e {
        // Its deadline passed: confirm the restart first.
        tally_engine::Error::Expired { epoch } => adds.attempt.on_expired(*epoch),
        // A sum may overflow where some of its adds alone would not.
        e if adds.adds.splits(e) => adds.attempt.on_splits(),
        e => adds.attempt.on_refused(engine_error(e)),
    }
}

/// Routes each add: the ones this node leads are returned with their
/// replicas, those with operation ids first, the others are forwarded or
/// refused.
fn route(writes: &Arc<Writes>, adds: Vec<QueuedAdd>, replies: &mut Replies) -> (Led, Led) {
    let mut once = Vec::new();
    let mut lead = Vec::with_capacity(adds.len());
    for add in adds {
        let op = AddOp(&add);
        let rule = coordinate::rule(op.leader(), add.origin);
        match coordinate::route(&writes.ctx, op.key(), op.cl(), op.what(), rule) {
            Err(e) => replies.add(add.reply, Err(e)),
            Ok(Route::Lead(_)) if writes.drop_this_add() => {
                replies.add(add.reply, Ok(0)); // fault injection: a lost write
            }
            Ok(Route::Lead(replicas)) if add.id.is_some() => once.push((add, replicas)),
            Ok(Route::Lead(replicas)) => lead.push((add, replicas)),
            Ok(Route::Forward(live)) => forward(writes, add, live),
        }
    }
    (once, lead)
}

/// Forwards an add to the writable replicas in turn, on a task of its own.
fn forward(writes: &Arc<Writes>, add: QueuedAdd, writable: Vec<usize>) {
    let ctx = writes.ctx.clone();
    tokio::spawn(async move {
        let result = coordinate::ask(&ctx, &writable, AddOp(&add)).await;
        reply_one(add.reply, result);
    });
}

/// An add as the coordinator skeleton sees it: routed (here, in bulk) and
/// forwarded by its rules; its lead step is the batch.
pub(super) struct AddOp<'a>(pub(super) &'a QueuedAdd);

impl Op for AddOp<'_> {
    type Answer = i64;

    #[inline]
    fn what(&self) -> &'static str {
        "add"
    }

    #[inline]
    fn key(&self) -> &Key {
        &self.0.key
    }

    #[inline]
    fn cl(&self) -> Consistency {
        self.0.cl
    }

    /// Any writable replica; an add with an id, its applier alone.
    #[inline]
    fn leader(&self) -> Leader<'_> {
        match &self.0.id {
            None => Leader::Any,
            Some(once) => Leader::Applier(&once.id.client),
        }
    }

    fn request(self) -> PeerRequest {
        let (key, delta, cl) = (wire_key(&self.0.key), self.0.delta, self.0.cl);
        match &self.0.id {
            None => PeerRequest::LeaderAdd { key, delta, cl },
            Some(once) => PeerRequest::LeaderAddOnce {
                key,
                delta,
                id: wire_op_id(&once.id),
                cl,
            },
        }
    }

    fn answer(resp: PeerResponse) -> Result<i64, PeerResponse> {
        match resp {
            PeerResponse::Added(value) => Ok(value),
            other => Err(other),
        }
    }

    fn respond(value: i64) -> PeerResponse {
        PeerResponse::Added(value)
    }
}

/// Adds this node leads, with their replicas.
type Led = Vec<(QueuedAdd, Replicas)>;

/// Adds the engine handed to its sealer (a cell it holds adds for, a
/// write stall, or ids not durable yet): waits for them to be sealed
/// there, then the same round and answers as a batch.
async fn lead_hot(writes: Arc<Writes>, mut adds: Combined, queued: Queued) {
    let ctx = &writes.ctx;
    let (outcome, durable) = match queued.wait().await {
        Ok(staged) => staged,
        Err(e) => {
            refused(&mut adds, &e);
            let mut replies = Replies::default();
            again::go_on(&writes, &mut adds, &mut replies);
            replies.send();
            return;
        }
    };
    sealed(&mut adds, outcome.value);
    let mut shard = [adds.write(ctx, outcome.replica_cell())];
    let local = async { durable.wait().await.map_err(|e| engine_error(&e)) };
    replicate(ctx, &mut shard, local, |shard| {
        let mut replies = Replies::default();
        again::settle(&writes, &mut adds, shard[0].round.verdict(), &mut replies);
        replies.send();
    })
    .await;
}
