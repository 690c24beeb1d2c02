//! Logging a recurring error at most once a period: a flood (a full disk,
//! corrupt shards arriving from a peer) costs one line a second, each line
//! counting the ones left out. Engine code cannot use the network crate's
//! limiter, so it has this one. A site's limit is a `static`,
//! process-wide on purpose: the log is the process's, whatever engine in
//! it logs.

use std::time::Duration;
use tally_world::Instant;

/// How often a recurring error is logged at most.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(1);

/// Says when a recurring event may be logged: at most once per `every`,
/// counting the ones left out in between. Pure: it is handed the time.
///
/// # Invariants
/// - `suppressed` counts the events refused since the last one allowed.
#[derive(Debug)]
pub(crate) struct RateLimit {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit::new(LOG_EVERY)
    }
}

impl RateLimit {
    /// At most one event per `every`.
    pub(crate) const fn new(every: Duration) -> Self {
        RateLimit {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// An event at `now`: `Some(n)` if it may be logged, `n` being how many
    /// were left out since the last one logged; `None` if it is left out.
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.every)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_at_most_once_a_period_and_counts_the_rest() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut limit = RateLimit::new(Duration::from_secs(1));
        assert_eq!(limit.allow(at(0)), Some(0), "the first is logged");
        assert_eq!(limit.allow(at(10)), None);
        assert_eq!(limit.allow(at(999)), None);
        assert_eq!(limit.allow(at(1000)), Some(2), "two left out");
        assert_eq!(limit.allow(at(1500)), None);
        assert_eq!(limit.allow(at(5000)), Some(1));
        assert_eq!(limit.allow(at(6000)), Some(0));
        // A clock read out of order never logs twice in a period.
        assert_eq!(limit.allow(at(5999)), None);
    }
}
