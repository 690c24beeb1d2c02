//! Agreed state moves with its ranges. When a ring change (or a replace)
//! syncs the ranges a node gains from every current replica but a
//! removed one (`repair::run::sync`), each replica of a range also sends
//! its Paxos states of the range's partitions (`AgreedIn`, a page at a
//! time, every replica's pages from the same partition on), and their
//! join, each part the later (`Acceptor::merge`), is merged into every
//! replica that lacks some of it (`MergeAgreed`), durably.
//!
//! Why that is enough: a value decided before the sync was accepted by a
//! majority of the range's replicas, so the join of their states holds it
//! (or a later one; without a removed replica, the others still hold a
//! member of every majority), and so does the new replica after; a round
//! during the change has the pending replica among its participants and
//! needs one answer more (`round::Round::new`), so no value decided
//! meanwhile misses the new replica set's majorities either. The join is
//! what a proposer's prepare over all of them would find: no replica is
//! made to hold a value no replica accepted.
//!
//! Rules apart from I/O: [`window`] and [`join`] (pure, tested); the rest
//! moves bytes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tally_net::ring::{TokenRange, partition_token};
use tally_net::wire::{
    AGREED_STATES_MAX, Acceptor, ErrorKind, PeerRequest, PeerResponse, WireError, WireRange,
};
use tracing::{info, warn};

use crate::base::convert::{engine_error, token_ranges, wire_ranges};
use crate::cluster::ctx::Ctx;
use crate::cluster::features::AGREED_HANDOFF;

/// How long a replica may take to answer a page or take one.
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// About the most bytes of registers in one page.
const PAGE_BYTES: usize = 4 << 20;

/// Whether every one of `nodes` runs a build that moves agreed state
/// (the `agreed-handoff` feature). A node known to run an older build
/// answers false (a sync with it leaves the state behind, as the builds
/// before did, and says so); a node whose build is not known yet (no
/// heartbeat of it answered so far) is an error, so that the sync is
/// tried again rather than leaving the state behind by mistake.
pub(crate) fn every_build_moves_it<'a>(
    ctx: &Ctx,
    nodes: impl Iterator<Item = &'a usize>,
) -> Result<bool, WireError> {
    let Some(transport) = ctx.started_transport() else {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            "the peer transport is not started",
        ));
    };
    for &n in nodes.filter(|&&n| n != ctx.me()) {
        let Some(build) = transport.build_of(n) else {
            return Err(WireError::not_applied(
                ErrorKind::Unavailable,
                format!(
                    "the build of {} is not known yet: the sync waits to know whether it moves agreed state",
                    ctx.name(n)
                ),
            ));
        };
        if !build.features.iter().any(|f| f == AGREED_HANDOFF) {
            warn!(node = %ctx.name(n), "agreed state stays behind: this node's build does not move it");
            return Ok(false);
        }
    }
    Ok(true)
}

/// Every replica's states of a window of partitions, by partition.
type Held = BTreeMap<Vec<u8>, Vec<(usize, Acceptor)>>;

/// A page of one replica's states: the states, in partition order, and
/// the partition the next page begins after (`None`: the last page).
type Page = (Vec<(Vec<u8>, Acceptor)>, Option<Vec<u8>>);

/// Brings every replica of `ranges` to the join of their Paxos states of
/// the ranges' partitions, a window of partitions at a time (memory:
/// a page per replica); answers how many states it merged into a replica
/// that lacked them.
pub(crate) async fn sync(
    ctx: &Arc<Ctx>,
    replicas: &[usize],
    ranges: &[TokenRange],
) -> Result<u64, WireError> {
    let wire = wire_ranges(ranges);
    let (mut after, mut moved) = (None, 0);
    loop {
        let mut pages = Vec::with_capacity(replicas.len());
        for &r in replicas {
            pages.push((r, page_of(ctx, r, &wire, after.clone()).await?));
        }
        let (held, end) = window(pages, after.as_deref())
            .map_err(|why| WireError::new(ErrorKind::Internal, why))?;
        for &r in replicas {
            moved += merge_into(ctx, r, join(&held, r)).await?;
        }
        match end {
            Some(end) => after = Some(end),
            None => break,
        }
    }
    if moved > 0 {
        info!(states = moved, "agreed state moved with its ranges");
    }
    Ok(moved)
}

/// One page of replica `r`'s states of `ranges` after partition `after`.
async fn page_of(
    ctx: &Arc<Ctx>,
    r: usize,
    ranges: &[WireRange],
    after: Option<Vec<u8>>,
) -> Result<Page, WireError> {
    let req = PeerRequest::AgreedIn {
        ranges: ranges.to_vec(),
        after,
    };
    match ask(ctx, r, req).await? {
        PeerResponse::AgreedStates { states, more } => Ok((states, more)),
        other => Err(unexpected(ctx, r, &other)),
    }
}

