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
//! goes on serving every other connection. So does a request not complete
//! within the request timeout, and an idle connection (see `limits`).
//!
//! Where the node has users, a connection must log in (`ClientOp::Auth`)
//! before anything else is served, and then only what its role allows
//! (see `auth`); the port may speak only TLS (see `client_tls`).
//!
//! A connection over the node's cap gets a frame with request id 0 and an
//! `Unavailable` error, "max number of clients reached", and is closed
//! (see `accept`). Answers the client does not take stop the reading of
//! its requests past the soft output bound, and close the connection past
//! the hard one or after the output timeout (see `output`). What a client can cause to be logged is logged at most
//! once a second, with the number of lines left out.

use std::net::SocketAddr;
use std::sync::Arc;

use tally_net::frame::{put_frame, read_frame};
use tally_net::log_limit::LogLimit;
use tally_net::wire::{
    self, CLIENT_VERSIONS_MAX, ClientOp, ClientReply, ClientRequest, ClientResponse, ErrorKind,
    REQUEST_FRAME_BYTES_MAX, WireError,
};
use tally_world::Instant;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tracing::{debug, warn};

use crate::base::keyspace::Keyspace;
use crate::client::accept::{
    Accepted, ClientGate, Closing, Doors, Listener, accept_loop, closing, until_closing,
};
use crate::client::output::{OutputGauge, Pressure, write_answers};
use crate::client::stream::ReadHalf;
use crate::cluster::write::queue::{Origin, QueuedAdd, Reply, Sink, Timer, reply_one};
use crate::config::limits::Limits;
use crate::node::Node;
use crate::security::auth::{Auth, Login, Refusal, access};

/// Requests one connection may have running at once.
const IN_FLIGHT_MAX: usize = 4096;
/// A connection's read buffer: a pipelined client's requests arrive many
/// to a segment, and are read with one `recv` instead of two each.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// What a connection over the node's cap is told before it is closed.
const REFUSAL: &str = "max number of clients reached";
/// What a connection over the cap of those not logged in is told.
const REFUSAL_ANONYMOUS: &str = "max number of clients not logged in reached";
/// What a client off loopback is told without users, in protected mode.
const PROTECTED: &str = "protected mode: no users are configured, so this node serves \
     clients on loopback addresses only; add users under [cluster.auth] (see `tallyd passwd`) \
     or set protected_mode = false";

/// Accepts client connections until the listener fails, at most as many
/// at once as `gate` allows.
pub async fn serve(listener: TcpListener, node: Arc<Node>, gate: Arc<ClientGate>, doors: Doors) {
    let last_word = |kind, why: &str| {
        let mut frame = Vec::new();
        let result = Err(WireError::new(kind, why));
        put_frame(&mut frame, &ClientResponse { id: 0, result });
        frame
    };
    let l = Listener {
        what: "client",
        refusal: last_word(ErrorKind::Unavailable, REFUSAL),
        refusal_anonymous: last_word(ErrorKind::Unavailable, REFUSAL_ANONYMOUS),
        protected: last_word(ErrorKind::Denied, PROTECTED),
        auth: doors.auth,
        tls: doors.tls,
        handle: connection,
    };
    accept_loop(listener, node, gate, l).await
}

