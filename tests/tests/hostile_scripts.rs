//! Scripts from logged-in users who mean harm, over a real node process:
//! no bytecode, nothing one user's script leaves for another's, no reply
//! or pattern that takes the node, no stuck script that holds every other
//! user's, and script administration by role.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tally_net::client::{Login, Security};
use tally_tests::{Cluster, ClusterOptions, resp_command};

/// Users in the users file: (name, role, password).
const USERS: [(&str, &str, &str); 4] = [
    ("admin", "admin", "admin-pw"),
    ("app", "readwrite", "app-pw"),
    ("mallory", "readwrite", "mallory-pw"),
    ("viewer", "readonly", "viewer-pw"),
];

/// A one-node cluster whose users are [`USERS`].
fn start() -> Cluster {
    let mut cluster = Cluster::configure(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: "[cluster.auth]\nusers_file = \"users.toml\"\n".into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    for (user, role, password) in USERS {
        cluster.passwd(user, role, password).unwrap();
    }
    cluster.security = Security {
        tls: None,
        login: Some(Login {
            user: "admin".into(),
            password: "admin-pw".into(),
        }),
    };
    cluster.start_all().unwrap();
    cluster
}

/// A RESP connection logged in as `user`.
struct Conn(TcpStream);

impl Conn {
    fn new(cluster: &Cluster, user: &str) -> Conn {
        let password = USERS.iter().find(|u| u.0 == user).unwrap().2;
        let stream = TcpStream::connect(cluster.resp_addr(0)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut conn = Conn(stream);
        let ok = conn.call(&[b"AUTH", user.as_bytes(), password.as_bytes()]);
        assert_eq!(ok, "+OK", "{user}");
        conn
    }

    /// Sends one command; answers its reply's first line (a bulk string's
    /// text), or the lines of an array (joined by `|`).
    fn call(&mut self, words: &[&[u8]]) -> String {
        self.0.write_all(&resp_command(words)).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = self.0.read(&mut buf).expect("a reply in time");
            assert!(n > 0, "the node closed the connection");
            got.extend_from_slice(&buf[..n]);
            if complete(&got) {
                break;
            }
        }
        let text = String::from_utf8_lossy(&got);
        let lines: Vec<&str> = text.trim_end().split("\r\n").collect();
        match lines[0].as_bytes().first() {
            Some(b'*') => lines.join("|"),
            Some(b'$') if lines.len() > 1 => lines[1].to_string(),
            _ => lines[0].to_string(),
        }
    }

    fn eval(&mut self, body: &str, args: &[&str]) -> String {
        let mut words: Vec<&[u8]> = vec![b"EVAL", body.as_bytes()];
        words.extend(args.iter().map(|a| a.as_bytes()));
        self.call(&words)
    }
}

/// Whether `got` holds a whole reply (of the simple shapes these tests get).
fn complete(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some(first) = text.split("\r\n").next() else {
        return false;
    };
    if !text.ends_with("\r\n") {
        return false;
    }
    match first.as_bytes().first() {
        Some(b'*') => {
            let n: usize = first[1..].parse().unwrap_or(0);
            // Each element a line, or a bulk's two.
            let lines = text.trim_end().split("\r\n").count() - 1;
            let bulks = text.matches("\r\n$").count();
            lines >= n + bulks
        }
        Some(b'$') if first != "$-1" => text.split("\r\n").count() > 2,
        _ => true,
    }
}

#[test]
fn no_script_can_load_or_make_bytecode() {
    let cluster = start();
    let mut viewer = Conn::new(&cluster, "viewer");
    assert_eq!(viewer.eval("return type(string.dump)", &["0"]), "nil");
    assert_eq!(
        viewer.call(&[b"EVAL", b"\x1bLuaQ\x00\x01\x04\x08\x04\x08\x00", b"0"]),
        "-ERR Error compiling script (new function): bytecode is not accepted, only Lua source"
    );
    for name in ["loadstring", "getfenv", "setfenv", "newproxy", "print"] {
        let answer = viewer.eval(&format!("return {name}"), &["0"]);
        assert!(
            answer.contains("Script attempted to access nonexistent global variable"),
            "{name}: {answer}"
        );
    }
}

#[test]
fn a_script_plants_nothing_for_another_users_script() {
    let cluster = start();
    let mut viewer = Conn::new(&cluster, "viewer");
    let mut app = Conn::new(&cluster, "app");
    // A read-only user tries to redefine redis.call (to write where it
    // chooses, and keep the arguments) and to leave a global behind.
    let plant = "redis.call = function(cmd, key, ...) \
                 stolen = {...} return _G.real(cmd, 'mallory-chose', ...) end";
    let answer = viewer.eval(plant, &["0"]);
    assert!(answer.contains("readonly table"), "{answer}");
    let answer = viewer.eval("stolen = ARGV[1]", &["0", "x"]);
    assert!(answer.contains("readonly table"), "{answer}");
    let answer = viewer.eval(
        "getmetatable('').__index = {upper = function() return 'planted' end}",
        &["0"],
    );
    assert!(answer.contains("readonly table"), "{answer}");
    // A read-write user's script afterwards writes where it says, and
    // its arguments stay its own.
    for _ in 0..4 {
        let answer = app.eval(
            "return {redis.call('INCRBY', KEYS[1], ARGV[1]), string.upper('a')}",
            &["1", "app-key", "5"],
        );
        assert!(answer.ends_with("|$1|A"), "{answer}");
    }
    assert_eq!(app.call(&[b"GET", b"app-key"]), "20");
    assert_eq!(app.call(&[b"EXISTS", b"mallory-chose"]), ":0");
    let answer = viewer.eval("return stolen", &["0"]);
    assert!(
        answer.contains("nonexistent global variable 'stolen'"),
        "{answer}"
    );
}

#[test]
fn replies_and_patterns_are_bounded_and_a_stuck_script_holds_no_one_else() {
    let cluster = start();
    let mut app = Conn::new(&cluster, "app");
    // A table doubled forty times would be 2^40 values.
    let doubled = app.eval(
        "local t = {1} for i = 1, 40 do t = {t, t} end return t",
        &["0"],
    );
    assert!(doubled.contains("holds a table twice"), "{doubled}");
    // Mallory's scripts compute without end: one loops, one backtracks.
    let stuck = std::thread::scope(|s| {
        let looping = s.spawn(|| Conn::new(&cluster, "mallory").eval("while true do end", &["0"]));
        let pattern = s.spawn(|| {
            let body = "return string.find(string.rep('a', 1e5), string.rep('a*', 16) .. 'b')";
            Conn::new(&cluster, "mallory").eval(body, &["0"])
        });
        std::thread::sleep(Duration::from_millis(500));
        // Meanwhile the app's scripts answer at once.
        for i in 0..5 {
            let started = Instant::now();
            let answer = app.eval("return redis.call('INCR', KEYS[1])", &["1", "served"]);
            assert_eq!(answer, format!(":{}", i + 1));
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{:?}",
                started.elapsed()
            );
        }
        (looping.join().unwrap(), pattern.join().unwrap())
    });
    for answer in [stuck.0, stuck.1] {
        assert!(
            answer.starts_with("-ERR Script ran past the time limit of 5000 ms"),
            "{answer}"
        );
    }
}

