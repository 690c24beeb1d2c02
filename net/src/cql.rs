//! A small CQL client for Tally's own tools: native protocol v4 over
//! TCP (or any byte stream: the simulator's pipes), one connection per
//! node with many statements in flight (each on its own stream id),
//! prepared statements with a custom payload (where an operation id
//! rides), and token-aware routing by the ring `cluster.toml` gives
//! (Murmur3 of the bound partition key).
//!
//! Just what `tally-bench --protocol cql` and the chaos run's CQL workers
//! need; the tests of the CQL port use the real drivers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::ring::{Ring, murmur3_token};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

const VERSION: u8 = 0x04;
const RESPONSE: u8 = 0x84;
const HEADER: usize = 9;
/// Largest response body read.
const BODY_MAX: usize = 256 << 20;

const ERROR: u8 = 0x00;
const STARTUP: u8 = 0x01;
const READY: u8 = 0x02;
const AUTHENTICATE: u8 = 0x03;
const QUERY: u8 = 0x07;
const RESULT: u8 = 0x08;
const PREPARE: u8 = 0x09;
const EXECUTE: u8 = 0x0A;
const BATCH: u8 = 0x0D;
const AUTH_RESPONSE: u8 = 0x0F;
const AUTH_SUCCESS: u8 = 0x10;

/// Frame flag: the body begins with a custom payload.
const FLAG_CUSTOM_PAYLOAD: u8 = 0x04;

/// A consistency level's code.
pub fn consistency(cl: crate::wire::Consistency) -> u16 {
    match cl {
        crate::wire::Consistency::One => 0x0001,
        crate::wire::Consistency::All => 0x0005,
        _ => 0x0004,
    }
}

type Result<T> = std::result::Result<T, CqlError>;

fn failed(why: impl Into<String>) -> CqlError {
    CqlError::Closed(why.into())
}

/// A failed statement: Cassandra's error code and message, or the
/// connection's failure.
#[derive(Debug, Clone)]
pub enum CqlError {
    /// The node's ERROR.
    Server {
        /// Cassandra's error code.
        code: i32,
        /// Its message.
        message: String,
    },
    /// The connection failed, or could not be set up; why.
    Closed(String),
}

impl CqlError {
    /// What kind of error, for the bench's tally of them.
    pub fn kind(&self) -> String {
        match self {
            CqlError::Server { code, .. } => match code {
                0x1000 => "unavailable".into(),
                0x1100 => "write timeout".into(),
                0x1200 => "read timeout".into(),
                0x1500 => "write failure".into(),
                c => format!("error {c:#06x}"),
            },
            CqlError::Closed(_) => "connection closed".into(),
        }
    }

    /// Whether the statement certainly was not applied.
    pub fn not_applied(&self) -> bool {
        matches!(self, CqlError::Server { code, .. } if matches!(code, 0x1000 | 0x1001 | 0x1500 | 0x2000..=0x2500))
    }
}

impl std::error::Error for CqlError {}

impl std::fmt::Display for CqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CqlError::Server { code, message } => write!(f, "{code:#06x}: {message}"),
            CqlError::Closed(why) => write!(f, "connection closed: {why}"),
        }
    }
}

type Pending = Arc<Mutex<Slots>>;
/// An answer: its opcode and body, or the error.
type Answer = Result<(u8, Vec<u8>)>;

/// The streams of a connection: who waits for each answer, and which
/// stream ids are free.
struct Slots {
    waiting: HashMap<i16, oneshot::Sender<Answer>>,
    free: Vec<i16>,
    closed: Option<String>,
}

/// One connection to a node.
struct Conn {
    frames: mpsc::UnboundedSender<Vec<u8>>,
    slots: Pending,
}

