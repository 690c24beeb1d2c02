//! Hostile and broken input against real nodes: foreign certificates,
//! garbage on the peer port and on the client port. The node keeps serving
//! and loses nothing it acknowledged.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::UdpSocket;
use std::sync::Arc;
use std::time::Duration;

use tally_net::peer::{BoxFuture, Handler, PeerAddr, PeerError, PeerSettings, Transport};
use tally_net::wire::{self, PeerRequest, PeerResponse, Shard, WireCell, WireKey};
use tally_net::{Consistency, tls};
use tally_node::security::certs;
use tally_tests::{Cluster, ClusterOptions, runtime as rt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Refuse;
impl Handler for Refuse {
    fn handle(&self, _from: usize, reqs: Vec<PeerRequest>) -> BoxFuture<Vec<PeerResponse>> {
        Box::pin(async move {
            reqs.iter()
                .map(|_| PeerResponse::Pong { ring: 0 })
                .collect()
        })
    }
}

fn injected_shard() -> PeerRequest {
    PeerRequest::Apply {
        key: WireKey::new(b"victim", b""),
        cell: WireCell {
            list: None,
            epoch: tally_net::wire::Epoch::at(0),
            shards: [Shard {
                counter_id: 0xbad,
                clock: 1,
                value: 1_000_000,
            }]
            .into_iter()
            .collect(),
        },
    }
}

/// Checks the cluster still serves and still holds what it acknowledged.
async fn still_serving(cluster: &Cluster, key: &[u8], acked: i64) {
    for i in 0..cluster.nodes.len() {
        let c = cluster.client(i).await.unwrap();
        assert_eq!(
            c.get(key, b"", Consistency::All).await.unwrap(),
            acked,
            "via node {i}"
        );
    }
    let c = cluster.client(0).await.unwrap();
    c.add(key, b"", 0, Consistency::All).await.unwrap();
}

/// A transport of an outsider holding `files`, dialling node n2.
fn outsider(cluster: &Cluster, files: tls::TlsFiles) -> Arc<Transport> {
    let nodes = vec![
        PeerAddr {
            id: "n1".into(),
            addr: tally_tests::free_port().unwrap(),
        },
        PeerAddr {
            id: "n2".into(),
            addr: cluster.nodes[1].peer,
        },
    ];
    let settings = PeerSettings {
        cluster: "test".into(),
        nodes,
        me: 0,
        bind: None,
        tls: files,
        heartbeat_interval: Duration::from_millis(100),
        failure_timeout: Duration::from_millis(500),
    };
    Transport::start(settings, Arc::new(Refuse)).unwrap()
}

#[test]
fn a_node_with_a_foreign_ca_cannot_connect_or_inject() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rogue = tempfile::tempdir().unwrap();
    // Same cluster name, even the same node id: only the CA differs.
    certs::ensure(rogue.path(), "test", &["n1".to_string()]).unwrap();
    let own = certs::node_files(rogue.path(), "n1");
    // The worst case: the outsider knows the cluster's CA certificate (it
    // is not secret) and trusts it, but its own certificate is not signed by it.
    let trusting = tls::TlsFiles {
        ca_cert: cluster.certs_dir().join("ca.pem"),
        ..own.clone()
    };
    rt().block_on(async {
        for files in [own, trusting] {
            let t = outsider(&cluster, files);
            // Refused during the handshake, or (TLS 1.3: the server checks the
            // client's certificate last) right after it: never answered.
            let err = t
                .call(1, injected_shard(), Duration::from_secs(2))
                .await
                .unwrap_err();
            assert!(
                matches!(err, PeerError::Unreachable { .. } | PeerError::Lost { .. }),
                "{err}"
            );
            tokio::time::sleep(Duration::from_millis(600)).await;
            assert!(
                !t.is_up(1),
                "a foreign-CA node must never see the cluster as up"
            );
            t.close();
        }
        let c = cluster.client(1).await.unwrap();
        assert_eq!(c.get(b"victim", b"", Consistency::All).await.unwrap(), 0);
    });
    // n2 itself refused the certificate, and says so in its log.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !cluster.log_tail(1).contains("refused a peer connection") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            cluster.log_tail(1)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn garbage_on_the_peer_port_closes_only_that_connection() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    // A holder of a node's certificate (n3's) may talk, but malformed
    // batches only get its connection closed. (A certificate of the CA
    // that names no node is refused outright: see peer_auth.rs.)
    let files = certs::node_files(&cluster.certs_dir(), "n3");
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        c.add(b"kept", b"", 7, Consistency::All).await.unwrap();

        // Raw UDP garbage: not even QUIC.
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        for size in [1usize, 20, 1200, 1500] {
            udp.send_to(&vec![0xab; size], cluster.nodes[0].peer)
                .unwrap();
        }

        let transport = Arc::new(quinn::TransportConfig::default());
        let members = tally_net::identity::Members {
            ids: cluster.nodes.iter().map(|n| n.id.clone()).collect(),
            me: 2,
        };
        let configs = tls::configs(&files, transport, Arc::new(members)).unwrap();
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(configs.client);
        let valid = wire::encode(&vec![PeerRequest::Ping {
            cluster: "test".into(),
        }]);
        let mut oversized = vec![0u8; wire::MESSAGE_BYTES_MAX + 1024];
        oversized[0] = 1;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("garbage", vec![0xff; 64]),
            ("truncated", valid[..valid.len() - 2].to_vec()),
            ("trailing bytes", [valid.clone(), vec![0]].concat()),
            ("oversized", oversized),
        ];
        for (what, bytes) in cases {
            let conn = endpoint
                .connect(cluster.nodes[0].peer, "n1")
                .unwrap()
                .await
                .unwrap();
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            let _ = send.write_all(&bytes).await;
            let _ = send.finish();
            let answer = recv.read_to_end(1 << 20).await;
            assert!(answer.is_err(), "{what}: the node answered {answer:?}");
            let reason = conn.closed().await;
            assert!(
                reason.to_string().contains("malformed")
                    || reason.to_string().contains("oversized"),
                "{what}: {reason}"
            );
        }
        // A well-formed batch from a holder of a valid certificate works.
        let conn = endpoint
            .connect(cluster.nodes[0].peer, "n1")
            .unwrap()
            .await
            .unwrap();
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(&valid).await.unwrap();
        send.finish().unwrap();
        let answer: Vec<PeerResponse> =
            wire::decode(&recv.read_to_end(1 << 20).await.unwrap()).unwrap();
        // (ring version 1: the first ring)
        assert_eq!(answer, vec![PeerResponse::Pong { ring: 1 }]);

        still_serving(&cluster, b"kept", 7).await;
    });
}

