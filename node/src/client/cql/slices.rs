//! Which columns of a partition a SELECT reads, in a table with its rows
//! sorted (`sortable`): the rows its clustering restrictions name are
//! ranges of columns, and a page resumed after a row begins past it. No
//! I/O: `exec::pages` reads the ranges slice by slice.
//!
//! A partition of such a table holds, in column order: its rows (each
//! column beginning with 0x40 when the table has clustering columns, else
//! a name), then its static columns (0xFD) and its deleted ranges (0xFE),
//! which every page reads whole ([`TAIL`]).

use super::cells::Layout;
use super::response::CqlError;
use super::rows::{Clustering, product};
use super::sortable::{VALUE as ROW, after_prefix};

/// A range of columns: the first (inclusive), the first past it
/// (exclusive; `None`: the partition's end).
pub(crate) type Range = (Vec<u8>, Option<Vec<u8>>);

/// The first byte of a static column or a deleted range: where a
/// partition's rows end.
const TAIL_BYTE: u8 = 0xFD;

/// The columns past the rows: static columns and deleted ranges.
pub(crate) fn tail() -> Range {
    (vec![TAIL_BYTE], None)
}

/// The ranges of columns that hold the rows `clustering` names, in
/// column order, none empty.
pub(crate) fn ranges(layout: &Layout, clustering: &Clustering) -> Result<Vec<Range>, CqlError> {
    if layout.clustering_columns() == 0 {
        return Ok(vec![(Vec::new(), Some(vec![TAIL_BYTE]))]);
    }
    let mut out = Vec::new();
    for fixed in product(&clustering.fixed)? {
        let prefix = layout.prefix(&fixed)?;
        let (mut start, mut end) = match prefix.is_empty() {
            true => (vec![ROW], vec![ROW + 1]),
            false => (prefix.clone(), after_prefix(&prefix)),
        };
        if let Some((lower, upper)) = &clustering.range {
            let descending = layout.descending(fixed.len());
            for (bound, is_lower) in [(lower, true), (upper, false)] {
                let Some((v, inclusive)) = bound else {
                    continue;
                };
                let values: Vec<Vec<u8>> = fixed.iter().cloned().chain([v.clone()]).collect();
                let at = layout.prefix(&values)?;
                // The rows of value `v` are [at, after_prefix(at)). A lower
                // bound starts the range, unless the column is DESC, where
                // it ends it; an upper bound the other way round.
                match (is_lower != descending, *inclusive) {
                    (true, true) => start = start.max(at),
                    (true, false) => start = start.max(after_prefix(&at)),
                    (false, true) => end = end.min(after_prefix(&at)),
                    (false, false) => end = end.min(at),
                }
            }
        }
        if start < end {
            out.push((start, Some(end)));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Whether `column` is one a read of `ranges` keeps: in one of them, or
/// a static column or deleted range.
pub(crate) fn holds(ranges: &[Range], column: &[u8]) -> bool {
    column >= [TAIL_BYTE].as_slice()
        || ranges.iter().any(|(start, end)| {
            column >= start.as_slice() && end.as_ref().is_none_or(|e| column < e.as_slice())
        })
}

/// `ranges` cut to the columns from `from` (inclusive), or before
/// `before` (exclusive): what is left of them for a page resumed there.
pub(crate) fn clip(ranges: Vec<Range>, from: Option<&[u8]>, before: Option<&[u8]>) -> Vec<Range> {
    ranges
        .into_iter()
        .filter_map(|(mut start, mut end)| {
            if let Some(f) = from {
                start = start.max(f.to_vec());
            }
            if let Some(b) = before {
                end = Some(end.map_or(b.to_vec(), |e| e.min(b.to_vec())));
            }
            let empty = end.as_ref().is_some_and(|e| start >= *e);
            (!empty).then_some((start, end))
        })
        .collect()
}

/// Where a page resumed after the row of `clustering` begins (reading
/// forward) or ends (reading backward).
pub(crate) fn resume(layout: &Layout, clustering: &[Vec<u8>]) -> Result<Range, CqlError> {
    let row = layout.prefix(clustering)?;
    Ok((after_prefix(&row), Some(row)))
}

#[cfg(test)]
mod tests;
