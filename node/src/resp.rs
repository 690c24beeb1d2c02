//! The RESP2 listener: Tally through any Redis client.
//!
//! A plain key is the counter `(partition = key, column = "")`; a hash is a
//! partition and its fields are columns, so `HGETALL` reads a whole row.
//! Every command runs at QUORUM through this node as coordinator.
//!
//! | command | does |
//! |---|---|
//! | `INCR k`, `INCRBY k n`, `DECR k`, `DECRBY k n` | add; answers the new value |
//! | `GET k`, `MGET k...` | read; nil for a counter never written (or reset) |
//! | `DEL k...` | reset; answers how many held a value |
//! | `EXISTS k...` | how many hold a value |
//! | `HINCRBY k f n`, `HGET k f`, `HGETALL k`, `HDEL k f...` | the same on columns |
//! | `PING`, `ECHO`, `SELECT 0`, `COMMAND`, `CONFIG GET`, `CLIENT`, `INFO`, `QUIT` | what clients and tools expect |
//!
//! Requests are RESP arrays of bulk strings or inline commands, pipelined or
//! not. A connection's commands run one after another and are answered in
//! order, as Redis does, so `INCR a` then `GET a` in one pipeline sees the
//! add. Unknown commands, wrong arity and non-integers get Redis' own
//! `-ERR` texts; a protocol error gets `-ERR Protocol error: ...` and the
//! connection is closed, like Redis. Every length is checked before
//! anything is allocated for it.
//!
//! A connection over the node's cap is told `-ERR max number of clients
//! reached` and closed, as Redis does (see `accept`). Replies pile up in
//! the connection's output buffer while a pipeline runs; past the soft
//! output bound they are written before the next command runs, so a client
//! that does not read them stops being served (backpressure) instead of
//! growing the buffer, and its connection closes after the output timeout.
//! A request must be complete within the request timeout of its first
//! byte, and an idle connection may be closed (see `limits`).

use std::sync::Arc;

use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tracing::debug;

use crate::accept::{ClientGate, ClientSlot, Listener, accept_loop};
use crate::convert;
use crate::limits::Limits;
use crate::node::Node;

/// Most arguments in one command (MGET and DEL take many keys).
const ARGS_MAX: usize = 4096;
/// Largest bulk string accepted; keys are at most 1 KiB.
const BULK_BYTES_MAX: usize = 64 * 1024;
/// Largest inline command line.
const INLINE_BYTES_MAX: usize = 64 * 1024;
/// Largest request that may sit unparsed in a connection's buffer.
const BUFFER_BYTES_MAX: usize = 1 << 20;
/// Consistency of every RESP command.
const CL: Consistency = Consistency::Quorum;

/// A reply in RESP2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(&'static str),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Int(i64),
    /// `$3 abc`, or `$-1` for nil.
    Bulk(Option<Vec<u8>>),
    /// `*n ...`
    Array(Vec<Reply>),
}

