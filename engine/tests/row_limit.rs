//! A row read stops at its column limit while it reads: it returns the
//! first columns of a wide partition without reading the rest of it.

#![allow(clippy::disallowed_methods, reason = "tests damage files on purpose")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use crate::common::{add_one, open};
use tally_engine::{Columns, Engine, Error, Key, Options};

fn col(i: usize) -> Key {
    Key::new(b"wide", format!("c{i:05}").as_bytes()).unwrap()
}

fn small_blocks() -> Options {
    Options {
        block_bytes: 256,
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_read_stops_at_its_column_limit() {
    const COLUMNS: usize = 2000;
    let src = tempfile::tempdir().unwrap();
    let opts = small_blocks();
    {
        let engine = open(src.path(), &opts);
        for i in 0..COLUMNS {
            add_one(&engine, &col(i), i as i64 + 1).await.unwrap();
        }
        engine.flush().unwrap();
        engine.close().unwrap();
    }
    let table = crate::common::only_table(src.path());
    // Damage the last data block: the one with the row's last columns. A
    // read that stops at its limit never reaches it.
    let mut bytes = std::fs::read(&table).unwrap();
    let footer = bytes.len() - 60;
    let dict_off = u64::from_le_bytes(bytes[footer + 20..footer + 28].try_into().unwrap());
    let last_entry_byte = usize::try_from(dict_off).unwrap() - 5;
    bytes[last_entry_byte] ^= 0x40;
    // Only the identity and the table: the log must not hold the cells too.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(src.path().join("IDENTITY"), dir.path().join("IDENTITY")).unwrap();
    std::fs::write(dir.path().join(table.file_name().unwrap()), &bytes).unwrap();

    let engine = Engine::open(dir.path(), opts).unwrap();
    let row = engine.get_row(b"wide", 100).unwrap();
    assert!(row.truncated, "2000 columns are more than 100");
    assert_eq!(row.cells.len(), 100);
    for (i, (k, c)) in row.cells.iter().enumerate() {
        assert_eq!((k, c.value().unwrap()), (&col(i), i as i64 + 1));
    }
    // The damage is there, for a read that goes that far.
    match engine.get_row(b"wide", COLUMNS) {
        Err(Error::Corruption { .. }) => {}
        other => panic!("a whole-row read must meet the damage: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_counts_distinct_columns_over_memtables_and_tables() {
    const COLUMNS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), &small_blocks());
    // Even columns in a table, odd ones in the memtable, and every tenth
    // one in both (one column, merged).
    for i in (0..COLUMNS).filter(|i| i % 2 == 0 || i % 10 == 5) {
        add_one(&engine, &col(i), 1).await.unwrap();
    }
    engine.flush().unwrap();
    for i in (0..COLUMNS).filter(|i| i % 2 == 1) {
        add_one(&engine, &col(i), 1).await.unwrap();
    }
    // Another partition's cells sort after the row's: never counted.
    add_one(&engine, &Key::new(b"wide2", b"x").unwrap(), 1)
        .await
        .unwrap();
    let value = |i: usize| if i % 10 == 5 { 2 } else { 1 };
    for limit in [1, 2, 7, 64, COLUMNS - 1, COLUMNS, COLUMNS + 1, usize::MAX] {
        let row = engine.get_row(b"wide", limit).unwrap();
        let want = limit.min(COLUMNS);
        assert_eq!(row.truncated, limit < COLUMNS, "limit {limit}");
        assert_eq!(row.cells.len(), want, "limit {limit}");
        for (i, (k, c)) in row.cells.iter().enumerate() {
            assert_eq!(
                (k, c.value().unwrap()),
                (&col(i), value(i)),
                "limit {limit}"
            );
        }
    }
    let empty = engine.get_row(b"nothing", 10).unwrap();
    assert!(empty.cells.is_empty() && !empty.truncated);
    let none = engine.get_row(b"wide", 0).unwrap();
    assert!(none.cells.is_empty() && none.truncated);
    engine.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_reads_its_columns_only_over_memtables_and_tables() {
    const COLUMNS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), &small_blocks());
    for i in (0..COLUMNS).filter(|i| i % 3 == 0) {
        add_one(&engine, &col(i), 1).await.unwrap();
    }
    engine.flush().unwrap();
    for i in (0..COLUMNS).filter(|i| i % 3 != 0) {
        add_one(&engine, &col(i), 1).await.unwrap();
    }
    add_one(&engine, &Key::new(b"wide2", b"c00001").unwrap(), 1)
        .await
        .unwrap();
    let name = |i: usize| format!("c{i:05}").into_bytes();
    // Every window, paged through: each column once, in order.
    for (from, to, page) in [(0, COLUMNS, 7), (10, 20, 3), (100, COLUMNS, 64), (5, 6, 1)] {
        let (start, end) = (name(from), name(to));
        let end = (to < COLUMNS).then_some(&end[..]);
        let mut next = start.clone();
        let mut got = Vec::new();
        loop {
            let columns = Columns { start: &next, end };
            let slice = engine.get_slice(b"wide", columns, page).unwrap();
            assert!(
                slice
                    .cells
                    .iter()
                    .all(|(k, _)| columns.contains(k.column()))
            );
            got.extend(slice.cells.iter().map(|(k, _)| k.clone()));
            if !slice.truncated {
                break;
            }
            let last = slice.cells.last().unwrap().0.column();
            next = [last, &[0]].concat();
        }
        let want: Vec<Key> = (from..to).map(col).collect();
        assert_eq!(got, want, "{from}..{to} by {page}");
    }
    // A start longer than any column: the columns after it.
    let long = [name(10), vec![b'z'; 300]].concat();
    let columns = Columns {
        start: &long,
        end: None,
    };
    let after: Vec<Key> = (engine.get_slice(b"wide", columns, 3).unwrap().cells)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(after, [col(11), col(12), col(13)]);
    let past = name(COLUMNS);
    let empty = Columns {
        start: &past,
        end: None,
    };
    assert!(
        engine
            .get_slice(b"wide", empty, 10)
            .unwrap()
            .cells
            .is_empty()
    );
    engine.close().unwrap();
}
