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

use super::ast::{Condition, Op, Relation};
use super::body::Value;
use super::cells::compare;
use super::lww;
use super::response::CqlError;
use super::result::{Cell, Column, CqlType, Metadata, cell};
use super::rows::Target;
use super::schema::Kind;
use super::select::bound;

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
        (&TOMBSTONE, _) => Some(lww::tombstone(ts)),
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

/// Whether `condition` holds of the row (`row`: its cells by column of
/// `meta`, `None` if it does not exist), and the columns and values the
/// `[applied] = false` answer carries.
pub(crate) fn judge(
    t: Target,
    condition: &Condition,
    (meta, row): (&Metadata, Option<&Vec<Cell>>),
    values: &[Value],
) -> Result<(bool, Vec<Column>, Vec<Cell>), CqlError> {
    let star = t.table.columns.len();
    match (condition, row) {
        (Condition::NotExists, None) | (Condition::Exists, Some(_)) => {
            Ok((true, Vec::new(), Vec::new()))
        }
        (Condition::NotExists, Some(r)) => {
            Ok((false, meta.columns[..star].to_vec(), r[..star].to_vec()))
        }
        (Condition::Exists | Condition::Columns(_), None) => Ok((false, Vec::new(), Vec::new())),
        (Condition::Columns(relations), Some(r)) => {
            let (mut columns, mut cells, mut holds) = (Vec::new(), Vec::new(), true);
            for rel in relations {
                let i = position(t, meta, rel)?;
                holds &= satisfied(rel, &meta.columns[i].ty, &r[i], values)?;
                if !columns.iter().any(|c: &Column| c.name == rel.column) {
                    columns.push(meta.columns[i].clone());
                    cells.push(r[i].clone());
                }
            }
            Ok((holds, columns, cells))
        }
    }
}

/// Where the column a condition names is in `meta`: a non-key column.
fn position(t: Target, meta: &Metadata, rel: &Relation) -> Result<usize, CqlError> {
    let key =
        t.table.columns.iter().any(|c| {
            c.name == rel.column && matches!(c.kind, Kind::PartitionKey | Kind::Clustering)
        });
    if key {
        return Err(CqlError::Invalid(format!(
            "PRIMARY KEY column '{}' cannot have IF conditions",
            rel.column
        )));
    }
    meta.columns
        .iter()
        .position(|c| c.name == rel.column)
        .ok_or_else(|| CqlError::Invalid(format!("Undefined column name {}", rel.column)))
}

/// Whether `current` (of type `ty`) satisfies `rel`; a null equals only
/// null, and orders against nothing.
fn satisfied(
    rel: &Relation,
    ty: &CqlType,
    current: &Cell,
    values: &[Value],
) -> Result<bool, CqlError> {
    let wanted: Vec<Cell> = rel
        .terms
        .iter()
        .map(|t| bound(t, ty, values))
        .collect::<Result<_, _>>()?;
    let against = |w: &Cell| match (current, w) {
        (None, None) => Some(std::cmp::Ordering::Equal),
        (Some(a), Some(b)) => Some(compare(ty, a, b)),
        _ => None,
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    Ok(match (rel.op, wanted.as_slice()) {
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
        _ => {
            return Err(CqlError::Invalid(format!(
                "a malformed condition on {}",
                rel.column
            )));
        }
    })
}

/// The `[applied]` answer's columns and row.
pub(crate) fn applied_row(
    t: Target,
    applied: bool,
    (columns, cells): (Vec<Column>, Vec<Cell>),
) -> (Metadata, Vec<Cell>) {
    let mut meta = vec![Column {
        name: "[applied]".into(),
        ty: CqlType::Boolean,
    }];
    meta.extend(columns);
    let mut row = vec![cell::boolean(applied)];
    row.extend(cells);
    (
        Metadata {
            keyspace: t.keyspace.into(),
            table: t.table.name.clone(),
            columns: meta,
        },
        row,
    )
}

#[cfg(test)]
mod tests;
