//! Statements on a counter table's rows, without I/O: what an `UPDATE`
//! writes, what a `DELETE` resets, what a `SELECT` reads, each worked out
//! from the table's definition and the statement's WHERE clause, and the
//! rows a SELECT answers from the cells it read.
//!
//! The WHERE clause follows Cassandra's rules for a table without
//! indexes: every partition key column by `=` or `IN`; the clustering
//! columns in order, each by `=` or `IN`, then at most one range on the
//! next; an UPDATE names whole rows. A statement may name at most
//! [`COMBINATIONS_MAX`] partitions or rows (the product of its `IN`s).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::ast::{
    Assignment, Delete, Op, Relation, Select, Selection, Term, Update, token_selector,
};
use super::body::Value;
use super::cells::{self, check, compare};
use super::response::CqlError;
use super::result::{Cell, Column, CqlType, Metadata, cell};
use super::schema::{ColumnDef, Kind, TableDef};
use super::select::{bound, evaluate};
use super::system::Table;

/// Most partitions, or rows, one statement may name.
pub(crate) const COMBINATIONS_MAX: usize = 100;
/// The longest TTL Cassandra takes: 20 years, in seconds.
const TTL_MAX_S: i64 = 20 * 365 * 86_400;

/// A counter table, with its keyspace's name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    pub(crate) keyspace: &'a str,
    pub(crate) table: &'a TableDef,
}

/// What a statement names: its partitions (each with its key's values)
/// and which of their rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Rows {
    pub(crate) partitions: Vec<(Vec<Vec<u8>>, Vec<u8>)>,
    pub(crate) clustering: Clustering,
}

/// The clustering columns a statement restricts.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Clustering {
    /// The leading columns' allowed values (one for `=`, more for `IN`).
    pub(crate) fixed: Vec<Vec<Vec<u8>>>,
    /// A range of the column after them: its lower and upper bounds.
    pub(crate) range: Option<(Bound, Bound)>,
}

/// What an `UPDATE` does to one counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CellOp {
    Add(i64),
    Set(i64),
}

/// One counter an `UPDATE` changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CellWrite {
    pub(crate) partition: Vec<u8>,
    pub(crate) column: Vec<u8>,
    pub(crate) op: CellOp,
}

/// An `UPDATE`'s changes, and the TTL they get (seconds; 0: none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Writes {
    pub(crate) cells: Vec<CellWrite>,
    pub(crate) ttl_s: u32,
}

/// The counters a `DELETE` resets: these cells, or those the rows it
/// names hold once read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Resets {
    Cells(Vec<(Vec<u8>, Vec<u8>)>),
    Read { rows: Rows, counters: Vec<String> },
}

impl Target<'_> {
    fn key_columns(&self, kind: Kind) -> impl Iterator<Item = &ColumnDef> {
        self.table.columns.iter().filter(move |c| c.kind == kind)
    }

    fn counters(&self) -> impl Iterator<Item = &ColumnDef> {
        self.key_columns(Kind::Regular)
    }

    fn clustering_count(&self) -> usize {
        self.key_columns(Kind::Clustering).count()
    }

    fn counter(&self, name: &str) -> Result<&ColumnDef, CqlError> {
        match self.table.columns.iter().find(|c| c.name == name) {
            Some(c) if c.kind == Kind::Regular => Ok(c),
            Some(c) => Err(CqlError::Invalid(format!(
                "PRIMARY KEY part {} found in SET part",
                c.name
            ))),
            None => Err(CqlError::Invalid(format!("Undefined column name {name}"))),
        }
    }
}

