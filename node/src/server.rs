//! The client listener: the client protocol over TCP.
//!
//! One task reads a connection's frames. Adds join the node's write path
//! (see `write`), which answers a batch's adds to one connection with one
//! frame buffer; every other request runs in its own task. At most
//! `IN_FLIGHT_MAX` requests per connection run at once, then reading
//! pauses. A writer task coalesces the answers into as few writes as it
//! can. Answers go out in completion order, matched by request id.
//!
//! A frame over the limit, a truncated frame or bytes that do not decode end
//! that connection: the client gets one last frame with request id 0 that
//! says why, requests already running still get their answers, and the node
//! goes on serving every other connection. What a client can cause to be
//! logged (a bad connection, a failed accept) is logged at most once a
//! second, with the number of lines left out.

use std::sync::Arc;

use tally_net::frame::{put_frame, read_frame};
use tally_net::log_limit::LogLimit;
use tally_net::wire::{
    self, ClientOp, ClientRequest, ClientResponse, ErrorKind, REQUEST_FRAME_BYTES_MAX, WireError,
};
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, warn};

use crate::node::Node;
use crate::write::queue::{Origin, QueuedAdd, Reply, reply_one};

/// Requests one connection may have running at once.
const IN_FLIGHT_MAX: usize = 4096;
/// A connection's read buffer: a pipelined client's requests arrive many
/// to a segment, and are read with one `recv` instead of two each.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Accepts client connections until the listener fails.
pub async fn serve(listener: TcpListener, node: Arc<Node>) {
    accept_loop(listener, node, "client", connection).await
}

/// Accepts connections and runs `handle` on each in its own task, until
/// the listener fails. Shared by the client and RESP listeners.
pub(crate) async fn accept_loop<F, Fut>(
    listener: TcpListener,
    node: Arc<Node>,
    what: &'static str,
    handle: F,
) where
    F: Fn(TcpStream, Arc<Node>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(handle(stream, node.clone()));
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                static FAILED: LogLimit = LogLimit::per_second();
                if let Some(suppressed) = FAILED.admit() {
                    warn!(listener = what, error = %e, suppressed, "accept failed");
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(stream: TcpStream, node: Arc<Node>) {
    let peer = stream.peer_addr().ok();
    let (rd, wr) = stream.into_split();
    let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT_MAX);
    let writer = tokio::spawn(tally_net::frame::write_coalesced(wr, rx));
    let permits = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    let mut buf = Vec::new();
    let last_word = loop {
        match read_frame(&mut rd, &mut buf, REQUEST_FRAME_BYTES_MAX).await {
            Ok(true) => {}
            Ok(false) => break None,
            Err(e) => break Some(e.to_string()),
        }
        let req: ClientRequest = match wire::decode(&buf) {
            Ok(r) => r,
            Err(e) => break Some(format!("malformed request: {e}")),
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break None;
        };
        if let ClientOp::Add { key, delta, cl } = &req.op {
            let reply = Reply::Frame {
                id: req.id,
                conn: tx.clone(),
                slot: permit,
            };
            match crate::convert::key(key) {
                Ok(key) => node.submit(QueuedAdd::new(key, *delta, *cl, Origin::Client, reply)),
                Err(e) => reply_one(reply, Err(e)),
            }
            continue;
        }
        let node = node.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let result = node.execute(req.op).await;
            let mut frame = Vec::new();
            put_frame(&mut frame, &ClientResponse { id: req.id, result });
            let _ = tx.send(frame).await;
            drop(permit);
        });
    };
    if let Some(why) = last_word {
        static CLOSING: LogLimit = LogLimit::per_second();
        if let Some(suppressed) = CLOSING.admit() {
            warn!(client = ?peer, reason = %why, suppressed, "closing a client connection");
        }
        let mut frame = Vec::new();
        let result = Err(WireError::new(ErrorKind::Invalid, why));
        put_frame(&mut frame, &ClientResponse { id: 0, result });
        let _ = tx.send(frame).await;
    }
    drop(tx);
    let _ = writer.await;
    debug!(client = ?peer, "client connection closed");
}
