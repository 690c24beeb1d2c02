#![allow(clippy::unwrap_used, reason = "tests")]

use super::super::ast::Statement;
use super::super::parse::parse;
use super::super::schema::{Change, Keyspace, TableDef, apply};
use super::*;

fn leases() -> TableDef {
    let ks = Keyspace {
        name: "ks".into(),
        durable_writes: true,
        tables: Vec::new(),
    };
    let create = "CREATE TABLE leases (name text PRIMARY KEY, owner text, n int)";
    match apply(&parse(create).unwrap().0, &[ks], Some("ks"), 3, [1; 16]).unwrap() {
        Change::Put(ks, _) => ks.tables[0].clone(),
        other => panic!("{other:?}"),
    }
}

fn condition(q: &str) -> Condition {
    parse(q).unwrap().0.condition().unwrap()
}

fn text(s: &str) -> Cell {
    Some(s.as_bytes().to_vec())
}

#[test]
fn a_cell_and_its_register_say_the_same() {
    for s in [
        lww::value(1_000, b"client_1", 180_000).unwrap(),
        lww::value(-5, b"", 0).unwrap(),
        lww::tombstone(2_000),
    ] {
        let r = register(b"owner", &s).unwrap();
        assert_eq!(stored(&r).unwrap(), s);
    }
    // A tombstone's register never expires (it must go on deleting).
    assert_eq!(register(b"owner", &lww::tombstone(9)).unwrap().at_ms, 0);
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
        let (applied, cols, cells) = judge(target, &condition(q), (&meta, row), &[]).unwrap();
        let names: Vec<String> = cols.into_iter().map(|c| c.name).collect();
        (applied, names, cells)
    };
    let insert = "INSERT INTO leases (name, owner) VALUES ('foo', 'client_2') IF NOT EXISTS";
    assert_eq!(judge(insert, None), (true, vec![], vec![]));
    let (applied, names, cells) = judge(insert, Some(&row));
    assert!(!applied);
    assert_eq!(
        names,
        ["name", "n", "owner"],
        "the existing row, as SELECT * has it"
    );
    assert_eq!(cells, row[..3]);
    let renew = "UPDATE leases SET owner = 'client_1' WHERE name = 'foo' IF owner = 'client_1'";
    assert_eq!(
        judge(renew, Some(&row)),
        (true, vec!["owner".into()], vec![text("client_1")])
    );
    let steal =
        "UPDATE leases SET owner = 'client_2' WHERE name = 'foo' IF owner = 'client_2' AND n > 1";
    assert_eq!(
        judge(steal, Some(&row)),
        (
            false,
            vec!["owner".into(), "n".into()],
            vec![text("client_1"), cell::int(3)]
        )
    );
    assert_eq!(
        judge(steal, None),
        (false, vec![], vec![]),
        "no row: [applied] alone"
    );
    let gone = "DELETE FROM leases WHERE name = 'foo' IF EXISTS";
    assert!(judge(gone, Some(&row)).0 && !judge(gone, None).0);
    let ne = "UPDATE leases SET n = 1 WHERE name = 'foo' IF owner != 'x' AND n IN (1, 3)";
    assert!(judge(ne, Some(&row)).0);
    let key = "UPDATE leases SET n = 1 WHERE name = 'foo' IF name = 'foo'";
    let e = super::judge(target, &condition(key), (&meta, Some(&row)), &[]).unwrap_err();
    assert_eq!(
        e.message(),
        "PRIMARY KEY column 'name' cannot have IF conditions"
    );
    let _: Option<Statement> = None;
}
