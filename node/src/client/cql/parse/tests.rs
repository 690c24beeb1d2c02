use super::*;
use crate::client::cql::result::CqlType;

fn ok(text: &str) -> Statement {
    match parse(text) {
        Ok((s, _)) => s,
        Err(e) => panic!("{text}: {}", e.0),
    }
}

fn table(keyspace: Option<&str>, name: &str) -> TableName {
    TableName {
        keyspace: keyspace.map(str::to_string),
        name: name.into(),
    }
}

fn eq(column: &str, term: Term) -> Relation {
    Relation {
        column: column.into(),
        op: Op::Eq,
        terms: vec![term],
    }
}

fn text(s: &str) -> Term {
    Term::Literal(Literal::Str(s.into()))
}

#[test]
fn every_query_a_driver_sends_on_connect_parses() {
    // research/cql-drivers.md, Appendix A.
    for q in [
        "SELECT * FROM system.peers_v2",
        "SELECT * FROM system.local WHERE key='local'",
        "SELECT host_id, peer, data_center, rack, rpc_address, rpc_address, release_version, schema_version FROM system.peers",
        "SELECT * FROM system_schema.tables WHERE keyspace_name = 'ks' AND table_name = 't'",
        "SELECT durable_writes, replication FROM system_schema.keyspaces WHERE keyspace_name = ?",
        "select * from system.local where key = 'local'",
        "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name IN ?",
    ] {
        let Statement::Select(s) = ok(q) else {
            panic!("{q}: not a SELECT")
        };
        assert_eq!(
            s.table.keyspace.as_deref().map(|k| k.starts_with("system")),
            Some(true)
        );
    }
    let Statement::Select(s) = ok("SELECT * FROM system.local WHERE key='local'") else {
        unreachable!()
    };
    assert_eq!(s.table, table(Some("system"), "local"));
    assert_eq!(s.selection, Selection::All);
    assert_eq!(s.relations, [eq("key", text("local"))]);
    let Statement::Select(s) = ok("SELECT peer, peer AS p FROM system.peers") else {
        unreachable!()
    };
    assert_eq!(
        s.selection,
        Selection::Columns(vec![
            ("peer".into(), None),
            ("peer".into(), Some("p".into()))
        ])
    );
}

#[test]
fn a_counter_update_with_markers_numbers_them_in_order() {
    let (s, markers) = parse(
        "UPDATE ks.cf USING TTL 60 SET c = c + ?, d = d - 2, e = 5 WHERE pk = ? AND ck = :ck;",
    )
    .unwrap();
    assert_eq!(markers, 3);
    let Statement::Update(u) = s else {
        panic!("{s:?}")
    };
    assert_eq!(u.table, table(Some("ks"), "cf"));
    assert_eq!(u.ttl, Some(Term::Literal(Literal::Int(60))));
    assert_eq!(
        u.assignments,
        [
            Assignment::Add("c".into(), Term::Marker(0)),
            Assignment::Sub("d".into(), Term::Literal(Literal::Int(2))),
            Assignment::Set("e".into(), Term::Literal(Literal::Int(5))),
        ]
    );
    assert_eq!(
        u.relations,
        [
            eq("pk", Term::Marker(1)),
            eq("ck", Term::Named(2, "ck".into()))
        ]
    );
    let Statement::Update(u) = ok("UPDATE cf SET c = 3 + c WHERE pk = 0") else {
        unreachable!()
    };
    assert_eq!(
        u.assignments,
        [Assignment::Add("c".into(), Term::Literal(Literal::Int(3)))]
    );
}

#[test]
fn a_select_of_a_partition_with_ranges_in_order_and_limit() {
    let Statement::Select(s) = ok(
        "SELECT COUNT(*) AS n FROM cf WHERE pk IN (1, 2) AND ck >= 'a' AND ck < 'z' \
         ORDER BY ck DESC LIMIT 10 ALLOW FILTERING",
    ) else {
        unreachable!()
    };
    assert_eq!(s.selection, Selection::Count(Some("n".into())));
    assert_eq!(s.relations[0].op, Op::In);
    assert_eq!(s.relations[0].terms.len(), 2);
    assert_eq!((s.relations[1].op, s.relations[2].op), (Op::Ge, Op::Lt));
    assert_eq!(s.order_by, [("ck".into(), true)]);
    assert_eq!(s.limit, Some(Term::Literal(Literal::Int(10))));
    assert!(s.allow_filtering);
}

