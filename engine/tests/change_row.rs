//! `Engine::change_row`: an `EXPIRE` of a whole key changes each cell
//! `change::expire_targets` names, by the rule of one counter's change,
//! and survives a restart.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use crate::common::{add_one, open, small_options};
use tally_engine::change::{Change, When, expire_targets};
use tally_engine::{Key, now_ms, unique};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_expire_of_a_hash_gives_every_live_field_the_deadline_and_no_member_one() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_options();
    let at = now_ms() + 60_000;
    let field = |c: &str| Key::new(b"h", c.as_bytes()).unwrap();
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        for f in ["a", "b"] {
            add_one(&e, &field(f), 3).await.unwrap();
        }
        let (_, durable) = e.admit(b"h", &[b"m".as_slice()]).await.unwrap();
        durable.wait().await.unwrap();
        let count = unique::count_key(b"h").unwrap();
        let member = unique::member_key(b"h", b"m").unwrap();
        // The hash's fields, not the set's count, are the key's first kind.
        let now = now_ms();
        let row = [&field("a"), &field("b"), &count, &member];
        let live: Vec<(&[u8], bool)> = row
            .iter()
            .map(|k| (k.column(), e.get(k).unwrap().live(now)))
            .collect();
        let columns = expire_targets(live);
        assert_eq!(columns, vec![&b"a"[..], &b"b"[..]]);
        let expire = Change::Expire {
            at_ms: at,
            only: When::NoDeadline,
        };
        let done = e.change_row(b"h", &columns, expire, now).await.unwrap();
        assert!(
            done.iter()
                .all(|(_, d, state)| d.applied && state.epoch().expiry.at_ms == at)
        );
        // NX again: nothing changes.
        let again = e.change_row(b"h", &columns, expire, now).await.unwrap();
        assert!(again.iter().all(|(_, d, _)| !d.applied));
        e.close().unwrap();
    });
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        for f in ["a", "b"] {
            assert_eq!(e.get(&field(f)).unwrap().epoch().expiry.at_ms, at);
        }
        let member = unique::member_key(b"h", b"m").unwrap();
        assert_eq!(e.get(&member).unwrap().epoch().expiry.at_ms, 0);
        let count = unique::count_key(b"h").unwrap();
        assert_eq!(e.get(&count).unwrap().epoch().expiry.at_ms, 0);
    });
}