impl Conn {
    async fn open(addr: SocketAddr, login: Option<(&str, &str)>) -> Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| failed(format!("connect to CQL at {addr}: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| failed(e.to_string()))?;
        Conn::over(stream, login).await
    }

    /// A connection over `stream`, logged in with `login` if the node
    /// asks for one.
    async fn over<S>(stream: S, login: Option<(&str, &str)>) -> Result<Conn>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let slots: Pending = Arc::new(Mutex::new(Slots {
            waiting: HashMap::new(),
            free: (0..i16::MAX).rev().collect(),
            closed: None,
        }));
        let (frames, mut out) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while let Some(f) = out.recv().await {
                batch.clear();
                batch.extend_from_slice(&f);
                while let Ok(more) = out.try_recv() {
                    batch.extend_from_slice(&more);
                }
                if wr.write_all(&batch).await.is_err() {
                    return;
                }
            }
        });
        let reader = slots.clone();
        tokio::spawn(async move {
            let why = loop {
                let mut header = [0u8; HEADER];
                if let Err(e) = rd.read_exact(&mut header).await {
                    break e.to_string();
                }
                let stream = i16::from_be_bytes([header[2], header[3]]);
                let len = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) as usize;
                if header[0] != RESPONSE || len > BODY_MAX {
                    break format!("a bad response header {header:?}");
                }
                let mut body = vec![0; len];
                if let Err(e) = rd.read_exact(&mut body).await {
                    break e.to_string();
                }
                let answer = match header[4] {
                    ERROR => Err(error(&body)),
                    op => Ok((op, body)),
                };
                let mut s = reader.lock();
                if let Some(w) = s.waiting.remove(&stream) {
                    s.free.push(stream);
                    let _ = w.send(answer);
                }
            };
            let mut s = reader.lock();
            s.closed = Some(why.clone());
            for (_, w) in s.waiting.drain() {
                let _ = w.send(Err(CqlError::Closed(why.clone())));
            }
        });
        let conn = Conn { frames, slots };
        conn.handshake(login).await?;
        Ok(conn)
    }

    async fn handshake(&self, login: Option<(&str, &str)>) -> Result<()> {
        let mut startup = Vec::new();
        put_short(&mut startup, 1);
        put_string(&mut startup, "CQL_VERSION");
        put_string(&mut startup, "3.0.0");
        match self.call(STARTUP, startup, 0).await? {
            (READY, _) => Ok(()),
            (AUTHENTICATE, _) => {
                let (user, password) =
                    login.ok_or_else(|| failed("the node asks for a login: give a user"))?;
                let token = [b"\0", user.as_bytes(), b"\0", password.as_bytes()].concat();
                let mut body = Vec::new();
                put_bytes(&mut body, &token);
                match self.call(AUTH_RESPONSE, body, 0).await? {
                    (AUTH_SUCCESS, _) => Ok(()),
                    (op, _) => Err(failed(format!("login answered opcode {op:#04x}"))),
                }
            }
            (op, _) => Err(failed(format!("STARTUP answered opcode {op:#04x}"))),
        }
    }

    /// Sends a request with frame `flags`; answers its response's opcode
    /// and body.
    async fn call(&self, opcode: u8, body: Vec<u8>, flags: u8) -> Answer {
        let (tx, rx) = oneshot::channel();
        let stream = {
            let mut s = self.slots.lock();
            if let Some(why) = &s.closed {
                return Err(CqlError::Closed(why.clone()));
            }
            let id = s
                .free
                .pop()
                .ok_or_else(|| CqlError::Closed("every stream id is in flight".into()))?;
            s.waiting.insert(id, tx);
            id
        };
        let mut frame = Vec::with_capacity(HEADER + body.len());
        frame.extend_from_slice(&[VERSION, flags]);
        frame.extend_from_slice(&stream.to_be_bytes());
        frame.push(opcode);
        frame.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
        frame.extend_from_slice(&body);
        if self.frames.send(frame).is_err() {
            return Err(CqlError::Closed("the writer stopped".into()));
        }
        rx.await
            .unwrap_or_else(|_| Err(CqlError::Closed("the reader stopped".into())))
    }
}

