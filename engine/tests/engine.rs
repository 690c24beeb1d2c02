//! The engine's integration tests, one module per subject, linked into
//! one test binary: each binary links the engine, and one instead of
//! twenty saves the build about a minute. `disk_full` and `park_commit`
//! stay binaries of their own: one limits the whole process's file size,
//! the other counts its threads. Run one subject with `cargo test -p
//! tally-engine --test engine -- crash::`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

mod apply_wait;
mod change_row;
mod combined_values;
mod counter_cache;
mod crash;
mod failures;
mod limits;
mod lists;
mod log_bound;
mod model;
mod once;
mod once_crash;
mod purge;
mod recovery;
mod relay;
mod row_limit;
mod sstable_corruption;
mod tails;
mod torn_tail;
mod unique;
