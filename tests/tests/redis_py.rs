//! The README's redis-py example, run with the real redis-py from PyPI
//! (installed on first use under `target/pyredis`, pinned): adds with ids
//! and unique counters from Python.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;
use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

/// The redis-py release the example is tested with.
const REDIS_PY: &str = "redis==8.1.0";

/// Where redis-py is installed, installing it there if it is not yet.
fn redis_py() -> PathBuf {
    let dir = tally_tests::bin("tallyd")
        .unwrap()
        .parent()
        .unwrap()
        .join("../pyredis");
    let marker = dir.join("redis-8.1.0.dist-info");
    if !marker.exists() {
        let out = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--target"])
            .arg(&dir)
            .arg(REDIS_PY)
            .output()
            .expect("python3 with pip is installed");
        assert!(
            out.status.success(),
            "pip install {REDIS_PY}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

const EXAMPLE: &str = r#"
import sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), protocol=2)
a = r.execute_command("TALLY.INCRBY", "shares", 5, "web-7", 42)
b = r.execute_command("TALLY.INCRBY", "shares", 5, "web-7", 42)   # a retry
assert (a, b, int(r.get("shares"))) == (5, 5, 5), (a, b)
try:
    r.execute_command("TALLY.INCRBY", "shares", 6, "web-7", 42)
    raise SystemExit("a conflicting id was accepted")
except redis.ResponseError as e:
    assert str(e).startswith("IDCONFLICT"), e
assert r.sadd("voters", "ann", "bob", "ann") == 2
assert r.scard("voters") == 2 and r.sismember("voters", "bob")
assert r.pfadd("visits", "a", "b") == 1 and r.pfcount("visits") == 2
print("ok")
"#;

#[test]
fn the_readme_redis_py_example_works() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let out = Command::new("python3")
        .env("PYTHONPATH", redis_py())
        .args(["-c", EXAMPLE])
        .arg(cluster.resp_addr(0).port().to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
