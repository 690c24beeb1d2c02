//! The metrics port: HTTP/1.1 `GET /metrics` answers the node's metrics in
//! Prometheus' text format; any other request gets a clear HTTP error. One
//! request per connection (`Connection: close`), a request head of at most
//! 8 KiB read within 5 s, and at most 32 connections at once: whatever
//! reaches the port, the node keeps serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::accept::ClientGate;
use crate::node::Node;

/// Longest request head read.
const HEAD_BYTES_MAX: usize = 8 << 10;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more wait to be accepted.
const CONNECTIONS_MAX: usize = 32;

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `GET /metrics` (or `HEAD`, without the body).
    Metrics { head_only: bool },
    /// An answer other than the metrics: status line and a reason.
    Refuse(&'static str, &'static str),
}

/// Reads a request head (everything before the blank line) as the port
/// answers it. Pure: the rule for every request shape.
pub(crate) fn parse(head: &[u8]) -> Request {
    let Ok(head) = std::str::from_utf8(head) else {
        return Request::Refuse("400 Bad Request", "the request is not text");
    };
    let line = head.split("\r\n").next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Request::Refuse("400 Bad Request", "a request line is METHOD TARGET VERSION");
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Refuse("505 HTTP Version Not Supported", "HTTP/1.x only");
    }
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => Request::Metrics {
            head_only: method == "HEAD",
        },
        ("GET" | "HEAD", _) => Request::Refuse("404 Not Found", "the metrics are at /metrics"),
        _ => Request::Refuse("405 Method Not Allowed", "only GET and HEAD"),
    }
}

/// Serves the metrics port until the node stops.
pub(crate) async fn serve(listener: TcpListener, node: Arc<Node>, gate: Arc<ClientGate>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "metrics port: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (node, gate) = (node.clone(), gate.clone());
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &node, &gate).await {
                tracing::debug!(error = %e, %from, "metrics request ended early");
            }
            drop(slot);
        });
    }
}

async fn answer(mut stream: TcpStream, node: &Node, gate: &ClientGate) -> std::io::Result<()> {
    let request = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => parse(&head),
        Ok(Ok(None)) => Request::Refuse(
            "431 Request Header Fields Too Large",
            "the request head is over 8 KiB",
        ),
        Ok(Err(e)) => return Err(e),
        Err(_) => Request::Refuse("408 Request Timeout", "no request head within 5 s"),
    };
    let (status, content_type, body, head_only) = match request {
        Request::Metrics { head_only } => (
            "200 OK",
            super::text::CONTENT_TYPE,
            super::render(node, gate),
            head_only,
        ),
        Request::Refuse(status, why) => (
            status,
            "text/plain; charset=utf-8",
            format!("{why}\n"),
            false,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}

/// The request head, or `None` when it is longer than the limit.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(Some(head)); // The client said all it will.
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(Some(head));
        }
        if head.len() > HEAD_BYTES_MAX {
            return Ok(None);
        }
    }
}

/// Binds the metrics port, if the node has one.
pub(crate) async fn bind(addr: Option<SocketAddr>) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("bind the metrics address {addr}: {e}"))?;
    Ok(Some(listener))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_shape_gets_an_answer() {
        let refused = |head: &[u8]| match parse(head) {
            Request::Refuse(status, _) => status,
            Request::Metrics { .. } => "metrics",
        };
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x"),
            Request::Metrics { head_only: false }
        );
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0"),
            Request::Metrics { head_only: true }
        );
        assert_eq!(refused(b"GET / HTTP/1.1"), "404 Not Found");
        assert_eq!(refused(b"POST /metrics HTTP/1.1"), "405 Method Not Allowed");
        assert_eq!(
            refused(b"GET /metrics HTTP/2"),
            "505 HTTP Version Not Supported"
        );
        assert_eq!(refused(b"GET /metrics"), "400 Bad Request");
        assert_eq!(refused(b""), "400 Bad Request");
        assert_eq!(refused(b"GET  /metrics HTTP/1.1"), "400 Bad Request");
        assert_eq!(refused(&[0xff, 0xfe, 0x00]), "400 Bad Request");
        assert_eq!(refused(b"\x16\x03\x01\x02\x00"), "400 Bad Request");
    }
}
