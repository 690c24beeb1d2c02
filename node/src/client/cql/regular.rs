//! Statements on a regular table's rows, without I/O: the cells an
//! `INSERT`, `UPDATE` or `DELETE` writes, and the rows a `SELECT`
//! answers from a partition's cells. Each column of a row is a
//! last-write-wins cell (`lww`) stamped with the write's timestamp.
//!
//! ```text
//! a row's column   := its clustering values (as `cells::column`), its name
//! a row's marker   := its clustering values, no name: written by INSERT,
//!                     the row exists while it lives, its columns null or not
//! a static column  := 0xFD, its name
//! a deleted range  := 0xFE, then the rows it names (`ranges`): every cell
//!                     of them written at or before its timestamp is deleted
//! ```
//!
//! A row is returned while its marker or one of its columns lives, as in
//! Cassandra: an `UPDATE` makes no marker, so a row only updated goes
//! once its columns are deleted; an inserted one stays, with nulls. A
//! deleted range without clustering values is the partition's deletion,
//! which deletes its static columns too.

use tally_engine::Cell as Stored;

use super::ast::{Assignment, Delete, Insert, Op, Relation, Statement, Term, Update};
use super::body::Value;
use super::cells;
use super::lww;
use super::response::CqlError;
use super::result::CqlType;
use super::rows::{self, Target};
use super::schema::{ColumnDef, Kind};
use super::select::bound;

mod ranges;
mod read;

pub(crate) use read::{all_columns, project, table_rows};

/// The first byte of a static column's cell.
const STATIC: u8 = 0xFD;

/// When a write is made: its timestamp (µs) and its cells' deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) ts: i64,
    /// The deadline of its values (ms since the epoch; 0: none).
    pub(crate) expires_ms: u64,
    /// The coordinator's clock (ms): when its deletes died.
    pub(crate) now_ms: u64,
}

/// One row: its partition key's values, its stored partition, and its
/// clustering values.
pub(crate) type OneRow = (Vec<Vec<u8>>, Vec<u8>, Vec<Vec<u8>>);

/// The cells a statement writes, partition by partition.
pub(crate) type Writes = Vec<(Vec<u8>, Vec<(Vec<u8>, Stored)>)>;

/// A write's stamp: `USING TIMESTAMP` (else `default_ts`, the client's or
/// the coordinator's) and `USING TTL` (else the table's default).
pub(crate) fn stamp(
    t: Target,
    (ttl, timestamp): (Option<&Term>, Option<&Term>),
    values: &[Value],
    (default_ts, now_ms): (i64, u64),
) -> Result<Stamp, CqlError> {
    let ts = match timestamp {
        None => default_ts,
        Some(term) => match bound(term, &CqlType::Bigint, values)? {
            Some(b) if b.len() == 8 => i64::from_be_bytes(b.try_into().unwrap_or([0; 8])),
            Some(_) => return Err(CqlError::Invalid("Expected 8 bytes for a timestamp".into())),
            None => return Err(CqlError::Invalid("Invalid null value of timestamp".into())),
        },
    };
    if ts > lww::TIMESTAMP_MAX {
        return Err(CqlError::Invalid(format!(
            "a timestamp is at most {}",
            lww::TIMESTAMP_MAX
        )));
    }
    let ttl_s = match ttl {
        Some(term) => rows::ttl(term, values)?,
        None => u32::try_from(t.table.default_ttl_s).unwrap_or(0),
    };
    let expires_ms = match ttl_s {
        0 => 0,
        s => now_ms + u64::from(s) * 1000,
    };
    Ok(Stamp {
        ts,
        expires_ms,
        now_ms,
    })
}

/// The cells `statement` (an INSERT, UPDATE or DELETE) writes, stamped
/// at `clock` (the default timestamp, and now in ms).
pub(crate) fn write_at(
    t: Target,
    statement: &Statement,
    values: &[Value],
    clock: (i64, u64),
) -> Result<Writes, CqlError> {
    match statement {
        Statement::Insert(i) => {
            let at = stamp(t, (i.ttl.as_ref(), i.timestamp.as_ref()), values, clock)?;
            insert(t, i, values, at)
        }
        Statement::Update(u) => {
            let at = stamp(t, (u.ttl.as_ref(), u.timestamp.as_ref()), values, clock)?;
            update(t, u, values, at)
        }
        Statement::Delete(d) => {
            let at = stamp(t, (None, d.timestamp.as_ref()), values, clock)?;
            delete(t, d, values, at)
        }
        other => Err(CqlError::Server(format!("not a write of rows: {other:?}"))),
    }
}

