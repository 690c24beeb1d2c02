//! When a client retries an add with an operation id, as a pure rule.
//!
//! An add with an id may be sent again whatever happened to it: the node
//! that applies it answers a retry with the original value (see
//! [`crate::once`]). So every failure that may go away is retried, with
//! the same id, after a growing pause, until a deadline; only failures
//! that would come back the same are final at once. After the deadline
//! the last error is reported, saying "outcome unknown" if any attempt
//! may have been applied, so that the caller knows to retry the same id
//! later rather than make a new add.

use std::time::Duration;

use crate::client::ClientError;
use crate::wire::{ErrorKind, Outcome, WireError};

/// How a client retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// No attempt starts after this long.
    pub deadline: Duration,
    /// The pause after the first failure; it doubles with each.
    pub backoff_min: Duration,
    /// The longest pause.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    /// Thirty seconds: long enough for a node to restart.
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(30),
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_secs(1),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Try again after `after`; through another node when `switch_node`
    /// (the connection failed, or the node could not coordinate).
    Retry {
        /// The pause.
        after: Duration,
        /// Whether to send the next attempt through another node.
        switch_node: bool,
    },
    /// Report the error.
    GiveUp,
}

/// Decides after attempt number `attempt` (from 1) failed with `error`,
/// `left` before the deadline; `jitter` in `[0, 1)` spreads the pauses of
/// clients that failed together.
pub fn decide(
    policy: &RetryPolicy,
    error: &ClientError,
    attempt: u32,
    left: Duration,
    jitter: f64,
) -> Decision {
    let switch_node = match error {
        ClientError::Connect { .. } | ClientError::Closed(_) | ClientError::Timeout(_) => true,
        ClientError::Protocol(_) => return Decision::GiveUp,
        ClientError::Server(e) => match e.kind {
            ErrorKind::Unavailable | ErrorKind::Storage => true,
            ErrorKind::Timeout | ErrorKind::Internal => false,
            ErrorKind::Invalid
            | ErrorKind::Overflow
            | ErrorKind::IdConflict
            | ErrorKind::IdExpired
            | ErrorKind::NoAuth
            | ErrorKind::Denied
            | ErrorKind::WrongType => return Decision::GiveUp,
        },
    };
    let doubled = policy
        .backoff_min
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let full = doubled.min(policy.backoff_max);
    let after = full.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0);
    if after >= left {
        return Decision::GiveUp;
    }
    Decision::Retry { after, switch_node }
}

/// Sends with `send` until it succeeds or [`decide`] gives up, pausing
/// between attempts; `send` is told whether to go through another node
/// than the last. Answers the value, or [`final_error`].
pub async fn until_known<T, F>(
    policy: &RetryPolicy,
    mut send: impl FnMut(bool) -> F,
) -> Result<T, ClientError>
where
    F: std::future::Future<Output = Result<T, ClientError>>,
{
    let start = tally_world::Instant::now();
    let mut any_unknown = false;
    let mut switch = false;
    for attempt in 1.. {
        let error = match send(switch).await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        any_unknown |= error.outcome() == Outcome::Unknown;
        let left = policy.deadline.saturating_sub(start.elapsed());
        match decide(policy, &error, attempt, left, jitter()) {
            Decision::Retry { after, switch_node } => {
                switch = switch_node;
                tokio::time::sleep(after).await;
            }
            Decision::GiveUp => {
                return Err(final_error(error, any_unknown, attempt, start.elapsed()));
            }
        }
    }
    unreachable!("the loop returns")
}

/// A random jitter for [`decide`].
pub fn jitter() -> f64 {
    // 53 random bits: every f64 in [0, 1) of that precision.
    (tally_world::random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The error to report after `attempts` failed over `elapsed`: the last
/// one, made "outcome unknown" when any attempt may have been applied.
pub fn final_error(
    last: ClientError,
    any_unknown: bool,
    attempts: u32,
    elapsed: Duration,
) -> ClientError {
    if attempts <= 1 || (!any_unknown && last.outcome() == Outcome::NotApplied) {
        return last;
    }
    let (outcome, advice) = match any_unknown {
        true => ("outcome unknown", "; retry the same id to find out"),
        false => ("not applied", ""),
    };
    let message = format!(
        "{outcome} after {attempts} attempts over {:.1} s (last: {last}){advice}",
        elapsed.as_secs_f64()
    );
    let kind = last.kind().unwrap_or(ErrorKind::Timeout);
    ClientError::Server(match any_unknown {
        true => WireError::unknown(kind, message),
        false => WireError::not_applied(kind, message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(kind: ErrorKind) -> ClientError {
        ClientError::Server(WireError::new(kind, "x"))
    }

    #[test]
    fn what_is_retried_and_through_which_node() {
        let p = RetryPolicy::default();
        let left = Duration::from_secs(10);
        // (error, retried?, through another node?)
        let cases = [
            (ClientError::Closed("gone".into()), true, true),
            (ClientError::Timeout(5000), true, true),
            (server(ErrorKind::Unavailable), true, true),
            (server(ErrorKind::Storage), true, true),
            (server(ErrorKind::Timeout), true, false),
            (server(ErrorKind::Internal), true, false),
            (server(ErrorKind::Invalid), false, false),
            (server(ErrorKind::Overflow), false, false),
            (server(ErrorKind::IdConflict), false, false),
            (server(ErrorKind::IdExpired), false, false),
            (ClientError::Protocol("?".into()), false, false),
        ];
        for (e, retried, switch) in cases {
            match decide(&p, &e, 1, left, 0.0) {
                Decision::Retry { switch_node, .. } => {
                    assert!(retried, "{e} retried");
                    assert_eq!(switch_node, switch, "{e}");
                }
                Decision::GiveUp => assert!(!retried, "{e} not retried"),
            }
        }
    }

    #[test]
    fn pauses_double_up_to_the_cap_and_stop_at_the_deadline() {
        let p = RetryPolicy::default();
        let e = server(ErrorKind::Unavailable);
        let after = |attempt, jitter| match decide(&p, &e, attempt, Duration::from_secs(60), jitter)
        {
            Decision::Retry { after, .. } => after,
            Decision::GiveUp => panic!("gave up"),
        };
        assert_eq!(after(1, 0.0), Duration::from_millis(10));
        assert!(after(1, 0.999_999) < Duration::from_millis(20));
        assert!(after(1, 0.999_999) > Duration::from_millis(19));
        assert_eq!(after(2, 0.0), Duration::from_millis(20));
        assert_eq!(after(40, 0.0), Duration::from_millis(500), "capped");
        assert_eq!(
            decide(&p, &e, 3, Duration::from_millis(30), 0.5),
            Decision::GiveUp,
            "the pause would pass the deadline"
        );
    }

    #[test]
    fn the_final_error_says_whether_anything_may_have_happened() {
        let t = Duration::from_secs(3);
        let refused = server(ErrorKind::Unavailable);
        assert_eq!(
            final_error(refused.clone(), false, 1, t).to_string(),
            refused.to_string()
        );
        let e = final_error(refused.clone(), true, 4, t);
        assert_eq!(e.outcome(), Outcome::Unknown);
        assert!(
            e.to_string().contains("outcome unknown after 4 attempts"),
            "{e}"
        );
        let e = final_error(ClientError::Timeout(5), false, 2, t);
        assert_eq!(e.outcome(), Outcome::NotApplied);
    }
}
