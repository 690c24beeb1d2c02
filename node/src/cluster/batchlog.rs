//! The batch log: whole cells written to several partitions (a CQL
//! logged batch) that all apply or none, as Cassandra's batchlog makes
//! them.
//!
//! The coordinator first writes the batch, whole, as an entry of the log
//! at QUORUM: a partition of its own, placed on the ring as any key.
//! Only then does it write each partition's cells, at the batch's level,
//! and last it deletes the entry. If it dies (or a write fails) between
//! the two, the entry outlives it: every node looks over the entries it
//! holds every [`REPLAY_EVERY`] ([`start`]), and one older than twice
//! the write timeout (its coordinator had its chance) is replayed, its
//! writes at QUORUM, then deleted. The cells are whole and merge by their own epochs
//! (last-write-wins), so a batch applied twice, or by two replicas of its
//! entry at once, is the batch applied once.
//!
//! ```text
//! entry partition := BATCHLOG_MARK, 16 random bytes
//! column          := [u16 BE] chunk index, [u16 BE] chunks
//! cell            := epoch (n 1, origin 1), list [chunk]
//!                    (deleted: epoch (n 2, origin u64::MAX), expired
//!                    when the entry was made; compactions forget it
//!                    [`PURGE_AFTER_MS`] later)
//! chunks          := the encoding of (created ms, [(partition, [(column, cell)])])
//! ```

use std::sync::{Arc, Weak};
use std::time::Duration;

use tally_engine::cell::List;
use tally_engine::{Cell, Epoch, Expiry, Key};
use tally_net::wire::{Consistency, ErrorKind, WireCell, WireError};
use tracing::{info, warn};

use crate::base::convert::{self, wire_cell};
use crate::cluster::ctx::Ctx;
use crate::cluster::faults::Fault;
use crate::cluster::write::{Partitions, Writes, keyed};

/// The first bytes of an entry's partition: a byte no client partition
/// begins with (`0xFF`), then one no Redis database or CQL table uses.
pub(crate) const BATCHLOG_MARK: [u8; 2] = [0xFF, 0xB0];
/// Most cells one write carries: an entry's chunks, a partition's cells.
const CELLS_MAX: usize = tally_net::wire::LEADER_CELLS_MAX;
/// Bytes of one chunk of an entry (a list element's limit, with room).
const CHUNK_BYTES: usize = 24 << 10;

/// A batch: each partition's cells, by column.
pub(crate) type Batch = Partitions;
/// A batch as an entry encodes it: its cells as the wire has them.
type WireBatch = Vec<(Vec<u8>, Vec<(Vec<u8>, WireCell)>)>;

/// How a logged batch failed.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Its entry was not written: nothing is applied (or, if the entry's
    /// write timed out, all of it may be, later).
    Log(WireError),
    /// Its entry was written, a partition's write was not: the batch will
    /// be applied whole, by the log's replay.
    Apply(WireError),
}

/// The entry of `batch`, made at `created_ms`: its cells, by column.
pub(crate) fn entry(created_ms: u64, batch: &Batch) -> Result<Vec<(Vec<u8>, Cell)>, WireError> {
    let wire: WireBatch = batch
        .iter()
        .map(|(p, cells)| {
            let cells = cells.iter().map(|(c, cell)| (c.clone(), wire_cell(cell)));
            (p.clone(), cells.collect())
        })
        .collect();
    let bytes = tally_net::wire::encode(&(created_ms, wire));
    let chunks: Vec<&[u8]> = bytes.chunks(CHUNK_BYTES).collect();
    let count = u16::try_from(chunks.len())
        .ok()
        .filter(|&n| usize::from(n) <= CELLS_MAX)
        .ok_or_else(|| {
            WireError::not_applied(
                ErrorKind::Invalid,
                format!(
                    "a logged batch of {} bytes: the batch log holds at most {} KiB of one",
                    bytes.len(),
                    (CELLS_MAX * CHUNK_BYTES) >> 10
                ),
            )
        })?;
    let mut cells = Vec::with_capacity(chunks.len());
    for (i, chunk) in (0u16..).zip(chunks) {
        let list = List::new(vec![chunk.to_vec()]).ok().flatten();
        let cell = Cell::from_parts(epoch(1, 1, 0), []).with_list(list);
        cells.push((column(i, count), cell));
    }
    Ok(cells)
}

