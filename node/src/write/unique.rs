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
use std::sync::Arc;

use tally_engine::{Cell, Key, unique};
use tally_net::wire::{Consistency, ErrorKind, PeerRequest, PeerResponse, WireError};

use super::forward::{forward, unexpected};
use super::replicate::{Write, replicate};
use super::round::Verdict;
use crate::convert::engine_error;
use crate::ctx::Ctx;
use crate::placement::Route;

/// Admissions that met a newer epoch, tried again at most this often.
const ATTEMPTS_MAX: u32 = 4;

/// Adds `members` to the unique counter `partition` at `cl`; answers, per
/// member, whether it was new.
pub(crate) async fn add(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    members: &[Vec<u8>],
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    crate::unique::check_members(members)?;
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
        let (ctx, count) = (ctx.clone(), count.clone());
        calls.spawn(async move { (idx, add_group(&ctx, &count, group, cl).await) });
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
    count: &Key,
    members: Vec<Vec<u8>>,
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    match ctx.route_once(count, &members[0], cl)? {
        Route::Lead(_) => lead(ctx, count, &members, cl).await,
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
    partition: &[u8],
    members: &[Vec<u8>],
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    crate::unique::check_members(members)?;
    let count = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    let Some(first) = members.first() else {
        return Ok(Vec::new());
    };
    let replicas = ctx.replicas(partition);
    if members.iter().any(|m| {
        tally_net::once::applier(&replicas, m) != tally_net::once::applier(&replicas, first)
    }) {
        return Err(WireError::new(
            ErrorKind::Invalid,
            "members of several appliers in one admission",
        ));
    }
    ctx.lead_once_here(&count, first, cl)?;
    lead(ctx, &count, members, cl).await
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
    let replicas = ctx.replicas(count.partition());
    let mut first_new: Option<Vec<bool>> = None;
    for attempt in 1..=ATTEMPTS_MAX {
        let (admission, durable) = ctx
            .engine
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
        ctx.engine
            .apply(count, &Cell::from_parts(epoch, []))
            .await
            .map_err(|e| engine_error(&e))?;
    }
    Err(WireError::unknown(
        ErrorKind::Unavailable,
        "the unique counter kept being reset while members were added; adding them again is safe",
    ))
}
