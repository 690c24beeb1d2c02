#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;

use super::super::ast::{Select, Statement};
use super::super::parse::parse;
use super::super::result::Cell;
use super::super::rows::{Query, query};
use super::super::schema::TableDef;
use super::*;

use super::super::schema::test_table as table;

fn target(t: &TableDef) -> Target<'_> {
    Target {
        keyspace: "ks",
        table: t,
    }
}

/// A table's partitions as their replicas hold them: every write merged.
#[derive(Default)]
struct Store(BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Stored>>);

impl Store {
    /// Runs a write at `ts` (µs), `now_ms` its clock.
    fn write(&mut self, t: &TableDef, q: &str, ts: i64, now_ms: u64) -> Result<(), CqlError> {
        let tg = target(t);
        let writes = match parse(q).unwrap().0 {
            Statement::Insert(i) => {
                let at = stamp(
                    tg,
                    (i.ttl.as_ref(), i.timestamp.as_ref()),
                    &[],
                    (ts, now_ms),
                )?;
                insert(tg, &i, &[], at)?
            }
            Statement::Update(u) => {
                let at = stamp(
                    tg,
                    (u.ttl.as_ref(), u.timestamp.as_ref()),
                    &[],
                    (ts, now_ms),
                )?;
                update(tg, &u, &[], at)?
            }
            Statement::Delete(d) => {
                let at = stamp(tg, (None, d.timestamp.as_ref()), &[], (ts, now_ms))?;
                delete(tg, &d, &[], at)?
            }
            other => panic!("{other:?}"),
        };
        for (partition, cells) in writes {
            let p = self.0.entry(partition).or_default();
            for (column, cell) in cells {
                p.entry(column)
                    .or_default()
                    .merge(&cell, &tally_engine::Merger::default());
            }
        }
        Ok(())
    }

    /// A SELECT's rows at `now_ms`, each cell as text for the test.
    fn select(&self, t: &TableDef, q: &str, now_ms: u64) -> Vec<Vec<String>> {
        let Statement::Select(s) = parse(q).unwrap().0 else {
            panic!("{q}")
        };
        let tg = target(t);
        let q: Query = query(tg, &s, &[]).unwrap();
        let read: Vec<_> = q
            .rows
            .partitions
            .iter()
            .map(|(_, p)| self.0.get(p).cloned().unwrap_or_default())
            .collect();
        let all = table_rows(tg, &s, &q, &read, now_ms);
        let all = super::super::rows::per_partition_rows(tg, &q, all);
        let (meta, rows) = project(tg, &s, all, &[]).unwrap();
        rows.iter()
            .map(|r| {
                r.iter()
                    .zip(&meta.columns)
                    .map(|(c, col)| text(c, &col.ty))
                    .collect()
            })
            .collect()
    }
}

fn text(c: &Cell, ty: &CqlType) -> String {
    let Some(v) = c else {
        return "null".into();
    };
    match ty {
        CqlType::Varchar => String::from_utf8(v.clone()).unwrap(),
        CqlType::Int => i32::from_be_bytes(v[..4].try_into().unwrap()).to_string(),
        CqlType::Bigint => i64::from_be_bytes(v[..8].try_into().unwrap()).to_string(),
        other => format!("{other:?}"),
    }
}

fn rows(lines: &[&[&str]]) -> Vec<Vec<String>> {
    lines
        .iter()
        .map(|l| l.iter().map(|s| s.to_string()).collect())
        .collect()
}

