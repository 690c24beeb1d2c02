//! `TOKEN()` restrictions of a SELECT, without I/O: the range of tokens a
//! scan reads (as Cassandra's `TokenRestriction` merges them), where a
//! scan of a table in token order begins, and which partitions it keeps.
//!
//! `token(pk) > ? AND token(pk) <= ?` is how `cqlsh`'s `COPY`, Spark-style
//! readers and hand-written pagers split a table. A table in token order
//! (`cells`) stores its partitions sorted by token, so such a range is a
//! range of keys: the scan starts at its lower bound and stops past its
//! upper one. A table made before keeps its partitions in key order: its
//! scans read every partition, keeping those in the range.

use std::ops::Bound;

use tally_net::ring::partition_token;

use super::ast::{Op, Select, TokenBound, TokenRelation};
use super::body::Value;
use super::cells;
use super::response::CqlError;
use super::result::CqlType;
use super::schema::{Kind, TableDef};
use super::select::bound;

/// A range of tokens: Cassandra's ring does not wrap for a SELECT, so a
/// lower bound above the upper one holds nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub(crate) lower: Bound<i64>,
    pub(crate) upper: Bound<i64>,
}

impl Tokens {
    pub(crate) fn contains(&self, token: i64) -> bool {
        let above = match self.lower {
            Bound::Included(a) => token >= a,
            Bound::Excluded(a) => token > a,
            Bound::Unbounded => true,
        };
        above && !self.beyond(token)
    }

    /// Whether `token` is past the range's upper end.
    pub(crate) fn beyond(&self, token: i64) -> bool {
        match self.upper {
            Bound::Included(b) => token > b,
            Bound::Excluded(b) => token >= b,
            Bound::Unbounded => false,
        }
    }

    /// The lowest token the range may hold; `None` if it holds none.
    fn first(&self) -> Option<i64> {
        let first = match self.lower {
            Bound::Included(a) => a,
            Bound::Excluded(a) => a.checked_add(1)?,
            Bound::Unbounded => i64::MIN,
        };
        self.contains(first).then_some(first)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first().is_none()
    }
}

/// The token range `s`'s `TOKEN()` relations restrict it to, `values`
/// bound to their markers; `None` if it has none.
pub(crate) fn of(
    table: &TableDef,
    s: &Select,
    values: &[Value],
) -> Result<Option<Tokens>, CqlError> {
    if s.tokens.is_empty() {
        return Ok(None);
    }
    let keys: Vec<_> = table
        .columns
        .iter()
        .filter(|c| c.kind == Kind::PartitionKey)
        .collect();
    let names: Vec<&str> = keys.iter().map(|c| c.name.as_str()).collect();
    if let Some(r) = s
        .relations
        .iter()
        .find(|r| names.contains(&r.column.as_str()))
    {
        return Err(CqlError::Invalid(format!(
            "Columns \"{}\" cannot be restricted by both a normal relation and a token relation",
            r.column
        )));
    }
    let joined = names.join(", ");
    let mut range = Tokens {
        lower: Bound::Unbounded,
        upper: Bound::Unbounded,
    };
    for r in &s.tokens {
        check_columns(table, r, &names)?;
        let token = value(table, r, values)?;
        merge(&mut range, r.op, token, &joined)?;
    }
    Ok(Some(range))
}

/// Checks that `r` applies `token()` to the partition key, in order.
fn check_columns(table: &TableDef, r: &TokenRelation, keys: &[&str]) -> Result<(), CqlError> {
    if let Some(c) = r
        .columns
        .iter()
        .find(|c| table.columns.iter().all(|d| d.name != **c))
    {
        return Err(CqlError::Invalid(format!("Undefined column name {c}")));
    }
    if r.columns.len() != keys.len() {
        return Err(CqlError::Invalid(
            "The token() function must be applied to all partition key components or none of them"
                .into(),
        ));
    }
    match r.columns.iter().zip(keys).all(|(a, b)| a == b) {
        true => Ok(()),
        false => Err(CqlError::Invalid(format!(
            "The token function arguments must be in the partition key order: {}",
            keys.join(", ")
        ))),
    }
}

