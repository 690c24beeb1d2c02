//! `ALTER TABLE`, without I/O: columns added (`ADD`), dropped (`DROP`),
//! and table options changed (`WITH`), with Cassandra's refusals.
//!
//! A dropped column's cells stay where they are, unread: a regular
//! table's rows are read by the columns the table has (`regular::read`).
//! Its name, type and the time it was dropped are kept
//! (`TableDef::dropped`): a column of that name may be added again, of
//! the same type, as in Cassandra, and reads only the cells written after
//! the drop. (A column dropped by a build that did not keep the time
//! stays dropped for good.)

use super::super::ast::{Alteration, TableName};
use super::super::response::CqlError;
use super::super::result::{CqlType, SchemaChange};
use super::{
    COLUMN_NAME_BYTES_MAX, Change, ColumnDef, Dropped, Keyspace, Kind, TableDef, table_options,
};

/// `ALTER TABLE table alteration`, given the table's keyspace (named
/// `ks`) as it is now, at `now_us`.
pub(crate) fn alter(
    table: &TableName,
    alteration: &Alteration,
    keyspace: Option<&Keyspace>,
    (ks, now_us): (&str, i64),
) -> Result<Change, CqlError> {
    let invalid = |m: String| CqlError::Invalid(m);
    let keyspace = keyspace.ok_or_else(|| invalid(format!("Keyspace {ks} does not exist")))?;
    let Some(i) = keyspace.tables.iter().position(|t| t.name == table.name) else {
        return Err(invalid(format!("unconfigured table {}", table.name)));
    };
    let mut next = keyspace.clone();
    let t = &mut next.tables[i];
    match alteration {
        Alteration::Add(columns) => add(t, columns)?,
        Alteration::Drop(names) => drop(t, names, now_us)?,
        Alteration::With(options) => {
            let (ttl, comment, gc_grace) = table_options(options)?;
            if ttl > 0 && t.is_counter() {
                return Err(invalid(
                    "Cannot set default_time_to_live on a table with counters".into(),
                ));
            }
            let named = |n: &str| options.iter().any(|(o, _)| o == n);
            if named("default_time_to_live") {
                t.default_ttl_s = ttl;
            }
            if named("comment") {
                t.comment = comment;
            }
            if let Some(g) = gc_grace {
                t.gc_grace_s = g;
            }
        }
    }
    Ok(Change::Put(
        next,
        SchemaChange {
            change: "UPDATED",
            keyspace: keyspace.name.clone(),
            table: Some(table.name.clone()),
        },
    ))
}

fn add(t: &mut TableDef, columns: &[(String, CqlType, bool)]) -> Result<(), CqlError> {
    let invalid = |m: String| Err(CqlError::Invalid(m));
    let clustering = t.columns.iter().any(|c| c.kind == Kind::Clustering);
    for (name, ty, is_static) in columns {
        if name.is_empty() || name.len() > COLUMN_NAME_BYTES_MAX {
            return invalid(format!(
                "a column name is 1 to {COLUMN_NAME_BYTES_MAX} bytes: {} given",
                name.len()
            ));
        }
        if t.columns.iter().any(|c| c.name == *name) {
            return invalid(format!(
                "Invalid column name {name} because it conflicts with an existing column"
            ));
        }
        match t.dropped.iter().find(|d| d.name == *name).map(|d| &d.was) {
            Some(None) => {
                return invalid(format!(
                    "Cannot re-add previously dropped column '{name}': when it was dropped is \
                     not known, so its old cells would read again"
                ));
            }
            Some(Some((was, _))) if was != ty => {
                return invalid(format!(
                    "Cannot re-add previously dropped column '{name}' of type {}, incompatible \
                     with previous type {}",
                    ty.name(),
                    was.name()
                ));
            }
            _ => {}
        }
        match (t.is_counter(), *ty == CqlType::Counter) {
            (true, false) => {
                return invalid(format!(
                    "Cannot add a non counter column ({name}) in a counter column family"
                ));
            }
            (false, true) => {
                return invalid(format!(
                    "Cannot add a counter column ({name}) in a non counter column family"
                ));
            }
            _ => {}
        }
        if matches!(ty, CqlType::List(_) | CqlType::Set(_) | CqlType::Map(..)) {
            return invalid(format!(
                "{name} is a {}: collections are not served yet",
                ty.name()
            ));
        }
        if *is_static && (!clustering || t.is_counter()) {
            return invalid(format!(
                "Static columns are only useful (and thus allowed) if the table has at least one \
                 clustering column: {name}"
            ));
        }
        t.columns.push(ColumnDef {
            name: name.clone(),
            ty: ty.clone(),
            kind: if *is_static {
                Kind::Static
            } else {
                Kind::Regular
            },
            descending: false,
        });
    }
    Ok(())
}

