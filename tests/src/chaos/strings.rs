//! Strings under chaos: every worker changes and reads the same few string
//! keys through random nodes' RESP ports (`SET`, `SET ... NX`, `GET`,
//! `DEL`, and compare-and-set and compare-and-delete from the value it last
//! saw, each either native, `SET ... IFEQ` and `DELEX ... IFEQ`, or as a
//! script of the key, which runs as one agreed change), the same on string
//! fields of one hash (`HSET`, `HSETNX`, `HDEL`, `HGET`: each field a
//! register of its own, in one partition's agreed state), the same on
//! members of one sorted set (`ZADD`, `ZADD NX`, `ZREM`, `ZSCORE`: each
//! member's score a register, the set one agreed value), races to take
//! fresh keys (`SET NX` on a key nothing held, a new one every
//! [`FRESH_EVERY`], which proposers take at a first ballot, without a
//! prepare), and sets cold keys once (`SET NX`) and reads them while
//! ranges move, one command at a time, recording when each was sent and
//! when it answered. An error, a timeout or a broken connection leaves a change's
//! outcome unknown (it may take effect late or never) and a read
//! unrecorded. After healing, each key is read through every member, and
//! each key's whole history is judged by
//! [`crate::checker::linear::check`]: linearizable, or a violation. With
//! `TALLY_STRING_HISTORY=DIR` each key's history is also written to
//! `DIR/<key>.txt`, in call order, for a violation's post-mortem.
//!
//! Caught so far: a proposer that was outbid after it proposed and then
//! tried again applied its change twice when another proposer had
//! finished its value meanwhile (a `SET NX` answered nil while holding the
//! lock for its own token); fixed in `agree::propose`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncWriteExt, BufReader};

use super::secure::{self, RespStream};
use crate::checker::linear::{Answer, Call, Op, check};
use crate::resp_work::strings::{self, Reply, answer, read_reply};

/// A broken build of the agreement path, for the linearizability checker
/// to catch (`tallyd-faults`' flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BrokenAgreement {
    /// Proposers skip the prepare (`--unsafe-skip-prepare`).
    SkipPrepare,
    /// Acceptors answer a prepare before storing the promise
    /// (`--unsafe-promise-late`).
    PromiseLate,
    /// Reads answer the committed value and leave one in flight
    /// unfinished (`--unsafe-read-skips-in-flight`).
    ReadSkipsInFlight,
    /// Scripts of one key apply their result over whatever the key holds
    /// (`--unsafe-script-skips-compare`).
    ScriptSkipsCompare,
    /// Ring changes leave agreed state behind
    /// (`--unsafe-skip-agreed-handoff`).
    SkipAgreedHandoff,
    /// Proposals at first ballots count as regular ones: decided by a
    /// quorum, the highest one read (`--unsafe-first-ballot-as-regular`).
    FirstBallotAsRegular,
}

impl BrokenAgreement {
    /// The node's flag for it.
    pub fn flag(self) -> &'static str {
        match self {
            BrokenAgreement::SkipPrepare => "--unsafe-skip-prepare",
            BrokenAgreement::PromiseLate => "--unsafe-promise-late",
            BrokenAgreement::ReadSkipsInFlight => "--unsafe-read-skips-in-flight",
            BrokenAgreement::ScriptSkipsCompare => "--unsafe-script-skips-compare",
            BrokenAgreement::SkipAgreedHandoff => "--unsafe-skip-agreed-handoff",
            BrokenAgreement::FirstBallotAsRegular => "--unsafe-first-ballot-as-regular",
        }
    }
}

/// The string keys every worker shares.
const KEYS: usize = 3;
/// The string fields of [`HASH`] every worker shares, each logged as a
/// key of its own, `chaos-field-<n>`.
const FIELDS: usize = 2;
/// The hash whose string fields the workers share.
const HASH: &str = "chaos-hash";
/// The members of [`ZSET`] every worker shares, each logged as a key of
/// its own, `chaos-member-<n>`, its score the value.
const MEMBERS: usize = 2;
/// The sorted set whose members the workers share.
const ZSET: &str = "chaos-zset";
/// Cold keys: set once (`SET ... NX`, the first one wins) and then only
/// read, a lease or a setting that sits while ranges move; a ring change
/// that leaves agreed state behind loses them.
const COLD_KEYS: usize = 6;

