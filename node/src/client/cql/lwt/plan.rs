//! What a transaction names before its round, without I/O: the one
//! partition its statements write (a conditional batch's too), and the
//! rows its conditions check, each with its conditions bound to its
//! statement's values, in clustering order, as Cassandra's
//! `CQL3CasRequest` gathers them.

use super::super::ast::{Condition, Op, Statement};
use super::super::body::Value;
use super::super::regular;
use super::super::response::CqlError;
use super::super::result::Cell;
use super::super::rows::{self, Target};
use super::super::schema::Kind;
use super::super::select::bound;

/// What a row must be for a transaction to apply.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Check {
    /// `IF NOT EXISTS`.
    NotExists,
    /// `IF EXISTS`.
    Exists,
    /// `IF col op v AND ...`, in the order written.
    Columns(Vec<Bound>),
}

/// A column's condition with its values bound.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Bound {
    pub(crate) column: String,
    pub(crate) op: Op,
    pub(crate) terms: Vec<Cell>,
}

/// A transaction's partition (its key's values and stored bytes) and the
/// rows it checks: each row's clustering values and check.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    pub(crate) key: Vec<Vec<u8>>,
    pub(crate) partition: Vec<u8>,
    pub(crate) rows: Vec<(Vec<Vec<u8>>, Check)>,
}

/// The plan of `statements` (one, or a batch's: `batch`), each with its
/// values; at least one is conditional.
pub(crate) fn plan(
    t: Target,
    statements: &[(&Statement, &[Value])],
    batch: bool,
) -> Result<Plan, CqlError> {
    if batch && statements.iter().any(|(s, _)| custom_timestamp(s)) {
        return Err(CqlError::Invalid(
            "Cannot provide custom timestamp for conditional BATCH".into(),
        ));
    }
    let mut named: Option<(Vec<Vec<u8>>, Vec<u8>)> = None;
    let mut written: Vec<Vec<u8>> = Vec::new();
    let mut rows: Vec<(Vec<Vec<u8>>, Check)> = Vec::new();
    for &(statement, values) in statements {
        match statement.condition() {
            Some(condition) => {
                let (key, partition, clustering) = regular::named_row(t, statement, values)?;
                add(&mut rows, clustering, bind(t, &condition, values)?)?;
                written.push(partition.clone());
                named.get_or_insert((key, partition));
            }
            None => {
                let writes = regular::write_at(t, statement, values, (0, 0))?;
                written.extend(writes.into_iter().map(|(p, _)| p));
            }
        }
    }
    let Some((key, partition)) = named else {
        return Err(CqlError::Server("not a conditional write".into()));
    };
    if written.iter().any(|p| *p != partition) {
        return Err(CqlError::Invalid(
            "Batch with conditions cannot span multiple partitions".into(),
        ));
    }
    let (types, descending) = (rows::clustering_types(t), rows::descending(t));
    rows.sort_by(|a, b| rows::order(&types, &descending, &a.0, &b.0));
    Ok(Plan {
        key,
        partition,
        rows,
    })
}

fn custom_timestamp(s: &Statement) -> bool {
    match s {
        Statement::Insert(i) => i.timestamp.is_some(),
        Statement::Update(u) => u.timestamp.is_some(),
        Statement::Delete(d) => d.timestamp.is_some(),
        _ => false,
    }
}

/// Adds a row's check: a row's column conditions add up, and the other
/// kinds mix with nothing else (Cassandra's rules).
fn add(
    rows: &mut Vec<(Vec<Vec<u8>>, Check)>,
    clustering: Vec<Vec<u8>>,
    check: Check,
) -> Result<(), CqlError> {
    let Some((_, have)) = rows.iter_mut().find(|(c, _)| *c == clustering) else {
        rows.push((clustering, check));
        return Ok(());
    };
    let refused = |m: &str| Err(CqlError::Invalid(m.into()));
    match (have, check) {
        (Check::Columns(a), Check::Columns(b)) => {
            a.extend(b);
            Ok(())
        }
        (Check::Exists, Check::Exists) | (Check::NotExists, Check::NotExists) => Ok(()),
        (Check::Exists, Check::NotExists) | (Check::NotExists, Check::Exists) => {
            refused("Cannot mix IF EXISTS and IF NOT EXISTS conditions for the same row")
        }
        _ => refused("Cannot mix IF conditions and IF NOT EXISTS for the same row"),
    }
}

/// `condition` with its terms bound to `values`, each column checked to
/// be one of the table's non-key columns.
pub(crate) fn bind(t: Target, condition: &Condition, values: &[Value]) -> Result<Check, CqlError> {
    let relations = match condition {
        Condition::NotExists => return Ok(Check::NotExists),
        Condition::Exists => return Ok(Check::Exists),
        Condition::Columns(relations) => relations,
    };
    let mut bound_all = Vec::with_capacity(relations.len());
    for rel in relations {
        let Some(c) = t.table.columns.iter().find(|c| c.name == rel.column) else {
            return Err(CqlError::Invalid(format!(
                "Undefined column name {}",
                rel.column
            )));
        };
        if matches!(c.kind, Kind::PartitionKey | Kind::Clustering) {
            return Err(CqlError::Invalid(format!(
                "PRIMARY KEY column '{}' cannot have IF conditions",
                rel.column
            )));
        }
        let terms = rel.terms.iter().map(|term| bound(term, &c.ty, values));
        bound_all.push(Bound {
            column: rel.column.clone(),
            op: rel.op,
            terms: terms.collect::<Result<_, _>>()?,
        });
    }
    Ok(Check::Columns(bound_all))
}
