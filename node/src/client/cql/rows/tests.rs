use super::super::ast::Statement;
use super::super::parse::parse;
use super::*;

use super::super::schema::test_table as table;

fn target(t: &TableDef) -> Target<'_> {
    Target {
        keyspace: "ks",
        table: t,
    }
}

fn int(v: i32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

fn parsed(q: &str) -> Statement {
    parse(q).unwrap().0
}

fn updated(t: &TableDef, q: &str, values: &[Value]) -> Result<Writes, CqlError> {
    let Statement::Update(u) = parsed(q) else {
        panic!("{q}")
    };
    update(target(t), &u, values)
}

#[test]
fn an_update_adds_to_each_counter_of_each_row_it_names() {
    let t = table("CREATE TABLE cf (pk int PRIMARY KEY, c counter, d counter)");
    let w = updated(
        &t,
        "UPDATE cf SET c = c + 6, d = d - ? WHERE pk = 0",
        &[Value::Bytes(2i64.to_be_bytes().to_vec())],
    )
    .unwrap();
    let p = cells::partition(&t, &[int(0)]).unwrap();
    assert_eq!(w.ttl_s, 0);
    assert_eq!(
        w.cells,
        [
            CellWrite {
                partition: p.clone(),
                column: b"c".to_vec(),
                op: CellOp::Add(6)
            },
            CellWrite {
                partition: p,
                column: b"d".to_vec(),
                op: CellOp::Add(-2)
            },
        ]
    );
    let w = updated(
        &t,
        "UPDATE cf USING TTL 60 SET c = 5 WHERE pk IN (1, 2)",
        &[],
    )
    .unwrap();
    assert_eq!(w.ttl_s, 60);
    assert_eq!(w.cells.len(), 2);
    assert!(w.cells.iter().all(|c| c.op == CellOp::Set(5)));
}

#[test]
fn an_update_names_whole_rows() {
    let t = table(
        "CREATE TABLE cf (a text, b int, ck int, ck2 text, c counter, \
         PRIMARY KEY ((a, b), ck, ck2))",
    );
    let w = updated(
        &t,
        "UPDATE cf SET c = c + 1 WHERE a = 'x' AND b = 1 AND ck IN (1, 2) AND ck2 = 'y'",
        &[],
    )
    .unwrap();
    assert_eq!(w.cells.len(), 2);
    assert_eq!(
        w.cells[0].column,
        cells::Layout::of(&t)
            .column(&[int(1), b"y".to_vec()], "c")
            .unwrap()
    );
    for (q, wanted) in [
        (
            "UPDATE cf SET c = c + 1 WHERE a = 'x' AND ck = 1 AND ck2 = 'y'",
            "Some partition key parts are missing: b",
        ),
        (
            "UPDATE cf SET c = c + 1 WHERE a = 'x' AND b = 1 AND ck = 1",
            "Some clustering keys are missing: ck2",
        ),
        (
            "UPDATE cf SET c = c + 1 WHERE a = 'x' AND b = 1 AND ck2 = 'y'",
            "PRIMARY KEY column \"ck2\" cannot be restricted as preceding column \"ck\" is not restricted",
        ),
        (
            "UPDATE cf SET c = c + 1 WHERE a = 'x' AND b > 1 AND ck = 1 AND ck2 = 'y'",
            "Only EQ and IN relation are supported on the partition key (unless you use the token() function)",
        ),
        (
            "UPDATE cf SET a = a + 1 WHERE a = 'x' AND b = 1 AND ck = 1 AND ck2 = 'y'",
            "PRIMARY KEY part a found in SET part",
        ),
        (
            "UPDATE cf SET c = c + 1, c = c + 2 WHERE a = 'x' AND b = 1 AND ck = 1 AND ck2 = 'y'",
            "Multiple incompatible setting of column c",
        ),
        (
            "UPDATE cf USING TIMESTAMP 5 SET c = c + 1 WHERE a = 'x' AND b = 1 AND ck = 1 AND ck2 = 'y'",
            "Cannot provide custom timestamp for counter updates",
        ),
        (
            "UPDATE cf USING TTL -1 SET c = c + 1 WHERE a = 'x' AND b = 1 AND ck = 1 AND ck2 = 'y'",
            "A TTL must be greater or equal to 0, but was -1",
        ),
    ] {
        let e = updated(&t, q, &[]).unwrap_err();
        assert_eq!(e, CqlError::Invalid(wanted.into()), "{q}");
    }
}

#[test]
fn bad_values_are_refused() {
    let t = table("CREATE TABLE cf (pk int PRIMARY KEY, c counter)");
    let q = "UPDATE cf SET c = c + ? WHERE pk = ?";
    let ok = Value::Bytes(1i64.to_be_bytes().to_vec());
    assert!(updated(&t, q, &[ok.clone(), Value::Bytes(int(1))]).is_ok());
    for values in [
        [ok.clone(), Value::Null],
        [ok.clone(), Value::Bytes(vec![1])],
        [Value::Null, Value::Bytes(int(1))],
        [Value::Bytes(vec![0; 4]), Value::Bytes(int(1))],
    ] {
        let e = updated(&t, q, &values).unwrap_err();
        assert_eq!(e.code(), 0x2200, "{values:?}: {e:?}");
    }
    let e = updated(
        &t,
        "UPDATE cf SET c = c - ? WHERE pk = 1",
        &[Value::Bytes(i64::MIN.to_be_bytes().to_vec())],
    )
    .unwrap_err();
    assert!(e.message().contains("overflows"), "{e:?}");
    let ins: Vec<String> = (0..=COMBINATIONS_MAX).map(|i| i.to_string()).collect();
    let q = format!("UPDATE cf SET c = c + 1 WHERE pk IN ({})", ins.join(", "));
    assert!(updated(&t, &q, &[]).is_err(), "too many partitions");
}

fn deleted(t: &TableDef, q: &str) -> Result<Resets, CqlError> {
    let Statement::Delete(d) = parsed(q) else {
        panic!("{q}")
    };
    delete(target(t), &d, &[])
}

#[test]
fn a_delete_resets_named_cells_or_reads_first() {
    let t = table("CREATE TABLE cf (pk int, ck int, c counter, d counter, PRIMARY KEY (pk, ck))");
    let p = cells::partition(&t, &[int(1)]).unwrap();
    let Resets::Cells(cells) = deleted(&t, "DELETE FROM cf WHERE pk = 1 AND ck = 2").unwrap()
    else {
        panic!("a whole row names its cells")
    };
    let col = |n: &str| cells::Layout::of(&t).column(&[int(2)], n).unwrap();
    assert_eq!(cells, [(p.clone(), col("c")), (p.clone(), col("d"))]);
    let Resets::Cells(cells) = deleted(&t, "DELETE d FROM cf WHERE pk = 1 AND ck = 2").unwrap()
    else {
        panic!()
    };
    assert_eq!(cells, [(p.clone(), col("d"))]);
    let Resets::Read { rows, counters } =
        deleted(&t, "DELETE FROM cf WHERE pk = 1 AND ck > 2").unwrap()
    else {
        panic!("a range is read first")
    };
    assert_eq!(counters, ["c", "d"]);
    let read: BTreeMap<Vec<u8>, Option<i64>> = [
        (
            cells::Layout::of(&t).column(&[int(2)], "c").unwrap(),
            Some(1),
        ),
        (
            cells::Layout::of(&t).column(&[int(3)], "c").unwrap(),
            Some(1),
        ),
        (cells::Layout::of(&t).column(&[int(4)], "d").unwrap(), None),
        (
            cells::Layout::of(&t).column(&[int(-5)], "d").unwrap(),
            Some(1),
        ),
    ]
    .into();
    let live = live_in(target(&t), &rows.clustering, &counters, &read);
    assert_eq!(
        live,
        [cells::Layout::of(&t).column(&[int(3)], "c").unwrap()]
    );
    let e = deleted(&t, "DELETE pk FROM cf WHERE pk = 1").unwrap_err();
    assert!(e.message().starts_with("Invalid identifier pk"), "{e:?}");
}

fn selected(
    t: &TableDef,
    q: &str,
    read: &[BTreeMap<Vec<u8>, Option<i64>>],
) -> Result<(Metadata, Vec<Vec<Cell>>), CqlError> {
    let Statement::Select(s) = parsed(q) else {
        panic!("{q}")
    };
    let plan = query(target(t), &s, &[])?;
    let rows = table_rows(target(t), &s, &plan, read);
    project(target(t), &s, rows, &[])
}

#[test]
fn a_select_answers_rows_in_clustering_order() {
    let t = table(
        "CREATE TABLE cf (pk int, ck int, c counter, b counter, PRIMARY KEY (pk, ck)) \
         WITH CLUSTERING ORDER BY (ck DESC)",
    );
    let col = |ck: i32, n: &str| cells::Layout::of(&t).column(&[int(ck)], n).unwrap();
    let read: BTreeMap<Vec<u8>, Option<i64>> = [
        (col(-1, "c"), Some(10)),
        (col(2, "c"), Some(20)),
        (col(2, "b"), Some(21)),
        (col(3, "c"), None),
        (b"junk".to_vec(), Some(1)),
    ]
    .into();
    let (meta, rows) = selected(
        &t,
        "SELECT * FROM cf WHERE pk = 7",
        std::slice::from_ref(&read),
    )
    .unwrap();
    let names: Vec<&str> = meta.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["pk", "ck", "b", "c"]);
    let big = |v| cell::bigint(v);
    assert_eq!(
        rows,
        [
            vec![Some(int(7)), Some(int(2)), big(21), big(20)],
            vec![Some(int(7)), Some(int(-1)), None, big(10)],
        ]
    );
    let (_, rows) = selected(
        &t,
        "SELECT ck, c FROM cf WHERE pk = 7 ORDER BY ck ASC LIMIT 1",
        std::slice::from_ref(&read),
    )
    .unwrap();
    assert_eq!(rows, [vec![Some(int(-1)), big(10)]]);
    let (_, rows) = selected(
        &t,
        "SELECT c FROM cf WHERE pk = 7 AND ck >= 0",
        std::slice::from_ref(&read),
    )
    .unwrap();
    assert_eq!(rows, [vec![big(20)]]);
    let (_, rows) = selected(
        &t,
        "SELECT COUNT(*) FROM cf WHERE pk = 7",
        std::slice::from_ref(&read),
    )
    .unwrap();
    assert_eq!(rows, [vec![big(2)]]);
    let e = selected(&t, "SELECT * FROM cf WHERE pk = 7 ORDER BY c", &[read]).unwrap_err();
    assert_eq!(e.code(), 0x2200);
    let e = selected(&t, "SELECT * FROM cf WHERE c = 1", &[]).unwrap_err();
    assert!(e.message().starts_with("Cannot restrict column c"), "{e:?}");
}

