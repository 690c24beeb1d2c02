//! The repairing node's side: compares the replicas of every range this
//! node replicates and merges the cells that differ (see `repair`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tally_world::Instant;

use tally_engine::{Cell, Key, cell_digest};
use tally_net::ring::TokenRange;
use tally_net::wire::{
    ErrorKind, PeerRequest, PeerResponse, REPAIR_LEAVES_MAX, WireError, WireRange, WireRepaired,
};
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::checkpoint::{self, Checkpoint};
use super::walk::{Step, Walk, resume};
use super::{Page, clears_needs_repair, serve::serve, slices_per_range};
use crate::base::convert::{cell, engine_error, key, wire_cell, wire_key};
use crate::cluster::ctx::Ctx;
use crate::cluster::faults::Fault;

/// How long one replica may take to answer a scan (digests or a page).
const SCAN_TIMEOUT: Duration = Duration::from_secs(30);

/// The node's running repair, cleared when the repair ends, however it ends.
struct Running<'a>(&'a Ctx);

impl<'a> Running<'a> {
    /// Marks a repair of this node (`me`) as running, unless one is.
    fn begin(ctx: &'a Ctx, me: &str) -> Result<Running<'a>, WireError> {
        let started = WireRepaired {
            node: me.to_string(),
            ..WireRepaired::default()
        };
        ctx.repairing().begin(started).map_err(|r| {
            WireError::not_applied(
                ErrorKind::Invalid,
                format!(
                    "a repair of {me} is already running ({} cells moved so far): one at a time",
                    r.cells_moved
                ),
            )
        })?;
        Ok(Running(ctx))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.repairing().end();
    }
}

/// Repairs every range this node replicates (its tokens in `only`, if
/// given), from where an unfinished repair stopped if one did; answers
/// what it did. Only a repair of every range clears the node's "needs
/// repair" flags. One repair at a time: a second one is refused, naming
/// the first.
pub(crate) async fn repair(
    ctx: &Arc<Ctx>,
    only: Option<WireRange>,
) -> Result<WireRepaired, WireError> {
    let started = Instant::now();
    let me = ctx.name(ctx.me()).to_string();
    let _running = Running::begin(ctx, &me)?;
    let only = only.map(|r| TokenRange {
        start: r.start,
        end: r.end,
    });
    let replicated: Vec<TokenRange> = groups(ctx, None).into_values().flatten().collect();
    let groups = groups(ctx, only);
    if let Some(&down) = groups.keys().flatten().find(|&&n| !ctx.is_up(n)) {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "cannot repair {me}: {} is down, and a repair needs every replica of the ranges",
                ctx.name(down)
            ),
        ));
    }
    let dir = ctx.config().nodes[ctx.me()].data_dir.clone();
    let c = &ctx.config().cluster;
    // A checkpoint of another ring, or of another range, is not resumed.
    let range_id = only.map_or(0, |r| (r.start as u64).rotate_left(29) ^ r.end as u64);
    let ring = checkpoint::ring_id(&ctx.config().node_ids(), c.vnodes, c.replication_factor)
        ^ ctx.ring_version().rotate_left(17)
        ^ range_id;
    let resumed = checkpoint::load(&dir, ring);
    let mut mark = resumed.clone().unwrap_or(Checkpoint {
        ring,
        started_ms: tally_engine::now_ms(),
        group: 0,
        after: None,
    });
    let ranges: usize = groups.values().map(Vec::len).sum();
    info!(node = %me, ranges, resumed = ?resumed, "repair started");
    let mut done = WireRepaired {
        node: me.clone(),
        resumed: resumed.is_some(),
        ..WireRepaired::default()
    };
    for (i, (replicas, ranges)) in (0u32..).zip(&groups) {
        let Some(from) = resume(&mark, i) else {
            continue;
        };
        mark.group = i;
        repair_group(ctx, replicas, ranges, from, Some(&mut mark), &mut done).await?;
        mark.group = i + 1;
        mark.after = None;
        save(&dir, &mark);
        ctx.repairing().progress(&done);
        info!(node = %me, ranges = done.ranges, cells_moved = done.cells_moved, "repair progress");
    }
    if clears_needs_repair(&replicated, only) {
        tell_repaired(ctx, &me, mark.started_ms).await;
    } else {
        info!(node = %me, "repaired some of the node's ranges: its \"needs repair\" flags stay");
    }
    if let Err(e) = checkpoint::clear(&dir) {
        warn!(error = %e, "could not remove the repair checkpoint");
    }
    done.millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    info!(summary = ?done, "repair finished");
    Ok(done)
}

