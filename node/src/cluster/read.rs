//! The read path: ask `required` live replicas (this node first when it is
//! one); a replica that fails is replaced by the next live one. The cells
//! are merged and summed. Any replica whose cell differs from the merge is
//! sent the merged cell (read repair), after the answer; at `SERIAL`,
//! before it, and the read answers only once a majority holds what it
//! answers, so that no later read goes back.

mod holding;

use std::collections::BTreeMap;
use std::sync::Arc;

use tally_engine::{Cell, Epoch, Key, Wait};
use tally_net::wire::{
    Consistency, ErrorKind, PeerRequest, PeerResponse, ROW_COLUMNS_MAX, WireError,
};
use tally_world::Instant;
use tokio::sync::{Semaphore, mpsc};
use tracing::warn;

use crate::base::convert::{self, engine_error, wire_cell, wire_key};
use crate::cluster::ctx::Ctx;
use crate::cluster::gather::Gather;
use holding::Holding;

/// Columns one row read repairs on one replica.
const ROW_REPAIRS_MAX: usize = 256;
/// Row scans this node runs at once: each holds a blocking thread and up
/// to [`ROW_COLUMNS_MAX`] cells.
const ROW_SCANS_MAX: usize = 4;

/// A partition's row as replicas return it: column → cell.
pub(crate) type Row = BTreeMap<Vec<u8>, Cell>;

/// Reads a counter's merged cell at `cl` (no shards: never written, or
/// reset and not written since).
pub(crate) async fn get_cell(
    ctx: &Arc<Ctx>,
    key: &Key,
    cl: Consistency,
) -> Result<Cell, WireError> {
    let replicas = ctx.replicas(key.partition());
    let (merged, _) = read_key(ctx, key, &replicas, cl, Reach::Level).await?;
    Ok(merged)
}

/// How many replicas a read asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// As many as the consistency level requires.
    Level,
    /// Every live replica, within the read timeout, and at least as many
    /// as the level requires: a reset learning the newest epoch.
    AllLive,
}

/// Reads and merges one key from `required` of `replicas` (or as many as
/// `reach` says), then repairs the ones that were behind. Answers the
/// merge and how many answered.
pub(crate) async fn read_key(
    ctx: &Arc<Ctx>,
    key: &Key,
    replicas: &[usize],
    cl: Consistency,
    reach: Reach,
) -> Result<(Cell, usize), WireError> {
    let answers = gather_from(
        ctx,
        replicas,
        cl,
        reach,
        PeerRequest::Read { key: wire_key(key) },
        |ctx| {
            ctx.check_readable()?;
            ctx.engine().get(key).map_err(|e| engine_error(&e))
        },
        |resp| match resp {
            PeerResponse::Cell(c) => Some(convert::cell(&c)),
            _ => None,
        },
    )
    .await?;
    let mut merged = Cell::new();
    for (_, c) in &answers {
        merged.merge(c, ctx.engine().merger());
    }
    let n = answers.len();
    let behind: Vec<Repair> = answers
        .into_iter()
        .filter(|(_, c)| *c != merged)
        .map(|(r, _)| (r, key.clone(), merged.clone()))
        .collect();
    repair_all(ctx, behind, n, cl.required(replicas.len()), cl).await?;
    Ok((merged, n))
}

/// A read repair: the replica, the key and the merged cell it is sent.
type Repair = (usize, Key, Cell);

/// Sends `behind` their repairs (of a read `answered` replicas answered):
/// in the background, or, at [`Consistency::Serial`], before the read
/// answers, failing it unless a majority then holds what it read (the
/// rule is [`Holding`]'s; repairs it no longer waits for go on in the
/// background).
async fn repair_all(
    ctx: &Arc<Ctx>,
    behind: Vec<Repair>,
    answered: usize,
    required: usize,
    cl: Consistency,
) -> Result<(), WireError> {
    if cl != Consistency::Serial {
        for (r, key, cell) in behind {
            repair(ctx, r, key, cell);
        }
        return Ok(());
    }
    let mut holding = Holding::new(answered, required, behind.iter().map(|(r, ..)| *r));
    let mut repairs = tokio::task::JoinSet::new();
    for (r, key, cell) in behind {
        let ctx = ctx.clone();
        repairs.spawn(async move { (r, repair_now(&ctx, r, &key, &cell).await) });
    }
    let verdict = loop {
        if let Some(verdict) = holding.verdict() {
            break verdict;
        }
        match repairs.join_next().await {
            Some(Ok((r, repaired))) => holding.on_repaired(r, repaired),
            Some(Err(_)) | None => {
                return Err(WireError::new(ErrorKind::Internal, "a read repair stopped"));
            }
        }
    };
    repairs.detach_all();
    match verdict {
        true => Ok(()),
        false => Err(WireError::not_applied(
            ErrorKind::Unavailable,
            "a SERIAL read could not bring a majority of replicas up to what it read; try again",
        )),
    }
}