#[test]
fn keyspaces_and_counter_tables_are_created_as_written() {
    let Statement::CreateKeyspace {
        name,
        if_not_exists,
        options,
    } = ok("CREATE KEYSPACE IF NOT EXISTS ks WITH replication = \
            {'class': 'SimpleStrategy', 'replication_factor': 3} AND durable_writes = true")
    else {
        unreachable!()
    };
    assert_eq!((name.as_str(), if_not_exists), ("ks", true));
    assert_eq!(options[0].0, "replication");
    let Literal::Map(pairs) = &options[0].1 else {
        panic!("{options:?}")
    };
    assert_eq!(
        pairs[1],
        (Literal::Str("replication_factor".into()), Literal::Int(3))
    );
    assert_eq!(options[1], ("durable_writes".into(), Literal::Bool(true)));

    let Statement::CreateTable(t) = ok(
        "CREATE TABLE ks.views (site text, day date, page text, hits counter, \
         PRIMARY KEY ((site, day), page)) WITH CLUSTERING ORDER BY (page DESC) \
         AND default_time_to_live = 86400",
    ) else {
        unreachable!()
    };
    assert_eq!(t.partition_key, ["site", "day"]);
    assert_eq!(t.clustering, ["page"]);
    assert_eq!(t.columns[3], ("hits".into(), CqlType::Counter));
    assert_eq!(t.clustering_order, [("page".into(), true)]);
    assert_eq!(
        t.options,
        [("default_time_to_live".into(), Literal::Int(86400))]
    );
    let Statement::CreateTable(t) = ok("create table cf (pk int PRIMARY KEY, my_counter counter)")
    else {
        unreachable!()
    };
    assert_eq!(
        (t.partition_key, t.clustering.len()),
        (vec!["pk".to_string()], 0)
    );
    let Statement::CreateTable(t) =
        ok("CREATE TABLE m (k int PRIMARY KEY, v map<text, frozen<list<int>>>)")
    else {
        unreachable!()
    };
    assert_eq!(t.columns[1].1.name(), "map<text, list<int>>");
}

#[test]
fn batches_deletes_and_the_small_statements() {
    let Statement::Batch(kind, statements) = ok("BEGIN COUNTER BATCH \
         UPDATE cf SET c = c + 1 WHERE pk = 0; UPDATE cf SET c = c + 2 WHERE pk = 1; \
         APPLY BATCH;")
    else {
        unreachable!()
    };
    assert_eq!((kind, statements.len()), (BatchKind::Counter, 2));
    let Statement::Delete(d) = ok("DELETE c, d FROM cf USING TIMESTAMP 5 WHERE pk = 0") else {
        unreachable!()
    };
    assert_eq!((d.columns.len(), d.timestamp.is_some()), (2, true));
    assert_eq!(ok("USE \"MyKs\""), Statement::Use("MyKs".into()));
    assert_eq!(
        ok("TRUNCATE TABLE ks.cf"),
        Statement::Truncate(table(Some("ks"), "cf"))
    );
    assert_eq!(
        ok("DROP TABLE IF EXISTS cf"),
        Statement::DropTable {
            table: table(None, "cf"),
            if_exists: true
        }
    );
    assert_eq!(
        ok("drop keyspace ks"),
        Statement::DropKeyspace {
            name: "ks".into(),
            if_exists: false
        }
    );
}

#[test]
fn what_does_not_parse_is_a_syntax_error_naming_where() {
    for bad in [
        "",
        "SELEC * FROM t",
        "SELECT * FROM",
        "SELECT * FROM t WHERE",
        "SELECT * FROM t WHERE k == 1",
        "UPDATE t SET c = c + 1",
        "UPDATE t SET c = 1 + d WHERE k = 0",
        "SELECT * FROM t LIMIT",
        "BEGIN BATCH SELECT * FROM t; APPLY BATCH",
        "CREATE TABLE t (k int PRIMARY KEY) WITH COMPACT STORAGE",
        "CREATE TABLE t (k int PRIMARY KEY, PRIMARY KEY (k))",
        "CREATE TABLE t (k bogus PRIMARY KEY)",
        "SELECT * FROM t; SELECT",
        "DELETE FROM t USING TTL 5 WHERE k = 0",
    ] {
        assert!(parse(bad).is_err(), "{bad:?} parsed");
    }
    // Nesting is bounded: deep input is an error, not a stack overflow.
    let deep = format!(
        "CREATE TABLE t (k int PRIMARY KEY, v {}int{})",
        "list<".repeat(100_000),
        ">".repeat(100_000)
    );
    assert!(parse(&deep).is_err());
    let deep = format!(
        "SELECT * FROM t WHERE k = {}1{}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(parse(&deep).is_err());
    let e = parse("SELECT * FROM t WHERE k == 1").unwrap_err();
    assert!(e.0.contains("'='"), "{}", e.0);
}

proptest::proptest! {
    /// Whatever a client sends, the lexer and the parser answer a
    /// statement or an error: never a panic.
    #[test]
    fn any_text_parses_or_is_refused(text in "[ -~]{0,80}") {
        let _ = parse(&text);
    }

    /// Statements built of CQL's own tokens, shuffled, the same.
    #[test]
    fn any_sequence_of_cql_words_parses_or_is_refused(
        words in proptest::collection::vec(proptest::sample::select(vec![
            "SELECT", "*", "FROM", "t", "WHERE", "k", "=", "?", "AND", "IN", "(", ")", ",",
            "UPDATE", "SET", "c", "+", "-", "1", "'s'", "{", "}", ":", "[", "]", "<", ">",
            "CREATE", "TABLE", "PRIMARY", "KEY", "int", "map", "BEGIN", "BATCH", "APPLY", ";",
        ]), 0..24)
    ) {
        let _ = parse(&words.join(" "));
    }
}