fn error(body: &[u8]) -> CqlError {
    let code = body
        .get(..4)
        .map_or(0, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let message = body
        .get(4..6)
        .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
        .and_then(|n| body.get(6..6 + n))
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .unwrap_or_default();
    CqlError::Server { code, message }
}

fn put_short(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_string(b: &mut Vec<u8>, s: &str) {
    put_short(b, u16::try_from(s.len()).unwrap_or(u16::MAX));
    b.extend_from_slice(s.as_bytes());
}

fn put_long_string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn put_bytes(b: &mut Vec<u8>, v: &[u8]) {
    b.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_be_bytes());
    b.extend_from_slice(v);
}

/// A batch's statements, each prepared one with its values.
pub type Statements<'a> = [(&'a Prepared, &'a [&'a [u8]])];

/// A statement prepared on every node: its id (the same on each).
#[derive(Clone, Debug)]
pub struct Prepared(Vec<u8>);

/// A connection to each node of the cluster, and its ring.
pub struct CqlClient {
    conns: Vec<Conn>,
    ring: Ring,
}

impl CqlClient {
    /// Connects to every node (`addrs`, in the ring's node order).
    pub async fn connect(
        addrs: &[SocketAddr],
        ring: Ring,
        login: Option<(&str, &str)>,
    ) -> Result<CqlClient> {
        let mut conns = Vec::with_capacity(addrs.len());
        for &a in addrs {
            conns.push(Conn::open(a, login).await?);
        }
        Ok(CqlClient { conns, ring })
    }

    /// A client of one node, over `stream` (a connection made already:
    /// in the simulator, a pipe to the node's port).
    pub async fn over<S>(stream: S, login: Option<(&str, &str)>) -> Result<CqlClient>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let conn = Conn::over(stream, login).await?;
        let ring = Ring::new(&["n".to_string()], 1, 1);
        Ok(CqlClient {
            conns: vec![conn],
            ring,
        })
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.conns.len()
    }

    /// Runs `text` unprepared on the first node, at QUORUM.
    pub async fn query(&self, text: &str) -> Result<()> {
        let mut body = Vec::new();
        put_long_string(&mut body, text);
        put_short(&mut body, 0x0004);
        body.push(0);
        self.conns[0].call(QUERY, body, 0).await.map(|_| ())
    }

    /// Runs `text` unprepared on the first node at level `cl`, a page of
    /// `page_size` rows after `state` (`None`: the first page); answers
    /// the result's body, whose rows carry their metadata.
    pub async fn query_page(
        &self,
        text: &str,
        cl: u16,
        (page_size, state): (i32, Option<&[u8]>),
    ) -> Result<Vec<u8>> {
        let mut body = Vec::new();
        put_long_string(&mut body, text);
        put_short(&mut body, cl);
        body.push(if state.is_some() { 0x04 | 0x08 } else { 0x04 });
        body.extend_from_slice(&page_size.to_be_bytes());
        if let Some(state) = state {
            put_bytes(&mut body, state);
        }
        self.conns[0].call(QUERY, body, 0).await.map(|(_, b)| b)
    }

    /// Prepares `text` on every node.
    pub async fn prepare(&self, text: &str) -> Result<Prepared> {
        let mut id = None;
        for c in &self.conns {
            let mut body = Vec::new();
            put_long_string(&mut body, text);
            let (op, answer) = c.call(PREPARE, body, 0).await?;
            let kind = answer
                .get(..4)
                .map(|k| i32::from_be_bytes([k[0], k[1], k[2], k[3]]));
            let n = answer
                .get(4..6)
                .map(|n| usize::from(u16::from_be_bytes([n[0], n[1]])));
            match (op, kind, n.and_then(|n| answer.get(6..6 + n))) {
                (RESULT, Some(4), Some(got)) => id = Some(got.to_vec()),
                _ => return Err(failed(format!("prepare {text}: not a prepared result"))),
            }
        }
        id.map(Prepared)
            .ok_or_else(|| failed("no node to prepare on"))
    }

    /// Executes `p` with `values` at level `cl` on the primary replica of
    /// `key` (the bound partition key); answers the result's body.
    pub async fn execute(
        &self,
        p: &Prepared,
        key: &[u8],
        values: &[&[u8]],
        cl: u16,
    ) -> Result<Vec<u8>> {
        let node = self.ring.replicas_for_token(murmur3_token(key)).primary();
        self.execute_on(node, p, values, cl, None).await
    }

    /// Executes `p` with `values` at level `cl` on `node`, with the custom
    /// payload entry `payload` if given; answers the result's body.
    pub async fn execute_on(
        &self,
        node: usize,
        p: &Prepared,
        values: &[&[u8]],
        cl: u16,
        payload: Option<(&str, &[u8])>,
    ) -> Result<Vec<u8>> {
        let mut body = Vec::with_capacity(64);
        if let Some((key, value)) = payload {
            put_short(&mut body, 1);
            put_string(&mut body, key);
            put_bytes(&mut body, value);
        }
        put_execute(&mut body, p, values, cl, None);
        let conn = self.conns.get(node).unwrap_or(&self.conns[0]);
        let flags = match payload {
            Some(_) => FLAG_CUSTOM_PAYLOAD,
            None => 0,
        };
        conn.call(EXECUTE, body, flags).await.map(|(_, b)| b)
    }

    /// Executes `p` with `values` at level `cl` on connection `node`, a
    /// page of `page_size` rows after `state` (a paging state an earlier
    /// page answered; `None`: the first page); answers the result's body
    /// ([`paging_state`] says whether more pages follow).
    pub async fn execute_page(
        &self,
        node: usize,
        (p, values): (&Prepared, &[&[u8]]),
        cl: u16,
        (page_size, state): (i32, Option<&[u8]>),
    ) -> Result<Vec<u8>> {
        let mut body = Vec::with_capacity(64);
        put_execute(&mut body, p, values, cl, Some((page_size, state)));
        let conn = self.conns.get(node).unwrap_or(&self.conns[0]);
        conn.call(EXECUTE, body, 0).await.map(|(_, b)| b)
    }
}