/// Reads every live column of a partition at `cl`, with its value.
pub(crate) async fn get_row(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    cl: Consistency,
) -> Result<Vec<(Vec<u8>, i64)>, WireError> {
    let merged = get_row_cells(ctx, partition, cl).await?;
    // A column that was reset and not written since, or that expired, is
    // gone, as a deleted Redis hash field is.
    let now_ms = tally_engine::now_ms();
    merged
        .into_iter()
        .filter_map(|(col, c)| {
            convert::live_value(&c, now_ms)
                .transpose()
                .map(|v| Ok((col, v?)))
        })
        .collect()
}

/// Reads every column's merged cell of a partition at `cl`, live or not.
pub(crate) async fn get_row_cells(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    cl: Consistency,
) -> Result<Row, WireError> {
    let start = Key::new(partition, b"").map_err(|e| engine_error(&e))?;
    let replicas = ctx.replicas(start.partition());
    read_row(ctx, partition, &replicas, cl, Reach::Level).await
}

/// Reads and merges every column's cell of a partition from `replicas`
/// (as many as `reach` says, at least `cl`'s count), live or not, then
/// repairs the ones that were behind.
pub(crate) async fn read_row(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    replicas: &[usize],
    cl: Consistency,
    reach: Reach,
) -> Result<Row, WireError> {
    // A replica's own scan runs before `gather_from`, which asks this node first
    // whenever it is a replica, so that the scan can leave the runtime's
    // threads (`gather_from` takes local answers as they are, without waiting).
    let local = match replicas.contains(&ctx.me()) {
        true => Some(local_row(ctx, partition).await),
        false => None,
    };
    let local = parking_lot::Mutex::new(local);
    let answers = gather_from(
        ctx,
        replicas,
        cl,
        reach,
        PeerRequest::ReadRow {
            partition: partition.to_vec(),
        },
        |_| {
            local.lock().take().unwrap_or_else(|| {
                Err(WireError::new(
                    ErrorKind::Internal,
                    "this node's row was asked for twice",
                ))
            })
        },
        row_of,
    )
    .await?;
    merge_rows(
        ctx,
        partition,
        answers,
        (replicas.len(), ROW_COLUMNS_MAX),
        cl,
    )
    .await
}

/// A replica's answer to `ReadRow` or `ReadSlice`, as a row.
pub(super) fn row_of(resp: PeerResponse) -> Option<Row> {
    match resp {
        PeerResponse::Row(cols) => Some(
            cols.iter()
                .map(|(col, c)| (col.clone(), convert::cell(c)))
                .collect(),
        ),
        _ => None,
    }
}

/// Merges the rows `answers` hold (replicas of `replicas` in all; more
/// than `cells_max` columns is an error), then repairs the replicas that
/// were behind: the columns each lacks, a bounded number per read so that
/// a replica far behind does not flood the peer queue; later reads and
/// hints do the rest (a SERIAL read repairs them all first).
pub(super) async fn merge_rows(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    answers: Vec<(usize, Row)>,
    (replicas, cells_max): (usize, usize),
    cl: Consistency,
) -> Result<Row, WireError> {
    let mut merged = Row::new();
    for (_, row) in &answers {
        for (col, c) in row {
            merged
                .entry(col.clone())
                .or_default()
                .merge(c, ctx.engine().merger());
        }
    }
    if merged.len() > cells_max {
        return Err(row_too_long());
    }
    let n = answers.len();
    let per_replica = match cl {
        Consistency::Serial => ROW_COLUMNS_MAX,
        _ => ROW_REPAIRS_MAX,
    };
    let mut behind = Vec::new();
    for (r, row) in answers {
        let columns = merged.iter().filter(|&(col, c)| row.get(col) != Some(c));
        for (col, c) in columns.take(per_replica) {
            if let Ok(key) = Key::new(partition, col) {
                behind.push((r, key, c.clone()));
            }
        }
    }
    repair_all(ctx, behind, n, cl.required(replicas), cl).await?;
    Ok(merged)
}

