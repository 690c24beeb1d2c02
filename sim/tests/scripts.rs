//! The golden scripts of `sim/scripts/`: each runs on a simulated cluster
//! and must print what the file says. `UPDATE_GOLDEN=1 cargo test -p
//! tally-sim --test scripts` writes the new output back instead, for a
//! review of the diff.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::path::{Path, PathBuf};

use tally_sim::world::SimWorld;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

fn check(name: &str) {
    SimWorld::install().unwrap();
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    let path = dir().join(format!("{name}.txt"));
    let trace = std::env::var("SIM_TRACE").is_ok_and(|v| v == "1");
    if trace {
        // The nodes' logs too, at TALLY_LOG's level.
        let filter = tracing_subscriber::EnvFilter::try_from_env("TALLY_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .without_time()
            .try_init();
    }
    if let Err(e) = tally_sim::script::check(&path, update, trace) {
        panic!("{e:#}");
    }
}

/// One test per script, so that they run side by side and fail alone.
macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*

        #[test]
        fn every_script_has_its_test() {
            let listed = [$(stringify!($name)),*];
            for entry in std::fs::read_dir(dir()).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                assert!(
                    listed.contains(&name.as_str()),
                    "sim/scripts/{name}.txt has no test: add it to scripts! in {}",
                    file!()
                );
            }
        }
    };
}

scripts!(
    hints,
    hint_window,
    repair,
    repair_resumed,
    tails,
    tails_skipped,
    powercut,
    resets,
    catch_up,
    agreed_handoff,
    agreed_handoff_skipped,
    topology,
    topology_resumed,
    removenode,
    cleanup,
    unique,
    once,
    expiry,
    expiry_ignored,
    lists,
    lists_stamped,
    expiry_unconfirmed,
    slices,
    slices_trusting_longest,
    serial_reads
);
