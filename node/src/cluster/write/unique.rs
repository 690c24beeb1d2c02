//! Unique counters across the cluster (see `tally_engine::unique` for the
//! cells): each member has one applier among the partition's replicas,
//! `tally_net::once::applier(replicas, member)`, which alone counts it, so
//! adds of one member through any nodes, at once or again later, count
//! once.
//!
//! ```text
//! coordinator: members grouped by applier ─▶ each group led here or forwarded
//! applier: engine.admit (count + members, one record) ─▶ wait for the fsync
//!   ─▶ replicate the count's shard and the member cells (a round each)
//!   ─▶ answer which members were new
//! ```
//!
//! An add of members is safe to retry whatever its outcome: a member
//! already counted is not counted again. So an error after some groups
//! were admitted says so, and the caller retries the whole add.
//!
//! A round that ends in `Retry` (a replica had seen a reset the applier had
//! not) catches the count up to the newer epoch and admits again, where
//! the members of the discarded epoch read absent.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

use tally_engine::{Cell, Key, unique};
use tally_net::wire::{Consistency, ErrorKind, MEMBERS_MAX, PeerRequest, PeerResponse, WireError};

use super::forward::{forward, unexpected};
use super::replicate::{Write, replicate};
use super::round::Verdict;
use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;
use crate::cluster::placement::Route;

/// Admissions that met a newer epoch, tried again at most this often.
const ATTEMPTS_MAX: u32 = 4;
/// Most members one admission takes: with the count, its writes fit one
/// peer batch.
const ADMISSION_MEMBERS_MAX: usize = tally_net::wire::BATCH_MESSAGES_MAX - 1;

/// Admissions waiting for the batch task: the adds of members to one
/// counter that arrive in one scheduler turn become one admission, one
/// record, one replication round.
#[derive(Default)]
pub(crate) struct AdmitQueue {
    waiting: Mutex<Vec<Waiting>>,
    ready: Notify,
    /// Fault injection: any replica admits members (see
    /// `Writes::inject_ignore_ids`), so one member can count twice.
    pub(crate) any_applier: std::sync::atomic::AtomicBool,
}

/// One caller's members, waiting.
struct Waiting {
    count: Key,
    cl: Consistency,
    members: Vec<Vec<u8>>,
    answer: oneshot::Sender<Result<Vec<bool>, WireError>>,
}

impl AdmitQueue {
    /// Queues members for this node to admit; answers which were new.
    async fn admit(
        &self,
        count: &Key,
        members: Vec<Vec<u8>>,
        cl: Consistency,
    ) -> Result<Vec<bool>, WireError> {
        let (answer, rx) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock();
            waiting.push(Waiting {
                count: count.clone(),
                cl,
                members,
                answer,
            });
            if waiting.len() == 1 {
                self.ready.notify_one();
            }
        }
        rx.await.unwrap_or_else(|_| {
            Err(WireError::unknown(
                ErrorKind::Storage,
                "the node is shutting down; the members may or may not have been added",
            ))
        })
    }
}

/// Takes the queued admissions once per scheduler turn and leads each
/// counter's at one level as one, until the write path is gone.
pub(crate) async fn run(writes: Weak<super::Writes>) {
    loop {
        let Some(queue) = writes.upgrade().map(|w| w.admits.clone()) else {
            return;
        };
        queue.ready.notified().await;
        // Let the tasks that are ready queue theirs first.
        tokio::task::yield_now().await;
        let Some(w) = writes.upgrade() else {
            return;
        };
        let taken = std::mem::take(&mut *queue.waiting.lock());
        let mut groups: HashMap<(Key, Consistency), Vec<Waiting>> = HashMap::new();
        for item in taken {
            groups
                .entry((item.count.clone(), item.cl))
                .or_default()
                .push(item);
        }
        for ((count, cl), items) in groups {
            for part in split(items) {
                let ctx = w.ctx.clone();
                let count = count.clone();
                tokio::spawn(async move { lead_merged(&ctx, &count, part, cl).await });
            }
        }
    }
}

