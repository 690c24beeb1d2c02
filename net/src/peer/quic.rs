//! The peer transport's network in a node: QUIC with mutual TLS.
//!
//! One quinn endpoint both accepts connections from the peers and dials
//! them, one connection per peer ([`crate::dial`]), one bidirectional
//! stream per batch. Who sent a batch is the node its connection's
//! certificate names ([`crate::identity`]); a certificate that names no
//! other node of the cluster is refused during the handshake, and so is a
//! peer whose protocol (its ALPN) is older than the cluster's features
//! need. A malformed or oversized batch closes its connection with an
//! error code; the node goes on serving everyone else.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use quinn::{Connection, Endpoint, VarInt};
use tracing::{debug, warn};

use super::inbound::Inbound;
use super::network::{CLOSE_PROTOCOL, CLOSE_SHUTDOWN, Channel, Dialled, Network, Want, refusal};
use super::{BoxFuture, PeerSettings, STREAMS_PER_CONNECTION_MAX, StartError};
use crate::dial::{Dialler, Target};
use crate::identity::{self, Members};
use crate::log_limit::LogLimit;
use crate::tls::{TlsError, TlsFiles};
use crate::version;
use crate::wire::MESSAGE_BYTES_MAX;

/// Asks peers to acknowledge every 8th packet rather than every 2nd
/// (QUIC's ACK frequency extension; both ends are quinn). Most packets are
/// requests whose answer carries the acknowledgment anyway; at every 2nd,
/// about one datagram in seven was an ACK alone, each a syscall on both
/// ends. Loss detection still sees every packet acknowledged within the
/// peer's max_ack_delay.
fn ack_frequency() -> quinn::AckFrequencyConfig {
    let mut c = quinn::AckFrequencyConfig::default();
    c.ack_eliciting_threshold(VarInt::from_u32(8));
    c
}

/// The client configuration every dial uses, replaced by a TLS reload.
type ClientTls = Arc<Mutex<quinn::ClientConfig>>;

/// One peer, as QUIC dials it.
struct Peer {
    id: String,
    addr: std::net::SocketAddr,
    /// The one connection to the peer.
    dialler: Dialler,
}

/// QUIC between the nodes.
pub struct Quic {
    endpoint: Endpoint,
    peers: Vec<Peer>,
    tls: TlsFiles,
    /// What a TLS reload needs besides the files, and what it replaces.
    quic: Arc<quinn::TransportConfig>,
    members: Arc<Members>,
    client_tls: ClientTls,
    /// How long a handshake may take.
    dial_timeout: std::time::Duration,
    /// [`Network::close`] was called.
    closed: AtomicBool,
}

impl Quic {
    /// Binds the endpoint and starts accepting peers, whose batches
    /// `inbound` answers. Must run inside a tokio runtime.
    pub fn start(settings: &PeerSettings, inbound: Arc<Inbound>) -> Result<Arc<Quic>, StartError> {
        let quic = Arc::new(quic_config(settings));
        let members = Arc::new(Members {
            ids: settings.nodes.iter().map(|n| n.id.clone()).collect(),
            me: settings.me,
        });
        // Looked at before the load, so a change during it is seen later.
        let tls_stamps = crate::tls_reload::stamps(&settings.tls);
        let tls = crate::tls::configs(&settings.tls, quic.clone(), members.clone())?;
        let me = settings.bind.unwrap_or(settings.nodes[settings.me].addr);
        let bind_err = |source| StartError::Bind { addr: me, source };
        let endpoint_config =
            quinn::EndpointConfig::new(Arc::new(crate::tls::reset_key(&settings.tls)?));
        let socket = std::net::UdpSocket::bind(me).map_err(bind_err)?;
        let runtime = quinn::default_runtime().expect("tallyd runs inside tokio");
        let endpoint =
            Endpoint::new(endpoint_config, Some(tls.server), socket, runtime).map_err(bind_err)?;
        let peers = settings
            .nodes
            .iter()
            .map(|n| Peer {
                id: n.id.clone(),
                addr: n.addr,
                dialler: Dialler::default(),
            })
            .collect();
        let network = Arc::new(Quic {
            endpoint: endpoint.clone(),
            peers,
            tls: settings.tls.clone(),
            quic,
            members: members.clone(),
            client_tls: Arc::new(Mutex::new(tls.client)),
            dial_timeout: settings.failure_timeout,
            closed: AtomicBool::new(false),
        });
        tokio::spawn(accept_loop(endpoint, inbound, members));
        tokio::spawn(watch_tls(
            Arc::downgrade(&network),
            settings.tls.clone(),
            crate::tls_reload::Watch::new(tls_stamps),
        ));
        Ok(network)
    }
}

