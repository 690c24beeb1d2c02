//! Power loss in the middle of the last group commit: writeback can leave
//! whole pages of it as the zeros laid down ahead of the records, before
//! pages it did write. Such a zero-filled gap in the last write is a torn
//! tail, cut off at open; damage that is not one (garbage, or a gap in a
//! write a later sync mark proves durable) stays a corruption error naming
//! file and offset.

#![allow(clippy::disallowed_methods, reason = "tests damage files on purpose")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::path::{Path, PathBuf};

use crate::common::{add_one, apply_cells, key, open};
use tally_engine::commitlog::check::LogCheck;
use tally_engine::{Cell, Engine, Error, Key, Options, Shard};

const PAGE: usize = 4096;
/// Records in a replica's batch: one group commit of several pages.
const BATCH: usize = 600;

/// A frame of a segment: a record, or a sync mark (top bit of its length).
#[derive(Clone, Copy, Debug)]
struct Frame {
    offset: usize,
    end: usize,
    mark: bool,
}

fn frames(segment: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut at = 16;
    while at + 8 <= segment.len() {
        let len = u32::from_le_bytes(segment[at..at + 4].try_into().unwrap());
        let mark = len & 0x8000_0000 != 0;
        let end = at + 8 + (len & 0x7fff_ffff) as usize;
        out.push(Frame {
            offset: at,
            end,
            mark,
        });
        at = end;
    }
    assert_eq!(at, segment.len(), "test parsed the segment wrong");
    out
}

fn batch_key(b: usize, i: usize) -> Key {
    Key::new(format!("batch{b}").as_bytes(), format!("{i:04}").as_bytes()).unwrap()
}

fn batch_cell(i: usize) -> Cell {
    Cell::from_parts(
        0,
        [Shard {
            counter_id: 77,
            clock: 1,
            value: i as i64 + 1,
        }],
    )
}

/// A closed engine with five single adds, then `batches` replica batches of
/// [`BATCH`] cells, each one group commit: its directory, its log segment
/// and the record frames of each batch (the last write is the last batch).
async fn logged(batches: usize) -> (tempfile::TempDir, PathBuf, Vec<Vec<Frame>>) {
    let dir = tempfile::tempdir().unwrap();
    // No group-commit window: a batch's records go out in one write.
    let opts = Options {
        group_commit_window_us: 0,
        ..Options::default()
    };
    let engine = open(dir.path(), &opts);
    for k in 0..5 {
        add_one(&engine, &key(k), 1).await.unwrap();
    }
    for b in 0..batches {
        // Let the syncer finish the last group commit and sleep: a batch's
        // records are only put in its outbox, and it is woken once they
        // are all there.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let items: Vec<_> = (0..BATCH)
            .map(|i| (batch_key(b, i), batch_cell(i)))
            .collect();
        for r in apply_cells(&engine, &items).await.unwrap() {
            r.unwrap();
        }
    }
    engine.close().unwrap();
    let segment = segment_with_records(dir.path());
    let all = frames(&std::fs::read(&segment).unwrap());
    let records: Vec<Frame> = all.iter().filter(|f| !f.mark).copied().collect();
    assert_eq!(records.len(), 5 + batches * BATCH);
    let per_batch: Vec<Vec<Frame>> = (0..batches)
        .map(|b| records[5 + b * BATCH..5 + (b + 1) * BATCH].to_vec())
        .collect();
    for batch in &per_batch {
        let (from, to) = (batch[0].offset, batch[BATCH - 1].end);
        assert!(
            !all.iter()
                .any(|f| f.mark && f.offset > from && f.offset < to),
            "a batch went out in more than one write"
        );
    }
    (dir, segment, per_batch)
}

