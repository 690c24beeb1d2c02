//! A SELECT over rows a node holds in full (the system tables): the
//! WHERE clause's equalities and `IN`s as filters, the selection as a
//! projection (a column may come twice, under an alias, as the Python
//! driver asks), `COUNT(*)`, aggregates and `GROUP BY` (`aggregate`),
//! `LIMIT`. Values compare as their encoded
//! bytes, a literal encoded by its column's type, a bound value as the
//! driver encoded it.

use super::ast::{Literal, Op, Select, Selection, Term};
use super::body::Value;
use super::response::CqlError;
use super::result::{Cell, Column, CqlType, Metadata, cell};
use super::system::Table;

pub(crate) mod aggregate;
pub(crate) mod literals;

/// The columns and rows `select` answers from `table`; `values` bound to
/// its markers.
pub(crate) fn evaluate(
    table: &Table,
    select: &Select,
    values: &[Value],
) -> Result<(Metadata, Vec<Vec<Cell>>), CqlError> {
    let mut filters = Vec::new();
    for r in &select.relations {
        let i = column(table, &r.column)?;
        let ty = &table.meta.columns[i].ty;
        let wanted = match (r.op, r.terms.as_slice()) {
            (Op::Eq, [t]) => vec![bound(t, ty, values)?],
            (Op::In, [t @ (Term::Marker(_) | Term::Named(..))]) => {
                list(&bound(t, &CqlType::Blob, values)?)?
            }
            (Op::In, terms) => terms
                .iter()
                .map(|t| bound(t, ty, values))
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(CqlError::Invalid(format!(
                    "Only EQ and IN relations are supported on {}.{}",
                    table.meta.keyspace, table.meta.table
                )));
            }
        };
        filters.push((i, wanted));
    }
    let matching = table
        .rows
        .iter()
        .filter(|row| filters.iter().all(|(i, wanted)| wanted.contains(&row[*i])));
    let limit = match &select.limit {
        Some(t) => limit(t, values)?,
        None => usize::MAX,
    };
    match &select.selection {
        Selection::All => Ok((table.meta.clone(), matching.take(limit).cloned().collect())),
        Selection::Count(alias) => {
            let n = matching.count().min(limit);
            let meta = Metadata {
                columns: vec![Column {
                    name: alias.clone().unwrap_or_else(|| "count".into()),
                    ty: CqlType::Bigint,
                }],
                ..table.meta.clone()
            };
            Ok((meta, vec![vec![cell::bigint(n as i64)]]))
        }
        Selection::Columns(wanted) if aggregate::any(wanted) || !select.group_by.is_empty() => {
            let group_by = select
                .group_by
                .iter()
                .map(|g| column(table, g))
                .collect::<Result<Vec<_>, _>>()?;
            aggregate::evaluate(table, matching, wanted, &group_by, limit)
        }
        Selection::Columns(wanted) => {
            let picked = wanted
                .iter()
                .map(|(name, alias)| Ok((column(table, name)?, alias)))
                .collect::<Result<Vec<_>, CqlError>>()?;
            let meta = Metadata {
                columns: picked
                    .iter()
                    .map(|&(i, alias)| Column {
                        name: alias
                            .clone()
                            .unwrap_or_else(|| table.meta.columns[i].name.clone()),
                        ty: table.meta.columns[i].ty.clone(),
                    })
                    .collect(),
                ..table.meta.clone()
            };
            let rows = matching
                .take(limit)
                .map(|row| picked.iter().map(|&(i, _)| row[i].clone()).collect())
                .collect();
            Ok((meta, rows))
        }
    }
}

fn column(table: &Table, name: &str) -> Result<usize, CqlError> {
    table
        .meta
        .columns
        .iter()
        .position(|c| c.name == name)
        .ok_or_else(|| CqlError::Invalid(format!("Undefined column name {name}")))
}

/// The encoded value of `term` for a column of type `ty`.
pub(crate) fn bound(term: &Term, ty: &CqlType, values: &[Value]) -> Result<Cell, CqlError> {
    match term {
        Term::Marker(i) | Term::Named(i, _) => match values.get(*i) {
            Some(Value::Bytes(b)) => Ok(Some(b.clone())),
            Some(Value::Null) => Ok(None),
            Some(Value::NotSet) => Err(CqlError::Invalid(
                "Invalid unset value in a relation".into(),
            )),
            None => Err(CqlError::Invalid(format!(
                "There were {} markers(?) in CQL but {} bound variables",
                i + 1,
                values.len()
            ))),
        },
        Term::Literal(lit) => encode(lit, ty),
    }
}