#[test]
fn garbage_on_the_client_port_closes_only_that_connection() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        c.add(b"kept", b"", 11, Consistency::All).await.unwrap();
        let addr = cluster.nodes[0].client;
        let mut valid = Vec::new();
        tally_net::frame::put_frame(
            &mut valid,
            &wire::ClientRequest {
                id: 9,
                op: wire::ClientOp::Ping,
            },
        );
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            (
                "garbage body",
                [5u32.to_le_bytes().to_vec(), vec![0xff; 5]].concat(),
                true,
            ),
            ("oversized length", u32::MAX.to_le_bytes().to_vec(), true),
            (
                "just over the limit",
                ((wire::REQUEST_FRAME_BYTES_MAX + 1) as u32)
                    .to_le_bytes()
                    .to_vec(),
                true,
            ),
            ("truncated", valid[..valid.len() - 1].to_vec(), false),
            (
                "random bytes",
                (0..4096u32)
                    .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                    .collect(),
                true,
            ),
        ];
        for (what, bytes, says_why) in cases {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&bytes).await.unwrap();
            if !says_why {
                s.shutdown().await.unwrap();
            }
            let mut back = Vec::new();
            tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut back))
                .await
                .unwrap_or_else(|_| panic!("{what}: the node kept the connection open"))
                .ok();
            if says_why {
                // One last frame, request id 0, with the reason.
                let resp: wire::ClientResponse = wire::decode(&back[4..]).unwrap();
                assert_eq!(resp.id, 0, "{what}");
                assert!(resp.result.is_err(), "{what}");
            }
        }
        // Pipelined requests on one connection, answered by id.
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut burst = Vec::new();
        for id in 1..=100u64 {
            tally_net::frame::put_frame(
                &mut burst,
                &wire::ClientRequest {
                    id,
                    op: wire::ClientOp::Ping,
                },
            );
        }
        s.write_all(&burst).await.unwrap();
        let mut ids = Vec::new();
        let mut buf = Vec::new();
        while ids.len() < 100 {
            assert!(
                tally_net::frame::read_frame(&mut s, &mut buf, 1 << 20)
                    .await
                    .unwrap()
            );
            let resp: wire::ClientResponse = wire::decode(&buf).unwrap();
            ids.push(resp.id);
        }
        ids.sort_unstable();
        assert_eq!(ids, (1..=100).collect::<Vec<_>>());

        still_serving(&cluster, b"kept", 11).await;
    });
}
