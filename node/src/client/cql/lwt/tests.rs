#![allow(clippy::unwrap_used, reason = "tests")]

use super::super::ast::Statement;
use super::super::body::Value;
use super::super::parse::parse;
use super::super::schema::TableDef;
use super::*;

fn leases() -> TableDef {
    super::super::schema::test_table(
        "CREATE TABLE leases (name text PRIMARY KEY, owner text, n int)",
    )
}

fn text(s: &str) -> Cell {
    Some(s.as_bytes().to_vec())
}

#[test]
fn a_cell_and_its_register_say_the_same() {
    for s in [
        lww::value(1_000, b"client_1", 180_000).unwrap(),
        lww::value(-5, b"", 0).unwrap(),
        lww::tombstone(2_000, 1),
    ] {
        let r = register(b"owner", &s).unwrap();
        assert_eq!(stored(&r).unwrap(), s);
    }
    // A tombstone's register never expires (it must go on deleting).
    assert_eq!(register(b"owner", &lww::tombstone(9, 1)).unwrap().at_ms, 0);
    let bad = Register {
        column: b"x".to_vec(),
        value: vec![1, 2],
        at_ms: 0,
    };
    assert_eq!(stored(&bad), None);
}

#[test]
fn the_agreed_registers_win_over_older_cells_and_fill_in_unwritten_ones() {
    let mut cells = Partition::new();
    cells.insert(b"owner".to_vec(), lww::value(1_000, b"old", 0).unwrap());
    cells.insert(
        b"n".to_vec(),
        lww::value(5_000, &7i32.to_be_bytes(), 0).unwrap(),
    );
    let decided = vec![(b"owner".to_vec(), lww::value(2_000, b"new", 0).unwrap())];
    let registers = after(&Registers::default(), &decided, 0).unwrap();
    let state = merged(cells.clone(), &registers);
    let owner = lww::read(&state[&b"owner"[..]], 0).unwrap();
    assert_eq!(owner.value, Some(&b"new"[..]));
    assert_eq!(unwritten(&registers, &cells), decided);
    assert!(
        unwritten(&registers, &state).is_empty(),
        "written: nothing to repair"
    );
    assert_eq!(later_than(&state, 1), 5_001, "after the newest cell");
    assert_eq!(later_than(&state, 10), 10_000, "or now");
    // An expired register is dropped by the next transaction.
    let short = vec![(b"owner".to_vec(), lww::value(3_000, b"ttl", 50).unwrap())];
    let with_ttl = after(&registers, &short, 0).unwrap();
    assert!(after(&with_ttl, &[], 60).unwrap().0.is_empty());
}

/// The plan of `qs` (a batch if more than one) on `t`.
fn plan_of(t: &TableDef, qs: &[&str]) -> Result<Plan, CqlError> {
    let statements: Vec<Statement> = qs.iter().map(|q| parse(q).unwrap().0).collect();
    let with: Vec<(&Statement, &[Value])> = statements.iter().map(|s| (s, &[][..])).collect();
    let target = Target {
        keyspace: "ks",
        table: t,
    };
    plan(target, &with, qs.len() > 1)
}