impl Network for Quic {
    fn channel(&self, to: usize, want: Want) -> Dialled<'_> {
        Box::pin(async move {
            let peer = self.peers.get(to).ok_or_else(|| format!("no node #{to}"))?;
            let target = || Target {
                endpoint: &self.endpoint,
                addr: peer.addr,
                id: &peer.id,
                config: self.client_tls.lock().clone(),
                timeout: self.dial_timeout,
            };
            let conn = peer
                .dialler
                .connection(want, target, CLOSE_SHUTDOWN)
                .await?;
            Ok(Arc::new(QuicChannel(conn)) as Arc<dyn Channel>)
        })
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.endpoint
            .close(VarInt::from_u32(CLOSE_SHUTDOWN), b"shutting down");
    }

    fn told(&self) -> BoxFuture<()> {
        let endpoint = self.endpoint.clone();
        Box::pin(async move { endpoint.wait_idle().await })
    }

    fn reload_tls(&self) -> Result<(), TlsError> {
        let tls = crate::tls::configs(&self.tls, self.quic.clone(), self.members.clone())?;
        self.endpoint.set_server_config(Some(tls.server));
        *self.client_tls.lock() = tls.client;
        Ok(())
    }
}

/// One QUIC connection to a peer.
struct QuicChannel(Connection);

impl Channel for QuicChannel {
    fn id(&self) -> usize {
        self.0.stable_id()
    }

    fn protocol(&self) -> u16 {
        protocol_of(&self.0)
    }

    fn is_closed(&self) -> bool {
        self.0.close_reason().is_some()
    }

    fn refuse(&self, why: &str) {
        self.0
            .close(VarInt::from_u32(CLOSE_PROTOCOL), why.as_bytes());
    }