/// A literal encoded as a column of `ty` holds it.
pub(crate) fn encode(lit: &Literal, ty: &CqlType) -> Result<Cell, CqlError> {
    let wrong = || {
        CqlError::Invalid(format!(
            "Invalid literal {lit:?} for a column of type {}",
            ty.name()
        ))
    };
    let int = |bytes: u32| {
        match lit {
            Literal::Int(i) => Ok(*i),
            _ => Err(wrong()),
        }
        .and_then(|i| {
            let fits =
                i.unsigned_abs() < (1u128 << (bytes * 8 - 1)) || i == -(1i128 << (bytes * 8 - 1));
            if fits { Ok(i) } else { Err(wrong()) }
        })
    };
    Ok(match (ty, lit) {
        (_, Literal::Null) => None,
        (CqlType::Varchar | CqlType::Ascii, Literal::Str(s)) => cell::text(s),
        (CqlType::Timestamp, Literal::Str(s)) => {
            cell::bigint(literals::timestamp_ms(s).ok_or_else(wrong)?)
        }
        (CqlType::Date, Literal::Str(s)) => {
            let days = literals::days(s).ok_or_else(wrong)?;
            Some(
                literals::date(days)
                    .ok_or_else(wrong)?
                    .to_be_bytes()
                    .to_vec(),
            )
        }
        (CqlType::Date, Literal::Int(i)) => Some(
            u32::try_from(*i)
                .map_err(|_| wrong())?
                .to_be_bytes()
                .to_vec(),
        ),
        (CqlType::Inet, Literal::Str(s)) => cell::inet(s.parse().map_err(|_| wrong())?),
        (CqlType::Bigint | CqlType::Counter | CqlType::Timestamp, _) => {
            cell::bigint(int(8)? as i64)
        }
        (CqlType::Int, _) => cell::int(int(4)? as i32),
        (CqlType::Smallint, _) => Some((int(2)? as i16).to_be_bytes().to_vec()),
        (CqlType::Tinyint, _) => Some(vec![int(1)? as i8 as u8]),
        (CqlType::Boolean, Literal::Bool(b)) => cell::boolean(*b),
        (CqlType::Uuid | CqlType::Timeuuid, Literal::Uuid(u)) => cell::uuid(*u),
        (CqlType::Blob, Literal::Blob(b)) => Some(b.clone()),
        (CqlType::Double, Literal::Float(x)) => Some(x.to_be_bytes().to_vec()),
        (CqlType::Double, Literal::Int(i)) => Some((*i as f64).to_be_bytes().to_vec()),
        (CqlType::Float, Literal::Float(x)) => Some((*x as f32).to_be_bytes().to_vec()),
        (CqlType::Float, Literal::Int(i)) => Some((*i as f32).to_be_bytes().to_vec()),
        (CqlType::Varint, Literal::Int(i)) => Some(literals::varint(*i)),
        (CqlType::Time, Literal::Int(i)) => cell::bigint(i64::try_from(*i).map_err(|_| wrong())?),
        (CqlType::Time, Literal::Str(s)) => cell::bigint(literals::time_ns(s).ok_or_else(wrong)?),
        _ => return Err(wrong()),
    })
}

/// The elements of a bound list (`IN ?`): `[int] n`, then each `[bytes]`.
pub(crate) fn list(encoded: &Cell) -> Result<Vec<Cell>, CqlError> {
    let bad = || CqlError::Invalid("a malformed list bound to IN ?".into());
    let bytes = encoded.as_ref().ok_or_else(bad)?;
    let mut r = super::body::Reader::new(bytes);
    let n = r.int().map_err(|_| bad())?;
    let items = (0..n.max(0))
        .map(|_| r.bytes().map_err(|_| bad()))
        .collect::<Result<Vec<_>, _>>()?;
    match r.remaining() {
        0 => Ok(items),
        _ => Err(bad()),
    }
}

