//! Tally's benchmarks: the engine bench (`engine-bench`) and, later, the
//! cluster load generator.