#[test]
fn conditions_answer_as_cassandra_does() {
    let t = leases();
    let target = Target {
        keyspace: "ks",
        table: &t,
    };
    let meta = super::super::regular::all_columns(target);
    // name, n, owner, then the functions' columns.
    let mut row: Vec<Cell> = vec![text("foo"), cell::int(3), text("client_1")];
    row.extend(std::iter::repeat_n(None, meta.columns.len() - 3));
    let judge = |q: &str, row: Option<&Vec<Cell>>| {
        let p = plan_of(&t, &[q]).unwrap();
        let j = judge(target, &meta, &[(&p.rows[0].1, row)], false).unwrap();
        let names: Vec<String> = j.columns.into_iter().map(|c| c.name).collect();
        (j.applied, names, j.rows)
    };
    let insert = "INSERT INTO leases (name, owner) VALUES ('foo', 'client_2') IF NOT EXISTS";
    assert_eq!(judge(insert, None), (true, vec![], vec![]));
    let (applied, names, rows) = judge(insert, Some(&row));
    assert!(!applied);
    assert_eq!(
        names,
        ["name", "n", "owner"],
        "the existing row, as SELECT * has it"
    );
    assert_eq!(rows, [row[..3].to_vec()]);
    let renew = "UPDATE leases SET owner = 'client_1' WHERE name = 'foo' IF owner = 'client_1'";
    assert_eq!(judge(renew, Some(&row)), (true, vec![], vec![]));
    let steal =
        "UPDATE leases SET owner = 'client_2' WHERE name = 'foo' IF owner = 'client_2' AND n > 1";
    assert_eq!(
        judge(steal, Some(&row)),
        (
            false,
            vec!["owner".into(), "n".into()],
            vec![vec![text("client_1"), cell::int(3)]]
        )
    );
    assert!(!judge(steal, None).0);
    assert_eq!(
        judge(steal, None).2,
        Vec::<Vec<Cell>>::new(),
        "no row: [applied] alone"
    );
    let gone = "DELETE FROM leases WHERE name = 'foo' IF EXISTS";
    assert!(judge(gone, Some(&row)).0 && !judge(gone, None).0);
    let ne = "UPDATE leases SET n = 1 WHERE name = 'foo' IF owner != 'x' AND n IN (1, 3)";
    assert!(judge(ne, Some(&row)).0);
    let key = "UPDATE leases SET n = 1 WHERE name = 'foo' IF name = 'foo'";
    assert_eq!(
        plan_of(&t, &[key]).unwrap_err().message(),
        "PRIMARY KEY column 'name' cannot have IF conditions"
    );
    let stamped = "UPDATE leases USING TIMESTAMP 5 SET n = 1 WHERE name = 'foo' IF n = 1";
    assert_eq!(
        plan_of(&t, &[stamped]).unwrap_err().message(),
        "Cannot provide custom timestamp for conditional updates"
    );
}

fn log_table() -> TableDef {
    crate::client::cql::schema::test_table(
        "CREATE TABLE log (k text, v int, a text, b int, PRIMARY KEY (k, v)) \
         WITH CLUSTERING ORDER BY (v DESC)",
    )
}

#[test]
fn a_conditional_batch_is_one_partition_its_rows_in_clustering_order() {
    let t = log_table();
    let p = plan_of(
        &t,
        &[
            "UPDATE log SET a = 'x' WHERE k = 'p' AND v = 1 IF a = 'y'",
            "INSERT INTO log (k, v, a) VALUES ('p', 3, 'z')",
            "UPDATE log SET b = 2 WHERE k = 'p' AND v = 2 IF b > 1",
            "UPDATE log SET b = 3 WHERE k = 'p' AND v = 1 IF b = 1",
            "DELETE FROM log WHERE k = 'p' AND v > 5",
        ],
    )
    .unwrap();
    assert_eq!(p.key, [b"p".to_vec()]);
    let clustering: Vec<i32> = p
        .rows
        .iter()
        .map(|(c, _)| i32::from_be_bytes(c[0].as_slice().try_into().unwrap()))
        .collect();
    assert_eq!(clustering, [2, 1], "descending, one entry per row");
    let Check::Columns(on_1) = &p.rows[1].1 else {
        panic!("{p:?}")
    };
    let names: Vec<&str> = on_1.iter().map(|b| b.column.as_str()).collect();
    assert_eq!(names, ["a", "b"], "a row's conditions add up");
    let refused = |qs: &[&str]| plan_of(&t, qs).unwrap_err().message().to_string();
    assert_eq!(
        refused(&[
            "UPDATE log SET a = 'x' WHERE k = 'p' AND v = 1 IF a = 'y'",
            "UPDATE log SET a = 'x' WHERE k = 'q' AND v = 1",
        ]),
        "Batch with conditions cannot span multiple partitions"
    );
    assert_eq!(
        refused(&[
            "INSERT INTO log (k, v) VALUES ('p', 1) IF NOT EXISTS",
            "UPDATE log SET a = 'x' WHERE k = 'p' AND v = 1 IF a = 'y'",
        ]),
        "Cannot mix IF conditions and IF NOT EXISTS for the same row"
    );
    assert_eq!(
        refused(&[
            "INSERT INTO log (k, v) VALUES ('p', 1) IF NOT EXISTS",
            "DELETE FROM log WHERE k = 'p' AND v = 1 IF EXISTS",
        ]),
        "Cannot mix IF EXISTS and IF NOT EXISTS conditions for the same row"
    );
    assert_eq!(
        refused(&[
            "INSERT INTO log (k, v) VALUES ('p', 1) IF NOT EXISTS",
            "INSERT INTO log (k, v) VALUES ('p', 2) USING TIMESTAMP 4",
        ]),
        "Cannot provide custom timestamp for conditional BATCH"
    );
}

