//! Clients cannot take what a node needs to keep its data: its file
//! descriptors (a flood of idle connections must not make the engine fail
//! to open a commit-log segment and poison itself) and its memory (a
//! client that pipelines big reads and never takes the replies, or never
//! finishes a request).
//!
//! The nodes run under `ulimit -n` (soft and hard) started here, so this
//! file spawns them itself on a cluster that `Cluster::configure` wrote.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashMap;
use std::fs;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tally_net::frame::put_frame;
use tally_net::wire::{self, ErrorKind};
use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, resp_command as command, runtime as rt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The file limit, soft and hard, of the flooded nodes.
const NOFILE: u64 = 1024;
/// Idle connections the flood opens to one node.
const FLOOD_CONNECTIONS: usize = 5000;
/// Bytes of add requests (client frames) sent during the flood: more than
/// a commit-log segment (64 MiB), so the engine has to open a new one.
const ADD_BYTES: usize = 64 << 20;
/// Keys each of the 4 adding clients writes in turn: far more than it has
/// adds in flight, so that every add is a record of its own in the commit
/// log (adds to one key in one batch are combined into one record).
const KEYS_PER_ADDER: usize = 2048;
/// What Redis says to a client over `maxclients`.
const REFUSAL: &[u8] = b"-ERR max number of clients reached\r\n";
/// Most a node may grow while a client sits on 1 MiB of pipelined
/// `HGETALL`s of a wide row without reading a reply.
const STUCK_CLIENT_GROWTH_BYTES_MAX: u64 = 64 << 20;

/// Node processes this test started, killed by pid when it ends.
struct Nodes {
    cluster: Cluster,
    children: Vec<Child>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Nodes {
    /// A three-node cluster, each node started under `ulimit -n nofile`
    /// (both limits) when given, waiting until every node sees the others.
    fn start(nofile: Option<u64>) -> Nodes {
        let cluster = Cluster::configure(ClusterOptions::default()).unwrap();
        let bin = tally_tests::bin("tallyd").unwrap();
        let mut children = Vec::new();
        for n in &cluster.config.nodes {
            let log = cluster.dir.path().join(format!("{}.log", n.id));
            let log = fs::File::create(log).unwrap();
            let limit = nofile.map_or(String::new(), |n| format!("ulimit -n {n} && "));
            let child = Command::new("sh")
                .arg("-c")
                .arg(format!("{limit}exec \"$0\" \"$@\""))
                .arg(&bin)
                .args(["run", "--config"])
                .arg(&cluster.config_path)
                .args(["--node", &n.id])
                .env("TALLY_LOG", "info")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            children.push(child);
        }
        let nodes = Nodes { cluster, children };
        nodes.wait_up(Duration::from_secs(30));
        nodes
    }

    fn wait_up(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let addrs = self.cluster.client_addrs();
        rt().block_on(async {
            'wait: loop {
                assert!(Instant::now() < deadline, "the nodes did not come up");
                for &a in &addrs {
                    let up = match Client::connect(a).await {
                        Ok(c) => c.status().await.is_ok_and(|s| s.nodes.iter().all(|n| n.up)),
                        Err(_) => false,
                    };
                    if !up {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue 'wait;
                    }
                }
                return;
            }
        });
    }

    fn pid(&self, i: usize) -> u32 {
        self.children[i].id()
    }

    fn log(&self, i: usize) -> String {
        let id = &self.cluster.config.nodes[i].id;
        fs::read_to_string(self.cluster.dir.path().join(format!("{id}.log"))).unwrap_or_default()
    }

    /// The sockets node `i` has open (client connections, its listeners,
    /// its QUIC socket), from /proc/<pid>/fd.
    fn sockets(&self, i: usize) -> usize {
        fs::read_dir(format!("/proc/{}/fd", self.pid(i)))
            .unwrap()
            .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    }

    /// The node's resident memory, from /proc/<pid>/status.
    fn rss_bytes(&self, i: usize) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid(i))).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib << 10
    }
}