    fn exchange(&self, batch: bytes::Bytes) -> BoxFuture<Result<Vec<u8>, String>> {
        let conn = self.0.clone();
        Box::pin(async move {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
            send.write_all(&batch).await.map_err(|e| e.to_string())?;
            send.finish().map_err(|e| e.to_string())?;
            recv.read_to_end(MESSAGE_BYTES_MAX)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// QUIC settings of every peer connection, both ways.
fn quic_config(settings: &PeerSettings) -> quinn::TransportConfig {
    let mut quic = quinn::TransportConfig::default();
    quic.max_concurrent_bidi_streams(VarInt::from_u32(STREAMS_PER_CONNECTION_MAX))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .ack_frequency_config(Some(ack_frequency()))
        .keep_alive_interval(Some(settings.heartbeat_interval))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(settings.failure_timeout * 5)
                .expect("failure timeouts are far below QUIC's limit"),
        ));
    quic
}

/// The peer protocol `conn`'s handshake agreed on (ALPN).
fn protocol_of(conn: &Connection) -> u16 {
    let alpn = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.protocol);
    version::peer_version(alpn.as_deref()).unwrap_or(0)
}

async fn accept_loop(endpoint: Endpoint, inbound: Arc<Inbound>, members: Arc<Members>) {
    while let Some(incoming) = endpoint.accept().await {
        let inbound = inbound.clone();
        let members = members.clone();
        tokio::spawn(async move {
            let oldest = inbound.oldest_peer();
            let Some((conn, from)) = accept_peer(incoming, &members, oldest).await else {
                return;
            };
            let protocol = protocol_of(&conn);
            while let Ok((send, recv)) = conn.accept_bi().await {
                // A feature enabled since the handshake ends it too.
                let oldest = inbound.oldest_peer();
                if protocol < oldest {
                    conn.close(VarInt::from_u32(CLOSE_PROTOCOL), refusal(oldest).as_bytes());
                    return;
                }
                tokio::spawn(serve_stream(
                    conn.clone(),
                    from,
                    send,
                    recv,
                    inbound.clone(),
                ));
            }
        });
    }
}

/// Completes an incoming handshake and names the node on the other end;
/// `None` (logged, at most once a second) when it is not a peer.
async fn accept_peer(
    incoming: quinn::Incoming,
    members: &Members,
    oldest: u16,
) -> Option<(Connection, usize)> {
    static REFUSED: LogLimit = LogLimit::per_second();
    let remote = incoming.remote_address();
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e @ quinn::ConnectionError::TransportError(_)) => {
            // Wrong CA, no certificate, not a node, garbage: the handshake says no.
            if let Some(suppressed) = REFUSED.admit() {
                warn!(%remote, error = %e, suppressed, "refused a peer connection");
            }
            return None;
        }
        Err(e) => {
            // The dialler gave up (a peer shutting down, say).
            debug!(%remote, error = %e, "peer handshake abandoned");
            return None;
        }
    };
    match identity::peer_of(&conn, members) {
        Ok(from) if protocol_of(&conn) < oldest => {
            if let Some(suppressed) = REFUSED.admit() {
                let protocol = protocol_of(&conn);
                warn!(%remote, peer = from, protocol, suppressed, "refused a peer of a build too old for the cluster's features");
            }
            conn.close(VarInt::from_u32(CLOSE_PROTOCOL), refusal(oldest).as_bytes());
            None
        }
        Ok(from) => Some((conn, from)),
        Err(e) => {
            if let Some(suppressed) = REFUSED.admit() {
                warn!(%remote, error = %e, suppressed, "refused a peer connection");
            }
            conn.close(
                VarInt::from_u32(CLOSE_PROTOCOL),
                b"not a node of this cluster",
            );
            None
        }
    }
}

/// Closes a connection whose peer sent a batch that is not one, logging
/// why at most once a second.
fn close_bad_batch(conn: &Connection, why: &str, detail: &dyn std::fmt::Display, reason: &[u8]) {
    static CLOSED: LogLimit = LogLimit::per_second();
    if let Some(suppressed) = CLOSED.admit() {
        let remote = conn.remote_address();
        warn!(%remote, %detail, suppressed, "closing a peer connection: {why}");
    }
    conn.close(VarInt::from_u32(CLOSE_PROTOCOL), reason);
}

async fn serve_stream(
    conn: Connection,
    from: usize,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    inbound: Arc<Inbound>,
) {
    let remote = conn.remote_address();
    let bytes = match recv.read_to_end(MESSAGE_BYTES_MAX).await {
        Ok(b) => b,
        Err(e) => {
            close_bad_batch(
                &conn,
                "unreadable batch",
                &e,
                b"unreadable or oversized batch",
            );
            return;
        }
    };
    let answers = match inbound.answer(from, &bytes).await {
        Ok(answers) => answers,
        Err(bad) => {
            close_bad_batch(&conn, bad.why, &bad.detail, bad.reason);
            return;
        }
    };
    if let Err(e) = send.write_all(&answers).await {
        debug!(%remote, error = %e, "peer went away before its answer");
        return;
    }
    let _ = send.finish();
}

/// Looks at the TLS files until the network is dropped or closed, and
/// reloads them when they change.
async fn watch_tls(network: std::sync::Weak<Quic>, files: TlsFiles, w: crate::tls_reload::Watch) {
    let cert = files.cert.display().to_string();
    let look = || {
        let n = network.upgrade()?;
        (!n.closed.load(Ordering::Acquire)).then(|| crate::tls_reload::stamps(&files))
    };
    let reload = || network.upgrade().map_or(Ok(()), |n| n.reload_tls());
    crate::tls_reload::watch_files(w, look, reload, &cert).await
}