/// An entry's deleted cells, for `columns` (the entry made at
/// `created_ms`: every node that deletes it makes the same cells).
fn deleted(created_ms: u64, columns: impl Iterator<Item = Vec<u8>>) -> Vec<(Vec<u8>, Cell)> {
    let gone = Cell::from_parts(epoch(2, u64::MAX, created_ms.max(1)), []);
    columns.map(|c| (c, gone.clone())).collect()
}

/// How long a deleted entry is kept past its making: long enough for the
/// delete to reach every replica (hints, repair), after which a
/// compaction forgets it (`cluster::purge`). A replica that still holds
/// it live replays it once more, which changes nothing.
pub(crate) const PURGE_AFTER_MS: u64 = 10 * 60 * 1000;

fn epoch(n: u64, origin: u64, at_ms: u64) -> Epoch {
    Epoch {
        n,
        origin,
        expiry: Expiry {
            at_ms,
            ..Expiry::NONE
        },
        ..Epoch::at(0)
    }
}

fn column(index: u16, count: u16) -> Vec<u8> {
    [index.to_be_bytes(), count.to_be_bytes()].concat()
}

/// The batch an entry's live cells (by column) hold, and when it was
/// made; `None` while a chunk is missing or if they hold no batch.
pub(crate) fn batch_of(cells: &[(Vec<u8>, &Cell)], now_ms: u64) -> Option<(u64, Batch)> {
    let mut chunks: Vec<(u16, u16, &[u8])> = Vec::new();
    for (c, cell) in cells {
        let (index, count) = (c.get(..2)?, c.get(2..4)?);
        let element = cell
            .list()
            .filter(|_| cell.live(now_ms))?
            .elements()
            .first()?;
        let index = u16::from_be_bytes([index[0], index[1]]);
        chunks.push((index, u16::from_be_bytes([count[0], count[1]]), element));
    }
    chunks.sort_by_key(|c| c.0);
    let count = chunks.first()?.1;
    let whole = chunks.len() == usize::from(count)
        && chunks
            .iter()
            .enumerate()
            .all(|(i, c)| usize::from(c.0) == i && c.1 == count);
    if !whole {
        return None;
    }
    let bytes: Vec<u8> = chunks.iter().flat_map(|c| c.2.iter().copied()).collect();
    let (created, wire): (u64, WireBatch) = tally_net::wire::decode(&bytes).ok()?;
    let batch = wire
        .into_iter()
        .map(|(p, cells)| {
            let cells = cells.into_iter().map(|(c, cell)| (c, convert::cell(&cell)));
            (p, cells.collect())
        })
        .collect();
    Some((created, batch))
}

/// Writes `batch` at `cl` through the log: its entry at QUORUM, then each
/// partition's cells at `cl`, then the entry deleted.
pub(crate) async fn write(
    ctx: &Ctx,
    writes: &Writes,
    mut batch: Batch,
    cl: Consistency,
) -> Result<(), Failed> {
    let mut id = [0u8; 16];
    tally_world::fill_random(&mut id);
    let partition = [&BATCHLOG_MARK[..], &id].concat();
    let created = tally_engine::now_ms();
    let cells = entry(created, &batch).map_err(Failed::Log)?;
    let columns: Vec<Vec<u8>> = cells.iter().map(|(c, _)| c.clone()).collect();
    let keyed = keyed(&partition, cells).map_err(Failed::Log)?;
    writes
        .put_cells(keyed, Consistency::Quorum)
        .await
        .map_err(Failed::Log)?;
    if ctx.faults().crash_mid_batch() {
        batch.truncate(1);
        writes
            .put_partitions(batch, cl)
            .await
            .map_err(Failed::Apply)?;
        let crashed = "FAULT INJECTION: the coordinator stopped half way through the batch";
        return Err(Failed::Apply(WireError::new(ErrorKind::Timeout, crashed)));
    }
    writes
        .put_partitions(batch, cl)
        .await
        .map_err(Failed::Apply)?;
    forget(writes, &partition, (created, columns.into_iter())).await;
    Ok(())
}

