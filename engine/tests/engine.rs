//! The engine's integration tests, one module per subject, linked into
//! one test binary: each binary links the engine, and one instead of
//! eighteen saves the build about a minute. Four stay binaries of their
//! own, for what they do to their process: `disk_full` limits its file
//! size, `park_commit` counts its threads, and `crash` and `once_crash`
//! spawn children, which hold a copy of every open file (another test's
//! locked data directory too) until they exec. Run one subject with
//! `cargo test -p tally-engine --test engine -- recovery::`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

mod apply_wait;
mod change_row;
mod combined_values;
mod counter_cache;
mod failures;
mod limits;
mod lists;
mod log_bound;
mod model;
mod once;
mod purge;
mod recovery;
mod relay;
mod row_limit;
mod sstable_corruption;
mod tails;
mod torn_tail;
mod unique;
