//! Batches of statements: a BATCH request (statements by text or
//! prepared id, each with its values) or a `BEGIN ... BATCH ... APPLY
//! BATCH` query, checked as Cassandra checks them and handed back as one
//! [`RowWork`] for `exec` to run.
//!
//! A counter batch holds only counter updates and deletes, and counter
//! updates come only in counter batches (Cassandra's rules). Its
//! statements are applied independently, as Cassandra's counter batches
//! are: not atomically. An operation id in the request's payload applies
//! to each of its adds (an id names one add per counter).
//!
//! A batch of regular tables writes each partition's cells as one write;
//! one with conditions is one transaction, on one partition of one table.

use super::ast::{BatchKind, Statement};
use super::parse::parse;
use super::prepared::PreparedCache;
use super::request::{BatchStatement, Params};
use super::response::CqlError;
use super::system::Cluster;
use super::tables::{user_table, write_refused};
use super::work::{Outcome, Part, RowWork};

/// The most statements one batch may hold.
pub(crate) const STATEMENTS_MAX: usize = 1_000;

/// A BATCH request.
pub(crate) fn batch(
    cluster: &Cluster,
    session: Option<&str>,
    prepared: &PreparedCache,
    kind: u8,
    statements: &[BatchStatement],
    params: &Params,
) -> Result<Outcome, CqlError> {
    let kind = match kind {
        0 => BatchKind::Logged,
        1 => BatchKind::Unlogged,
        2 => BatchKind::Counter,
        k => return Err(CqlError::Protocol(format!("unknown batch type {k}"))),
    };
    check_size(statements.len())?;
    let mut parsed = Vec::with_capacity(statements.len());
    for s in statements {
        parsed.push(match s {
            BatchStatement::Query(text, values) => {
                let (statement, markers) = parse(text).map_err(|e| CqlError::Syntax(e.0))?;
                check_markers(markers, values.len())?;
                (statement, session.map(str::to_string), values.clone())
            }
            BatchStatement::Prepared(id, values) => {
                let p = prepared.lookup(id)?;
                check_markers(p.markers, values.len())?;
                (p.statement, p.keyspace, values.clone())
            }
        });
    }
    parts(cluster, kind, parsed, params)
}

/// A `BEGIN ... BATCH` query: its statements share the query's values.
pub(crate) fn inline(
    cluster: &Cluster,
    kind: BatchKind,
    statements: &[Statement],
    keyspace: Option<&str>,
    params: &Params,
) -> Result<Outcome, CqlError> {
    check_size(statements.len())?;
    let parsed = statements
        .iter()
        .map(|s| {
            (
                s.clone(),
                keyspace.map(str::to_string),
                params.values.clone(),
            )
        })
        .collect();
    parts(cluster, kind, parsed, params)
}

fn check_size(n: usize) -> Result<(), CqlError> {
    match n {
        0 => Err(CqlError::Invalid("a batch of no statements".into())),
        n if n > STATEMENTS_MAX => Err(CqlError::Invalid(format!(
            "a batch of {n} statements: the limit is {STATEMENTS_MAX}"
        ))),
        _ => Ok(()),
    }
}

fn check_markers(markers: usize, values: usize) -> Result<(), CqlError> {
    match markers == values {
        true => Ok(()),
        false => Err(CqlError::Invalid(format!(
            "There were {markers} markers(?) in CQL but {values} bound variables"
        ))),
    }
}

type Parsed = (Statement, Option<String>, Vec<super::body::Value>);

/// The batch's statements with their tables, checked against its kind.
fn parts(
    cluster: &Cluster,
    kind: BatchKind,
    statements: Vec<Parsed>,
    params: &Params,
) -> Result<Outcome, CqlError> {
    let mut parts = Vec::with_capacity(statements.len());
    for (statement, keyspace, values) in statements {
        let name = match &statement {
            Statement::Update(u) => &u.table,
            Statement::Insert(i) => &i.table,
            Statement::Delete(d) => &d.table,
            _ => {
                return Err(CqlError::Invalid(
                    "Invalid statement in batch: only UPDATE, INSERT and DELETE statements are \
                     allowed."
                        .into(),
                ));
            }
        };
        let Some((ks, table)) = user_table(cluster, name, keyspace.as_deref())? else {
            return match cluster.fresh {
                false => Ok(Outcome::Refresh),
                true => Err(write_refused(cluster, name, keyspace.as_deref())),
            };
        };
        check_kind(kind, table.is_counter(), &parts)?;
        parts.push(Part {
            keyspace: ks,
            table,
            statement,
            values,
        });
    }
    check_conditional(&parts)?;
    Ok(Outcome::Rows(RowWork {
        parts,
        consistency: params.consistency,
        skip_metadata: false,
        page_size: None,
        paging_state: None,
        timestamp: params.timestamp,
        batch: Some(kind),
    }))
}

/// A batch with conditions writes one table (and one partition of it,
/// which `lwt::plan` checks once the values are bound).
fn check_conditional(parts: &[Part]) -> Result<(), CqlError> {
    let conditional = parts.iter().any(|p| p.statement.condition().is_some());
    let same = |a: &Part, b: &Part| a.keyspace == b.keyspace && a.table.id == b.table.id;
    match parts.first() {
        Some(first) if conditional && parts.iter().any(|p| !same(p, first)) => Err(
            CqlError::Invalid("Batch with conditions cannot span multiple tables".into()),
        ),
        _ => Ok(()),
    }
}

/// A statement on a counter table (`counter`) or a regular one fits a
/// batch of `kind` with the statements `before` it, as Cassandra says.
fn check_kind(kind: BatchKind, counter: bool, before: &[Part]) -> Result<(), CqlError> {
    let refused = |m: &str| Err(CqlError::Invalid(m.into()));
    match (kind, counter) {
        (BatchKind::Logged, true) => {
            refused("Cannot include a counter statement in a logged batch")
        }
        (BatchKind::Counter, false) => {
            refused("Cannot include non-counter statement in a counter batch")
        }
        _ if before.iter().any(|p| p.table.is_counter() != counter) => {
            refused("Counter and non-counter mutations cannot exist in the same batch")
        }
        _ => Ok(()),
    }
}
