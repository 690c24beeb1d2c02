//! A flipped byte anywhere in an SSTable is a corruption error naming the
//! file and offset: never a panic, never a wrong value.

#![allow(clippy::disallowed_methods, reason = "tests damage files on purpose")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use crate::common::{add_one, key, open};
use tally_engine::{Engine, Error, Options};

const KEYS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_is_reported_not_misread() {
    let src = tempfile::tempdir().unwrap();
    let opts = Options {
        block_bytes: 128,
        ..Options::default()
    };
    {
        let engine = open(src.path(), &opts);
        for i in 0..KEYS {
            add_one(&engine, &key(i), i as i64 * 11 - 100)
                .await
                .unwrap();
        }
        engine.flush().unwrap();
        engine.close().unwrap();
    }
    let table = crate::common::only_table(src.path());
    let pristine = std::fs::read(&table).unwrap();
    let name = table.file_name().unwrap();

    let mut detected_at_open = 0;
    let mut detected_on_read = 0;
    for offset in 0..pristine.len() {
        // Only the identity and the table: the log must not mask the damage.
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(src.path().join("IDENTITY"), dir.path().join("IDENTITY")).unwrap();
        let mut bytes = pristine.clone();
        bytes[offset] ^= 1 << (offset % 8);
        std::fs::write(dir.path().join(name), &bytes).unwrap();

        let check = |e: &Error| match e {
            Error::Corruption { file, .. } => {
                assert_eq!(file.file_name(), Some(name), "flip at {offset}: {e}");
                assert!(e.to_string().contains(" at offset "), "{e}");
            }
            other => panic!("flip at {offset}: expected corruption, got {other}"),
        };
        let engine = match Engine::open(dir.path(), opts.clone()) {
            Ok(engine) => engine,
            Err(e) => {
                check(&e);
                detected_at_open += 1;
                continue;
            }
        };
        let mut failed = false;
        for i in 0..KEYS {
            match engine.get(&key(i)) {
                Ok(cell) => assert_eq!(
                    cell.value().unwrap(),
                    i as i64 * 11 - 100,
                    "flip at {offset}: wrong value"
                ),
                Err(e) => {
                    check(&e);
                    failed = true;
                }
            }
        }
        assert!(failed, "flip at {offset} went unnoticed");
        detected_on_read += 1;
    }
    assert!(
        detected_at_open > 0 && detected_on_read > 0,
        "{detected_at_open} {detected_on_read}"
    );
}