/// The rows `relations` name, `values` bound to its markers; `whole`:
/// every clustering column must be named by `=` or `IN` (an UPDATE).
pub(crate) fn restrict(
    t: Target,
    relations: &[Relation],
    values: &[Value],
    whole: bool,
) -> Result<Rows, CqlError> {
    check_columns(t, relations)?;
    let mut keys = Vec::new();
    let mut missing = Vec::new();
    for c in t.key_columns(Kind::PartitionKey) {
        match relation(relations, &c.name)? {
            Some(r) if matches!(r.op, Op::Eq | Op::In) => keys.push(allowed(r, c, values)?),
            Some(_) => {
                return Err(CqlError::Invalid(
                    "Only EQ and IN relation are supported on the partition key (unless you use \
                     the token() function)"
                        .into(),
                ));
            }
            None => missing.push(c.name.as_str()),
        }
    }
    if !missing.is_empty() {
        return Err(CqlError::Invalid(format!(
            "Some partition key parts are missing: {}",
            missing.join(", ")
        )));
    }
    let partitions = product(&keys)?
        .into_iter()
        .map(|key| cells::partition(t.table, &key).map(|p| (key, p)))
        .collect::<Result<_, _>>()?;
    let clustering = clustering(t, relations, values, whole)?;
    Ok(Rows {
        partitions,
        clustering,
    })
}

/// Checks that `relations` restrict the table's key columns only.
fn check_columns(t: Target, relations: &[Relation]) -> Result<(), CqlError> {
    for r in relations {
        if !t.table.columns.iter().any(|c| c.name == r.column) {
            return Err(CqlError::Invalid(format!(
                "Undefined column name {}",
                r.column
            )));
        }
        if t.counter(&r.column).is_ok() {
            return Err(CqlError::Invalid(format!(
                "Cannot restrict column {}: counters are read, not filtered; restrict the \
                 primary key",
                r.column
            )));
        }
    }
    Ok(())
}

/// The relation on `column`, the first of a range's; more than one is
/// refused unless they are a range's.
fn relation<'r>(relations: &'r [Relation], column: &str) -> Result<Option<&'r Relation>, CqlError> {
    let of: Vec<&Relation> = relations.iter().filter(|r| r.column == column).collect();
    match of.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many if many.iter().all(|r| is_bound(r.op)) => Ok(Some(many[0])),
        _ => Err(CqlError::Invalid(format!(
            "{column} cannot be restricted by more than one relation if it includes an Equal"
        ))),
    }
}

/// A range's relations, one of each side allowed on a column.
fn is_bound(op: Op) -> bool {
    matches!(op, Op::Lt | Op::Le | Op::Gt | Op::Ge)
}

