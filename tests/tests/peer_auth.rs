//! Peers are authorized, not only authenticated: a certificate from the
//! cluster's CA makes a process a node only if it names one of the
//! config's nodes, and what a node sends is checked against what it could
//! have sent. Also: nodes run without the CA's key, pick up renewed
//! certificates without a restart, bound the streams of a connection, and
//! log what an outsider can trigger at most once a second.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::rustls::pki_types::CertificateDer;
use quinn::rustls::pki_types::pem::PemObject;
use tally_net::peer::{BoxFuture, Handler, PeerAddr, PeerError, PeerSettings, Transport};
use tally_net::wire::{Epoch, PeerRequest, PeerResponse, Shard, WireBuild, WireCell, WireKey};
use tally_net::{Consistency, tls};
use tally_node::cluster::features::KNOWN;
use tally_node::security::certs;
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

/// Answers every request the same way; its heartbeats announce this
/// build's cluster features, so that the nodes admit it once they have
/// enabled them.
struct Answer(PeerResponse);
impl Handler for Answer {
    fn handle(&self, _from: usize, reqs: Vec<PeerRequest>) -> BoxFuture<Vec<PeerResponse>> {
        let a = self.0.clone();
        Box::pin(async move { reqs.iter().map(|_| a.clone()).collect() })
    }

    fn build(&self) -> WireBuild {
        WireBuild {
            version: "fake".into(),
            features: KNOWN.iter().map(|f| f.to_string()).collect(),
            enabled: Vec::new(),
        }
    }
}

fn cell(epoch: Epoch, counter_id: u64, clock: u64, value: i64) -> WireCell {
    WireCell {
        list: None,
        epoch,
        shards: [Shard {
            counter_id,
            clock,
            value,
        }]
        .into_iter()
        .collect(),
    }
}

fn apply(key: &[u8], cell: WireCell) -> PeerRequest {
    PeerRequest::Apply {
        key: WireKey::new(key, b""),
        cell,
    }
}

/// A transport holding `files` that takes node `me`'s place in the
/// cluster's node list, bound at `bind` (a free port unless it impersonates
/// a node at its address).
fn fake(
    cluster: &Cluster,
    me: usize,
    files: tls::TlsFiles,
    bind: Option<std::net::SocketAddr>,
    handler: PeerResponse,
) -> Arc<Transport> {
    let nodes = cluster
        .nodes
        .iter()
        .map(|n| PeerAddr {
            id: n.id.clone(),
            addr: n.peer,
        })
        .collect();
    let settings = PeerSettings {
        cluster: "test".into(),
        nodes,
        me,
        bind: Some(bind.unwrap_or_else(|| tally_tests::free_port().unwrap())),
        tls: files,
        heartbeat_interval: Duration::from_millis(100),
        failure_timeout: Duration::from_millis(500),
    };
    Transport::start(settings, Arc::new(Answer(handler))).unwrap()
}

