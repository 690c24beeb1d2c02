//! Deleted ranges: a `DELETE` of rows (one row, a clustering prefix, a
//! slice, or the whole partition) is one cell per combination of its
//! `IN`s, named by the rows it deletes and stamped with its timestamp.
//! Deleting the same rows again at a later timestamp replaces it, as any
//! last-write-wins cell; it never expires.
//!
//! ```text
//! column := 0xFE, [u8] n, n × ([u16] len, value)      the fixed prefix
//!           [u8] 0 | 1 (a slice of the next column follows)
//!           lower, upper := [u8] 0 (none) | 1 (inclusive) | 2 (exclusive),
//!                           then [u16] len, value unless none
//! ```

use tally_engine::COLUMN_BYTES_MAX;
use tally_engine::Cell as Stored;

use super::super::lww;
use super::super::response::CqlError;
use super::super::result::CqlType;
use super::super::rows::{Bound, Clustering};

/// The first byte of a deleted range's cell.
pub(super) const DELETED: u8 = 0xFE;

/// One deleted range, read back.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Deleted {
    rows: Clustering,
    pub(super) ts: i64,
}

impl Deleted {
    /// Whether it deletes the whole partition, static columns too.
    pub(super) fn whole_partition(&self) -> bool {
        self.rows.fixed.is_empty() && self.rows.range.is_none()
    }

    /// Whether it deletes the row of `clustering` (`types` its columns').
    pub(super) fn covers(&self, clustering: &[Vec<u8>], types: &[&CqlType]) -> bool {
        self.rows.admits(clustering, types)
    }
}

/// The cells that delete the rows `rows` names at `ts`.
pub(crate) fn deleted(rows: &Clustering, ts: i64) -> Result<Vec<(Vec<u8>, Stored)>, CqlError> {
    let mut prefixes: Vec<Vec<&Vec<u8>>> = vec![Vec::new()];
    for values in &rows.fixed {
        prefixes = prefixes
            .iter()
            .flat_map(|head| {
                values.iter().map(move |v| {
                    let mut next = head.clone();
                    next.push(v);
                    next
                })
            })
            .collect();
    }
    let stored = lww::value(ts, &[], 0)
        .ok_or_else(|| CqlError::Server("an empty value over the limit".into()))?;
    prefixes
        .into_iter()
        .map(|prefix| Ok((column(&prefix, rows.range.as_ref())?, stored.clone())))
        .collect()
}

fn column(prefix: &[&Vec<u8>], range: Option<&(Bound, Bound)>) -> Result<Vec<u8>, CqlError> {
    let mut c = vec![DELETED, u8::try_from(prefix.len()).unwrap_or(u8::MAX)];
    let value = |c: &mut Vec<u8>, v: &[u8]| {
        c.extend_from_slice(&u16::try_from(v.len()).unwrap_or(u16::MAX).to_be_bytes());
        c.extend_from_slice(v);
    };
    for v in prefix {
        value(&mut c, v);
    }
    match range {
        None => c.push(0),
        Some((lower, upper)) => {
            c.push(1);
            for b in [lower, upper] {
                match b {
                    None => c.push(0),
                    Some((v, inclusive)) => {
                        c.push(if *inclusive { 1 } else { 2 });
                        value(&mut c, v);
                    }
                }
            }
        }
    }
    match c.len() <= COLUMN_BYTES_MAX {
        true => Ok(c),
        false => Err(CqlError::Invalid(format!(
            "the clustering values of a deleted range are at most {} bytes",
            COLUMN_BYTES_MAX - 8
        ))),
    }
}

/// The deleted range of `column` (a cell [`deleted`] made) and its
/// cell; `None` for one that is not.
pub(super) fn read(column: &[u8], cell: &Stored, now_ms: u64) -> Option<Deleted> {
    let ts = lww::read(cell, now_ms)?.ts;
    let (&first, rest) = column.split_first()?;
    if first != DELETED {
        return None;
    }
    let mut r = rest;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = (r.get(..n)?, r.get(n..)?);
        r = tail;
        Some(head)
    };
    let n = take(1)?[0];
    let mut fixed = Vec::new();
    for _ in 0..n {
        let len = u16::from_be_bytes(take(2)?.try_into().ok()?);
        fixed.push(vec![take(usize::from(len))?.to_vec()]);
    }
    let range = match take(1)?[0] {
        0 => None,
        _ => {
            let mut bound = || -> Option<Bound> {
                match take(1)?[0] {
                    0 => Some(None),
                    kind => {
                        let len = u16::from_be_bytes(take(2)?.try_into().ok()?);
                        Some(Some((take(usize::from(len))?.to_vec(), kind == 1)))
                    }
                }
            };
            let lower = bound()?;
            Some((lower, bound()?))
        }
    };
    Some(Deleted {
        rows: Clustering { fixed, range },
        ts,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn int(v: i32) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }

    #[test]
    fn a_deleted_range_reads_back_and_covers_its_rows_only() {
        let types = [&CqlType::Varchar, &CqlType::Int];
        let rows = Clustering {
            fixed: vec![vec![b"a".to_vec(), b"b".to_vec()]],
            range: Some((Some((int(2), true)), Some((int(5), false)))),
        };
        let cells = deleted(&rows, 2000).unwrap();
        assert_eq!(cells.len(), 2, "one per value of the IN");
        let d = read(&cells[0].0, &cells[0].1, 0).unwrap();
        assert_eq!(d.ts, 2000);
        assert!(!d.whole_partition());
        assert!(d.covers(&[b"a".to_vec(), int(2)], &types));
        assert!(d.covers(&[b"a".to_vec(), int(4)], &types));
        assert!(!d.covers(&[b"a".to_vec(), int(5)], &types));
        assert!(
            !d.covers(&[b"b".to_vec(), int(3)], &types),
            "the other value's cell"
        );
        assert!(
            read(&cells[1].0, &cells[1].1, 0)
                .unwrap()
                .covers(&[b"b".to_vec(), int(3)], &types)
        );

        let partition = deleted(&Clustering::default(), 7).unwrap();
        let d = read(&partition[0].0, &partition[0].1, 0).unwrap();
        assert!(d.whole_partition() && d.covers(&[b"z".to_vec(), int(0)], &types));
        // A row's column is no deleted range.
        assert_eq!(read(b"\x00\x01ax", &partition[0].1, 0), None);
    }

    #[test]
    fn bounds_too_long_for_a_cell_are_refused() {
        let rows = Clustering {
            fixed: vec![vec![vec![b'x'; 300]]],
            range: None,
        };
        assert!(deleted(&rows, 1).unwrap_err().message().contains("at most"));
    }
}
