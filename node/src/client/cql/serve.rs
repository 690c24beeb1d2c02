//! The CQL listener and one task per connection: it reads a frame (the
//! header judged before the body is read), has the handshake say what
//! the request may do, runs it, and writes the answer on the request's
//! stream. Answers go out in the order requests came; drivers match them
//! by stream. The node's client limits hold as on the other ports: the
//! cap on connections and on those not logged in, the login deadline, a
//! request's timeout from its first byte, the idle timeout, the output
//! timeout (answers left untaken), and a login that ends (a user deleted
//! or given a new password) closing it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use tally_net::{Outcome as WireOutcome, WireError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::debug;

use super::ast::Statement;
use super::frame::{self, FLAG_COMPRESSED, HEADER_BYTES, Header, Opcode};
use super::grants;
use super::handshake::{Handshake, Step};
use super::levels;
use super::prepared::PreparedCache;
use super::request::{self, Decoded, Request};
use super::response::{self, CqlError};
use super::run::run;
use super::schema::{self, Change, Keyspace};
use super::system::{Cluster, Host, host_id, schema_version};
use super::work::{Outcome, Session};

use crate::client::accept::{
    Accepted, Anonymous, ClientGate, Listener, accept_loop, login_deadline,
};
use crate::client::server::Doors;
use crate::client::stream::ClientStream;
use crate::cluster::agree::history;
use crate::node::Node;
use crate::security::auth::access::{Need, Role};
use crate::security::auth::{Auth, Login};

/// The reserved partition whose registers are the schema's keyspaces.
const SCHEMA_PARTITION: &[u8] = b"\xff\xffcql-schema";
/// SERIAL, the consistency a schema change is agreed at.
const CONSISTENCY_SERIAL: u16 = 0x0008;

/// Largest request body; a larger one is a protocol error and the
/// connection closes.
const BODY_BYTES_MAX: usize = 1 << 20;

/// How long a node runs statements on rows with the schema it read
/// (counted from when the read began), before it reads it again. A
/// change that empties a table (`TRUNCATE`, `DROP`) is answered this long
/// after it is agreed, so no statement that comes after it, through any
/// node, writes to or reads the table as it was: every node has read the
/// schema again by then.
const SCHEMA_FRESH_FOR: Duration = Duration::from_secs(1);

/// What a client off loopback is told without users, in protected mode.
const PROTECTED: &str = "Tally is running in protected mode: no users are configured, so only \
     clients on loopback addresses are served. Add users under [cluster.auth] (see `tallyd \
     passwd`), or set protected_mode = false.";

/// Serves CQL on `listener` until it fails.
pub(crate) async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    gate: Arc<ClientGate>,
    doors: Doors,
) {
    let shared = Arc::new(Shared::default());
    let l = Listener {
        what: "CQL",
        refusal: CqlError::Overloaded("Too many connections".into()).frame(0),
        refusal_anonymous: CqlError::Overloaded("Too many connections not logged in".into())
            .frame(0),
        protected: CqlError::Unauthorized(PROTECTED.into()).frame(0),
        auth: doors.auth,
        tls: doors.tls,
        handle: move |accepted| connection(accepted, shared.clone()),
    };
    accept_loop(listener, node, gate, l).await
}

/// What a node's connections share: the statements prepared on it, and
/// its view of the cluster as it last read it.
#[derive(Default)]
struct Shared {
    prepared: PreparedCache,
    cluster: Mutex<Option<(Instant, Arc<Cluster>)>>,
}

/// Who sent a statement: the role and user it is served as, and the
/// request's custom payload.
struct Caller<'a> {
    role: Option<Role>,
    user: Option<&'a str>,
    payload: &'a [(String, Vec<u8>)],
}

/// Why a connection ends.
enum End {
    /// The client closed or the connection broke.
    Quiet,
    /// Tell the client on this stream, then close.
    Say(i16, CqlError),
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
}

