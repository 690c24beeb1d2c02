use super::super::ast::Statement;
use super::super::parse::parse;
use super::*;

fn create_table_of(text: &str) -> CreateTable {
    match parse(text).unwrap().0 {
        Statement::CreateTable(t) => t,
        other => panic!("{other:?}"),
    }
}

fn keyspace(name: &str) -> Keyspace {
    let options = match parse(&format!(
        "CREATE KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 3}}"
    ))
    .unwrap()
    .0
    {
        Statement::CreateKeyspace { options, .. } => options,
        other => panic!("{other:?}"),
    };
    match create_keyspace(name, false, &options, None, 3).unwrap() {
        Change::Put(ks, change) => {
            assert_eq!((change.change, change.table), ("CREATED", None));
            ks
        }
        other => panic!("{other:?}"),
    }
}

/// `ks` with the table `text` creates, made as before feature
/// `cql-token-order` (the formats every build reads).
fn with_table(ks: &Keyspace, text: &str) -> Result<Change, CqlError> {
    let fresh = Fresh {
        id: [7; 16],
        token_order: false,
        sorted_rows: false,
        now_us: 0,
    };
    create_table(&create_table_of(text), ks, fresh)
}

#[test]
fn a_keyspace_replicates_as_the_ring_does() {
    let ks = keyspace("ks");
    assert!(ks.durable_writes && ks.tables.is_empty());
    let options = |map: &str| match parse(&format!("CREATE KEYSPACE k WITH replication = {map}"))
        .unwrap()
        .0
    {
        Statement::CreateKeyspace { options, .. } => options,
        _ => unreachable!(),
    };
    let nts = options("{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}");
    assert!(matches!(
        create_keyspace("k", false, &nts, None, 3),
        Ok(Change::Put(..))
    ));
    let full = options(
        "{'class': 'org.apache.cassandra.locator.SimpleStrategy', 'replication_factor': '3'}",
    );
    assert!(matches!(
        create_keyspace("k", false, &full, None, 3),
        Ok(Change::Put(..))
    ));
    for (map, code) in [
        (
            "{'class': 'SimpleStrategy', 'replication_factor': 2}",
            0x2300,
        ),
        ("{'class': 'LocalStrategy'}", 0x2300),
        ("{'replication_factor': 3}", 0x2300),
    ] {
        let e = create_keyspace("k", false, &options(map), None, 3).unwrap_err();
        assert_eq!(e.code(), code, "{map}: {e:?}");
    }
    let simple = options("{'class': 'SimpleStrategy', 'replication_factor': 3}");
    let e = create_keyspace("ks", false, &simple, Some(&ks), 3).unwrap_err();
    assert_eq!(e.code(), 0x2400, "exists");
    assert_eq!(
        create_keyspace("ks", true, &simple, Some(&ks), 3),
        Ok(Change::None)
    );
    assert_eq!(
        create_keyspace("bad-name", false, &simple, None, 3)
            .unwrap_err()
            .code(),
        0x2200
    );
}

#[test]
fn a_counter_table_keeps_its_key_order_and_clustering_order() {
    let ks = keyspace("ks");
    let Change::Put(next, change) = with_table(
        &ks,
        "CREATE TABLE views (site text, day date, page text, hits counter, clicks counter, \
         PRIMARY KEY ((site, day), page)) WITH CLUSTERING ORDER BY (page DESC) \
         AND default_time_to_live = 60 AND comment = 'per page' AND gc_grace_seconds = 10",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(change.table.as_deref(), Some("views"));
    let t = next.table("views").unwrap();
    let names: Vec<(&str, Kind, bool)> = t
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.kind, c.descending))
        .collect();
    assert_eq!(
        names,
        [
            ("site", Kind::PartitionKey, false),
            ("day", Kind::PartitionKey, false),
            ("page", Kind::Clustering, true),
            ("hits", Kind::Regular, false),
            ("clicks", Kind::Regular, false),
        ]
    );
    assert_eq!(
        (t.default_ttl_s, t.comment.as_str(), t.id),
        (60, "per page", [7; 16])
    );
    // It reads back from its register as it was written.
    assert_eq!(Keyspace::decode("ks", &next.encode()), Ok(next.clone()));
    assert!(
        with_table(&next, "CREATE TABLE views (k int PRIMARY KEY, c counter)")
            .unwrap_err()
            .code()
            == 0x2400
    );
    assert_eq!(
        with_table(
            &next,
            "CREATE TABLE IF NOT EXISTS views (k int PRIMARY KEY, c counter)"
        ),
        Ok(Change::None)
    );
}

