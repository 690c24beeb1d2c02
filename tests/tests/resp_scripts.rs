//! Scripts and scans over RESP with the real redis-cli: scripts reach
//! Tally's commands, a script loaded through one node runs by its sha
//! through another, and bad scripts, cursors and patterns get clear errors
//! while the node keeps serving.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use tally_tests::{Cluster, ClusterOptions};

#[test]
fn scripts_run_commands_and_are_found_through_any_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let cli = |i: usize, args: &[&str]| cluster.redis_cli(i, args).trim().to_string();
    let limiter = "local c = redis.call('INCRBY', KEYS[1], ARGV[1]) \
                   if c == tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[1], ARGV[2]) end \
                   return {c, redis.call('TTL', KEYS[1])}";
    assert_eq!(cli(0, &["EVAL", limiter, "1", "rl", "2", "100"]), "2\n100");
    assert_eq!(cli(1, &["EVAL", limiter, "1", "rl", "3", "100"]), "5\n100");
    let sha = cli(0, &["SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"]);
    assert_eq!(sha.len(), 40, "{sha}");
    // Loaded through node 0: node 2 finds it at its peers.
    assert_eq!(cli(2, &["EVALSHA", &sha, "1", "rl"]), "5");
    assert_eq!(cli(2, &["SCRIPT", "EXISTS", &sha, &"0".repeat(40)]), "1\n0");
    assert_eq!(cli(1, &["SCRIPT", "FLUSH"]), "OK");
    for i in 0..3 {
        let answer = cli(i, &["EVALSHA", &sha, "1", "rl"]);
        assert!(answer.starts_with("NOSCRIPT"), "node {i}: {answer}");
    }
    // Replies convert as Redis converts them (`false` is a nil element;
    // an array ends at its first nil).
    assert_eq!(
        cli(0, &["EVAL", "return {1, 'a', 3.9, true, false, 7}", "0"]),
        "1\na\n3\n1\n\n7"
    );
    assert_eq!(
        cli(0, &["EVAL", "return redis.status_reply('FINE')", "0"]),
        "FINE"
    );
    assert_eq!(
        cli(0, &["EVAL", "return redis.call('GET', 'never')", "0"]),
        ""
    );
    assert_eq!(
        cli(
            0,
            &["EVAL", "return redis.pcall('INCR', 'rl', 'x')['err']", "0"]
        ),
        "ERR Wrong number of args calling Redis command from script"
    );
    // A command inside `pcall` or `xpcall` runs like any other (the script
    // waits for it as a coroutine, which Lua 5.1's own pcall would refuse).
    let protected = "local ok, v = pcall(redis.call, 'INCRBY', KEYS[1], 10) \
                     return {tostring(ok), v}";
    assert_eq!(cli(0, &["EVAL", protected, "1", "p"]), "true\n10");
    let handled = "local ok, v = xpcall(function() return redis.call(ARGV[1], KEYS[1]) end, \
                                        function(e) return 'handled' end) \
                   return {tostring(ok), v}";
    assert_eq!(cli(1, &["EVAL", handled, "1", "p", "INCR"]), "true\n11");
    assert_eq!(
        cli(1, &["EVAL", handled, "1", "p", "NOPE"]),
        "false\nhandled"
    );
    // `false` is a nil element (the empty line the trim drops).
    assert_eq!(
        cli(0, &["EVAL", "return {pcall(error, 'boom')}", "0"]),
        "boom"
    );
    // A script's commands run in the connection's database.
    assert_eq!(
        cli(
            0,
            &[
                "-n",
                "4",
                "EVAL",
                "return redis.call('INCR', KEYS[1])",
                "1",
                "db4"
            ]
        ),
        "1"
    );
    assert_eq!(cli(0, &["-n", "4", "GET", "db4"]), "1");
    assert_eq!(cli(0, &["GET", "db4"]), "");
}

