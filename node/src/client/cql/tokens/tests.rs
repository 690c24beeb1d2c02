#![allow(clippy::unwrap_used, reason = "tests")]

use tally_net::ring::{murmur3_token, token_bytes};

use super::super::ast::Statement;
use super::super::parse::parse;
use super::super::schema::test_table;
use super::*;

fn range(table: &TableDef, q: &str) -> Result<Option<Tokens>, CqlError> {
    let Statement::Select(s) = parse(q).unwrap().0 else {
        panic!("{q}")
    };
    of(table, &s, &[])
}

fn table() -> TableDef {
    test_table("CREATE TABLE t (k text, c int, v int, PRIMARY KEY (k, c))")
}

#[test]
fn token_relations_make_one_range() {
    let t = table();
    let r = range(&t, "SELECT * FROM t WHERE token(k) > 5 AND token(k) <= 10")
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.lower, r.upper),
        (Bound::Excluded(5), Bound::Included(10))
    );
    let held: Vec<i64> = (3..13).filter(|&x| r.contains(x)).collect();
    assert_eq!(held, (6..=10).collect::<Vec<_>>());
    assert!(r.beyond(11) && !r.beyond(10));
    assert_eq!(range(&t, "SELECT * FROM t").unwrap(), None);
    let eq = range(&t, "SELECT * FROM t WHERE token(k) = token('abc')")
        .unwrap()
        .unwrap();
    let abc = murmur3_token(b"abc");
    assert_eq!(eq.lower, Bound::Included(abc));
    assert!(eq.contains(abc) && !eq.contains(abc + 1));
    // No wrapping around the ring: an upside-down range holds nothing.
    for q in [
        "SELECT * FROM t WHERE token(k) > 10 AND token(k) < 5",
        "SELECT * FROM t WHERE token(k) > 9223372036854775807",
        "SELECT * FROM t WHERE token(k) >= 3 AND token(k) < 3",
    ] {
        assert!(range(&t, q).unwrap().unwrap().is_empty(), "{q}");
    }
    let all = range(&t, "SELECT * FROM t WHERE token(k) >= -9223372036854775808").unwrap();
    assert!(!all.unwrap().is_empty());
}

#[test]
fn token_relations_are_refused_with_cassandras_words() {
    let t = table();
    let two = test_table("CREATE TABLE two (a int, b int, v int, PRIMARY KEY ((a, b)))");
    let refused = |t: &TableDef, q: &str| range(t, q).unwrap_err().message().to_string();
    assert_eq!(
        refused(&t, "SELECT * FROM t WHERE token(k) > 1 AND token(k) >= 2"),
        "More than one restriction was found for the start bound on k"
    );
    assert_eq!(
        refused(&t, "SELECT * FROM t WHERE token(k) = 1 AND token(k) < 5"),
        "k cannot be restricted by more than one relation if it includes an Equal"
    );
    assert_eq!(
        refused(&t, "SELECT * FROM t WHERE k = 'x' AND token(k) > 1"),
        "Columns \"k\" cannot be restricted by both a normal relation and a token relation"
    );
    assert_eq!(
        refused(&t, "SELECT * FROM t WHERE token(nope) > 1"),
        "Undefined column name nope"
    );
    assert_eq!(
        refused(&two, "SELECT * FROM two WHERE token(a) > 1"),
        "The token() function must be applied to all partition key components or none of them"
    );
    assert_eq!(
        refused(&two, "SELECT * FROM two WHERE token(b, a) > 1"),
        "The token function arguments must be in the partition key order: a, b"
    );
    let r = range(&two, "SELECT * FROM two WHERE token(a, b) <= token(1, 2)").unwrap();
    let key = [1i32.to_be_bytes().to_vec(), 2i32.to_be_bytes().to_vec()];
    let token = partition_token(&cells::partition(&two, &key).unwrap());
    assert_eq!(r.unwrap().upper, Bound::Included(token));
}

#[test]
fn a_scan_in_token_order_starts_at_the_range_and_stops_past_it() {
    let t = table();
    assert!(t.token_order, "a table made now");
    let r = Tokens {
        lower: Bound::Excluded(5),
        upper: Bound::Included(i64::MAX / 2),
    };
    let (p, c) = start(&t, &r).unwrap();
    assert_eq!(&p[8..], &token_bytes(6));
    assert!(c.is_empty());
    let whole = Tokens {
        lower: Bound::Unbounded,
        upper: Bound::Unbounded,
    };
    assert_eq!(start(&t, &whole), None);
    let old = TableDef {
        token_order: false,
        ..t.clone()
    };
    assert_eq!(start(&old, &r), None, "a table in key order reads it all");
    let mut stored: Vec<Vec<u8>> = (0..60)
        .map(|i: i32| cells::partition(&t, &[i.to_string().into_bytes()]).unwrap())
        .collect();
    stored.sort();
    // What a scan from the start lists: the partitions after it.
    let from = start(&t, &r).unwrap().0;
    let after: Vec<Vec<u8>> = stored.into_iter().filter(|p| *p > from).collect();
    assert!(after.iter().all(|p| partition_token(p) > 5));
    let (kept, over) = keep(&t, &r, after.clone());
    let wanted: Vec<&Vec<u8>> = after
        .iter()
        .filter(|p| r.contains(partition_token(p)))
        .collect();
    assert_eq!(kept.iter().collect::<Vec<_>>(), wanted);
    assert!(over, "some of 60 tokens are above 2^62");
    assert!(!kept.is_empty());
    let (_, over) = keep(&old, &r, after);
    assert!(!over, "key order: never over before the end");
}
