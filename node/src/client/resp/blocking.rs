//! Blocking pops: `BLPOP` and `BRPOP key [key ...] timeout`. The keys are
//! tried in order, and again when one of them changes here or every
//! [`POLL`], until one of them holds an element or the timeout passes (0:
//! wait on). Each try reads the list's length at the connection's level
//! and pops only from a list that holds something, so a waiting client
//! costs a read per key per try, not a change; a pop that finds the list
//! emptied meanwhile tries the next key.
//!
//! A push wakes the waiters on every node that replicates the list (each
//! applies the change: `Node::list_changed`), as Redis wakes its blocked
//! clients; a waiter connected to a node that is not a replica of the
//! list sees the element at its next poll, within [`POLL`]. A client
//! that disconnects stops waiting.

use std::sync::Arc;
use std::time::Duration;

use tally_net::wire::Consistency;
use tally_world::Instant;

use super::lists;
use super::proto::Reply;
use super::session::arity;
use crate::node::Node;

/// How often a waiting pop tries its keys again.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.split_last()) {
        ("blpop" | "brpop", Some((timeout, keys))) if !keys.is_empty() => {
            match timeout_arg(timeout) {
                Ok(timeout) => pop(node, cl, &name[1..], keys, timeout).await,
                Err(e) => e,
            }
        }
        ("blpop" | "brpop", _) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// The timeout in seconds (a float, as Redis takes it): `None` to wait
/// on.
fn timeout_arg(a: &[u8]) -> Result<Option<Duration>, Reply> {
    let secs: f64 = std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| s.is_finite())
        .ok_or_else(|| Reply::err("ERR timeout is not a float or out of range"))?;
    if secs < 0.0 {
        return Err(Reply::err("ERR timeout is negative"));
    }
    Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs.min(1e9))))
}

/// Pops with `pop` (`lpop` or `rpop`) from the first of `keys` that holds
/// an element: `[key, element]`, or nil once `timeout` passed.
async fn pop(
    node: &Arc<Node>,
    cl: Consistency,
    pop: &str,
    keys: &[Vec<u8>],
    timeout: Option<Duration>,
) -> Reply {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        // Enabled before the keys are looked at: a change meanwhile wakes.
        let mut changed: Vec<_> = keys
            .iter()
            .filter_map(|k| node.list_changed(k))
            .map(Box::pin)
            .collect();
        changed.iter_mut().for_each(|n| {
            n.as_mut().enable();
        });
        for key in keys {
            let one = std::slice::from_ref(key);
            match lists::execute(node, cl, "llen", one).await {
                Some(Reply::Int(n)) if n > 0 => {}
                Some(Reply::Int(_)) => continue,
                Some(other) => return other,
                None => return Reply::err("ERR internal error: LLEN unknown"),
            }
            match lists::execute(node, cl, pop, one).await {
                Some(Reply::Bulk(Some(element))) => {
                    return Reply::Array(vec![Reply::bulk(key.clone()), Reply::bulk(element)]);
                }
                Some(Reply::Bulk(None)) => continue,
                Some(other) => return other,
                None => return Reply::err("ERR internal error: POP unknown"),
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Reply::NIL;
        }
        let next = Instant::now() + POLL;
        let woken = std::future::poll_fn(|cx| {
            match changed.iter_mut().any(|n| n.as_mut().poll(cx).is_ready()) {
                true => std::task::Poll::Ready(()),
                false => std::task::Poll::Pending,
            }
        });
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep_until(deadline.map_or(next, |d| d.min(next))) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_seconds_as_floats() {
        assert_eq!(timeout_arg(b"0"), Ok(None));
        assert_eq!(timeout_arg(b"1.5"), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(timeout_arg(b"2"), Ok(Some(Duration::from_secs(2))));
        assert_eq!(
            timeout_arg(b"-1"),
            Err(Reply::err("ERR timeout is negative"))
        );
        for bad in [&b"soon"[..], b"inf", b"nan", b""] {
            assert_eq!(
                timeout_arg(bad),
                Err(Reply::err("ERR timeout is not a float or out of range")),
                "{bad:?}"
            );
        }
    }
}
