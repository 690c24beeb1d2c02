//! One task per CQL connection. Drivers keep many statements in flight
//! on one connection, each on its own stream, and match answers by
//! stream: so the task reads frames as they come ([`Inbox`]), answers in
//! order what the connection itself decides (the handshake, `USE`,
//! PREPARE, the system tables), and runs statements that need the
//! cluster (rows, schema changes) at once, writing each answer as it is
//! done, at most [`IN_FLIGHT_MAX`] of them; past that it reads no more
//! until one is done.
//!
//! The node's client limits hold as on the other ports: the login
//! deadline, a request's timeout from its first byte, the idle timeout
//! (nothing read and nothing in flight), the output timeout (answers left
//! untaken), and a login that ends (a user deleted or given a new
//! password) closing the connection.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tally_world::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tracing::debug;

use super::ast::Statement;
use super::compress;
use super::events::Event;
use super::frame::{self, FLAG_COMPRESSED, Header, Opcode};
use super::grants;
use super::handshake::{Handshake, Step};
use super::inbox::{Inbox, Next};
use super::levels;
use super::request::{self, Decoded, Request};
use super::response::{self, CqlError};
use super::run::run;
use super::shared::{Shared, change_schema, view};
use super::strict;
use super::work::{Outcome, Session};
use crate::client::accept::{Accepted, Anonymous, login_deadline};
use crate::client::stream::ClientStream;
use crate::node::Node;
use crate::security::auth::access::Need;
use crate::security::auth::{Auth, Login};

/// Largest request body; a larger one is a protocol error and the
/// connection closes.
const BODY_BYTES_MAX: usize = 1 << 20;
/// Most statements one connection runs at once.
const IN_FLIGHT_MAX: usize = 1024;
/// Room made in the read buffer before each read: a read takes what
/// came, many frames at once.
const READ_ROOM: usize = 16 << 10;

/// An answer being worked out with the cluster (`None`: a test seam
/// lost it).
type Pending = Pin<Box<dyn Future<Output = Option<Result<(Opcode, Vec<u8>), CqlError>>> + Send>>;

/// What a statement comes to.
enum Work {
    /// Its answer.
    Answer(Opcode, Vec<u8>),
    /// Its answer, once the cluster has answered.
    Later(Pending),
}

fn later(
    answer: impl Future<Output = Result<(Opcode, Vec<u8>), CqlError>> + Send + 'static,
) -> Work {
    Work::Later(Box::pin(async move { Some(answer.await) }))
}

/// What a request comes to.
enum Reply {
    /// Its answer frame.
    Now(Vec<u8>),
    /// Its answer frame, once the cluster has answered (`None`: a test
    /// seam lost it, and the connection closes).
    Later(Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>),
}

/// Why a connection ends.
enum End {
    /// The client closed or the connection broke.
    Quiet,
    /// Tell the client on this stream, then close.
    Say(i16, CqlError),
}

/// What the connection waited for.
enum Waited {
    Read(std::io::Result<usize>),
    Done(Option<Vec<u8>>),
    Pushed(Option<Event>),
    Ended(End),
}

/// The next event of `events`, `None` if some were missed; never, when
/// the connection registered for none.
async fn pushed(events: &mut Option<(Vec<String>, broadcast::Receiver<Event>)>) -> Option<Event> {
    match events {
        Some((_, rx)) => rx.recv().await.ok(),
        None => std::future::pending().await,
    }
}

/// A connection's state between its requests.
struct Conn {
    node: Arc<Node>,
    auth: Arc<Auth>,
    shared: Arc<Shared>,
    peer: Option<SocketAddr>,
    handshake: Handshake,
    login: Login,
    session: Session,
    /// Its place among those not logged in, until it logs in.
    anonymous: Option<Anonymous>,
    /// The events it registered for, and where they come.
    events: Option<(Vec<String>, broadcast::Receiver<Event>)>,
}

pub(crate) async fn connection(c: Accepted, shared: Arc<Shared>) {
    let Accepted {
        mut stream,
        node,
        slot: _slot,
        auth,
        anonymous,
    } = c;
    let mut conn = Conn {
        peer: stream.peer_addr().ok(),
        handshake: Handshake::new(auth.has_users()),
        login: Login::new(&auth),
        session: Session::default(),
        node,
        auth,
        shared,
        anonymous,
        events: None,
    };
    let end = conn.serve(&mut stream).await;
    if let End::Say(stream_id, e) = end {
        debug!(client = ?conn.peer, error = e.message(), "closing a CQL connection");
        let last_word = async {
            let _ = stream.write_all(&e.frame(stream_id)).await;
            let _ = stream.shutdown().await;
        };
        let output = conn.node.config().cluster.limits.output_timeout();
        let _ = tokio::time::timeout(output, last_word).await;
    }
}

/// When a wait of `limit` from `since` ends, if there is one.
fn deadline(since: Option<Instant>, limit: Option<Duration>) -> Option<tally_world::Instant> {
    Some(since? + limit?)
}

