//! Reads of a range of a partition's columns, a slice at a time: how a
//! partition too wide for one answer ([`ROW_COLUMNS_MAX`] cells) is
//! read, and how a CQL page reads only the rows it answers.
//!
//! Each replica asked answers the first `limit` cells it holds of the
//! range (`PeerRequest::ReadSlice`). An answer of `limit` cells may stop
//! short of columns that replica holds, so the merge is exact only up to
//! the last column of the shortest such answer ([`exact_until`]): a
//! column past it that one replica sent may be newer on another, which
//! did not send it. The slice answers the merge up to there, repairs the
//! replicas behind on it, and says where the next slice begins.

use std::sync::Arc;

use tally_net::wire::{Consistency, ErrorKind, PeerRequest, ROW_COLUMNS_MAX, WireError};

use crate::cluster::ctx::Ctx;
use crate::cluster::faults::Fault;
use crate::cluster::read::{Reach, Row, gather_from, merge_rows, row_of, scan_slice};

/// A range of a partition's columns: from the first (inclusive) to the
/// second (exclusive; `None`: the partition's end).
pub(crate) type Range = (Vec<u8>, Option<Vec<u8>>);

/// A slice as read: the merged cells of its range up to where the read
/// is exact, and where the rest of the range begins (`None`: nothing of
/// it is left).
#[derive(Debug, Default)]
pub(crate) struct Slice {
    pub(crate) cells: Row,
    pub(crate) next: Option<Vec<u8>>,
}

/// Reads the cells of `partition`'s columns in `range` at `cl`, at most
/// about `limit` (at most [`ROW_COLUMNS_MAX`]) of them, merged and
/// repaired.
pub(crate) async fn read_slice(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    range: Range,
    limit: usize,
    cl: Consistency,
) -> Result<Slice, WireError> {
    let limit = limit.clamp(1, ROW_COLUMNS_MAX);
    let replicas = ctx.replicas(partition);
    // This node's own scan runs first, off the runtime's threads (as
    // `read::read_row`'s does).
    let local = match replicas.contains(&ctx.me()) {
        true => Some(local_slice(ctx, partition, range.clone(), limit).await),
        false => None,
    };
    let local = parking_lot::Mutex::new(local);
    let answers = gather_from(
        ctx,
        &replicas,
        cl,
        Reach::Level,
        PeerRequest::ReadSlice {
            partition: partition.to_vec(),
            start: range.0.clone(),
            end: range.1.clone(),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        },
        |_| {
            local.lock().take().unwrap_or_else(|| {
                Err(WireError::new(
                    ErrorKind::Internal,
                    "this node's slice was asked for twice",
                ))
            })
        },
        row_of,
    )
    .await?;
    let mut until = exact_until(answers.iter().map(|(_, row)| row), limit);
    if ctx.faults().has(Fault::SliceTrustsLongest) {
        until = longest(answers.iter().map(|(_, row)| row), limit); // FAULT INJECTION
    }
    let answers = answers
        .into_iter()
        .map(|(r, mut row)| {
            if let Some(last) = &until {
                row.retain(|column, _| column <= last);
            }
            (r, row)
        })
        .collect();
    // Each answer holds at most `limit` cells: their union is bounded.
    let cells = merge_rows(ctx, partition, answers, (replicas.len(), usize::MAX), cl).await?;
    Ok(Slice {
        cells,
        next: until.map(|last| after(&last)),
    })
}

/// Reads every cell of `partition` at `cl`, slice by slice: at most
/// `cells_max` of them (more is an error).
pub(crate) async fn read_wide(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    cells_max: usize,
    cl: Consistency,
) -> Result<Row, WireError> {
    let mut all = Row::new();
    let mut range: Range = (Vec::new(), None);
    loop {
        let slice = read_slice(ctx, partition, range.clone(), ROW_COLUMNS_MAX, cl).await?;
        all.extend(slice.cells);
        if all.len() > cells_max {
            return Err(WireError::new(
                ErrorKind::Invalid,
                format!(
                    "the partition has more than the {cells_max} cells one read holds; read it \
                     a range of its rows at a time"
                ),
            ));
        }
        match slice.next {
            Some(next) => range.0 = next,
            None => return Ok(all),
        }
    }
}

/// The last column up to which the merge of `answers` (each a replica's
/// first `limit` cells of a range) is exact: the smallest last column of
/// an answer that holds `limit` cells; `None` if none does (each replica
/// sent all it holds of the range).
pub(crate) fn exact_until<'r>(
    answers: impl IntoIterator<Item = &'r Row>,
    limit: usize,
) -> Option<Vec<u8>> {
    full_ends(answers, limit).min().cloned()
}

/// The broken rule of `Fault::SliceTrustsLongest`: the largest last
/// column of a full answer.
fn longest<'r>(answers: impl IntoIterator<Item = &'r Row>, limit: usize) -> Option<Vec<u8>> {
    full_ends(answers, limit).max().cloned()
}

/// The last column of each answer that holds `limit` cells.
fn full_ends<'r>(
    answers: impl IntoIterator<Item = &'r Row>,
    limit: usize,
) -> impl Iterator<Item = &'r Vec<u8>> {
    answers
        .into_iter()
        .filter(move |row| row.len() >= limit)
        .filter_map(|row| row.last_key_value().map(|(column, _)| column))
}

/// The first column after `column`.
pub(crate) fn after(column: &[u8]) -> Vec<u8> {
    [column, &[0]].concat()
}

/// This node's cells of the slice, as a row.
async fn local_slice(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    range: Range,
    limit: usize,
) -> Result<Row, WireError> {
    let row = scan_slice(ctx, partition, range, limit).await?;
    Ok(row
        .cells
        .into_iter()
        .map(|(k, c)| (k.column().to_vec(), c))
        .collect())
}

#[cfg(test)]
mod tests {
    use tally_engine::Cell;

    use super::*;

    fn row(columns: &[&str]) -> Row {
        columns
            .iter()
            .map(|c| (c.as_bytes().to_vec(), Cell::new()))
            .collect()
    }

    #[test]
    fn a_merge_is_exact_up_to_the_shortest_full_answer() {
        // Neither answer is full: each replica sent all it holds.
        assert_eq!(exact_until([&row(&["a", "b"]), &row(&["c"])], 3), None);
        // One full answer: past its last column, that replica may hold
        // more.
        let until = exact_until([&row(&["a", "b", "c"]), &row(&["a", "d"])], 3);
        assert_eq!(until, Some(b"c".to_vec()));
        // Two full answers: the shorter reach.
        let until = exact_until([&row(&["a", "b", "x"]), &row(&["a", "c", "d"])], 3);
        assert_eq!(until, Some(b"d".to_vec()));
        assert_eq!(exact_until([&row(&[])], 1), None);
        // The next slice begins right after the exact part, never inside
        // it.
        let next = after(b"d");
        assert!(next.as_slice() > b"d".as_slice() && next.as_slice() < b"d\x00\x00".as_slice());
    }
}
