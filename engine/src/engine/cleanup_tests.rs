//! `Engine::cleanup`: the data a node no longer replicates goes, its own
//! shards stay.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::engine::test_support::{add_one, apply_one};
use crate::{Cell, Engine, Keep, Key, Options, Shard};

#[tokio::test]
async fn cleanup_drops_what_is_not_kept_but_this_nodes_own_shards() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(dir.path(), Options::default()).unwrap();
    let own = e.counter_id();
    let key = |i: u32| Key::new(format!("k{i}").as_bytes(), b"").unwrap();
    for i in 0..100 {
        // Another node's shard on every key; this node's own on the even ones.
        let theirs = Shard {
            counter_id: 7,
            clock: 1,
            value: 10,
        };
        apply_one(
            &e,
            &key(i),
            &Cell::from_parts(crate::Epoch::default(), [theirs]),
        )
        .await
        .unwrap();
        if i % 2 == 0 {
            add_one(&e, &key(i), 1).await.unwrap();
        }
    }
    let keep = |k: &Key| match k.partition().ends_with(b"0") || k.partition().ends_with(b"5") {
        true => Keep::Whole,
        false => Keep::Own,
    };
    let (kept, dropped) = e.cleanup(None, keep).unwrap();
    assert_eq!((kept, dropped), (20, 80));
    for i in 0..100u32 {
        let c = e.get(&key(i)).unwrap();
        let want = match (i % 5 == 0, i % 2 == 0) {
            (true, true) => 11, // kept whole
            (true, false) => 10,
            (false, true) => 1, // only its own shard
            (false, false) => 0,
        };
        assert_eq!(c.value(), Ok(want), "k{i}");
        assert_eq!(c.shard(own).is_some(), i % 2 == 0, "k{i}");
    }
    // Keeping nothing: the 60 cells left go, but for the own shards.
    assert_eq!(e.cleanup(None, |_| Keep::Own).unwrap(), (0, 60));
    for i in 0..100u32 {
        let want = if i % 2 == 0 { 1 } else { 0 };
        assert_eq!(e.get(&key(i)).unwrap().value(), Ok(want), "k{i}");
    }
    // Keeping nothing at all of the first ten: their own shards go too.
    let nothing = |k: &Key| match k.partition().len() == 2 {
        true => Keep::Nothing,
        false => Keep::Whole,
    };
    assert_eq!(e.cleanup(None, nothing).unwrap(), (45, 5));
    for i in 0..100u32 {
        let c = e.get(&key(i)).unwrap();
        assert_eq!(c.value(), Ok(i64::from(i >= 10 && i % 2 == 0)), "k{i}");
        assert_eq!(c.exists(), i >= 10 && i % 2 == 0, "k{i}");
    }
    // An empty engine cleans up to nothing.
    let empty = tempfile::tempdir().unwrap();
    let e2 = Engine::open(empty.path(), Options::default()).unwrap();
    assert_eq!(e2.cleanup(None, |_| Keep::Own).unwrap(), (0, 0));
}

/// A cleanup of some ranges (a `FLUSHDB`'s) rewrites the tables holding
/// keys in them and leaves the others' files as they are.
#[tokio::test]
async fn a_cleanup_of_some_ranges_rewrites_only_the_tables_that_hold_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(dir.path(), Options::default()).unwrap();
    let key = |p: &str, i: u32| Key::new(format!("{p}{i}").as_bytes(), b"").unwrap();
    let tables = || crate::fsutil::numbered_files(dir.path(), "sst").unwrap();
    for i in 0..50 {
        add_one(&e, &key("a", i), 1).await.unwrap();
    }
    e.flush().unwrap();
    let a = tables();
    for i in 0..50 {
        add_one(&e, &key("m", i), 2).await.unwrap();
    }
    e.flush().unwrap();
    assert_eq!(tables().len(), 2);
    let range = |from: &str, to: Option<&str>| {
        let k = |p: &str| Key::new(p.as_bytes(), b"").unwrap();
        (k(from), to.map(k))
    };
    let nothing_of_m = |k: &Key| match k.partition().starts_with(b"m") {
        true => Keep::Nothing,
        false => Keep::Whole,
    };
    // Ranges no table holds a key of: nothing is rewritten.
    let none = [range("b", Some("m")), range("n", None)];
    assert_eq!(e.cleanup(Some(&none), nothing_of_m).unwrap(), (0, 0));
    assert_eq!(tables().len(), 2);
    assert_eq!(
        e.cleanup(Some(&[range("m", Some("n"))]), nothing_of_m)
            .unwrap(),
        (0, 50)
    );
    let after = tables();
    assert!(
        after.contains(&a[0]),
        "the table of a* was rewritten: {after:?}"
    );
    assert_eq!(after.len(), 2, "{after:?}");
    for i in 0..50 {
        assert_eq!(e.get(&key("a", i)).unwrap().value(), Ok(1));
        assert_eq!(e.get(&key("m", i)).unwrap().value(), Ok(0));
    }
}

/// A cell that is an epoch alone (a delete: no shards) on a key kept
/// only for this node's own shards goes from the tables and from the
/// counter cache alike, so the same state sent again (a repair's push,
/// once the range is this node's again) is stored, not taken as no
/// change by a cache that still held it.
#[tokio::test]
async fn a_cleanup_drops_an_epoch_alone_from_the_cache_as_from_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(dir.path(), Options::default()).unwrap();
    let key = Key::new(b"gone", b"").unwrap();
    let deleted = Cell::from_parts(
        crate::Epoch {
            n: 2,
            origin: u64::MAX,
            ..crate::Epoch::default()
        },
        [],
    );
    apply_one(&e, &key, &deleted).await.unwrap();
    let held = |e: &Engine| {
        let mut found = Vec::new();
        e.scan(None, |k, c| {
            found.push((k.clone(), c.clone()));
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        found
    };
    assert_eq!(held(&e), vec![(key.clone(), deleted.clone())]);
    assert_eq!(e.cleanup(None, |_| Keep::Own).unwrap(), (0, 1));
    assert!(held(&e).is_empty(), "the tables dropped it");
    assert_eq!(e.get(&key).unwrap(), Cell::new(), "so did the cache");
    apply_one(&e, &key, &deleted).await.unwrap();
    assert_eq!(held(&e), vec![(key, deleted)], "sent again, it is stored");
}