/// The values `r` (an `=` or `IN`) allows for column `c`.
fn allowed(r: &Relation, c: &ColumnDef, values: &[Value]) -> Result<Vec<Vec<u8>>, CqlError> {
    let items = match (r.op, r.terms.as_slice()) {
        (Op::In, [t @ (Term::Marker(_) | Term::Named(..))]) => {
            super::select::list(&bound(t, &CqlType::Blob, values)?)?
        }
        _ => r
            .terms
            .iter()
            .map(|t| bound(t, &c.ty, values))
            .collect::<Result<_, _>>()?,
    };
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(items.len());
    for item in items {
        let Some(v) = item else {
            return Err(CqlError::Invalid(format!(
                "Invalid null value in condition for column {}",
                c.name
            )));
        };
        check(&c.ty, &v, &c.name)?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// Every combination of one value per column, in order.
pub(crate) fn product(columns: &[Vec<Vec<u8>>]) -> Result<Vec<Vec<Vec<u8>>>, CqlError> {
    let mut all: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
    for values in columns {
        if all.len() * values.len() > COMBINATIONS_MAX {
            return Err(CqlError::Invalid(format!(
                "the IN restrictions name more than {COMBINATIONS_MAX} partitions or rows"
            )));
        }
        all = all
            .iter()
            .flat_map(|head| {
                values.iter().map(move |v| {
                    let mut next = head.clone();
                    next.push(v.clone());
                    next
                })
            })
            .collect();
    }
    Ok(all)
}

fn clustering(
    t: Target,
    relations: &[Relation],
    values: &[Value],
    whole: bool,
) -> Result<Clustering, CqlError> {
    let mut out = Clustering::default();
    let mut unrestricted: Option<&str> = None;
    for c in t.key_columns(Kind::Clustering) {
        let of: Vec<&Relation> = relations.iter().filter(|r| r.column == c.name).collect();
        match (unrestricted, relation(relations, &c.name)?) {
            (_, None) => {
                unrestricted.get_or_insert(&c.name);
            }
            (Some(before), Some(_)) => {
                return Err(CqlError::Invalid(format!(
                    "PRIMARY KEY column \"{}\" cannot be restricted as preceding column \
                     \"{before}\" is not restricted",
                    c.name
                )));
            }
            (None, Some(r)) if matches!(r.op, Op::Eq | Op::In) => {
                out.fixed.push(allowed(r, c, values)?);
            }
            (None, Some(_)) => {
                out.range = Some(range(&of, c, values)?);
                unrestricted = Some(&c.name);
            }
        }
    }
    if whole && out.fixed.len() < t.clustering_count() {
        let missing: Vec<&str> = t
            .key_columns(Kind::Clustering)
            .skip(out.fixed.len())
            .map(|c| c.name.as_str())
            .collect();
        return Err(CqlError::Invalid(format!(
            "Some clustering keys are missing: {}",
            missing.join(", ")
        )));
    }
    Ok(out)
}

/// A range's bound, if it has one: a value, and whether it is inclusive.
pub(crate) type Bound = Option<(Vec<u8>, bool)>;

/// A clustering column's range from its `<`, `<=`, `>`, `>=` relations.
fn range(of: &[&Relation], c: &ColumnDef, values: &[Value]) -> Result<(Bound, Bound), CqlError> {
    let (mut lower, mut upper) = (None, None);
    for r in of {
        let side = match r.op {
            Op::Gt | Op::Ge => &mut lower,
            Op::Lt | Op::Le => &mut upper,
            _ => {
                return Err(CqlError::Invalid(format!(
                    "{} cannot be restricted by both a range and an equality",
                    c.name
                )));
            }
        };
        if side.is_some() {
            return Err(CqlError::Invalid(format!(
                "More than one restriction was found for the bound on {}",
                c.name
            )));
        }
        let [term] = r.terms.as_slice() else {
            return Err(CqlError::Invalid(format!(
                "a malformed range on {}",
                c.name
            )));
        };
        let v = bound(term, &c.ty, values)?.ok_or_else(|| {
            CqlError::Invalid(format!("Invalid null bound for column {}", c.name))
        })?;
        check(&c.ty, &v, &c.name)?;
        *side = Some((v, matches!(r.op, Op::Ge | Op::Le)));
    }
    Ok((lower, upper))
}

impl Clustering {
    /// Whether a row's clustering values (`types` theirs) are named.
    pub(crate) fn admits(&self, row: &[Vec<u8>], types: &[&CqlType]) -> bool {
        // Equal by the type's order: a varint in any of its forms.
        let fixed = (self.fixed.iter().zip(row).zip(types))
            .all(|((ok, v), ty)| ok.iter().any(|o| compare(ty, o, v) == Ordering::Equal));
        let i = self.fixed.len();
        let ranged = match (&self.range, row.get(i), types.get(i)) {
            (Some((lower, upper)), Some(v), Some(ty)) => {
                let above = lower.as_ref().is_none_or(|(b, incl)| {
                    let o = compare(ty, v, b);
                    o == Ordering::Greater || (*incl && o == Ordering::Equal)
                });
                let below = upper.as_ref().is_none_or(|(b, incl)| {
                    let o = compare(ty, v, b);
                    o == Ordering::Less || (*incl && o == Ordering::Equal)
                });
                above && below
            }
            _ => true,
        };
        fixed && ranged
    }
}

/// The counters an `UPDATE` changes, `values` bound to its markers.
pub(crate) fn update(t: Target, u: &Update, values: &[Value]) -> Result<Writes, CqlError> {
    if u.timestamp.is_some() {
        return Err(CqlError::Invalid(
            "Cannot provide custom timestamp for counter updates".into(),
        ));
    }
    let ttl_s = match &u.ttl {
        Some(term) => ttl(term, values)?,
        None => u32::try_from(t.table.default_ttl_s).unwrap_or(0),
    };
    let rows = restrict(t, &u.relations, values, true)?;
    let mut changes: Vec<(&str, CellOp)> = Vec::new();
    for a in &u.assignments {
        let (name, op) = match a {
            Assignment::Add(n, term) => (n, CellOp::Add(delta(term, values, n)?)),
            Assignment::Sub(n, term) => {
                let d = delta(term, values, n)?;
                let neg = d.checked_neg().ok_or_else(|| overflow(n))?;
                (n, CellOp::Add(neg))
            }
            Assignment::Set(n, term) => (n, CellOp::Set(delta(term, values, n)?)),
        };
        t.counter(name)?;
        if changes.iter().any(|(c, _)| c == name) {
            return Err(CqlError::Invalid(format!(
                "Multiple incompatible setting of column {name}"
            )));
        }
        changes.push((name, op));
    }
    let layout = cells::Layout::of(t.table);
    let mut cells = Vec::new();
    for row in product(&rows.clustering.fixed)? {
        for (name, op) in &changes {
            let column = layout.column(&row, name)?;
            for (_, partition) in &rows.partitions {
                cells.push(CellWrite {
                    partition: partition.clone(),
                    column: column.clone(),
                    op: *op,
                });
            }
        }
    }
    Ok(Writes { cells, ttl_s })
}

fn overflow(name: &str) -> CqlError {
    CqlError::Invalid(format!("the change of counter {name} overflows a bigint"))
}

/// A counter's delta or value: a `bigint`.
fn delta(term: &Term, values: &[Value], name: &str) -> Result<i64, CqlError> {
    match bound(term, &CqlType::Counter, values)? {
        Some(b) => <[u8; 8]>::try_from(b.as_slice())
            .map(i64::from_be_bytes)
            .map_err(|_| CqlError::Invalid(format!("Expected 8 bytes for counter {name}"))),
        None => Err(CqlError::Invalid(format!(
            "Invalid null value for counter increment on {name}"
        ))),
    }
}

/// `USING TTL`'s seconds.
pub(crate) fn ttl(term: &Term, values: &[Value]) -> Result<u32, CqlError> {
    let s = match bound(term, &CqlType::Int, values)? {
        Some(b) if b.len() == 4 => i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        None => 0,
        Some(_) => return Err(CqlError::Invalid("Expected 4 bytes for a TTL".into())),
    };
    if s < 0 {
        return Err(CqlError::Invalid(format!(
            "A TTL must be greater or equal to 0, but was {s}"
        )));
    }
    if s > TTL_MAX_S {
        return Err(CqlError::Invalid(format!(
            "ttl is too large. requested ({s}) maximum ({TTL_MAX_S})"
        )));
    }
    Ok(u32::try_from(s).unwrap_or(u32::MAX))
}

/// The counters a `DELETE` resets.
pub(crate) fn delete(t: Target, d: &Delete, values: &[Value]) -> Result<Resets, CqlError> {
    if d.timestamp.is_some() {
        return Err(CqlError::Invalid(
            "Cannot provide custom timestamp for counter deletes".into(),
        ));
    }
    for name in &d.columns {
        t.counter(name).map_err(|_| {
            CqlError::Invalid(format!(
                "Invalid identifier {name} for deletion (should not be a PRIMARY KEY part)"
            ))
        })?;
    }
    let counters: Vec<String> = match d.columns.is_empty() {
        true => t.counters().map(|c| c.name.clone()).collect(),
        false => d.columns.clone(),
    };
    let rows = restrict(t, &d.relations, values, false)?;
    let whole = rows.clustering.fixed.len() == t.clustering_count();
    if !whole {
        return Ok(Resets::Read { rows, counters });
    }
    let layout = cells::Layout::of(t.table);
    let mut cells = Vec::new();
    for row in product(&rows.clustering.fixed)? {
        for name in &counters {
            let column = layout.column(&row, name)?;
            for (_, partition) in &rows.partitions {
                cells.push((partition.clone(), column.clone()));
            }
        }
    }
    Ok(Resets::Cells(cells))
}

/// The live counters of `row_cells` (a partition's, read) in the rows
/// `clustering` names, among `counters`: what a partition's `DELETE`
/// resets.
pub(crate) fn live_in(
    t: Target,
    clustering: &Clustering,
    counters: &[String],
    row_cells: &BTreeMap<Vec<u8>, Option<i64>>,
) -> Vec<Vec<u8>> {
    let types = clustering_types(t);
    let layout = cells::Layout::of(t.table);
    row_cells
        .iter()
        .filter(|(_, v)| v.is_some())
        .filter(|(column, _)| {
            layout.split(column).is_some_and(|(row, name)| {
                counters.iter().any(|c| c == name) && clustering.admits(&row, &types)
            })
        })
        .map(|(column, _)| column.clone())
        .collect()
}

pub(crate) fn clustering_types<'a>(t: Target<'a>) -> Vec<&'a CqlType> {
    t.table
        .columns
        .iter()
        .filter(|c| c.kind == Kind::Clustering)
        .map(|c| &c.ty)
        .collect()
}

