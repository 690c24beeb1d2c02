//! Unique counters across the cluster (see `tally_engine::unique` for the
//! cells): each member has one applier among the partition's replicas,
//! `tally_net::once::applier(replicas, member)`, which alone counts it, so
//! adds of one member through any nodes, at once or again later, count
//! once.
//!
//! ```text
//! coordinator: members grouped by applier ─▶ each group led here or forwarded
//! applier: queued with the adds ─▶ the batch task merges one turn's members
//!   to one counter ─▶ engine.admit (count + members, one record) ─▶ wait for the fsync
//!   ─▶ replicate the count's shard and the member cells (a round each)
//!   ─▶ answer which members were new
//! ```
//!
//! An add of members is safe to retry whatever its outcome: a member
//! already counted is not counted again. So an error after some groups
//! were admitted says so, and the caller retries the whole add.
//!
//! A round that ends in `Retry` (a replica had seen a reset the applier had
//! not) catches the count up to the newer epoch (`retry`) and admits again, where
//! the members of the discarded epoch read absent.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::oneshot;

use tally_engine::{Key, unique};
use tally_net::wire::{Consistency, ErrorKind, MEMBERS_MAX, PeerRequest, PeerResponse, WireError};

use super::Writes;
use super::admission::{Admission, Step};
use super::coordinate::{self, Lead, Leader, Op};
use super::in_flight::InFlight;
use super::queue::{Origin, QueuedAdmission};
use super::replicate::{Write, replicate};
use super::retry;
use super::round::Verdict;
use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;
use crate::ring::Replicas;

/// Most members one admission takes: with the count, its writes fit one
/// peer batch.
const ADMISSION_MEMBERS_MAX: usize = tally_net::wire::BATCH_MESSAGES_MAX - 1;

/// Queues members for this node to admit in the next batch; answers which
/// were new.
async fn queue(
    writes: &Writes,
    count: &Key,
    members: Vec<Vec<u8>>,
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    let (answer, rx) = oneshot::channel();
    writes.queue.push_admission(QueuedAdmission {
        count: count.clone(),
        cl,
        members,
        answer,
    });
    rx.await.unwrap_or_else(|_| {
        Err(WireError::unknown(
            ErrorKind::Storage,
            "the node is shutting down; the members may or may not have been added",
        ))
    })
}

/// Leads a batch's admissions: the members to one counter at one level
/// that arrived in one scheduler turn become one admission, one record,
/// one replication round. Each holds `in_flight` until answered, as the
/// batch's adds do.
pub(super) fn lead_batch(
    writes: &Arc<Writes>,
    taken: Vec<QueuedAdmission>,
    in_flight: &Arc<InFlight>,
) {
    let mut groups: HashMap<(Key, Consistency), Vec<QueuedAdmission>> = HashMap::new();
    for item in taken {
        groups
            .entry((item.count.clone(), item.cl))
            .or_default()
            .push(item);
    }
    for ((count, cl), items) in groups {
        for part in split(items) {
            let (ctx, count, in_flight) = (writes.ctx.clone(), count.clone(), in_flight.clone());
            tokio::spawn(async move {
                lead_merged(&ctx, &count, part, cl).await;
                drop(in_flight);
            });
        }
    }
}

/// Callers' admissions in parts of at most [`ADMISSION_MEMBERS_MAX`]
/// members (a caller's own are never more: see `MEMBERS_MAX`, checked
/// before anything is queued).
fn split(items: Vec<QueuedAdmission>) -> Vec<Vec<QueuedAdmission>> {
    let mut parts: Vec<Vec<QueuedAdmission>> = Vec::new();
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
async fn lead_merged(ctx: &Arc<Ctx>, count: &Key, items: Vec<QueuedAdmission>, cl: Consistency) {
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
pub(super) async fn add(
    writes: &Arc<Writes>,
    partition: &[u8],
    members: &[Vec<u8>],
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    check_members(members)?;
    let count = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let replicas = writes.ctx.replicas(partition);
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
        let (writes, count) = (writes.clone(), count.clone());
        calls.spawn(async move { (idx, add_group(&writes, &count, group, cl).await) });
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
        // The failed group's own words ("nothing was applied") hold for it
        // alone, so they are said of it.
        Some(e) => Err(WireError::unknown(
            e.kind,
            format!(
                "some members were not added ({}); others may have been: adding them all again is safe",
                e.message
            ),
        )),
    }
}

/// One applier's members: admitted here, or forwarded to their applier.
async fn add_group(
    writes: &Writes,
    count: &Key,
    members: Vec<Vec<u8>>,
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    let op = AdmitOp {
        writes,
        count,
        members,
        cl,
    };
    coordinate::run(&writes.ctx, op, Origin::Client).await
}

/// An admission of members of one applier to a unique counter, as the
/// coordinator skeleton runs it (`coordinate::run`): led by their applier
/// alone, whose lead step queues it for the batch task.
///
/// # Invariants
/// - `members` is not empty, and one replica applies them all (unless
///   fault injection says any may: `Writes::ignores_ids`).
pub(crate) struct AdmitOp<'a> {
    writes: &'a Writes,
    count: &'a Key,
    members: Vec<Vec<u8>>,
    cl: Consistency,
}

