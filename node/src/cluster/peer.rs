//! The peer handler: what this node does with its peers' requests.
//!
//! A batch of requests from one peer is answered in order. The shards in it
//! (replication, hints, read repair) are merged as one batch under one
//! fsync; reads and forwarded leader requests each run on a task of their
//! own, the adds joining this node's write path like any other.
//!
//! Every request is first checked against what its sender may ask
//! (`authz`); a refused one is answered with an error and logged, at most
//! once a second.

use std::sync::{Arc, Weak};

use tally_engine::{Key, TailIds};
use tally_net::log_limit::LogLimit;
use tally_net::peer::{BoxFuture, Handler};
use tally_net::wire::{
    ErrorKind, LEARNED_KEYS_MAX, LEARNED_OPS_MAX, PeerRequest, PeerResponse, ROW_COLUMNS_MAX,
    WireBuild, WireError, WireKey,
};

use crate::base::convert::{self, engine_error, wire_cell};
use crate::cluster::ctx::Ctx;
use crate::cluster::features::Features;
use crate::cluster::generations;
use crate::cluster::read::{scan_row, scan_slice};
use crate::cluster::write::{self, Writes};
use crate::security::authz::{self, Local, Own};

/// Answers peers' requests for as long as the node lives.
pub(crate) struct PeerHandler {
    pub(crate) ctx: Weak<Ctx>,
    pub(crate) writes: Weak<Writes>,
    pub(crate) features: Arc<Features>,
}

impl Handler for PeerHandler {
    fn not_writable(&self) -> Option<String> {
        match self.ctx.upgrade() {
            Some(ctx) => ctx.own_not_writable(),
            None => Some("the node is shutting down".into()),
        }
    }

    fn ring_version(&self) -> u64 {
        self.ctx.upgrade().map_or(0, |ctx| ctx.ring_version())
    }

    fn build(&self) -> WireBuild {
        self.features.build()
    }

    fn oldest_peer(&self) -> u16 {
        self.features.oldest_peer()
    }

    fn admits(&self, build: &WireBuild) -> Result<(), String> {
        self.features.admits(build)
    }

    fn handle(&self, from: usize, reqs: Vec<PeerRequest>) -> BoxFuture<Vec<PeerResponse>> {
        let parts = self.ctx.upgrade().zip(self.writes.upgrade());
        Box::pin(async move {
            let Some((ctx, writes)) = parts else {
                let e = WireError::new(ErrorKind::Storage, "node is shutting down");
                return reqs
                    .iter()
                    .map(|_| PeerResponse::Error(e.clone()))
                    .collect();
            };
            let mut out: Vec<Option<PeerResponse>> = vec![None; reqs.len()];
            // Most batches are all applies: room for every request.
            let mut applies = Vec::with_capacity(reqs.len());
            let mut slots = Vec::with_capacity(reqs.len());
            let mut tasks = Vec::new();
            for (i, req) in reqs.into_iter().enumerate() {
                if let Err(refusal) = authz::authorize(from, &req, &*ctx) {
                    out[i] = Some(refuse(&ctx, from, &refusal));
                    continue;
                }
                if let Some(other) =
                    generations::addressed(&req).and_then(|p| ctx.fence_generation(p))
                {
                    out[i] = Some(PeerResponse::Error(other));
                    continue;
                }
                match sort(&ctx, from, req) {
                    Sorted::Answer(answer) => out[i] = Some(answer),
                    Sorted::Apply(key, _, _) if ctx.faults().drops_cql_delete(&key) => {
                        // FAULT INJECTION: taken as nothing.
                        out[i] = Some(PeerResponse::Applied);
                    }
                    Sorted::Apply(key, cell, tail) => {
                        applies.push((key, cell, tail));
                        slots.push(i);
                    }
                    Sorted::Run(req) => {
                        tasks.push((i, tokio::spawn(run(ctx.clone(), writes.clone(), req))));
                    }
                }
            }
            if !applies.is_empty() {
                apply(&ctx, applies, &slots, &mut out).await;
            }
            // Only a task answers a scan: the applies' answers are never
            // looked at again.
            let known = match tasks.is_empty() {
                true => None,
                false => ctx.started_transport().map(|t| t.protocol(from)),
            };
            for (i, task) in tasks {
                let answer = task.await.unwrap_or_else(|e| {
                    PeerResponse::Error(WireError::new(
                        ErrorKind::Internal,
                        format!("request failed: {e}"),
                    ))
                });
                out[i] = Some(for_protocol(answer, known));
            }
            out.into_iter()
                .map(|a| a.expect("every request got an answer above"))
                .collect()
        })
    }
}