/// This node's own cells of a partition, as a row.
async fn local_row(ctx: &Arc<Ctx>, partition: &[u8]) -> Result<Row, WireError> {
    Ok(scan_row(ctx, partition)
        .await?
        .into_iter()
        .map(|(k, c)| (k.column().to_vec(), c))
        .collect())
}

/// Reads this node's cells of a partition, at most [`ROW_COLUMNS_MAX`]
/// (more is an error): [`scan_slice`] of all its columns.
pub(crate) async fn scan_row(
    ctx: &Arc<Ctx>,
    partition: &[u8],
) -> Result<Vec<(Key, Cell)>, WireError> {
    let row = scan_slice(ctx, partition, (Vec::new(), None), ROW_COLUMNS_MAX).await?;
    if row.truncated {
        return Err(row_too_long());
    }
    Ok(row.cells)
}

/// Reads this node's first `limit` cells of a partition's columns from
/// `start` to `end` (`Engine::get_slice`), on a blocking thread: a wide
/// row costs a long scan, which must not hold up the tasks of the runtime
/// (heartbeats among them). At most [`ROW_SCANS_MAX`] run at once.
pub(crate) async fn scan_slice(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    (start, end): (Vec<u8>, Option<Vec<u8>>),
    limit: usize,
) -> Result<tally_engine::Row, WireError> {
    ctx.check_readable()?;
    // Process-wide on purpose: it bounds the blocking threads row scans
    // take from the process's runtime, which every node in it shares.
    static SCANS: Semaphore = Semaphore::const_new(ROW_SCANS_MAX);
    let _turn = SCANS
        .acquire()
        .await
        .map_err(|_| WireError::new(ErrorKind::Internal, "row scans are closed"))?;
    let (ctx, partition) = (ctx.clone(), partition.to_vec());
    tally_world::blocking(move || {
        let columns = tally_engine::Columns {
            start: &start,
            end: end.as_deref(),
        };
        ctx.engine().get_slice(&partition, columns, limit)
    })
    .await
    .map_err(|e| WireError::new(ErrorKind::Internal, format!("row scan failed: {e}")))?
    .map_err(|e| engine_error(&e))
}

/// The error for a row over [`ROW_COLUMNS_MAX`] columns.
pub(crate) fn row_too_long() -> WireError {
    WireError::new(
        ErrorKind::Invalid,
        format!(
            "the row has more than the {ROW_COLUMNS_MAX} columns one read returns; read its columns one by one"
        ),
    )
}

/// Asks `required` live replicas (this node first), replacing any that
/// fail with the next live one, until `required` have answered; or as
/// many as `reach` says: with [`Reach::AllLive`] it waits for every live
/// one (or the read timeout) and succeeds with `required` answers. The
/// rule is [`Gather`]'s; this moves the bytes.
pub(super) async fn gather_from<T: Send + 'static>(
    ctx: &Arc<Ctx>,
    replicas: &[usize],
    cl: Consistency,
    reach: Reach,
    req: PeerRequest,
    local: impl Fn(&Ctx) -> Result<T, WireError>,
    parse: fn(PeerResponse) -> Option<T>,
) -> Result<Vec<(usize, T)>, WireError> {
    ctx.check_available(replicas, cl, "read")?;
    let live = ctx.live(replicas);
    let required = cl.required(replicas.len());
    let want = match reach {
        Reach::Level => required,
        Reach::AllLive => live.len().max(required),
    };
    let mut gather = Gather::new(&live, required, want);
    let deadline = Instant::now() + ctx.read_timeout();
    let (tx, mut rx) = mpsc::channel::<(usize, Result<T, String>)>(live.len());
    let mut got = Vec::with_capacity(want);
    let mut failures = Vec::new();
    loop {
        while let Some(r) = gather.next_ask() {
            if r == ctx.me() {
                match local(ctx) {
                    Ok(t) => {
                        gather.on_answer(r);
                        got.push((r, t));
                    }
                    Err(e) => {
                        gather.on_failure(r);
                        failures.push(format!("{}: {e}", ctx.name(r)));
                    }
                }
                continue;
            }
            ask(ctx, r, req.clone(), parse, tx.clone());
        }
        if gather.done().is_some() {
            break;
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((r, Ok(t)))) => {
                gather.on_answer(r);
                got.push((r, t));
            }
            Ok(Some((r, Err(e)))) => {
                gather.on_failure(r);
                failures.push(format!("{}: {e}", ctx.name(r)));
            }
            Ok(None) => gather.on_timeout(),
            Err(_) => {
                failures.push(format!(
                    "{} replicas silent for {} ms",
                    gather.in_flight(),
                    ctx.read_timeout().as_millis()
                ));
                gather.on_timeout();
            }
        }
    }
    if gather.done() == Some(true) {
        return Ok(got);
    }
    Err(WireError::new(
        ErrorKind::Timeout,
        format!(
            "read at {cl}: {} of {required} replicas answered ({})",
            got.len(),
            failures.join("; ")
        ),
    ))
}