/// Why the reader stopped.
enum Stop {
    /// The client closed, or the connection is gone for good.
    Quiet,
    /// Tell the client why, then close.
    Say(String),
    /// Tell the client why with this kind of error, then close: its user
    /// was deleted or given a new password, or it did not log in in time.
    Tell(ErrorKind, String),
    /// The client does not take its answers: close without waiting.
    Abandon(&'static str),
}

async fn connection(c: Accepted) {
    // The slot is held until the connection ends.
    let Accepted {
        stream,
        node,
        auth,
        slot: _slot,
        mut anonymous,
    } = c;
    let limits = node.config().cluster.limits.clone();
    let peer = stream.peer_addr().ok();
    let mut login = Login::new(&auth);
    // The client protocol agreed on (`Hello`): 1 until one is.
    let mut protocol: u16 = 1;
    let (rd, wr) = stream.split();
    let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT_MAX);
    let (others_tx, others_rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT_MAX);
    let gauge = Arc::new(OutputGauge::default());
    let writer = tokio::spawn(write_answers(
        wr,
        rx,
        others_rx,
        gauge.clone(),
        limits.output_timeout(),
    ));
    let permits = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    let mut buf = Vec::new();
    let stop = loop {
        // Backpressure: no new request while the client leaves answers untaken.
        let soft = limits.output_soft_bytes;
        match gauge
            .wait_below(soft, limits.output_hard_bytes, limits.output_timeout())
            .await
        {
            Pressure::Below => {}
            Pressure::Stuck => break Stop::Abandon("answers untaken for the output timeout"),
            Pressure::Over => break Stop::Abandon("answers over the output limit"),
        }
        if let Some(c) = closing(&login, &mut anonymous, Instant::now()) {
            break Stop::Tell(closing_kind(c), c.words(&login, &limits));
        }
        let next = tokio::select! {
            r = next_frame(&mut rd, &mut buf, &limits) => r,
            () = gauge.closed() => break Stop::Abandon("answers not taken"),
            c = until_closing(&login, &anonymous) => {
                break Stop::Tell(closing_kind(c), c.words(&login, &limits))
            }
        };
        match next {
            Ok(true) => {}
            Ok(false) => break Stop::Quiet,
            Err(why) => break Stop::Say(why),
        }
        let req: ClientRequest = match wire::decode(&buf) {
            Ok(r) => r,
            Err(e) => break Stop::Say(format!("malformed request: {e}")),
        };
        // A request at SERIAL comes wrapped (its level travels as QUORUM).
        let req = match tally_net::serial::unwrap(req.op) {
            Ok(op) => ClientRequest { op, ..req },
            Err(why) => break Stop::Say(why),
        };
        // A login revoked as the request came in closes the connection
        // with its reason, rather than refusing the request (one load: the
        // login deadline was checked before the wait).
        if login.revoked() {
            let c = Closing::Revoked;
            break Stop::Tell(closing_kind(c), c.words(&login, &limits));
        }
        // A login is answered here; anything its login does not allow, too.
        let answered = match &req.op {
            ClientOp::Auth { user, password } => {
                Some(log_in(&mut login, &auth, user, password, peer).await)
            }
            ClientOp::Hello { versions } => match hello(versions) {
                Ok(reply) => {
                    if let ClientReply::Hello { version, .. } = &reply {
                        protocol = *version;
                    }
                    Some(Ok(reply))
                }
                Err(why) => break Stop::Say(why),
            },
            op => login
                .check(access::native_need(op))
                .err()
                .map(|r| Err(refusal(r, login.user()))),
        };
        if let Some(result) = answered {
            let mut frame = Vec::new();
            put_frame(&mut frame, &ClientResponse { id: req.id, result });
            gauge.add(frame.len());
            let _ = others_tx.send(frame).await;
            continue;
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break Stop::Quiet;
        };
        let outs = (&tx, &others_tx, &gauge);
        run_request(req, permit, &node, (login.user(), protocol), outs);
    };
    if let Stop::Abandon(why) = stop {
        debug!(client = ?peer, reason = why, "closing a client connection");
        writer.abort();
        return;
    }
    if let Some(frame) = last_frame(stop, peer, login.user()) {
        gauge.add(frame.len());
        let _ = others_tx.send(frame).await;
    }
    drop((tx, others_tx));
    let _ = writer.await;
    debug!(client = ?peer, "client connection closed");
}

/// The answer to a client's `Hello`: the client protocol version both
/// speak, or why there is none (the connection then closes).
fn hello(versions: &[u16]) -> Result<ClientReply, String> {
    if versions.len() > CLIENT_VERSIONS_MAX {
        return Err(format!(
            "a hello names {} versions, over {CLIENT_VERSIONS_MAX}",
            versions.len()
        ));
    }
    let version = tally_net::version::client_version(versions)?;
    Ok(ClientReply::Hello {
        version,
        build: crate::cluster::features::BUILD.to_string(),
    })
}

