//! Tally's benchmarks: the engine bench (`engine-bench`) and the cluster
//! load generator (`tally-bench`), whose runs `plot` draws.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and benchmarks measure real time, and draw real random bytes"
)]

pub mod plot;
pub mod target;
