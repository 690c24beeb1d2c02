//! Lists through the engine: a change is durable when it returns (the
//! commit log brings it back), survives a flush and a compaction, refuses
//! adds, and a replica's copy merges by the cell's rule.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use crate::common::{add_one, hooked_runtime, key, open, small_options};
use tally_engine::list::{At, End, ListChange, ListReply};
use tally_engine::{Cell, Error, Refusal, now_ms};

fn push(values: &[&str]) -> ListChange {
    ListChange::Push {
        end: End::Left,
        values: values.iter().map(|v| v.as_bytes().to_vec()).collect(),
        only_existing: false,
    }
}

fn elements(c: &Cell) -> Vec<Vec<u8>> {
    c.list().map_or(Vec::new(), |l| l.elements().to_vec())
}

#[test]
fn a_list_survives_replay_flush_and_compaction_and_refuses_adds() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_options();
    let (rt, _hook) = hooked_runtime();
    let want = vec![b"c".to_vec(), b"b".to_vec(), b"a".to_vec()];
    {
        let engine = open(dir.path(), &opts);
        let (done, state) = rt
            .block_on(engine.change_list(&key(1), &push(&["a", "b", "c"]), At::now(now_ms())))
            .unwrap();
        assert_eq!(done.reply, ListReply::Int(3));
        assert_eq!(elements(&state), want, "the state replicated has the list");
        assert!(state.shards().is_empty());
        let add = rt.block_on(add_one(&engine, &key(1), 1));
        assert!(
            matches!(add, Err(Error::Refused(Refusal::WrongType))),
            "{add:?}"
        );
        engine.close().unwrap();
    }
    let engine = open(dir.path(), &opts);
    assert_eq!(elements(&engine.get(&key(1)).unwrap()), want, "replayed");
    engine.flush().unwrap();
    let (_, _) = rt
        .block_on(engine.change_list(&key(1), &push(&["d"]), At::now(now_ms())))
        .unwrap();
    engine.flush().unwrap();
    engine.compact().unwrap();
    engine.close().unwrap();
    let engine = open(dir.path(), &opts);
    let cell = engine.get(&key(1)).unwrap();
    assert_eq!(elements(&cell)[0], b"d", "from the tables");
    assert_eq!(elements(&cell).len(), 4);
    // A replica's older copy loses; a newer one wins whole.
    let mut stale = cell.clone();
    let mut newer = cell.clone();
    tally_engine::list::decide_list(&mut newer, &push(&["e"]), 99, At::now(now_ms())).unwrap();
    stale.merge(&newer, &tally_engine::cell::Merger::default());
    assert_eq!(stale, newer);
}