/// The earlier of two deadlines, if either is.
fn earliest(
    a: Option<tally_world::Instant>,
    b: Option<tally_world::Instant>,
) -> Option<tally_world::Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Writes `frame`, unless the client leaves it untaken for `limit`;
/// answers whether it went.
async fn send(stream: &mut ClientStream, frame: &[u8], limit: Duration) -> bool {
    let sent = tokio::time::timeout(limit, stream.write_all(frame));
    matches!(sent.await, Ok(Ok(())))
}

/// The request a frame holds (its body decompressed if it is and `lz4`
/// was agreed), or why it holds none: a protocol error.
fn decode(header: &Header, body: Vec<u8>, lz4: bool) -> Result<Decoded, String> {
    let body = match (header.flags & FLAG_COMPRESSED != 0, lz4) {
        (false, _) => body,
        (true, true) => compress::decompress(&body, BODY_BYTES_MAX)?,
        (true, false) => return Err("a compressed frame, and no compression was agreed".into()),
    };
    match Opcode::of(header.opcode) {
        None => Err(format!("unknown opcode {:#04x}", header.opcode)),
        Some(op) => request::decode(op, header.flags, &body).map_err(|m| m.0),
    }
}

/// Sleeps until `at`, or forever.
async fn until(at: Option<tally_world::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Conn {
    /// Serves the connection until it ends; answers why.
    async fn serve(&mut self, stream: &mut ClientStream) -> End {
        let limits = self.node.config().cluster.limits.clone();
        let mut inbox = Inbox::default();
        let mut in_flight: JoinSet<Option<Vec<u8>>> = JoinSet::new();
        let mut last_read = Instant::now();
        // Answers ready, written together before the next wait.
        let mut out: Vec<u8> = Vec::new();
        loop {
            if let Err(end) = self.take(&mut inbox, &mut in_flight, &mut out).await {
                return end;
            }
            while let Some(done) = in_flight.try_join_next() {
                // A statement's task panicked (its stream has no answer),
                // or a test seam dropped its answer.
                let Ok(Some(frame)) = done else {
                    return End::Quiet;
                };
                out.extend_from_slice(&self.outgoing(frame));
            }
            if !out.is_empty() {
                if !send(stream, &out, limits.output_timeout()).await {
                    return End::Quiet;
                }
                out.clear();
            }
            if inbox.buffer().capacity() - inbox.buffer().len() < READ_ROOM / 4 {
                inbox.buffer().reserve(READ_ROOM);
            }
            let reading = in_flight.len() < IN_FLIGHT_MAX;
            let idle = match in_flight.is_empty() && inbox.begun().is_none() {
                true => deadline(Some(last_read), limits.idle_timeout()),
                false => None,
            };
            let partial = deadline(inbox.begun(), Some(limits.request_timeout()));
            let waited = tokio::select! {
                n = stream.read_buf(inbox.buffer()), if reading => Waited::Read(n),
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    Waited::Done(done.ok().flatten())
                }
                e = pushed(&mut self.events) => Waited::Pushed(e),
                () = until(earliest(idle, partial)) => Waited::Ended(End::Quiet),
                () = login_deadline(&self.anonymous) => Waited::Ended(End::Say(
                    0,
                    CqlError::Unauthorized(limits.login_timeout_words()),
                )),
                () = self.login.until_revoked() => Waited::Ended(End::Say(
                    0,
                    CqlError::Unauthorized(self.login.revoked_words()),
                )),
            };
            match waited {
                Waited::Read(Ok(0) | Err(_)) => return End::Quiet,
                Waited::Read(Ok(_)) => {
                    last_read = Instant::now();
                    inbox.read_at(last_read);
                }
                Waited::Done(None) => return End::Quiet,
                Waited::Done(Some(frame)) => out.extend_from_slice(&self.outgoing(frame)),
                Waited::Pushed(Some(e)) => {
                    if self
                        .events
                        .as_ref()
                        .is_some_and(|(kinds, _)| kinds.iter().any(|k| k == e.kind()))
                    {
                        out.extend_from_slice(&self.outgoing(e.frame()));
                    }
                }
                Waited::Pushed(None) => {}
                Waited::Ended(end) => return end,
            }
        }
    }

    /// Answers every whole frame `inbox` holds, or sets it going in
    /// `in_flight` (until that is full), the answers ready put in `out`;
    /// a frame that ends the connection answers why.
    async fn take(
        &mut self,
        inbox: &mut Inbox,
        in_flight: &mut JoinSet<Option<Vec<u8>>>,
        out: &mut Vec<u8>,
    ) -> Result<(), End> {
        while in_flight.len() < IN_FLIGHT_MAX {
            let (header, body) = match inbox.next(BODY_BYTES_MAX) {
                Next::More => break,
                Next::Refused(h, r) => {
                    return Err(End::Say(h.stream, CqlError::Protocol(r.message())));
                }
                Next::Frame(h, body) => (h, body),
            };
            let decoded = decode(&header, body, self.handshake.lz4())
                .map_err(|why| End::Say(header.stream, CqlError::Protocol(why)))?;
            match self.answer(decoded, header.stream).await {
                Reply::Now(frame) => out.extend_from_slice(&self.outgoing(frame)),
                Reply::Later(pending) => {
                    in_flight.spawn(pending);
                }
            }
        }
        Ok(())
    }

    /// A response frame as it goes out: compressed if LZ4 was agreed and
    /// it gains.
    fn outgoing(&self, frame: Vec<u8>) -> Vec<u8> {
        match self.handshake.lz4() {
            true => compress::squeeze(frame),
            false => frame,
        }
    }

    /// What `request` on `stream` comes to, as the handshake says.
    async fn answer(&mut self, decoded: Decoded, stream: i16) -> Reply {
        let Decoded { request, payload } = decoded;
        let now = |op, body: &[u8]| Reply::Now(frame::response(stream, op, 0, body));
        match self.handshake.step(&request) {
            Step::Supported(b) => now(Opcode::Supported, &b),
            Step::Ready => now(Opcode::Ready, &[]),
            Step::Authenticate(b) => now(Opcode::Authenticate, &b),
            Step::CheckPassword { user, password } => {
                Reply::Now(self.log_in(&user, &password, stream).await)
            }
            Step::Refuse(e) => Reply::Now(e.frame(stream)),
            Step::Run => match self.statement(request, payload).await {
                Ok(Work::Answer(op, body)) => now(op, &body),
                Ok(Work::Later(answer)) => Reply::Later(Box::pin(async move {
                    Some(match answer.await? {
                        Ok((op, body)) => frame::response(stream, op, 0, &body),
                        Err(e) => e.frame(stream),
                    })
                })),
                Err(e) => Reply::Now(e.frame(stream)),
            },
        }
    }

    /// A statement: answered now from this node's view of the cluster
    /// (read again when the statement needs it as it is now), or run
    /// against the cluster.
    async fn statement(
        &mut self,
        request: Request,
        payload: Vec<(String, Vec<u8>)>,
    ) -> Result<Work, CqlError> {
        // Answered without the cluster's view.
        if let Request::Register(kinds) = request {
            self.events = Some((kinds, self.shared.events.subscribe()));
            return Ok(Work::Answer(Opcode::Ready, Vec::new()));
        }
        let (role, user) = (self.login.role(), self.login.user().map(str::to_string));
        let mut fresh = false;
        let outcome = loop {
            let cluster = view(&self.node, &self.shared, fresh).await?;
            match run(&cluster, &mut self.session, &self.shared.prepared, &request)? {
                Outcome::Refresh if !fresh => fresh = true,
                other => break other,
            }
        };
        let (node, shared) = (self.node.clone(), self.shared.clone());
        match outcome {
            Outcome::Answer((op, body)) => Ok(Work::Answer(op, body)),
            Outcome::Refresh => Err(CqlError::Server(
                "the schema read from the cluster is still not the one needed".into(),
            )),
            Outcome::Schema {
                statement,
                keyspace,
            } => {
                grants::check(role, Need::Admin, user.as_deref(), "<all keyspaces>")?;
                self.check_strict(&statement)?;
                Ok(later(async move {
                    let done = change_schema(&node, *statement, keyspace).await;
                    shared.forget();
                    done
                }))
            }
            Outcome::Rows(work) => {
                let on = grants::resource(&work);
                grants::check(role, grants::rows_need(&work), user.as_deref(), &on)?;
                for part in work.parts.iter().filter(|p| p.table.is_counter()) {
                    self.check_strict(&part.statement)?;
                }
                let id = levels::op_id(&payload)?.filter(|_| !self.node.cql_ignores_ids());
                let writes = grants::rows_need(&work) == Need::Write;
                Ok(Work::Later(Box::pin(async move {
                    let done = super::exec::run(&node, work, id).await;
                    // A test seam: the answer lost with the connection.
                    let lost = writes && done.is_ok() && node.drops_cql_answer();
                    (!lost).then_some(done)
                })))
            }
        }
    }

    /// Refuses what Cassandra refuses, when the cluster says to be strict.
    fn check_strict(&self, statement: &Statement) -> Result<(), CqlError> {
        match self.node.config().cluster.cql.strict {
            true => strict::refusal(statement).map_or(Ok(()), Err),
            false => Ok(()),
        }
    }

    /// Checks a SASL PLAIN login (after the penalty of a wrong password,
    /// as every port does); answers AUTH_SUCCESS or the error.
    async fn log_in(&mut self, user: &[u8], password: &[u8], stream: i16) -> Vec<u8> {
        let user = String::from_utf8_lossy(user);
        let password = String::from_utf8_lossy(password);
        if !self
            .login
            .login(&self.auth, &user, &password, self.peer)
            .await
        {
            let e =
                CqlError::BadCredentials("Provided username and/or password are incorrect".into());
            return e.frame(stream);
        }
        self.handshake.logged_in();
        self.anonymous = None;
        frame::response(stream, Opcode::AuthSuccess, 0, &response::auth_success())
    }
}
