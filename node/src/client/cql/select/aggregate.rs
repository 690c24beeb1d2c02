//! Aggregates: `sum()`, `avg()`, `min()`, `max()` and `count()` of a
//! column over the rows a SELECT matches, in groups of `GROUP BY`'s
//! columns (rows in order, so a group's rows come together), as
//! Cassandra answers them: a column beside them takes its group's first
//! row's value; with no rows at all, one row (`sum`, `avg` and `count`
//! 0, the others null); integer sums wrap at their type's width.

use super::super::cells::compare;
use super::super::response::CqlError;
use super::super::result::{Cell, Column, CqlType, Metadata};
use super::super::system::Table;

/// An aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Function {
    Sum,
    Avg,
    Min,
    Max,
    Count,
}

/// The function and column a selector named `system.f(col)` asks for.
fn function_of(name: &str) -> Option<(Function, &str)> {
    let inner = name.strip_prefix("system.")?;
    let (f, rest) = inner.split_once('(')?;
    let column = rest.strip_suffix(')')?;
    let f = match f {
        "sum" => Function::Sum,
        "avg" => Function::Avg,
        "min" => Function::Min,
        "max" => Function::Max,
        "count" => Function::Count,
        _ => return None,
    };
    Some((f, column))
}

/// Whether any of `selected` is an aggregate.
pub(crate) fn any(selected: &[(String, Option<String>)]) -> bool {
    selected.iter().any(|(n, _)| function_of(n).is_some())
}

/// The columns and rows of an aggregate SELECT: `selected` of `rows` (in
/// order) of `table`, grouped by the columns at `group_by`; at most
/// `limit` groups.
pub(crate) fn evaluate<'r>(
    table: &Table,
    rows: impl Iterator<Item = &'r Vec<Cell>>,
    selected: &[(String, Option<String>)],
    group_by: &[usize],
    limit: usize,
) -> Result<(Metadata, Vec<Vec<Cell>>), CqlError> {
    let mut picked = Vec::with_capacity(selected.len());
    let mut columns = Vec::with_capacity(selected.len());
    for (name, alias) in selected {
        let (f, column) = function_of(name).map_or((None, name.as_str()), |(f, c)| (Some(f), c));
        let i = super::column(table, column)?;
        let ty = table.meta.columns[i].ty.clone();
        if matches!(f, Some(Function::Sum | Function::Avg)) && !numeric(&ty) {
            return Err(CqlError::Invalid(format!(
                "Invalid call to function {}, none of its type signatures match",
                name.trim_start_matches("system.")
                    .split('(')
                    .next()
                    .unwrap_or("")
            )));
        }
        let out_ty = match f {
            Some(Function::Count) => CqlType::Bigint,
            _ => ty,
        };
        columns.push(Column {
            name: alias.clone().unwrap_or_else(|| name.clone()),
            ty: out_ty,
        });
        picked.push((f, i));
    }
    let mut groups: Vec<Vec<&Vec<Cell>>> = Vec::new();
    for row in rows {
        match groups.last_mut() {
            Some(g) if group_by.iter().all(|&i| g[0][i] == row[i]) => g.push(row),
            _ => groups.push(vec![row]),
        }
    }
    if groups.is_empty() && group_by.is_empty() {
        groups.push(Vec::new());
    }
    let out = groups
        .iter()
        .take(limit)
        .map(|g| {
            picked
                .iter()
                .map(|&(f, i)| apply(f, i, &table.meta.columns[i].ty, g))
                .collect()
        })
        .collect();
    Ok((
        Metadata {
            columns,
            ..table.meta.clone()
        },
        out,
    ))
}

fn numeric(ty: &CqlType) -> bool {
    matches!(
        ty,
        CqlType::Int
            | CqlType::Bigint
            | CqlType::Smallint
            | CqlType::Tinyint
            | CqlType::Varint
            | CqlType::Counter
            | CqlType::Float
            | CqlType::Double
    )
}

/// `f` of column `i` (of type `ty`) over a group's rows; a plain column
/// (no `f`) is the first row's.
fn apply(f: Option<Function>, i: usize, ty: &CqlType, group: &[&Vec<Cell>]) -> Cell {
    let values = group.iter().filter_map(|r| r[i].as_ref());
    match f {
        None => group.first().and_then(|r| r[i].clone()),
        Some(Function::Count) => Some((values.count() as i64).to_be_bytes().to_vec()),
        Some(Function::Min) => values.min_by(|a, b| compare(ty, a, b)).cloned(),
        Some(Function::Max) => values.max_by(|a, b| compare(ty, a, b)).cloned(),
        Some(Function::Sum) => Some(encode(ty, values.map(|v| decode(ty, v)).sum())),
        Some(Function::Avg) => {
            let all: Vec<Number> = values.map(|v| decode(ty, v)).collect();
            let n = all.len().max(1);
            Some(encode(ty, all.into_iter().sum::<Number>().divided(n)))
        }
    }
}

/// A number of a column, exact for integers.
#[derive(Clone, Copy, Debug, Default)]
struct Number {
    int: i128,
    float: f64,
}

impl std::iter::Sum for Number {
    fn sum<I: Iterator<Item = Number>>(iter: I) -> Number {
        iter.fold(Number::default(), |a, b| Number {
            int: a.int.wrapping_add(b.int),
            float: a.float + b.float,
        })
    }
}

impl Number {
    fn divided(self, n: usize) -> Number {
        Number {
            int: self.int / n as i128,
            float: self.float / n as f64,
        }
    }
}

fn decode(ty: &CqlType, v: &[u8]) -> Number {
    match ty {
        CqlType::Float => {
            let x = f64::from(f32::from_be_bytes(v.try_into().unwrap_or([0; 4])));
            Number { int: 0, float: x }
        }
        CqlType::Double => {
            let x = f64::from_be_bytes(v.try_into().unwrap_or([0; 8]));
            Number { int: 0, float: x }
        }
        _ => {
            let fill = if v.first().is_some_and(|b| b & 0x80 != 0) {
                0xFF
            } else {
                0
            };
            let mut be = [fill; 16];
            let n = v.len().min(16);
            be[16 - n..].copy_from_slice(&v[v.len() - n..]);
            Number {
                int: i128::from_be_bytes(be),
                float: 0.0,
            }
        }
    }
}

/// `n` as a value of `ty`: an integer wraps at its type's width.
fn encode(ty: &CqlType, n: Number) -> Vec<u8> {
    match ty {
        CqlType::Float => (n.float as f32).to_be_bytes().to_vec(),
        CqlType::Double => n.float.to_be_bytes().to_vec(),
        CqlType::Int => (n.int as i32).to_be_bytes().to_vec(),
        CqlType::Smallint => (n.int as i16).to_be_bytes().to_vec(),
        CqlType::Tinyint => (n.int as i8).to_be_bytes().to_vec(),
        CqlType::Varint => super::literals::varint(n.int),
        _ => (n.int as i64).to_be_bytes().to_vec(),
    }
}