impl Reply {
    fn err(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// Appends the reply's bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
            }
            Reply::Error(s) => {
                // An error line must not break the framing.
                let line: String = s
                    .chars()
                    .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
                    .collect();
                out.push(b'-');
                out.extend_from_slice(line.as_bytes());
            }
            Reply::Int(n) => {
                out.push(b':');
                out.extend_from_slice(n.to_string().as_bytes());
            }
            Reply::Bulk(None) => out.extend_from_slice(b"$-1"),
            Reply::Bulk(Some(b)) => {
                out.push(b'$');
                out.extend_from_slice(b.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(b);
            }
            Reply::Array(items) => {
                out.push(b'*');
                out.extend_from_slice(items.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for item in items {
                    item.encode(out);
                }
                return;
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A parsed command and the bytes it used; `None` while incomplete.
pub type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, String>;

/// Parses one command from the front of `buf`: its arguments and the bytes
/// it used, `None` if it is not complete yet. An empty argument list is a
/// blank line or `*0`, to be skipped.
pub fn parse(buf: &[u8]) -> Parsed {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first != b'*' {
        return parse_inline(buf);
    }
    let Some((n, mut at)) = header_int(buf, 1, "invalid multibulk length")? else {
        return Ok(None);
    };
    if n <= 0 {
        return Ok(Some((Vec::new(), at)));
    }
    let n = usize::try_from(n).map_err(|_| "invalid multibulk length".to_string())?;
    if n > ARGS_MAX {
        return Err("invalid multibulk length".into());
    }
    // Find every argument first and copy only a complete command: a client
    // trickling in a large command costs a scan of its headers per read,
    // not a copy of everything received so far.
    let mut spans = Vec::with_capacity(n.min(16));
    for _ in 0..n {
        let Some(&tag) = buf.get(at) else {
            return Ok(None);
        };
        if tag != b'$' {
            return Err(format!("expected '$', got '{}'", tag as char));
        }
        let Some((len, start)) = header_int(buf, at + 1, "invalid bulk length")? else {
            return Ok(None);
        };
        let len = usize::try_from(len).map_err(|_| "invalid bulk length".to_string())?;
        if len > BULK_BYTES_MAX {
            return Err("invalid bulk length".into());
        }
        let end = start + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err("expected CRLF after a bulk string".into());
        }
        spans.push((start, end));
        at = end + 2;
    }
    Ok(Some((
        spans.into_iter().map(|(a, b)| buf[a..b].to_vec()).collect(),
        at,
    )))
}

/// `<digits>\r\n` starting at `at`: the number and the offset after it.
fn header_int(buf: &[u8], at: usize, what: &str) -> Result<Option<(i64, usize)>, String> {
    const DIGITS_MAX: usize = 20;
    let rest = buf.get(at..).unwrap_or_default();
    let Some(cr) = rest.iter().take(DIGITS_MAX + 2).position(|&b| b == b'\r') else {
        return if rest.len() > DIGITS_MAX {
            Err(what.into())
        } else {
            Ok(None)
        };
    };
    if rest.len() < cr + 2 {
        return Ok(None);
    }
    if rest[cr + 1] != b'\n' {
        return Err(what.into());
    }
    let n = std::str::from_utf8(&rest[..cr])
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| what.to_string())?;
    Ok(Some((n, at + cr + 2)))
}

fn parse_inline(buf: &[u8]) -> Parsed {
    let Some(nl) = buf
        .iter()
        .take(INLINE_BYTES_MAX + 1)
        .position(|&b| b == b'\n')
    else {
        return if buf.len() > INLINE_BYTES_MAX {
            Err("too big inline request".into())
        } else {
            Ok(None)
        };
    };
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let args = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|a| !a.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Ok(Some((args, nl + 1)))
}

/// Accepts RESP connections until the listener fails, at most as many at
/// once as `gate` allows.
pub async fn serve(listener: TcpListener, node: Arc<Node>, gate: Arc<ClientGate>) {
    let l = Listener {
        what: "RESP",
        refusal: b"-ERR max number of clients reached\r\n".to_vec(),
        handle: connection,
    };
    accept_loop(listener, node, gate, l).await
}

async fn connection(stream: TcpStream, node: Arc<Node>, _slot: ClientSlot) {
    let limits = node.config().cluster.limits.clone();
    let peer = stream.peer_addr().ok();
    let (mut rd, mut wr) = stream.into_split();
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out = Vec::new();
    // When the first byte of the unfinished request at the end of `buf` came.
    let mut partial_since = None;
    loop {
        let mut used = 0;
        let mut close = false;
        loop {
            match parse(&buf[used..]) {
                Ok(Some((args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    let (reply, quit) = execute(&node, &args).await;
                    reply.encode(&mut out);
                    if quit {
                        close = true;
                        break;
                    }
                    // Replies the client has not taken stop the pipeline
                    // here until it does: no more commands run for it.
                    if out.len() >= limits.output_soft_bytes
                        && !send(&mut wr, &mut out, &limits).await
                    {
                        debug!(client = ?peer, "RESP client left its replies untaken");
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    debug!(client = ?peer, error = %e, "RESP protocol error");
                    Reply::err(format!("ERR Protocol error: {e}")).encode(&mut out);
                    close = true;
                    break;
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() && !send(&mut wr, &mut out, &limits).await {
            return;
        }
        if close {
            let _ = wr.shutdown().await;
            return;
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
        match read_more(&mut rd, &mut buf, &limits, partial_since).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Writes and clears `out`; false if the client did not take it within
/// the output timeout, or more than the hard output bound is waiting.
async fn send(wr: &mut OwnedWriteHalf, out: &mut Vec<u8>, limits: &Limits) -> bool {
    if out.len() > limits.output_hard_bytes {
        return false;
    }
    let sent = tokio::time::timeout(limits.output_timeout(), wr.write_all(out)).await;
    out.clear();
    matches!(sent, Ok(Ok(())))
}

/// Reads more of the client's requests: an unfinished one must be complete
/// within the request timeout of its first byte; with none under way the
/// client may take the idle timeout. A timeout is an error.
async fn read_more(
    rd: &mut OwnedReadHalf,
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

fn arity(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Reply::err("ERR value is not an integer or out of range"))
}

fn key(partition: &[u8], column: &[u8]) -> WireKey {
    WireKey::new(partition, column)
}

fn wire_err(e: &WireError) -> Reply {
    match e.kind {
        ErrorKind::Overflow => Reply::err("ERR increment or decrement would overflow"),
        _ => Reply::err(format!("ERR {e}")),
    }
}

/// A read's error: an overflow is the value's, not an increment's.
fn read_err(e: &WireError) -> Reply {
    match e.kind {
        ErrorKind::Overflow => Reply::err(format!("ERR {}", e.message)),
        _ => wire_err(e),
    }
}

/// Runs one command; the flag asks to close the connection after the reply.
pub async fn execute(node: &Arc<Node>, args: &[Vec<u8>]) -> (Reply, bool) {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let rest = &args[1..];
    if let Some(reply) = crate::resp_sets::execute(node, &name, rest).await {
        return (reply, false);
    }
    if let Some(reply) = crate::resp_tally::execute(node, &name, rest).await {
        return (reply, false);
    }
    let reply = match (name.as_str(), rest.len()) {
        ("quit", _) => return (Reply::Simple("OK"), true),
        ("ping", 0) => Reply::Simple("PONG"),
        ("ping", 1) | ("echo", 1) => Reply::Bulk(Some(rest[0].clone())),
        ("select", 1) if rest[0] == b"0" => Reply::Simple("OK"),
        ("select", 1) => Reply::err("ERR DB index is out of range"),
        ("command", _) => Reply::Array(Vec::new()),
        // Tools ask for settings (redis-benchmark: save, appendonly); every
        // name asked for gets an empty value, as Redis has no such setting here.
        ("config", n) if n >= 1 && rest[0].eq_ignore_ascii_case(b"get") => Reply::Array(
            rest[1..]
                .iter()
                .flat_map(|name| {
                    [
                        Reply::Bulk(Some(name.clone())),
                        Reply::Bulk(Some(Vec::new())),
                    ]
                })
                .collect(),
        ),
        ("client", n) if n >= 1 => Reply::Simple("OK"),
        ("info", _) => Reply::Bulk(Some(info(node).into_bytes())),
        ("incr", 1) => add(node, &rest[0], b"", Ok(1)).await,
        ("decr", 1) => add(node, &rest[0], b"", Ok(-1)).await,
        ("incrby", 2) => add(node, &rest[0], b"", int_arg(&rest[1])).await,
        ("decrby", 2) => {
            let delta = int_arg(&rest[1]).and_then(|d| {
                d.checked_neg()
                    .ok_or_else(|| Reply::err("ERR decrement would overflow"))
            });
            add(node, &rest[0], b"", delta).await
        }
        ("hincrby", 3) => add(node, &rest[0], &rest[1], int_arg(&rest[2])).await,
        ("get", 1) => get(node, &rest[0], b"").await,
        ("hget", 2) => get(node, &rest[0], &rest[1]).await,
        ("mget", n) if n >= 1 => {
            let mut items = Vec::with_capacity(n);
            for k in rest {
                match get(node, k, b"").await {
                    e @ Reply::Error(_) => return (e, false),
                    r => items.push(r),
                }
            }
            Reply::Array(items)
        }
        ("exists", n) if n >= 1 => {
            let mut count = 0;
            for k in rest {
                match node.get_cell(&key(k, b""), CL).await {
                    Ok(c) => count += i64::from(!c.shards().is_empty()),
                    Err(e) => return (wire_err(&e), false),
                }
            }
            Reply::Int(count)
        }
        ("del", n) if n >= 1 => delete_keys(node, rest).await,
        ("hdel", n) if n >= 2 => delete(node, rest[1..].iter().map(|f| key(&rest[0], f))).await,
        ("hgetall", 1) => match node.get_row(&rest[0], CL).await {
            Ok(row) => Reply::Array(
                row.into_iter()
                    .flat_map(|(col, v)| {
                        [
                            Reply::Bulk(Some(col)),
                            Reply::Bulk(Some(v.to_string().into_bytes())),
                        ]
                    })
                    .collect(),
            ),
            Err(e) => read_err(&e),
        },
        (
            "ping" | "echo" | "select" | "incr" | "decr" | "incrby" | "decrby" | "hincrby" | "get"
            | "hget" | "mget" | "exists" | "del" | "hdel" | "hgetall" | "config" | "client",
            _,
        ) => arity(&name),
        _ => {
            let shown: Vec<String> = rest
                .iter()
                .take(3)
                .map(|a| format!("'{}'", String::from_utf8_lossy(a)))
                .collect();
            Reply::err(format!(
                "ERR unknown command '{}', with args beginning with: {}",
                String::from_utf8_lossy(&args[0]),
                shown.join(" ")
            ))
        }
    };
    (reply, false)
}

async fn add(
    node: &Arc<Node>,
    partition: &[u8],
    column: &[u8],
    delta: Result<i64, Reply>,
) -> Reply {
    let delta = match delta {
        Ok(d) => d,
        Err(r) => return r,
    };
    match node.add(&key(partition, column), delta, CL).await {
        Ok(v) => Reply::Int(v),
        Err(e) => wire_err(&e),
    }
}

async fn get(node: &Arc<Node>, partition: &[u8], column: &[u8]) -> Reply {
    match node.get_cell(&key(partition, column), CL).await {
        Ok(c) if c.shards().is_empty() => Reply::Bulk(None),
        Ok(c) => match convert::value(&c) {
            Ok(v) => Reply::Bulk(Some(v.to_string().into_bytes())),
            Err(e) => read_err(&e),
        },
        Err(e) => read_err(&e),
    }
}

/// `DEL`: each key's counter and unique counter are reset, those that
/// exist; answers how many keys had one.
async fn delete_keys(node: &Arc<Node>, keys: &[Vec<u8>]) -> Reply {
    let mut count = 0;
    for k in keys {
        let counter = match delete(node, std::iter::once(key(k, b""))).await {
            Reply::Int(n) => n,
            other => return other,
        };
        let unique = match node.unique_reset(k, CL).await {
            Ok(had) => i64::from(had),
            Err(e) => return wire_err(&e),
        };
        count += counter.max(unique);
    }
    Reply::Int(count)
}

async fn delete(node: &Arc<Node>, keys: impl Iterator<Item = WireKey>) -> Reply {
    let mut count = 0;
    for k in keys {
        match node.get_cell(&k, CL).await {
            Ok(c) if c.shards().is_empty() => continue,
            Ok(_) => {}
            Err(e) => return wire_err(&e),
        }
        if let Err(e) = node.reset(&k, CL).await {
            return wire_err(&e);
        }
        count += 1;
    }
    Reply::Int(count)
}

fn info(node: &Node) -> String {
    let me = &node.config().nodes[node.me()];
    format!(
        "# Server\r\nredis_version:7.0.0\r\ntally_version:{}\r\ntally_cluster:{}\r\ntally_node:{}\r\ntcp_port:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        node.config().cluster.name,
        me.id,
        me.resp.port()
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use proptest::prelude::*;

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn parses_arrays_inline_and_partial_input() {
        let req = b"*2\r\n$4\r\nINCR\r\n$3\r\nfoo\r\nPING\r\n";
        let (a, n) = parse(req).unwrap().unwrap();
        assert_eq!(a, args(&["INCR", "foo"]));
        let (b, m) = parse(&req[n..]).unwrap().unwrap();
        assert_eq!(b, args(&["PING"]));
        assert_eq!(n + m, req.len());
        for cut in 0..n {
            assert_eq!(parse(&req[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(
            parse(b"  incrby  k 5 \r\n").unwrap().unwrap().0,
            args(&["incrby", "k", "5"])
        );
    }

    #[test]
    fn refuses_bad_lengths_before_allocating() {
        assert!(parse(b"*99999999999\r\n").is_err());
        assert!(parse(b"*1\r\n$99999999\r\n").is_err());
        assert!(parse(b"*1\r\n$-5\r\n").is_err());
        assert!(parse(b"*1\r\n+nope\r\n").is_err());
        assert!(parse(b"*1\r\n$3\r\nabcXY").is_err());
        assert!(parse(b"*123456789012345678901234\r\n").is_err());
        assert!(parse(&vec![b'a'; INLINE_BYTES_MAX + 2]).is_err());
    }

    #[test]
    fn encodes_replies() {
        let mut out = Vec::new();
        Reply::Array(vec![
            Reply::Int(-3),
            Reply::Bulk(None),
            Reply::Bulk(Some(b"7".to_vec())),
            Reply::Simple("OK"),
        ])
        .encode(&mut out);
        Reply::err("ERR a\r\nb").encode(&mut out);
        assert_eq!(out, b"*4\r\n:-3\r\n$-1\r\n$1\r\n7\r\n+OK\r\n-ERR a  b\r\n");
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut at = 0;
            while let Ok(Some((_, n))) = parse(&bytes[at..]) {
                prop_assert!(n > 0);
                at += n;
            }
        }
    }
}