/// Deletes an entry (made at `created_ms`, of `columns`), at ONE: a
/// replica that misses it replays the batch once more, which changes
/// nothing.
async fn forget(
    writes: &Writes,
    partition: &[u8],
    (created_ms, columns): (u64, impl Iterator<Item = Vec<u8>>),
) {
    let gone = keyed(partition, deleted(created_ms, columns));
    if let Err(e) = match gone {
        Ok(gone) => writes.put_cells(gone, Consistency::One).await,
        Err(e) => Err(e),
    } {
        warn!(error = %e, "a batch log entry was not deleted: it will be replayed");
    }
}

/// How often a node looks over the entries it holds (Cassandra's
/// batchlog replays every 10 s too).
const REPLAY_EVERY: Duration = Duration::from_secs(10);

/// Replays the entries this node holds whose coordinators had their
/// chance, every [`REPLAY_EVERY`], while the node runs.
pub(crate) fn start(ctx: Weak<Ctx>, writes: Weak<Writes>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REPLAY_EVERY).await;
            let (Some(c), Some(w)) = (ctx.upgrade(), writes.upgrade()) else {
                return;
            };
            if !c.faults().has(Fault::BatchLogSkipsReplay) {
                replay_due(&c, &w, 2 * c.write_timeout()).await;
            }
        }
    });
}

/// Replays each entry held here made over `after` ago.
async fn replay_due(ctx: &Arc<Ctx>, writes: &Writes, after: Duration) {
    let held = {
        let ctx = ctx.clone();
        tally_world::blocking(move || held(&ctx)).await
    };
    let entries = match held {
        Ok(Ok(entries)) => entries,
        Ok(Err(e)) => return warn!(error = %e, "the batch log could not be read"),
        Err(e) => return warn!(error = %e, "the batch log could not be read"),
    };
    let now = tally_engine::now_ms();
    let due = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    for (partition, cells) in entries {
        let refs: Vec<(Vec<u8>, &Cell)> = cells.iter().map(|(c, cell)| (c.clone(), cell)).collect();
        let Some((created, batch)) = batch_of(&refs, now) else {
            continue;
        };
        if now.saturating_sub(created) < due {
            continue;
        }
        let partitions = batch.len();
        match writes.put_partitions(batch, Consistency::Quorum).await {
            Ok(()) => {
                info!(partitions, created_ms = created, "replayed a logged batch");
                let columns = cells.into_iter().map(|(c, _)| c);
                forget(writes, &partition, (created, columns)).await;
            }
            Err(e) => warn!(error = %e, "a logged batch's replay failed: it is tried again"),
        }
    }
}

/// Cells of the log a scan window copies from each memtable: the cells
/// after the log's (CQL tables' partitions) are not copied whole.
const HELD_WINDOW: usize = 1024;

/// The entries this node holds: each partition's cells, live or not.
fn held(ctx: &Ctx) -> tally_engine::Result<Batch> {
    use std::ops::{Bound, ControlFlow};
    let first = Key::new(&BATCHLOG_MARK, b"")?;
    let mut entries: Batch = Vec::new();
    let mut after: Option<Key> = None;
    loop {
        let start = after
            .as_ref()
            .map_or(Bound::Included(&first), Bound::Excluded);
        let stopped = ctx.engine().scan_window(start, HELD_WINDOW, |k, cell| {
            if !k.partition().starts_with(&BATCHLOG_MARK) {
                return ControlFlow::Break(());
            }
            let cell = (k.column().to_vec(), cell.clone());
            match entries.last_mut() {
                Some((p, cells)) if p == k.partition() => cells.push(cell),
                _ => entries.push((k.partition().to_vec(), vec![cell])),
            }
            ControlFlow::Continue(())
        })?;
        match stopped {
            Some(key) => after = Some(key),
            None => return Ok(entries),
        }
    }
}

#[cfg(test)]
mod tests;
