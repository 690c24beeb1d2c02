//! Lightweight transactions, without I/O: a conditional `INSERT`,
//! `UPDATE` or `DELETE` of a regular table's row, decided through the
//! agreement path (one Paxos instance per partition, `Node::agree`).
//!
//! The partition's agreed registers hold every cell a transaction wrote
//! there, each as its last-write-wins state:
//!
//! ```text
//! register := column (the cell's, as `regular` names it),
//!             value = [8 bytes BE] timestamp, [u8] 0 value | 1 tombstone, value,
//!             deadline = the value's TTL (0: none)
//! ```
//!
//! A transaction's round reads the registers as a quorum agreed them and
//! merges them with the row's cells (read just before, at QUORUM): what
//! a transaction decided is in the registers even before its cells are
//! written, so every later one judges its condition on it. If it holds,
//! the new registers hold the statement's cells, stamped later than
//! anything the round saw; once agreed they are written as cells at the
//! statement's level, with any register the cells read lacked (a
//! transaction whose proposer died before writing them). A `SERIAL`
//! read merges the registers in the same way.

use std::collections::BTreeMap;

use tally_engine::Cell as Stored;
use tally_net::wire::{Register, Registers};

use super::ast::Op;
use super::cells::compare;
use super::lww;
use super::response::CqlError;
use super::result::{Cell, Column, CqlType, Metadata, cell};
use super::rows::Target;
use super::schema::Kind;

/// A partition's cells, by column.
pub(crate) type Partition = BTreeMap<Vec<u8>, Stored>;

const VALUE: u8 = 0;
const TOMBSTONE: u8 = 1;

/// The register of a cell `regular` made (a value or a tombstone).
pub(crate) fn register(column: &[u8], stored: &Stored) -> Option<Register> {
    let slot = lww::read(stored, 0)?;
    let mut value = slot.ts.to_be_bytes().to_vec();
    match stored.list().and_then(|l| l.elements().first()) {
        Some(v) => {
            value.push(VALUE);
            value.extend_from_slice(v);
        }
        None => value.push(TOMBSTONE),
    }
    let at_ms = match slot.value {
        Some(_) => stored.epoch().expiry.at_ms,
        None => 0,
    };
    Some(Register {
        column: column.to_vec(),
        value,
        at_ms,
    })
}

/// The cell a register holds; `None` for one that is not a cell's.
pub(crate) fn stored(r: &Register) -> Option<Stored> {
    let (ts, rest) = r.value.split_first_chunk::<8>()?;
    let ts = i64::from_be_bytes(*ts);
    match rest.split_first()? {
        (&VALUE, v) => lww::value(ts, v, r.at_ms),
        (&TOMBSTONE, _) => Some(lww::tombstone(ts, 1)),
        _ => None,
    }
}

/// `cells` with `registers` merged in (each the later of the two).
pub(crate) fn merged(mut cells: Partition, registers: &Registers) -> Partition {
    let merger = tally_engine::Merger::default();
    for r in &registers.0 {
        if let Some(s) = stored(r) {
            cells
                .entry(r.column.clone())
                .or_default()
                .merge(&s, &merger);
        }
    }
    cells
}

/// The registers a transaction that writes `writes` leaves, after
/// `registers` (those expired at `now_ms` dropped).
pub(crate) fn after(
    registers: &Registers,
    writes: &[(Vec<u8>, Stored)],
    now_ms: u64,
) -> Result<Registers, CqlError> {
    let mut next = registers.clone();
    next.drop_expired(now_ms);
    for (column, s) in writes {
        if let Some(r) = register(column, s) {
            next.put(r);
        }
    }
    next.check()
        .map_err(|m| CqlError::Invalid(format!("the partition's agreed state: {m}")))?;
    Ok(next)
}

/// The registers' cells that `read` (the cells a round read) lacks or
/// holds older: a decided transaction whose cells are not written yet.
pub(crate) fn unwritten(registers: &Registers, read: &Partition) -> Vec<(Vec<u8>, Stored)> {
    let ts = |s: &Stored| lww::read(s, 0).map(|slot| slot.ts);
    registers
        .0
        .iter()
        .filter_map(|r| Some((r.column.clone(), stored(r)?)))
        .filter(|(c, s)| read.get(c).and_then(ts) < ts(s))
        .collect()
}

/// A timestamp later than every cell of `state` and than `now_ms`'s
/// microseconds: a transaction's writes win over what it judged.
pub(crate) fn later_than(state: &Partition, now_ms: u64) -> i64 {
    let newest = state
        .values()
        .filter_map(|s| lww::read(s, 0).map(|slot| slot.ts))
        .max()
        .unwrap_or(i64::MIN);
    let now_us = i64::try_from(now_ms.saturating_mul(1000)).unwrap_or(i64::MAX);
    now_us.max(newest.saturating_add(1))
}

/// What a transaction's checks made of the rows they name: whether all
/// hold, and if not the columns and rows the `[applied] = false` answer
/// carries.
#[derive(Debug, PartialEq)]
pub(crate) struct Judged {
    pub(crate) applied: bool,
    pub(crate) columns: Vec<Column>,
    pub(crate) rows: Vec<Vec<Cell>>,
}

