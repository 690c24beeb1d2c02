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
//! not) catches up to the newer epoch (`retry`) and queues the adds again with
//! `reapply_stale`, so that the ledger applies them again in the new epoch
//! rather than answering the discarded application.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;
use tally_engine::{Epoch, Key, OnceAdd};
use tally_net::wire::{Consistency, ErrorKind, WireError};

use super::Writes;
use super::in_flight::InFlight;
use super::queue::{OnceId, Origin, QueuedAdd, Replies, Reply};
use super::replicate::{Write, replicate};
use super::retry::{self, Next};
use super::round::Verdict;
use crate::base::convert::{self, engine_error};
use crate::cluster::ctx::Ctx;
use crate::cluster::tails;
use crate::ring::Replicas;

/// A batch's adds with ids to one counter at one level.
struct Group {
    key: Key,
    cl: Consistency,
    replicas: Replicas,
    attempt: u32,
    adds: SmallVec<[OnceAdd; 1]>,
    /// Each add's answer, taken when answered.
    replies: SmallVec<[Option<Reply>; 1]>,
    /// Each add's value, once the engine answered it.
    values: SmallVec<[Option<i64>; 1]>,
}

impl Group {
    fn fail_now(&mut self, e: &WireError) {
        let mut replies = Replies::default();
        self.fail(&mut replies, e);
        replies.send();
    }

    fn fail(&mut self, replies: &mut Replies, e: &WireError) {
        for reply in self.replies.iter_mut().filter_map(Option::take) {
            replies.add(reply, Err(e.clone()));
        }
    }

    /// The adds the engine answered nothing (refused for a restart not
    /// confirmed), taken out as a group of their own.
    fn take_unanswered(&mut self) -> Group {
        let mut out = Group {
            key: self.key.clone(),
            cl: self.cl,
            replicas: self.replicas.clone(),
            attempt: self.attempt,
            adds: SmallVec::new(),
            replies: SmallVec::new(),
            values: SmallVec::new(),
        };
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

    fn succeed(&mut self, replies: &mut Replies) {
        for (reply, value) in self.replies.iter_mut().zip(&self.values) {
            if let (Some(reply), Some(v)) = (reply.take(), value) {
                replies.add(reply, Ok(*v));
            }
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
                attempt: 0,
                adds: SmallVec::new(),
                replies: SmallVec::new(),
                values: SmallVec::new(),
            });
            groups.len() - 1
        });
        let g = &mut groups[i];
        g.attempt = g.attempt.max(add.attempt);
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
            let again = g.take_unanswered();
            tokio::spawn(confirm(writes.clone(), again, epoch));
        }
        if let Some(cell) = s.replicate {
            let (key, replicas) = (g.key.clone(), g.replicas.clone());
            let write = Write::new(ctx, key, cell, replicas, g.cl, g.attempt);
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
            settle(&writes, g, shard.round.verdict(), &mut replies);
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

fn settle(writes: &Arc<Writes>, g: &mut Group, verdict: Option<&Verdict>, replies: &mut Replies) {
    let verdict = verdict.expect("replicate reports once every round has a verdict");
    match retry::next([verdict]) {
        Next::Answer => g.succeed(replies),
        Next::Fail(e) => g.fail(replies, e),
        Next::Again(epoch) => {
            let again = Group {
                key: g.key.clone(),
                cl: g.cl,
                replicas: g.replicas.clone(),
                attempt: g.attempt,
                adds: g.adds.clone(),
                replies: std::mem::take(&mut g.replies),
                values: std::mem::take(&mut g.values),
            };
            tokio::spawn(catch_up(writes.clone(), again, epoch));
        }
    }
}

/// This node missed a reset a replica has seen: catch up to the newer
/// epoch and queue the adds again, to be applied again in it.
async fn catch_up(writes: Arc<Writes>, mut g: Group, epoch: Epoch) {
    match retry::catch_up(&writes.ctx, &g.key, epoch).await {
        Ok(()) => queue_again(&writes, g, true),
        Err(e) => g.fail_now(&e),
    }
}

/// The adds' counter expired here in `epoch` and its restart is not
/// confirmed (nothing of theirs was applied): confirm it with the
/// replicas and queue them again, as they were.
async fn confirm(writes: Arc<Writes>, mut g: Group, epoch: Epoch) {
    if !retry::confirm_again(g.attempt) {
        g.fail_now(&retry::unconfirmed(epoch));
        return;
    }
    let at = (&g.replicas, g.cl);
    match super::change::confirm_restart(&writes.ctx, &g.key, at, epoch).await {
        Ok(()) => queue_again(&writes, g, false),
        Err(e) => g.fail_now(&e),
    }
}

/// Queues `g`'s adds again, to be led here at the next attempt;
/// `reapply_stale`: applied again in a newer epoch than their first
/// application's (else each keeps its own).
fn queue_again(writes: &Writes, g: Group, reapply_stale: bool) {
    for (add, reply) in g.adds.into_iter().zip(g.replies) {
        let Some(reply) = reply else { continue };
        writes.queue.push(QueuedAdd {
            attempt: g.attempt + 1,
            id: Some(Box::new(OnceId {
                id: add.id,
                reapply_stale: reapply_stale || add.reapply_stale,
            })),
            ..QueuedAdd::new(g.key.clone(), add.delta, g.cl, Origin::Lead, reply)
        });
    }
}