/// The token `r` compares with: a bigint, or the token of key values.
fn value(table: &TableDef, r: &TokenRelation, values: &[Value]) -> Result<i64, CqlError> {
    let null = || {
        CqlError::Invalid(format!(
            "Invalid null value for token({})",
            r.columns.join(", ")
        ))
    };
    match &r.bound {
        TokenBound::Value(term) => {
            let b = bound(term, &CqlType::Bigint, values)?.ok_or_else(null)?;
            let bytes: [u8; 8] = b.as_slice().try_into().map_err(|_| {
                CqlError::Invalid(format!("Expected 8 or 0 byte long ({})", b.len()))
            })?;
            Ok(i64::from_be_bytes(bytes))
        }
        TokenBound::Of(terms) => {
            let keys = table
                .columns
                .iter()
                .filter(|c| c.kind == Kind::PartitionKey);
            if terms.len() != keys.clone().count() {
                return Err(CqlError::Invalid(format!(
                    "Invalid number of arguments in call to function system.token: {} required \
                     but {} provided",
                    keys.count(),
                    terms.len()
                )));
            }
            let mut key = Vec::with_capacity(terms.len());
            for (term, c) in terms.iter().zip(keys) {
                key.push(bound(term, &c.ty, values)?.ok_or_else(null)?);
            }
            Ok(partition_token(&cells::partition(table, &key)?))
        }
    }
}

/// Adds `token op v` to `range`, as Cassandra merges token slices: one
/// bound of each side, and `=` alone.
fn merge(range: &mut Tokens, op: Op, v: i64, columns: &str) -> Result<(), CqlError> {
    let refused = |m: String| Err(CqlError::Invalid(m));
    let unbounded = |b: Bound<i64>| b == Bound::Unbounded;
    let fresh = unbounded(range.lower) && unbounded(range.upper);
    let is_eq = range.lower == range.upper && !fresh;
    if (op == Op::Eq && !fresh) || is_eq {
        return refused(format!(
            "{columns} cannot be restricted by more than one relation if it includes an Equal"
        ));
    }
    let (side, bound) = match op {
        Op::Eq => {
            *range = Tokens {
                lower: Bound::Included(v),
                upper: Bound::Included(v),
            };
            return Ok(());
        }
        Op::Gt => ("start", Bound::Excluded(v)),
        Op::Ge => ("start", Bound::Included(v)),
        Op::Lt => ("end", Bound::Excluded(v)),
        Op::Le => ("end", Bound::Included(v)),
        Op::Ne | Op::In => return refused(format!("{op:?} is not a token restriction")),
    };
    let slot = match side {
        "start" => &mut range.lower,
        _ => &mut range.upper,
    };
    if !unbounded(*slot) {
        return refused(format!(
            "More than one restriction was found for the {side} bound on {columns}"
        ));
    }
    *slot = bound;
    Ok(())
}

/// Where a scan of `table` for `range` begins after: just before the
/// first partition of the range, for a table in token order (a stored
/// partition is longer than the prefix made here, so it sorts after);
/// `None` to begin at the table's first partition.
pub(crate) fn start(table: &TableDef, range: &Tokens) -> Option<(Vec<u8>, Vec<u8>)> {
    if !table.token_order || range.lower == Bound::Unbounded {
        return None;
    }
    Some((cells::token_prefix(table, range.first()?), Vec::new()))
}

/// The partitions of `stored` (a scan page's, in order) in `range`; and
/// whether the scan is over: in a table in token order, one listed is
/// past the range's end.
pub(crate) fn keep(table: &TableDef, range: &Tokens, stored: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, bool) {
    let (mut kept, mut over) = (Vec::with_capacity(stored.len()), false);
    for p in stored {
        let token = partition_token(&p);
        over |= table.token_order && range.beyond(token);
        if range.contains(token) {
            kept.push(p);
        }
    }
    (kept, over)
}

#[cfg(test)]
mod tests;