/// Runs an allowed request holding `permit`: an add joins the node's
/// write queue and answers through `adds`; anything else runs on a task
/// of its own and answers through `others`, counted by `gauge`.
fn run_request(
    req: ClientRequest,
    permit: OwnedSemaphorePermit,
    node: &Arc<Node>,
    (user, protocol): (Option<&str>, u16),
    (adds, others, gauge): (
        &mpsc::Sender<Vec<u8>>,
        &mpsc::Sender<Vec<u8>>,
        &Arc<OutputGauge>,
    ),
) {
    if let ClientOp::Add { cl, .. } | ClientOp::AddOnce { cl, .. } = &req.op {
        // The write path answers into the connection's sink, which frames
        // each answer as this protocol does.
        let put: fn(&mut Vec<u8>, u64, Result<i64, WireError>) = |frame, id, result| {
            let result = result.map(ClientReply::Value);
            put_frame(frame, &ClientResponse { id, result });
        };
        let reply = Reply::Frame {
            id: req.id,
            conn: Sink::new(adds.clone(), put),
            slot: permit,
            timer: Timer::start(*cl, node.metrics()),
        };
        match queued_add(req.op, node.keyspace(0), user, reply) {
            Ok(add) => node.submit(add),
            Err((reply, e)) => reply_one(reply, Err(e)),
        }
        return;
    }
    let (node, tx, gauge) = (node.clone(), others.clone(), gauge.clone());
    tokio::spawn(async move {
        let result = match execute(&node, req.op).await {
            // A client before protocol 4 does not know sorted sets.
            Ok(ClientReply::Keys(keys)) if protocol < 4 => {
                Ok(ClientReply::Keys(keys.without_sorted_sets()))
            }
            other => other,
        };
        let mut frame = Vec::new();
        put_frame(&mut frame, &ClientResponse { id: req.id, result });
        gauge.add(frame.len());
        let _ = tx.send(frame).await;
        drop(permit);
    });
}

/// Runs a client's operation; a row of a CQL table (`cql::named`) is read
/// by its name.
async fn execute(node: &Node, op: ClientOp) -> Result<ClientReply, WireError> {
    match op {
        ClientOp::GetRow { partition, cl } if crate::client::cql::named::is_name(&partition) => {
            crate::client::cql::named::row(node, cl, &partition)
                .await
                .map(ClientReply::Row)
        }
        op => node.execute(op).await,
    }
}

/// The frame that tells a client why its connection stops, if it is told.
fn last_frame(stop: Stop, peer: Option<SocketAddr>, user: Option<&str>) -> Option<Vec<u8>> {
    let (kind, why) = match stop {
        Stop::Quiet | Stop::Abandon(_) => return None,
        Stop::Say(why) => {
            static CLOSING: LogLimit = LogLimit::per_second();
            if let Some(suppressed) = CLOSING.admit() {
                warn!(client = ?peer, reason = %why, suppressed, "closing a client connection");
            }
            (ErrorKind::Invalid, why)
        }
        Stop::Tell(kind, why) => {
            debug!(client = ?peer, user, reason = %why, "closing a client connection");
            (kind, why)
        }
    };
    let mut frame = Vec::new();
    let result = Err(WireError::new(kind, why));
    put_frame(&mut frame, &ClientResponse { id: 0, result });
    Some(frame)
}

/// The kind of error a connection closed for `c` is told.
fn closing_kind(c: Closing) -> ErrorKind {
    match c {
        Closing::Revoked => ErrorKind::Denied,
        Closing::NoLogin => ErrorKind::NoAuth,
    }
}