/// Tells every node that `me` is repaired as of `started_ms`, which clears
/// the hints' "needs repair" flags set before then.
async fn tell_repaired(ctx: &Arc<Ctx>, me: &str, started_ms: u64) {
    for n in 0..ctx.config().nodes.len() {
        let told = PeerRequest::Repaired {
            node: me.to_string(),
            started_ms,
        };
        if let Err(e) = ask(ctx, n, told).await {
            warn!(peer = %ctx.name(n), error = %e, "could not tell a node of the repair");
        }
    }
}

/// Writes the checkpoint `mark` (a failure costs only work again).
fn save(dir: &std::path::Path, mark: &Checkpoint) {
    if let Err(e) = checkpoint::save(dir, mark) {
        warn!(error = %e, "could not write the repair checkpoint");
    }
}

/// The ranges this node replicates (their parts in `only`, if given), by
/// their replicas (sorted).
pub(crate) fn groups(ctx: &Ctx, only: Option<TokenRange>) -> BTreeMap<Vec<usize>, Vec<TokenRange>> {
    let mut groups: BTreeMap<Vec<usize>, Vec<TokenRange>> = BTreeMap::new();
    for (range, replicas) in ctx.ring().ranges() {
        if replicas.contains(&ctx.me()) {
            let parts = match only {
                Some(only) => range.intersect(only),
                None => vec![range],
            };
            if parts.is_empty() {
                continue;
            }
            let mut set = replicas.to_vec();
            set.sort_unstable();
            groups.entry(set).or_default().extend(parts);
        }
    }
    groups
}

/// Every range of the ring, by its replicas (sorted): a repair of all.
pub(crate) fn all_groups(ctx: &Ctx) -> BTreeMap<Vec<usize>, Vec<TokenRange>> {
    let mut groups: BTreeMap<Vec<usize>, Vec<TokenRange>> = BTreeMap::new();
    for (range, replicas) in ctx.ring().ranges() {
        let mut set = replicas.all().to_vec();
        set.sort_unstable();
        groups.entry(set).or_default().push(range);
    }
    groups
}

/// Brings every node of each group to the merge of the group's cells in
/// its ranges, and of their agreed state (`agree::handoff`): how a ring
/// change syncs the ranges a node gains, from every current replica (see
/// `topology::change`). Not resumable by
/// itself: a change run again syncs again, finding less to move.
pub(crate) async fn sync(
    ctx: &Arc<Ctx>,
    groups: BTreeMap<Vec<usize>, Vec<TokenRange>>,
) -> Result<WireRepaired, WireError> {
    let started = Instant::now();
    if let Some(&down) = groups.keys().flatten().find(|&&n| !ctx.is_up(n)) {
        return Err(WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "cannot sync the ranges that move: {} is down, and a sync reads every replica",
                ctx.name(down)
            ),
        ));
    }
    let mut done = WireRepaired {
        node: ctx.name(ctx.me()).to_string(),
        ..WireRepaired::default()
    };
    let skip = ctx
        .faults()
        .has(crate::cluster::faults::Fault::SkipAgreedHandoff);
    let agreed = !skip
        && crate::cluster::agree::handoff::every_build_moves_it(ctx, groups.keys().flatten())?;
    for (replicas, ranges) in &groups {
        repair_group(ctx, replicas, ranges, None, None, &mut done).await?;
        if agreed {
            crate::cluster::agree::handoff::sync(ctx, replicas, ranges).await?;
        }
    }
    done.millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(done)
}

