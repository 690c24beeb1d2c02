//! Agreed strings over RESP, for the chaos run and the simulation: the
//! command of each call of the linearizability checker (compares as
//! scripts of their key, or as `SET ... IFEQ` and `DELEX`), the replies
//! they get, and what each reply says the call did.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use crate::checker::linear::{Answer, Call};

/// Compare-and-set as a script of its key: 1 if it set.
const CAS: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                   redis.call('SET', KEYS[1], ARGV[2]) return 1 end return 0";
/// Compare-and-delete as a script of its key: 1 if it deleted.
const CAD: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                   return redis.call('DEL', KEYS[1]) end return 0";

/// A reply, as far as these commands need it.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// A simple string (`+OK`).
    Ok,
    /// Nil.
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
}

/// The command of `call` on the string `key` (`scripted`: a compare as
/// a script).
pub fn command(key: &str, call: &Call, scripted: bool) -> Vec<u8> {
    let words: Vec<&[u8]> = match call {
        Call::Write(v) => vec![b"SET", key.as_bytes(), v],
        Call::SetIfAbsent(v) => vec![b"SET", key.as_bytes(), v, b"NX"],
        Call::Delete => vec![b"DEL", key.as_bytes()],
        Call::Read => vec![b"GET", key.as_bytes()],
        Call::Cas { expected, new } if scripted => {
            vec![b"EVAL", CAS.as_bytes(), b"1", key.as_bytes(), expected, new]
        }
        Call::Cas { expected, new } => vec![b"SET", key.as_bytes(), new, b"IFEQ", expected],
        Call::DeleteIf(v) if scripted => vec![b"EVAL", CAD.as_bytes(), b"1", key.as_bytes(), v],
        Call::DeleteIf(v) => vec![b"DELEX", key.as_bytes(), b"IFEQ", v],
    };
    crate::resp_command(&words)
}

/// What `reply` says `call` did; `None` for a reply it cannot give.
pub fn answer(call: &Call, reply: Reply) -> Option<Answer> {
    Some(match (call, reply) {
        // `HSET` answers how many fields are new: done either way.
        (Call::Write(_), Reply::Ok | Reply::Int(_)) => Answer::Done,
        (Call::SetIfAbsent(_), Reply::Ok) => Answer::Applied(true),
        (Call::SetIfAbsent(_), Reply::Int(n)) => Answer::Applied(n == 1),
        (Call::SetIfAbsent(_), Reply::Nil) => Answer::Applied(false),
        (Call::Delete | Call::DeleteIf(_), Reply::Int(n)) => Answer::Applied(n > 0),
        (Call::Cas { .. }, Reply::Ok) => Answer::Applied(true),
        (Call::Cas { .. }, Reply::Nil) => Answer::Applied(false),
        (Call::Cas { .. }, Reply::Int(n)) => Answer::Applied(n == 1),
        (Call::Read, Reply::Nil) => Answer::Value(None),
        (Call::Read, Reply::Bulk(v)) => Answer::Value(Some(v)),
        _ => return None,
    })
}

/// One reply: `None` when the connection broke, an error reply as `Err`
/// (its first 48 characters).
pub async fn read_reply<S: AsyncRead + Unpin>(
    c: &mut BufReader<S>,
) -> Option<Result<Reply, String>> {
    let mut l = String::new();
    c.read_line(&mut l).await.ok().filter(|&n| n > 0)?;
    let l = l.strip_suffix("\r\n")?;
    let rest = l.get(1..)?;
    Some(match l.as_bytes().first()? {
        b'+' => Ok(Reply::Ok),
        b'-' => Err(l.chars().take(48).collect()),
        b':' => Ok(Reply::Int(rest.parse().ok()?)),
        b'$' if l == "$-1" => Ok(Reply::Nil),
        b'$' => {
            let len: usize = rest.parse().ok()?;
            let mut bulk = vec![0; len.checked_add(2)?];
            c.read_exact(&mut bulk).await.ok()?;
            bulk.truncate(len);
            Ok(Reply::Bulk(bulk))
        }
        b'_' => Ok(Reply::Nil),
        _ => Err(format!("unexpected reply {l}")),
    })
}