#[test]
fn bad_scripts_cursors_and_patterns_get_clear_errors_and_the_node_keeps_serving() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let cli = |args: &[&str]| cluster.redis_cli(0, args).trim().to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["EVAL", "return (", "0"], "ERR Error compiling script"),
        (
            &["EVAL", "return redis.call('INCR')", "0"],
            "ERR Wrong number of args calling Redis command from script",
        ),
        (
            &["EVAL", "return redis.call('XADD', 's', '*', 'f', 'v')", "0"],
            "ERR Unknown Redis command called from script",
        ),
        (
            &["EVAL", "return redis.call('EVAL', 'return 1', 0)", "0"],
            "ERR This Redis command is not allowed from script",
        ),
        (
            &["EVAL", "return redis.call({})", "0"],
            "ERR Lua redis lib command arguments must be strings or integers",
        ),
        (
            &["EVAL", "return os.time()", "0"],
            "ERR user_script:1: Script attempted to access nonexistent global variable 'os'",
        ),
        (
            &["EVAL", "return loadfile('/etc/passwd')", "0"],
            "ERR user_script:1: Script attempted to access nonexistent global variable 'loadfile'",
        ),
        (
            &["EVAL", "local t = {} for i = 1, 1e9 do t[i] = i end", "0"],
            "ERR Script used more than 32 MiB of memory",
        ),
        // One allocation past the limit, at the first line, and on the line
        // of a command, after its reply.
        (
            &["EVAL", "return #string.rep('x', 1e9)", "0"],
            "ERR Script used more than 32 MiB of memory",
        ),
        (
            &[
                "EVAL",
                "local n = redis.call('INCR', 'm') .. string.rep('x', 1e9) return #n",
                "0",
            ],
            "ERR Script used more than 32 MiB of memory",
        ),
        (
            &["EVAL", "return 1", "-1"],
            "ERR Number of keys can't be negative",
        ),
        (
            &["EVAL", "return 1", "2", "k"],
            "ERR Number of keys can't be greater than number of args",
        ),
        (&["EVALSHA", "nope", "0"], "NOSCRIPT"),
        (
            &[
                "EVAL",
                "local t = {2, 1} table.sort(t, function(a, b) \
                 redis.call('INCR', 'sorted') return a < b end)",
                "0",
            ],
            "ERR redis.call waited for its command inside a metamethod",
        ),
        (
            &["EVAL_RO", "return redis.call('INCR', KEYS[1])", "1", "k"],
            "ERR Write commands are not allowed from read-only scripts.",
        ),
        (&["SCRIPT", "KILL"], "NOTBUSY"),
        (&["SCRIPT", "NOPE"], "ERR unknown subcommand"),
        (&["SCAN", "12345"], "ERR invalid cursor"),
        (&["SCAN", "-1"], "ERR invalid cursor"),
        (&["SCAN", "0", "COUNT", "0"], "ERR syntax error"),
        (&["SCAN", "0", "MATCH"], "ERR syntax error"),
        (&["HSCAN", "h", "7"], "ERR invalid cursor"),
        (&["SELECT", "16"], "ERR DB index is out of range"),
        (&["FLUSHDB", "NOW"], "ERR syntax error"),
    ];
    for (args, want) in cases {
        let answer = cli(args);
        assert!(
            answer.starts_with(want),
            "{args:?}: {answer:?}, want {want:?}"
        );
    }
    // A pathological pattern over long keys answers at once.
    let long = "a".repeat(1000);
    assert_eq!(cli(&["INCR", &long]), "1");
    let started = Instant::now();
    assert_eq!(cli(&["KEYS", &format!("{}b", "*a".repeat(50))]), "");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A script that never ends is aborted after 5 s; meanwhile the node
    // serves, and SCRIPT KILL ends a second one at once.
    let looping = std::thread::scope(|s| {
        let forever = s.spawn(|| {
            cli(&[
                "EVAL",
                "while true do pcall(function() while true do end end) end",
                "0",
            ])
        });
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(cli(&["INCR", "served"]), "1");
        forever.join().unwrap()
    });
    assert!(
        looping.starts_with("ERR Script ran past the time limit of 5000 ms"),
        "{looping}"
    );
    let killed = std::thread::scope(|s| {
        let forever = s.spawn(|| cli(&["EVAL", "while true do end", "0"]));
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(cli(&["SCRIPT", "KILL"]), "OK");
        forever.join().unwrap()
    });
    assert!(
        killed.starts_with("ERR Script killed by user with SCRIPT KILL"),
        "{killed}"
    );
    assert_eq!(
        cli(&["EVAL", "return redis.call('INCR', 'served')", "0"]),
        "2"
    );
}
