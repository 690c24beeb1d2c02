#![allow(clippy::unwrap_used, reason = "tests")]

use super::super::ast::Statement;
use super::super::parse::parse;
use super::super::rows::{Target, update};
use super::*;

use super::super::schema::test_table as table;

/// The one cell `update` (of one counter of one row) writes.
fn written(t: &TableDef, update_text: &str) -> (Vec<u8>, Vec<u8>) {
    let Statement::Update(u) = parse(update_text).unwrap().0 else {
        panic!("{update_text}")
    };
    let target = Target {
        keyspace: "ks",
        table: t,
    };
    let mut w = update(target, &u, &[]).unwrap();
    assert_eq!(w.cells.len(), 1);
    let cell = w.cells.remove(0);
    (cell.partition, cell.column)
}

#[test]
fn a_name_and_a_field_spell_the_cell_an_update_writes() {
    let t = table(
        "CREATE TABLE votes (poll text, region int, at timestamp, day date, voter uuid, \
         raw blob, ok boolean, ip inet, n bigint, s smallint, b tinyint, \"Hits\" counter, \
         PRIMARY KEY ((poll, region), at, day, voter, raw, ok, ip, n, s, b))",
    );
    let (partition, column) = written(
        &t,
        "UPDATE votes SET \"Hits\" = \"Hits\" + 1 WHERE poll = 'it''s' AND region = -3 \
         AND at = '2026-11-30 12:00:00.250+0000' AND day = '2024-02-29' \
         AND voter = 12345678-9abc-def0-1234-56789abcdef0 AND raw = 0x00ff AND ok = true \
         AND ip = '::1' AND n = -9000000000 AND s = 7 AND b = -1",
    );
    let name = parse_name(b"\xffcql:ks.votes:'it''s', -3").unwrap();
    assert_eq!(
        name,
        Name {
            keyspace: "ks".into(),
            table: "votes".into(),
            key: vec![Literal::Str("it's".into()), Literal::Int(-3)],
        }
    );
    assert_eq!(self::partition(&t, &name.key).unwrap(), partition);
    let printed = field(&t, &column).unwrap();
    assert_eq!(
        String::from_utf8(printed.clone()).unwrap(),
        "'2026-11-30 12:00:00.250+0000','2024-02-29',12345678-9abc-def0-1234-56789abcdef0,\
         0x00ff,true,'::1',-9000000000,7,-1:\"Hits\""
    );
    assert_eq!(self::column(&t, &printed).unwrap(), column);
}

#[test]
fn a_table_without_clustering_columns_prints_its_counters_by_name() {
    let t = table("CREATE TABLE cf (pk int PRIMARY KEY, my_counter counter)");
    let (partition, column) = written(&t, "UPDATE cf SET my_counter = my_counter + 6 WHERE pk = 0");
    let name = parse_name(b"\xffcql:ks.cf:0").unwrap();
    assert_eq!(self::partition(&t, &name.key).unwrap(), partition);
    assert_eq!(field(&t, &column).unwrap(), b"my_counter");
    assert_eq!(self::column(&t, b"my_counter").unwrap(), column);
}

#[test]
fn names_and_fields_that_spell_nothing_get_a_clear_error() {
    for bad in [
        &b"\xffcql:"[..],
        b"\xffcql:cf:0",
        b"\xffcql:ks.cf",
        b"\xffcql:ks.cf:",
        b"\xffcql:ks.cf:0,",
        b"\xffcql:ks.cf:0 1",
        b"\xffcql:ks.cf:'open",
        b"\xffcql:ks.cf:\xff",
    ] {
        let e = parse_name(bad).unwrap_err();
        assert!(e.contains("a CQL row is named"), "{bad:?}: {e}");
    }
    let t = table("CREATE TABLE cf (pk int, ck text, c counter, PRIMARY KEY (pk, ck))");
    let key = parse_name(b"\xffcql:ks.cf:'zero'").unwrap().key;
    assert!(
        self::partition(&t, &key)
            .unwrap_err()
            .contains("Invalid literal")
    );
    let two = parse_name(b"\xffcql:ks.cf:1,2").unwrap().key;
    assert_eq!(
        self::partition(&t, &two).unwrap_err(),
        "cf's partition key is 1 value(s): pk"
    );
    for bad in [&b"c"[..], b"1:c", b"'a','b':c", b"'a':", b"'a':1"] {
        assert!(self::column(&t, bad).is_err(), "{bad:?}");
    }
    assert!(self::column(&t, b"'a':c").is_ok());
}