/// `answer` as a peer of protocol `known` reads it: a scan's page
/// without sorted sets for one before 6.
fn for_protocol(answer: PeerResponse, known: Option<u16>) -> PeerResponse {
    match answer {
        PeerResponse::Keys(keys) if known.is_none_or(|p| p < 6) => {
            PeerResponse::Keys(keys.without_sorted_sets())
        }
        other => other,
    }
}

/// What to do with one authorized request.
enum Sorted {
    /// Answered at once.
    Answer(PeerResponse),
    /// A cell to apply, with the batch's other applies.
    Apply(Key, tally_engine::Cell, Option<TailIds>),
    /// A request that runs on a task of its own (see [`run`]).
    Run(PeerRequest),
}

/// Sorts `req`: an answer now, an apply for the batch, or a task.
fn sort(ctx: &Ctx, from: usize, req: PeerRequest) -> Sorted {
    match req {
        PeerRequest::Apply { key, cell } => match convert::key(&key) {
            Ok(k) => Sorted::Apply(k, convert::cell(&cell), None),
            Err(e) => Sorted::Answer(PeerResponse::Error(e)),
        },
        PeerRequest::ApplyTail { key, cell, tail } => {
            match convert::key(&key).and_then(|k| Ok((k, convert::tail(&tail)?))) {
                Ok((k, tail)) => Sorted::Apply(k, convert::cell(&cell), Some(tail)),
                Err(e) => Sorted::Answer(PeerResponse::Error(e)),
            }
        }
        // Heartbeats are answered by the transport; one that
        // gets here is answered all the same.
        PeerRequest::Ping { .. } | PeerRequest::Hello { .. } => {
            let ring = ctx.ring_version();
            Sorted::Answer(match ctx.own_not_writable() {
                None => PeerResponse::Pong { ring },
                Some(why) => PeerResponse::PongNotWritable {
                    why: tally_net::wire::bounded_reason(&why),
                    ring,
                },
            })
        }
        // A peer stopping cleanly: counted down now, not after the
        // failure timeout.
        PeerRequest::Leaving => {
            if let Some(t) = ctx.started_transport() {
                t.mark_down(from);
            }
            Sorted::Answer(PeerResponse::Applied)
        }
        req @ (PeerRequest::Script { .. } | PeerRequest::FlushScripts) => {
            Sorted::Answer(ctx.scripts().serve(req))
        }
        req => Sorted::Run(req),
    }
}

/// The answer to a refused request, logged at most once a second.
fn refuse(ctx: &Ctx, from: usize, refusal: &authz::Refusal) -> PeerResponse {
    static REFUSED: LogLimit = LogLimit::per_second();
    if let Some(suppressed) = REFUSED.admit() {
        tracing::warn!(peer = %ctx.name(from), reason = %refusal, suppressed, "refused a peer request");
    }
    PeerResponse::Error(refusal.wire_error())
}

impl Local for Ctx {
    fn me(&self) -> usize {
        self.me()
    }

    fn nodes(&self) -> usize {
        self.config().nodes.len()
    }

    fn counter_id(&self) -> u64 {
        self.engine().counter_id()
    }

    /// A replica, pending or natural, in this node's ring or the one before
    /// its last change (a peer may not have switched yet).
    fn is_replica(&self, partition: &[u8]) -> bool {
        let placed = self.placed();
        placed.ring.replicas(partition).all().contains(&self.me())
            || placed
                .previous
                .as_ref()
                .is_some_and(|r| r.replicas(partition).all().contains(&self.me()))
    }

    fn flushed(&self, partition: &[u8]) -> bool {
        self.placed().topology.flushed(partition)
    }

    fn own(&self, key: &WireKey) -> Result<Own, String> {
        let key = convert::key(key).map_err(|e| e.to_string())?;
        let cell = self.engine().get(&key).map_err(|e| e.to_string())?;
        Ok(Own {
            epoch: cell.epoch().id(),
            shard: cell
                .shard(self.engine().counter_id())
                .map(|s| (s.clock, s.value)),
        })
    }
}

