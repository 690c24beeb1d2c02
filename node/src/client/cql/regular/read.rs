//! A regular table's rows as a `SELECT` reads them: each partition's
//! cells (read whole) made into rows, deleted ranges applied, rows with
//! nothing live left out, in clustering order; then the columns the
//! `SELECT` asks for, `WRITETIME()` and `TTL()` among them.

use std::collections::BTreeMap;

use tally_engine::Cell as Stored;

use super::super::ast::{Select, Selection};
use super::super::body::Value;
use super::super::cells;
use super::super::lww::{self, Slot};
use super::super::response::CqlError;
use super::super::result::{Cell, Column, CqlType, Metadata, cell};
use super::super::rows::{self, Query, Target, clustering_types, descending, order};
use super::super::schema::{ColumnDef, Kind};
use super::super::select::evaluate;
use super::super::system::Table;
use super::STATIC;
use super::ranges::{self, DELETED};

/// One partition's rows and static columns, as read.
#[derive(Debug, Default)]
struct Partition<'c> {
    statics: BTreeMap<&'c str, Slot<'c>>,
    rows: BTreeMap<Vec<Vec<u8>>, Row<'c>>,
}

#[derive(Debug, Default)]
struct Row<'c> {
    /// Its marker lives (an INSERT made it).
    marker: bool,
    columns: BTreeMap<&'c str, Slot<'c>>,
}

impl Row<'_> {
    /// Whether it is returned: its marker or one of its columns lives.
    fn live(&self) -> bool {
        self.marker || self.columns.values().any(|s| s.value.is_some())
    }
}

/// The columns every row is read with: the partition key, the
/// clustering columns, the static then the regular ones (each by name),
/// as `SELECT *` answers them; then each non-key column's `writetime()`
/// and `ttl()`, which a SELECT may ask for by those names.
pub(crate) fn all_columns(t: Target) -> Metadata {
    let of = |kind: Kind| -> Vec<&ColumnDef> {
        let mut cols: Vec<&ColumnDef> = t.table.columns.iter().filter(|c| c.kind == kind).collect();
        if matches!(kind, Kind::Static | Kind::Regular) {
            cols.sort_by(|a, b| a.name.cmp(&b.name));
        }
        cols
    };
    let values: Vec<&ColumnDef> = [Kind::Static, Kind::Regular]
        .into_iter()
        .flat_map(of)
        .collect();
    let mut columns: Vec<Column> = of(Kind::PartitionKey)
        .into_iter()
        .chain(of(Kind::Clustering))
        .chain(values.iter().copied())
        .map(|c| Column {
            name: c.name.clone(),
            ty: c.ty.clone(),
        })
        .collect();
    for c in &values {
        columns.push(Column {
            name: format!("writetime({})", c.name),
            ty: CqlType::Bigint,
        });
        columns.push(Column {
            name: format!("ttl({})", c.name),
            ty: CqlType::Int,
        });
    }
    Metadata {
        keyspace: t.keyspace.into(),
        table: t.table.name.clone(),
        columns,
    }
}

/// The columns `SELECT *` answers: [`all_columns`] but the functions'.
fn star(t: Target) -> usize {
    t.table.columns.len()
}

/// The rows, with every column, that `read` (each partition's cells, in
/// the order of `q`'s partitions) holds of the rows `q` names, at
/// `now_ms`; in clustering order, reversed if `q` asks, and across
/// partitions when the SELECT orders them.
pub(crate) fn table_rows(
    t: Target,
    s: &Select,
    q: &Query,
    read: &[BTreeMap<Vec<u8>, Stored>],
    now_ms: u64,
) -> Vec<Vec<Cell>> {
    let types = clustering_types(t);
    let descending = descending(t);
    let meta = all_columns(t);
    let mut out: Vec<(Vec<Vec<u8>>, Vec<Cell>)> = Vec::new();
    for ((key, _), cells) in q.rows.partitions.iter().zip(read) {
        let p = partition(t, cells, now_ms);
        let mut rows: Vec<(&Vec<Vec<u8>>, &Row)> = p
            .rows
            .iter()
            .filter(|(c, r)| r.live() && q.rows.clustering.admits(c, &types))
            .collect();
        rows.sort_by(|(a, _), (b, _)| order(&types, &descending, a, b));
        if q.reversed {
            rows.reverse();
        }
        let statics_live = p.statics.values().any(|s| s.value.is_some());
        if rows.is_empty() && statics_live && q.rows.clustering == rows::Clustering::default() {
            // A partition of static columns only: one row, no clustering.
            let cells = row_cells(&meta, key, (None, types.len()), &p.statics, None, now_ms);
            out.push((Vec::new(), cells));
        }
        for (clustering, row) in rows {
            let at = (Some(clustering), types.len());
            let cells = row_cells(&meta, key, at, &p.statics, Some(row), now_ms);
            out.push((clustering.clone(), cells));
        }
    }
    if !s.order_by.is_empty() && q.rows.partitions.len() > 1 {
        out.sort_by(|(a, _), (b, _)| {
            let o = order(&types, &descending, a, b);
            if q.reversed { o.reverse() } else { o }
        });
    }
    out.into_iter().map(|(_, r)| r).collect()
}