/// Judges each checked row (its check, and its cells by the columns of
/// `meta`, `None` if it does not exist; in clustering order). When one
/// fails, the answer holds each existing row: every column of the table
/// if a check is `IF [NOT] EXISTS`, else the checked columns, after the
/// primary key's in a `batch` (Cassandra's `buildCasFailureResultSet`).
pub(crate) fn judge(
    t: Target,
    meta: &Metadata,
    checked: &[(&Check, Option<&Vec<Cell>>)],
    batch: bool,
) -> Result<Judged, CqlError> {
    let mut applied = true;
    for (check, row) in checked {
        applied &= holds(meta, check, *row)?;
    }
    if applied {
        return Ok(Judged {
            applied,
            columns: Vec::new(),
            rows: Vec::new(),
        });
    }
    let exists = |c: &&(&Check, _)| matches!(c.0, Check::Exists | Check::NotExists);
    let shown: Vec<usize> = match checked.iter().any(|c| exists(&c)) {
        true => (0..t.table.columns.len()).collect(),
        false => {
            let keys = t.table.columns.iter().filter(|c| is_key(c.kind)).count();
            let mut shown: Vec<usize> = if batch {
                (0..keys).collect()
            } else {
                Vec::new()
            };
            let bounds = checked.iter().flat_map(|(check, _)| match check {
                Check::Columns(b) => b.as_slice(),
                _ => &[],
            });
            for b in bounds {
                let i = position(meta, &b.column)?;
                if !shown.contains(&i) {
                    shown.push(i);
                }
            }
            shown
        }
    };
    let rows = checked.iter().filter_map(|(_, row)| *row);
    Ok(Judged {
        applied,
        columns: shown.iter().map(|&i| meta.columns[i].clone()).collect(),
        rows: rows
            .map(|r| shown.iter().map(|&i| r[i].clone()).collect())
            .collect(),
    })
}

fn is_key(kind: Kind) -> bool {
    matches!(kind, Kind::PartitionKey | Kind::Clustering)
}

/// Whether `check` holds of `row`.
fn holds(meta: &Metadata, check: &Check, row: Option<&Vec<Cell>>) -> Result<bool, CqlError> {
    Ok(match (check, row) {
        (Check::NotExists, None) | (Check::Exists, Some(_)) => true,
        (Check::NotExists, Some(_)) | (Check::Exists | Check::Columns(_), None) => false,
        (Check::Columns(bounds), Some(r)) => {
            let mut all = true;
            for b in bounds {
                let i = position(meta, &b.column)?;
                all &= satisfied(b, &meta.columns[i].ty, &r[i]);
            }
            all
        }
    })
}

/// Where `column` is in `meta`.
fn position(meta: &Metadata, column: &str) -> Result<usize, CqlError> {
    meta.columns
        .iter()
        .position(|c| c.name == column)
        .ok_or_else(|| CqlError::Invalid(format!("Undefined column name {column}")))
}

/// Whether `current` (of type `ty`) satisfies `b`; a null equals only
/// null, and orders against nothing.
fn satisfied(b: &Bound, ty: &CqlType, current: &Cell) -> bool {
    let against = |w: &Cell| match (current, w) {
        (None, None) => Some(std::cmp::Ordering::Equal),
        (Some(a), Some(b)) => Some(compare(ty, a, b)),
        _ => None,
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    match (b.op, b.terms.as_slice()) {
        (Op::In, any) => any.iter().any(|w| against(w) == Some(Equal)),
        (op, [w]) => {
            let o = against(w);
            match op {
                Op::Eq => o == Some(Equal),
                Op::Ne => o != Some(Equal),
                Op::Lt => o == Some(Less),
                Op::Le => matches!(o, Some(Less | Equal)),
                Op::Gt => o == Some(Greater),
                Op::Ge => matches!(o, Some(Greater | Equal)),
                Op::In => false,
            }
        }
        _ => false,
    }
}

/// The `[applied]` answer: one row, or `[applied] = false` before each
/// row a failed transaction shows.
pub(crate) fn applied_rows(t: Target, judged: Judged) -> (Metadata, Vec<Vec<Cell>>) {
    let mut columns = vec![Column {
        name: "[applied]".into(),
        ty: CqlType::Boolean,
    }];
    let applied = cell::boolean(judged.applied);
    let rows = match judged.rows.is_empty() {
        true => vec![vec![applied]],
        false => {
            columns.extend(judged.columns);
            let with = |r: Vec<Cell>| std::iter::once(applied.clone()).chain(r).collect();
            judged.rows.into_iter().map(with).collect()
        }
    };
    let meta = Metadata {
        keyspace: t.keyspace.into(),
        table: t.table.name.clone(),
        columns,
    };
    (meta, rows)
}

pub(crate) mod plan;

pub(crate) use plan::{Bound, Check, Plan, plan};

#[cfg(test)]
mod tests;
