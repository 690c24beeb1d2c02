#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;

/// A whole cell of `value` (as a CQL column's: a one-element list).
fn cell(n: u64, value: &[u8]) -> Cell {
    let list = List::new(vec![value.to_vec()]).unwrap();
    Cell::from_parts(epoch(n, 7, 0), []).with_list(list)
}

fn batch(partitions: usize, bytes: usize) -> Batch {
    (0..partitions)
        .map(|p| {
            let cells = (0..3u8)
                .map(|c| (vec![c], cell(u64::from(c) + 1, &vec![p as u8; bytes])))
                .collect();
            (format!("partition-{p}").into_bytes(), cells)
        })
        .collect()
}

fn read(cells: &[(Vec<u8>, Cell)], now: u64) -> Option<(u64, Batch)> {
    let refs: Vec<(Vec<u8>, &Cell)> = cells.iter().map(|(c, cell)| (c.clone(), cell)).collect();
    batch_of(&refs, now)
}

#[test]
fn an_entry_holds_its_batch_whole_in_chunks() {
    let small = batch(4, 10);
    let cells = entry(1_000, &small).unwrap();
    assert_eq!(cells.len(), 1);
    assert_eq!(read(&cells, 5_000), Some((1_000, small)));
    // A batch over a chunk: several, in any order, read back whole.
    let big = batch(8, 9_000);
    let mut cells = entry(2_000, &big).unwrap();
    assert!(cells.len() >= 3, "{} chunks", cells.len());
    cells.reverse();
    assert_eq!(read(&cells, 5_000), Some((2_000, big)));
    // A chunk missing (a replica that has not got it all): no batch yet.
    assert_eq!(read(&cells[1..], 5_000), None);
}

#[test]
fn a_deleted_entry_holds_nothing_and_wins_every_merge() {
    let cells = entry(1_000, &batch(2, 10)).unwrap();
    let gone = deleted(1_000, cells.iter().map(|(c, _)| c.clone()));
    assert_eq!(read(&gone, 5_000), None);
    for (written, deleted) in cells.iter().zip(&gone) {
        for order in [[&written.1, &deleted.1], [&deleted.1, &written.1]] {
            let mut merged = Cell::new();
            for c in order {
                merged.merge(c, &tally_engine::Merger::default());
            }
            assert_eq!(merged, deleted.1, "the delete wins, whatever came first");
        }
    }
}

#[test]
fn a_batch_over_the_log_is_refused_before_anything_is_written() {
    let huge = batch(300, 24_000);
    let e = entry(1, &huge).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("the batch log holds at most"), "{e:?}");
}

#[test]
fn garbage_in_an_entry_is_no_batch() {
    let list = List::new(vec![b"not an entry".to_vec()]).unwrap();
    let junk = Cell::from_parts(epoch(1, 1, 0), []).with_list(list);
    assert_eq!(read(&[(column(0, 1), junk.clone())], 1), None);
    assert_eq!(
        read(&[(b"x".to_vec(), junk)], 1),
        None,
        "a column that is no chunk's"
    );
    assert_eq!(read(&[], 1), None);
}