/// One page of each replica, from the same `after`: the states of the
/// partitions every page covers (up to the first page's end), and that
/// end, from which the next window begins (`None`: every page was the
/// last). A page whose end is not past `after` is an error (a peer that
/// would keep the sync from ending).
pub(crate) fn window(
    pages: Vec<(usize, Page)>,
    after: Option<&[u8]>,
) -> Result<(Held, Option<Vec<u8>>), String> {
    let ends = pages.iter().filter_map(|(_, (_, more))| more.as_deref());
    let end: Option<Vec<u8>> = ends.min().map(<[u8]>::to_vec);
    if let (Some(end), Some(after)) = (&end, after)
        && end.as_slice() <= after
    {
        return Err("a replica's page of agreed states did not move past the last".into());
    }
    let mut held = Held::new();
    for (r, (states, _)) in pages {
        for (partition, state) in states {
            if end.as_ref().is_none_or(|e| partition <= *e) {
                held.entry(partition).or_default().push((r, state));
            }
        }
    }
    Ok((held, end))
}

/// Sends replica `r` the states it lacks, in messages of at most
/// [`AGREED_STATES_MAX`] states and about [`PAGE_BYTES`]; how many.
async fn merge_into(
    ctx: &Arc<Ctx>,
    r: usize,
    wanted: Vec<(Vec<u8>, Acceptor)>,
) -> Result<u64, WireError> {
    let n = wanted.len() as u64;
    let mut batch = Vec::new();
    let mut bytes = 0;
    let mut states = wanted.into_iter().peekable();
    while let Some((partition, state)) = states.next() {
        bytes += partition.len() + state_bytes(&state);
        batch.push((partition, state));
        let full = batch.len() >= AGREED_STATES_MAX || bytes >= PAGE_BYTES;
        if full || states.peek().is_none() {
            let req = PeerRequest::MergeAgreed {
                states: std::mem::take(&mut batch),
            };
            bytes = 0;
            match ask(ctx, r, req).await? {
                PeerResponse::Applied => {}
                other => return Err(unexpected(ctx, r, &other)),
            }
        }
    }
    Ok(n)
}

/// About the bytes a state takes encoded.
fn state_bytes(a: &Acceptor) -> usize {
    a.committed.value.size() + a.accepted.as_ref().map_or(0, |x| x.value.size()) + 64
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
    let ranges = token_ranges(&ranges);
    let ctx = ctx.clone();
    let scan = tally_world::blocking(move || {
        let wanted = |p: &[u8]| {
            let token = partition_token(p);
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

/// Answers `MergeAgreed`: each state merged into this node's, durably
/// (all at once, so that their log writes share fsyncs).
pub(crate) async fn merge(
    ctx: &Arc<Ctx>,
    states: Vec<(Vec<u8>, Acceptor)>,
) -> Result<PeerResponse, WireError> {
    let mut merges = tokio::task::JoinSet::new();
    for (partition, state) in states {
        let ctx = ctx.clone();
        merges.spawn(async move { ctx.engine().merge_agreed(&partition, &state).await });
    }
    while let Some(merged) = merges.join_next().await {
        merged
            .map_err(|e| WireError::new(ErrorKind::Internal, format!("agreed merge: {e}")))?
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
    fn a_window_ends_where_the_first_page_ends() {
        let page = |states: &[&str], more: Option<&str>| {
            let states = states
                .iter()
                .map(|p| (p.as_bytes().to_vec(), state(1, p)))
                .collect();
            (states, more.map(|m| m.as_bytes().to_vec()))
        };
        // Replica 0 paged up to "c", replica 1 up to "e": "d" and "e" wait
        // for the next window, where replica 0's "d" comes too.
        let pages = vec![
            (0, page(&["a", "c"], Some("c"))),
            (1, page(&["b", "c", "d", "e"], Some("e"))),
            (2, page(&["a"], None)),
        ];
        let (held, end) = window(pages, None).unwrap();
        assert_eq!(end, Some(b"c".to_vec()));
        let keys: Vec<&[u8]> = held.keys().map(Vec::as_slice).collect();
        assert_eq!(keys, [&b"a"[..], b"b", b"c"]);
        assert_eq!(held[&b"c".to_vec()].len(), 2);
        // Every page the last: one window of all.
        let last = vec![(0, page(&["x"], None)), (1, page(&["y"], None))];
        let (held, end) = window(last, Some(b"c")).unwrap();
        assert_eq!((held.len(), end), (2, None));
        // A page that does not move on is refused.
        let stuck = vec![(0, page(&["c"], Some("c")))];
        assert!(window(stuck, Some(b"c")).is_err());
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