/// How often a new fresh key comes: the workers that pick one wait for
/// its start and race to take it, through different nodes.
const FRESH_EVERY: Duration = Duration::from_millis(200);

/// Every key a worker touches but the fresh ones: the shared ones, the
/// hash's fields, then the cold ones.
fn keys() -> impl Iterator<Item = String> {
    let shared = (0..KEYS).map(|k| format!("chaos-str-{k}"));
    let fields = (0..FIELDS).map(|k| format!("chaos-field-{k}"));
    let members = (0..MEMBERS).map(|k| format!("chaos-member-{k}"));
    let cold = (0..COLD_KEYS).map(|k| format!("chaos-cold-{k}"));
    shared.chain(fields).chain(members).chain(cold)
}
/// How long a reply may take before the command's outcome is unknown.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// What the workers did: per key, its operations.
#[derive(Debug, Default)]
pub(crate) struct StringLog {
    /// Key → operations, in no particular order.
    pub(crate) keys: BTreeMap<String, Vec<Op>>,
    /// Why commands got no answer (the start of each error), and how often.
    pub(crate) errors: BTreeMap<String, usize>,
}

impl StringLog {
    /// Merges another worker's log into this one.
    pub(crate) fn absorb(&mut self, other: StringLog) {
        for (k, ops) in other.keys {
            self.keys.entry(k).or_default().extend(ops);
        }
        for (e, n) in other.errors {
            *self.errors.entry(e).or_default() += n;
        }
    }

    /// Operations recorded, and how many of them answered.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let all = self.keys.values().flatten();
        let known = all.clone().filter(|o| o.answer != Answer::Unknown).count();
        (all.count(), known)
    }
}

type Conn = BufReader<RespStream>;

/// One worker (`w`): changes and reads the shared keys until `stop`.
pub(crate) async fn worker(
    w: usize,
    addrs: Vec<SocketAddr>,
    seed: u64,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> StringLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut conns: Vec<Option<Conn>> = addrs.iter().map(|_| None).collect();
    let mut log = StringLog::default();
    // The value this worker last saw each key hold: what its compares name.
    let mut seen: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        let value = format!("w{w}-{n}").into_bytes();
        n += 1;
        let (key, call) = match rng.random_range(0..11) {
            0 => cold(&mut rng, value),
            1 => field(&mut rng, value),
            // A score: an integer a double holds exactly, which `ZSCORE`
            // answers in the same digits.
            2 => member(&mut rng, ((w as u64 + 1) * 1_000_000_000 + n).to_string()),
            3 => fresh(&mut rng, started, value).await,
            _ => shared(&mut rng, &seen, value),
        };
        let scripted = rng.random_bool(0.5);
        let node = rng.random_range(0..addrs.len());
        let invoked = since(started);
        let Some(reply) = send(&mut conns[node], addrs[node], &key, &call, scripted).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let completed = since(started);
        let answer = match reply.map(|r| answer(&call, r)) {
            Ok(Some(a)) => a,
            Ok(None) => Answer::Unknown,
            Err(why) => {
                let refused = why.starts_with("-ERR value is not an integer")
                    || why.starts_with("-WRONGTYPE");
                *log.errors.entry(why).or_default() += 1;
                // Refused before anything was agreed: it never happened.
                if refused {
                    continue;
                }
                Answer::Unknown
            }
        };
        // A read that did not answer says nothing.
        if call == Call::Read && answer == Answer::Unknown {
            continue;
        }
        remember(&mut seen, &key, &call, &answer);
        let op = Op {
            call,
            answer,
            invoked,
            completed,
        };
        log.keys.entry(key).or_default().push(op);
    }
    log
}

