//! The metrics port: HTTP/1.1 `GET /metrics` answers the node's metrics in
//! Prometheus' text format; any other request gets a clear HTTP error. One
//! request per connection (`Connection: close`), a request head of at most
//! 8 KiB read within 5 s, the answer taken within 5 s, and at most 32
//! connections at once, shared fairly between addresses, a new one
//! closing the oldest still sending its request if need be (`slots`):
//! whatever reaches the port, and however slowly, the node keeps serving. Where the node has users, a
//! request must carry one's name and password (HTTP Basic authentication,
//! which Prometheus' `basic_auth` sends), or it is answered `401`; a wrong
//! password is answered after the same delay as on the client ports.
//! Without users, protected mode holds here as on the client ports: a
//! client off loopback is answered `403`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::client::accept::ClientGate;
use crate::node::Node;
use crate::security::auth::{Auth, Login};

use super::slots::{CONNECTIONS_MAX, Held, Slots};

/// Longest request head read.
const HEAD_BYTES_MAX: usize = 8 << 10;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to take its answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// What a connection gets when every place is answering.
const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `GET /metrics` (or `HEAD`, without the body), with the Basic
    /// credentials it carries, if any.
    Metrics {
        /// `HEAD`: the answer without its body.
        head_only: bool,
        /// The user and password of its `Authorization: Basic` header.
        login: Option<(String, String)>,
    },
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
            login: head.split("\r\n").skip(1).find_map(basic_login),
        },
        ("GET" | "HEAD", _) => Request::Refuse("404 Not Found", "the metrics are at /metrics"),
        _ => Request::Refuse("405 Method Not Allowed", "only GET and HEAD"),
    }
}

/// The user and password of a header line `Authorization: Basic <base64
/// of user:password>`, if it is one.
fn basic_login(line: &str) -> Option<(String, String)> {
    use base64::Engine;
    let (name, value) = line.split_once(':')?;
    if !name.trim().eq_ignore_ascii_case("authorization") {
        return None;
    }
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let (user, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// Serves the metrics port until the node stops.
pub(crate) async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    gate: Arc<ClientGate>,
    auth: Arc<Auth>,
) {
    let slots = Slots::new(CONNECTIONS_MAX);
    loop {
        slots.room().await;
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "metrics port: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some((held, evicted)) = slots.admit(from.ip()) else {
            let _ = stream.try_write(BUSY); // not after `room`, but say so
            continue;
        };
        let (node, gate, auth) = (node.clone(), gate.clone(), auth.clone());
        tokio::spawn(async move {
            if let Err(e) = answer(stream, (held, evicted), &node, &gate, &auth).await {
                tracing::debug!(error = %e, %from, "metrics request ended early");
            }
        });
    }
}

async fn answer(
    mut stream: TcpStream,
    (mut held, evicted): (Held, oneshot::Receiver<()>),
    node: &Node,
    gate: &ClientGate,
    auth: &Auth,
) -> std::io::Result<()> {
    let head = tokio::select! {
        head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)) => head,
        Ok(()) = evicted => return Ok(()), // closed to make room
    };
    held.answering();
    let request = match head {
        Ok(Ok(Some(head))) => parse(&head),
        Ok(Ok(None)) => Request::Refuse(
            "431 Request Header Fields Too Large",
            "the request head is over 8 KiB",
        ),
        Ok(Err(e)) => return Err(e),
        Err(_) => Request::Refuse("408 Request Timeout", "no request head within 5 s"),
    };
    let from = stream.peer_addr().ok();
    let request = match request {
        Request::Metrics { head_only, login } => match allowed(auth, login, from).await {
            Ok(()) => Request::Metrics {
                head_only,
                login: None,
            },
            Err(refusal) => refusal,
        },
        r => r,
    };
    let (status, content_type, body, head_only) = match request {
        Request::Metrics { head_only, .. } => (
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
    let challenge = match status.starts_with("401") {
        true => "WWW-Authenticate: Basic realm=\"tally\", charset=\"UTF-8\"\r\n",
        false => "",
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{challenge}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    let write = async {
        stream.write_all(&out).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(ANSWER_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// Whether the request may read the metrics, or its refusal: without
/// users, when protected mode admits its address; with them, when its
/// credentials log in (a wrong password waits its penalty).
async fn allowed(
    auth: &Auth,
    login: Option<(String, String)>,
    from: Option<SocketAddr>,
) -> Result<(), Request> {
    const LOG_IN: Request =
        Request::Refuse("401 Unauthorized", "log in: HTTP Basic authentication");
    if !auth.has_users() {
        return match from.is_some_and(|a| auth.admits(a.ip())) {
            true => Ok(()),
            false => Err(Request::Refuse(
                "403 Forbidden",
                "protected mode: a node without users serves its metrics to loopback clients only",
            )),
        };
    }
    let Some((user, password)) = login else {
        return Err(LOG_IN);
    };
    match Login::new(auth).login(auth, &user, &password, from).await {
        true => Ok(()),
        false => Err(LOG_IN),
    }
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
            Request::Metrics {
                head_only: false,
                login: None
            }
        );
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0"),
            Request::Metrics {
                head_only: true,
                login: None
            }
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

    #[tokio::test(start_paused = true)]
    async fn metrics_honour_protected_mode() {
        let auth =
            Auth::load(&crate::security::auth::AuthConfig::default()).expect("no users load");
        let from = |a: &str| Some(a.parse::<SocketAddr>().expect("an address"));
        assert_eq!(allowed(&auth, None, from("127.0.0.1:9")).await, Ok(()));
        let off = allowed(&auth, None, from("10.0.0.5:9")).await;
        assert!(
            matches!(off, Err(Request::Refuse("403 Forbidden", _))),
            "a client off loopback read the metrics of a node without users: {off:?}"
        );
        assert!(allowed(&auth, None, None).await.is_err(), "no address");
    }

    #[test]
    fn basic_credentials_are_read_from_their_header() {
        // base64("prom:pa:ss") = cHJvbTpwYTpzcw==
        let login = |head: &[u8]| match parse(head) {
            Request::Metrics { login, .. } => login,
            Request::Refuse(..) => panic!("refused"),
        };
        let want = Some(("prom".to_string(), "pa:ss".to_string()));
        assert_eq!(
            login(b"GET /metrics HTTP/1.1\r\nAuthorization: Basic cHJvbTpwYTpzcw=="),
            want
        );
        assert_eq!(
            login(b"GET /metrics HTTP/1.1\r\nauthorization:  basic cHJvbTpwYTpzcw== "),
            want
        );
        assert_eq!(
            login(b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer x"),
            None
        );
        assert_eq!(
            login(b"GET /metrics HTTP/1.1\r\nAuthorization: Basic !!!"),
            None
        );
        assert_eq!(
            login(b"GET /metrics HTTP/1.1\r\nAuthorization: Basic bm9jb2xvbg=="),
            None
        );
    }
}
