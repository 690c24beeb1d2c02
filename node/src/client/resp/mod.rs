//! The RESP listener: Tally through any Redis client, in RESP2 or RESP3.
//!
//! A plain key is the counter `(partition = key, column = "")`; a hash is a
//! partition and its fields are columns, so `HGETALL` reads a whole row.
//! Every command runs through this node as coordinator, at the
//! connection's consistency level (QUORUM unless `CLIENT CONSISTENCY`
//! changed it).
//!
//! | command | does |
//! |---|---|
//! | `INCR k`, `INCRBY k n`, `DECR k`, `DECRBY k n` | add; answers the new value |
//! | `GET k`, `MGET k...` | read; nil for a counter never written (or reset) |
//! | `DEL k...`, `UNLINK k...` | delete keys of every kind (reset each column); answers how many held anything |
//! | `EXISTS k...`, `TYPE k` | how many hold anything; what one holds (`generic`) |
//! | `HINCRBY k f n`, `HGET k f`, `HGETALL k`, `HDEL k f...` | the same on columns |
//! | `SADD`, `SCARD`, `SISMEMBER`, `SMISMEMBER`, `PFADD`, `PFCOUNT` | unique counters (`sets`) |
//! | `TALLY.INCRBY`, `TALLY.HINCRBY` | adds with operation ids (`tally`) |
//! | `MULTI`, `EXEC`, `DISCARD` | queued commands run in order, without isolation (`session`) |
//! | `SELECT 0..15` | the connection's database: every key is put in its keyspace (`db`) |
//! | `SCAN`, `KEYS`, `DBSIZE`, `RANDOMKEY`, `HSCAN`, `FLUSHDB`, `FLUSHALL` | listing and emptying databases, cluster-wide (`keys`, `cursors`, `glob`) |
//! | `EVAL`, `EVALSHA`, `EVAL_RO`, `EVALSHA_RO`, `SCRIPT` | Lua 5.1 scripts, without isolation (`script`) |
//! | `HELLO`, `AUTH`, `CLIENT`, `INFO`, `COMMAND`, `TIME`, `PING`, ... | what clients and tools expect (`admin`) |
//!
//! Requests are RESP arrays of bulk strings or inline commands, pipelined or
//! not (`proto`), each parsed once into a typed command (`command`) that
//! every path runs: authorized by one rule (`access::authorize`), then
//! answered by the one module its entry in the command table names
//! (`base::commands`). A pipeline's commands on distinct keys run at once and
//! share the node's batches (`pipeline`, `group`: its adds go to the write
//! queue straight away); they are answered in order, and
//! commands on one key keep their order, as Redis runs them, so `INCR a`
//! then `GET a` in one pipeline sees the add. Unknown commands, wrong arity and non-integers
//! get Redis' own `-ERR` texts; a protocol error gets `-ERR Protocol
//! error: ...` and the connection is closed, like Redis.
//!
//! Where the node has users, a connection must log in (`AUTH`, or
//! `HELLO ... AUTH`) before any other command, and then runs what its
//! role allows (`login`, `crate::security::auth`), alike alone, in a
//! pipeline, in a transaction (as queued and as `EXEC` runs it) and in a
//! script; the port may speak only TLS.
//!
//! A connection over the node's cap is told `-ERR max number of clients
//! reached` and closed, as Redis does (see `accept`). Replies pile up in
//! the connection's output buffer while a pipeline runs; past the soft
//! output bound they are written before the next command runs, so a client
//! that does not read them stops being served (backpressure) instead of
//! growing the buffer, and its connection closes after the output timeout.
//! A request must be complete within the request timeout of its first
//! byte, and an idle connection may be closed (see `limits`).

mod admin;
mod blocking;
mod cas;
mod command;
mod copy;
mod counters;
mod cql_rows;
mod cursors;
mod db;
mod expiry;
mod floats;
mod generic;
mod glob;
mod group;
mod hashes;
mod keys;
mod lists;
mod login;
mod lua;
mod pipeline;
pub mod proto;
mod queued;
mod registers;
mod script;
mod session;
mod sets;
mod shared;
mod strings;
mod tally;
mod text;
mod turns;
mod zsets;