/// Merges a batch's shards under one fsync; answers each `Applied`, or
/// `Stale` when this node has seen a newer reset than the shard's epoch,
/// or a deadline of it the sender did not know has passed.
async fn apply(
    ctx: &Ctx,
    applies: Vec<(Key, tally_engine::Cell, Option<TailIds>)>,
    slots: &[usize],
    out: &mut [Option<PeerResponse>],
) {
    let items = applies.iter().map(|(k, c, t)| (k, c, t.as_ref()));
    match ctx.engine().apply(items, tally_engine::Wait::Durable).await {
        Ok(results) => {
            ctx.metrics()
                .replica_applies
                .fetch_add(applies.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let now_ms = tally_engine::now_ms();
            for ((&i, (_, cell, _)), r) in slots.iter().zip(&applies).zip(results) {
                out[i] = Some(match r {
                    Ok(epoch) if ctx.outdates(&epoch, &cell.epoch(), now_ms) => {
                        PeerResponse::Stale { epoch }
                    }
                    Ok(_) => PeerResponse::Applied,
                    Err(e) => PeerResponse::Error(engine_error(&e)),
                });
            }
        }
        Err(e) => {
            for &i in slots {
                out[i] = Some(PeerResponse::Error(engine_error(&e)));
            }
        }
    }
}

/// Answers one request that is not part of an apply batch: a read, a
/// repair, topology or scan request, or a write forwarded here to lead
/// (`PeerRequest::Leader*`, through the coordinator skeleton:
/// `write::serve`).
async fn run(ctx: Arc<Ctx>, writes: Arc<Writes>, req: PeerRequest) -> PeerResponse {
    // State read here leaves this node once every add with an id it may
    // hold is durable (see `tally_engine::Engine::settled`).
    let reads = matches!(
        req,
        PeerRequest::Read { .. } | PeerRequest::ReadRow { .. } | PeerRequest::ReadSlice { .. }
    );
    let result = match req {
        PeerRequest::Read { key } => ctx.check_readable().and(convert::key(&key)).and_then(|k| {
            ctx.engine()
                .get(&k)
                .map(|c| PeerResponse::Cell(wire_cell(&c)))
                .map_err(|e| engine_error(&e))
        }),
        PeerRequest::ReadRow { partition } => scan_row(&ctx, &partition).await.map(row_answer),
        PeerRequest::ReadSlice {
            partition,
            start,
            end,
            limit,
        } => {
            let limit = usize::try_from(limit).map_or(ROW_COLUMNS_MAX, |n| n.min(ROW_COLUMNS_MAX));
            scan_slice(&ctx, &partition, (start, end), limit)
                .await
                .map(|row| row_answer(row.cells))
        }
        req @ (PeerRequest::LeaderAdd { .. }
        | PeerRequest::LeaderAddOnce { .. }
        | PeerRequest::LeaderReset { .. }
        | PeerRequest::LeaderChange { .. }
        | PeerRequest::LeaderList { .. }
        | PeerRequest::LeaderListAt { .. }
        | PeerRequest::LeaderAdmit { .. }
        | PeerRequest::LeaderExpireRow { .. }
        | PeerRequest::LeaderCells { .. }) => write::serve(&writes, req).await,
        PeerRequest::LearnTails { retired, from } => learn_tails(&ctx, &retired, from),
        PeerRequest::ForgetTails { retired } => ctx
            .engine()
            .forget_tails(&retired)
            .map(|()| PeerResponse::Applied)
            .map_err(|e| engine_error(&e)),
        req @ (PeerRequest::RepairDigests { .. }
        | PeerRequest::RepairLeaves { .. }
        | PeerRequest::Repaired { .. }) => crate::cluster::repair::serve::serve(&ctx, req).await,
        req @ (PeerRequest::HandOverIds { .. }
        | PeerRequest::TakeIds { .. }
        | PeerRequest::GetTopology
        | PeerRequest::Adopt { .. }) => {
            Ok(crate::cluster::topology::change::serve(&ctx, req).await)
        }
        req @ (PeerRequest::Survey { .. } | PeerRequest::Fold) => {
            Ok(crate::cluster::topology::fold::serve(&ctx, req).await)
        }
        PeerRequest::ScanKeys { scan, ranges } => {
            crate::cluster::scan::answer(&ctx, scan, ranges).await
        }
        PeerRequest::ScanTable {
            table,
            scan,
            ranges,
        } => crate::cluster::scan::answer_table(&ctx, table, scan, ranges).await,
        req @ (PeerRequest::Prepare { .. }
        | PeerRequest::Propose { .. }
        | PeerRequest::Commit { .. }
        | PeerRequest::ReadAgreed { .. }
        | PeerRequest::AgreedIn { .. }
        | PeerRequest::MergeAgreed { .. }) => crate::cluster::agree::serve(&ctx, req).await,
        // Sorted out before: answered at once, or applied in the batch.
        PeerRequest::Apply { .. }
        | PeerRequest::ApplyTail { .. }
        | PeerRequest::Ping { .. }
        | PeerRequest::Hello { .. }
        | PeerRequest::Leaving
        | PeerRequest::Script { .. }
        | PeerRequest::FlushScripts => Err(WireError::new(
            ErrorKind::Internal,
            "a request answered with its batch ran on a task",
        )),
    };
    if reads && let Err(e) = ctx.engine().settled().await {
        return PeerResponse::Error(engine_error(&e));
    }
    result.unwrap_or_else(PeerResponse::Error)
}

/// Fences another node's `retired` incarnations and answers their tails
/// held here, from the `from`-th key on (see `tally_engine::ids::tail`).
/// A replica's cells of a row or slice, as `Row` answers them.
fn row_answer(cells: Vec<(Key, tally_engine::Cell)>) -> PeerResponse {
    PeerResponse::Row(
        cells
            .into_iter()
            .map(|(k, c)| (k.column().to_vec(), wire_cell(&c)))
            .collect(),
    )
}

fn learn_tails(ctx: &Ctx, retired: &[u64], from: u64) -> Result<PeerResponse, WireError> {
    let all = ctx.engine().fence_tails(retired);
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(all.len());
    let end = page_end(all.iter().map(|(_, ops)| ops.len()), from);
    let learned = all[from..end]
        .iter()
        .map(|(key, ops)| {
            let cell = ctx.engine().get(key).map_err(|e| engine_error(&e))?;
            Ok(convert::wire_learned(key, &cell, ops))
        })
        .collect::<Result<_, WireError>>()?;
    Ok(PeerResponse::Tails {
        learned,
        more: end < all.len(),
    })
}

/// Where a page of learned tails that starts at key `from` ends: at most
/// [`LEARNED_KEYS_MAX`] keys and [`LEARNED_OPS_MAX`] ids (at least one key),
/// so that an answer stays far below the message limit.
fn page_end(ops_per_key: impl Iterator<Item = usize>, from: usize) -> usize {
    let mut ops = 0;
    let mut end = from;
    for n in ops_per_key.skip(from).take(LEARNED_KEYS_MAX) {
        if end > from && ops + n > LEARNED_OPS_MAX {
            break;
        }
        ops += n;
        end += 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_of_tails_is_bounded_by_keys_and_ids() {
        assert_eq!(page_end([].into_iter(), 0), 0);
        assert_eq!(page_end([1, 2, 3].into_iter(), 0), 3);
        assert_eq!(page_end([1, 2, 3].into_iter(), 2), 3);
        let many = std::iter::repeat_n(1, LEARNED_KEYS_MAX + 5);
        assert_eq!(page_end(many, 0), LEARNED_KEYS_MAX);
        let big = [LEARNED_OPS_MAX - 1, 1, 1];
        assert_eq!(page_end(big.into_iter(), 0), 2);
        // One key over the limit still goes, alone.
        assert_eq!(page_end([LEARNED_OPS_MAX + 9, 1].into_iter(), 0), 1);
    }

    #[test]
    fn a_peer_before_protocol_6_gets_no_sorted_sets_in_a_scan() {
        use tally_net::wire::{WireKeys, WireKind, WireScanned};
        let listed = |kind| WireScanned {
            partition: b"k".to_vec(),
            column: Vec::new(),
            kind,
        };
        let page = PeerResponse::Keys(WireKeys {
            keys: vec![listed(WireKind::Counter), listed(WireKind::SortedSet)],
            more: None,
        });
        let kinds = |a: PeerResponse| match a {
            PeerResponse::Keys(k) => k.keys.into_iter().map(|s| s.kind).collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        let both = vec![WireKind::Counter, WireKind::SortedSet];
        assert_eq!(kinds(for_protocol(page.clone(), Some(6))), both);
        assert_eq!(
            kinds(for_protocol(page.clone(), Some(5))),
            [WireKind::Counter]
        );
        assert_eq!(kinds(for_protocol(page, None)), [WireKind::Counter]);
        assert_eq!(
            for_protocol(PeerResponse::Applied, Some(2)),
            PeerResponse::Applied
        );
    }
}