impl<'a> AdmitOp<'a> {
    /// The key of the unique counter `partition`'s count.
    pub(crate) fn count_key(partition: &[u8]) -> Result<Key, WireError> {
        unique::count_key(partition).map_err(|e| engine_error(&e))
    }

    /// The admission a coordinator forwarded here: refused unless its
    /// members are between 1 and `MEMBERS_MAX`, all of one applier.
    pub(crate) fn forwarded(
        writes: &'a Writes,
        count: &'a Key,
        members: Vec<Vec<u8>>,
        cl: Consistency,
    ) -> Result<Self, WireError> {
        check_members(&members)?;
        let op = AdmitOp {
            writes,
            count,
            members,
            cl,
        };
        let replicas = writes.ctx.replicas(count.partition());
        let first = tally_net::once::applier(&replicas, &op.members[0]);
        if !op.any_applier()
            && op
                .members
                .iter()
                .any(|m| tally_net::once::applier(&replicas, m) != first)
        {
            return Err(WireError::new(
                ErrorKind::Invalid,
                "members of several appliers in one admission",
            ));
        }
        Ok(op)
    }

    /// Fault injection: any replica admits members.
    fn any_applier(&self) -> bool {
        self.writes.ignores_ids()
    }
}

impl Op for AdmitOp<'_> {
    type Answer = Vec<bool>;

    fn what(&self) -> &'static str {
        "add"
    }

    fn key(&self) -> &Key {
        self.count
    }

    fn cl(&self) -> Consistency {
        self.cl
    }

    fn leader(&self) -> Leader<'_> {
        match self.any_applier() {
            true => Leader::Any, // fault injection
            false => Leader::Applier(&self.members[0]),
        }
    }

    fn request(self) -> PeerRequest {
        PeerRequest::LeaderAdmit {
            partition: self.count.partition().to_vec(),
            members: self.members,
            cl: self.cl,
        }
    }

    fn answer(resp: PeerResponse) -> Result<Vec<bool>, PeerResponse> {
        match resp {
            PeerResponse::Admitted(flags) => Ok(flags),
            other => Err(other),
        }
    }

    fn respond(flags: Vec<bool>) -> PeerResponse {
        PeerResponse::Admitted(flags)
    }
}

impl Lead for AdmitOp<'_> {
    fn lead(
        self,
        _ctx: &Arc<Ctx>,
        _replicas: Replicas,
    ) -> impl Future<Output = Result<Vec<bool>, WireError>> + Send {
        queue(self.writes, self.count, self.members, self.cl)
    }
}

/// Admits here, syncs, replicates; again in a newer epoch if a replica
/// knew one, or once the replicas confirm a count's restart: the steps
/// of `admission::Admission`, each done here.
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
    let mut admission = Admission::new(members.len());
    let mut cells = Vec::new();
    loop {
        match admission.step() {
            Step::Admit { .. } => match ctx.engine().admit(count.partition(), &names).await {
                Ok((admitted, durable)) => {
                    durable.wait().await.map_err(|e| engine_error(&e))?;
                    cells = admitted.replicate;
                    admission.on_admitted(&admitted.new);
                }
                Err(tally_engine::Error::Expired { epoch }) => admission.on_expired(epoch),
                Err(e) => return Err(engine_error(&e)),
            },
            Step::ConfirmRestart(epoch) => {
                super::change::confirm_restart(ctx, count, (&replicas, cl), epoch).await?;
                admission.on_caught_up();
            }
            Step::Replicate { attempt } => {
                let mut writes: Vec<Write> = std::mem::take(&mut cells)
                    .into_iter()
                    .map(|(key, cell)| Write::new(ctx, key, cell, replicas.clone(), cl, attempt))
                    .collect();
                let mut verdicts = Vec::new();
                replicate(ctx, &mut writes, async { Ok(()) }, |w| {
                    verdicts = w.iter().map(|w| w.round.verdict().cloned()).collect();
                })
                .await;
                let verdicts: Vec<Verdict> = verdicts.into_iter().flatten().collect();
                admission.on_verdicts(retry::next(&verdicts));
            }
            Step::CatchUp(epoch) => {
                retry::catch_up(ctx, count, epoch).await?;
                admission.on_caught_up();
            }
            Step::Answer(new) => return Ok(new),
            Step::Fail(e) => return Err(e),
        }
    }
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