use std::net::SocketAddr;
use std::sync::Arc;

use tally_net::wire::Consistency;
use tally_world::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::debug;

use crate::base::commands::{self, Handler};
use crate::base::keyspace::Keyspace;
use crate::client::accept::Doors;
use crate::client::accept::{
    Accepted, Anonymous, ClientGate, ClientSlot, Closing, Listener, accept_loop, closing,
    until_closing,
};
use crate::client::stream::ClientStream;
use crate::config::limits::Limits;
use crate::node::Node;
use crate::security::auth::{Auth, Login, access};
use command::{Cmd, Op};
pub use proto::{Proto, Reply, parse};
use session::{Session, Step};

/// Largest request that may sit unparsed in a connection's buffer.
const BUFFER_BYTES_MAX: usize = 1 << 20;
/// Most commands parsed out of the buffer at a time.
const PARSED_MAX: usize = 1024;

/// Accepts RESP connections until the listener fails, at most as many at
/// once as `gate` allows.
pub async fn serve(listener: TcpListener, node: Arc<Node>, gate: Arc<ClientGate>, doors: Doors) {
    let port = Port::new(&node);
    let l = Listener {
        what: "RESP",
        refusal: b"-ERR max number of clients reached\r\n".to_vec(),
        refusal_anonymous: b"-ERR max number of clients not logged in reached\r\n".to_vec(),
        protected: PROTECTED.to_vec(),
        auth: doors.auth,
        tls: doors.tls,
        handle: move |accepted| port.clone().connection(accepted),
    };
    accept_loop(listener, node, gate, l).await
}

/// What a node's RESP connections share: the budget of their queued
/// transactions and the RESP state (cursors, connection ids).
#[derive(Clone)]
pub(crate) struct Port {
    budget: Arc<queued::Budget>,
    shared: Arc<shared::Shared>,
}

impl Port {
    /// The shared state of `node`'s RESP connections.
    pub(crate) fn new(node: &Node) -> Port {
        let limits = &node.config().cluster.limits;
        Port {
            budget: queued::Budget::new(limits.multi_bytes_max, limits.multi_node_bytes_max),
            shared: shared::Shared::new(),
        }
    }

    /// Serves one accepted connection until it closes.
    pub(crate) async fn connection(self, accepted: Accepted) {
        connection(accepted, self.budget, self.shared).await
    }
}

/// What a client off loopback is told without users, in protected mode.
const PROTECTED: &[u8] = b"-DENIED Tally is running in protected mode: no users are configured, \
    so only clients on loopback addresses are served. Add users under [cluster.auth] \
    (see `tallyd passwd`), or set protected_mode = false.\r\n";

/// A connection's own parts: its place under the cap, the node's users,
/// the client's address.
struct Conn {
    slot: ClientSlot,
    auth: Arc<Auth>,
    peer: Option<SocketAddr>,
}