async fn connection(c: Accepted, shared: Arc<Shared>) {
    let Accepted {
        mut stream,
        node,
        slot: _slot,
        auth,
        anonymous,
    } = c;
    let limits = node.config().cluster.limits.clone();
    let mut conn = Conn {
        peer: stream.peer_addr().ok(),
        handshake: Handshake::new(auth.has_users()),
        login: Login::new(&auth),
        session: Session::default(),
        node,
        auth,
        shared,
        anonymous,
    };
    let end = loop {
        let header = tokio::select! {
            h = read_header(&mut stream, limits.idle_timeout()) => h,
            () = login_deadline(&conn.anonymous) => {
                break End::Say(0, CqlError::Unauthorized(limits.login_timeout_words()));
            }
            () = conn.login.until_revoked() => {
                break End::Say(0, CqlError::Unauthorized(conn.login.revoked_words()));
            }
        };
        let Some(header) = header else {
            break End::Quiet;
        };
        if let Err(r) = header.check(BODY_BYTES_MAX) {
            break End::Say(header.stream, CqlError::Protocol(r.message()));
        }
        let mut body = vec![0; header.length as usize];
        let read = tokio::time::timeout(limits.request_timeout(), stream.read_exact(&mut body));
        if !matches!(read.await, Ok(Ok(_))) {
            break End::Quiet;
        }
        let decoded = match decode(&header, &body) {
            Ok(decoded) => decoded,
            Err(why) => break End::Say(header.stream, CqlError::Protocol(why)),
        };
        let answer = conn.answer(decoded, header.stream).await;
        // A client that leaves its answers untaken is closed.
        let sent = tokio::time::timeout(limits.output_timeout(), stream.write_all(&answer));
        if !matches!(sent.await, Ok(Ok(()))) {
            break End::Quiet;
        }
    };
    if let End::Say(stream_id, e) = end {
        debug!(client = ?conn.peer, error = e.message(), "closing a CQL connection");
        let last_word = async {
            let _ = stream.write_all(&e.frame(stream_id)).await;
            let _ = stream.shutdown().await;
        };
        let _ = tokio::time::timeout(limits.output_timeout(), last_word).await;
    }
}

/// The request a frame holds, or why it holds none: a protocol error.
fn decode(header: &Header, body: &[u8]) -> Result<Decoded, String> {
    match (Opcode::of(header.opcode), header.flags & FLAG_COMPRESSED) {
        (_, c) if c != 0 => Err("a compressed frame, and no compression was agreed".into()),
        (None, _) => Err(format!("unknown opcode {:#04x}", header.opcode)),
        (Some(op), _) => request::decode(op, header.flags, body).map_err(|m| m.0),
    }
}

