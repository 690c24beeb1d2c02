//! Scripts in the chaos run: the RESP workers send some of their adds and
//! reads as `EVAL`s (each worker logged in as a user of its own in a
//! secure run), judged with every other operation, while a hostile user's
//! scripts try, all run long, to plant code in the interpreters the
//! others' scripts run in: redefine `redis.call`, overwrite library
//! functions and globals. A sealed node refuses every one of them; a node
//! that let one through would answer the others' adds without making them,
//! which the checker sees (`--unsafe-unsealed-scripts` shows it does).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::secure;

/// An add as a script: answers the counter's value after it.
pub(crate) const ADD: &str = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
/// A read as a script: the value, or nil.
pub(crate) const GET: &str = "return redis.call('GET', KEYS[1])";

/// What the hostile user's scripts try: each, if it took, would change
/// what later scripts on the same interpreter run.
const PLANTS: &[&str] = &[
    "redis.call = function() return 0 end",
    "rawset(redis, 'call', function() return 0 end)",
    "tonumber = function() return 0 end",
    "string.format = nil",
    "setmetatable(_G, {__index = function() return 0 end})",
    "getmetatable('').__index = {}",
    "stolen = KEYS",
];

/// `EVAL body 1 key arg` as a RESP array.
pub(crate) fn eval(body: &str, key: &str, arg: Option<&str>) -> String {
    let mut words = vec!["EVAL", body, "1", key];
    words.extend(arg);
    let mut out = format!("*{}\r\n", words.len());
    for w in words {
        out.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    out
}

/// The hostile user: sends the [`PLANTS`] through the nodes until told to
/// stop. Answers how many it sent and how many were not refused.
pub(crate) async fn hostile(
    addrs: Vec<SocketAddr>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (usize, usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut sent, mut taken) = (0, 0);
    while !stop.load(Ordering::Acquire) {
        let addr = addrs[rng.random_range(0..addrs.len())];
        let plant = PLANTS[rng.random_range(0..PLANTS.len())];
        let line = async {
            let mut conn = secure::resp_as(addr, secure::HOSTILE).await?;
            conn.get_mut()
                .write_all(eval(plant, "hostile", None).as_bytes())
                .await?;
            let mut line = String::new();
            conn.read_line(&mut line).await?;
            Ok::<_, std::io::Error>(line)
        };
        let answer = tokio::time::timeout(Duration::from_secs(5), line).await;
        // An empty line is a connection closed before an answer (a node
        // killed under it): no answer either way.
        if let Ok(Ok(line)) = answer
            && !line.is_empty()
        {
            sent += 1;
            // An error (the table is read-only) is what a sealed node says.
            taken += usize::from(!line.starts_with('-'));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (sent, taken)
}