async fn connection(c: Accepted, budget: Arc<queued::Budget>, shared: Arc<shared::Shared>) {
    let Accepted {
        stream,
        node,
        slot,
        auth,
        mut anonymous,
    } = c;
    let limits = node.config().cluster.limits.clone();
    let peer = stream.peer_addr().ok();
    let addrs = (
        peer.map(|a| a.to_string()).unwrap_or_default(),
        stream
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default(),
    );
    // Reads and writes take turns here: the stream is not split.
    let mut stream = stream;
    let mut session = Session::new(addrs, Login::new(&auth), budget, shared);
    let conn = Conn { slot, auth, peer };
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out = Vec::new();
    // When the first byte of the unfinished request at the end of `buf` came.
    let mut partial_since = None;
    loop {
        let (mut cmds, used, bad) = parse_all(&buf, node.metrics());
        buf.drain(..used);
        let mut close = false;
        let mut i = 0;
        while i < cmds.len() && !close {
            if let Some(c) = closing(&session.login, &mut anonymous, Instant::now()) {
                return last_word(&mut stream, &mut out, &session, &limits, c).await;
            }
            let (ran, quit) = step(&node, &conn, &mut session, &mut cmds[i..], &mut out).await;
            i += ran;
            close = quit;
            // Replies the client has not taken stop the pipeline here
            // until it does: no more commands run for it.
            if out.len() >= limits.output_soft_bytes && !send(&mut stream, &mut out, &limits).await
            {
                debug!(client = ?peer, "RESP client left its replies untaken");
                return;
            }
        }
        if let (Some(e), false) = (bad, close) {
            debug!(client = ?peer, error = %e, "RESP protocol error");
            Reply::err(format!("ERR Protocol error: {e}")).encode(&mut out, session.proto);
            close = true;
        }
        if !out.is_empty() && !send(&mut stream, &mut out, &limits).await {
            return;
        }
        if close {
            let _ = stream.shutdown().await;
            return;
        }
        if cmds.len() == PARSED_MAX {
            continue; // more may be waiting in `buf`, whole
        }
        if buf.len() > BUFFER_BYTES_MAX {
            return;
        }
        partial_since = match (buf.is_empty(), used) {
            (true, _) => None,
            // What is left began with the last read.
            (false, 1..) => Some(Instant::now()),
            (false, 0) => partial_since.or_else(|| Some(Instant::now())),
        };
        let read = read_or_close(
            (&mut stream, &mut buf),
            &limits,
            partial_since,
            &session.login,
            &mut anonymous,
        )
        .await;
        let read = match read {
            Ok(read) => read,
            Err(c) => return last_word(&mut stream, &mut out, &session, &limits, c).await,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Runs the next of `cmds`, or the next ones together, encoding their
/// replies into `out`; answers how many ran and whether the connection
/// closes after them.
async fn step(
    node: &Arc<Node>,
    conn: &Conn,
    session: &mut Session,
    cmds: &mut [Cmd],
    out: &mut Vec<u8>,
) -> (usize, bool) {
    // The group holds only commands the login may run (`authorize`, as
    // everywhere); the first it may not ends the group and is refused by
    // `run`, in its place. A keyed command alone takes the group's path
    // too: an add goes straight to the write queue.
    let together = if session.in_multi() {
        0
    } else {
        let role = session.login.role();
        pipeline::together(cmds, |c| {
            access::authorize(role, c.command(), c.rest()).is_ok()
        })
    };
    if together >= 1 {
        let (cl, space) = (session.cl, node.keyspace(session.db));
        let group = &cmds[..together];
        for reply in group::run(node, cl, space, session.login.user(), group).await {
            reply.encode(out, session.proto);
        }
        return (together, false);
    }
    let cmd = cmds[0].take();
    let (reply, quit) = run(node, conn, session, cmd).await;
    reply.encode(out, session.proto);
    (1, quit)
}

/// Closes a connection after the replies it has and a word why: its user
/// was deleted or given a new password, or it did not log in in time.
async fn last_word(
    stream: &mut ClientStream,
    out: &mut Vec<u8>,
    s: &Session,
    limits: &Limits,
    c: Closing,
) {
    let why = c.words(&s.login, limits);
    debug!(user = s.login.user(), why, "closing a RESP connection");
    Reply::err(format!("ERR {why}")).encode(out, s.proto);
    if send(stream, out, limits).await {
        let _ = stream.shutdown().await;
    }
}

/// A pipeline's commands: the complete ones at the front of `buf`, at most
/// [`PARSED_MAX`], each parsed once ([`Cmd::parse`]) and counted in the
/// node's `metrics`, the bytes they used, and the protocol error that ends
/// them, if one does.
fn parse_all(
    buf: &[u8],
    metrics: &crate::base::registry::Registry,
) -> (Vec<Cmd>, usize, Option<String>) {
    let mut cmds = Vec::new();
    let mut used = 0;
    while cmds.len() < PARSED_MAX {
        match parse(&buf[used..]) {
            Ok(Some((args, n))) => {
                used += n;
                if !args.is_empty() {
                    let cmd = Cmd::parse(args);
                    metrics.resp_command_at(cmd.id());
                    cmds.push(cmd);
                }
            }
            Ok(None) => break,
            Err(e) => return (cmds, used, Some(e)),
        }
    }
    (cmds, used, None)
}

/// Runs a keyed command (one that `pipeline` let run beside others, too,
/// and a script's) of `user` (whose operation ids it names; `None`
/// without users) on its keys in `space`: an add or a read of one key as
/// parsed, anything else by the one module its table entry names, with
/// its keys as stored.
async fn keyed_as(
    node: &Arc<Node>,
    cl: Consistency,
    space: Keyspace,
    user: Option<&str>,
    cmd: &Cmd,
) -> Reply {
    let Some(c) = cmd.command() else {
        return command::unknown(&cmd.words);
    };
    if cql_rows::names_one(c, &cmd.words) {
        return cql_rows::answer(node, cl, c, &cmd.words).await;
    }
    match cmd.op {
        Op::Arity => session::arity(c.name),
        Op::Add { column, delta } => {
            if let Some(reply) = counters::serial_add(node, cl, space, cmd).await {
                return reply;
            }
            match counters::queue_add(node, cl, space, cmd, column, delta) {
                Ok(queued) => counters::answer(node, (cl, space), cmd, queued).await,
                Err(refused) => refused,
            }
        }
        Op::Get { column } => match counters::key_of(space, cmd, column) {
            Ok((partition, column)) => counters::get(node, cl, &partition, column).await,
            Err(refused) => refused,
        },
        Op::MGet => counters::mget(node, cl, space, cmd.rest()).await,
        Op::SAdd => sets::sadd(node, cl, space, &cmd.words[1], &cmd.words[2..]).await,
        Op::Words | Op::Unknown => by_handler(node, (cl, space), user, c, cmd).await,
    }
}

/// Runs the keyed command `cmd` (whose table entry is `c`) by the module
/// its entry names, with its keys as stored in `space`.
async fn by_handler(
    node: &Arc<Node>,
    (cl, space): (Consistency, Keyspace),
    user: Option<&str>,
    c: &'static commands::Command,
    cmd: &Cmd,
) -> Reply {
    let args = match db::in_keyspace(c, &cmd.words, space) {
        Ok(args) => args,
        Err(e) => return e,
    };
    let (name, rest) = (c.name, &args[1..]);
    let reply = match c.handler {
        Handler::Counters => counters::execute(name),
        Handler::Generic => generic::execute(node, cl, name, rest).await,
        Handler::Strings => strings::execute(node, cl, name, rest).await,
        Handler::Expiry => expiry::execute(node, cl, name, rest).await,
        Handler::Text => text::execute(node, cl, name, rest).await,
        Handler::Compare => cas::execute(node, cl, name, rest).await,
        Handler::Blocking => blocking::execute(node, cl, name, rest).await,
        Handler::Sets => sets::execute(node, cl, name, rest).await,
        Handler::Hashes => hashes::execute(node, cl, name, rest).await,
        Handler::Copy => copy::execute(node, cl, name, rest).await,
        Handler::ZSets => zsets::execute(node, cl, name, rest).await,
        Handler::Lists => lists::execute(node, cl, name, rest).await,
        Handler::Tally => tally::execute(node, cl, user, name, rest).await,
        Handler::KeysKeyed => keys::keyed(node, cl, name, rest).await,
        // Not keyed: here only from a script, or with arguments its own
        // module refused (MULTI with arguments, say).
        Handler::Keys
        | Handler::Admin
        | Handler::Quit
        | Handler::Auth
        | Handler::Hello
        | Handler::Session
        | Handler::Script => None,
    };
    reply.unwrap_or_else(|| session::arity(name))
}

/// Runs one command as the session's transaction state says: now, queued,
/// or a whole `EXEC`. The flag asks to close the connection after the reply.
async fn run(node: &Arc<Node>, conn: &Conn, session: &mut Session, cmd: Cmd) -> (Reply, bool) {
    if let Some(refused) = refusal(session, &cmd) {
        session.refused();
        return (refused, false);
    }
    match session.step(cmd) {
        Step::Answer(reply) => (reply, false),
        Step::Run(cmd) => execute(node, conn, session, &cmd).await,
        Step::Exec(queued) => {
            let mut replies = Vec::with_capacity(queued.len());
            for cmd in queued {
                // Asked again as it runs: the login's role may have changed.
                let reply = match refusal(session, &cmd) {
                    Some(refused) => refused,
                    None => execute(node, conn, session, &cmd).await.0,
                };
                replies.push(reply);
            }
            (Reply::Array(replies), false)
        }
    }
}

/// What the connection is told instead of running `cmd`, if its login may
/// not run it ([`access::authorize`]).
fn refusal(session: &Session, cmd: &Cmd) -> Option<Reply> {
    let rest = cmd.rest();
    let refused = session.login.authorize(cmd.command(), rest).err()?;
    let name = cmd.name().map_or_else(
        || String::from_utf8_lossy(&cmd.words[0]).to_ascii_lowercase(),
        |n| access::acl_name(n, rest),
    );
    Some(login::refusal(refused, session, &name))
}

/// Runs one command now, in the module its table entry names; the flag
/// asks to close the connection after the reply.
async fn execute(node: &Arc<Node>, conn: &Conn, session: &mut Session, cmd: &Cmd) -> (Reply, bool) {
    let (auth, peer) = (&conn.auth, conn.peer);
    let (Some(c), false) = (cmd.command(), cmd.op == Op::Arity) else {
        let space = node.keyspace(session.db);
        let user = session.login.user();
        return (keyed_as(node, session.cl, space, user, cmd).await, false);
    };
    let (name, args) = (c.name, cmd.words.as_slice());
    let reply = match c.handler {
        Handler::Quit => return (Reply::Simple("OK"), true),
        Handler::Auth => Some(login::auth(auth, session, &args[1..], peer).await),
        Handler::Hello => match login::hello(auth, session, &args[1..], peer).await {
            Err(refused) => Some(refused),
            Ok(()) => admin::execute(node, &conn.slot, session, name, args),
        },
        Handler::Admin => admin::execute(node, &conn.slot, session, name, args),
        Handler::Script => script::execute(node, session, name, args).await,
        Handler::Keys => keys::execute(node, session, name, args).await,
        _ => {
            let space = node.keyspace(session.db);
            let user = session.login.user();
            Some(keyed_as(node, session.cl, space, user, cmd).await)
        }
    };
    (reply.unwrap_or_else(|| session::arity(name)), false)
}

/// Writes and clears `out`; false if the client did not take it within
/// the output timeout, or more than the hard output bound is waiting.
async fn send(wr: &mut ClientStream, out: &mut Vec<u8>, limits: &Limits) -> bool {
    if out.len() > limits.output_hard_bytes {
        return false;
    }
    // The flush matters under TLS: records may wait in the session.
    let write = async {
        wr.write_all(out).await?;
        wr.flush().await
    };
    let sent = tokio::time::timeout(limits.output_timeout(), write).await;
    out.clear();
    matches!(sent, Ok(Ok(())))
}

/// [`read_more`], unless the connection must close first (`closing`).
async fn read_or_close(
    (stream, buf): (&mut ClientStream, &mut Vec<u8>),
    limits: &Limits,
    partial_since: Option<Instant>,
    login: &Login,
    anonymous: &mut Option<Anonymous>,
) -> Result<std::io::Result<usize>, Closing> {
    if let Some(c) = closing(login, anonymous, Instant::now()) {
        return Err(c);
    }
    tokio::select! {
        r = read_more(stream, buf, limits, partial_since) => Ok(r),
        c = until_closing(login, anonymous) => Err(c),
    }
}

/// Reads more of the client's requests: an unfinished one must be complete
/// within the request timeout of its first byte; with none under way the
/// client may take the idle timeout. A timeout is an error.
async fn read_more(
    rd: &mut ClientStream,
    buf: &mut Vec<u8>,
    limits: &Limits,
    partial_since: Option<Instant>,
) -> std::io::Result<usize> {
    let timed_out = |what: &str| std::io::Error::new(std::io::ErrorKind::TimedOut, what);
    let read = rd.read_buf(buf);
    match (partial_since, limits.idle_timeout()) {
        (Some(since), _) => tokio::time::timeout_at(since + limits.request_timeout(), read)
            .await
            .map_err(|_| timed_out("request incomplete"))?,
        (None, Some(idle)) => tokio::time::timeout(idle, read)
            .await
            .map_err(|_| timed_out("idle"))?,
        (None, None) => read.await,
    }
}