/// An EXECUTE's body after its payload: the statement, the level, the
/// values (metadata skipped), and a page size and state if `page`.
fn put_execute(
    body: &mut Vec<u8>,
    p: &Prepared,
    values: &[&[u8]],
    cl: u16,
    page: Option<(i32, Option<&[u8]>)>,
) {
    put_short(body, u16::try_from(p.0.len()).unwrap_or(u16::MAX));
    body.extend_from_slice(&p.0);
    put_short(body, cl);
    let flags = match page {
        None => 0x01 | 0x02,
        Some((_, None)) => 0x01 | 0x02 | 0x04,
        Some((_, Some(_))) => 0x01 | 0x02 | 0x04 | 0x08,
    };
    body.push(flags);
    put_short(body, u16::try_from(values.len()).unwrap_or(u16::MAX));
    for v in values {
        put_bytes(body, v);
    }
    if let Some((size, state)) = page {
        body.extend_from_slice(&size.to_be_bytes());
        if let Some(state) = state {
            put_bytes(body, state);
        }
    }
}

impl CqlClient {
    /// Runs a batch (`logged` or not) of prepared statements (each with
    /// its values) at level `cl` on the primary replica of `key` (the
    /// first statement's bound partition key); answers the result's body.
    pub async fn batch(
        &self,
        key: &[u8],
        (statements, logged): (&Statements<'_>, bool),
        cl: u16,
    ) -> Result<Vec<u8>> {
        let node = self.ring.replicas_for_token(murmur3_token(key)).primary();
        self.send_batch(node, statements, logged, cl).await
    }

    /// Runs a logged batch of prepared statements (each with its values)
    /// at level `cl` on `node`; answers the result's body.
    pub async fn batch_on(
        &self,
        node: usize,
        statements: &[(&Prepared, &[&[u8]])],
        cl: u16,
    ) -> Result<Vec<u8>> {
        self.send_batch(node, statements, true, cl).await
    }

    async fn send_batch(
        &self,
        node: usize,
        statements: &[(&Prepared, &[&[u8]])],
        logged: bool,
        cl: u16,
    ) -> Result<Vec<u8>> {
        let mut body = vec![u8::from(!logged)];
        put_short(
            &mut body,
            u16::try_from(statements.len()).unwrap_or(u16::MAX),
        );
        for (p, values) in statements {
            body.push(1);
            put_short(&mut body, u16::try_from(p.0.len()).unwrap_or(u16::MAX));
            body.extend_from_slice(&p.0);
            put_short(&mut body, u16::try_from(values.len()).unwrap_or(u16::MAX));
            for v in *values {
                put_bytes(&mut body, v);
            }
        }
        put_short(&mut body, cl);
        body.push(0);
        let conn = self.conns.get(node).unwrap_or(&self.conns[0]);
        conn.call(BATCH, body, 0).await.map(|(_, b)| b)
    }
}

/// The bigint of the first cell of the first row of a ROWS result body
/// read with its metadata skipped (`None`: no row, or a null).
pub fn first_bigint(body: &[u8]) -> Option<i64> {
    // kind, flags, column count, row count (skip_metadata: no specs).
    let rows = i32::from_be_bytes(body.get(12..16)?.try_into().ok()?);
    if rows < 1 {
        return None;
    }
    let len = i32::from_be_bytes(body.get(16..20)?.try_into().ok()?);
    let cell = body.get(20..20 + usize::try_from(len).ok()?)?;
    Some(i64::from_be_bytes(cell.try_into().ok()?))
}

/// The paging state of a ROWS result body, if more pages follow.
pub fn paging_state(body: &[u8]) -> Option<Vec<u8>> {
    let kind = i32::from_be_bytes(body.get(..4)?.try_into().ok()?);
    let flags = i32::from_be_bytes(body.get(4..8)?.try_into().ok()?);
    if kind != 2 || flags & 0x02 == 0 {
        return None;
    }
    let n = usize::try_from(i32::from_be_bytes(body.get(12..16)?.try_into().ok()?)).ok()?;
    Some(body.get(16..16 + n)?.to_vec())
}

/// The rows of a ROWS result body, with or without its metadata: each
/// row's cells (`None`: null). `None` for a body that is not one.
pub fn rows(body: &[u8]) -> Option<Vec<Vec<Option<Vec<u8>>>>> {
    typed_rows(body).map(|r| r.rows)
}

/// A ROWS result: its columns' types and its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedRows {
    /// Each column's type id (`0x0009` int, `0x000D` varchar, ...; a
    /// collection's own id): empty if the metadata was skipped.
    pub types: Vec<u16>,
    /// Each row's cells (`None`: null).
    pub rows: Vec<Vec<Option<Vec<u8>>>>,
}

