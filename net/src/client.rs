//! The thin async client for the client protocol.
//!
//! One TCP connection, a writer task and a reader task. Every call gets a
//! fresh request id and waits for the response with that id, so any number
//! of calls can be in flight on the connection (pipelining) and come back in
//! any order. The writer coalesces whatever is queued into one write.
//!
//! Adds are never retried here: an add whose answer was lost may or may not
//! have been applied, and sending it again could count it twice. Such an
//! add fails with [`ClientError::Timeout`] or [`ClientError::Closed`], whose
//! [`ClientError::outcome`] is [`Outcome::Unknown`]; only an error whose
//! outcome is [`Outcome::NotApplied`] makes a retry safe.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tally_world::Instant;

use parking_lot::Mutex;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use crate::frame::{put_frame, read_frame};
use crate::once::OpId;
use crate::version;
use crate::wire::{
    Change, Changed, ClientOp, ClientReply, ClientRequest, ClientResponse, ClusterStatus,
    Consistency, Deadline, ErrorKind, MESSAGE_BYTES_MAX, Outcome, StringCondition, WireCell,
    WireError, WireKey, WireString, WireSwapped, WireVersions,
};

/// How a connection is secured: TLS, and a login.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Speak TLS to the node.
    pub tls: Option<ClientTls>,
    /// Log in as this user first.
    pub login: Option<Login>,
}

/// TLS towards the client ports.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// Whom to trust (see [`crate::client_tls::client_config`]).
    pub config: Arc<rustls::ClientConfig>,
    /// The name the node's certificate must bear; `None`: the IP address
    /// dialled.
    pub server_name: Option<String>,
}

impl ClientTls {
    fn server_name(&self, addr: SocketAddr) -> Result<ServerName<'static>, String> {
        match &self.server_name {
            None => Ok(ServerName::IpAddress(addr.ip().into())),
            Some(name) => ServerName::try_from(name.clone())
                .map_err(|e| format!("TLS server name {name:?}: {e}")),
        }
    }
}

/// A user and password to log in with.
#[derive(Clone)]
pub struct Login {
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Default deadline of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests that may wait for the writer.
const QUEUE_REQUESTS_MAX: usize = 4096;

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// Could not connect.
    #[error("connect to {addr}: {reason}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The connection broke; an add in flight may or may not have been applied.
    #[error("connection closed: {0} (an add in flight may or may not have been applied)")]
    Closed(String),
    /// No answer in time; an add may or may not have been applied.
    #[error("no answer within {0} ms (an add may or may not have been applied)")]
    Timeout(u64),
    /// The server answered with an error.
    #[error("{0}")]
    Server(WireError),
    /// The server's answer made no sense.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The server's error kind, if the server answered with one.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ClientError::Server(e) => Some(e.kind),
            _ => None,
        }
    }

    /// What the caller may conclude about a write that failed so. Only a
    /// failed connect is certain to have sent nothing; a broken connection,
    /// a timeout or an answer that makes no sense may follow an applied
    /// write, and the server says for its own errors.
    pub fn outcome(&self) -> Outcome {
        match self {
            ClientError::Connect { .. } => Outcome::NotApplied,
            ClientError::Closed(_) | ClientError::Timeout(_) | ClientError::Protocol(_) => {
                Outcome::Unknown
            }
            ClientError::Server(e) => e.outcome,
        }
    }
}

type Answer = oneshot::Sender<Result<ClientReply, ClientError>>;

/// Calls waiting for their answer, by request id: `None` once the
/// connection is gone.
type Waiters = Arc<WaiterMap>;
type WaiterMap = Mutex<Option<HashMap<u64, Waiter>>>;

struct Waiter {
    deadline: Instant,
    answer: Answer,
}

/// A connection to one node.
pub struct Client {
    addr: SocketAddr,
    frames: mpsc::Sender<Vec<u8>>,
    waiters: Waiters,
    /// Why the connection ended, once it has.
    gone: Arc<std::sync::OnceLock<String>>,
    next_id: AtomicU64,
    timeout: Duration,
    /// The client protocol version agreed on.
    protocol: u16,
}

