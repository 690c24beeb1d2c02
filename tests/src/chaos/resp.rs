//! Chaos over RESP: workers that send pipelines of counter commands and
//! scripts to one node's RESP port ([`crate::resp_work`] says what they
//! send and how their replies are judged), each logged in as a user of
//! its own in a secure run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::io::BufReader;

use super::secure::{self, RespStream};
use super::workload::{key_name, wall_ms};
use crate::checker::Op;
use crate::resp_work::{Clocks, Keys, exchange, pipeline};

/// One RESP client, logged in as `user` (in a secure run): pipelines
/// through one node until told to stop; reconnects when its node goes
/// away. Answers its history and how many of its scripts were answered.
pub(crate) async fn worker(
    (process, user): (usize, Option<&'static str>),
    addrs: Vec<SocketAddr>,
    (keys, reset_keys): (usize, std::ops::Range<usize>),
    seed: u64,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> (Vec<Op>, usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut node = process % addrs.len();
    let now = |t: Instant| u64::try_from(t.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
    let mut conn: Option<BufReader<RespStream>> = None;
    let mut history = Vec::new();
    let mut scripted = 0;
    let keys = Keys {
        count: keys,
        reset: reset_keys,
        name: |k| String::from_utf8_lossy(&key_name(k)).into_owned(),
    };
    while !stop.load(Ordering::Acquire) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                let dial = secure::resp_as(addrs[node], user);
                match tokio::time::timeout(Duration::from_secs(5), dial).await {
                    Ok(Ok(s)) => conn.insert(s),
                    _ => {
                        // Down, or gone from the ring: try the next node.
                        node = (node + 1) % addrs.len();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        let clocks = Clocks {
            run_ns: now(Instant::now()),
            wall_ms: wall_ms(),
        };
        let p = pipeline(&mut rng, &keys, clocks);
        let done = exchange(c, p, (process, node), || now(Instant::now())).await;
        history.extend(done.ops);
        scripted += done.scripted;
        if done.broken {
            conn = None;
        }
    }
    (history, scripted)
}