/// Whether each clustering column, in order, is ordered descending.
pub(crate) fn descending(t: Target) -> Vec<bool> {
    t.key_columns(Kind::Clustering)
        .map(|c| c.descending)
        .collect()
}

/// The columns `SELECT *` answers: the partition key, the clustering
/// columns, then the counters by name, as Cassandra orders them.
pub(crate) fn all_columns(t: Target) -> Metadata {
    let mut counters: Vec<&ColumnDef> = t.counters().collect();
    counters.sort_by(|a, b| a.name.cmp(&b.name));
    let keys = t.table.columns.iter().filter(|c| c.kind != Kind::Regular);
    Metadata {
        keyspace: t.keyspace.into(),
        table: t.table.name.clone(),
        columns: keys
            .chain(counters)
            .map(|c| Column {
                name: c.name.clone(),
                ty: c.ty.clone(),
            })
            .collect(),
    }
}

/// What a SELECT reads: its rows (of every partition, when `scan`), and
/// whether it asks for them in the reverse of the table's clustering
/// order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Query {
    pub(crate) rows: Rows,
    pub(crate) reversed: bool,
    pub(crate) scan: bool,
    /// Most rows of each partition (`PER PARTITION LIMIT`; 1 for
    /// `DISTINCT`).
    pub(crate) per_partition: Option<usize>,
    /// The `TOKEN()` range a scan reads.
    pub(crate) tokens: Option<super::tokens::Tokens>,
}