impl Client {
    /// Connects to a node's client address.
    pub async fn connect(addr: SocketAddr) -> Result<Client, ClientError> {
        Client::connect_with_timeout(addr, DEFAULT_TIMEOUT).await
    }

    /// Connects; every call then waits at most `timeout`.
    pub async fn connect_with_timeout(
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        Client::connect_secure(addr, timeout, &Security::default()).await
    }

    /// Connects over TLS and logs in as `security` says; every call then
    /// waits at most `timeout`. A login the node refuses is an error here.
    ///
    /// The first request agrees on the client protocol version
    /// (`ClientOp::Hello`, see `crate::version`). A node of a build before
    /// versions refuses it as malformed and closes: the client connects
    /// again and speaks version 1. A node that shares no version with
    /// this client is an error that says which versions each speaks.
    pub async fn connect_secure(
        addr: SocketAddr,
        timeout: Duration,
        security: &Security,
    ) -> Result<Client, ClientError> {
        let mut client = Client::open(addr, timeout, security).await?;
        let versions = (version::CLIENT_OLDEST..=version::CLIENT_NEWEST).collect();
        client.protocol = match client.call(ClientOp::Hello { versions }).await {
            Ok(ClientReply::Hello { version, .. }) => version,
            Ok(other) => {
                return Err(ClientError::Protocol(format!(
                    "unexpected answer to a hello: {other:?}"
                )));
            }
            Err(ClientError::Closed(why)) if why.contains("malformed request") => {
                client = Client::open(addr, timeout, security).await?;
                1
            }
            Err(ClientError::Closed(why)) => {
                return Err(ClientError::Connect { addr, reason: why });
            }
            Err(e) => return Err(e),
        };
        if let Some(login) = &security.login {
            let op = ClientOp::Auth {
                user: login.user.clone(),
                password: login.password.clone(),
            };
            client.call(op).await?;
        }
        Ok(client)
    }

