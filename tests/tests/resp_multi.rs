//! Queued transactions over real node processes: a `MULTI` is bounded by
//! what its queue holds (each argument's allocation and its slot in the
//! command's array, not only its bytes of content), and all the open
//! transactions of a node share one budget; a queue past either is
//! refused, its `EXEC` aborts, and the node keeps serving.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;

use tally_tests::{Cluster, ClusterOptions, resp_command as command, runtime as rt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn one_node(cluster_tables: &str) -> Cluster {
    Cluster::start(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: cluster_tables.into(),
        ..ClusterOptions::default()
    })
    .unwrap()
}

/// A RESP connection that reads one-line replies.
struct Conn(BufReader<TcpStream>);

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        Conn(BufReader::new(TcpStream::connect(addr).await.unwrap()))
    }

    async fn send(&mut self, words: &[&[u8]]) {
        self.0.get_mut().write_all(&command(words)).await.unwrap();
    }

    async fn line(&mut self) -> String {
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !reply.ends_with(b"\r\n") {
            assert_eq!(self.0.read(&mut byte).await.unwrap(), 1, "the node closed");
            reply.push(byte[0]);
        }
        String::from_utf8_lossy(&reply).trim_end().to_string()
    }

    async fn ask(&mut self, words: &[&[u8]]) -> String {
        self.send(words).await;
        self.line().await
    }
}

#[test]
fn a_transaction_of_empty_arguments_is_bounded_by_what_it_holds() {
    let cluster = one_node("");
    rt().block_on(async {
        let mut c = Conn::open(cluster.resp_addr(0)).await;
        assert_eq!(c.ask(&[b"MULTI"]).await, "+OK");
        // 4096 words a command (the most one may have), 4095 of them empty:
        // 4 bytes of content, 96 KiB of argument array. 400 of them hold
        // 38 MiB, over the 16 MiB one transaction may hold.
        let mut words: Vec<&[u8]> = vec![b"SADD", b"k"];
        words.resize(4096, b"");
        let commands = 400;
        for _ in 0..commands {
            c.send(&words).await;
        }
        let mut replies = Vec::with_capacity(commands);
        for _ in 0..commands {
            replies.push(c.line().await);
        }
        let queued = replies.iter().take_while(|r| *r == "+QUEUED").count();
        assert!(
            queued < commands,
            "{commands} commands of empty arguments were all queued"
        );
        assert!(
            replies[queued].starts_with("-ERR MULTI queue is full"),
            "{}",
            replies[queued]
        );
        let exec = c.ask(&[b"EXEC"]).await;
        assert!(exec.starts_with("-EXECABORT"), "{exec}");
        // The queue is gone: the connection and the node go on.
        assert_eq!(c.ask(&[b"SCARD", b"k"]).await, ":0");
        assert_eq!(c.ask(&[b"MULTI"]).await, "+OK");
        assert_eq!(c.ask(&[b"INCR", b"n"]).await, "+QUEUED");
        assert_eq!(c.ask(&[b"EXEC"]).await, "*1");
        assert_eq!(c.line().await, ":1");
    });
}

