//! The RESP handshake, RESP3 replies, MULTI/EXEC and a connection's
//! consistency level, over raw sockets (byte for byte) and with the real
//! redis-cli in `-3` mode.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tally_tests::{Cluster, ClusterOptions};

/// A raw RESP connection: sends inline commands, reads exact replies.
struct Raw(TcpStream);

impl Raw {
    fn connect(cluster: &Cluster, node: usize) -> Raw {
        let s = TcpStream::connect(cluster.resp_addr(node)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw(s)
    }

    /// Sends `line` and reads until the reply `want` has come whole.
    fn says(&mut self, line: &str, want: &str) {
        self.0.write_all(format!("{line}\r\n").as_bytes()).unwrap();
        let mut got = vec![0; want.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want, "reply to {line:?}");
    }

    /// Sends `line` then a PING, and answers every byte of the reply to
    /// `line` (what came before the PONG).
    fn reply(&mut self, line: &str) -> String {
        self.0
            .write_all(format!("{line}\r\nPING\r\n").as_bytes())
            .unwrap();
        let mut got = Vec::new();
        let mut byte = [0];
        while !got.ends_with(b"+PONG\r\n") {
            self.0.read_exact(&mut byte).unwrap();
            got.push(byte[0]);
        }
        got.truncate(got.len() - b"+PONG\r\n".len());
        String::from_utf8(got).unwrap()
    }
}

#[test]
fn hello_switches_replies_to_resp3_and_back() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let mut c = Raw::connect(&cluster, 0);
    c.says("HINCRBY user:1 likes 3", ":3\r\n");
    c.says("GET never", "$-1\r\n");
    c.says("HGETALL user:1", "*2\r\n$5\r\nlikes\r\n$1\r\n3\r\n");
    c.says("HELLO 4", "-NOPROTO unsupported protocol version\r\n");
    c.says(
        "HELLO 3 AUTH admin secret",
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
    let hello = c.reply("HELLO 3 SETNAME app-1 AUTH default any");
    assert!(
        hello.starts_with("%9\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
        "{hello}"
    );
    for part in [
        "$5\r\nproto\r\n:3\r\n",
        "$4\r\nmode\r\n$10\r\nstandalone\r\n",
        "$4\r\nrole\r\n$6\r\nmaster\r\n",
        "$7\r\nmodules\r\n*0\r\n",
        "$2\r\nid\r\n:",
    ] {
        assert!(hello.contains(part), "{part:?} in {hello}");
    }
    c.says("CLIENT GETNAME", "$5\r\napp-1\r\n");
    c.says("GET never", "_\r\n");
    c.says("HGETALL user:1", "%1\r\n$5\r\nlikes\r\n$1\r\n3\r\n");
    c.says("MGET never user:1", "*2\r\n_\r\n_\r\n");
    c.says("SADD s a b", ":2\r\n");
    c.says("SMISMEMBER s a z", "*2\r\n:1\r\n:0\r\n");
    c.says("CONFIG GET save", "%1\r\n$4\r\nsave\r\n$0\r\n\r\n");
    let info = c.reply("INFO persistence");
    assert!(
        info.starts_with('=') && info.contains("txt:# Persistence\r\nloading:0\r\n"),
        "{info}"
    );
    assert!(c.reply("HELLO 2").starts_with("*18\r\n$6\r\nserver\r\n"));
    c.says("GET never", "$-1\r\n");
}

#[test]
fn multi_exec_runs_the_queue_in_order_and_refuses_a_bad_one() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let mut c = Raw::connect(&cluster, 1);
    c.says("MULTI", "+OK\r\n");
    c.says("INCR t", "+QUEUED\r\n");
    c.says("INCRBY t 5", "+QUEUED\r\n");
    c.says("GET t", "+QUEUED\r\n");
    c.says("INCRBY t x", "+QUEUED\r\n");
    c.says("MULTI", "-ERR MULTI calls can not be nested\r\n");
    c.says(
        "EXEC",
        "*4\r\n:1\r\n:6\r\n$1\r\n6\r\n-ERR value is not an integer or out of range\r\n",
    );
    c.says("EXEC", "-ERR EXEC without MULTI\r\n");
    c.says("MULTI", "+OK\r\n");
    c.says("INCR t", "+QUEUED\r\n");
    c.says(
        "INCR",
        "-ERR wrong number of arguments for 'incr' command\r\n",
    );
    c.says(
        "EXEC",
        "-EXECABORT Transaction discarded because of previous errors.\r\n",
    );
    c.says("MULTI", "+OK\r\n");
    c.says("INCR t", "+QUEUED\r\n");
    c.says("DISCARD", "+OK\r\n");
    c.says("GET t", "$1\r\n6\r\n");
    c.says(
        "WATCH t",
        "-ERR WATCH is not supported: Tally runs MULTI/EXEC without isolation\r\n",
    );
    // A transaction past the queue's limit: refused whole, nothing runs,
    // and the connection keeps serving.
    c.says("MULTI", "+OK\r\n");
    let pipeline = "INCR m\r\n".repeat(10_001);
    c.0.write_all(pipeline.as_bytes()).unwrap();
    let mut queued = vec![0; "+QUEUED\r\n".len() * 10_000];
    c.0.read_exact(&mut queued).unwrap();
    assert!(queued.chunks(9).all(|q| q == b"+QUEUED\r\n"));
    let full = c.reply("EXEC");
    assert!(
        full.starts_with("-ERR MULTI queue is full") && full.contains("-EXECABORT"),
        "{full}"
    );
    c.says("GET m", "$-1\r\n");
}

#[test]
fn a_connection_chooses_its_consistency_level() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let mut c = Raw::connect(&cluster, 0);
    c.says("CLIENT CONSISTENCY", "$6\r\nQUORUM\r\n");
    c.says(
        "CLIENT CONSISTENCY most",
        "-ERR consistency level must be ONE, QUORUM, ALL or SERIAL\r\n",
    );
    c.says("CLIENT CONSISTENCY all", "+OK\r\n");
    c.says("INCR c", ":1\r\n");
    cluster.kill(2).unwrap();
    // ALL cannot be met with a replica down: never acknowledged, and
    // "unavailable" once the node is seen down. ONE can.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let refused = c.reply("INCR c");
        assert!(refused.starts_with("-ERR"), "{refused}");
        if refused.contains("unavailable") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{refused}");
    }
    c.says("CLIENT CONSISTENCY ONE", "+OK\r\n");
    let added = c.reply("INCR c");
    assert!(added.starts_with(':'), "{added}");
    // SERIAL needs a majority, as QUORUM does: its reads answer (after
    // their repairs) with a replica down.
    c.says("CLIENT CONSISTENCY serial", "+OK\r\n");
    c.says("CLIENT CONSISTENCY", "$6\r\nSERIAL\r\n");
    let added = c.reply("INCR c");
    assert!(added.starts_with(':'), "{added}");
    let value = added.trim_start_matches(':').trim().to_string();
    c.says("GET c", &format!("${}\r\n{value}\r\n", value.len()));
    // Another connection still runs at QUORUM.
    let mut other = Raw::connect(&cluster, 1);
    other.says("CLIENT CONSISTENCY", "$6\r\nQUORUM\r\n");
}