impl Conn {
    /// The answer frame to `request`, on `stream`, as the handshake says.
    async fn answer(&mut self, decoded: Decoded, stream: i16) -> Vec<u8> {
        let Decoded { request, payload } = decoded;
        match self.handshake.step(&request) {
            Step::Supported(b) => frame::response(stream, Opcode::Supported, 0, &b),
            Step::Ready => frame::response(stream, Opcode::Ready, 0, &[]),
            Step::Authenticate(b) => frame::response(stream, Opcode::Authenticate, 0, &b),
            Step::CheckPassword { user, password } => self.log_in(&user, &password, stream).await,
            Step::Refuse(e) => e.frame(stream),
            Step::Run => {
                let caller = Caller {
                    role: self.login.role(),
                    user: self.login.user(),
                    payload: &payload,
                };
                let answer = statement(
                    &self.node,
                    &mut self.session,
                    &self.shared,
                    request,
                    &caller,
                );
                match answer.await {
                    Ok((op, body)) => frame::response(stream, op, 0, &body),
                    Err(e) => e.frame(stream),
                }
            }
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

/// The next frame's header, or `None` once the client closed, broke the
/// connection, or sent nothing for `idle` (zero: no limit).
async fn read_header(
    stream: &mut ClientStream,
    idle: Option<std::time::Duration>,
) -> Option<Header> {
    let mut bytes = [0u8; HEADER_BYTES];
    let read = stream.read_exact(&mut bytes);
    let done = match idle {
        Some(idle) => tokio::time::timeout(idle, read).await.ok()?,
        None => read.await,
    };
    done.ok()?;
    Some(Header::parse(&bytes))
}

/// A statement's answer: run against this node's view of the cluster,
/// read again from the cluster when the statement needs it as it is now.
async fn statement(
    node: &Node,
    session: &mut Session,
    shared: &Shared,
    request: Request,
    caller: &Caller<'_>,
) -> Result<(Opcode, Vec<u8>), CqlError> {
    // Answered without the cluster's view.
    if let Request::Register(_) = request {
        return Ok((Opcode::Ready, Vec::new()));
    }
    let mut fresh = false;
    loop {
        let cluster = view(node, shared, fresh).await?;
        return match run(&cluster, session, &shared.prepared, &request)? {
            Outcome::Answer(a) => Ok(a),
            Outcome::Refresh if !fresh => {
                fresh = true;
                continue;
            }
            Outcome::Refresh => Err(CqlError::Server(
                "the schema read from the cluster is still not the one needed".into(),
            )),
            Outcome::Schema {
                statement,
                keyspace,
            } => {
                let on = "<all keyspaces>";
                grants::check(caller.role, Need::Admin, caller.user, on)?;
                let done = change_schema(node, statement, keyspace).await;
                *shared.cluster.lock() = None;
                done
            }
            Outcome::Rows(work) => {
                let on = grants::resource(&work);
                grants::check(caller.role, grants::rows_need(&work), caller.user, &on)?;
                let id = levels::op_id(caller.payload)?;
                super::exec::run(node, work, id).await
            }
        };
    }
}

/// This node's view of the cluster: read now if `fresh`, else as read
/// less than [`SCHEMA_FRESH_FOR`] ago.
async fn view(node: &Node, shared: &Shared, fresh: bool) -> Result<Arc<Cluster>, CqlError> {
    if !fresh {
        let kept = shared.cluster.lock().clone();
        if let Some((_, cluster)) = kept.filter(|(at, _)| at.elapsed() < SCHEMA_FRESH_FOR) {
            return Ok(cluster);
        }
    }
    // Kept from when the read began: it holds the schema of some moment
    // after that (see `SCHEMA_FRESH_FOR`).
    let began = Instant::now();
    let read = Arc::new(cluster(node).await?);
    let kept = Cluster {
        fresh: false,
        ..(*read).clone()
    };
    *shared.cluster.lock() = Some((began, Arc::new(kept)));
    Ok(read)
}

/// Agrees on a schema change with the cluster (`schema::apply` worked
/// out from the catalog the round reads); answers its RESULT.
async fn change_schema(
    node: &Node,
    statement: Statement,
    keyspace: Option<String>,
) -> Result<(Opcode, Vec<u8>), CqlError> {
    let rf = node.config().cluster.replication_factor;
    let id = fresh_id()?;
    let done = node
        .agree(SCHEMA_PARTITION, move |registers, _now| {
            let catalog = match schema::catalog_of(registers, history::COLUMN) {
                Ok(c) => c,
                Err(m) => return Ok((registers.clone(), Err(CqlError::Server(m.0)))),
            };
            Ok(
                match schema::apply(&statement, &catalog, keyspace.as_deref(), rf, id) {
                    Ok(change) => (schema::registers_after(registers, &change), Ok(change)),
                    Err(e) => (registers.clone(), Err(e)),
                },
            )
        })
        .await
        .map_err(|e| from_wire(&e))??;
    if schema::empties(&done) {
        // No node runs a statement with the schema from before it once it
        // is answered.
        tokio::time::sleep(SCHEMA_FRESH_FOR).await;
    }
    let body = match done {
        Change::None | Change::Truncate(_) => response::void(),
        Change::Put(_, change) | Change::Drop(_, change) => change.result(),
    };
    Ok((Opcode::Result, body))
}

/// A new table's id: random, so that a table dropped and made again
/// starts empty.
fn fresh_id() -> Result<[u8; 16], CqlError> {
    let mut id = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id)
        .map_err(|_| CqlError::Server("no randomness for a table id".into()))?;
    Ok(id)
}

/// A node's error as CQL says it: one that certainly left nothing
/// applied is a server error (a driver may send it elsewhere); one whose
/// outcome is unknown is a write timeout (a driver does not replay it).
fn from_wire(e: &WireError) -> CqlError {
    match e.outcome {
        WireOutcome::NotApplied => CqlError::Server(e.message.clone()),
        WireOutcome::Unknown => CqlError::WriteTimeout {
            message: e.message.clone(),
            consistency: CONSISTENCY_SERIAL,
            received: 0,
            block_for: 1,
            write_type: "CAS",
        },
    }
}

/// The catalog of the cluster's schema as it is now, read linearizably.
async fn catalog(node: &Node) -> Result<Vec<Keyspace>, CqlError> {
    let registers = node
        .read_registers(SCHEMA_PARTITION)
        .await
        .map_err(|e| CqlError::Server(format!("the schema could not be read: {}", e.message)))?;
    schema::catalog_of(&registers, history::COLUMN).map_err(|m| CqlError::Server(m.0))
}

/// This node's view of the cluster, as drivers read it: every member with
/// a CQL listener, its tokens from the ring this node routes by, and the
/// schema.
async fn cluster(node: &Node) -> Result<Cluster, CqlError> {
    let catalog = catalog(node).await?;
    let config = node.config();
    let ring = node.ring();
    let host = |n: usize| {
        let c = &config.nodes[n];
        c.cql.map(|addr| Host {
            host_id: host_id(&c.id),
            address: addr.ip(),
            tokens: ring.tokens_of(n),
        })
    };
    let me = node.me();
    let local = host(me).expect("a node serving CQL has a CQL address");
    // Members only: a node out of the ring has no tokens.
    let peers = (0..config.nodes.len())
        .filter(|&n| n != me)
        .filter_map(host)
        .filter(|h| !h.tokens.is_empty())
        .collect();
    Ok(Cluster {
        name: config.cluster.name.clone(),
        local,
        peers,
        schema_version: schema_version(&catalog),
        catalog,
        replication_factor: config.cluster.replication_factor,
        fresh: true,
    })
}