#[test]
fn a_select_of_partitions_in_order_answers_each() {
    let t = table("CREATE TABLE cf (pk int PRIMARY KEY, c counter)");
    let one: BTreeMap<Vec<u8>, Option<i64>> = [(b"c".to_vec(), Some(1))].into();
    let (_, rows) = selected(
        &t,
        "SELECT pk, c FROM cf WHERE pk IN (2, 1, 2)",
        &[one.clone(), BTreeMap::new()],
    )
    .unwrap();
    assert_eq!(rows, [vec![Some(int(2)), cell::bigint(1)]]);
    let e = selected(&t, "SELECT * FROM cf WHERE pk > 1", &[]).unwrap_err();
    assert!(e.message().starts_with("Only EQ and IN"), "{e:?}");
}

#[test]
fn a_select_of_no_partition_scans_the_table() {
    let t = table("CREATE TABLE cf (a int, b int, ck int, c counter, PRIMARY KEY ((a, b), ck))");
    let scan = |q: &str| {
        let Statement::Select(s) = parsed(q) else {
            panic!("{q}")
        };
        query(target(&t), &s, &[])
    };
    let q = scan("SELECT * FROM cf").unwrap();
    assert!(q.scan && q.rows.partitions.is_empty());
    let q = scan("SELECT * FROM cf WHERE ck > 1 ALLOW FILTERING").unwrap();
    assert_eq!(
        q.rows.clustering.range.as_ref().map(|r| r.0.is_some()),
        Some(true)
    );
    for (q, words) in [
        ("SELECT * FROM cf WHERE ck > 1", "ALLOW FILTERING"),
        (
            "SELECT * FROM cf WHERE a = 1",
            "Some partition key parts are missing: b",
        ),
        (
            "SELECT * FROM cf ORDER BY ck DESC",
            "ORDER BY is only supported",
        ),
        (
            "SELECT * FROM cf WHERE c = 1 ALLOW FILTERING",
            "Cannot restrict column c",
        ),
    ] {
        let e = scan(q).unwrap_err();
        assert!(e.message().contains(words), "{q}: {e:?}");
    }
    let mine = cells::partition(&t, &[int(1), int(2)]).unwrap();
    let mut other = mine.clone();
    other[3] ^= 1;
    assert_eq!(
        scanned(target(&t), vec![mine.clone(), other]),
        [(vec![int(1), int(2)], mine)]
    );
}
