//! Latency histograms: fixed buckets of atomic counts, cheap enough to
//! observe on the data path, read as a snapshot for status pages and
//! metrics (the node renders them; the engine knows no format).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds: 50 µs to 10 s, about
/// three per decade (an fsync, a quorum round trip and a timeout each fall
/// in a bucket of their own).
pub const BUCKETS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// A histogram of durations.
#[derive(Debug, Default)]
pub struct Latencies {
    /// Per bucket, and one past the last for longer ones.
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// Observations at or below each bound of [`BUCKETS_US`] (cumulative,
    /// as Prometheus' buckets are).
    pub cumulative: Vec<u64>,
    /// All observations.
    pub count: u64,
    /// Their sum, in microseconds.
    pub sum_us: u64,
}

impl Latencies {
    /// An empty histogram (usable in a `static`).
    pub const fn new() -> Latencies {
        Latencies {
            counts: [const { AtomicU64::new(0) }; BUCKETS_US.len() + 1],
            sum_us: AtomicU64::new(0),
        }
    }

    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKETS_US.partition_point(|&bound| bound < us);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut cumulative = Vec::with_capacity(BUCKETS_US.len());
        let mut total = 0u64;
        for c in &self.counts[..BUCKETS_US.len()] {
            total += c.load(Relaxed);
            cumulative.push(total);
        }
        total += self.counts[BUCKETS_US.len()].load(Relaxed);
        LatencySnapshot {
            cumulative,
            count: total,
            sum_us: self.sum_us.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets() {
        let h = Latencies::new();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_micros(51));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.sum_us, 50 + 51 + 3_000 + 60_000_000);
        assert_eq!(s.cumulative[0], 1, "50 µs is at most the first bound");
        assert_eq!(s.cumulative[1], 2);
        assert_eq!(s.cumulative[5], 2, "3 ms is above 2.5 ms");
        assert_eq!(s.cumulative[6], 3);
        assert_eq!(*s.cumulative.last().unwrap(), 3, "60 s is past every bound");
    }
}