/// Waits until node `i`'s log holds `what`.
fn wait_log(cluster: &Cluster, i: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cluster.log_tail(i).contains(what) {
        assert!(Instant::now() < deadline, "{}", cluster.log_tail(i));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `key` read through every node at ALL.
async fn read_all(cluster: &Cluster, key: &[u8]) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..cluster.nodes.len() {
        let c = cluster.client(i).await.unwrap();
        out.push(c.get(key, b"", Consistency::All).await.unwrap());
    }
    out
}

#[test]
fn a_certificate_from_the_ca_that_names_no_node_is_refused() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    // Signed by the cluster's own CA, but for a name that is no node's.
    certs::ensure(&cluster.certs_dir(), "test", &["intruder".to_string()]).unwrap();
    let files = certs::node_files(&cluster.certs_dir(), "intruder");
    rt().block_on(async {
        let t = fake(&cluster, 0, files, None, PeerResponse::Pong { ring: 0 });
        let answer = t
            .call(
                1,
                apply(b"victim", cell(Epoch::at(0), 0xbad, 1, 1_000)),
                Duration::from_secs(2),
            )
            .await;
        assert!(
            matches!(
                answer,
                Err(PeerError::Unreachable { .. } | PeerError::Lost { .. })
            ),
            "a certificate naming no node must not be answered: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!t.is_up(1), "it must never see the cluster up");
        t.close();
        assert_eq!(read_all(&cluster, b"victim").await, vec![0, 0, 0]);
    });
    wait_log(&cluster, 1, "refused a peer connection");
}

#[test]
fn a_node_presenting_another_nodes_certificate_is_not_taken_for_it() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    // n1's valid certificate and key, at n3's address.
    let files = certs::node_files(&cluster.certs_dir(), "n1");
    rt().block_on(async {
        let t = fake(
            &cluster,
            2,
            files,
            Some(cluster.nodes[2].peer),
            PeerResponse::Applied,
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let c = cluster.client(0).await.unwrap();
        let status = c.status().await.unwrap();
        assert!(!status.nodes[2].up, "n1 took an impostor for n3");
        let err = c.add(b"k", b"", 1, Consistency::All).await.unwrap_err();
        assert!(err.to_string().contains("unavailable"), "{err}");
        t.close();
    });
}

#[test]
fn a_node_cannot_forge_the_receivers_own_shard() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let files = certs::node_files(&cluster.certs_dir(), "n1");
    rt().block_on(async {
        // n2 leads this add: the cell holds n2's own shard.
        let c = cluster.client(1).await.unwrap();
        c.add(b"own", b"", 5, Consistency::All).await.unwrap();
        let t = fake(&cluster, 0, files, None, PeerResponse::Pong { ring: 0 });
        let read = PeerRequest::Read {
            key: WireKey::new(b"own", b""),
        };
        let Ok(PeerResponse::Cell(theirs)) = t.call(1, read, Duration::from_secs(5)).await else {
            panic!("n2 did not answer a read from n1's certificate");
        };
        let own = theirs.shards[0];
        // A new version of n2's own shard: only n2 may make one.
        let forged = cell(theirs.epoch, own.counter_id, own.clock + 1000, 1_000_000);
        let answer = t
            .call(1, apply(b"own", forged), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(
            matches!(answer, PeerResponse::Error(_)),
            "n2 accepted a new version of its own shard from n1: {answer:?}"
        );
        // The same shard as n2 has it is only a repair, and is applied.
        let same = cell(theirs.epoch, own.counter_id, own.clock, own.value);
        let answer = t.call(1, apply(b"own", same), Duration::from_secs(5)).await;
        assert_eq!(answer.unwrap(), PeerResponse::Applied);
        t.close();
        assert_eq!(read_all(&cluster, b"own").await, vec![5, 5, 5]);
    });
    wait_log(&cluster, 1, "refused a peer request");
}

#[test]
fn shards_near_wrapping_are_refused() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let files = certs::node_files(&cluster.certs_dir(), "n1");
    rt().block_on(async {
        let t = fake(&cluster, 0, files, None, PeerResponse::Pong { ring: 0 });
        let near = u64::MAX - 5;
        for (what, c) in [
            ("clock", cell(Epoch::at(0), 0xbad, near, 7)),
            ("epoch", cell(Epoch::at(near), 0xbad, 1, 7)),
            (
                "clock one past the largest a node makes",
                cell(Epoch::at(0), 0xbad, u64::MAX - (1 << 32) + 1, 7),
            ),
        ] {
            let answer = t
                .call(1, apply(b"wrap", c), Duration::from_secs(5))
                .await
                .unwrap();
            assert!(
                matches!(answer, PeerResponse::Error(_)),
                "{what}: n2 accepted {answer:?}"
            );
        }
        // Far from the end, the same shard is fine.
        let answer = t
            .call(
                1,
                apply(b"wrap", cell(Epoch::at(0), 0xbad, 1 << 40, 7)),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(answer, PeerResponse::Applied);
        t.close();
        let c = cluster.client(1).await.unwrap();
        assert_eq!(c.get(b"wrap", b"", Consistency::One).await.unwrap(), 7);
    });
}

#[test]
fn a_replica_answering_a_cell_near_wrapping_is_not_believed() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        c.add(b"read", b"", 5, Consistency::All).await.unwrap();
    });
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    // n3's own certificate, so n1 and n2 take it for n3; it answers every
    // read with a shard whose clock is about to wrap.
    let files = certs::node_files(&cluster.certs_dir(), "n3");
    rt().block_on(async {
        let bogus = PeerResponse::Cell(cell(Epoch::at(0), 0xbad, u64::MAX - 1, 1_000_000));
        let t = fake(&cluster, 2, files, Some(cluster.nodes[2].peer), bogus);
        let c = cluster.client(0).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !c.status().await.unwrap().nodes[2].up {
            assert!(Instant::now() < deadline, "n1 never saw the fake n3 up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        match c.get(b"read", b"", Consistency::All).await {
            Ok(v) => assert_eq!(v, 5, "n1 believed a cell near wrapping"),
            Err(e) => assert!(e.to_string().contains("replicas answered"), "{e}"),
        }
        t.close();
        // Nothing of it was repaired into n1 or n2.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for i in 0..2 {
            let c = cluster.client(i).await.unwrap();
            assert_eq!(c.get(b"read", b"", Consistency::One).await.unwrap(), 5);
        }
    });
}