/// The one row a conditional write names: its partition key's values,
/// its stored partition and its clustering values; refused as Cassandra
/// refuses what a transaction cannot take.
pub(crate) fn named_row(
    t: Target,
    statement: &Statement,
    values: &[Value],
) -> Result<OneRow, CqlError> {
    let (relations, timestamp, what) = match statement {
        Statement::Insert(i) => {
            let keys = i.columns.iter().zip(&i.values).filter(|(c, _)| {
                t.table.columns.iter().any(|d| {
                    d.name == **c && matches!(d.kind, Kind::PartitionKey | Kind::Clustering)
                })
            });
            let relations = keys
                .map(|(c, v)| Relation {
                    column: c.clone(),
                    op: Op::Eq,
                    terms: vec![v.clone()],
                })
                .collect();
            (relations, i.timestamp.is_some(), "updates")
        }
        Statement::Update(u) => (u.relations.clone(), u.timestamp.is_some(), "updates"),
        Statement::Delete(d) => (d.relations.clone(), d.timestamp.is_some(), "deletions"),
        _ => return Err(CqlError::Server("not a conditional write".into())),
    };
    if timestamp {
        return Err(CqlError::Invalid(
            "Cannot provide custom timestamp for conditional updates".into(),
        ));
    }
    let named = rows::restrict(t, &relations, values, true)?;
    let [(key, partition)] = named.partitions.as_slice() else {
        return Err(CqlError::Invalid(format!(
            "IN on the partition key is not supported with conditional {what}"
        )));
    };
    let mut clustering = Vec::new();
    for fixed in &named.clustering.fixed {
        let [one] = fixed.as_slice() else {
            return Err(CqlError::Invalid(format!(
                "IN on the clustering key columns is not supported with conditional {what}"
            )));
        };
        clustering.push(one.clone());
    }
    Ok((key.clone(), partition.clone(), clustering))
}

/// The cells an `INSERT` writes: its row's marker and each column named.
pub(crate) fn insert(
    t: Target,
    i: &Insert,
    values: &[Value],
    at: Stamp,
) -> Result<Writes, CqlError> {
    let mut relations = Vec::new();
    let mut assignments = Vec::new();
    for (name, term) in i.columns.iter().zip(&i.values) {
        let c = column_def(t, name)?;
        if i.columns.iter().filter(|n| *n == name).count() > 1 {
            return Err(CqlError::Invalid(format!(
                "Multiple definitions found for column {name}"
            )));
        }
        match c.kind {
            Kind::PartitionKey | Kind::Clustering => relations.push(Relation {
                column: name.clone(),
                op: Op::Eq,
                terms: vec![term.clone()],
            }),
            Kind::Regular | Kind::Static => {
                assignments.push(Assignment::Set(name.clone(), term.clone()));
            }
        }
    }
    let named = rows::restrict(t, &relations, values, true)?;
    let marker = lww::value(at.ts, &[], at.expires_ms)
        .ok_or_else(|| CqlError::Server("an empty marker over the limit".into()))?;
    let marker_column = cells::Layout::of(t.table).column(&first_row(&named)?, "")?;
    let mut out = assign(t, &named, &assignments, values, at)?;
    for (_, cells) in &mut out {
        cells.push((marker_column.clone(), marker.clone()));
    }
    Ok(out)
}

/// The cells an `UPDATE` writes (no marker: see the module docs).
pub(crate) fn update(
    t: Target,
    u: &Update,
    values: &[Value],
    at: Stamp,
) -> Result<Writes, CqlError> {
    let named = rows::restrict(t, &u.relations, values, !statics_only(t, &u.assignments))?;
    assign(t, &named, &u.assignments, values, at)
}

