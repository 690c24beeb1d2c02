//! The group-commit window: how long the syncer waits, after an fsync, for
//! the writers it released to come back before it starts the next one.
//!
//! Writers released by one fsync come back a few microseconds later; if the
//! next fsync started at once it would miss them, and the writers would split
//! into two half-size groups taking turns. So after an fsync that released W
//! waiters, the syncer waits until W waiters are queued again, or for at most
//! `group_commit_window_us` or as long as the last fsync took, whichever
//! comes first. A lone writer is never delayed by more than its own round
//! trip, and nobody by more than another fsync would have cost: with 50
//! Redis clients on one node (fsyncs of 60-80 us), the cap took a batch's
//! wait for its leader's fsync from 410-485 us to 280-350 us.
//!
//! Writers that take longer than the window to come back (a leader's adds
//! wait for replicas; replica applies arrive when peers send them) gain
//! nothing from it, and every window would only delay the fsync. So when
//! fewer than half of them are back by its end, the next windows are
//! skipped, for twice as many cycles each time (up to [`WINDOW_SKIP_MAX`]);
//! a window that fills resets that.
//!
//! [`Window`] is that decision alone, fed events and answering what to
//! do; the syncer does the waiting (see `syncer`).

use std::time::Duration;

/// Most fsync cycles skipped between two group-commit windows that failed.
pub(super) const WINDOW_SKIP_MAX: u32 = 64;

/// What the syncer does before its next group commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Write at once: nobody to wait for, or this window is skipped.
    Go,
    /// Wait until `waiters` are in, for at most `max`, then report how
    /// many came back ([`Window::came_back`]).
    Wait {
        /// As many as the last group commit released.
        waiters: usize,
        /// The window or the last fsync's time, whichever is shorter.
        max: Duration,
    },
}

/// The window policy, between the syncer's group commits.
///
/// # Invariants
/// - `1 ≤ backoff ≤ WINDOW_SKIP_MAX` and `skip ≤ WINDOW_SKIP_MAX`.
#[derive(Debug)]
pub(super) struct Window {
    /// `group_commit_window_us`.
    window: Duration,
    /// Waiters the last group commit released.
    released: usize,
    /// How long the last fsync took.
    last_sync: Duration,
    /// Windows still to skip.
    skip: u32,
    /// Windows to skip after the next one that fails.
    backoff: u32,
}

impl Window {
    /// A policy waiting at most `window`; until an fsync is timed, the
    /// window is also taken as the fsync's time.
    pub(super) fn new(window: Duration) -> Self {
        Window {
            window,
            released: 0,
            last_sync: window,
            skip: 0,
            backoff: 1,
        }
    }

    /// The syncer's group commit released `released` waiters; the last
    /// fsync (its own, or one a parking runtime wrote since) took `last_sync`.
    pub(super) fn released(&mut self, released: usize, last_sync: Duration) {
        self.released = released;
        self.last_sync = last_sync;
    }

    /// Before the next group commit: wait for the writers, or go (which
    /// uses up one skipped window when there was one to open).
    pub(super) fn next(&mut self) -> Next {
        if self.released == 0 {
            return Next::Go;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Next::Go;
        }
        Next::Wait {
            waiters: self.released,
            max: self.window.min(self.last_sync),
        }
    }

    /// The window [`Window::next`] opened ended with `waiters` in: fewer
    /// than half of those expected skips the next windows, with a backoff;
    /// enough resets the backoff.
    pub(super) fn came_back(&mut self, waiters: usize) {
        if waiters * 2 < self.released {
            self.skip = self.backoff;
            self.backoff = (self.backoff * 2).min(WINDOW_SKIP_MAX);
        } else {
            self.backoff = 1;
        }
        self.check_invariants();
    }

    /// Asserts the invariants (debug builds only).
    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            assert!(
                (1..=WINDOW_SKIP_MAX).contains(&self.backoff) && self.skip <= WINDOW_SKIP_MAX,
                "window backoff out of range: skip {}, backoff {}",
                self.skip,
                self.backoff
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_micros(100);

    /// One event fed to the policy, or one question with its answer.
    enum Step {
        /// A group commit released this many waiters; its fsync took this many µs.
        Released(usize, u64),
        /// `next()` answers `Go`.
        Go,
        /// `next()` answers `Wait` for this many waiters, at most this many µs.
        Wait(usize, u64),
        /// This many waiters came back by the end of the window.
        CameBack(usize),
    }
    use Step::*;

    fn run(steps: &[Step]) {
        let mut w = Window::new(WINDOW);
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Released(n, us) => w.released(n, Duration::from_micros(us)),
                CameBack(n) => w.came_back(n),
                Go => assert_eq!(w.next(), Next::Go, "step {i}: {w:?}"),
                Wait(waiters, us) => assert_eq!(
                    w.next(),
                    Next::Wait {
                        waiters,
                        max: Duration::from_micros(us)
                    },
                    "step {i}: {w:?}"
                ),
            }
        }
    }

    #[test]
    fn nobody_released_means_no_window() {
        run(&[Go, Go, Released(0, 50), Go]);
    }

    #[test]
    fn waits_for_as_many_as_were_released_at_most_the_shorter_of_window_and_fsync() {
        run(&[
            Released(10, 50),
            Wait(10, 50),
            CameBack(10),
            Released(7, 400),
            Wait(7, 100),
            CameBack(7),
        ]);
    }

    #[test]
    fn until_an_fsync_is_timed_the_window_is_its_time() {
        let mut w = Window::new(WINDOW);
        w.released = 3; // a park commit released them; no fsync timed yet
        assert_eq!(
            w.next(),
            Next::Wait {
                waiters: 3,
                max: WINDOW
            }
        );
    }

    #[test]
    fn half_back_is_enough() {
        run(&[Released(10, 50), Wait(10, 50), CameBack(5), Wait(10, 50)]);
    }

    #[test]
    fn failed_windows_are_skipped_for_twice_as_long_each_time() {
        let mut steps = vec![Released(10, 50)];
        for skipped in [1, 2, 4, 8, 16, 32, 64, 64] {
            steps.push(Wait(10, 50));
            steps.push(CameBack(4));
            steps.extend((0..skipped).map(|_| Go));
        }
        steps.push(Wait(10, 50));
        run(&steps);
    }

    #[test]
    fn a_window_that_fills_resets_the_backoff() {
        run(&[
            Released(10, 50),
            Wait(10, 50),
            CameBack(0),
            Go,
            Wait(10, 50),
            CameBack(0),
            Go,
            Go,
            Wait(10, 50),
            CameBack(10),
            Wait(10, 50),
            CameBack(0),
            Go,
            Wait(10, 50),
        ]);
    }

    #[test]
    fn skips_are_used_only_by_group_commits_with_someone_to_wait_for() {
        run(&[
            Released(10, 50),
            Wait(10, 50),
            CameBack(1),
            Released(0, 50),
            Go,
            Go,
            Released(10, 50),
            Go, // the skip earned above
            Wait(10, 50),
        ]);
    }
}
