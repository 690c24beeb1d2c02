//! Lists under chaos: each worker owns its lists and `RPUSH`es increasing
//! values onto them through random nodes' RESP ports, one push at a time
//! (a list's changes are led by its first writable replica, whichever node
//! is asked); a list takes [`PUSHES_PER_LIST`] pushes, then the worker
//! moves on to a new one. A push is acknowledged (an integer reply) or of
//! unknown outcome (an error, a timeout, a broken connection): it is never
//! retried, so an unknown one may land late or never.
//!
//! After healing, every list is read at ALL through every member and
//! judged by [`crate::checker::lists::judge`]: nothing acknowledged lost,
//! nothing invented or doubled, the acknowledged in push order.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::secure::{self, RespStream};
use crate::checker::lists::{Push, judge};

/// Pushes onto one list before the worker starts the next.
const PUSHES_PER_LIST: u64 = 100;
/// How long a reply may take before the push is unknown.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at the final read of one list through one node.
const FINAL_READ_TRIES: usize = 20;

/// What the workers did: per list, its pushes in the order made.
#[derive(Debug, Default)]
pub(crate) struct ListLog {
    /// List name → pushes.
    pub(crate) lists: BTreeMap<String, Vec<Push>>,
    /// Why pushes were not acknowledged (the start of each error), and how often.
    pub(crate) errors: BTreeMap<String, usize>,
}

impl ListLog {
    /// Merges another worker's log into this one.
    pub(crate) fn absorb(&mut self, other: ListLog) {
        self.lists.extend(other.lists);
        for (e, n) in other.errors {
            *self.errors.entry(e).or_default() += n;
        }
    }

    /// Pushes made, and how many were acknowledged.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let all = self.lists.values().flatten();
        let acked = all.clone().filter(|p| p.acked).count();
        (all.count(), acked)
    }
}

type Conn = BufReader<RespStream>;

/// One worker (`w`): pushes until `stop`.
pub(crate) async fn worker(
    w: usize,
    addrs: Vec<SocketAddr>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> ListLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut conns: Vec<Option<Conn>> = addrs.iter().map(|_| None).collect();
    let mut log = ListLog::default();
    let mut value = 0u64;
    while !stop.load(Ordering::Acquire) {
        let name = format!("chaos-list-{w}-{}", value / PUSHES_PER_LIST);
        let node = rng.random_range(0..addrs.len());
        let Some(answer) = push(&mut conns[node], addrs[node], &name, value).await else {
            // Nothing was sent: the node is down, or not a member (yet).
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let acked = answer.is_ok();
        if let Err(why) = answer {
            *log.errors.entry(why).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        log.lists
            .entry(name)
            .or_default()
            .push(Push { value, acked });
        value += 1;
    }
    log
}

/// One `RPUSH` through `addr`: acknowledged, or why not; `None` when it
/// could not be sent (no connection). A connection that failed is dropped.
async fn push(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    name: &str,
    value: u64,
) -> Option<Result<(), String>> {
    if conn.is_none() {
        let dialed = tokio::time::timeout(Duration::from_secs(5), secure::resp(addr)).await;
        *conn = dialed.ok().and_then(Result::ok);
    }
    let c = conn.as_mut()?;
    let command = format!("RPUSH {name} {value}\r\n");
    let reply = async {
        c.get_mut().write_all(command.as_bytes()).await.ok()?;
        c.get_mut().flush().await.ok()?;
        line(c).await
    };
    Some(match tokio::time::timeout(REPLY_TIMEOUT, reply).await {
        Ok(Some(l)) if l.starts_with(':') => Ok(()),
        Ok(Some(l)) if l.starts_with('-') => Err(l.chars().take(48).collect()),
        answer => {
            *conn = None;
            Err(match answer {
                Err(_) => "no reply in time".into(),
                _ => "the connection broke".into(),
            })
        }
    })
}

/// One reply line, without its CRLF.
async fn line(c: &mut Conn) -> Option<String> {
    let mut l = String::new();
    c.read_line(&mut l).await.ok().filter(|&n| n > 0)?;
    l.strip_suffix("\r\n").map(str::to_owned)
}

/// `name`'s list at ALL through `addr`, as numbers.
async fn read_all(addr: SocketAddr, name: &str) -> Result<Vec<u64>, String> {
    let mut c = secure::resp(addr).await.map_err(|e| e.to_string())?;
    let command = format!("CLIENT CONSISTENCY ALL\r\nLRANGE {name} 0 -1\r\n");
    c.get_mut()
        .write_all(command.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let broken = || "the connection broke".to_string();
    let set = line(&mut c).await.ok_or_else(broken)?;
    let head = line(&mut c).await.ok_or_else(broken)?;
    let n: usize = match head.strip_prefix('*') {
        Some(n) if set == "+OK" => n.parse().map_err(|_| format!("reply {head}"))?,
        _ => return Err(format!("replies {set}, {head}")),
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = line(&mut c).await.ok_or_else(broken)?;
        let len: usize = len
            .strip_prefix('$')
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| format!("element header {len}"))?;
        let mut bulk = vec![0; len + 2];
        c.read_exact(&mut bulk).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&bulk[..len]).into_owned();
        out.push(text.parse().map_err(|_| format!("element {text}"))?);
    }
    Ok(out)
}

/// Reads every list at ALL through every node and judges it; answers the
/// violations.
pub(crate) async fn check(addrs: &[SocketAddr], log: &ListLog) -> Vec<String> {
    let mut violations = Vec::new();
    for (name, pushes) in &log.lists {
        for (node, addr) in addrs.iter().enumerate() {
            let mut tries = 0;
            let got = loop {
                match read_all(*addr, name).await {
                    Ok(got) => break Ok(got),
                    Err(e) if tries >= FINAL_READ_TRIES => break Err(e),
                    Err(_) => tries += 1,
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            };
            let what = match got {
                Ok(got) => judge(pushes, &got),
                Err(e) => Some(format!("cannot be read: {e}")),
            };
            if let Some(what) = what {
                violations.push(format!("list {name} via n{}: {what}", node + 1));
            }
        }
    }
    violations
}