#[test]
fn redis_cli_in_resp3_mode() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let cli = |args: &[&str]| cluster.redis_cli(0, &[&["-3"], args].concat());
    assert_eq!(cli(&["PING"]), "PONG\n");
    assert_eq!(cli(&["INCRBY", "v", "4"]), "4\n");
    assert_eq!(cli(&["GET", "v"]), "4\n");
    assert_eq!(cli(&["HINCRBY", "h", "f", "2"]), "2\n");
    assert_eq!(cli(&["HGETALL", "h"]), "f 2\n", "a map, one pair a line");
    assert!(cli(&["HELLO"]).contains("proto 3\n"), "{}", cli(&["HELLO"]));
    assert!(cli(&["INFO"]).contains("loading:0"));
    assert!(cli(&["COMMAND", "COUNT"]).trim().parse::<u32>().unwrap() > 30);
    assert!(cli(&["COMMAND", "DOCS", "incr"]).contains("summary"));
    assert_eq!(cli(&["CLIENT", "SETINFO", "LIB-NAME", "x"]), "OK\n");
    let two = cluster.redis_cli(0, &["-2", "HGETALL", "h"]);
    assert_eq!(two, "f\n2\n");
}

#[test]
fn a_pipeline_runs_at_once_and_answers_in_order() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let mut c = Raw::connect(&cluster, 2);
    // Adds to one key answer 1..N in order; reads of a key see the adds
    // before them; distinct keys run together.
    let mut sent = String::new();
    let mut want = String::new();
    for i in 1..=300 {
        sent.push_str(&format!("INCR same\r\nINCR k{i}\r\nGET k{i}\r\n"));
        want.push_str(&format!(":{i}\r\n:1\r\n$1\r\n1\r\n"));
    }
    sent.push_str("GET same\r\nDEL same\r\nGET same\r\nINCRBY same 5\r\nMGET same k1 nope\r\n");
    want.push_str("$3\r\n300\r\n:1\r\n$-1\r\n:5\r\n*3\r\n$1\r\n5\r\n$1\r\n1\r\n$-1\r\n");
    c.0.write_all(sent.as_bytes()).unwrap();
    let mut got = vec![0; want.len()];
    c.0.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
    // An MGET of more keys than are read at once, in order.
    let keys: Vec<String> = (1..=300).map(|i| format!("k{i} nope{i}")).collect();
    let want = format!("*600\r\n{}", "$1\r\n1\r\n$-1\r\n".repeat(300));
    c.says(&format!("MGET {}", keys.join(" ")), &want);
    c.says(&format!("EXISTS {}", keys.join(" ")), ":300\r\n");
}

#[test]
fn every_command_refuses_a_wrong_number_of_arguments() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let mut c = Raw::connect(&cluster, 0);
    let list = c.reply("COMMAND LIST");
    let names: Vec<&str> = list
        .split("\r\n")
        .skip(1)
        .filter(|l| !l.starts_with('$') && !l.is_empty())
        .collect();
    assert!(names.len() > 30, "{list}");
    for name in names {
        let info = c.reply(&format!("COMMAND INFO {name}"));
        let arity: i64 = info
            .split("\r\n")
            .find_map(|l| l.strip_prefix(':'))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no arity for {name}: {info}"));
        let words = |n: i64| {
            let mut w = vec![name.to_string()];
            w.extend((1..n).map(|i| format!("k{i}")));
            w.join(" ")
        };
        let mut wrong = Vec::new();
        if arity > 0 {
            wrong.push(words(arity + 1));
        }
        if arity.abs() > 1 {
            wrong.push(words(arity.abs() - 1));
        }
        for line in wrong {
            let reply = c.reply(&line);
            assert!(
                reply.starts_with("-ERR wrong number of arguments"),
                "{line:?} answered {reply:?}"
            );
        }
    }
    c.says("PING", "+PONG\r\n");
    c.says("SREM s x", "-ERR SREM is not supported: Tally's sets are unique counters, which count members but do not list or remove them\r\n");
}