#[test]
fn the_open_transactions_of_a_node_share_its_budget() {
    let cluster =
        one_node("[cluster.limits]\nmulti_bytes_max = 1048576\nmulti_node_bytes_max = 2097152\n");
    let resp = cluster.resp_addr(0);
    rt().block_on(async {
        // 14 commands of 60 KiB: 840 KiB, under one transaction's MiB.
        let value = vec![b'v'; 60 << 10];
        let fill = async |c: &mut Conn| {
            assert_eq!(c.ask(&[b"MULTI"]).await, "+OK");
            let mut replies = Vec::new();
            for _ in 0..14 {
                replies.push(c.ask(&[b"SET", b"k", &value]).await);
            }
            replies
        };
        let (mut a, mut b, mut late) = (
            Conn::open(resp).await,
            Conn::open(resp).await,
            Conn::open(resp).await,
        );
        assert!(fill(&mut a).await.iter().all(|r| r == "+QUEUED"));
        assert!(fill(&mut b).await.iter().all(|r| r == "+QUEUED"));
        // A third would take the node past its 2 MiB.
        let replies = fill(&mut late).await;
        let refused = replies.iter().find(|r| *r != "+QUEUED");
        let refused = refused.expect("a third transaction fit in the node's budget");
        assert!(
            refused.contains("this node's queued transactions"),
            "{refused}"
        );
        assert!(late.ask(&[b"EXEC"]).await.starts_with("-EXECABORT"));
        // What a DISCARD frees is taken again.
        assert_eq!(a.ask(&[b"DISCARD"]).await, "+OK");
        assert!(fill(&mut late).await.iter().all(|r| r == "+QUEUED"));
        assert_eq!(late.ask(&[b"DISCARD"]).await, "+OK");
        // One transaction alone stops at its own share.
        assert_eq!(late.ask(&[b"MULTI"]).await, "+OK");
        let mut replies = Vec::new();
        for _ in 0..20 {
            replies.push(late.ask(&[b"SET", b"k", &value]).await);
        }
        let refused = replies.iter().find(|r| *r != "+QUEUED").unwrap();
        assert!(refused.contains("MULTI queue is full"), "{refused}");
    });
}

/// Sends `cmds` as one pipeline, in one write, and reads a one-line reply
/// for each (a bulk string as its value).
async fn pipeline(c: &mut Conn, cmds: &[&[&[u8]]]) -> Vec<String> {
    let bytes: Vec<u8> = cmds.iter().flat_map(|w| command(w)).collect();
    c.0.get_mut().write_all(&bytes).await.unwrap();
    let mut replies = Vec::with_capacity(cmds.len());
    for _ in cmds {
        let line = c.line().await;
        replies.push(match line.starts_with('$') && line != "$-1" {
            true => c.line().await,
            false => line,
        });
    }
    replies
}

/// A pipeline's commands run in the connection's database, and after a
/// `FLUSHDB` in the database's new generation: `SELECT` and the flush are
/// barriers, in their places, and the adds after them are served as before
/// (the grouped path serves every keyspace: see `pipeline` and `counters`).
#[test]
fn pipelines_run_in_the_selected_database_before_and_after_a_flush() {
    let cluster = one_node("");
    rt().block_on(async {
        let mut c = Conn::open(cluster.resp_addr(0)).await;
        let replies = pipeline(
            &mut c,
            &[
                &[b"INCR", b"a"],
                &[b"SELECT", b"3"],
                &[b"INCR", b"a"],
                &[b"INCRBY", b"a", b"4"],
                &[b"HINCRBY", b"h", b"f", b"2"],
                &[b"GET", b"a"],
                &[b"INCRBY", b"a", b"x"],
                &[b"DECRBY", b"b", b"-9223372036854775808"],
                &[b"FLUSHDB"],
                &[b"GET", b"a"],
                &[b"INCR", b"a"],
                &[b"DECR", b"a"],
                &[b"HGET", b"h", b"f"],
                &[b"INCR", b"a"],
                &[b"SELECT", b"0"],
                &[b"GET", b"a"],
            ],
        )
        .await;
        let want = [
            ":1",
            "+OK",
            ":1",
            ":5",
            ":2",
            "5",
            "-ERR value is not an integer or out of range",
            "-ERR decrement would overflow",
            "+OK",
            "$-1",
            ":1",
            ":0",
            "$-1",
            ":1",
            "+OK",
            "1",
        ];
        assert_eq!(replies, want);
        // A connection that stays in database 3 sees its adds, and its
        // sets are its own.
        assert_eq!(c.ask(&[b"SELECT", b"3"]).await, "+OK");
        let replies = pipeline(
            &mut c,
            &[
                &[b"GET", b"a"],
                &[b"INCR", b"a"],
                &[b"SADD", b"s", b"x", b"y"],
                &[b"SADD", b"s", b"y", b"z"],
                &[b"SCARD", b"s"],
                &[b"SELECT", b"0"],
                &[b"SCARD", b"s"],
            ],
        )
        .await;
        assert_eq!(replies, ["1", ":2", ":2", ":1", ":3", "+OK", ":0"]);
    });
}
