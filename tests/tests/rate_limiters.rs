//! Rate-limiter libraries, unchanged, from their registries (installed on
//! first use under `target/`, pinned), against a live cluster: Python's
//! `limits` (fixed window, moving window and sliding window counter,
//! through its Redis storage and redis-py's scripts), npm's `rate-limiter-flexible`
//! (`RateLimiterRedis`) and `rate-limit-redis` in an express server
//! (`tests/js/rate_limiters.js`). Each allows N, refuses the N+1st, and
//! allows again after the window, through one node and through a different
//! node each time.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

/// The Python packages the test runs.
const PY_PACKAGES: [&str; 2] = ["limits==5.8.0", "redis==8.1.0"];
/// The npm packages the test runs.
const JS_PACKAGES: [&str; 5] = [
    "ioredis@6.0.0",
    "rate-limiter-flexible@11.4.0",
    "rate-limit-redis@6.0.1",
    "express-rate-limit@8.7.5",
    "express@5.1.0",
];

fn limits_py() -> PathBuf {
    let installed = ["limits-5.8.0", "redis-8.1.0"];
    tally_tests::pip_packages("pylimits", &PY_PACKAGES, &installed).unwrap()
}

fn js_modules() -> PathBuf {
    tally_tests::npm_packages("ratelimiters", &JS_PACKAGES).unwrap()
}

/// `limits`' strategies through one node, then a different node each time
/// (those connections at CONSISTENCY ALL, set as each connects). The
/// moving window keeps its hits in a Redis list (LPUSH, LINDEX, LTRIM in
/// its scripts), and its window reads them back (`get_window_stats`).
const LIMITS: &str = r#"
import sys, time
import redis
from limits import parse, storage, strategies
ports = [int(p) for p in sys.argv[1].split(",")]
# Six requests must fit in a window even on a slow host.
LIMIT = parse("5 per 3 seconds")
def at_all(conn):
    conn.on_connect()
    conn.send_command("CLIENT", "CONSISTENCY", "ALL")
    assert conn.read_response() in (b"OK", "OK")
def stores(each):
    if not each:
        return [storage.RedisStorage(f"redis://127.0.0.1:{ports[0]}")]
    return [storage.RedisStorage(f"redis://127.0.0.1:{p}", redis_connect_func=at_all) for p in ports]
for name, strategy, windows in [
    ("fixed", strategies.FixedWindowRateLimiter, 1),
    ("moving", strategies.MovingWindowRateLimiter, 1),
    ("sliding", strategies.SlidingWindowCounterRateLimiter, 2),
]:
    for each in (False, True):
        limiters = [strategy(s) for s in stores(each)]
        at = lambda i: limiters[i % len(limiters)]
        key = f"{name}-{each}"
        for i in range(5):
            assert at(i).hit(LIMIT, key), (key, "request", i + 1)
        assert not at(5).hit(LIMIT, key), (key, "the 6th was allowed")
        assert not at(6).test(LIMIT, key), key
        time.sleep(3 * windows + 0.3)
        assert at(7).hit(LIMIT, key), (key, "refused after the window")
# The moving window slides: hits age out one by one, not all at once.
# Its window is long beside the hits' spacing (1 s), so a slow host
# cannot age a hit out before the 6th is refused.
SLIDE = parse("5 per 8 seconds")
moving = strategies.MovingWindowRateLimiter(stores(True)[1])
first = time.monotonic()
for i in range(5):
    assert moving.hit(SLIDE, "slide"), i
    time.sleep(1.0)
assert not moving.hit(SLIDE, "slide"), ("the 6th within the window", time.monotonic() - first)
assert moving.get_window_stats(SLIDE, "slide").remaining == 0
time.sleep(max(0.0, first + 8.3 - time.monotonic()))
assert moving.get_window_stats(SLIDE, "slide").remaining >= 1
assert moving.hit(SLIDE, "slide"), "the first hit aged out"
print("ok")
"#;

fn ports(cluster: &Cluster) -> String {
    (0..3)
        .map(|i| cluster.resp_addr(i).port().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn python_limits_limits_through_one_node_and_through_each() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", limits_py())
        .args(["-c", LIMITS])
        .arg(ports(&cluster));
    tally_tests::assert_script_ok(&mut python, "limits");
}

#[test]
fn rate_limiter_flexible_and_rate_limit_redis_limit_through_one_node_and_through_each() {
    let modules = js_modules();
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/rate_limiters.js");
    let mut node = Command::new("node");
    node.env("NODE_PATH", &modules)
        .arg(script)
        .arg(ports(&cluster));
    tally_tests::assert_script_ok(&mut node, "rate-limiter-flexible and rate-limit-redis");
}