#[test]
fn tables_that_mix_or_misplace_columns_are_refused_with_cassandras_words() {
    let ks = keyspace("ks");
    for (text, words) in [
        (
            "CREATE TABLE t (k int PRIMARY KEY, c counter, v text)",
            "Cannot mix counter and non counter columns",
        ),
        (
            "CREATE TABLE t (k int PRIMARY KEY, v text STATIC)",
            "Static columns are only useful",
        ),
        (
            "CREATE TABLE t (k int, c int STATIC, PRIMARY KEY (k, c))",
            "Static column c cannot be part of the PRIMARY KEY",
        ),
        (
            "CREATE TABLE t (k int PRIMARY KEY, v list<int>)",
            "collections are not served yet",
        ),
        (
            "CREATE TABLE t (k counter PRIMARY KEY, c counter)",
            "Invalid type counter for PRIMARY KEY",
        ),
        (
            "CREATE TABLE t (k int, c counter, PRIMARY KEY (x))",
            "Unknown definition x",
        ),
        (
            "CREATE TABLE t (k int, a int, c counter, PRIMARY KEY (k, a)) WITH CLUSTERING ORDER BY (k DESC)",
            "CLUSTERING ORDER BY",
        ),
        (
            &*format!(
                "CREATE TABLE t (k int PRIMARY KEY, {} counter)",
                "c".repeat(300)
            ),
            "a column name is 1 to 256 bytes",
        ),
    ] {
        let e = with_table(&ks, text).unwrap_err();
        assert_eq!(e.code(), 0x2200, "{text}");
        assert!(e.message().contains(words), "{text}: {}", e.message());
    }
    let e = with_table(
        &ks,
        "CREATE TABLE t (k int PRIMARY KEY, c counter) WITH bogus = 1",
    )
    .unwrap_err();
    assert_eq!(e.code(), 0x2000);
}

#[test]
fn a_regular_table_keeps_its_static_and_regular_columns_through_its_register() {
    let ks = keyspace("ks");
    let text = "CREATE TABLE t (k int, c timestamp, s text STATIC, v varint, f float, \
                at time, PRIMARY KEY (k, c))";
    let Change::Put(ks, _) = with_table(&ks, text).unwrap() else {
        panic!()
    };
    let t = &ks.tables[0];
    assert!(!t.is_counter());
    let kinds: Vec<(&str, Kind)> = t
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("k", Kind::PartitionKey),
            ("c", Kind::Clustering),
            ("s", Kind::Static),
            ("v", Kind::Regular),
            ("f", Kind::Regular),
            ("at", Kind::Regular),
        ]
    );
    assert_eq!(Keyspace::decode("ks", &ks.encode()).unwrap(), ks);
    let Change::Put(keys_only, _) =
        with_table(&keyspace("ks"), "CREATE TABLE t (k int PRIMARY KEY)").unwrap()
    else {
        panic!()
    };
    assert!(!keys_only.tables[0].is_counter());
}

#[test]
fn drops_remove_what_exists_and_say_what_does_not() {
    let ks = keyspace("ks");
    let Change::Put(ks, _) =
        with_table(&ks, "CREATE TABLE t (k int PRIMARY KEY, c counter)").unwrap()
    else {
        panic!()
    };
    let t = TableName {
        keyspace: Some("ks".into()),
        name: "t".into(),
    };
    let Change::Put(after, change) = drop_table(&t, false, Some(&ks), "ks").unwrap() else {
        panic!()
    };
    assert!(after.tables.is_empty() && change.change == "DROPPED");
    assert_eq!(drop_table(&t, true, Some(&after), "ks"), Ok(Change::None));
    assert_eq!(
        drop_table(&t, false, Some(&after), "ks")
            .unwrap_err()
            .message(),
        "unconfigured table t"
    );
    assert_eq!(
        drop_table(&t, false, None, "nope").unwrap_err().message(),
        "Keyspace nope does not exist"
    );
    assert!(matches!(
        drop_keyspace("ks", false, Some(&ks)),
        Ok(Change::Drop(..))
    ));
    assert_eq!(drop_keyspace("ks", true, None), Ok(Change::None));
    assert_eq!(drop_keyspace("ks", false, None).unwrap_err().code(), 0x2200);
    assert!(empties(&drop_keyspace("ks", false, Some(&ks)).unwrap()));
    assert!(empties(&drop_table(&t, false, Some(&ks), "ks").unwrap()));
    assert!(!empties(
        &with_table(&after, "CREATE TABLE t (k int PRIMARY KEY, c counter)").unwrap()
    ));
}