fn drop(t: &mut TableDef, names: &[String], now_us: i64) -> Result<(), CqlError> {
    let invalid = |m: String| Err(CqlError::Invalid(m));
    for name in names {
        let Some(i) = t.columns.iter().position(|c| c.name == *name) else {
            return invalid(format!("Column {name} was not found in table {}", t.name));
        };
        if matches!(t.columns[i].kind, Kind::PartitionKey | Kind::Clustering) {
            return invalid(format!("Cannot drop PRIMARY KEY part {name}"));
        }
        if t.is_counter() {
            return invalid(format!(
                "Cannot drop counter column {name}: dropping counters is not served"
            ));
        }
        let column = t.columns.remove(i);
        t.dropped.retain(|d| d.name != *name);
        t.dropped.push(Dropped {
            name: name.clone(),
            was: Some((column.ty, now_us)),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::super::super::parse::parse;
    use super::super::{Change, Fresh, Keyspace, apply};
    use super::*;

    fn keyspace(create: &str) -> Keyspace {
        let ks = Keyspace {
            name: "ks".into(),
            durable_writes: true,
            tables: Vec::new(),
        };
        match apply(
            &parse(create).unwrap().0,
            &[ks],
            Some("ks"),
            3,
            [1; 16].into(),
        )
        .unwrap()
        {
            Change::Put(ks, _) => ks,
            other => panic!("{other:?}"),
        }
    }

    fn altered(ks: &Keyspace, q: &str) -> Result<Keyspace, CqlError> {
        match apply(
            &parse(q).unwrap().0,
            std::slice::from_ref(ks),
            Some("ks"),
            3,
            Fresh {
                id: [2; 16],
                token_order: true,
                sorted_rows: true,
                now_us: 2_000,
            },
        )? {
            Change::Put(ks, change) => {
                assert_eq!(change.change, "UPDATED");
                Ok(ks)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn columns_come_and_go_and_a_dropped_name_stays_taken() {
        let ks = keyspace("CREATE TABLE t (k int, c int, v text, PRIMARY KEY (k, c))");
        let ks = altered(&ks, "ALTER TABLE t ADD (n bigint, s text STATIC)").unwrap();
        let names: Vec<&str> = ks.tables[0]
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["k", "c", "v", "n", "s"]);
        assert_eq!(ks.tables[0].columns[4].kind, Kind::Static);
        let ks = altered(&ks, "ALTER TABLE t DROP v").unwrap();
        let dropped = &ks.tables[0].dropped;
        assert_eq!(dropped[0].name, "v");
        assert_eq!(dropped[0].was, Some((CqlType::Varchar, 2_000)));
        assert_eq!(ks.tables[0].dropped_until("v"), Some(2_000));
        assert_eq!(
            Keyspace::decode("ks", &ks.encode()).unwrap(),
            ks,
            "reads back"
        );
        let ks = altered(
            &ks,
            "ALTER TABLE t WITH default_time_to_live = 60 AND comment = 'x'",
        )
        .unwrap();
        assert_eq!(
            (ks.tables[0].default_ttl_s, ks.tables[0].comment.as_str()),
            (60, "x")
        );
        // Added again, of its type: it reads cells after the drop alone.
        let again = altered(&ks, "ALTER TABLE t ADD v text").unwrap();
        assert!(again.tables[0].columns.iter().any(|c| c.name == "v"));
        assert_eq!(again.tables[0].dropped_until("v"), Some(2_000));
        let old = Keyspace {
            tables: vec![TableDef {
                dropped: vec![Dropped {
                    name: "v".into(),
                    was: None,
                }],
                ..ks.tables[0].clone()
            }],
            ..ks.clone()
        };
        let e = altered(&old, "ALTER TABLE t ADD v text").unwrap_err();
        assert!(e.message().contains("is not known"), "{e:?}");
        for (q, words) in [
            (
                "ALTER TABLE t ADD v int",
                "incompatible with previous type text",
            ),
            (
                "ALTER TABLE t ADD n int",
                "conflicts with an existing column",
            ),
            ("ALTER TABLE t ADD x counter", "Cannot add a counter column"),
            ("ALTER TABLE t DROP k", "Cannot drop PRIMARY KEY part k"),
            (
                "ALTER TABLE t DROP nope",
                "Column nope was not found in table t",
            ),
            ("ALTER TABLE nope ADD x int", "unconfigured table nope"),
        ] {
            let e = altered(&ks, q).unwrap_err();
            assert!(e.message().contains(words), "{q}: {}", e.message());
        }
        let counters = keyspace("CREATE TABLE c (k int PRIMARY KEY, n counter)");
        let e = altered(&counters, "ALTER TABLE c ADD v text").unwrap_err();
        assert!(
            e.message().contains("Cannot add a non counter column"),
            "{e:?}"
        );
    }
}