/// Sends `req` to replica `r`, its answer (parsed) to `tx`.
fn ask<T: Send + 'static>(
    ctx: &Arc<Ctx>,
    r: usize,
    req: PeerRequest,
    parse: fn(PeerResponse) -> Option<T>,
    tx: mpsc::Sender<(usize, Result<T, String>)>,
) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let answer = match ctx.transport().call(r, req, ctx.read_timeout()).await {
            Ok(PeerResponse::Error(e)) => Err(e.to_string()),
            Ok(resp) => parse(resp).ok_or_else(|| "unexpected answer".to_string()),
            Err(e) => Err(e.to_string()),
        };
        let _ = tx.send((r, answer)).await;
    });
}

/// Merges one cell learned from elsewhere into this node's engine
/// (`Engine::apply` of one item, waiting as `wait` says): answers the
/// cell's epoch after the merge, or why it was refused.
pub(crate) async fn apply_here(
    ctx: &Ctx,
    key: &Key,
    cell: &Cell,
    wait: Wait,
) -> tally_engine::Result<Epoch> {
    if ctx.faults().drops_cql_delete(key) {
        return Ok(cell.epoch()); // FAULT INJECTION: taken as nothing
    }
    let mut answers = ctx.engine().apply([(key, cell, None)], wait).await?;
    answers.pop().unwrap_or(Err(tally_engine::Error::Closed))
}

/// Sends the merged cell to a replica that was behind, in the background.
fn repair(ctx: &Arc<Ctx>, replica: usize, key: Key, cell: Cell) {
    let ctx = ctx.clone();
    tokio::spawn(async move { repair_now(&ctx, replica, &key, &cell).await });
}

/// Sends `replica` the merged `cell` of `key`, durable there before it
/// answers; whether it is held there now.
async fn repair_now(ctx: &Arc<Ctx>, replica: usize, key: &Key, cell: &Cell) -> bool {
    ctx.metrics()
        .read_repairs
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if replica == ctx.me() {
        return match apply_here(ctx, key, cell, Wait::Durable).await {
            Ok(_) => true,
            Err(e) => {
                warn!(error = %e, "local read repair failed");
                false
            }
        };
    }
    // The cell may hold this node's add with an id not durable yet:
    // it leaves once it is (see `tally_engine::Engine::settled`).
    if let Err(e) = ctx.engine().settled().await {
        warn!(error = %e, "read repair skipped");
        return false;
    }
    let req = PeerRequest::Apply {
        key: wire_key(key),
        cell: wire_cell(cell),
    };
    match ctx
        .transport()
        .call(replica, req, ctx.write_timeout())
        .await
    {
        Ok(PeerResponse::Applied | PeerResponse::Stale { .. }) => true,
        // A hint is delivered from this node's own cell: only a
        // replica holds the merged state it stands for.
        _ if ctx.replicas(key.partition()).contains(&ctx.me()) => {
            ctx.hint(replica, key);
            false
        }
        _ => false,
    }
}
