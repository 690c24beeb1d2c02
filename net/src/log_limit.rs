//! Rate limits for log lines that someone outside the node can trigger.
//!
//! A failed handshake, a malformed batch or a refused request costs an
//! attacker one packet and the node one log line: without a limit, a flood
//! of them fills the disk and buries everything else. Each such log site
//! owns a [`LogLimit`] and logs only when it says so, at most once per
//! interval, with the number of lines it swallowed since the last one:
//!
//! ```
//! use tally_net::log_limit::LogLimit;
//! static REFUSED: LogLimit = LogLimit::per_second();
//! if let Some(suppressed) = REFUSED.admit() {
//!     tracing::warn!(suppressed, "refused a peer connection");
//! }
//! ```
//!
//! The decision itself is [`Gate::admit`], a pure function of the time.
//! A site's limit is a `static`, process-wide on purpose: the log is the
//! process's, whatever node in it logs.

use std::time::Duration;
use tally_world::Instant;

use parking_lot::Mutex;

/// The state of one rate-limited log site: when it last logged and how
/// many lines it suppressed since.
///
/// # Invariants
///
/// `suppressed` is 0 while `last` is `None`: nothing is suppressed before
/// the first line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gate {
    last: Option<Instant>,
    suppressed: u64,
}

impl Gate {
    /// A gate that has never logged.
    pub const fn new() -> Gate {
        Gate {
            last: None,
            suppressed: 0,
        }
    }

    /// Whether a line at `now` may be logged, `every` being the least time
    /// between two lines: `Some(n)` with the `n` lines suppressed since the
    /// last one (which the caller logs with it), or `None` to drop this one.
    /// A clock that goes back counts as no time passed.
    pub fn admit(&mut self, now: Instant, every: Duration) -> Option<u64> {
        let due = match self.last {
            None => true,
            Some(last) => now.saturating_duration_since(last) >= every,
        };
        if due {
            self.last = Some(now);
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            None
        }
    }
}

/// A [`Gate`] shared by every task that logs at one site, with its interval.
#[derive(Debug)]
pub struct LogLimit {
    gate: Mutex<Gate>,
    every: Duration,
}

impl LogLimit {
    /// At most one line per second.
    pub const fn per_second() -> LogLimit {
        LogLimit::every(Duration::from_secs(1))
    }

    /// At most one line per `every`.
    pub const fn every(every: Duration) -> LogLimit {
        LogLimit {
            gate: Mutex::new(Gate::new()),
            every,
        }
    }

    /// Whether to log now; `Some(suppressed)` as [`Gate::admit`].
    pub fn admit(&self) -> Option<u64> {
        self.gate.lock().admit(Instant::now(), self.every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_line_is_logged_and_the_next_within_a_second_are_counted() {
        let t0 = Instant::now();
        let mut g = Gate::new();
        assert_eq!(g.admit(t0, SEC), Some(0));
        for ms in [1, 10, 500, 999] {
            assert_eq!(g.admit(t0 + Duration::from_millis(ms), SEC), None, "{ms}");
        }
        assert_eq!(g.admit(t0 + SEC, SEC), Some(4), "one line with the count");
        assert_eq!(g.admit(t0 + SEC, SEC), None);
        assert_eq!(g.admit(t0 + 2 * SEC, SEC), Some(1));
    }

    #[test]
    fn the_interval_runs_from_the_last_line_logged() {
        let t0 = Instant::now();
        let mut g = Gate::new();
        let at = |ms| t0 + Duration::from_millis(ms);
        let logged: Vec<(u64, u64)> = [0, 300, 900, 1000, 1500, 1999, 2000, 5000]
            .into_iter()
            .filter_map(|ms| g.admit(at(ms), SEC).map(|n| (ms, n)))
            .collect();
        assert_eq!(logged, vec![(0, 0), (1000, 2), (2000, 2), (5000, 0)]);
    }

    #[test]
    fn a_clock_going_back_logs_nothing_more() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut g = Gate::new();
        assert_eq!(g.admit(t0, SEC), Some(0));
        assert_eq!(g.admit(t0 - Duration::from_secs(5), SEC), None);
        assert_eq!(g.admit(t0 + SEC, SEC), Some(1));
    }

    #[test]
    fn a_shared_limit_lets_one_line_through() {
        let limit = LogLimit::per_second();
        assert_eq!(limit.admit(), Some(0));
        assert_eq!(limit.admit(), None);
        assert_eq!(limit.admit(), None);
    }
}