/// Callers' admissions in parts of at most [`ADMISSION_MEMBERS_MAX`]
/// members (a caller's own are never more: see `MEMBERS_MAX`, checked
/// before anything is queued).
fn split(items: Vec<Waiting>) -> Vec<Vec<Waiting>> {
    let mut parts: Vec<Vec<Waiting>> = Vec::new();
    let mut size = 0;
    for item in items {
        if parts.is_empty() || size + item.members.len() > ADMISSION_MEMBERS_MAX {
            parts.push(Vec::new());
            size = 0;
        }
        size += item.members.len();
        parts.last_mut().expect("pushed above").push(item);
    }
    parts
}

/// Leads several callers' members to one counter as one admission; each
/// caller gets its own members' flags (a member two callers added is new
/// to the first only).
async fn lead_merged(ctx: &Arc<Ctx>, count: &Key, items: Vec<Waiting>, cl: Consistency) {
    let all: Vec<Vec<u8>> = items
        .iter()
        .flat_map(|w| w.members.iter().cloned())
        .collect();
    let result = lead(ctx, count, &all, cl).await;
    let mut at = 0;
    for w in items {
        let n = w.members.len();
        let mine = result
            .as_ref()
            .map(|flags| flags[at..at + n].to_vec())
            .map_err(Clone::clone);
        at += n;
        let _ = w.answer.send(mine);
    }
}

/// Adds `members` to the unique counter `partition` at `cl`; answers, per
/// member, whether it was new.
pub(crate) async fn add(
    ctx: &Arc<Ctx>,
    admits: &Arc<AdmitQueue>,
    partition: &[u8],
    members: &[Vec<u8>],
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    check_members(members)?;
    let count = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let replicas = ctx.replicas(partition);
    for (i, m) in members.iter().enumerate() {
        unique::member_key(partition, m).map_err(|e| engine_error(&e))?;
        groups
            .entry(tally_net::once::applier(&replicas, m))
            .or_default()
            .push(i);
    }
    let mut calls = tokio::task::JoinSet::new();
    for idx in groups.into_values() {
        let group: Vec<Vec<u8>> = idx.iter().map(|&i| members[i].clone()).collect();
        let (ctx, admits, count) = (ctx.clone(), admits.clone(), count.clone());
        calls.spawn(async move { (idx, add_group(&ctx, &admits, &count, group, cl).await) });
    }
    let mut new = vec![false; members.len()];
    let mut failed = None;
    while let Some(joined) = calls.join_next().await {
        match joined {
            Ok((idx, Ok(flags))) if flags.len() == idx.len() => {
                idx.iter().zip(flags).for_each(|(&i, f)| new[i] = f);
            }
            Ok((_, Ok(_))) => {
                failed = Some(WireError::new(
                    ErrorKind::Internal,
                    "an applier answered for other members",
                ));
            }
            Ok((_, Err(e))) => failed = Some(e),
            Err(e) => {
                failed = Some(WireError::new(
                    ErrorKind::Internal,
                    format!("admission failed: {e}"),
                ))
            }
        }
    }
    match failed {
        None => Ok(new),
        // Some groups may have been admitted: the whole add may be retried.
        Some(e) => Err(WireError::unknown(
            e.kind,
            format!(
                "{}; members may have been added in part: adding them again is safe",
                e.message
            ),
        )),
    }
}

/// One applier's members: admitted here, or forwarded to their applier.
async fn add_group(
    ctx: &Arc<Ctx>,
    admits: &AdmitQueue,
    count: &Key,
    members: Vec<Vec<u8>>,
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    let route = match admits
        .any_applier
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        true => ctx.route(count, cl, "add")?, // fault injection
        false => ctx.route_once(count, &members[0], cl)?,
    };
    match route {
        Route::Lead(_) => admits.admit(count, members, cl).await,
        Route::Forward(applier) => {
            let req = PeerRequest::LeaderAdmit {
                partition: count.partition().to_vec(),
                members,
                cl,
            };
            match forward(ctx, &applier, req).await? {
                PeerResponse::Admitted(flags) => Ok(flags),
                other => Err(unexpected(&other)),
            }
        }
    }
}

