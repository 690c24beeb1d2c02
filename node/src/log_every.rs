//! A log line at most once per interval, with how many were held back.

use std::time::{Duration, Instant};

/// Decides which of a stream of like events get a log line: the first,
/// then the first after each `interval`, each saying how many it stands
/// for. A flood of refusals or failed accepts then costs one line a
/// second, not one each.
///
/// # Invariants
/// - `suppressed` counts the events since the last one logged.
#[derive(Debug)]
pub(crate) struct LogEvery {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogEvery {
    /// Logs at most one event per `interval`.
    pub(crate) const fn new(interval: Duration) -> Self {
        LogEvery {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// An event at `now`: `Some(n)` if it is to be logged, `n` being the
    /// events held back since the last one logged; `None` to stay quiet.
    pub(crate) fn hit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_counting_the_rest() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut every = LogEvery::new(Duration::from_secs(1));
        let got: Vec<Option<u64>> = [0, 1, 500, 999, 1000, 1001, 1500, 5000, 5000]
            .into_iter()
            .map(|t| every.hit(ms(t)))
            .collect();
        assert_eq!(
            got,
            [
                Some(0),
                None,
                None,
                None,
                Some(3),
                None,
                None,
                Some(2),
                None
            ]
        );
        // A clock that goes back stays quiet rather than flooding.
        assert_eq!(every.hit(ms(10)), None);
    }
}