/// A ROWS result body read whole, with its column types if it carries
/// its metadata. `None` for a body that is not one.
pub fn typed_rows(body: &[u8]) -> Option<TypedRows> {
    let mut r = body;
    let int = |r: &mut &[u8]| -> Option<i32> {
        let (head, tail) = r.split_first_chunk::<4>()?;
        *r = tail;
        Some(i32::from_be_bytes(*head))
    };
    if int(&mut r)? != 2 {
        return None;
    }
    let flags = int(&mut r)?;
    let columns = usize::try_from(int(&mut r)?).ok()?;
    let types = column_types(&mut r, flags, columns)?;
    let count = usize::try_from(int(&mut r)?).ok()?;
    let mut rows = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let mut row = Vec::with_capacity(columns);
        for _ in 0..columns {
            let len = int(&mut r)?;
            row.push(match usize::try_from(len) {
                Ok(n) => {
                    let cell = r.get(..n)?.to_vec();
                    r = &r[n..];
                    Some(cell)
                }
                Err(_) => None,
            });
        }
        rows.push(row);
    }
    Some(TypedRows { types, rows })
}

/// Reads a ROWS result's metadata after its column count: the paging
/// state, the table's names and each column's spec. Answers the
/// columns' type ids (none if the metadata was skipped).
fn column_types(r: &mut &[u8], flags: i32, columns: usize) -> Option<Vec<u16>> {
    let skip = |r: &mut &[u8], n: usize| -> Option<()> {
        *r = r.get(n..)?;
        Some(())
    };
    let short = |r: &mut &[u8]| -> Option<usize> {
        let (head, tail) = r.split_first_chunk::<2>()?;
        *r = tail;
        Some(usize::from(u16::from_be_bytes(*head)))
    };
    if flags & 0x02 != 0 {
        let (head, tail) = r.split_first_chunk::<4>()?;
        *r = tail;
        let n = usize::try_from(i32::from_be_bytes(*head)).ok()?;
        skip(r, n)?;
    }
    if flags & 0x04 != 0 {
        return Some(Vec::new());
    }
    // Global table spec: one keyspace and table name for every column.
    let global = flags & 0x01 != 0;
    if global {
        for _ in 0..2 {
            let n = short(r)?;
            skip(r, n)?;
        }
    }
    let mut types = Vec::with_capacity(columns.min(1024));
    for _ in 0..columns {
        let names = if global { 1 } else { 3 };
        for _ in 0..names {
            let n = short(r)?;
            skip(r, n)?;
        }
        types.push(skip_type(r, 0)?);
    }
    Some(types)
}