/// The applier's admission for a coordinator that forwarded it.
pub(crate) async fn lead_forwarded(
    ctx: &Arc<Ctx>,
    admits: &AdmitQueue,
    partition: &[u8],
    members: &[Vec<u8>],
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    check_members(members)?;
    let count = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    let Some(first) = members.first() else {
        return Ok(Vec::new());
    };
    let replicas = ctx.replicas(partition);
    if !admits
        .any_applier
        .load(std::sync::atomic::Ordering::Relaxed)
        && members.iter().any(|m| {
            tally_net::once::applier(&replicas, m) != tally_net::once::applier(&replicas, first)
        })
    {
        return Err(WireError::new(
            ErrorKind::Invalid,
            "members of several appliers in one admission",
        ));
    }
    if !admits
        .any_applier
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        ctx.lead_once_here(&count, first, cl)?;
    }
    admits.admit(&count, members.to_vec(), cl).await
}

/// Admits here, syncs, replicates; again in a newer epoch if a replica
/// knew one.
async fn lead(
    ctx: &Arc<Ctx>,
    count: &Key,
    members: &[Vec<u8>],
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    let names: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
    // Held until the members are replicated (see `fences`).
    let _fence = ctx.fences().pass_admissions().await;
    if members
        .iter()
        .any(|m| ctx.applier_moving(count.partition(), m))
    {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            "the ring is switching over and moves the applier of these members; \
             nothing was added: adding them again is safe",
        ));
    }
    let replicas = ctx.replicas(count.partition());
    let mut first_new: Option<Vec<bool>> = None;
    for attempt in 1..=ATTEMPTS_MAX {
        let (admission, durable) = ctx
            .engine()
            .admit(count.partition(), &names)
            .await
            .map_err(|e| engine_error(&e))?;
        // Members new in a discarded epoch were new to the caller all the same.
        let new = match &first_new {
            Some(before) => before
                .iter()
                .zip(&admission.new)
                .map(|(a, b)| *a || *b)
                .collect(),
            None => admission.new.clone(),
        };
        durable.wait().await.map_err(|e| engine_error(&e))?;
        let mut writes: Vec<Write> = admission
            .replicate
            .into_iter()
            .map(|(key, cell)| Write::new(ctx, key, cell, replicas.clone(), cl, attempt))
            .collect();
        let mut verdicts = Vec::new();
        replicate(ctx, &mut writes, async { Ok(()) }, |w| {
            verdicts = w.iter().map(|w| w.round.verdict().cloned()).collect();
        })
        .await;
        let verdicts: Vec<Verdict> = verdicts.into_iter().flatten().collect();
        if let Some(Verdict::Fail(e)) = verdicts.iter().find(|v| matches!(v, Verdict::Fail(_))) {
            return Err(e.clone());
        }
        let newer = verdicts.iter().find_map(|v| match v {
            Verdict::Retry { epoch } => Some(*epoch),
            _ => None,
        });
        let Some(epoch) = newer else {
            return Ok(new);
        };
        first_new = Some(new);
        ctx.engine()
            .apply(count, &Cell::from_parts(epoch, []))
            .await
            .map_err(|e| engine_error(&e))?;
    }
    Err(WireError::unknown(
        ErrorKind::Unavailable,
        "the unique counter kept being reset while members were added; adding them again is safe",
    ))
}

/// Refuses a request with no members or too many.
pub(crate) fn check_members(members: &[Vec<u8>]) -> Result<(), WireError> {
    if members.is_empty() || members.len() > MEMBERS_MAX {
        return Err(WireError::new(
            ErrorKind::Invalid,
            format!(
                "{} members in one request (1 to {MEMBERS_MAX})",
                members.len()
            ),
        ));
    }
    Ok(())
}
