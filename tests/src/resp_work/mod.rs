//! The counter work RESP clients do, shared by the chaos run (over
//! sockets) and the simulation (through pipes in memory): pipelines of
//! `INCRBY` and `GET` at a level chosen per pipeline with `CLIENT
//! CONSISTENCY`, now and then a `SET` or a `PEXPIREAT` (a fraction of a
//! second ahead) of a reset key, a share of the adds and reads sent as
//! scripts (`EVAL`). The node runs a pipeline's commands at once, so each
//! is recorded as invoked when the pipeline was sent and completed when
//! its own reply came; the checker judges them with everything else.
//!
//! A RESP error does not say whether an add was applied, so every refused
//! or unanswered add is recorded as unknown, never as failed.
//!
//! Also here: what a hostile user's scripts try ([`PLANTS`]), each of
//! which, if it took, would make the others' scripts answer adds they
//! did not make; and agreed strings over RESP ([`strings`]).

pub mod strings;

use std::ops::Range;
use std::time::Duration;

use rand::Rng;
use rand::rngs::SmallRng;
use tally_net::Consistency;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::checker::{Kind, Op, Outcome};

/// Most commands in one pipeline.
const PIPELINE_MAX: usize = 16;
/// The share of a reset key's commands that are a SET or a PEXPIREAT.
const CHANGE_SHARE: f64 = 0.03;
/// The share of adds and reads sent as scripts.
const SCRIPT_SHARE: f64 = 0.3;
/// How long a reply may take before the rest of its pipeline is unknown.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

const LEVELS: [(Consistency, &str); 3] = [
    (Consistency::One, "ONE"),
    (Consistency::Quorum, "QUORUM"),
    (Consistency::All, "ALL"),
];

/// An add as a script: answers the counter's value after it.
pub const ADD: &str = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
/// A read as a script: the value, or nil.
pub const GET: &str = "return redis.call('GET', KEYS[1])";

/// What the hostile user's scripts try: each, if it took, would change
/// what later scripts on the same interpreter run.
pub const PLANTS: &[&str] = &[
    "redis.call = function() return 0 end",
    "rawset(redis, 'call', function() return 0 end)",
    "tonumber = function() return 0 end",
    "string.format = nil",
    "setmetatable(_G, {__index = function() return 0 end})",
    "getmetatable('').__index = {}",
    "stolen = KEYS",
];

/// `EVAL body 1 key arg` as a RESP array.
pub fn eval(body: &str, key: &str, arg: Option<&str>) -> String {
    let mut words = vec!["EVAL", body, "1", key];
    words.extend(arg);
    let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    String::from_utf8_lossy(&crate::resp_command(&words)).into_owned()
}

/// One reply, as far as the history cares.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// An integer, or a bulk string that reads as one.
    Int(i64),
    /// Nil.
    Nil,
    /// Anything else that is not an error (`+OK`, a bulk string).
    Other,
    /// An error.
    Error,
}

/// Reads one reply (never an aggregate here); `None` if the connection
/// broke or the reply is malformed.
pub async fn answer<S: AsyncRead + Unpin>(r: &mut BufReader<S>) -> Option<Answer> {
    let mut line = String::new();
    r.read_line(&mut line).await.ok().filter(|&n| n > 0)?;
    let body = line.strip_suffix("\r\n")?;
    let (tag, rest) = body.split_at_checked(1)?;
    match tag {
        ":" => rest.parse().ok().map(Answer::Int),
        "+" => Some(Answer::Other),
        "-" => Some(Answer::Error),
        "$" if rest == "-1" => Some(Answer::Nil),
        "$" => {
            let len: usize = rest.parse().ok()?;
            let mut bulk = vec![0; len.checked_add(2)?];
            r.read_exact(&mut bulk).await.ok()?;
            let text = std::str::from_utf8(&bulk[..len]).ok()?;
            Some(text.parse().map_or(Answer::Other, Answer::Int))
        }
        _ => None,
    }
}

