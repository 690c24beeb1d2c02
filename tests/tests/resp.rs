//! The RESP listener with the real redis-cli and redis-benchmark (Debian's
//! redis-tools; `.ci/run` installs it).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

fn cli(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    cluster.redis_cli(node, args)
}

#[test]
fn redis_cli_speaks_to_tally() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(cli(&cluster, 0, &["PING"]), "PONG\n");
    assert_eq!(cli(&cluster, 0, &["INCR", "views"]), "1\n");
    assert_eq!(cli(&cluster, 1, &["INCRBY", "views", "10"]), "11\n");
    assert_eq!(cli(&cluster, 2, &["DECRBY", "views", "3"]), "8\n");
    assert_eq!(cli(&cluster, 2, &["DECR", "views"]), "7\n");
    assert_eq!(cli(&cluster, 0, &["GET", "views"]), "7\n");
    assert_eq!(cli(&cluster, 0, &["GET", "never"]), "\n");
    assert_eq!(cli(&cluster, 0, &["MGET", "views", "never"]), "7\n\n");
    assert_eq!(cli(&cluster, 0, &["EXISTS", "views", "never"]), "1\n");
    assert_eq!(
        cli(&cluster, 1, &["HINCRBY", "user:1", "likes", "3"]),
        "3\n"
    );
    assert_eq!(
        cli(&cluster, 2, &["HINCRBY", "user:1", "shares", "2"]),
        "2\n"
    );
    assert_eq!(cli(&cluster, 0, &["HGET", "user:1", "likes"]), "3\n");
    assert_eq!(
        cli(&cluster, 0, &["HGETALL", "user:1"]),
        "likes\n3\nshares\n2\n"
    );
    assert_eq!(
        cli(&cluster, 0, &["HDEL", "user:1", "likes", "nope"]),
        "1\n"
    );
    assert_eq!(cli(&cluster, 0, &["HGETALL", "user:1"]), "shares\n2\n");
    assert_eq!(cli(&cluster, 0, &["DEL", "views", "never"]), "1\n");
    assert_eq!(cli(&cluster, 0, &["GET", "views"]), "\n");
    assert_eq!(
        cli(&cluster, 0, &["INCR", "views"]),
        "1\n",
        "a reset counter is usable at once"
    );
    assert_eq!(cli(&cluster, 0, &["SELECT", "0"]), "OK\n");
    assert_eq!(cli(&cluster, 0, &["SELECT", "15"]), "OK\n");
    assert!(cli(&cluster, 0, &["SELECT", "16"]).starts_with("ERR DB index is out of range"));
    assert!(cli(&cluster, 0, &["INFO"]).contains("redis_version:"));
    assert!(
        cli(&cluster, 0, &["XADD", "a", "*", "f", "v"]).starts_with("ERR unknown command 'XADD'")
    );
    // A value that is not an integer is a string (once the cluster agrees).
    cluster.wait_agreement().unwrap();
    assert_eq!(cli(&cluster, 0, &["SET", "a", "b"]), "OK\n");
    assert_eq!(cli(&cluster, 1, &["GET", "a"]), "b\n");
    assert_eq!(cli(&cluster, 0, &["SETEX", "a", "9", "c"]), "OK\n");
    assert_eq!(cli(&cluster, 2, &["GET", "a"]), "c\n");
    assert!(cli(&cluster, 0, &["INCRBY", "a", "x"]).starts_with("ERR value is not an integer"));
    assert!(cli(&cluster, 0, &["INCR"]).starts_with("ERR wrong number of arguments"));
    assert_eq!(
        cli(&cluster, 0, &["INCRBY", "big", &i64::MAX.to_string()]),
        format!("{}\n", i64::MAX)
    );
    assert!(cli(&cluster, 0, &["INCR", "big"]).contains("overflow"));
    // Inline commands and pipelining, over a raw socket.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(cluster.resp_addr(0)).unwrap();
    s.write_all(b"INCR pipe\r\nINCR pipe\r\n*2\r\n$3\r\nGET\r\n$4\r\npipe\r\nQUIT\r\n")
        .unwrap();
    let mut back = String::new();
    s.read_to_string(&mut back).unwrap();
    assert_eq!(back, ":1\r\n:2\r\n$1\r\n2\r\n+OK\r\n");
}

#[test]
fn redis_benchmark_counts_exactly() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let port = cluster.resp_addr(0).port().to_string();
    let run = |args: &[&str]| {
        let out = Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &port, "-q"])
            .args(args)
            .output()
            .expect("redis-benchmark is installed (apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run(&["-t", "incr", "-n", "3000", "-c", "20"]);
    assert!(out.contains("INCR"), "{out}");
    // Without -r every INCR hits the one key "counter:__rand_int__".
    assert_eq!(cli(&cluster, 2, &["GET", "counter:__rand_int__"]), "3000\n");
    let out = run(&["-n", "2000", "-c", "20", "HINCRBY", "bench:h", "field", "1"]);
    assert!(out.contains("HINCRBY"), "{out}");
    assert_eq!(cli(&cluster, 1, &["HGET", "bench:h", "field"]), "2000\n");
    // Pipelined (-P): replies in order, every add counted.
    run(&["-t", "incr", "-n", "2000", "-c", "4", "-P", "16"]);
    assert_eq!(cli(&cluster, 0, &["GET", "counter:__rand_int__"]), "5000\n");
}