/// A login's answer: `Done`, or `Denied` after the penalty.
async fn log_in(
    login: &mut Login,
    auth: &Auth,
    user: &str,
    password: &str,
    peer: Option<SocketAddr>,
) -> Result<ClientReply, WireError> {
    match login.login(auth, user, password, peer).await {
        true => Ok(ClientReply::Done),
        false => Err(WireError::new(ErrorKind::Denied, WRONGPASS)),
    }
}

/// The error a refused request gets.
fn refusal(r: Refusal, user: Option<&str>) -> WireError {
    match r {
        Refusal::NoAuth => WireError::new(ErrorKind::NoAuth, "NOAUTH Authentication required."),
        Refusal::NoPerm(role) => WireError::new(
            ErrorKind::Denied,
            format!(
                "NOPERM user {} (role {}) may not do this",
                user.unwrap_or("default"),
                role.name()
            ),
        ),
    }
}

/// What a wrong login is told (Redis' words).
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Reads the next request frame into `buf`: `Ok(false)` at a clean end.
/// Its first byte may take the idle timeout to come, the rest of it the
/// request timeout.
async fn next_frame(
    rd: &mut BufReader<ReadHalf>,
    buf: &mut Vec<u8>,
    limits: &Limits,
) -> Result<bool, String> {
    let first = match limits.idle_timeout() {
        None => rd.fill_buf().await,
        Some(idle) => match tokio::time::timeout(idle, rd.fill_buf()).await {
            Ok(r) => r,
            Err(_) => return Err(format!("idle for {} ms", limits.idle_timeout_ms)),
        },
    };
    match first {
        Ok([]) => return Ok(false),
        Ok(_) => {}
        Err(e) => return Err(format!("read frame: {e}")),
    }
    let frame = read_frame(rd, buf, REQUEST_FRAME_BYTES_MAX);
    match tokio::time::timeout(limits.request_timeout(), frame).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "request incomplete after {} ms",
            limits.request_timeout_ms
        )),
    }
}

/// A client's add, its key in `space` and its id `user`'s (`None` without
/// users, see `crate::config::ids::user_client`), as a queued add answered by
/// `reply`; its reply back when the key or the id is out of bounds.
fn queued_add(
    op: ClientOp,
    space: Keyspace,
    user: Option<&str>,
    reply: Reply,
) -> Result<QueuedAdd, (Reply, WireError)> {
    let op = match crate::base::keyspace::op_in(op, space) {
        Ok(op) => op,
        Err(e) => return Err((reply, e.into())),
    };
    let (key, delta, id, cl) = match op {
        ClientOp::Add { key, delta, cl } => (key, delta, None, cl),
        ClientOp::AddOnce { key, delta, id, cl } => (key, delta, Some(id), cl),
        _ => unreachable!("only adds are queued"),
    };
    let key = match crate::base::convert::user_key(&key) {
        Ok(k) => k,
        Err(e) => return Err((reply, e)),
    };
    // Checked as the client gave it, so the limits read as they are written.
    let id = match id.as_ref().map(|id| id.check()) {
        Some(Err(e)) => return Err((reply, e)),
        _ => id.map(|id| crate::config::ids::user_op_id(user, id)),
    };
    Ok(match id.as_ref().map(crate::base::convert::op_id) {
        None => QueuedAdd::new(key, delta, cl, Origin::Client, reply),
        Some(Ok(id)) => QueuedAdd::with_id(key, delta, id, cl, Origin::Client, reply),
        Some(Err(e)) => return Err((reply, e)),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_hello_agrees_on_a_version_or_says_which_each_side_speaks() {
        match hello(&[1, 2, 3, 4, 5]).unwrap() {
            ClientReply::Hello { version, build } => {
                assert_eq!(version, 4);
                assert_eq!(build, crate::cluster::features::BUILD);
            }
            other => panic!("{other:?}"),
        }
        let e = hello(&[7, 9]).unwrap_err();
        assert!(
            e.contains("this node speaks 1 to 4, the client [7, 9]"),
            "{e}"
        );
        let e = hello(&[1; CLIENT_VERSIONS_MAX + 1]).unwrap_err();
        assert!(e.contains("over 64"), "{e}");
    }
}
