//! Tails of ids (see `ids::tail`): an applier's shard leaves with the ids
//! it may still lose; a replica keeps them through restarts, flushes and
//! compactions until the applier's watermark passes them or its next
//! incarnation has learned them; that incarnation answers a retry of a
//! learned id with its original value and applies nothing.

#![allow(clippy::disallowed_methods, reason = "tests measure real time")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{apply_tails, key, open, small_options};
use tally_engine::{Cell, Engine, Error, Once, OnceAdd, OpId, Options, Shard, TailIds, TailOp};

fn add(delta: i64, seq: u64) -> OnceAdd {
    OnceAdd {
        delta,
        id: OpId::new(b"client", seq).unwrap(),
        reapply_stale: false,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What an applier `source` would send to a replica: its shard
/// at `clock` with `value`, and the ids of `ops` (seq, batch).
fn sent(source: u64, clock: u64, value: i64, ops: &[(u64, u64)], durable: u64) -> (Cell, TailIds) {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let cell = Cell::from_parts(
        0,
        [Shard {
            counter_id: source,
            clock,
            value,
        }],
    );
    let ops = ops
        .iter()
        .map(|&(seq, batch)| TailOp {
            batch,
            client: tally_engine::ids::ClientId::from_slice(b"client"),
            op: tally_engine::ids::record::Applied {
                seq,
                delta: 1,
                value: seq as i64,
                epoch: 0,
                at_ms: now_ms,
            },
        })
        .collect();
    (
        cell,
        TailIds {
            counter_id: source,
            durable,
            ops,
        },
    )
}

/// A crash of `e`: its threads are left as they are (a stalled one never
/// writes), and what its directory holds now is copied to a new one.
fn crash(e: Engine, dir: &std::path::Path) -> tempfile::TempDir {
    std::mem::forget(e);
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && !path.ends_with("LOCK") {
            std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    copy
}

fn seqs(e: &Engine, source: u64) -> Vec<u64> {
    let mut s: Vec<u64> = e
        .fence_tails(&[source])
        .into_iter()
        .flat_map(|(_, ops)| ops.into_iter().map(|op| op.op.seq))
        .collect();
    s.sort_unstable();
    s
}

#[test]
fn a_replica_keeps_a_tail_through_restarts_and_flushes_until_it_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let e = open(dir.path(), &small_options());
        let (c1, t1) = sent(77, 1, 1, &[(1, 5)], 4);
        let (c2, t2) = sent(77, 2, 2, &[(1, 5), (2, 6)], 4);
        let r = apply_tails(&e, &[(key(1), c1, Some(t1)), (key(1), c2, Some(t2))])
            .await
            .unwrap();
        assert!(r.iter().all(Result::is_ok), "{r:?}");
        assert_eq!(e.get(&key(1)).unwrap().value().unwrap(), 2);
        // The applier's watermark passes batch 5: seq 1 goes.
        let (c3, t3) = sent(77, 2, 2, &[], 5);
        apply_tails(&e, &[(key(1), c3, Some(t3))]).await.unwrap();
        assert_eq!(e.stats().tail_ids, 1);
        let crashed = crash(e, dir.path());
        let e = open(crashed.path(), &small_options());
        // Read back from the log, pruned by the watermarks its records carry.
        assert_eq!(seqs(&e, 77), [2]);
        e.flush().unwrap();
        e.compact().unwrap();
        e.close().unwrap();
        let e = open(crashed.path(), &small_options());
        assert!(seqs(&e, 77).contains(&2), "from the ids file");
        // Fenced by that read: a late message of the incarnation is refused.
        let (c4, t4) = sent(77, 3, 3, &[(3, 7)], 5);
        let r = apply_tails(&e, &[(key(2), c4, Some(t4))]).await.unwrap();
        assert!(
            matches!(r[0], Err(Error::Fenced { counter_id: 77 })),
            "{r:?}"
        );
        assert_eq!(
            e.get(&key(2)).unwrap().value().unwrap(),
            0,
            "nothing applied"
        );
        e.forget_tails(&[77]).unwrap();
        let again = crash(e, crashed.path());
        let e = open(again.path(), &small_options());
        assert_eq!(seqs(&e, 77), Vec::<u64>::new(), "forgotten for good");
        e.close().unwrap();
    });
}

