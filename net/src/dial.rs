//! One connection per peer, dialled once for everyone who needs it.
//!
//! Every batch to a peer goes over the connection cached here. When it
//! dies (typically: the peer restarted, and its new incarnation resets the
//! old connection), every batch in flight on it fails at once, and each
//! wants a new connection. They must share one: a dial per failed batch
//! buries the restarted peer under hundreds of TLS handshakes just as it
//! comes back, its heartbeats time out behind them, and its peers count it
//! down again and again. So the first caller dials while holding the slot,
//! and the others, waiting on it, take what it dialled. A dial that failed
//! is not repeated for [`DIAL_RETRY`]: callers in that window get its error.
//!
//! Which connection a caller may use, and when it dials, is [`decide`], a
//! pure rule.

use std::net::SocketAddr;
use std::time::Duration;
use tally_world::Instant;

use quinn::{Connection, Endpoint, VarInt};

/// How long a failed dial answers for itself before the next one.
pub(crate) const DIAL_RETRY: Duration = Duration::from_millis(100);

/// What a caller asks of the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Any live connection.
    Any,
    /// Any live connection but this one (its `stable_id`): it failed.
    Not(usize),
    /// A connection dialled since the caller asked: the cached one may be
    /// a dead incarnation's.
    Fresh,
}

/// The cached connection, as [`decide`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cached {
    /// Its `stable_id`.
    pub(crate) id: usize,
    /// Whether it is closed.
    pub(crate) closed: bool,
    /// When it was dialled.
    pub(crate) at: Instant,
}

/// What a caller that asked at `since` does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Use the cached connection.
    Use,
    /// Take the last dial's error: it failed while the caller waited, or
    /// less than [`DIAL_RETRY`] ago.
    Fail,
    /// Dial.
    Dial,
}

/// Whether the cached connection serves a caller that wants `want` and
/// asked at `since`, or the last dial's failure answers it, or it dials.
pub(crate) fn decide(
    cached: Option<Cached>,
    failed_at: Option<Instant>,
    want: Want,
    since: Instant,
    now: Instant,
) -> Decision {
    if let Some(c) = cached
        && !c.closed
    {
        let serves = match want {
            Want::Any => true,
            Want::Not(failed) => c.id != failed,
            Want::Fresh => c.at >= since,
        };
        if serves {
            return Decision::Use;
        }
    }
    match failed_at {
        Some(at) if at >= since || now.duration_since(at) < DIAL_RETRY => Decision::Fail,
        _ => Decision::Dial,
    }
}

#[derive(Default)]
struct Slot {
    conn: Option<(Connection, Instant)>,
    failed: Option<(Instant, String)>,
}

/// The connection to one peer (see the module docs).
#[derive(Default)]
pub(crate) struct Dialler {
    slot: tokio::sync::Mutex<Slot>,
}

/// Where and how to dial.
pub(crate) struct Target<'a> {
    /// The local endpoint.
    pub(crate) endpoint: &'a Endpoint,
    /// The peer's address.
    pub(crate) addr: SocketAddr,
    /// The peer's node id: the name its certificate must carry.
    pub(crate) id: &'a str,
    /// The TLS client configuration.
    pub(crate) config: quinn::ClientConfig,
    /// How long a handshake may take.
    pub(crate) timeout: Duration,
}

impl Dialler {
    /// A connection as `want` says: the cached one if it serves, else one
    /// new dial shared by every caller waiting meanwhile. `close_code` is
    /// what a replaced connection is closed with.
    pub(crate) async fn connection<'a>(
        &self,
        want: Want,
        target: impl FnOnce() -> Target<'a>,
        close_code: u32,
    ) -> Result<Connection, String> {
        let since = Instant::now();
        let mut slot = self.slot.lock().await;
        let cached = slot.conn.as_ref().map(|(c, at)| Cached {
            id: c.stable_id(),
            closed: c.close_reason().is_some(),
            at: *at,
        });
        let failed_at = slot.failed.as_ref().map(|f| f.0);
        match decide(cached, failed_at, want, since, Instant::now()) {
            Decision::Use => {
                if let Some((c, _)) = &slot.conn {
                    return Ok(c.clone());
                }
            }
            Decision::Fail => {
                if let Some((_, why)) = &slot.failed {
                    return Err(why.clone());
                }
            }
            Decision::Dial => {}
        }
        if let Some((old, _)) = slot.conn.take() {
            old.close(VarInt::from_u32(close_code), b"dialling again");
        }
        match dial(target()).await {
            Ok(c) => {
                slot.conn = Some((c.clone(), Instant::now()));
                slot.failed = None;
                Ok(c)
            }
            Err(why) => {
                slot.failed = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }
}

async fn dial(t: Target<'_>) -> Result<Connection, String> {
    let connecting = t
        .endpoint
        .connect_with(t.config, t.addr, t.id)
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(t.timeout, connecting).await {
        Ok(Ok(c)) => {
            tracing::info!(peer = %t.id, "connected to the peer");
            Ok(c)
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no handshake within {} ms", t.timeout.as_millis())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(id: usize, closed: bool, at: Instant) -> Option<Cached> {
        Some(Cached { id, closed, at })
    }

    #[test]
    fn a_live_connection_serves_unless_it_failed_or_predates_a_fresh_ask() {
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        let live = cached(7, false, t1);
        assert_eq!(decide(live, None, Want::Any, t2, t2), Decision::Use);
        // Another caller already replaced the failed connection 3.
        assert_eq!(decide(live, None, Want::Not(3), t2, t2), Decision::Use);
        assert_eq!(decide(live, None, Want::Not(7), t2, t2), Decision::Dial);
        assert_eq!(decide(live, None, Want::Fresh, t2, t2), Decision::Dial);
        // Dialled while the caller waited: fresh enough.
        assert_eq!(decide(live, None, Want::Fresh, t0, t2), Decision::Use);
    }

    #[test]
    fn a_closed_connection_serves_no_one() {
        let t0 = Instant::now();
        for want in [Want::Any, Want::Not(3), Want::Fresh] {
            let d = decide(cached(7, true, t0), None, want, t0, t0);
            assert_eq!(d, Decision::Dial, "{want:?}");
        }
    }

    #[test]
    fn a_failed_dial_answers_whoever_waited_for_it_and_callers_soon_after() {
        let t0 = Instant::now();
        let failed = t0 + Duration::from_secs(1);
        let closed = cached(7, true, t0);
        // Waiting since before it failed: its error, not another dial.
        assert_eq!(
            decide(
                closed,
                Some(failed),
                Want::Any,
                t0,
                failed + DIAL_RETRY * 10
            ),
            Decision::Fail
        );
        // Asked after it failed: its error for DIAL_RETRY, then a dial.
        let later = failed + DIAL_RETRY / 2;
        assert_eq!(
            decide(closed, Some(failed), Want::Any, later, later),
            Decision::Fail
        );
        let much_later = failed + DIAL_RETRY * 2;
        assert_eq!(
            decide(closed, Some(failed), Want::Any, much_later, much_later),
            Decision::Dial
        );
    }
}