/// The cells a `DELETE` writes: a tombstone of each column it names, or
/// a deleted range of the rows it names.
pub(crate) fn delete(
    t: Target,
    d: &Delete,
    values: &[Value],
    at: Stamp,
) -> Result<Writes, CqlError> {
    let named = rows::restrict(t, &d.relations, values, false)?;
    let whole = named.clustering.fixed.len() == clustering_count(t);
    if d.columns.is_empty() {
        let deleted = ranges::deleted(&named.clustering, at.ts)?;
        return Ok(named
            .partitions
            .iter()
            .map(|(_, p)| (p.clone(), deleted.clone()))
            .collect());
    }
    let tombstones: Vec<Assignment> = d
        .columns
        .iter()
        .map(|c| Assignment::Set(c.clone(), Term::Literal(super::ast::Literal::Null)))
        .collect();
    if !whole && !statics_only(t, &tombstones) {
        return Err(CqlError::Invalid(
            "Range deletions are not supported for specific columns".into(),
        ));
    }
    assign(t, &named, &tombstones, values, at)
}

/// The cells of `assignments` (`c = v`) to every row `named` names (its
/// static columns to each partition).
fn assign(
    t: Target,
    named: &rows::Rows,
    assignments: &[Assignment],
    values: &[Value],
    at: Stamp,
) -> Result<Writes, CqlError> {
    let rows = rows_of(named)?;
    let layout = cells::Layout::of(t.table);
    let mut cells = Vec::new();
    for a in assignments {
        let Assignment::Set(name, term) = a else {
            return Err(CqlError::Invalid(format!(
                "Invalid operation ({name} = {name} + ?) for non counter column {name}",
                name = assigned_name(a)
            )));
        };
        let c = column_def(t, name)?;
        if matches!(c.kind, Kind::PartitionKey | Kind::Clustering) {
            return Err(CqlError::Invalid(format!(
                "PRIMARY KEY part {name} found in SET part"
            )));
        }
        if is_unset(term, values) {
            continue;
        }
        let stored = match bound(term, &c.ty, values)? {
            Some(v) => {
                cells::check(&c.ty, &v, name)?;
                lww::value(at.ts, &v, at.expires_ms).ok_or_else(|| {
                    CqlError::Invalid(format!("the value of {name} is over the limit of a cell"))
                })?
            }
            None => lww::tombstone(at.ts, at.now_ms),
        };
        match c.kind {
            Kind::Static => cells.push((static_column(name), stored)),
            _ => {
                for row in &rows {
                    cells.push((layout.column(row, name)?, stored.clone()));
                }
            }
        }
    }
    Ok(named
        .partitions
        .iter()
        .map(|(_, p)| (p.clone(), cells.clone()))
        .collect())
}

fn assigned_name(a: &Assignment) -> &str {
    match a {
        Assignment::Add(n, _) | Assignment::Sub(n, _) | Assignment::Set(n, _) => n,
    }
}

/// Whether every assignment is of a static column (which names no row).
fn statics_only(t: Target, assignments: &[Assignment]) -> bool {
    !assignments.is_empty()
        && assignments.iter().all(|a| {
            let name = assigned_name(a);
            t.table
                .columns
                .iter()
                .any(|c| c.name == name && c.kind == Kind::Static)
        })
}

/// Whether `term` is bound to the protocol's "unset" (leave it as it is).
fn is_unset(term: &Term, values: &[Value]) -> bool {
    match term {
        Term::Marker(i) | Term::Named(i, _) => matches!(values.get(*i), Some(Value::NotSet)),
        Term::Literal(_) => false,
    }
}

/// Every row `named` names whole: each combination of its clustering
/// columns' values (none for a table without them).
fn rows_of(named: &rows::Rows) -> Result<Vec<Vec<Vec<u8>>>, CqlError> {
    rows::product(&named.clustering.fixed)
}

fn first_row(named: &rows::Rows) -> Result<Vec<Vec<u8>>, CqlError> {
    rows_of(named)?
        .into_iter()
        .next()
        .ok_or_else(|| CqlError::Invalid("no row named".into()))
}

fn column_def<'t>(t: Target<'t>, name: &str) -> Result<&'t ColumnDef, CqlError> {
    t.table
        .columns
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| CqlError::Invalid(format!("Undefined column name {name}")))
}

fn clustering_count(t: Target) -> usize {
    t.table
        .columns
        .iter()
        .filter(|c| c.kind == Kind::Clustering)
        .count()
}

/// The cell of static column `name`.
fn static_column(name: &str) -> Vec<u8> {
    let mut c = vec![STATIC];
    c.extend_from_slice(name.as_bytes());
    c
}

#[cfg(test)]
mod tests;
