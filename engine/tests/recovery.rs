//! Commit log recovery: a log cut at any byte keeps exactly a prefix; a bad
//! checksum before the tail is a corruption error, never a silent skip.

#![allow(clippy::disallowed_methods, reason = "tests damage files on purpose")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::path::Path;

use crate::common::{add_one, key, open};
use tally_engine::{Engine, Error, Options};

/// Where each record of a segment starts and ends (the sync mark that ends
/// each write, the top bit of its length set, is not a record).
fn records(segment: &[u8]) -> Vec<(usize, usize)> {
    let mut records = Vec::new();
    let mut at = 16;
    while at + 8 <= segment.len() {
        let len = u32::from_le_bytes(segment[at..at + 4].try_into().unwrap());
        let end = at + 8 + (len & 0x7fff_ffff) as usize;
        if len & 0x8000_0000 == 0 {
            records.push((at, end));
        }
        at = end;
    }
    assert_eq!(at, segment.len(), "test parsed the segment wrong");
    records
}

/// Offsets where each record of a segment ends.
fn record_ends(segment: &[u8]) -> Vec<usize> {
    records(segment).into_iter().map(|(_, end)| end).collect()
}

fn only_log_segment(dir: &Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    // The newest segment is the empty one opened after the last run.
    assert!(!logs.is_empty());
    logs.into_iter()
        .find(|p| std::fs::metadata(p).unwrap().len() > 16)
        .expect("a segment with records")
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "LOCK" {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_at_every_offset_keeps_exactly_a_prefix() {
    let src = tempfile::tempdir().unwrap();
    let opts = Options::default();
    // Each acknowledged add is its own record, in this order.
    let plan: Vec<(u64, i64)> = (0..12).map(|i| (i % 5, (i as i64 + 1) * 3)).collect();
    {
        let engine = open(src.path(), &opts);
        for (k, d) in &plan {
            add_one(&engine, &key(*k), *d).await.unwrap();
        }
        engine.close().unwrap();
    }
    let segment = only_log_segment(src.path());
    let bytes = std::fs::read(&segment).unwrap();
    let ends = record_ends(&bytes);
    assert_eq!(ends.len(), plan.len());

    // Cut anywhere inside the last five records (and at the header), then
    // either end the file there or follow the cut with zeros, as the zeros
    // the log lays down ahead of its records do when a write is torn.
    let from = ends[plan.len() - 6];
    let cuts = (0..=16).chain(from..=bytes.len());
    for (cut, zeros) in cuts.flat_map(|c| [(c, 0), (c, 64 << 10)]) {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(src.path(), dir.path());
        let seg = dir.path().join(segment.file_name().unwrap());
        let file = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        file.set_len(cut as u64).unwrap();
        file.set_len((cut + zeros) as u64).unwrap();
        drop(file);

        let engine = Engine::open(dir.path(), opts.clone())
            .unwrap_or_else(|e| panic!("cut at {cut} + {zeros} zeros: {e}"));
        let survived = ends.iter().filter(|end| **end <= cut).count();
        for k in 0..5 {
            let expected: i64 = plan[..survived]
                .iter()
                .filter(|(pk, _)| *pk == k)
                .map(|(_, d)| d)
                .sum();
            assert_eq!(
                engine.get(&key(k)).unwrap().value().unwrap(),
                expected,
                "cut at {cut}, key {k}"
            );
        }
        // The torn tail is gone from disk, so new records follow whole ones.
        add_one(&engine, &key(0), 1).await.unwrap();
        drop(engine);
        let engine = Engine::open(dir.path(), opts.clone()).unwrap();
        let expected0: i64 = plan[..survived]
            .iter()
            .filter(|(pk, _)| *pk == 0)
            .map(|(_, d)| d)
            .sum();
        assert_eq!(
            engine.get(&key(0)).unwrap().value().unwrap(),
            expected0 + 1,
            "cut at {cut}, after a new add"
        );
    }
}

/// A closed engine holding ten acknowledged adds in one log segment: its
/// directory, the segment's path, its bytes and where each record ends.
async fn ten_acknowledged_adds(
    opts: &Options,
) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>, Vec<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), opts);
    for i in 0..10 {
        add_one(&engine, &key(i), 1).await.unwrap();
    }
    engine.close().unwrap();
    let segment = only_log_segment(dir.path());
    let bytes = std::fs::read(&segment).unwrap();
    let ends = record_ends(&bytes);
    (dir, segment, bytes, ends)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_checksum_before_the_tail_is_corruption() {
    let opts = Options::default();
    let (dir, segment, mut bytes, ends) = ten_acknowledged_adds(&opts).await;
    // Flip a payload byte of the third record.
    let third = records(&bytes)[2].0;
    assert!(third >= ends[1]);
    bytes[third + 10] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();

    let err = Engine::open(dir.path(), opts)
        .err()
        .expect("open must fail");
    match &err {
        Error::Corruption { file, offset, .. } => {
            assert_eq!(file, &segment);
            assert_eq!(*offset, third as u64);
        }
        other => panic!("expected corruption, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("checksum mismatch") && msg.contains(&format!("at offset {third}")),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_length_in_the_last_segment_is_corruption_not_a_torn_tail() {
    let opts = Options::default();
    let (dir, segment, mut bytes, ends) = ten_acknowledged_adds(&opts).await;
    // The high byte of the fourth record's length: it now runs far past the end.
    let fourth = records(&bytes)[3].0;
    assert!(fourth >= ends[2]);
    bytes[fourth + 3] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    match Engine::open(dir.path(), opts) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, fourth as u64),
        Err(other) => panic!("expected corruption, got {other}"),
        Ok(_) => panic!("acknowledged records after a damaged length were dropped silently"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeros_laid_down_ahead_of_the_records_end_the_log_after_a_crash() {
    let opts = Options::default();
    let (dir, segment, mut bytes, _) = ten_acknowledged_adds(&opts).await;
    // A clean close cut the segment back to its records (`record_ends`
    // checked that); a crash leaves the zeros written ahead of them.
    let end = bytes.len();
    bytes.resize(bytes.len() + (1 << 20), 0);
    std::fs::write(&segment, &bytes).unwrap();
    let engine = Engine::open(dir.path(), opts.clone()).unwrap();
    for i in 0..10 {
        assert_eq!(engine.get(&key(i)).unwrap().value().unwrap(), 1, "key {i}");
    }
    assert_eq!(
        engine.replay_stats().truncated_at,
        Some((segment.clone(), end as u64))
    );
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), end as u64);
}