/// The rows a SELECT reads: those it names, or with no partition key
/// restricted, every partition's (a scan; filtering clustering columns
/// then takes `ALLOW FILTERING`, as in Cassandra).
pub(crate) fn query(t: Target, s: &Select, values: &[Value]) -> Result<Query, CqlError> {
    let reversed = reversed(t, &s.order_by)?;
    let per_partition = per_partition(t, s, values)?;
    let tokens = super::tokens::of(t.table, s, values)?;
    let scan = t
        .key_columns(Kind::PartitionKey)
        .all(|c| s.relations.iter().all(|r| r.column != c.name));
    if !scan {
        let rows = restrict(t, &s.relations, values, false)?;
        return Ok(Query {
            rows,
            reversed,
            scan,
            per_partition,
            tokens,
        });
    }
    check_columns(t, &s.relations)?;
    if !s.relations.is_empty() && !s.allow_filtering {
        return Err(CqlError::Invalid(
            "Cannot execute this query as it might involve data filtering and thus may have \
             unpredictable performance. If you want to execute this query despite the \
             performance unpredictability, use ALLOW FILTERING"
                .into(),
        ));
    }
    if !s.order_by.is_empty() {
        return Err(CqlError::Invalid(
            "ORDER BY is only supported when the partition key is restricted by an EQ or an IN."
                .into(),
        ));
    }
    let clustering = clustering(t, &s.relations, values, false)?;
    Ok(Query {
        rows: Rows {
            partitions: Vec::new(),
            clustering,
        },
        reversed,
        scan,
        per_partition,
        tokens,
    })
}