/// Reads one RESP reply line (integers and errors are one line each).
async fn reply_line(rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> String {
    let mut line = String::new();
    let n = tokio::time::timeout(Duration::from_secs(30), rd.read_line(&mut line))
        .await
        .expect("a reply within 30 s")
        .unwrap();
    assert!(n > 0, "the node closed a working connection");
    line
}

/// A key of about 1 KiB, so that 64 MiB of adds is some 60,000 of them.
fn big_key(i: usize) -> Vec<u8> {
    let mut k = format!("flood:{i:04}:").into_bytes();
    k.resize(1000, b'x');
    k
}

/// Adds over `client`, `IN_FLIGHT` at a time, until the request frames
/// sent add up to `bytes` or `deadline` passes; answers the bytes sent, the
/// acknowledged sum per key and the errors.
async fn adds(
    client: Arc<Client>,
    first_key: usize,
    keys: usize,
    bytes: usize,
    deadline: Instant,
) -> (usize, HashMap<usize, i64>, Vec<String>) {
    const IN_FLIGHT: usize = 256;
    let mut sent = 0;
    let mut acked: HashMap<usize, i64> = HashMap::new();
    let mut errors = Vec::new();
    let mut running = tokio::task::JoinSet::new();
    let mut n = 0usize;
    loop {
        while running.len() < IN_FLIGHT && sent < bytes && Instant::now() < deadline {
            let k = first_key + n % keys;
            let delta = (n % 7 + 1) as i64;
            n += 1;
            let key = big_key(k);
            let mut frame = Vec::new();
            put_frame(
                &mut frame,
                &wire::ClientRequest {
                    id: n as u64,
                    op: wire::ClientOp::Add {
                        key: wire::WireKey::new(&key, b""),
                        delta,
                        cl: Consistency::Quorum,
                    },
                },
            );
            sent += frame.len();
            let client = client.clone();
            running.spawn(async move {
                let r = client.add(&key, b"", delta, Consistency::Quorum).await;
                (k, delta, r)
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        match done.unwrap() {
            (k, delta, Ok(_)) => *acked.entry(k).or_default() += delta,
            (_, _, Err(e)) => errors.push(e.to_string()),
        }
    }
    (sent, acked, errors)
}

/// Opens `n` connections to `addr`, many at once, each given 3 s.
async fn flood(addr: std::net::SocketAddr, n: usize) -> Vec<Option<TcpStream>> {
    let mut out = Vec::with_capacity(n);
    for chunk in 0..n.div_ceil(250) {
        let tasks: Vec<_> = (0..250.min(n - chunk * 250))
            .map(|_| {
                tokio::spawn(async move {
                    tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr))
                        .await
                        .ok()
                        .and_then(Result::ok)
                })
            })
            .collect();
        for t in tasks {
            out.push(t.await.unwrap());
        }
    }
    out
}

/// What a flood connection got: held open and silent, or a clean refusal.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Held,
    Refused,
    Other(String),
}

fn fate(conn: Option<&TcpStream>) -> Fate {
    let Some(conn) = conn else {
        return Fate::Other("connect timed out".into());
    };
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match conn.try_read(&mut buf) {
            Ok(0) if got == REFUSAL => return Fate::Refused,
            Ok(0) => {
                return Fate::Other(format!("closed after {:?}", String::from_utf8_lossy(&got)));
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && got.is_empty() => {
                return Fate::Held;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Fate::Other(format!("no end after {:?}", String::from_utf8_lossy(&got)));
            }
            Err(e) => return Fate::Other(e.to_string()),
        }
    }
}

#[test]
fn an_idle_connection_flood_cannot_poison_the_engine() {
    let started = Instant::now();
    let nodes = Nodes::start(Some(NOFILE));
    let resp = nodes.cluster.resp_addr(0);
    let (sent, acked, errors, fates, native, sockets) = rt().block_on(async {
        // The adding connections come first: the flood must not shut out
        // clients that were already there.
        let mut adders = Vec::new();
        for _ in 0..4 {
            adders.push(Arc::new(nodes.cluster.client(0).await.unwrap()));
        }
        let flood = flood(resp, FLOOD_CONNECTIONS).await;
        // A native client over the limit gets one error frame and the end.
        let native = tokio::time::timeout(Duration::from_secs(5), async {
            let mut s = TcpStream::connect(nodes.cluster.nodes[0].client).await?;
            let mut back = Vec::new();
            s.read_to_end(&mut back).await?;
            std::io::Result::Ok(back)
        })
        .await;
        let adds_from = Instant::now();
        println!("flood opened in {:?}", adds_from - started);
        let deadline = adds_from + Duration::from_secs(45);
        let tasks: Vec<_> = adders
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                tokio::spawn(adds(
                    c,
                    i * KEYS_PER_ADDER,
                    KEYS_PER_ADDER,
                    ADD_BYTES / 4,
                    deadline,
                ))
            })
            .collect();
        let mut sent = 0;
        let mut acked = HashMap::new();
        let mut errors = Vec::new();
        for t in tasks {
            let (s, a, e) = t.await.unwrap();
            sent += s;
            acked.extend(a);
            errors.extend(e);
        }
        println!("{} MiB of adds in {:?}", sent >> 20, adds_from.elapsed());
        let fates: Vec<Fate> = flood.iter().map(|c| fate(c.as_ref())).collect();
        let sockets = nodes.sockets(0);
        drop(flood);
        (sent, acked, errors, fates, native, sockets)
    });
    let elapsed = started.elapsed();
    assert!(
        errors.is_empty(),
        "{} of the adds failed, the first: {:?}\n{}",
        errors.len(),
        errors.first(),
        nodes
            .log(0)
            .lines()
            .rev()
            .take(10)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        sent >= ADD_BYTES,
        "only {} MiB of adds went out in 45 s",
        sent >> 20
    );
    let held = fates.iter().filter(|f| **f == Fate::Held).count();
    let refused = fates.iter().filter(|f| **f == Fate::Refused).count();
    let other: Vec<&Fate> = fates
        .iter()
        .filter(|f| !matches!(f, Fate::Held | Fate::Refused))
        .collect();
    assert!(
        other.is_empty(),
        "{} flood connections were neither held nor refused cleanly, e.g. {:?} ({held} held, {refused} refused)",
        other.len(),
        other[0]
    );
    // A connection the client sees open may still wait in the kernel's
    // accept queue (or, the queue full, for a SYN-ACK retransmit): what
    // counts is what the node holds, which leaves the engine its reserve.
    assert!(
        sockets as u64 <= NOFILE - 64,
        "the node holds {sockets} sockets under a limit of {NOFILE} files ({held} connections look held)"
    );
    assert!(
        refused > 0,
        "none of {FLOOD_CONNECTIONS} connections refused"
    );
    let native = native
        .expect("a native client over the limit is answered at once")
        .unwrap();
    let resp: wire::ClientResponse = wire::decode(&native[4..]).unwrap();
    let err = resp.result.unwrap_err();
    assert_eq!((resp.id, err.kind), (0, ErrorKind::Unavailable), "{err}");
    assert!(err.message.contains("max number of clients"), "{err}");

    // Refusals are logged at most once a second, with a count.
    let log = nodes.log(0);
    let refusal_lines = log.lines().filter(|l| l.contains("refused")).count();
    assert!(refusal_lines >= 1, "no refusal in the log");
    assert!(
        refusal_lines as u64 <= elapsed.as_secs() + 2,
        "{refusal_lines} refusal lines in {elapsed:?}"
    );
    // The flood sat on the node while the engine needed a new segment.
    let engine_dir = nodes.cluster.config.nodes[0].data_dir.join("engine");
    let segments = fs::read_dir(&engine_dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(
        segments >= 2,
        "the commit log never rolled ({segments} segment)"
    );

    println!("{held} connections held, {refused} refused");
    let reads_from = Instant::now();
    rt().block_on(async {
        // Every acknowledged add reads back at ALL (from every replica).
        let c = Arc::new(nodes.cluster.client(1).await.unwrap());
        let mut reads = tokio::task::JoinSet::new();
        for (k, sum) in acked {
            if reads.len() >= 256 {
                reads.join_next().await.unwrap().unwrap();
            }
            let c = c.clone();
            reads.spawn(async move {
                let v = c.get(&big_key(k), b"", Consistency::All).await.unwrap();
                assert_eq!(v, sum, "key {k}");
            });
        }
        while let Some(r) = reads.join_next().await {
            r.unwrap();
        }
        // The engine is not poisoned: it still takes writes.
        let c = nodes.cluster.client(0).await.unwrap();
        c.add(b"after", b"", 1, Consistency::All).await.unwrap();
        c.status().await.unwrap();
    });
    println!(
        "read back in {:?}; the whole test took {:?}",
        reads_from.elapsed(),
        started.elapsed()
    );
}

