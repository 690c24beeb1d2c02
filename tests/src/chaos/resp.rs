//! Chaos over RESP: workers that send pipelines of `INCRBY` and `GET` to
//! one node's RESP port, at a level chosen per pipeline with `CLIENT
//! CONSISTENCY`, and now and then a `SET` or a `PEXPIREAT` (a fraction of
//! a second ahead) of a reset key. The node runs a pipeline's commands at once (see
//! `tally_node::client::resp::pipeline`), so every command of it is recorded as
//! invoked when the pipeline was sent and completed when its own reply
//! came; the checker judges them with everything else.
//!
//! A share of the adds and reads go as scripts (`EVAL`, see `scripts`),
//! each worker logged in as a user of its own in a secure run.
//!
//! A RESP error does not say whether an add was applied, so every refused
//! or unanswered add is recorded as unknown, never as failed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::Consistency;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::scripts;
use super::secure::{self, RespStream};
use super::workload::{key_name, wall_ms};
use crate::checker::{Kind, Op, Outcome};

/// Most commands in one pipeline.
const PIPELINE_MAX: usize = 16;
/// The share of a reset key's commands that are a SET or a PEXPIREAT.
const CHANGE_SHARE: f64 = 0.03;
/// The share of adds and reads sent as scripts.
const SCRIPT_SHARE: f64 = 0.3;
/// How long a reply may take before the rest of its pipeline is unknown.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

const LEVELS: [(Consistency, &str); 3] = [
    (Consistency::One, "ONE"),
    (Consistency::Quorum, "QUORUM"),
    (Consistency::All, "ALL"),
];

/// One reply, as far as the history cares.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Int(i64),
    Nil,
    Other,
    Error,
}

/// Reads one reply (never an aggregate here); `None` if the connection
/// broke or the reply is malformed.
async fn answer(r: &mut BufReader<RespStream>) -> Option<Answer> {
    let mut line = String::new();
    r.read_line(&mut line).await.ok().filter(|&n| n > 0)?;
    let body = line.strip_suffix("\r\n")?;
    let (tag, rest) = body.split_at(1);
    match tag {
        ":" => rest.parse().ok().map(Answer::Int),
        "+" => Some(Answer::Other),
        "-" => Some(Answer::Error),
        "$" if rest == "-1" => Some(Answer::Nil),
        "$" => {
            let len: usize = rest.parse().ok()?;
            let mut bulk = vec![0; len + 2];
            r.read_exact(&mut bulk).await.ok()?;
            let text = std::str::from_utf8(&bulk[..len]).ok()?;
            Some(text.parse().map_or(Answer::Other, Answer::Int))
        }
        _ => None,
    }
}

/// What the history records of an add's or a read's reply.
fn outcome(kind: Kind, reply: Option<&Answer>) -> Outcome {
    match (kind, reply) {
        (_, Some(Answer::Int(v))) => Outcome::Ok(*v),
        (Kind::Set(_), Some(Answer::Other)) => Outcome::Ok(0),
        (Kind::Read, Some(Answer::Nil)) => Outcome::Ok(0),
        (Kind::Read, _) => Outcome::Fail,
        _ => Outcome::Unknown,
    }
}

/// One RESP client, logged in as `user` (in a secure run): pipelines
/// through one node until told to stop; reconnects when its node goes
/// away. Answers its history and how many of its scripts were answered.
pub(crate) async fn worker(
    (process, user): (usize, Option<&'static str>),
    addrs: Vec<SocketAddr>,
    (keys, reset_keys): (usize, std::ops::Range<usize>),
    seed: u64,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> (Vec<Op>, usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut node = process % addrs.len();
    let now = |t: Instant| u64::try_from(t.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
    let mut conn: Option<BufReader<RespStream>> = None;
    let mut history = Vec::new();
    let mut scripted = 0;
    while !stop.load(Ordering::Acquire) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                let dial = secure::resp_as(addrs[node], user);
                match tokio::time::timeout(Duration::from_secs(5), dial).await {
                    Ok(Ok(s)) => conn.insert(s),
                    _ => {
                        // Down, or gone from the ring: try the next node.
                        node = (node + 1) % addrs.len();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        let (cl, level) = LEVELS[rng.random_range(0..LEVELS.len())];
        let mut sent = format!("CLIENT CONSISTENCY {level}\r\n");
        let mut ops = Vec::new();
        for _ in 0..rng.random_range(1..=PIPELINE_MAX) {
            let key = rng.random_range(0..keys);
            let name = String::from_utf8_lossy(&key_name(key)).into_owned();
            let script = rng.random_bool(SCRIPT_SHARE);
            if reset_keys.contains(&key) && rng.random_bool(CHANGE_SHARE) {
                let (command, kind) = change(&mut rng, &name, started);
                sent.push_str(&command);
                ops.push((key, kind, false));
            } else if rng.random_bool(0.6) {
                let d = rng.random_range(-5..=10);
                let d = if d == 0 { 1 } else { d };
                match script {
                    true => {
                        sent.push_str(&scripts::eval(scripts::ADD, &name, Some(&d.to_string())))
                    }
                    false => sent.push_str(&format!("INCRBY {name} {d}\r\n")),
                }
                ops.push((key, Kind::Add(d), script));
            } else {
                match script {
                    true => sent.push_str(&scripts::eval(scripts::GET, &name, None)),
                    false => sent.push_str(&format!("GET {name}\r\n")),
                }
                ops.push((key, Kind::Read, script));
            }
        }
        let invoke = Instant::now();
        let mut broken = c.get_mut().write_all(sent.as_bytes()).await.is_err()
            || c.get_mut().flush().await.is_err();
        let level_set = !broken
            && matches!(
                tokio::time::timeout(REPLY_TIMEOUT, answer(c)).await,
                Ok(Some(Answer::Other))
            );
        broken |= !level_set;
        for (key, kind, script) in ops {
            let reply = if broken {
                None
            } else {
                tokio::time::timeout(REPLY_TIMEOUT, answer(c))
                    .await
                    .ok()
                    .flatten()
            };
            broken |= reply.is_none();
            scripted += usize::from(script && reply.is_some());
            history.push(Op {
                process,
                key,
                kind,
                cl,
                node,
                invoke_ns: now(invoke),
                complete_ns: now(Instant::now()),
                // An add sent at a level that was never set ran at the
                // connection's earlier one: unknown, as any add not answered.
                outcome: if level_set {
                    outcome(kind, reply.as_ref())
                } else {
                    outcome(kind, None)
                },
            });
        }
        if broken {
            conn = None;
        }
    }
    (history, scripted)
}

/// A SET, or a PEXPIREAT 200 ms to 1.5 s ahead (its deadline, in ns
/// since `started`, is the wall-clock one it sends: exact).
fn change(rng: &mut SmallRng, name: &str, started: Instant) -> (String, Kind) {
    if rng.random_bool(0.5) {
        let v = rng.random_range(-1_000..=1_000);
        return (format!("SET {name} {v}\r\n"), Kind::Set(v));
    }
    let ttl_ms = rng.random_range(200..=1_500);
    let at_ms = wall_ms() + ttl_ms;
    let run_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let at_ns = run_ns + ttl_ms * 1_000_000;
    (
        format!("PEXPIREAT {name} {at_ms}\r\n"),
        Kind::Expire { at_ns },
    )
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
}