#[test]
fn an_applier_sends_every_id_not_durable_yet_with_its_shard() {
    let dir = tempfile::tempdir().unwrap();
    let stall = Arc::new(AtomicBool::new(false));
    let opts = Options {
        stall_writes: Some(stall.clone()),
        ..small_options()
    };
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        let k = key(1);
        let (mut s, durable) = e.add_once([(&k, &[add(1, 1)][..])]).unwrap();
        durable.wait().await.unwrap();
        let first = s.pop().unwrap().tail.unwrap();
        assert_eq!(first.ops.len(), 1);
        assert_eq!(first.counter_id, e.counter_id());
        // The disk stops: two batches, the second carrying both.
        stall.store(true, Ordering::Relaxed);
        let (mut s2, d2) = e.add_once([(&k, &[add(1, 2)][..])]).unwrap();
        let (mut s3, d3) = e.add_once([(&k, &[add(1, 3)][..])]).unwrap();
        let t2 = s2.pop().unwrap().tail.unwrap();
        let t3 = s3.pop().unwrap().tail.unwrap();
        let seqs = |t: &TailIds| t.ops.iter().map(|o| o.op.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&t2), [2]);
        assert_eq!(seqs(&t3), [2, 3], "seq 2 is not durable yet");
        assert!(t3.durable < t3.ops[0].batch);
        stall.store(false, Ordering::Relaxed);
        d2.wait().await.unwrap();
        d3.wait().await.unwrap();
        // Durable now: a retry's whole cell goes with no ids.
        let (mut s4, d4) = e.add_once([(&k, &[add(1, 3)][..])]).unwrap();
        d4.wait().await.unwrap();
        let s4 = s4.pop().unwrap();
        assert_eq!(s4.answers[0].as_ref().unwrap(), &Once::Duplicate(3));
        assert!(s4.tail.unwrap().ops.is_empty());
        e.close().unwrap();
    });
}

#[test]
fn a_node_learns_its_lost_tail_and_answers_retries_from_it() {
    let (a_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    rt().block_on(async {
        // The applier: one durable add, then its records stop short of the
        // disk and it crashes, while the replica got its shard and ids.
        let stall = Arc::new(AtomicBool::new(false));
        let opts = Options {
            stall_writes: Some(stall.clone()),
            ..small_options()
        };
        let a = open(a_dir.path(), &opts);
        let r = open(r_dir.path(), &small_options());
        let k = key(3);
        let (mut s, d) = a.add_once([(&k, &[add(5, 1)][..])]).unwrap();
        d.wait().await.unwrap();
        let first = s.pop().unwrap();
        stall.store(true, Ordering::Relaxed);
        let (mut s, _lost) = a.add_once([(&k, &[add(7, 2)][..])]).unwrap();
        let lost = s.pop().unwrap();
        assert_eq!(lost.answers[0].as_ref().unwrap(), &Once::Applied(12));
        for sealed in [first, lost] {
            let item = (k.clone(), sealed.replicate.unwrap(), sealed.tail);
            apply_tails(&r, &[item]).await.unwrap();
        }
        let old = a.counter_id();
        // A crash with the last record never written.
        let crashed = crash(a, a_dir.path());
        let a = open(crashed.path(), &small_options());
        assert_ne!(a.counter_id(), old);
        assert_eq!(a.retired().unwrap(), [old]);
        assert_eq!(
            a.get(&k).unwrap().value().unwrap(),
            5,
            "the last add was lost here"
        );
        let learned: Vec<_> = r
            .fence_tails(&a.retired().unwrap())
            .into_iter()
            .map(|(k, ops)| (k.clone(), r.get(&k).unwrap(), ops))
            .collect();
        a.learn_tails(learned).await.unwrap();
        a.tails_learned(&[old]).unwrap();
        r.forget_tails(&[old]).unwrap();
        // Learned durably: through another crash.
        let crashed = crash(a, crashed.path());
        let a = open(crashed.path(), &small_options());
        assert!(
            !a.retired().unwrap().contains(&old),
            "learned: off the list"
        );
        let (mut s, d) = a.add_once([(&k, &[add(7, 2), add(1, 3)][..])]).unwrap();
        d.wait().await.unwrap();
        let answers = s.pop().unwrap().answers;
        assert_eq!(
            answers[0].as_ref().unwrap(),
            &Once::Duplicate(12),
            "not applied again"
        );
        assert_eq!(answers[1].as_ref().unwrap(), &Once::Applied(13));
        assert_eq!(a.get(&k).unwrap().value().unwrap(), 13);
        a.close().unwrap();
        r.close().unwrap();
    });
}