pub(crate) fn limit(term: &Term, values: &[Value]) -> Result<usize, CqlError> {
    let bad = || CqlError::Invalid("LIMIT must be strictly positive".into());
    let n = match bound(term, &CqlType::Int, values)? {
        Some(b) if b.len() == 4 => i32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        _ => return Err(bad()),
    };
    usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::super::ast::Statement;
    use super::super::parse::parse;
    use super::super::system::{schema_table, system_keyspaces};
    use super::*;

    fn keyspaces() -> Table {
        let mut t = schema_table("keyspaces").unwrap();
        system_keyspaces(&mut t);
        t
    }

    fn run(q: &str, values: &[Value]) -> Result<(Metadata, Vec<Vec<Cell>>), CqlError> {
        let Ok((Statement::Select(s), _)) = parse(q) else {
            panic!("{q}")
        };
        evaluate(&keyspaces(), &s, values)
    }

    #[test]
    fn equalities_and_ins_filter_and_columns_project() {
        let (meta, rows) = run(
            "SELECT keyspace_name, keyspace_name AS k FROM system_schema.keyspaces \
             WHERE keyspace_name = 'system'",
            &[],
        )
        .unwrap();
        let names: Vec<&str> = meta.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["keyspace_name", "k"]);
        assert_eq!(rows, [vec![cell::text("system"), cell::text("system")]]);
        let (_, rows) = run(
            "SELECT * FROM system_schema.keyspaces WHERE keyspace_name IN ('system', 'nope')",
            &[],
        )
        .unwrap();
        assert_eq!(rows.len(), 1);
        let (_, rows) = run(
            "SELECT * FROM system_schema.keyspaces WHERE keyspace_name = 'ks'",
            &[],
        )
        .unwrap();
        assert!(rows.is_empty());
    }

    #[test]
    fn bound_values_filter_as_the_driver_encoded_them() {
        let q = "SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = ?";
        let (_, rows) = run(q, &[Value::Bytes(b"system_schema".to_vec())]).unwrap();
        assert_eq!(rows, [vec![cell::boolean(true)]]);
        // IN ? binds a list<text>.
        let list = cell::texts(&["system", "system_schema"]).unwrap();
        let q = "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name IN ?";
        let (_, rows) = run(q, &[Value::Bytes(list)]).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(run(q, &[]).is_err(), "a marker without its value");
    }

    #[test]
    fn count_and_limit() {
        let (meta, rows) = run("SELECT COUNT(*) FROM system_schema.keyspaces", &[]).unwrap();
        assert_eq!(
            (meta.columns[0].name.as_str(), rows),
            ("count", vec![vec![cell::bigint(2)]])
        );
        let (_, rows) = run("SELECT * FROM system_schema.keyspaces LIMIT 1", &[]).unwrap();
        assert_eq!(rows.len(), 1);
        assert!(run("SELECT * FROM system_schema.keyspaces LIMIT 0", &[]).is_err());
    }

    #[test]
    fn an_unknown_column_or_relation_is_invalid() {
        for q in [
            "SELECT nope FROM system_schema.keyspaces",
            "SELECT * FROM system_schema.keyspaces WHERE nope = 'x'",
            "SELECT * FROM system_schema.keyspaces WHERE keyspace_name > 'a'",
            "SELECT * FROM system_schema.keyspaces WHERE durable_writes = 'yes'",
        ] {
            let e = run(q, &[]).unwrap_err();
            assert_eq!(e.code(), 0x2200, "{q}: {e:?}");
        }
    }

    #[test]
    fn literals_encode_as_their_column_holds_them() {
        assert_eq!(
            encode(&Literal::Int(5), &CqlType::Int),
            Ok(Some(vec![0, 0, 0, 5]))
        );
        assert_eq!(
            encode(&Literal::Int(-1), &CqlType::Tinyint),
            Ok(Some(vec![0xff]))
        );
        assert_eq!(
            encode(&Literal::Int(-128), &CqlType::Tinyint),
            Ok(Some(vec![0x80]))
        );
        assert!(encode(&Literal::Int(128), &CqlType::Tinyint).is_err());
        assert!(encode(&Literal::Int(1 << 31), &CqlType::Int).is_err());
        assert!(encode(&Literal::Str("x".into()), &CqlType::Int).is_err());
        assert_eq!(encode(&Literal::Null, &CqlType::Int), Ok(None));
    }
}