/// How many rows of each partition a SELECT answers: `PER PARTITION
/// LIMIT`, or one for `DISTINCT` (which selects only partition key and
/// static columns, as Cassandra requires).
fn per_partition(t: Target, s: &Select, values: &[Value]) -> Result<Option<usize>, CqlError> {
    if s.distinct {
        let allowed = |name: &str| {
            t.table
                .columns
                .iter()
                .any(|c| c.name == name && matches!(c.kind, Kind::PartitionKey | Kind::Static))
        };
        let bad = match &s.selection {
            Selection::Columns(cols) => cols
                .iter()
                .find(|(n, _)| !allowed(n))
                .map(|(n, _)| n.clone()),
            _ => Some("*".into()),
        };
        if let Some(name) = bad {
            return Err(CqlError::Invalid(format!(
                "SELECT DISTINCT queries must only request partition key columns and/or static \
                 columns (not {name})"
            )));
        }
        return Ok(Some(1));
    }
    s.per_partition_limit
        .as_ref()
        .map(|term| super::select::limit(term, values))
        .transpose()
}

/// `rows` (every column, grouped by partition) with at most
/// `q.per_partition` of each partition.
pub(crate) fn per_partition_rows(t: Target, q: &Query, rows: Vec<Vec<Cell>>) -> Vec<Vec<Cell>> {
    let Some(most) = q.per_partition else {
        return rows;
    };
    let keys = t.key_columns(Kind::PartitionKey).count();
    let mut out: Vec<Vec<Cell>> = Vec::with_capacity(rows.len());
    let mut taken = 0;
    for row in rows {
        let same = out.last().is_some_and(|last| last[..keys] == row[..keys]);
        taken = if same { taken + 1 } else { 1 };
        if taken <= most {
            out.push(row);
        }
    }
    out
}

/// The partition key's values of each stored partition of a scan, in
/// order; a partition that is not the table's is skipped.
pub(crate) fn scanned(t: Target, stored: Vec<Vec<u8>>) -> Vec<(Vec<Vec<u8>>, Vec<u8>)> {
    let keys = t.key_columns(Kind::PartitionKey).count();
    stored
        .into_iter()
        .filter_map(|p| Some((cells::partition_key(t.table, &p, keys)?, p)))
        .collect()
}

/// Whether `ORDER BY` asks for the reverse of the clustering order.
fn reversed(t: Target, order_by: &[(String, bool)]) -> Result<bool, CqlError> {
    let clustering: Vec<&ColumnDef> = t.key_columns(Kind::Clustering).collect();
    let mut reversed = None;
    for (i, (name, desc)) in order_by.iter().enumerate() {
        let Some(c) = clustering.get(i).filter(|c| c.name == *name) else {
            return Err(CqlError::Invalid(
                "Order by currently only supports the ordering of columns following their \
                 declared order in the PRIMARY KEY"
                    .into(),
            ));
        };
        let flipped = *desc != c.descending;
        if reversed.is_some_and(|r| r != flipped) {
            return Err(CqlError::Invalid("Unsupported order by relation".into()));
        }
        reversed = Some(flipped);
    }
    Ok(reversed.unwrap_or(false))
}