/// A partition's cells as rows and static columns, deleted ranges applied.
fn partition<'c>(t: Target, cells: &'c BTreeMap<Vec<u8>, Stored>, now_ms: u64) -> Partition<'c> {
    let types = clustering_types(t);
    let deleted: Vec<ranges::Deleted> = cells
        .iter()
        .filter(|(c, _)| c.first() == Some(&DELETED))
        .filter_map(|(c, cell)| ranges::read(c, cell, now_ms))
        .collect();
    let shadow = |slot: &mut Slot, covered: &dyn Fn(&ranges::Deleted) -> bool| {
        if deleted.iter().any(|d| d.ts >= slot.ts && covered(d)) {
            slot.value = None;
        }
    };
    // A dropped column's cells are not read (`schema::alter`).
    let has = |name: &str, kind: Kind| {
        t.table
            .columns
            .iter()
            .any(|c| c.name == name && c.kind == kind)
    };
    let layout = cells::Layout::of(t.table);
    let mut p = Partition::default();
    for (column, cell) in cells {
        let Some(mut slot) = lww::read(cell, now_ms) else {
            continue;
        };
        match column.first() {
            Some(&DELETED) => {}
            Some(&STATIC) => {
                let Ok(name) = std::str::from_utf8(&column[1..]) else {
                    continue;
                };
                if !has(name, Kind::Static) {
                    continue;
                }
                if t.table.dropped_until(name).is_some_and(|at| slot.ts <= at) {
                    continue; // written before the column was dropped
                }
                shadow(&mut slot, &|d| d.whole_partition());
                p.statics.insert(name, slot);
            }
            _ => {
                let Some((clustering, name)) = layout.split(column) else {
                    continue;
                };
                if !name.is_empty() && !has(name, Kind::Regular) {
                    continue;
                }
                if t.table.dropped_until(name).is_some_and(|at| slot.ts <= at) {
                    continue; // written before the column was dropped
                }
                shadow(&mut slot, &|d| d.covers(&clustering, &types));
                let row = p.rows.entry(clustering).or_default();
                match name {
                    "" => row.marker = slot.value.is_some(),
                    name => {
                        row.columns.insert(name, slot);
                    }
                }
            }
        }
    }
    p
}

/// A row's cells in the order of `meta` ([`all_columns`]): its key,
/// its clustering values (`count` of them; none for a partition of
/// static columns only), then its columns and functions.
fn row_cells(
    meta: &Metadata,
    key: &[Vec<u8>],
    (clustering, count): (Option<&Vec<Vec<u8>>>, usize),
    statics: &BTreeMap<&str, Slot>,
    row: Option<&Row>,
    now_ms: u64,
) -> Vec<Cell> {
    let mut out: Vec<Cell> = key.iter().map(|v| Some(v.clone())).collect();
    out.extend((0..count).map(|i| clustering.and_then(|c| c.get(i)).cloned()));
    let slot = |name: &str| {
        statics
            .get(name)
            .or_else(|| row.and_then(|r| r.columns.get(name)))
            .filter(|s| s.value.is_some())
    };
    for c in &meta.columns[out.len()..] {
        out.push(match function_of(&c.name) {
            Some(("writetime", column)) => slot(column).and_then(|s| cell::bigint(s.ts)),
            Some((_, column)) => slot(column)
                .filter(|s| s.expires_ms > 0)
                .and_then(|s| cell::int(ttl_s(s.expires_ms, now_ms))),
            None => slot(&c.name).and_then(|s| s.value.map(<[u8]>::to_vec)),
        });
    }
    out
}

/// `writetime(c)` or `ttl(c)` as the function and its column.
fn function_of(name: &str) -> Option<(&str, &str)> {
    let (f, rest) = name.split_once('(')?;
    let column = rest.strip_suffix(')')?;
    matches!(f, "writetime" | "ttl").then_some((f, column))
}

/// Seconds left to a deadline, rounded up, as Cassandra's `ttl()`.
fn ttl_s(expires_ms: u64, now_ms: u64) -> i32 {
    let ms = expires_ms.saturating_sub(now_ms);
    i32::try_from(ms.div_ceil(1000)).unwrap_or(i32::MAX)
}

/// The columns and rows a SELECT answers of `rows` (with every column,
/// [`all_columns`]).
pub(crate) fn project(
    t: Target,
    s: &Select,
    rows: Vec<Vec<Cell>>,
    values: &[Value],
) -> Result<(Metadata, Vec<Vec<Cell>>), CqlError> {
    let meta = all_columns(t);
    let selection = match &s.selection {
        Selection::All => Selection::Columns(
            meta.columns[..star(t)]
                .iter()
                .map(|c| (c.name.clone(), None))
                .collect(),
        ),
        Selection::Columns(picked) => {
            for (name, _) in picked {
                check_function(t, name)?;
            }
            s.selection.clone()
        }
        other => other.clone(),
    };
    let table = rows::with_token(t.table, s, Table { meta, rows })?;
    let projected = Select {
        relations: Vec::new(),
        order_by: Vec::new(),
        selection,
        ..s.clone()
    };
    evaluate(&table, &projected, values)
}

/// `writetime()` and `ttl()` are of non-key columns, as Cassandra says.
fn check_function(t: Target, name: &str) -> Result<(), CqlError> {
    if let Some((f, column)) = function_of(name) {
        let key =
            t.table.columns.iter().any(|c| {
                c.name == column && matches!(c.kind, Kind::PartitionKey | Kind::Clustering)
            });
        if key {
            return Err(CqlError::Invalid(format!(
                "Cannot use selection function {f} on PRIMARY KEY part {column}"
            )));
        }
    }
    Ok(())
}