/// Repairs `ranges`, replicated by `replicas`, from after key `from`, as
/// `walk::Walk` steps through it: digests, then the leaves of the slices
/// that differ, a page at a time, then the keys that differ; `mark`, if
/// any, is saved after each page.
async fn repair_group(
    ctx: &Arc<Ctx>,
    replicas: &[usize],
    ranges: &[TokenRange],
    from: Option<Key>,
    mut mark: Option<&mut Checkpoint>,
    done: &mut WireRepaired,
) -> Result<(), WireError> {
    let segments = slices_per_range(ranges.len());
    let wire = crate::base::convert::wire_ranges(ranges);
    let mut walk = Walk::new(wire.len(), segments, from, std::mem::take(done));
    let outcome = loop {
        let step = walk.step();
        // Progress is reported as far as the digests, and each page
        // settled, got.
        let settles = matches!(step, Step::Digests | Step::Save { .. });
        match step {
            Step::Digests => match digests(ctx, replicas, &wire, segments).await {
                Ok(d) => walk.on_digests(&d),
                Err(e) => break Err(e),
            },
            Step::Pages { wanted, after } => {
                match pages(ctx, replicas, &wire, segments, &wanted, after.as_ref()).await {
                    Ok(p) => walk.on_pages(&p),
                    Err(e) => break Err(e),
                }
            }
            Step::Fix(keys) => {
                let fixes = keys.into_iter().map(|(k, d)| {
                    let (ctx, replicas) = (ctx.clone(), replicas.to_vec());
                    async move { fix(&ctx, &replicas, &k, &d).await }
                });
                match all(fixes).await {
                    Ok(fixed) => fixed.into_iter().for_each(|(m, b)| walk.on_fixed(m, b)),
                    Err(e) => break Err(e),
                }
            }
            Step::Save { after } => {
                if let Some(mark) = mark.as_deref_mut() {
                    mark.after = after;
                    save(&ctx.config().nodes[ctx.me()].data_dir, mark);
                }
                walk.saved();
            }
            Step::Done => break Ok(()),
        }
        if mark.is_some() && settles {
            ctx.repairing().progress(walk.done());
        }
    };
    *done = walk.into_done();
    outcome
}

/// Every replica's digests of the `segments` slices of each range.
async fn digests(
    ctx: &Arc<Ctx>,
    replicas: &[usize],
    ranges: &[WireRange],
    segments: u32,
) -> Result<Vec<Vec<u64>>, WireError> {
    let total = ranges.len() * segments as usize;
    let asked = replicas.iter().map(|&r| {
        let req = PeerRequest::RepairDigests {
            ranges: ranges.to_vec(),
            segments,
        };
        let ctx = ctx.clone();
        async move {
            match ask(&ctx, r, req).await? {
                PeerResponse::Digests(d) if d.len() == total => Ok(d),
                other => Err(unexpected(&ctx, r, &other)),
            }
        }
    });
    all(asked).await
}

/// One page of leaves of the `wanted` slices from every replica.
async fn pages(
    ctx: &Arc<Ctx>,
    replicas: &[usize],
    ranges: &[WireRange],
    segments: u32,
    wanted: &[(u32, u32)],
    after: Option<&Key>,
) -> Result<Vec<Page>, WireError> {
    let asked = replicas.iter().map(|&r| {
        let req = PeerRequest::RepairLeaves {
            ranges: ranges.to_vec(),
            segments,
            wanted: wanted.to_vec(),
            after: after.map(wire_key),
            limit: u32::try_from(REPAIR_LEAVES_MAX).expect("small"),
        };
        let ctx = ctx.clone();
        async move {
            match ask(&ctx, r, req).await? {
                PeerResponse::Leaves { leaves, more } => Ok(Page {
                    leaves: leaves
                        .iter()
                        .map(|(k, d)| Ok((key(k)?, *d)))
                        .collect::<Result<_, WireError>>()?,
                    more: more.as_ref().map(key).transpose()?,
                }),
                other => Err(unexpected(&ctx, r, &other)),
            }
        }
    });
    all(asked).await
}

/// Runs each future on a task of its own; answers their results in order,
/// or the first error.
async fn all<T: Send + 'static>(
    futures: impl Iterator<Item = impl Future<Output = Result<T, WireError>> + Send + 'static>,
) -> Result<Vec<T>, WireError> {
    let mut set = JoinSet::new();
    let mut n = 0;
    for (i, f) in futures.enumerate() {
        set.spawn(async move { (i, f.await) });
        n += 1;
    }
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, result) = joined
            .map_err(|e| WireError::new(ErrorKind::Internal, format!("repair task failed: {e}")))?;
        out[i] = Some(result?);
    }
    Ok(out
        .into_iter()
        .map(|r| r.expect("every task answered"))
        .collect())
}