#[test]
fn a_failed_batch_shows_the_primary_key_and_each_checked_row() {
    let t = log_table();
    let target = Target {
        keyspace: "ks",
        table: &t,
    };
    let meta = super::super::regular::all_columns(target);
    let row = |v: i32, a: &str, b: i32| {
        let mut r: Vec<Cell> = vec![text("p"), cell::int(v), text(a), cell::int(b)];
        r.extend(std::iter::repeat_n(None, meta.columns.len() - 4));
        r
    };
    let names = |j: &Judged| -> Vec<String> { j.columns.iter().map(|c| c.name.clone()).collect() };
    let p = plan_of(
        &t,
        &[
            "UPDATE log SET a = 'x' WHERE k = 'p' AND v = 2 IF b = 5",
            "UPDATE log SET a = 'x' WHERE k = 'p' AND v = 1 IF a = 'y'",
        ],
    )
    .unwrap();
    let (two, one) = (row(2, "q", 5), row(1, "r", 0));
    let checks = [(&p.rows[0].1, Some(&two)), (&p.rows[1].1, Some(&one))];
    let j = judge(target, &meta, &checks, true).unwrap();
    assert!(!j.applied, "one row's condition fails: nothing applies");
    assert_eq!(names(&j), ["k", "v", "b", "a"]);
    assert_eq!(
        j.rows,
        [
            vec![text("p"), cell::int(2), cell::int(5), text("q")],
            vec![text("p"), cell::int(1), cell::int(0), text("r")],
        ]
    );
    let holds = row(1, "y", 0);
    let checks = [(&p.rows[0].1, Some(&two)), (&p.rows[1].1, Some(&holds))];
    assert!(judge(target, &meta, &checks, true).unwrap().applied);
    // A row that does not exist shows nothing; IF NOT EXISTS shows all.
    let checks = [(&p.rows[0].1, None), (&p.rows[1].1, Some(&holds))];
    let j = judge(target, &meta, &checks, true).unwrap();
    assert_eq!((j.applied, j.rows.len()), (false, 1));
    let p = plan_of(
        &t,
        &[
            "INSERT INTO log (k, v) VALUES ('p', 2) IF NOT EXISTS",
            "UPDATE log SET a = 'x' WHERE k = 'p' AND v = 1 IF a = 'y'",
        ],
    )
    .unwrap();
    let checks = [(&p.rows[0].1, Some(&two)), (&p.rows[1].1, Some(&holds))];
    let j = judge(target, &meta, &checks, true).unwrap();
    assert_eq!(names(&j), ["k", "v", "a", "b"]);
    assert_eq!(j.rows, [two[..4].to_vec(), holds[..4].to_vec()]);
    // The single statement's answer (not a batch) leaves out the key.
    let single = plan_of(
        &t,
        &["UPDATE log SET a = 'x' WHERE k = 'p' AND v = 1 IF a = 'y'"],
    );
    let single = single.unwrap();
    let j = judge(target, &meta, &[(&single.rows[0].1, Some(&one))], false).unwrap();
    assert_eq!(
        (names(&j), j.rows),
        (vec!["a".to_string()], vec![vec![text("r")]])
    );
}