#[test]
fn nodes_run_without_the_ca_key() {
    let mut cluster = Cluster::configure(ClusterOptions::default()).unwrap();
    let ca_key = cluster.certs_dir().join("ca.key");
    std::fs::remove_file(&ca_key).unwrap();
    cluster.start_all().unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        c.add(b"no-ca-key", b"", 3, Consistency::All).await.unwrap();
        assert_eq!(read_all(&cluster, b"no-ca-key").await, vec![3, 3, 3]);
    });
    assert!(!ca_key.exists(), "nothing may write the CA key back");
}

/// Client configuration of a holder of `files` that takes n1's place.
fn client_config(cluster: &Cluster, files: &tls::TlsFiles) -> quinn::ClientConfig {
    let members = tally_net::identity::Members {
        ids: cluster.nodes.iter().map(|n| n.id.clone()).collect(),
        me: 0,
    };
    let quic = Arc::new(quinn::TransportConfig::default());
    tls::configs(files, quic, Arc::new(members)).unwrap().client
}

/// The certificate node `i` presents to a new connection from n1's certificate.
async fn served_cert(cluster: &Cluster, i: usize) -> CertificateDer<'static> {
    let files = certs::node_files(&cluster.certs_dir(), "n1");
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client_config(cluster, &files));
    let conn = endpoint
        .connect(cluster.nodes[i].peer, &cluster.nodes[i].id)
        .unwrap()
        .await
        .unwrap();
    let chain = conn
        .peer_identity()
        .unwrap()
        .downcast::<Vec<CertificateDer<'static>>>()
        .unwrap();
    conn.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    chain[0].clone()
}

