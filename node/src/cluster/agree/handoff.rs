//! Agreed state moves with its ranges. When a ring change (or a replace)
//! syncs the ranges a node gains from every current replica
//! (`repair::run::sync`), each replica of a range also sends its Paxos
//! states of the range's partitions (`AgreedIn`, a page at a time), and
//! their join, each part the later (`Acceptor::merge`), is merged into
//! every replica that lacks some of it (`MergeAgreed`), durably.
//!
//! Why that is enough: a value decided before the sync was accepted by a
//! majority of the range's replicas, so the join of all their states
//! holds it (or a later one), and so does the new replica after; a round
//! during the change has the pending replica among its participants and
//! needs one answer more (`round::Round::new`), so no value decided
//! meanwhile misses the new replica set's majorities either. The join is
//! what a proposer's prepare over all of them would find: no replica is
//! made to hold a value no replica accepted.
//!
//! Rules apart from I/O: [`join`] (pure, tested); the rest moves bytes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tally_net::ring::{TokenRange, murmur3_token};
use tally_net::wire::{
    AGREED_STATES_MAX, Acceptor, ErrorKind, PeerRequest, PeerResponse, WireError, WireRange,
};
use tracing::{info, warn};

use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;
use crate::cluster::features::AGREED_HANDOFF;

/// How long a replica may take to answer a page or take one.
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// About the most bytes of registers in one page.
const PAGE_BYTES: usize = 4 << 20;

/// Whether every one of `nodes` runs a build that moves agreed state
/// (the `agreed-handoff` feature): a sync with an older one leaves it
/// behind, as the builds before did, and says so.
pub(crate) fn every_build_moves_it<'a>(
    ctx: &Ctx,
    mut nodes: impl Iterator<Item = &'a usize>,
) -> bool {
    let Some(transport) = ctx.started_transport() else {
        return false;
    };
    let old = nodes.find(|&&n| {
        n != ctx.me()
            && !transport
                .build_of(n)
                .is_some_and(|b| b.features.iter().any(|f| f == AGREED_HANDOFF))
    });
    match old {
        None => true,
        Some(&n) => {
            warn!(node = %ctx.name(n), "agreed state stays behind: this node's build does not move it");
            false
        }
    }
}

/// Every replica's states of `ranges`, by partition: what each holds.
type Held = BTreeMap<Vec<u8>, Vec<(usize, Acceptor)>>;

/// Brings every replica of `ranges` to the join of their Paxos states of
/// the ranges' partitions; answers how many states it merged into a
/// replica that lacked them.
pub(crate) async fn sync(
    ctx: &Arc<Ctx>,
    replicas: &[usize],
    ranges: &[TokenRange],
) -> Result<u64, WireError> {
    let wire: Vec<WireRange> = ranges
        .iter()
        .map(|r| WireRange {
            start: r.start,
            end: r.end,
        })
        .collect();
    let mut held = Held::new();
    for &r in replicas {
        for (partition, state) in states_of(ctx, r, &wire).await? {
            held.entry(partition).or_default().push((r, state));
        }
    }
    let mut moved = 0;
    for &r in replicas {
        let wanted = join(&held, r);
        moved += wanted.len() as u64;
        for page in wanted.chunks(AGREED_STATES_MAX) {
            let req = PeerRequest::MergeAgreed {
                states: page.to_vec(),
            };
            match ask(ctx, r, req).await? {
                PeerResponse::Applied => {}
                other => return Err(unexpected(ctx, r, &other)),
            }
        }
    }
    if moved > 0 {
        info!(states = moved, "agreed state moved with its ranges");
    }
    Ok(moved)
}

/// Every Paxos state replica `r` holds of the partitions in `ranges`.
async fn states_of(
    ctx: &Arc<Ctx>,
    r: usize,
    ranges: &[WireRange],
) -> Result<Vec<(Vec<u8>, Acceptor)>, WireError> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let req = PeerRequest::AgreedIn {
            ranges: ranges.to_vec(),
            after: after.take(),
        };
        match ask(ctx, r, req).await? {
            PeerResponse::AgreedStates { states, more } => {
                all.extend(states);
                match more {
                    Some(m) => after = Some(m),
                    None => return Ok(all),
                }
            }
            other => return Err(unexpected(ctx, r, &other)),
        }
    }
}

/// What replica `r` must merge to hold the join of every replica's state
/// of each partition: the joins it differs from.
pub(crate) fn join(held: &Held, r: usize) -> Vec<(Vec<u8>, Acceptor)> {
    let mut wanted = Vec::new();
    for (partition, states) in held {
        let mut joined = Acceptor::default();
        for (_, s) in states {
            joined.merge(s);
        }
        let mine = states.iter().find(|(n, _)| *n == r).map(|(_, s)| s);
        if mine != Some(&joined) {
            wanted.push((partition.clone(), joined));
        }
    }
    wanted
}