/// An operation on a shared key: any change, or a read.
fn shared(rng: &mut SmallRng, seen: &BTreeMap<String, Vec<u8>>, value: Vec<u8>) -> (String, Call) {
    let key = format!("chaos-str-{}", rng.random_range(0..KEYS));
    let call = match (rng.random_range(0..7), seen.get(&key).cloned()) {
        (0, _) => Call::Write(value),
        (1, _) => Call::SetIfAbsent(value),
        (2, _) => Call::Delete,
        (3, Some(expected)) => Call::Cas {
            expected,
            new: value,
        },
        (4, Some(expected)) => Call::DeleteIf(expected),
        _ => Call::Read,
    };
    (key, call)
}

/// An operation on a string field of the shared hash: a set, a set if
/// absent, a delete or a read (a hash has no compare-and-set).
fn field(rng: &mut SmallRng, value: Vec<u8>) -> (String, Call) {
    let key = format!("chaos-field-{}", rng.random_range(0..FIELDS));
    let call = match rng.random_range(0..6) {
        0 => Call::Write(value),
        1 => Call::SetIfAbsent(value),
        2 => Call::Delete,
        _ => Call::Read,
    };
    (key, call)
}

/// An operation on a member of the shared sorted set: an add, an add if
/// absent, a removal or a read of its score (`score`, a new one).
fn member(rng: &mut SmallRng, score: String) -> (String, Call) {
    let key = format!("chaos-member-{}", rng.random_range(0..MEMBERS));
    let score = score.into_bytes();
    let call = match rng.random_range(0..6) {
        0 => Call::Write(score),
        1 => Call::SetIfAbsent(score),
        2 => Call::Delete,
        _ => Call::Read,
    };
    (key, call)
}

/// An operation on a cold key: its one `SET NX`, or a read.
fn cold(rng: &mut SmallRng, value: Vec<u8>) -> (String, Call) {
    let key = format!("chaos-cold-{}", rng.random_range(0..COLD_KEYS));
    match rng.random_bool(0.2) {
        true => (key, Call::SetIfAbsent(value)),
        false => (key, Call::Read),
    }
}

/// An operation on a fresh key: `SET NX` of the next one once it comes
/// (with whichever other workers picked it), or a read of the last one.
async fn fresh(rng: &mut SmallRng, started: Instant, value: Vec<u8>) -> (String, Call) {
    let every = FRESH_EVERY.as_millis();
    let next = started.elapsed().as_millis() / every + 1;
    if rng.random_bool(0.3) {
        return (format!("chaos-fresh-{}", next - 1), Call::Read);
    }
    let at = started + Duration::from_millis(u64::try_from(next * every).unwrap_or(u64::MAX));
    tokio::time::sleep_until(at.into()).await;
    (format!("chaos-fresh-{next}"), Call::SetIfAbsent(value))
}

/// Notes what `call`'s `answer` shows `key` holds.
fn remember(seen: &mut BTreeMap<String, Vec<u8>>, key: &str, call: &Call, answer: &Answer) {
    match (call, answer) {
        (Call::Read, Answer::Value(Some(v)))
        | (Call::Write(v), Answer::Done)
        | (Call::SetIfAbsent(v), Answer::Applied(true))
        | (Call::Cas { new: v, .. }, Answer::Applied(true)) => {
            seen.insert(key.to_string(), v.clone());
        }
        _ => {}
    }
}

fn since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The command of `call` on `key` (`scripted`: its compares as scripts).
fn command(key: &str, call: &Call, scripted: bool) -> Vec<u8> {
    if let Some(n) = key.strip_prefix("chaos-field-") {
        return field_command(&format!("f{n}"), call);
    }
    if let Some(n) = key.strip_prefix("chaos-member-") {
        return member_command(&format!("m{n}"), call);
    }
    strings::command(key, call, scripted)
}

/// The command of `call` on the shared hash's `field`.
fn field_command(field: &str, call: &Call) -> Vec<u8> {
    let (hash, field) = (HASH.as_bytes(), field.as_bytes());
    let words: Vec<&[u8]> = match call {
        Call::Write(v) => vec![b"HSET", hash, field, v],
        Call::SetIfAbsent(v) => vec![b"HSETNX", hash, field, v],
        Call::Delete => vec![b"HDEL", hash, field],
        _ => vec![b"HGET", hash, field],
    };
    crate::resp_command(&words)
}