/// Brings every replica of `key` to the merge of their cells; answers the
/// cells sent and their bytes. `digests` are the replicas' (`None`: none).
async fn fix(
    ctx: &Arc<Ctx>,
    replicas: &[usize],
    key: &Key,
    digests: &[Option<u64>],
) -> Result<(u64, u64), WireError> {
    let mut merged = Cell::new();
    for (&r, d) in replicas.iter().zip(digests) {
        if d.is_some() {
            merged.merge(&read(ctx, r, key).await?, ctx.engine().merger());
        }
    }
    let want = cell_digest(key, &merged, &mut Vec::new());
    let (mut moved, mut bytes) = (0, 0);
    for (&r, d) in replicas.iter().zip(digests) {
        if *d != Some(want) {
            bytes += push(ctx, r, key, &merged).await?;
            moved += 1;
        }
    }
    Ok((moved, bytes))
}

/// Replica `r`'s cell of `key`. This node's own leaves it (merged into
/// the other replicas' cells) only once every add with an id it may hold
/// is durable, as a peer's answer to a read does (see
/// `tally_engine::Engine::settled`): pushed without its ids, an add a
/// crash then lost here would be applied again by a retry.
async fn read(ctx: &Arc<Ctx>, r: usize, k: &Key) -> Result<Cell, WireError> {
    if r == ctx.me() {
        let cell = ctx.engine().get(k).map_err(|e| engine_error(&e))?;
        ctx.engine().settled().await.map_err(|e| engine_error(&e))?;
        return Ok(cell);
    }
    let req = PeerRequest::Read { key: wire_key(k) };
    match ask(ctx, r, req).await? {
        PeerResponse::Cell(c) => Ok(cell(&c)),
        other => Err(unexpected(ctx, r, &other)),
    }
}

/// Merges `merged` into replica `r`; answers the bytes sent.
async fn push(ctx: &Arc<Ctx>, r: usize, k: &Key, merged: &Cell) -> Result<u64, WireError> {
    let req = PeerRequest::Apply {
        key: wire_key(k),
        cell: wire_cell(merged),
    };
    let bytes = tally_net::wire::encode(&req).len() as u64;
    if ctx.faults().has(Fault::IdleRepair) {
        return Ok(bytes); // fault injection: reported, never sent
    }
    if r == ctx.me() {
        crate::cluster::read::apply_here(ctx, k, merged, tally_engine::Wait::Durable)
            .await
            .map_err(|e| engine_error(&e))?;
        return Ok(bytes);
    }
    match ask(ctx, r, req).await? {
        // Stale: the replica is at a newer epoch, which the merge on the
        // next repair (or read) brings everywhere.
        PeerResponse::Applied | PeerResponse::Stale { .. } => Ok(bytes),
        other => Err(unexpected(ctx, r, &other)),
    }
}

/// Sends `req` to node `n`, or answers it here when `n` is this node.
async fn ask(ctx: &Arc<Ctx>, n: usize, req: PeerRequest) -> Result<PeerResponse, WireError> {
    if n == ctx.me() {
        return serve(ctx, req).await;
    }
    ctx.transport()
        .call(n, req, SCAN_TIMEOUT)
        .await
        .map_err(|e| {
            WireError::unknown(
                ErrorKind::Timeout,
                format!("repair: {} did not answer: {e}", ctx.name(n)),
            )
        })
}

/// An answer that is not the one asked for (an error, most often).
fn unexpected(ctx: &Ctx, r: usize, answer: &PeerResponse) -> WireError {
    match answer {
        PeerResponse::Error(e) => WireError::new(
            e.kind,
            format!("repair: {} answered: {}", ctx.name(r), e.message),
        ),
        other => WireError::new(
            ErrorKind::Internal,
            format!("repair: {} answered {other:?}", ctx.name(r)),
        ),
    }
}