/// What the history records of an add's or a read's reply.
pub fn outcome(kind: Kind, reply: Option<&Answer>) -> Outcome {
    match (kind, reply) {
        (_, Some(Answer::Int(v))) => Outcome::Ok(*v),
        (Kind::Set(_), Some(Answer::Other)) => Outcome::Ok(0),
        (Kind::Read, Some(Answer::Nil)) => Outcome::Ok(0),
        (Kind::Read, _) => Outcome::Fail,
        _ => Outcome::Unknown,
    }
}

/// The counters a client works on: `count` keys named by `name`, those
/// in `reset` also SET and expired.
pub struct Keys {
    /// How many: keys `0..count`.
    pub count: usize,
    /// The keys also SET and expired.
    pub reset: Range<usize>,
    /// Key `k`'s name.
    pub name: fn(usize) -> String,
}

/// The clocks a pipeline's deadlines are read from: the run's (ns since
/// it began, as the history's) and the wall clock's (ms).
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    /// The run's clock: ns since it began.
    pub run_ns: u64,
    /// The wall clock: ms since the Unix epoch.
    pub wall_ms: u64,
}

/// A pipeline to send: its bytes, the level it sets first, and the
/// operation of each command after that (key, kind, whether a script).
pub struct Pipeline {
    /// The commands, as sent.
    pub bytes: Vec<u8>,
    /// The level `CLIENT CONSISTENCY` sets first.
    pub cl: Consistency,
    ops: Vec<(usize, Kind, bool)>,
}

/// The next pipeline: 1 to [`PIPELINE_MAX`] commands on `keys`.
pub fn pipeline(rng: &mut SmallRng, keys: &Keys, clocks: Clocks) -> Pipeline {
    let (cl, level) = LEVELS[rng.random_range(0..LEVELS.len())];
    let mut sent = format!("CLIENT CONSISTENCY {level}\r\n");
    let mut ops = Vec::new();
    for _ in 0..rng.random_range(1..=PIPELINE_MAX) {
        let key = rng.random_range(0..keys.count);
        let name = (keys.name)(key);
        let script = rng.random_bool(SCRIPT_SHARE);
        if keys.reset.contains(&key) && rng.random_bool(CHANGE_SHARE) {
            let (command, kind) = change(rng, &name, clocks);
            sent.push_str(&command);
            ops.push((key, kind, false));
        } else if rng.random_bool(0.6) {
            let d = rng.random_range(-5..=10);
            let d = if d == 0 { 1 } else { d };
            match script {
                true => sent.push_str(&eval(ADD, &name, Some(&d.to_string()))),
                false => sent.push_str(&format!("INCRBY {name} {d}\r\n")),
            }
            ops.push((key, Kind::Add(d), script));
        } else {
            match script {
                true => sent.push_str(&eval(GET, &name, None)),
                false => sent.push_str(&format!("GET {name}\r\n")),
            }
            ops.push((key, Kind::Read, script));
        }
    }
    Pipeline {
        bytes: sent.into_bytes(),
        cl,
        ops,
    }
}

/// A SET, or a PEXPIREAT 200 ms to 1.5 s ahead (its deadline in the run's
/// clock is the wall-clock one it sends: exact).
fn change(rng: &mut SmallRng, name: &str, clocks: Clocks) -> (String, Kind) {
    if rng.random_bool(0.5) {
        let v = rng.random_range(-1_000..=1_000);
        return (format!("SET {name} {v}\r\n"), Kind::Set(v));
    }
    let ttl_ms = rng.random_range(200..=1_500);
    let at_ms = clocks.wall_ms + ttl_ms;
    let at_ns = clocks.run_ns + ttl_ms * 1_000_000;
    (
        format!("PEXPIREAT {name} {at_ms}\r\n"),
        Kind::Expire { at_ns },
    )
}