#[test]
fn stuck_clients_cannot_hold_node_memory() {
    let nodes = Nodes::start(None);
    let resp = nodes.cluster.resp_addr(0);
    rt().block_on(async {
        // A hash as wide as a row read returns, with long field names:
        // each HGETALL answers about 2 MiB.
        let (rd, mut wr) = TcpStream::connect(resp).await.unwrap().into_split();
        let mut rd = BufReader::new(rd);
        for chunk in 0..10 {
            let mut batch = Vec::new();
            for i in chunk * 1000..(chunk + 1) * 1000 {
                let mut field = format!("field:{i:05}:").into_bytes();
                field.resize(200, b'f');
                batch.extend_from_slice(&command(&[b"HINCRBY", b"wide", &field, b"1"]));
            }
            wr.write_all(&batch).await.unwrap();
            for _ in 0..1000 {
                assert_eq!(reply_line(&mut rd).await, ":1\r\n");
            }
        }

        // Requests that never finish, on both listeners.
        let mut partial_resp = TcpStream::connect(resp).await.unwrap();
        partial_resp.write_all(b"*2\r\n$4\r\nINCR").await.unwrap();
        let mut partial_native = TcpStream::connect(nodes.cluster.nodes[0].client)
            .await
            .unwrap();
        partial_native
            .write_all(&[20, 0, 0, 0, 1, 2])
            .await
            .unwrap();
        let partial_since = Instant::now();

        let before = nodes.rss_bytes(0);
        let mut stuck = TcpStream::connect(resp).await.unwrap();
        let hgetall = command(&[b"HGETALL", b"wide"]);
        let pipeline: Vec<u8> = hgetall.repeat((1 << 20) / hgetall.len());
        // The node may stop reading the pipeline: write it from a task.
        let writer = tokio::spawn(async move {
            let _ = stuck.write_all(&pipeline).await;
            stuck
        });
        let mut growth = 0;
        let watch_until = Instant::now() + Duration::from_secs(12);
        while Instant::now() < watch_until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            growth = growth.max(nodes.rss_bytes(0).saturating_sub(before));
            assert!(
                growth < STUCK_CLIENT_GROWTH_BYTES_MAX,
                "node 0 grew by {} MiB for a client that reads nothing",
                growth >> 20
            );
        }
        // The node serves everyone else all along.
        let (rd, mut wr) = TcpStream::connect(resp).await.unwrap().into_split();
        let mut rd = BufReader::new(rd);
        wr.write_all(&command(&[b"INCR", b"other"])).await.unwrap();
        assert_eq!(reply_line(&mut rd).await, ":1\r\n");
        let c = nodes.cluster.client(0).await.unwrap();
        let row = c.get_row(b"wide", Consistency::Quorum).await.unwrap();
        assert_eq!(row.len(), 10_000);

        // The unfinished requests timed out and their connections closed.
        for (what, mut conn) in [("RESP", partial_resp), ("native", partial_native)] {
            let left = Duration::from_secs(15).saturating_sub(partial_since.elapsed());
            let mut back = Vec::new();
            let end = tokio::time::timeout(left, conn.read_to_end(&mut back)).await;
            assert!(
                end.is_ok(),
                "a {what} request unfinished for 15 s still holds its connection"
            );
        }
        println!("node 0 grew by at most {} MiB", growth >> 20);
        writer.abort();
    });
}
