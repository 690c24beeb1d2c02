//! RESP on the wire: parsing requests, and encoding replies in RESP2 or
//! RESP3 (what a connection asked for with `HELLO`).
//!
//! Requests are RESP arrays of bulk strings or inline commands. Every
//! length is checked before anything is allocated for it. A reply is built
//! once as a [`Reply`] and encoded for the connection's protocol: the RESP3
//! types (null, map, set, double, boolean, verbatim string) fall back to
//! their RESP2 forms as Redis does (`$-1`, a flat array, an array, a bulk
//! string, `:1`/`:0`, a bulk string).

/// Most arguments in one command (MGET and DEL take many keys).
pub(crate) const ARGS_MAX: usize = 4096;
/// Largest bulk string accepted; keys are at most 1 KiB.
const BULK_BYTES_MAX: usize = 64 * 1024;
/// Largest inline command line.
pub(crate) const INLINE_BYTES_MAX: usize = 64 * 1024;

/// The protocol a connection speaks: 2 until `HELLO 3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// RESP2.
    Resp2,
    /// RESP3.
    Resp3,
}

impl Proto {
    /// The version number `HELLO` takes and answers.
    pub fn version(self) -> i64 {
        match self {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        }
    }
}

/// A reply, encoded for the connection's protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`
    Simple(&'static str),
    /// `+...`, built at run time (never holding CR or LF).
    Status(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Int(i64),
    /// `$3 abc`, or nil (`$-1`; RESP3 `_`).
    Bulk(Option<Vec<u8>>),
    /// `*n ...`
    Array(Vec<Reply>),
    /// RESP3 `%n` of pairs; RESP2 a flat array.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~n`; RESP2 an array.
    Set(Vec<Reply>),
    /// RESP3 an array of two-element arrays; RESP2 a flat array (a sorted
    /// set's members and scores).
    Pairs(Vec<(Reply, Reply)>),
    /// RESP3 `,1.5`; RESP2 a bulk string.
    Double(f64),
    /// RESP3 `#t`/`#f`; RESP2 `:1`/`:0`.
    Bool(bool),
    /// RESP3 `=` with a three-letter format (`txt`); RESP2 a bulk string.
    Verbatim(&'static str, Vec<u8>),
}

impl Reply {
    /// An error reply; `msg` starts with its code (`ERR`, `NOPROTO`, ...).
    pub fn err(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// A bulk string of `s`.
    pub fn bulk(s: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(Some(s.into()))
    }

    /// Nil.
    pub const NIL: Reply = Reply::Bulk(None);

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the reply's bytes in protocol `proto`.
    pub fn encode(&self, out: &mut Vec<u8>, proto: Proto) {
        let resp3 = proto == Proto::Resp3;
        match self {
            Reply::Simple(s) => line(out, b'+', s.as_bytes()),
            Reply::Status(s) => line(out, b'+', &clean(s)),
            Reply::Error(s) => line(out, b'-', &clean(s)),
            Reply::Int(n) => line(out, b':', n.to_string().as_bytes()),
            Reply::Bulk(None) if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Bulk(None) => out.extend_from_slice(b"$-1\r\n"),
            Reply::Bulk(Some(b)) => bulk(out, b'$', b),
            Reply::Array(items) => aggregate(out, b'*', items, proto),
            Reply::Set(items) => aggregate(out, if resp3 { b'~' } else { b'*' }, items, proto),
            Reply::Map(pairs) => {
                let (tag, n) = if resp3 {
                    (b'%', pairs.len())
                } else {
                    (b'*', pairs.len() * 2)
                };
                line(out, tag, n.to_string().as_bytes());
                for (k, v) in pairs {
                    k.encode(out, proto);
                    v.encode(out, proto);
                }
            }
            Reply::Pairs(pairs) => {
                let n = if resp3 { pairs.len() } else { pairs.len() * 2 };
                line(out, b'*', n.to_string().as_bytes());
                for (a, b) in pairs {
                    if resp3 {
                        line(out, b'*', b"2");
                    }
                    a.encode(out, proto);
                    b.encode(out, proto);
                }
            }
            Reply::Double(d) if resp3 => line(out, b',', double(*d).as_bytes()),
            Reply::Double(d) => bulk(out, b'$', double(*d).as_bytes()),
            Reply::Bool(b) if resp3 => line(out, b'#', if *b { b"t" } else { b"f" }),
            Reply::Bool(b) => line(out, b':', if *b { b"1" } else { b"0" }),
            Reply::Verbatim(format, text) if resp3 => {
                let mut body = format.as_bytes().to_vec();
                body.push(b':');
                body.extend_from_slice(text);
                bulk(out, b'=', &body);
            }
            Reply::Verbatim(_, text) => bulk(out, b'$', text),
        }
    }
}

fn line(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    line(out, tag, body.len().to_string().as_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

fn aggregate(out: &mut Vec<u8>, tag: u8, items: &[Reply], proto: Proto) {
    line(out, tag, items.len().to_string().as_bytes());
    for item in items {
        item.encode(out, proto);
    }
}

/// A status or error line must not break the framing.
fn clean(s: &str) -> Vec<u8> {
    s.bytes()
        .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect()
}

/// A double as Redis writes it: `inf`, `-inf`, `nan`, or the shortest
/// decimal that reads back the same.
fn double(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{d}")
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

    fn encoded(r: &Reply, proto: Proto) -> String {
        let mut out = Vec::new();
        r.encode(&mut out, proto);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn encodes_replies_in_both_protocols() {
        let r = Reply::Array(vec![
            Reply::Int(-3),
            Reply::NIL,
            Reply::bulk("7"),
            Reply::Simple("OK"),
        ]);
        assert_eq!(
            encoded(&r, Proto::Resp2),
            "*4\r\n:-3\r\n$-1\r\n$1\r\n7\r\n+OK\r\n"
        );
        assert_eq!(
            encoded(&r, Proto::Resp3),
            "*4\r\n:-3\r\n_\r\n$1\r\n7\r\n+OK\r\n"
        );
        assert_eq!(
            encoded(&Reply::err("ERR a\r\nb"), Proto::Resp3),
            "-ERR a  b\r\n"
        );
        let m = Reply::Map(vec![(Reply::bulk("proto"), Reply::Int(3))]);
        assert_eq!(encoded(&m, Proto::Resp3), "%1\r\n$5\r\nproto\r\n:3\r\n");
        assert_eq!(encoded(&m, Proto::Resp2), "*2\r\n$5\r\nproto\r\n:3\r\n");
        let s = Reply::Set(vec![Reply::bulk("a")]);
        assert_eq!(encoded(&s, Proto::Resp3), "~1\r\n$1\r\na\r\n");
        assert_eq!(encoded(&s, Proto::Resp2), "*1\r\n$1\r\na\r\n");
        assert_eq!(encoded(&Reply::Double(1.5), Proto::Resp3), ",1.5\r\n");
        let pairs = Reply::Pairs(vec![(Reply::bulk("m"), Reply::Double(2.0))]);
        assert_eq!(
            encoded(&pairs, Proto::Resp3),
            "*1\r\n*2\r\n$1\r\nm\r\n,2\r\n"
        );
        assert_eq!(
            encoded(&pairs, Proto::Resp2),
            "*2\r\n$1\r\nm\r\n$1\r\n2\r\n"
        );
        assert_eq!(encoded(&Reply::Double(1.5), Proto::Resp2), "$3\r\n1.5\r\n");
        assert_eq!(
            encoded(&Reply::Double(f64::INFINITY), Proto::Resp3),
            ",inf\r\n"
        );
        assert_eq!(encoded(&Reply::Bool(true), Proto::Resp3), "#t\r\n");
        assert_eq!(encoded(&Reply::Bool(false), Proto::Resp2), ":0\r\n");
        let v = Reply::Verbatim("txt", b"a:1".to_vec());
        assert_eq!(encoded(&v, Proto::Resp3), "=7\r\ntxt:a:1\r\n");
        assert_eq!(encoded(&v, Proto::Resp2), "$3\r\na:1\r\n");
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