#[test]
fn script_administration_goes_by_role_and_owner() {
    let cluster = start();
    let mut app = Conn::new(&cluster, "app");
    let mut admin = Conn::new(&cluster, "admin");
    assert_eq!(
        app.call(&[b"SCRIPT", b"FLUSH"]),
        "-NOPERM User app has no permissions to run the 'script|flush' command"
    );
    assert_eq!(admin.call(&[b"SCRIPT", b"FLUSH"]), "+OK");
    let killed = std::thread::scope(|s| {
        let looping = s.spawn(|| Conn::new(&cluster, "mallory").eval("while true do end", &["0"]));
        let counting = s.spawn(|| {
            Conn::new(&cluster, "viewer").eval("local n = 0 while true do n = n + 1 end", &["0"])
        });
        std::thread::sleep(Duration::from_millis(500));
        // Not the app's to kill; the administrator's.
        let answer = app.call(&[b"SCRIPT", b"KILL"]);
        assert!(answer.starts_with("-NOTBUSY"), "{answer}");
        assert_eq!(admin.call(&[b"SCRIPT", b"KILL"]), "+OK");
        (looping.join().unwrap(), counting.join().unwrap())
    });
    for answer in [killed.0, killed.1] {
        assert!(
            answer.starts_with("-ERR Script killed by user with SCRIPT KILL"),
            "{answer}"
        );
    }
    // A script that has written is not killed: it ends at its time limit.
    let unkillable = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            Conn::new(&cluster, "app")
                .eval("redis.call('INCR', KEYS[1]) while true do end", &["1", "w"])
        });
        std::thread::sleep(Duration::from_millis(500));
        let answer = app.call(&[b"SCRIPT", b"KILL"]);
        assert!(answer.starts_with("-UNKILLABLE"), "{answer}");
        writer.join().unwrap()
    });
    assert!(unkillable.contains("time limit"), "{unkillable}");
}

#[test]
fn the_script_cache_keeps_the_last_500_evals_and_logs_are_limited() {
    let cluster = start();
    let mut app = Conn::new(&cluster, "app");
    let body = |i: usize| format!("return {i}");
    for i in 0..600 {
        assert_eq!(app.eval(&body(i), &["0"]), format!(":{i}"));
    }
    let mut sha = |i: usize| app.eval("return redis.sha1hex(ARGV[1])", &["0", &body(i)]);
    let (sha0, sha599) = (sha(0), sha(599));
    let first = app.call(&[b"EVALSHA", sha0.as_bytes(), b"0"]);
    assert!(first.starts_with("-NOSCRIPT"), "{first}");
    assert_eq!(app.call(&[b"EVALSHA", sha599.as_bytes(), b"0"]), ":599");
    // A script that logs ten thousand lines leaves a few in the node's log.
    let loud = "for i = 1, 10000 do redis.log(redis.LOG_WARNING, 'loud line') end return 1";
    assert_eq!(app.eval(loud, &["0"]), ":1");
    let lines = cluster.log_text(0).matches("loud line").count();
    assert!((1..=20).contains(&lines), "{lines} lines logged");
}

#[test]
fn a_scripts_operation_ids_are_its_users_own() {
    let cluster = start();
    let add = "return redis.call('TALLY.INCRBY', KEYS[1], ARGV[1], ARGV[2], ARGV[3])";
    let mut app = Conn::new(&cluster, "app");
    let mut mallory = Conn::new(&cluster, "mallory");
    assert_eq!(app.eval(add, &["1", "votes", "5", "web", "7"]), ":5");
    // Mallory's add of the same client id and sequence is an add of her
    // own: not answered app's value, not refused as its conflict.
    assert_eq!(mallory.eval(add, &["1", "votes", "3", "web", "7"]), ":8");
    // A retry by app is answered its first value, once applied.
    assert_eq!(app.eval(add, &["1", "votes", "5", "web", "7"]), ":5");
    assert_eq!(app.call(&[b"GET", b"votes"]), "8");
}