/// What a pipeline's exchange came to.
pub struct Exchanged {
    /// Its operations, as the history records them.
    pub ops: Vec<Op>,
    /// How many of its scripts were answered.
    pub scripted: usize,
    /// The connection broke (or a reply did not come in time): it is of
    /// no more use.
    pub broken: bool,
}

/// Sends `p` on `c` as `process` (connected to `node`) and reads its
/// replies, each op completed at `now()` (the run's clock, ns) when its
/// reply came. `invoke_ns` is when it was sent.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    c: &mut BufReader<S>,
    p: Pipeline,
    (process, node): (usize, usize),
    now: impl Fn() -> u64,
) -> Exchanged {
    let invoke_ns = now();
    let mut broken =
        c.get_mut().write_all(&p.bytes).await.is_err() || c.get_mut().flush().await.is_err();
    let level_set = !broken
        && matches!(
            tokio::time::timeout(REPLY_TIMEOUT, answer(c)).await,
            Ok(Some(Answer::Other))
        );
    broken |= !level_set;
    let mut done = Exchanged {
        ops: Vec::new(),
        scripted: 0,
        broken: false,
    };
    for (key, kind, script) in p.ops {
        let reply = match broken {
            true => None,
            false => tokio::time::timeout(REPLY_TIMEOUT, answer(c))
                .await
                .ok()
                .flatten(),
        };
        broken |= reply.is_none();
        done.scripted += usize::from(script && reply.is_some());
        done.ops.push(Op {
            process,
            key,
            kind,
            cl: p.cl,
            node,
            invoke_ns,
            complete_ns: now(),
            // An add sent at a level that was never set ran at the
            // connection's earlier one: unknown, as any add not answered.
            outcome: outcome(kind, reply.as_ref().filter(|_| level_set)),
        });
    }
    done.broken = broken;
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_answered_values_are_ok_and_a_refused_add_is_unknown() {
        assert_eq!(outcome(Kind::Add(3), Some(&Answer::Int(7))), Outcome::Ok(7));
        assert_eq!(
            outcome(Kind::Add(3), Some(&Answer::Error)),
            Outcome::Unknown
        );
        assert_eq!(outcome(Kind::Add(3), None), Outcome::Unknown);
        assert_eq!(outcome(Kind::Read, Some(&Answer::Nil)), Outcome::Ok(0));
        assert_eq!(outcome(Kind::Read, Some(&Answer::Int(-2))), Outcome::Ok(-2));
        assert_eq!(outcome(Kind::Read, Some(&Answer::Error)), Outcome::Fail);
        assert_eq!(outcome(Kind::Read, None), Outcome::Fail);
        assert_eq!(outcome(Kind::Set(4), Some(&Answer::Other)), Outcome::Ok(0));
        assert_eq!(
            outcome(Kind::Set(4), Some(&Answer::Error)),
            Outcome::Unknown
        );
        let expire = Kind::Expire { at_ns: 9 };
        assert_eq!(outcome(expire, Some(&Answer::Int(0))), Outcome::Ok(0));
        assert_eq!(outcome(expire, None), Outcome::Unknown);
    }

    #[tokio::test]
    async fn replies_are_read_one_at_a_time_and_garbage_is_none() {
        let bytes: &[u8] = b":7\r\n$-1\r\n$2\r\n12\r\n$3\r\nabc\r\n+OK\r\n-ERR no\r\n";
        let mut r = BufReader::new(bytes);
        for want in [
            Answer::Int(7),
            Answer::Nil,
            Answer::Int(12),
            Answer::Other,
            Answer::Other,
            Answer::Error,
        ] {
            assert_eq!(answer(&mut r).await, Some(want));
        }
        assert_eq!(answer(&mut r).await, None, "the end");
        for garbage in [
            &b"\r\n"[..],
            b"$99999999999999999999\r\n",
            b"*1\r\n",
            b":x\r\n",
        ] {
            assert_eq!(answer(&mut BufReader::new(garbage)).await, None);
        }
    }
}
