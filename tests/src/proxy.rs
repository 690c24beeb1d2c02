//! A UDP proxy in front of one node's QUIC port, able to cut traffic.
//!
//! Peers dial the proxy (the node's `peer` address in the config); the proxy
//! forwards each peer's datagrams to the node (its `peer_bind`) from a
//! socket of its own per peer, and the node's answers back. A peer is
//! recognised by its source address, which is its own `peer_bind`.
//!
//! `drop_in(src)` discards what `src` sends through this proxy;
//! `drop_out(src)` discards what the node sends back to `src`. A network
//! partition between nodes A and B in the direction A → B is
//! `proxy(B).drop_in(A)` plus `proxy(A).drop_out(B)`: A's packets to B are
//! lost on both paths, whoever dialled.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::UdpSocket;

#[derive(Default)]
struct Rules {
    drop_in: HashSet<SocketAddr>,
    drop_out: HashSet<SocketAddr>,
}

/// A running proxy; it stops when dropped.
pub struct UdpProxy {
    rules: Arc<Mutex<Rules>>,
    task: tokio::task::JoinHandle<()>,
    backs: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl UdpProxy {
    /// Listens on `listen` and forwards to `upstream`. Needs a tokio runtime.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<UdpProxy> {
        let front = Arc::new(UdpSocket::bind(listen).await?);
        let rules: Arc<Mutex<Rules>> = Arc::default();
        let r = rules.clone();
        let backs: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let b = backs.clone();
        let task = tokio::spawn(async move {
            let mut sessions: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut buf = vec![0u8; 65536];
            loop {
                let Ok((n, src)) = front.recv_from(&mut buf).await else {
                    return;
                };
                if r.lock().drop_in.contains(&src) {
                    continue;
                }
                let session = match sessions.get(&src) {
                    Some(s) => s.clone(),
                    None => {
                        let Ok(sock) = UdpSocket::bind("127.0.0.1:0").await else {
                            continue;
                        };
                        if sock.connect(upstream).await.is_err() {
                            continue;
                        }
                        let sock = Arc::new(sock);
                        let (back, front, rules) = (sock.clone(), front.clone(), r.clone());
                        b.lock().push(tokio::spawn(async move {
                            let mut buf = vec![0u8; 65536];
                            // Errors (ICMP from a dead node) are transient: keep going.
                            loop {
                                if let Ok(n) = back.recv(&mut buf).await
                                    && !rules.lock().drop_out.contains(&src)
                                {
                                    let _ = front.send_to(&buf[..n], src).await;
                                }
                            }
                        }));
                        sessions.insert(src, sock.clone());
                        sock
                    }
                };
                let _ = session.send(&buf[..n]).await;
            }
        });
        Ok(UdpProxy { rules, task, backs })
    }

    /// Discards datagrams `src` sends through the proxy.
    pub fn drop_in(&self, src: SocketAddr) {
        self.rules.lock().drop_in.insert(src);
    }

    /// Discards datagrams the node sends back to `src`.
    pub fn drop_out(&self, src: SocketAddr) {
        self.rules.lock().drop_out.insert(src);
    }

    /// Lets everything through again.
    pub fn heal(&self) {
        let mut r = self.rules.lock();
        r.drop_in.clear();
        r.drop_out.clear();
    }
}

impl Drop for UdpProxy {
    fn drop(&mut self) {
        self.task.abort();
        for b in self.backs.lock().drain(..) {
            b.abort();
        }
    }
}
