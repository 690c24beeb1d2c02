//! The background thread: memtable flushes and size-tiered compaction.

use std::sync::Arc;
use std::time::Duration;

use crate::cell::Cell;
use crate::engine::Inner;
use crate::error::Result;
use crate::fsutil;
use crate::key::Key;
use crate::sstable::{Table, TableIter, TableWriter};
use crate::work::{Work, WorkReceiver};

/// Largest number of tables one compaction merges.
const COMPACTION_TABLES_MAX: usize = 32;
/// Tables below this size all share the smallest tier.
const SMALL_TABLE_BYTES: u64 = 4 << 20;

/// How often the background thread looks for frozen memtables nobody
/// asked it to flush.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Runs flushes and compactions, as `work` asks, until told to stop.
pub(crate) fn run(inner: &Inner, work: &WorkReceiver) {
    loop {
        match work.next(IDLE_CHECK) {
            Some(Work::Shutdown) => return,
            Some(Work::Flush) => {}
            None if inner.versions.current().frozen.is_empty() => continue,
            None => {}
        }
        inner.versions.freeze_if_full(inner.opts.memtable_bytes_max);
        if let Err(e) = flush_frozen(inner) {
            tracing::error!(error = %e, "memtable flush failed; retrying in a second");
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        if let Err(e) = compact_tiers(inner) {
            tracing::error!(error = %e, "compaction failed");
        }
    }
}

/// Writes every frozen memtable, oldest first, to an SSTable.
pub(crate) fn flush_frozen(inner: &Inner) -> Result<()> {
    let _one_at_a_time = inner.flush_lock.lock();
    loop {
        let Some(m) = inner.versions.current().frozen.last().cloned() else {
            return Ok(());
        };
        let table = if m.len() == 0 {
            None
        } else {
            // Marked keys' state is read from the counter cache, one cell
            // lock at a time, after the memtable's shard locks are released.
            let cells: Vec<(Key, Cell)> = m
                .sorted()
                .into_iter()
                .map(|(k, slot)| {
                    let c = inner.cache.slot_cell(&m, &k, slot);
                    (k, c)
                })
                .collect();
            let ids: std::collections::BTreeSet<u64> = cells
                .iter()
                .flat_map(|(_, c)| c.shards().iter().map(|s| s.counter_id))
                .collect();
            Some(write_table(inner, ids, cells.into_iter().map(Ok))?)
        };
        inner.versions.install_flushed(m.generation(), table);
        inner.outbox.lock().flushed_gen = m.generation();
        inner.outbox_cv.notify_one();
        inner.versions.notify_flushed();
        tracing::debug!(
            generation = m.generation(),
            cells = m.len(),
            "memtable flushed"
        );
    }
}

fn write_table(
    inner: &Inner,
    ids: impl IntoIterator<Item = u64>,
    cells: impl Iterator<Item = Result<(Key, Cell)>>,
) -> Result<Arc<Table>> {
    let id = inner.versions.new_table_id();
    let mut w = TableWriter::create(&inner.dir, id, ids, inner.opts.block_bytes)?;
    for item in cells {
        let (k, c) = item?;
        w.add(&k, &c)?;
    }
    let (path, _) = w.finish()?;
    Ok(Arc::new(Table::open(&path, id)?))
}

/// Runs size-tiered compactions until no tier has enough tables.
fn compact_tiers(inner: &Inner) -> Result<()> {
    while let Some(pick) = pick_tier(
        &inner.versions.current().tables,
        inner.opts.compaction_tables_min,
    ) {
        compact(inner, pick)?;
    }
    Ok(())
}

/// The largest group of similar-sized tables, if it has at least `min` of them.
fn pick_tier(tables: &[Arc<Table>], min: usize) -> Option<Vec<Arc<Table>>> {
    let mut sorted = tables.to_vec();
    sorted.sort_by_key(|t| t.file_bytes());
    let mut tiers: Vec<Vec<Arc<Table>>> = Vec::new();
    for t in sorted {
        let fits = tiers.last().is_some_and(|tier| {
            let avg = tier.iter().map(|t| t.file_bytes()).sum::<u64>() / tier.len() as u64;
            t.file_bytes() <= SMALL_TABLE_BYTES || t.file_bytes() <= avg + avg / 2
        });
        if fits {
            tiers.last_mut().expect("fits implies a tier").push(t);
        } else {
            tiers.push(vec![t]);
        }
    }
    let mut best = tiers
        .into_iter()
        .filter(|t| t.len() >= min.max(2))
        .max_by_key(|t| t.len())?;
    best.truncate(COMPACTION_TABLES_MAX);
    Some(best)
}

/// Merges `inputs` into one table and swaps it in. Shards that a reset made
/// obsolete disappear in the merge.
pub(crate) fn compact(inner: &Inner, inputs: Vec<Arc<Table>>) -> Result<()> {
    if inputs.len() < 2 {
        return Ok(());
    }
    let _one_at_a_time = inner.compaction_lock.lock();
    let live = inner.versions.current();
    if !inputs
        .iter()
        .all(|i| live.tables.iter().any(|t| t.id() == i.id()))
    {
        return Ok(()); // Someone compacted these already.
    }
    let ids: Vec<u64> = inputs
        .iter()
        .flat_map(|t| t.counter_ids().iter().copied())
        .collect();
    let merged = MergeIter {
        inputs: inputs
            .iter()
            .map(|t| t.iter_from(None).peekable())
            .collect(),
    };
    let output = write_table(inner, ids, merged)?;
    inner.versions.install_compacted(&inputs, output.clone());
    for t in &inputs {
        if let Err(e) = std::fs::remove_file(t.path()) {
            tracing::warn!(path = %t.path().display(), error = %e, "could not remove compacted table");
        }
    }
    fsutil::sync_dir(&inner.dir)?;
    tracing::debug!(
        inputs = inputs.len(),
        output = output.id(),
        cells = output.entries(),
        "compacted"
    );
    Ok(())
}

/// Merges sorted table iterators into one sorted stream, merging equal keys.
struct MergeIter {
    inputs: Vec<std::iter::Peekable<TableIter>>,
}

impl Iterator for MergeIter {
    type Item = Result<(Key, Cell)>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut min: Option<Key> = None;
        for input in &mut self.inputs {
            match input.peek() {
                Some(Ok((k, _))) if min.as_ref().is_none_or(|m| k < m) => min = Some(k.clone()),
                Some(Ok(_)) => {}
                Some(Err(_)) => return input.next(),
                None => {}
            }
        }
        let min = min?;
        let mut cell = Cell::new();
        for input in &mut self.inputs {
            if let Some(Ok((k, _))) = input.peek()
                && *k == min
                && let Some(Ok((_, c))) = input.next()
            {
                cell.merge(&c);
            }
        }
        Some(Ok((min, cell)))
    }
}