/// `table` (of `def`'s rows, every column, the partition key's first)
/// with a column for `token(...)` of the partition key if `s` selects it.
pub(crate) fn with_token(def: &TableDef, s: &Select, mut table: Table) -> Result<Table, CqlError> {
    let Selection::Columns(picked) = &s.selection else {
        return Ok(table);
    };
    let keys: Vec<String> = def
        .columns
        .iter()
        .filter(|c| c.kind == Kind::PartitionKey)
        .map(|c| c.name.clone())
        .collect();
    let name = token_selector(&keys);
    match picked.iter().find(|(n, _)| n.starts_with("system.token(")) {
        None => return Ok(table),
        Some((n, _)) if *n != name => {
            return Err(CqlError::Invalid(format!(
                "Invalid selector {n}: token() takes the partition key, {}",
                keys.join(", ")
            )));
        }
        Some(_) => {}
    }
    for row in &mut table.rows {
        let key: Vec<Vec<u8>> = row[..keys.len()]
            .iter()
            .map(|c| c.clone().unwrap_or_default())
            .collect();
        let token = tally_net::ring::partition_token(&cells::partition(def, &key)?);
        row.push(Some(token.to_be_bytes().to_vec()));
    }
    table.meta.columns.push(Column {
        name,
        ty: CqlType::Bigint,
    });
    Ok(table)
}

/// The columns and rows a SELECT answers of `rows`, its table's rows
/// with every column ([`all_columns`]), in order.
pub(crate) fn project(
    t: Target,
    s: &Select,
    rows: Vec<Vec<Cell>>,
    values: &[Value],
) -> Result<(Metadata, Vec<Vec<Cell>>), CqlError> {
    let table = Table {
        meta: all_columns(t),
        rows,
    };
    let table = with_token(t.table, s, table)?;
    let projected = Select {
        relations: Vec::new(),
        order_by: Vec::new(),
        ..s.clone()
    };
    evaluate(&table, &projected, values)
}

/// The rows, with every column, that `read` holds of the partitions of
/// `q` (in its order): each partition's in clustering order (or its
/// reverse), and those of several partitions in clustering order when
/// the SELECT orders them.
pub(crate) fn table_rows(
    t: Target,
    s: &Select,
    q: &Query,
    read: &[BTreeMap<Vec<u8>, Option<i64>>],
) -> Vec<Vec<Cell>> {
    let meta = all_columns(t);
    let types = clustering_types(t);
    let descending = descending(t);
    let layout = cells::Layout::of(t.table);
    let mut rows: Vec<(Vec<Vec<u8>>, Vec<Cell>)> = Vec::new();
    for ((key, _), cells_read) in q.rows.partitions.iter().zip(read) {
        let mut by_row: BTreeMap<Vec<Vec<u8>>, BTreeMap<&str, i64>> = BTreeMap::new();
        for (column, value) in cells_read {
            let (Some(v), Some((row, name))) = (value, layout.split(column)) else {
                continue;
            };
            if q.rows.clustering.admits(&row, &types) {
                by_row.entry(row).or_default().insert(name, *v);
            }
        }
        let mut partition_rows: Vec<_> = by_row.into_iter().collect();
        partition_rows.sort_by(|(a, _), (b, _)| order(&types, &descending, a, b));
        if q.reversed {
            partition_rows.reverse();
        }
        for (row, counters) in partition_rows {
            let mut out: Vec<Cell> = key.iter().chain(&row).map(|v| Some(v.clone())).collect();
            for c in &meta.columns[out.len()..] {
                out.push(counters.get(c.name.as_str()).and_then(|v| cell::bigint(*v)));
            }
            rows.push((row, out));
        }
    }
    if !s.order_by.is_empty() && q.rows.partitions.len() > 1 {
        // Rows of several partitions in clustering order, as Cassandra
        // merges them for an ORDER BY over `IN`.
        rows.sort_by(|(a, _), (b, _)| {
            let o = order(&types, &descending, a, b);
            if q.reversed { o.reverse() } else { o }
        });
    }
    rows.into_iter().map(|(_, r)| r).collect()
}

/// Two rows' order by their clustering values, as the table declares it.
pub(crate) fn order(
    types: &[&CqlType],
    descending: &[bool],
    a: &[Vec<u8>],
    b: &[Vec<u8>],
) -> Ordering {
    for ((ty, desc), (x, y)) in types.iter().zip(descending).zip(a.iter().zip(b)) {
        let o = compare(ty, x, y);
        if o != Ordering::Equal {
            return if *desc { o.reverse() } else { o };
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests;