#[test]
fn a_renewed_certificate_is_served_without_a_restart() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let dir = cluster.certs_dir();
    let files = certs::node_files(&dir, "n2");
    let old = CertificateDer::from_pem_file(&files.cert).unwrap();
    std::fs::remove_file(&files.cert).unwrap();
    std::fs::remove_file(&files.key).unwrap();
    certs::ensure(&dir, "test", &["n2".to_string()]).unwrap();
    let new = CertificateDer::from_pem_file(&files.cert).unwrap();
    assert_ne!(old, new);
    rt().block_on(async {
        let deadline = Instant::now() + Duration::from_secs(15);
        while served_cert(&cluster, 1).await != new {
            assert!(
                Instant::now() < deadline,
                "n2 still serves its old certificate 15 s after renewal"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The cluster goes on, on old connections and new ones.
        let c = cluster.client(1).await.unwrap();
        c.add(b"renewed", b"", 2, Consistency::All).await.unwrap();
        assert_eq!(read_all(&cluster, b"renewed").await, vec![2, 2, 2]);
    });
}

#[test]
fn a_peer_connection_has_a_bounded_number_of_streams() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let files = certs::node_files(&cluster.certs_dir(), "n1");
    rt().block_on(async {
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(client_config(&cluster, &files));
        let conn = endpoint
            .connect(cluster.nodes[1].peer, "n2")
            .unwrap()
            .await
            .unwrap();
        // Streams that are opened and never finished: each holds a task
        // and a buffer on n2 until the connection ends.
        let mut open = Vec::new();
        let blocked = loop {
            match tokio::time::timeout(Duration::from_millis(500), conn.open_bi()).await {
                Ok(Ok((mut send, recv))) => {
                    send.write_all(&[0]).await.unwrap();
                    open.push((send, recv));
                }
                Ok(Err(e)) => panic!("open a stream: {e}"),
                Err(_) => break open.len(),
            }
            if open.len() > 1024 {
                break open.len();
            }
        };
        assert!(
            blocked <= 256,
            "n2 let one connection open {blocked} streams at once"
        );
        conn.close(0u32.into(), b"done");
    });
}

#[test]
fn failed_handshakes_are_logged_at_most_once_a_second() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rogue = tempfile::tempdir().unwrap();
    certs::ensure(rogue.path(), "test", &["n1".to_string()]).unwrap();
    // Trusts the cluster's CA, but its own certificate is not signed by it.
    let files = tls::TlsFiles {
        ca_cert: cluster.certs_dir().join("ca.pem"),
        ..certs::node_files(rogue.path(), "n1")
    };
    let refused = |cluster: &Cluster| {
        std::fs::read_to_string(cluster.dir.path().join("n2.log"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("refused a peer connection"))
            .count()
    };
    rt().block_on(async {
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(client_config(&cluster, &files));
        let started = Instant::now();
        for _ in 0..30 {
            if let Ok(conn) = endpoint.connect(cluster.nodes[1].peer, "n2").unwrap().await {
                let _ = conn.closed().await;
            }
        }
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let lines = refused(&cluster);
        let most = usize::try_from(took.as_secs()).unwrap() + 2;
        assert!(
            (1..=most).contains(&lines),
            "{lines} lines for 30 refused handshakes in {took:?}"
        );
        // The next one after a quiet second says how many were not logged.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        if let Ok(conn) = endpoint.connect(cluster.nodes[1].peer, "n2").unwrap().await {
            let _ = conn.closed().await;
        }
    });
    let counted = |cluster: &Cluster| {
        cluster.log_tail(1).lines().any(|l| {
            l.contains("refused a peer connection")
                && l.split("suppressed=").nth(1).is_some_and(|n| {
                    let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<u64>().is_ok_and(|n| n > 0)
                })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !counted(&cluster) {
        assert!(
            Instant::now() < deadline,
            "no line counts the suppressed ones: {}",
            cluster.log_tail(1)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bad_client_connections_are_logged_at_most_once_a_second() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let closing = |cluster: &Cluster| {
        std::fs::read_to_string(cluster.dir.path().join("n1.log"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("closing a client connection"))
            .count()
    };
    rt().block_on(async {
        let started = Instant::now();
        for _ in 0..30 {
            let mut s = tokio::net::TcpStream::connect(cluster.nodes[0].client)
                .await
                .unwrap();
            s.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff])
                .await
                .unwrap();
            let mut back = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut back)).await;
        }
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let lines = closing(&cluster);
        let most = usize::try_from(took.as_secs()).unwrap() + 2;
        assert!(
            (1..=most).contains(&lines),
            "{lines} lines for 30 bad client connections in {took:?}"
        );
    });
}
