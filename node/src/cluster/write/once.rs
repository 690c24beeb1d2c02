//! Adds with operation ids, led by their applier (see `tally_net::once`):
//! applied at most once, every retry answered with the original value.
//!
//! ```text
//! batch: the adds with ids it leads ─▶ grouped per counter
//!   ─▶ refused at once while this node has not learned its lost tails (`tails`)
//!   ─▶ engine.add_once (the ledger decides under each cell lock)
//!   ─▶ refusals answered at once (conflict, expired id, overflow)
//!   ─▶ adds to a counter whose deadline passed: its restart confirmed
//!      with the replicas, queued again (`change::confirm_restart`)
//!   ─▶ replicate with the ids, while the fsync runs (a round per counter) ─▶ answer
//! ```
//!
//! The shard leaves this node before its record is durable here only with
//! every id of the cell this node could still lose in a crash (see
//! `tally_engine::ids::tail`): a replica must never hold an add whose id
//! nobody remembers, or a retry would count it again. When they are too
//! many for one message, the shard waits for the fsync instead. A retry is
//! replicated too, with the whole cell, before it is acknowledged: its
//! first attempt may have failed before it reached the level it asked for.
//!
//! A round that ends in `Retry` (a replica had seen a reset this node had
//! not) catches up to the newer epoch and queues the adds again with
//! `reapply_stale`, so that the ledger applies them again in the new epoch
//! rather than answering the discarded application. A group takes these
//! steps by its `attempt::Attempt`, as a batch's combined adds do
//! (`again::go_on`).

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;
use tally_engine::{Key, OnceAdd};
use tally_net::wire::{Consistency, ErrorKind, WireError};

use super::Writes;
use super::again::{self, Attempted};
use super::attempt::{Attempt, Why};
use super::in_flight::InFlight;
use super::queue::{OnceId, Origin, QueuedAdd, Replies, Reply};
use super::replicate::{Write, replicate};
use crate::base::convert::{self, engine_error};
use crate::cluster::ctx::Ctx;
use crate::cluster::tails;
use crate::ring::Replicas;

/// A batch's adds with ids to one counter at one level.
struct Group {
    key: Key,
    cl: Consistency,
    replicas: Replicas,
    attempt: Attempt,
    adds: SmallVec<[OnceAdd; 1]>,
    /// Each add's answer, taken when answered.
    replies: SmallVec<[Option<Reply>; 1]>,
    /// Each add's value, once the engine answered it.
    values: SmallVec<[Option<i64>; 1]>,
}

impl Group {
    /// A group of none of `self`'s adds, at the same attempt.
    fn empty(&self) -> Group {
        Group {
            key: self.key.clone(),
            cl: self.cl,
            replicas: self.replicas.clone(),
            attempt: self.attempt.clone(),
            adds: SmallVec::new(),
            replies: SmallVec::new(),
            values: SmallVec::new(),
        }
    }

    /// The adds the engine answered nothing (refused for a restart not
    /// confirmed), taken out as a group of their own.
    fn take_unanswered(&mut self) -> Group {
        let mut out = self.empty();
        for (i, add) in self.adds.iter().enumerate() {
            if self.values[i].is_none()
                && let Some(reply) = self.replies[i].take()
            {
                out.adds.push(add.clone());
                out.replies.push(Some(reply));
                out.values.push(None);
            }
        }
        out
    }
}

impl Attempted for Group {
    fn attempt(&mut self) -> &mut Attempt {
        &mut self.attempt
    }

    fn at(&self) -> (&Key, &Replicas, Consistency) {
        (&self.key, &self.replicas, self.cl)
    }

    fn succeed(&mut self, replies: &mut Replies) {
        for (reply, value) in self.replies.iter_mut().zip(&self.values) {
            if let (Some(reply), Some(v)) = (reply.take(), value) {
                replies.add(reply, Ok(*v));
            }
        }
    }

    fn fail(&mut self, replies: &mut Replies, e: &WireError) {
        for reply in self.replies.iter_mut().filter_map(Option::take) {
            replies.add(reply, Err(e.clone()));
        }
    }

    fn take(&mut self) -> Group {
        Group {
            adds: self.adds.clone(),
            replies: std::mem::take(&mut self.replies),
            values: std::mem::take(&mut self.values),
            ..self.empty()
        }
    }

    /// Queues the adds again, to be led here at `attempt`; caught up to
    /// a newer epoch, applied again in it (else each keeps its own
    /// application's).
    fn queue_again(self, writes: &Writes, attempt: u32, why: Why) {
        for (add, reply) in self.adds.into_iter().zip(self.replies) {
            let Some(reply) = reply else { continue };
            writes.queue.push(QueuedAdd {
                attempt,
                id: Some(Box::new(OnceId {
                    id: add.id,
                    reapply_stale: why == Why::CaughtUp || add.reapply_stale,
                })),
                ..QueuedAdd::new(self.key.clone(), add.delta, self.cl, Origin::Lead, reply)
            });
        }
    }
}