    /// A connection to `addr`, over TLS where `security` says; no request
    /// sent yet.
    async fn open(
        addr: SocketAddr,
        timeout: Duration,
        security: &Security,
    ) -> Result<Client, ClientError> {
        let connect_err = |reason: String| ClientError::Connect { addr, reason };
        let in_time =
            |what: &str| connect_err(format!("no {what} within {} ms", timeout.as_millis()));
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| in_time("answer"))?
            .map_err(|e| connect_err(e.to_string()))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connect_err(e.to_string()))?;
        let client = match &security.tls {
            None => {
                let (rd, wr) = stream.into_split();
                Client::start(addr, rd, wr, timeout)
            }
            Some(tls) => {
                let name = tls.server_name(addr).map_err(connect_err)?;
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let stream = tokio::time::timeout(timeout, connector.connect(name, stream))
                    .await
                    .map_err(|_| in_time("TLS handshake"))?
                    .map_err(|e| connect_err(format!("TLS handshake: {e}")))?;
                let (rd, wr) = tokio::io::split(stream);
                Client::start(addr, rd, wr, timeout)
            }
        };
        Ok(client)
    }

    /// The client over a connected stream's halves: a writer task, a
    /// reader task, and the task that expires calls.
    fn start<R, W>(addr: SocketAddr, rd: R, wr: W, timeout: Duration) -> Client
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        // Answers arrive many to a segment: one `recv` for all of them.
        let rd = tokio::io::BufReader::with_capacity(64 * 1024, rd);
        let waiters: Waiters = Arc::new(Mutex::new(Some(HashMap::new())));
        let (frames, rx) = mpsc::channel::<Vec<u8>>(QUEUE_REQUESTS_MAX);
        tokio::spawn(crate::frame::write_coalesced(wr, rx));
        let gone = Arc::new(std::sync::OnceLock::new());
        tokio::spawn(read_answers(rd, waiters.clone(), gone.clone()));
        tokio::spawn(expire(
            Arc::downgrade(&waiters),
            frames.downgrade(),
            timeout,
        ));
        Client {
            addr,
            frames,
            waiters,
            gone,
            next_id: AtomicU64::new(1),
            timeout,
            protocol: 1,
        }
    }

    /// The client protocol version the node and this client agreed on.
    pub fn protocol(&self) -> u16 {
        self.protocol
    }

    /// The node this client talks to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the connection has failed (every call would fail).
    pub fn is_closed(&self) -> bool {
        self.waiters.lock().is_none() || self.frames.is_closed()
    }

    /// Sends one operation and waits for its answer, at most the client's
    /// timeout (up to an eighth of it more: see [`expire`]).
    pub async fn call(&self, op: ClientOp) -> Result<ClientReply, ClientError> {
        let op = crate::serial::wrap(op, self.protocol).map_err(ClientError::Protocol)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, mut rx) = oneshot::channel();
        let deadline = Instant::now() + self.timeout;
        match self.waiters.lock().as_mut() {
            Some(w) => w.insert(id, Waiter { deadline, answer }),
            None => {
                let why = self
                    .gone
                    .get()
                    .map_or("connection is closed", String::as_str);
                return Err(ClientError::Closed(why.into()));
            }
        };
        let mut frame = Vec::new();
        put_frame(&mut frame, &ClientRequest { id, op });
        let writer_stopped = || {
            if let Some(w) = self.waiters.lock().as_mut() {
                w.remove(&id);
            }
            ClientError::Closed("writer stopped".into())
        };
        match self.frames.try_send(frame) {
            Ok(()) => {}
            Err(TrySendError::Closed(_)) => return Err(writer_stopped()),
            // A full queue (a writer that cannot keep up) is waited for, but
            // never past the deadline: `expire` answers the call then.
            Err(TrySendError::Full(frame)) => {
                tokio::select! {
                    sent = self.frames.send(frame) => sent.map_err(|_| writer_stopped())?,
                    answer = &mut rx => return answered(answer),
                }
            }
        }
        answered(rx.await)
    }

    /// Adds `delta`; returns the value the leader saw after it.
    pub async fn add(
        &self,
        partition: &[u8],
        column: &[u8],
        delta: i64,
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        let key = key(partition, column);
        expect_value(self.call(ClientOp::Add { key, delta, cl }).await?)
    }

    /// Adds `delta` at most once for the operation id `id` (one attempt:
    /// the caller retries with the same id, see [`crate::once`]); returns
    /// the value the add produced, also when this attempt was a retry.
    pub async fn add_once(
        &self,
        partition: &[u8],
        column: &[u8],
        delta: i64,
        id: &OpId,
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        let key = key(partition, column);
        let id = id.clone();
        expect_value(self.call(ClientOp::AddOnce { key, delta, id, cl }).await?)
    }

    /// Adds members to the unique counter `partition`; returns how many
    /// were new. Safe to retry: a member is counted once however often it
    /// is added.
    pub async fn unique_add(
        &self,
        partition: &[u8],
        members: &[&[u8]],
        cl: Consistency,
    ) -> Result<u64, ClientError> {
        let partition = partition.to_vec();
        let members = members.iter().map(|m| m.to_vec()).collect();
        let op = ClientOp::UniqueAdd {
            partition,
            members,
            cl,
        };
        let n = expect_value(self.call(op).await?)?;
        u64::try_from(n).map_err(|_| ClientError::Protocol(format!("{n} new members")))
    }

    /// The number of distinct members of the unique counter `partition`.
    pub async fn unique_count(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        let partition = partition.to_vec();
        expect_value(self.call(ClientOp::UniqueCount { partition, cl }).await?)
    }

    /// Whether each of `members` is in the unique counter `partition`.
    pub async fn unique_contains(
        &self,
        partition: &[u8],
        members: &[&[u8]],
        cl: Consistency,
    ) -> Result<Vec<bool>, ClientError> {
        let partition = partition.to_vec();
        let members = members.iter().map(|m| m.to_vec()).collect();
        match self
            .call(ClientOp::UniqueContains {
                partition,
                members,
                cl,
            })
            .await?
        {
            ClientReply::Flags(f) => Ok(f),
            other => Err(unexpected(&other)),
        }
    }

    /// Reads a counter.
    pub async fn get(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<i64, ClientError> {
        let key = key(partition, column);
        expect_value(self.call(ClientOp::Get { key, cl }).await?)
    }

    /// Reads every column of a partition, in column order.
    pub async fn get_row(
        &self,
        partition: &[u8],
        cl: Consistency,
    ) -> Result<Vec<(Vec<u8>, i64)>, ClientError> {
        let partition = partition.to_vec();
        match self.call(ClientOp::GetRow { partition, cl }).await? {
            ClientReply::Row(row) => Ok(row),
            other => Err(unexpected(&other)),
        }
    }

    /// Resets a counter to zero.
    pub async fn reset(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<(), ClientError> {
        let key = key(partition, column);
        match self.call(ClientOp::Reset { key, cl }).await? {
            ClientReply::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Changes a counter's epoch: sets it, gives it a deadline or removes
    /// it, resets it; answers whether the change's condition held and the
    /// value before.
    pub async fn change(
        &self,
        partition: &[u8],
        column: &[u8],
        change: Change,
        cl: Consistency,
    ) -> Result<Changed, ClientError> {
        let key = key(partition, column);
        match self.call(ClientOp::Change { key, change, cl }).await? {
            ClientReply::Changed(done) => Ok(done),
            other => Err(unexpected(&other)),
        }
    }

    /// A counter's merged state: its epoch (value base, deadline) and shards.
    pub async fn get_cell(
        &self,
        partition: &[u8],
        column: &[u8],
        cl: Consistency,
    ) -> Result<WireCell, ClientError> {
        let key = key(partition, column);
        match self.call(ClientOp::GetCell { key, cl }).await? {
            ClientReply::Cell(cell) => Ok(cell),
            other => Err(unexpected(&other)),
        }
    }

    /// The answering node's view of the cluster.
    pub async fn status(&self) -> Result<ClusterStatus, ClientError> {
        match self.call(ClientOp::Status).await? {
            ClientReply::Status(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// Each node's build and peer protocol as the answering node knows
    /// them, and the cluster features it has enabled. A node of client
    /// protocol 1 (a build before versions) cannot tell: an error.
    pub async fn versions(&self) -> Result<WireVersions, ClientError> {
        if self.protocol < 2 {
            return Err(ClientError::Protocol(
                "the node speaks client protocol 1 only (a build before versions were \
                 negotiated), which cannot tell its build"
                    .into(),
            ));
        }
        match self.call(ClientOp::Versions).await? {
            ClientReply::Versions(v) => Ok(v),
            other => Err(unexpected(&other)),
        }
    }

    /// A key's string and its deadline, read linearizably, if it holds
    /// one. Client protocol 3.
    pub async fn get_string(&self, key: &[u8]) -> Result<Option<WireString>, ClientError> {
        self.speaks_strings()?;
        match self.call(ClientOp::GetString { key: key.to_vec() }).await? {
            ClientReply::String(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// Sets a key's string to `value` with `deadline` (`None`: deletes
    /// it) if `condition` holds of the string before, agreed by
    /// the key's replicas: whether it did, and the string before. Client
    /// protocol 3. Safe to retry only where the condition makes it so
    /// (a compare-and-set that applied once fails its compare after).
    pub async fn set_string(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        condition: StringCondition,
        deadline: Deadline,
    ) -> Result<WireSwapped, ClientError> {
        self.speaks_strings()?;
        let op = ClientOp::SetString {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            condition,
            deadline,
        };
        match self.call(op).await? {
            ClientReply::Swapped(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// Sets a key's string to `new` if it is `expected` (`None`: if it
    /// has none), keeping its deadline: whether it swapped.
    pub async fn cas(
        &self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<bool, ClientError> {
        let condition = match expected {
            Some(e) => StringCondition::Equals(e.to_vec()),
            None => StringCondition::Absent,
        };
        let swapped = self
            .set_string(key, Some(new), condition, Deadline::Keep)
            .await?;
        Ok(swapped.applied)
    }

    /// Takes the lease `name` for `owner` until `ttl` from now, if nobody
    /// else holds it (its holder takes it again, for a new `ttl`): whether
    /// `owner` holds it now, and the holder before.
    pub async fn lease_acquire(
        &self,
        name: &[u8],
        owner: &[u8],
        ttl: Duration,
    ) -> Result<WireSwapped, ClientError> {
        let condition = StringCondition::AbsentOrEquals(owner.to_vec());
        self.set_string(name, Some(owner), condition, lease_deadline(ttl))
            .await
    }

    /// Extends `owner`'s lease `name` to `ttl` from now, if `owner` still
    /// holds it: whether it did, and the holder before.
    pub async fn lease_renew(
        &self,
        name: &[u8],
        owner: &[u8],
        ttl: Duration,
    ) -> Result<WireSwapped, ClientError> {
        let condition = StringCondition::Equals(owner.to_vec());
        self.set_string(name, Some(owner), condition, lease_deadline(ttl))
            .await
    }

    /// Gives up `owner`'s lease `name`, if `owner` holds it: whether it
    /// did, and the holder before.
    pub async fn lease_release(
        &self,
        name: &[u8],
        owner: &[u8],
    ) -> Result<WireSwapped, ClientError> {
        let condition = StringCondition::Equals(owner.to_vec());
        self.set_string(name, None, condition, Deadline::Never)
            .await
    }

    /// Strings came with client protocol 3: an error for an older node.
    fn speaks_strings(&self) -> Result<(), ClientError> {
        if self.protocol < 3 {
            return Err(ClientError::Protocol(format!(
                "the node speaks client protocol {} (strings need 3: a newer build)",
                self.protocol
            )));
        }
        Ok(())
    }

    /// Round trip to the node.
    pub async fn ping(&self) -> Result<(), ClientError> {
        match self.call(ClientOp::Ping).await? {
            ClientReply::Pong => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}

fn answered(
    answer: Result<Result<ClientReply, ClientError>, oneshot::error::RecvError>,
) -> Result<ClientReply, ClientError> {
    answer.map_err(|_| ClientError::Closed("reader stopped".into()))?
}

/// Hands each answer to the call waiting for it, until the connection
/// ends; then fails every call still waiting, saying why.
async fn read_answers<R: AsyncRead + Unpin>(
    mut rd: R,
    waiters: Waiters,
    gone: Arc<std::sync::OnceLock<String>>,
) {
    let mut buf = Vec::new();
    let why = loop {
        match read_frame(&mut rd, &mut buf, MESSAGE_BYTES_MAX).await {
            Ok(true) => {}
            Ok(false) => break "server closed the connection".to_string(),
            Err(e) => break e.to_string(),
        }
        let resp: ClientResponse = match crate::wire::decode(&buf) {
            Ok(r) => r,
            Err(e) => break format!("malformed response: {e}"),
        };
        let waiter = waiters.lock().as_mut().and_then(|w| w.remove(&resp.id));
        match waiter {
            Some(w) => {
                let _ = w.answer.send(resp.result.map_err(ClientError::Server));
            }
            None if resp.id == 0 => {
                // The server's last word about the connection itself.
                break match resp.result {
                    Err(e) => e.to_string(),
                    Ok(_) => "unexpected response".into(),
                };
            }
            None => {} // the caller timed out
        }
    };
    // Calls made later are told too (a node's last word: why it closed).
    let _ = gone.set(why.clone());
    let waiting = waiters.lock().take().unwrap_or_default();
    for (_, w) in waiting {
        let _ = w.answer.send(Err(ClientError::Closed(why.clone())));
    }
}

/// Fails the calls that waited past their deadline with a timeout, checking
/// every eighth of the timeout (one task per connection, instead of a timer
/// per call). Ends with the connection or the client.
async fn expire(
    waiters: std::sync::Weak<WaiterMap>,
    client: mpsc::WeakSender<Vec<u8>>,
    timeout: Duration,
) {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let mut tick = tokio::time::interval((timeout / 8).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expired = Vec::new();
    loop {
        tick.tick().await;
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        if client.strong_count() == 0 {
            return; // nobody can be waiting
        }
        let mut guard = waiters.lock();
        let Some(map) = guard.as_mut() else { return };
        let now = Instant::now();
        expired.extend(
            map.extract_if(|_, w| w.deadline <= now)
                .map(|(_, w)| w.answer),
        );
        drop(guard);
        for answer in expired.drain(..) {
            let _ = answer.send(Err(ClientError::Timeout(ms)));
        }
    }
}

fn key(partition: &[u8], column: &[u8]) -> WireKey {
    WireKey::new(partition, column)
}

fn expect_value(reply: ClientReply) -> Result<i64, ClientError> {
    match reply {
        ClientReply::Value(v) => Ok(v),
        other => Err(unexpected(&other)),
    }
}

/// The deadline of a lease held for `ttl` from when a node takes it.
fn lease_deadline(ttl: Duration) -> Deadline {
    Deadline::After(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}

fn unexpected(reply: &ClientReply) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_says_whether_a_write_may_have_happened() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        let table = [
            (
                ClientError::Connect {
                    addr,
                    reason: "refused".into(),
                },
                Outcome::NotApplied,
            ),
            (ClientError::Closed("reset".into()), Outcome::Unknown),
            (ClientError::Timeout(5), Outcome::Unknown),
            (ClientError::Protocol("odd".into()), Outcome::Unknown),
            (
                ClientError::Server(WireError::new(ErrorKind::Unavailable, "u")),
                Outcome::NotApplied,
            ),
            (
                ClientError::Server(WireError::new(ErrorKind::Storage, "s")),
                Outcome::Unknown,
            ),
            (
                ClientError::Server(WireError::not_applied(ErrorKind::Storage, "s")),
                Outcome::NotApplied,
            ),
            (
                ClientError::Server(WireError::unknown(ErrorKind::Unavailable, "u")),
                Outcome::Unknown,
            ),
        ];
        for (e, outcome) in table {
            assert_eq!(e.outcome(), outcome, "{e:?}");
        }
    }

    /// A server that answers the hello, then reads requests and never
    /// answers: every call must time out on its own, near the client's
    /// timeout, and say so.
    #[tokio::test]
    async fn a_call_nobody_answers_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.expect("accept");
            let mut buf = Vec::new();
            read_frame(&mut sock, &mut buf, MESSAGE_BYTES_MAX)
                .await
                .expect("a hello");
            let hello: ClientRequest = crate::wire::decode(&buf).expect("a request");
            assert!(matches!(hello.op, ClientOp::Hello { .. }), "{hello:?}");
            let mut frame = Vec::new();
            let result = Ok(ClientReply::Hello {
                version: 2,
                build: "test".into(),
            });
            put_frame(
                &mut frame,
                &ClientResponse {
                    id: hello.id,
                    result,
                },
            );
            tokio::io::AsyncWriteExt::write_all(&mut sock, &frame)
                .await
                .expect("answer the hello");
            let mut sink = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut sock, &mut sink).await;
        });
        let timeout = Duration::from_millis(400);
        let client = Client::connect_with_timeout(addr, timeout)
            .await
            .expect("connect");
        let started = Instant::now();
        let add = || client.add(b"k", b"", 1, Consistency::Quorum);
        let (a, b, c) =
            tokio::time::timeout(timeout * 4, async { tokio::join!(add(), add(), add()) })
                .await
                .expect("the calls never ended");
        for result in [a, b, c] {
            assert!(
                matches!(result, Err(ClientError::Timeout(400))),
                "{result:?}"
            );
        }
        let took = started.elapsed();
        assert!(took >= timeout, "answered after {took:?}");
        assert!(took < timeout * 2, "answered after {took:?}");
        assert_eq!(client.waiters.lock().as_ref().map(HashMap::len), Some(0));
        assert_eq!(client.protocol(), 2);
        drop(client);
        server.await.expect("server");
    }
}