/// Answers `AgreedIn`: a page of this node's states in the ranges.
pub(crate) async fn page(
    ctx: &Arc<Ctx>,
    ranges: Vec<WireRange>,
    after: Option<Vec<u8>>,
) -> Result<PeerResponse, WireError> {
    if ranges.is_empty() || ranges.len() > tally_net::wire::REPAIR_RANGES_MAX {
        return Err(WireError::new(
            ErrorKind::Invalid,
            "agreed states asked of no ranges, or of too many",
        ));
    }
    let ranges: Vec<TokenRange> = ranges
        .iter()
        .map(|r| TokenRange {
            start: r.start,
            end: r.end,
        })
        .collect();
    let ctx = ctx.clone();
    let scan = tokio::task::spawn_blocking(move || {
        let wanted = |p: &[u8]| {
            let token = murmur3_token(p);
            ranges.iter().any(|r| r.contains(token))
        };
        let limits = (AGREED_STATES_MAX, PAGE_BYTES);
        ctx.engine().agreed_states(after.as_deref(), wanted, limits)
    });
    let page = scan
        .await
        .map_err(|e| WireError::new(ErrorKind::Internal, format!("agreed scan: {e}")))?
        .map_err(|e| engine_error(&e))?;
    Ok(PeerResponse::AgreedStates {
        states: page.states,
        more: page.more,
    })
}

/// Answers `MergeAgreed`: each state merged into this node's, durably.
pub(crate) async fn merge(
    ctx: &Arc<Ctx>,
    states: Vec<(Vec<u8>, Acceptor)>,
) -> Result<PeerResponse, WireError> {
    for (partition, state) in states {
        ctx.engine()
            .merge_agreed(&partition, &state)
            .await
            .map_err(|e| engine_error(&e))?;
    }
    Ok(PeerResponse::Applied)
}

async fn ask(ctx: &Arc<Ctx>, n: usize, req: PeerRequest) -> Result<PeerResponse, WireError> {
    if n == ctx.me() {
        return super::serve(ctx, req).await;
    }
    ctx.transport()
        .call(n, req, PAGE_TIMEOUT)
        .await
        .map_err(|e| {
            WireError::unknown(
                ErrorKind::Timeout,
                format!("moving agreed state: {} did not answer: {e}", ctx.name(n)),
            )
        })
}

fn unexpected(ctx: &Ctx, r: usize, answer: &PeerResponse) -> WireError {
    let what = match answer {
        PeerResponse::Error(e) => e.message.clone(),
        other => format!("{other:?}"),
    };
    WireError::new(
        ErrorKind::Internal,
        format!("moving agreed state: {} answered {what}", ctx.name(r)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::{Accepted, Ballot, Register, Registers};

    fn decided(ms: u64, v: &str) -> Accepted {
        Accepted {
            ballot: Ballot {
                ms,
                seq: 0,
                proposer: 1,
            },
            value: Registers(vec![Register {
                column: Vec::new(),
                value: v.as_bytes().to_vec(),
                at_ms: 0,
            }]),
        }
    }

    fn state(committed: u64, v: &str) -> Acceptor {
        Acceptor {
            promised: decided(committed, v).ballot,
            accepted: None,
            committed: decided(committed, v),
        }
    }

    #[test]
    fn each_replica_gets_the_join_it_lacks() {
        // A decided "b" reached replicas 0 and 1; 2 is new and holds none.
        let mut held = Held::new();
        held.insert(b"k".to_vec(), vec![(0, state(5, "b")), (1, state(3, "a"))]);
        held.insert(b"j".to_vec(), vec![(1, state(2, "x"))]);
        assert_eq!(join(&held, 0), vec![(b"j".to_vec(), state(2, "x"))]);
        assert_eq!(
            join(&held, 1),
            vec![(b"k".to_vec(), state(5, "b"))],
            "the later decided value wins"
        );
        assert_eq!(
            join(&held, 2),
            vec![
                (b"j".to_vec(), state(2, "x")),
                (b"k".to_vec(), state(5, "b"))
            ]
        );
        // An accepted value no one knows decided travels too, as it is.
        let mut pending = state(5, "b");
        pending.accepted = Some(decided(6, "c"));
        pending.promised = decided(7, "c").ballot;
        held.insert(
            b"k".to_vec(),
            vec![(0, state(5, "b")), (1, pending.clone())],
        );
        let to_0 = join(&held, 0);
        assert_eq!(to_0[1], (b"k".to_vec(), pending));
    }
}
