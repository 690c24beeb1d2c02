//! The default cap on client connections (10,000 per node, Redis'
//! `maxclients`), over a real node: 10,000 connections are served, the
//! 10,001st gets a clean refusal on either port, and the node keeps serving
//! its clients and takes new ones as others leave.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The default `clients_max`.
const CLIENTS_MAX: usize = 10_000;

/// Raises this process's open-files limit to its hard limit, which must
/// hold the test's connections.
fn raise_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `lim`.
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    let need = (CLIENTS_MAX + 500) as u64;
    assert!(
        lim.rlim_max >= need,
        "this test holds {need} sockets; the hard open-files limit is {}",
        lim.rlim_max
    );
}

/// A RESP connection that answered `PING`: it holds a slot.
async fn served(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PING\r\n").await.unwrap();
    let mut pong = [0u8; 7];
    s.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    s
}

/// Everything a connection gets before the node closes it.
async fn last_word(addr: SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut back))
        .await
        .expect("a refused connection is closed")
        .unwrap();
    back
}

#[test]
fn the_ten_thousand_and_first_client_is_refused_cleanly() {
    raise_files_limit();
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    let (resp, native) = (cluster.resp_addr(0), cluster.nodes[0].client);
    rt().block_on(async {
        // One native client first: it holds a slot and must keep working.
        let adder = Client::connect(native).await.unwrap();
        let started = Instant::now();
        let mut conns = Vec::with_capacity(CLIENTS_MAX);
        while conns.len() < CLIENTS_MAX - 1 {
            let batch = (CLIENTS_MAX - 1 - conns.len()).min(250);
            let opened: Vec<_> = (0..batch).map(|_| tokio::spawn(served(resp))).collect();
            for c in opened {
                conns.push(c.await.unwrap());
            }
        }
        println!(
            "{} connections served in {:?}",
            conns.len() + 1,
            started.elapsed()
        );
        // The 10,001st, on either port: told why, and closed.
        assert_eq!(
            last_word(resp).await,
            b"-ERR max number of clients reached\r\n"
        );
        let frame = last_word(native).await;
        let text = String::from_utf8_lossy(&frame);
        assert!(text.contains("max number of clients reached"), "{text}");
        // The node kept serving the ones it holds.
        assert_eq!(adder.add(b"k", b"", 1, Consistency::One).await.unwrap(), 1);
        let mut last = conns.pop().unwrap();
        last.write_all(b"INFO clients\r\n").await.unwrap();
        let mut info = vec![0u8; 4096];
        let n = last.read(&mut info).await.unwrap();
        let info = String::from_utf8_lossy(&info[..n]);
        assert!(
            info.contains(&format!("connected_clients:{CLIENTS_MAX}")),
            "{info}"
        );
        // One leaves: a new one is taken.
        drop(last);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut s = TcpStream::connect(resp).await.unwrap();
            s.write_all(b"PING\r\n").await.unwrap();
            let mut back = [0u8; 7];
            if s.read_exact(&mut back).await.is_ok() && &back == b"+PONG\r\n" {
                break;
            }
            assert!(Instant::now() < deadline, "no slot came free");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(adder.get(b"k", b"", Consistency::One).await.unwrap(), 1);
        drop(conns);
    });
}
