//! Tally's benchmarks: the engine bench (`engine-bench`) and the cluster
//! load generator (`tally-bench`), whose runs `plot` draws.

pub mod plot;
pub mod target;
