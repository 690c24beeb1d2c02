#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;

use super::super::result::CqlType;
use super::super::rows::Bound;
use super::super::schema::test_table;
use super::*;

fn int(v: i32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// Whether `column` falls in one of `ranges`.
fn within(ranges: &[Range], column: &[u8]) -> bool {
    ranges
        .iter()
        .any(|(s, e)| column >= s.as_slice() && e.as_ref().is_none_or(|e| column < e.as_slice()))
}

fn bound() -> impl Strategy<Value = Bound> {
    prop_oneof![
        Just(None),
        (-4i32..4, any::<bool>()).prop_map(|(v, i)| Some((int(v), i)))
    ]
}

proptest! {
    #[test]
    fn the_ranges_hold_exactly_the_rows_named(
        descending in any::<(bool, bool)>(),
        fixed in proptest::collection::vec(-3i32..3, 0..3),
        fix_first in any::<bool>(),
        range in proptest::option::of((bound(), bound())),
    ) {
        let order = |d: bool| if d { "DESC" } else { "ASC" };
        let t = test_table(&format!(
            "CREATE TABLE t (k int, a int, b int, v int, PRIMARY KEY (k, a, b)) \
             WITH CLUSTERING ORDER BY (a {}, b {})",
            order(descending.0),
            order(descending.1)
        ));
        let layout = Layout::of(&t);
        let clustering = Clustering {
            fixed: match fix_first {
                true => vec![fixed.iter().map(|&v| int(v)).collect()],
                false => Vec::new(),
            },
            range,
        };
        let types = [&CqlType::Int, &CqlType::Int];
        let ranges = ranges(&layout, &clustering).unwrap();
        prop_assert!(ranges.is_sorted());
        for a in -4..4 {
            for b in -4..4 {
                let row = [int(a), int(b)];
                let named = clustering.admits(&row, &types);
                for name in ["", "v"] {
                    let column = layout.column(&row, name).unwrap();
                    prop_assert_eq!(within(&ranges, &column), named, "{} {} {:?}", a, b, ranges);
                }
            }
        }
        // Statics and deleted ranges are never among the rows.
        prop_assert!(!within(&ranges, &[0xFD]) && !within(&ranges, &[0xFE, 0]));
    }
}

#[test]
fn a_page_resumes_past_its_last_row_or_before_it_reversed() {
    let t = test_table("CREATE TABLE t (k int, a int, v int, PRIMARY KEY (k, a))");
    let layout = Layout::of(&t);
    let all = ranges(&layout, &Clustering::default()).unwrap();
    let (after, before) = resume(&layout, &[int(5)]).unwrap();
    let forward = clip(all.clone(), Some(&after), None);
    let backward = clip(all, None, before.as_deref());
    for a in -9..9 {
        let column = layout.column(&[int(a)], "v").unwrap();
        // A row's columns all sort after its prefix and before the next's.
        assert_eq!(within(&forward, &column), a > 5, "{a}");
        assert_eq!(within(&backward, &column), a < 5, "{a}");
    }
    let none = clip(vec![(vec![1], Some(vec![3]))], Some(&[3]), None);
    assert!(none.is_empty(), "a range wholly before the resume point");
    // A table without clustering columns: its rows are names, before the
    // statics.
    let flat = test_table("CREATE TABLE f (k int PRIMARY KEY, v int)");
    let rows = ranges(&Layout::of(&flat), &Clustering::default()).unwrap();
    assert!(within(&rows, b"v") && within(&rows, b"") && !within(&rows, &[0xFD]));
    assert_eq!(tail(), (vec![0xFD], None));
    // What a read from the first range on keeps: the ranges' rows, and
    // the static columns and deleted ranges.
    let named = ranges(
        &layout,
        &Clustering {
            fixed: vec![vec![int(5)]],
            range: None,
        },
    )
    .unwrap();
    let column = |a: i32| layout.column(&[int(a)], "v").unwrap();
    assert!(holds(&named, &column(5)) && !holds(&named, &column(6)));
    assert!(holds(&named, &[0xFD, b's']) && holds(&named, &[0xFE, 0]));
}