#[test]
fn the_latest_write_of_each_column_wins_and_ties_go_as_cassandras() {
    // Recipe 2: a CvRDT of the latest value per actor.
    let t = table(
        "CREATE TABLE state (type text, actor text, value bigint, PRIMARY KEY (type, actor))",
    );
    let mut s = Store::default();
    let w = |s: &mut Store, q: &str| s.write(&t, q, 1, 0).unwrap();
    w(
        &mut s,
        "INSERT INTO state (type, actor, value) VALUES ('likes', 'a', 5) USING TIMESTAMP 1000",
    );
    w(
        &mut s,
        "INSERT INTO state (type, actor, value) VALUES ('likes', 'a', 8) USING TIMESTAMP 2000",
    );
    w(
        &mut s,
        "INSERT INTO state (type, actor, value) VALUES ('likes', 'a', 6) USING TIMESTAMP 1500",
    );
    w(
        &mut s,
        "INSERT INTO state (type, actor, value) VALUES ('likes', 'b', 4) USING TIMESTAMP 1000",
    );
    w(
        &mut s,
        "UPDATE state USING TIMESTAMP 1000 SET value = 3 WHERE type = 'likes' AND actor = 'b'",
    );
    w(
        &mut s,
        "UPDATE state USING TIMESTAMP 3000 SET value = 2 WHERE type = 'likes' AND actor = 'c'",
    );
    let q = "SELECT actor, value, writetime(value) FROM state WHERE type = 'likes'";
    assert_eq!(
        s.select(&t, q, 0),
        rows(&[
            &["a", "8", "2000"],
            &["b", "4", "1000"],
            &["c", "2", "3000"]
        ])
    );
    w(
        &mut s,
        "DELETE value FROM state USING TIMESTAMP 2000 WHERE type = 'likes' AND actor = 'a'",
    );
    w(
        &mut s,
        "DELETE value FROM state USING TIMESTAMP 3000 WHERE type = 'likes' AND actor = 'c'",
    );
    // a keeps its INSERT's marker, with a null value; c had none.
    assert_eq!(
        s.select(&t, q, 0),
        rows(&[&["a", "null", "null"], &["b", "4", "1000"]])
    );
}

#[test]
fn a_deleted_range_hides_what_was_written_at_or_before_it() {
    // Recipe 3: old increments folded, their clustering range deleted.
    let t = table(
        "CREATE TABLE log (type text, actor text, version bigint, delta bigint, \
         PRIMARY KEY (type, actor, version))",
    );
    let mut s = Store::default();
    for (v, ts) in [(1, 1001), (2, 1002), (3, 1003)] {
        let q = format!(
            "INSERT INTO log (type, actor, version, delta) VALUES ('likes', 'a', {v}, {v}) \
             USING TIMESTAMP {ts}"
        );
        s.write(&t, &q, 1, 0).unwrap();
    }
    s.write(
        &t,
        "DELETE FROM log USING TIMESTAMP 2000 WHERE type = 'likes' AND actor = 'a' AND version <= 2",
        1,
        0,
    )
    .unwrap();
    // Replayed at the deletion's own timestamp: still hidden.
    s.write(
        &t,
        "INSERT INTO log (type, actor, version, delta) VALUES ('likes', 'a', 2, 9) USING TIMESTAMP 2000",
        1,
        0,
    )
    .unwrap();
    let q = "SELECT version, delta FROM log WHERE type = 'likes'";
    assert_eq!(s.select(&t, q, 0), rows(&[&["3", "3"]]));
    s.write(
        &t,
        "INSERT INTO log (type, actor, version, delta) VALUES ('likes', 'a', 1, 7) USING TIMESTAMP 2001",
        1,
        0,
    )
    .unwrap();
    assert_eq!(s.select(&t, q, 0), rows(&[&["1", "7"], &["3", "3"]]));
    // The whole partition, at a later time.
    s.write(&t, "DELETE FROM log WHERE type = 'likes'", 5000, 0)
        .unwrap();
    assert!(s.select(&t, q, 0).is_empty());
    let e = s
        .write(
            &t,
            "DELETE delta FROM log WHERE type = 'likes' AND actor = 'a'",
            6000,
            0,
        )
        .unwrap_err();
    assert_eq!(
        e.message(),
        "Range deletions are not supported for specific columns"
    );
}

#[test]
fn ttls_end_values_and_rows_and_statics_belong_to_the_partition() {
    let t = table(
        "CREATE TABLE t (k int, c int, s text STATIC, v text, PRIMARY KEY (k, c)) \
         WITH default_time_to_live = 100",
    );
    let mut s = Store::default();
    s.write(
        &t,
        "INSERT INTO t (k, c, v) VALUES (1, 1, 'x') USING TTL 10",
        7,
        0,
    )
    .unwrap();
    s.write(&t, "INSERT INTO t (k, c, v) VALUES (1, 2, 'y')", 7, 0)
        .unwrap();
    s.write(
        &t,
        "UPDATE t USING TTL 0 SET s = 'shared' WHERE k = 1",
        7,
        0,
    )
    .unwrap();
    let q = "SELECT c, s, v, ttl(v), ttl(s) FROM t WHERE k = 1";
    assert_eq!(
        s.select(&t, q, 2_500),
        rows(&[
            &["1", "shared", "x", "8", "null"],
            &["2", "shared", "y", "98", "null"]
        ])
    );
    // Past its TTL the row is gone (its marker expired with it).
    assert_eq!(
        s.select(&t, q, 10_000),
        rows(&[&["2", "shared", "y", "90", "null"]])
    );
    s.write(&t, "DELETE FROM t WHERE k = 1 AND c = 2", 8, 0)
        .unwrap();
    // Only the static column is left: one row of the partition.
    assert_eq!(
        s.select(&t, "SELECT k, c, s FROM t WHERE k = 1", 20_000),
        rows(&[&["1", "null", "shared"]])
    );
    let e = s
        .write(&t, "UPDATE t SET v = 'z' WHERE k = 1", 9, 0)
        .unwrap_err();
    assert!(
        e.message().contains("Some clustering keys are missing"),
        "{e:?}"
    );
}