/// The command of `call` on the shared sorted set's `member`.
fn member_command(member: &str, call: &Call) -> Vec<u8> {
    let (zset, member) = (ZSET.as_bytes(), member.as_bytes());
    let words: Vec<&[u8]> = match call {
        Call::Write(score) => vec![b"ZADD", zset, score, member],
        Call::SetIfAbsent(score) => vec![b"ZADD", zset, b"NX", score, member],
        Call::Delete => vec![b"ZREM", zset, member],
        _ => vec![b"ZSCORE", zset, member],
    };
    crate::resp_command(&words)
}

/// Sends `call` on `key` through `addr`: its reply, or why there is none;
/// `None` when nothing was sent (no connection). A connection that failed
/// is dropped.
async fn send(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    key: &str,
    call: &Call,
    scripted: bool,
) -> Option<Result<Reply, String>> {
    if conn.is_none() {
        let dialed = tokio::time::timeout(Duration::from_secs(5), secure::resp(addr)).await;
        *conn = dialed.ok().and_then(Result::ok);
    }
    let c = conn.as_mut()?;
    let command = command(key, call, scripted);
    let reply = async {
        c.get_mut().write_all(&command).await.ok()?;
        c.get_mut().flush().await.ok()?;
        read_reply(c).await
    };
    Some(match tokio::time::timeout(REPLY_TIMEOUT, reply).await {
        Ok(Some(Ok(r))) => Ok(r),
        Ok(Some(Err(e))) => Err(e),
        answer => {
            *conn = None;
            Err(match answer {
                Err(_) => "no reply in time".into(),
                _ => "the connection broke".into(),
            })
        }
    })
}

/// Reads every key through every member (`addrs`), adds those reads to the
/// histories as after everything else, and judges each key's history;
/// answers the violations.
pub(crate) async fn check_all(
    addrs: &[SocketAddr],
    log: &mut StringLog,
    started: Instant,
) -> Vec<String> {
    let mut violations = Vec::new();
    // Every fresh key too, each through one member (there are many).
    let fresh: Vec<String> = log
        .keys
        .keys()
        .filter(|k| k.starts_with("chaos-fresh-"))
        .cloned()
        .collect();
    let through = |i: usize| match i < KEYS + FIELDS + MEMBERS + COLD_KEYS {
        true => (0..addrs.len()).collect::<Vec<_>>(),
        false => vec![i % addrs.len()],
    };
    for (i, key) in keys().chain(fresh).enumerate() {
        for node in through(i) {
            let addr = &addrs[node];
            let mut conn = None;
            let invoked = since(started);
            match send(&mut conn, *addr, &key, &Call::Read, false).await {
                Some(Ok(r)) => {
                    if let Some(answer) = answer(&Call::Read, r) {
                        let completed = since(started);
                        log.keys.entry(key.clone()).or_default().push(Op {
                            call: Call::Read,
                            answer,
                            invoked,
                            completed,
                        });
                    }
                }
                other => violations.push(format!(
                    "string {key} cannot be read through n{}: {}",
                    node + 1,
                    match other {
                        Some(Err(e)) => e,
                        _ => "no connection".into(),
                    }
                )),
            }
        }
    }
    for (key, ops) in &log.keys {
        if let Ok(dir) = std::env::var("TALLY_STRING_HISTORY") {
            let mut sorted = ops.clone();
            sorted.sort_by_key(|o| o.invoked);
            let text: Vec<String> = sorted.iter().map(|o| format!("{o:?}")).collect();
            let _ = std::fs::write(format!("{dir}/{key}.txt"), text.join("\n"));
        }
        if let Err(v) = check(ops) {
            violations.push(format!(
                "string {key} is not linearizable: {} operations; the longest linearizable prefix has {}, then {:?}",
                ops.len(),
                v.prefix.len(),
                ops[v.stuck]
            ));
        }
    }
    violations
}