#[test]
fn a_truncated_table_is_counted_and_kept_in_format_2() {
    let ks = keyspace("ks");
    let Change::Put(ks, _) =
        with_table(&ks, "CREATE TABLE t (k int PRIMARY KEY, c counter)").unwrap()
    else {
        panic!()
    };
    assert_eq!(
        ks.encode()[0],
        FORMAT,
        "never truncated: the format every build reads"
    );
    let t = TableName {
        keyspace: None,
        name: "t".into(),
    };
    let change = truncate(&t, Some(&ks), "ks").unwrap();
    assert!(empties(&change));
    let Change::Truncate(after) = change else {
        panic!()
    };
    assert_eq!(after.tables[0].truncations, 1);
    assert_eq!(after.encode()[0], FORMAT_TRUNCATIONS);
    assert_eq!(Keyspace::decode("ks", &after.encode()), Ok(after.clone()));
    let nope = TableName {
        keyspace: None,
        name: "nope".into(),
    };
    assert_eq!(
        truncate(&nope, Some(&ks), "ks").unwrap_err().message(),
        "unconfigured table nope"
    );
    assert!(truncate(&t, None, "ks").is_err());
}

#[test]
fn a_table_in_token_order_is_kept_in_format_4() {
    let create = create_table_of("CREATE TABLE t (k int PRIMARY KEY, v text)");
    let fresh = Fresh {
        sorted_rows: false,
        ..[3; 16].into()
    };
    let Change::Put(ks, _) = create_table(&create, &keyspace("ks"), fresh).unwrap() else {
        panic!()
    };
    assert!(ks.tables[0].token_order);
    assert_eq!(ks.encode()[0], FORMAT_TOKEN_ORDER);
    assert_eq!(Keyspace::decode("ks", &ks.encode()), Ok(ks.clone()));
    // With an older table beside it, each keeps its own order.
    let Change::Put(both, _) =
        with_table(&ks, "CREATE TABLE old (k int PRIMARY KEY, v text)").unwrap()
    else {
        panic!()
    };
    let decoded = Keyspace::decode("ks", &both.encode()).unwrap();
    let orders: Vec<bool> = decoded.tables.iter().map(|t| t.token_order).collect();
    assert_eq!(orders, [true, false]);
}

#[test]
fn a_table_with_its_rows_sorted_is_kept_in_format_5() {
    let create = create_table_of("CREATE TABLE t (k int, c int, v text, PRIMARY KEY (k, c))");
    let Change::Put(ks, _) = create_table(&create, &keyspace("ks"), [3; 16].into()).unwrap() else {
        panic!()
    };
    assert!(ks.tables[0].sorted_rows && ks.tables[0].token_order);
    assert_eq!(ks.encode()[0], FORMAT_SORTED_ROWS);
    assert_eq!(Keyspace::decode("ks", &ks.encode()), Ok(ks.clone()));
    let Change::Put(both, _) =
        with_table(&ks, "CREATE TABLE old (k int PRIMARY KEY, v text)").unwrap()
    else {
        panic!()
    };
    let decoded = Keyspace::decode("ks", &both.encode()).unwrap();
    let sorted: Vec<bool> = decoded.tables.iter().map(|t| t.sorted_rows).collect();
    assert_eq!(sorted, [true, false]);
}

#[test]
fn a_corrupt_register_is_an_error_never_a_panic() {
    let ks = keyspace("ks");
    let Change::Put(ks, _) = with_table(
        &ks,
        "CREATE TABLE t (k int, c bigint, n counter, PRIMARY KEY (k, c))",
    )
    .unwrap() else {
        panic!()
    };
    let bytes = ks.encode();
    for cut in 0..bytes.len() {
        assert!(
            Keyspace::decode("ks", &bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut other = bytes.clone();
    other[0] = 9;
    assert!(Keyspace::decode("ks", &other).is_err(), "an unknown format");
}