#[test]
fn writes_that_name_keys_wrongly_are_refused_in_cassandras_words() {
    let t = table("CREATE TABLE t (k int, c int, v text, PRIMARY KEY (k, c))");
    let mut s = Store::default();
    for (q, words) in [
        (
            "INSERT INTO t (k, v) VALUES (1, 'x')",
            "Some clustering keys are missing: c",
        ),
        (
            "INSERT INTO t (c, v) VALUES (1, 'x')",
            "Some partition key parts are missing: k",
        ),
        (
            "INSERT INTO t (k, c, v, v) VALUES (1, 1, 'x', 'y')",
            "Multiple definitions found for column v",
        ),
        (
            "UPDATE t SET c = 2 WHERE k = 1 AND c = 1",
            "PRIMARY KEY part c found in SET part",
        ),
        (
            "UPDATE t SET v = v + 'a' WHERE k = 1 AND c = 1",
            "for non counter column v",
        ),
        (
            "INSERT INTO t (k, c, nope) VALUES (1, 1, 2)",
            "Undefined column name nope",
        ),
    ] {
        let e = s.write(&t, q, 1, 0).unwrap_err();
        assert!(e.message().contains(words), "{q}: {}", e.message());
    }
    let _: Option<Select> = None;
}

#[test]
fn aggregates_sum_a_partitions_rows_and_its_groups() {
    // Recipe 1: a CmRDT log of increments, summed on read.
    let t = table(
        "CREATE TABLE log (type text, actor text, version bigint, delta bigint, \
         PRIMARY KEY (type, actor, version))",
    );
    let mut s = Store::default();
    for (actor, version, delta) in [("a", 1, 5), ("a", 2, 3), ("b", 1, -2), ("a", 2, 3)] {
        let q = format!(
            "INSERT INTO log (type, actor, version, delta) VALUES ('likes', '{actor}', {version}, {delta})"
        );
        s.write(&t, &q, 1, 0).unwrap();
    }
    let sum = |s: &Store, q: &str| s.select(&t, q, 0);
    assert_eq!(
        sum(&s, "SELECT sum(delta) FROM log WHERE type = 'likes'"),
        rows(&[&["6"]])
    );
    assert_eq!(
        sum(
            &s,
            "SELECT actor, sum(delta), count(delta), max(version) FROM log WHERE type = 'likes' GROUP BY actor"
        ),
        rows(&[&["a", "8", "2", "2"], &["b", "-2", "1", "1"]])
    );
    // No rows: one row, the sum 0, the others as Cassandra gives them.
    assert_eq!(
        sum(
            &s,
            "SELECT sum(delta), min(delta), count(delta) FROM log WHERE type = 'shares'"
        ),
        rows(&[&["0", "null", "0"]])
    );
}

#[test]
fn distinct_and_per_partition_limit_take_the_first_rows_of_each_partition() {
    let t = table("CREATE TABLE t (k int, c int, s text STATIC, v text, PRIMARY KEY (k, c))");
    let mut s = Store::default();
    for (k, c) in [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)] {
        let q = format!("INSERT INTO t (k, c, s, v) VALUES ({k}, {c}, 's{k}', 'v{c}')");
        s.write(&t, &q, 1, 0).unwrap();
    }
    assert_eq!(
        s.select(
            &t,
            "SELECT k, c FROM t WHERE k IN (1, 2) PER PARTITION LIMIT 2",
            0
        ),
        rows(&[&["1", "1"], &["1", "2"], &["2", "1"], &["2", "2"]])
    );
    assert_eq!(
        s.select(&t, "SELECT DISTINCT k, s FROM t WHERE k IN (1, 2)", 0),
        rows(&[&["1", "s1"], &["2", "s2"]])
    );
    let Statement::Select(sel) = parse("SELECT DISTINCT k, v FROM t").unwrap().0 else {
        panic!()
    };
    let e = query(target(&t), &sel, &[]).unwrap_err();
    assert!(e.message().contains("(not v)"), "{e:?}");
}