/// Groups adds per counter and level, in arrival order.
fn group(adds: Vec<(QueuedAdd, Replicas)>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut index: HashMap<(Key, Consistency), usize> = HashMap::new();
    for (add, replicas) in adds {
        let Some(id) = add.id else {
            unreachable!("only adds with ids are led here")
        };
        let i = *index.entry((add.key.clone(), add.cl)).or_insert_with(|| {
            groups.push(Group {
                key: add.key.clone(),
                cl: add.cl,
                replicas,
                attempt: Attempt::new(add.attempt),
                adds: SmallVec::new(),
                replies: SmallVec::new(),
                values: SmallVec::new(),
            });
            groups.len() - 1
        });
        let g = &mut groups[i];
        if add.attempt > g.attempt.n() {
            g.attempt = Attempt::new(add.attempt);
        }
        g.adds.push(OnceAdd {
            delta: add.delta,
            id: id.id,
            reapply_stale: id.reapply_stale,
        });
        g.replies.push(Some(add.reply));
        g.values.push(None);
    }
    groups
}

/// Leads a batch's adds with ids: seals, syncs, replicates, answers.
pub(super) async fn lead(
    writes: Arc<Writes>,
    adds: Vec<(QueuedAdd, Replicas)>,
    in_flight: Arc<InFlight>,
) {
    let ctx = &writes.ctx;
    let mut replies = Replies::default();
    // Held from the check through the read-modify-write (see `fences`).
    let fence = ctx.fences().pass_ids();
    let (groups, moving): (Vec<Group>, Vec<Group>) = group(adds).into_iter().partition(|g| {
        let partition = g.key.partition();
        !g.adds
            .iter()
            .any(|a| ctx.applier_moving(partition, &a.id.client))
    });
    for mut g in moving {
        g.fail(&mut replies, &applier_moving(ctx));
    }
    let (mut groups, waiting): (Vec<Group>, Vec<Group>) = groups
        .into_iter()
        .partition(|g| ctx.tails().ready(&g.replicas));
    for mut g in waiting {
        g.fail(&mut replies, &tails::not_ready(ctx));
    }
    let sealed = ctx
        .engine()
        .add_once(groups.iter().map(|g| (&g.key, g.adds.as_slice())));
    drop(fence);
    let (sealed, durable) = match sealed {
        Ok(s) => s,
        Err(e) => {
            let e = engine_error(&e);
            groups.iter_mut().for_each(|g| g.fail(&mut replies, &e));
            replies.send();
            return;
        }
    };
    let mut led = Vec::with_capacity(groups.len());
    let mut shards = Vec::with_capacity(groups.len());
    let mut all_tails = true;
    for (mut g, s) in groups.into_iter().zip(sealed) {
        let mut expired = None;
        for (i, answer) in s.answers.into_iter().enumerate() {
            match answer {
                Ok(once) => g.values[i] = Some(once.value()),
                // Its deadline passed: made again once the restart is confirmed.
                Err(tally_engine::Error::Expired { epoch }) => expired = Some(epoch),
                Err(e) => {
                    if let Some(reply) = g.replies[i].take() {
                        replies.add(reply, Err(engine_error(&e)));
                    }
                }
            }
        }
        if let Some(epoch) = expired {
            let mut again = g.take_unanswered();
            again.attempt.on_expired(epoch);
            again::go_on(&writes, &mut again, &mut replies);
        }
        if let Some(cell) = s.replicate {
            g.attempt.on_sealed();
            let (key, replicas) = (g.key.clone(), g.replicas.clone());
            let write = Write::new(ctx, key, cell, replicas, g.cl, g.attempt.n());
            match s.tail {
                // Everything of the cell is durable here: nothing to send along.
                Some(tail) if tail.ops.is_empty() => shards.push(write),
                Some(tail) => shards.push(write.with_tail(convert::wire_tail(&tail))),
                None => {
                    all_tails = false;
                    shards.push(write);
                }
            }
            led.push(g);
        }
    }
    replies.send();
    // Sealed: the next batch may seal while this one waits for its fsync
    // and its replicas (its records join the same group commit or the next).
    drop(in_flight);
    if shards.is_empty() {
        return;
    }
    let durable = if all_tails {
        Some(durable)
    } else {
        // Too many ids to go with a shard: durable here first (module doc).
        if let Err(e) = durable.wait().await {
            let e = engine_error(&e);
            led.iter_mut().for_each(|g| g.fail(&mut replies, &e));
            replies.send();
            return;
        }
        None
    };
    let local = async move {
        match durable {
            Some(d) => d.wait().await.map_err(|e| engine_error(&e)),
            None => Ok(()),
        }
    };
    replicate(ctx, &mut shards, local, |shards| {
        for (g, shard) in led.iter_mut().zip(shards.iter()) {
            again::settle(&writes, g, shard.round.verdict(), &mut replies);
        }
        replies.send();
    })
    .await;
}

/// The error of an add with an id refused while the ring switches over
/// and moves its applier: nothing was applied.
fn applier_moving(ctx: &Ctx) -> WireError {
    WireError::not_applied(
        ErrorKind::Unavailable,
        format!(
            "the ring is switching over (version {}) and moves the applier of this client's \
             ids for the partition; nothing was applied: retry the same id",
            ctx.ring_version()
        ),
    )
}