fn segment_with_records(dir: &Path) -> PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 16)
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    logs.pop().unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "LOCK" {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// A copy of `src` whose `segment` has `holes` zeroed, then `zeros` more
/// zero bytes at its end (the chunk laid down ahead of the records).
fn damaged(src: &Path, segment: &Path, holes: &[(usize, usize)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(src, dir.path());
    let path = dir.path().join(segment.file_name().unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    for &(from, to) in holes {
        let to = to.min(bytes.len());
        bytes[from..to].fill(0);
    }
    bytes.resize(bytes.len().next_multiple_of(64 << 10), 0);
    std::fs::write(&path, &bytes).unwrap();
    dir
}

/// The first record of `records` that a zeroed `from..` touches.
fn first_touched(records: &[Frame], from: usize) -> Frame {
    *records.iter().find(|r| r.end > from).unwrap()
}

/// Opens the damaged copy and checks that exactly the records before `cut`
/// survived, that the file was cut there, and that the log takes new records.
fn assert_cut_at(dir: &Path, segment: &Path, batch: &[Frame], cut: usize, case: &str) {
    let opts = Options::default();
    let engine = Engine::open(dir, opts.clone()).unwrap_or_else(|e| {
        panic!("{case}: a zero-filled gap in the last write is a torn tail: {e}")
    });
    let seg = dir.join(segment.file_name().unwrap());
    assert_eq!(
        engine.replay_stats().truncated_at,
        Some((seg.clone(), cut as u64)),
        "{case}"
    );
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), cut as u64, "{case}");
    for k in 0..5 {
        assert_eq!(
            engine.get(&key(k)).unwrap().value(),
            Ok(1),
            "{case}: key {k}"
        );
    }
    for (i, r) in batch.iter().enumerate() {
        let cell = engine.get(&batch_key(0, i)).unwrap();
        if r.offset < cut {
            assert_eq!(
                cell.value(),
                Ok(i as i64 + 1),
                "{case}: record {i} at {}",
                r.offset
            );
        } else {
            assert!(
                cell.shards().is_empty(),
                "{case}: record {i} at {} is past the cut",
                r.offset
            );
        }
    }
    drop(engine);
    let engine = Engine::open(dir, opts).unwrap();
    assert_eq!(
        engine.replay_stats().truncated_at,
        None,
        "{case}: cut for good"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_filled_gaps_in_the_last_write_are_a_torn_tail() {
    let (src, segment, batches) = logged(1).await;
    let batch = &batches[0];
    let (start, end) = (batch[0].offset, batch[BATCH - 1].end);
    let pages: Vec<usize> = (start.next_multiple_of(PAGE)..end.saturating_sub(PAGE))
        .step_by(PAGE)
        .collect();
    assert!(
        pages.len() >= 3,
        "the last write spans {start}..{end}: too few pages"
    );

    // One page of the last write not written back, pages after it were.
    for &p in &pages {
        let dir = damaged(src.path(), &segment, &[(p, p + PAGE)]);
        let cut = first_touched(batch, p).offset;
        assert_cut_at(dir.path(), &segment, batch, cut, &format!("page at {p}"));
    }
    // The first page of the write not written back: zeros from its start.
    let dir = damaged(src.path(), &segment, &[(start, pages[0])]);
    assert_cut_at(dir.path(), &segment, batch, start, "the write's first page");
    // Two gaps; and a gap, then everything from a later page on lost.
    let two = [(pages[0], pages[0] + PAGE), (pages[2], pages[2] + PAGE)];
    let dir = damaged(src.path(), &segment, &two);
    let cut = first_touched(batch, pages[0]).offset;
    assert_cut_at(dir.path(), &segment, batch, cut, "two gaps");
    let lost_end = [(pages[1], pages[1] + PAGE), (pages[2], usize::MAX)];
    let dir = damaged(src.path(), &segment, &lost_end);
    let cut = first_touched(batch, pages[1]).offset;
    assert_cut_at(dir.path(), &segment, batch, cut, "a gap, then the end lost");
}

/// Opens `dir` and expects a corruption error for `segment` at `offset`.
fn assert_corrupt_at(dir: &Path, segment: &Path, offset: usize, case: &str) {
    let seg = dir.join(segment.file_name().unwrap());
    match Engine::open(dir, Options::default()) {
        Err(Error::Corruption {
            file,
            offset: at,
            reason,
        }) => {
            assert_eq!(file, seg, "{case}: {reason}");
            assert_eq!(at, offset as u64, "{case}: {reason}");
        }
        Err(other) => panic!("{case}: expected corruption, got {other}"),
        Ok(_) => panic!("{case}: damage that is not provably torn was cut off silently"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_that_is_not_provably_torn_is_corruption() {
    let (src, segment, batches) = logged(2).await;
    let (first, last) = (&batches[0], &batches[1]);

    // A zero page in the write before the last: the last write's sync mark
    // says the log was durable past it, so it was acknowledged data.
    let p = (first[0].offset + 1).next_multiple_of(PAGE);
    assert!(p + PAGE < first[BATCH - 1].end);
    let dir = damaged(src.path(), &segment, &[(p, p + PAGE)]);
    let at = first_touched(first, p).offset;
    assert_corrupt_at(dir.path(), &segment, at, "zeros in a durable write");

    // Garbage in the last write: no tear writes bytes that were never written.
    let mut rng = crate::common::Rng(7);
    let r = last[BATCH / 4];
    let dir = tempfile::tempdir().unwrap();
    copy_dir(src.path(), dir.path());
    let path = dir.path().join(segment.file_name().unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[r.offset + 4..r.offset + 104] {
        *b = 1 + rng.below(255) as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    assert_corrupt_at(dir.path(), &segment, r.offset, "garbage in the last write");

    // Garbage then a zero page: still not what a tear leaves.
    let p = (r.offset + PAGE).next_multiple_of(PAGE);
    assert!(p + PAGE < last[BATCH - 1].end);
    bytes[p..p + PAGE].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    assert_corrupt_at(dir.path(), &segment, r.offset, "garbage before a gap");
}

/// Cutting a log's tail forgets a clean shutdown: versions of this node's
/// own shard may be cut with it, so the next open must take a new counter
/// id rather than make those clocks again with other values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutting_a_tail_takes_a_new_counter_id() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).unwrap();
    let id = engine.counter_id();
    add_one(&engine, &batch_key(0, 0), 1).await.unwrap();
    engine.close().unwrap();
    let segment = segment_with_records(dir.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    let garbage = b"not a record, not zeros";
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes.truncate(end);
    bytes.extend_from_slice(garbage);
    std::fs::write(&segment, &bytes).unwrap();

    let mut check = LogCheck::open(dir.path()).unwrap();
    let last = check.segments.len() - 1;
    assert!(check.truncate(last).unwrap(), "nothing to cut");
    drop(check);
    let engine = Engine::open(dir.path(), Options::default()).unwrap();
    assert_ne!(engine.counter_id(), id, "the cut log kept its counter id");
}