/// Skips a type `[option]` (collections' element types too); answers
/// its id.
fn skip_type(r: &mut &[u8], depth: usize) -> Option<u16> {
    if depth > 8 {
        return None;
    }
    let (id, tail) = r.split_first_chunk::<2>()?;
    *r = tail;
    let id = u16::from_be_bytes(*id);
    match id {
        0x0020 | 0x0022 => skip_type(r, depth + 1)?,
        0x0021 => {
            skip_type(r, depth + 1)?;
            skip_type(r, depth + 1)?
        }
        _ => 0,
    };
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ROWS body: `flags`, two columns (int `c`, varchar `v`) of table
    /// `s.t`, the metadata as `flags` says, and one row `(3, 'a')`.
    fn body(flags: i32, state: Option<&[u8]>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        if let Some(state) = state {
            put_bytes(&mut b, state);
        }
        if flags & 0x04 == 0 {
            let global = flags & 0x01 != 0;
            if global {
                put_string(&mut b, "s");
                put_string(&mut b, "t");
            }
            for (name, id) in [("c", 0x0009u16), ("v", 0x000D)] {
                if !global {
                    put_string(&mut b, "s");
                    put_string(&mut b, "t");
                }
                put_string(&mut b, name);
                b.extend_from_slice(&id.to_be_bytes());
            }
        }
        b.extend_from_slice(&1i32.to_be_bytes());
        put_bytes(&mut b, &3i32.to_be_bytes());
        put_bytes(&mut b, b"a");
        b
    }

    #[test]
    fn rows_read_with_their_types_whatever_the_metadata_holds() {
        let row = vec![Some(3i32.to_be_bytes().to_vec()), Some(b"a".to_vec())];
        for (flags, state) in [(0x01, None), (0x00, None), (0x03, Some(&b"p"[..]))] {
            let got = typed_rows(&body(flags, state)).unwrap();
            assert_eq!(got.types, vec![0x0009, 0x000D], "flags {flags:#x}");
            assert_eq!(got.rows, vec![row.clone()], "flags {flags:#x}");
        }
        let bare = typed_rows(&body(0x04, None)).unwrap();
        assert!(bare.types.is_empty());
        assert_eq!(bare.rows, vec![row]);
        // Cut anywhere, a body is no result rather than a wrong one.
        let whole = body(0x01, None);
        for cut in 0..whole.len() {
            assert_eq!(typed_rows(&whole[..cut]), None, "cut at {cut}");
        }
    }
}
