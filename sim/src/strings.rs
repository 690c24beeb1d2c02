//! Strings in the simulation: clients read and change a few string keys
//! through random nodes (set, set-if-absent, compare-and-set from the
//! value last seen, delete, compare-and-delete), make keys of their own
//! and read them back, and race each other to make fresh keys; each
//! change agreed by Paxos. Half the calls go as a native client's, half
//! over RESP (through a pipe into the node's RESP port), where compares
//! are scripts of their key. Each key's history is judged by the chaos
//! harness's linearizability checker. An error or a timeout leaves a
//! change's outcome unknown and a read unrecorded.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::wire::{Deadline, StringCondition};
use tally_tests::checker::linear::{Answer, Call, Op};
use tally_tests::resp_work::strings::{answer, command, read_reply};
use tokio::io::{AsyncWriteExt, BufReader, DuplexStream};

use crate::cluster::Cluster;
use crate::trace;
use crate::workload::now_ns;
use crate::world::{Stream, stream};

/// The string keys.
pub const STRING_KEYS: usize = 2;
/// How long a client waits for an answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Cold keys a client may make: each is set once, then only read, so its
/// value lives in the agreed state a ring change must hand over.
const COLD_PER_CLIENT: usize = 100_000;
/// The share of a client's operations that make a cold key.
const COLD_SHARE: f64 = 0.05;

/// Fresh keys every client races to make: a new one each [`RACE_EVERY`]
/// of simulated time, from key index `RACE_FIRST` on.
const RACE_FIRST: usize = 1 << 40;
const RACE_EVERY: Duration = Duration::from_secs(2);
/// The share of a client's operations that race for a fresh key.
const RACE_SHARE: f64 = 0.05;

/// String key `k`: the hot ones first, then every client's cold ones,
/// then the raced ones.
pub fn string_key(k: usize) -> Vec<u8> {
    match k {
        _ if k < STRING_KEYS => format!("sim-string:{k}").into_bytes(),
        _ if k < RACE_FIRST => format!("sim-cold:{k}").into_bytes(),
        _ => format!("sim-race:{}", k - RACE_FIRST).into_bytes(),
    }
}

/// The fresh key every client races for now.
fn race_key() -> usize {
    let at = crate::world::SimWorld::elapsed();
    RACE_FIRST + (at.as_millis() / RACE_EVERY.as_millis()) as usize
}

/// The next call on one of client `id`'s cold keys: makes a new one
/// (`made` of them so far), or reads one it made.
fn cold_call(rng: &mut SmallRng, id: usize, made: &mut usize, fresh: Vec<u8>) -> (usize, Call) {
    let first = STRING_KEYS + id * COLD_PER_CLIENT;
    if *made == 0 || (rng.random_bool(COLD_SHARE) && *made < COLD_PER_CLIENT) {
        *made += 1;
        return (first + *made - 1, Call::SetIfAbsent(fresh));
    }
    (first + rng.random_range(0..*made), Call::Read)
}

/// One operation, and on which key.
pub struct KeyOp {
    /// The key's index.
    pub key: usize,
    /// What was asked and answered, when.
    pub op: Op,
}

/// A client's RESP connections, one to each node, made as needed.
type Conns = Vec<Option<BufReader<DuplexStream>>>;

/// One strings client, `id`, until `until`.
pub async fn client(
    id: usize,
    cluster: Arc<Cluster>,
    seed: u64,
    until: tally_world::Instant,
) -> Vec<KeyOp> {
    let mut rng = SmallRng::seed_from_u64(stream(seed, Stream::Client(id as u64)));
    let mut seen: Vec<Option<Vec<u8>>> = vec![None; STRING_KEYS];
    let mut history = Vec::new();
    let mut n = 0u64;
    let mut cold = 0;
    let mut conns: Conns = (0..cluster.len()).map(|_| None).collect();
    while tally_world::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..80))).await;
        let at = rng.random_range(0..cluster.len());
        if cluster.serving(at).is_none() {
            continue;
        }
        let via = match rng.random_bool(0.5) {
            true => Some(&mut conns),
            false => None,
        };
        n += 1;
        let fresh = format!("c{id}-{n}").into_bytes();
        if rng.random_bool(0.3) {
            let (key, call) = cold_call(&mut rng, id, &mut cold, fresh);
            history.extend(run(&cluster, (at, via), id, key, call).await);
            continue;
        }
        if rng.random_bool(RACE_SHARE) {
            let call = Call::SetIfAbsent(fresh);
            history.extend(run(&cluster, (at, via), id, race_key(), call).await);
            continue;
        }
        let key = rng.random_range(0..STRING_KEYS);
        let call = match (rng.random_range(0..6), seen[key].clone()) {
            (0, _) => Call::Read,
            (1, _) => Call::Write(fresh),
            (2, _) => Call::SetIfAbsent(fresh),
            (3, Some(v)) => Call::Cas {
                expected: v,
                new: fresh,
            },
            (4, Some(v)) => Call::DeleteIf(v),
            (5, _) => Call::Delete,
            _ => Call::Read,
        };
        let Some(op) = run(&cluster, (at, via), id, key, call).await else {
            continue;
        };
        if let Answer::Value(v) = &op.op.answer {
            seen[key] = v.clone();
        }
        history.push(op);
    }
    history
}

/// Runs `call` on `key` through node `at` if it is up, over RESP if
/// `via` holds the client's connections: the operation to judge, if
/// there is one (a read that failed, or a change that certainly did not
/// apply, tells nothing).
async fn run(
    cluster: &Cluster,
    (at, via): (usize, Option<&mut Conns>),
    id: usize,
    key: usize,
    call: Call,
) -> Option<KeyOp> {
    let node = cluster.serving(at)?;
    let invoked = now_ns();
    let answer = match via {
        Some(conns) => {
            drop(node);
            send_resp(cluster, &mut conns[at], at, key, &call).await?
        }
        None => match tokio::time::timeout(TIMEOUT, send(&node, key, &call)).await {
            Ok(Some(answer)) => answer,
            Ok(None) => return None,
            Err(_) => Answer::Unknown,
        },
    };
    if answer == Answer::Unknown && call == Call::Read {
        return None;
    }
    let op = Op {
        call,
        answer,
        invoked,
        completed: now_ns(),
    };
    trace!(
        "strings client {id} key {key} via n{}: {:?} -> {:?}",
        at + 1,
        op.call,
        op.answer
    );
    Some(KeyOp { key, op })
}

/// One call through `node`: its answer, or `None` when the node says it
/// certainly did not apply it.
async fn send(node: &tally_node::Node, key: usize, call: &Call) -> Option<Answer> {
    let k = string_key(key);
    let (value, condition) = match call {
        Call::Read => {
            return Some(match node.string(&k).await {
                Ok(s) => Answer::Value(s.map(|s| s.value)),
                Err(_) => Answer::Unknown,
            });
        }
        Call::Write(v) => (Some(v.clone()), StringCondition::Always),
        Call::SetIfAbsent(v) => (Some(v.clone()), StringCondition::Absent),
        Call::Cas { expected, new } => {
            (Some(new.clone()), StringCondition::Equals(expected.clone()))
        }
        Call::Delete => (None, StringCondition::Present),
        Call::DeleteIf(v) => (None, StringCondition::Equals(v.clone())),
    };
    match node.swap_string(k, value, condition, Deadline::Never).await {
        Ok(_) if matches!(call, Call::Write(_)) => Some(Answer::Done),
        Ok(swapped) => Some(Answer::Applied(swapped.applied)),
        Err(e) if e.outcome == tally_net::Outcome::NotApplied => None,
        Err(_) => Some(Answer::Unknown),
    }
}

/// One call over RESP through node `at`, on the connection `conn` (made
/// if there is none): its answer, or `None` when no connection could be
/// made (nothing was sent). A connection that broke or did not answer in
/// time is dropped; an error reply leaves the call's outcome unknown.
async fn send_resp(
    cluster: &Cluster,
    conn: &mut Option<BufReader<DuplexStream>>,
    at: usize,
    key: usize,
    call: &Call,
) -> Option<Answer> {
    if conn.is_none() {
        *conn = cluster.resp(at).map(BufReader::new);
    }
    let c = conn.as_mut()?;
    let bytes = command(&String::from_utf8_lossy(&string_key(key)), call, true);
    let reply = async {
        c.get_mut().write_all(&bytes).await.ok()?;
        c.get_mut().flush().await.ok()?;
        read_reply(c).await
    };
    match tokio::time::timeout(TIMEOUT, reply).await {
        Ok(Some(Ok(r))) => Some(answer(call, r).unwrap_or(Answer::Unknown)),
        Ok(Some(Err(_))) => Some(Answer::Unknown),
        Ok(None) | Err(_) => {
            *conn = None;
            Some(Answer::Unknown)
        }
    }
}

/// The keys `ops` touched, in order.
pub fn keys_of(ops: &[KeyOp]) -> Vec<usize> {
    let keys: std::collections::BTreeSet<usize> = ops.iter().map(|o| o.key).collect();
    keys.into_iter().collect()
}

/// Each of `keys` read through every member, after healing.
pub async fn final_reads(
    cluster: &Cluster,
    keys: &[usize],
    violations: &mut Vec<String>,
) -> Vec<KeyOp> {
    let mut ops = Vec::new();
    for n in cluster.membership().members {
        let Some(node) = cluster.node(n) else {
            continue;
        };
        for &key in keys {
            let invoked = now_ns();
            match send(&node, key, &Call::Read)
                .await
                .unwrap_or(Answer::Unknown)
            {
                Answer::Unknown => violations.push(format!(
                    "the final read of string key {key} through n{} failed",
                    n + 1
                )),
                answer => {
                    trace!(
                        "final read of string key {key} through n{}: {answer:?}",
                        n + 1
                    );
                    let completed = now_ns();
                    let op = Op {
                        call: Call::Read,
                        answer,
                        invoked,
                        completed,
                    };
                    ops.push(KeyOp { key, op });
                }
            }
        }
    }
    ops
}

/// Each key's history judged: linearizable, or a violation.
pub fn check(ops: &[KeyOp]) -> Vec<String> {
    keys_of(ops)
        .into_iter()
        .filter_map(|key| {
            let mut history: Vec<Op> = ops
                .iter()
                .filter(|o| o.key == key)
                .map(|o| o.op.clone())
                .collect();
            history.sort_by_key(|o| o.invoked);
            let applied = history
                .iter()
                .filter(|o| matches!(o.answer, Answer::Applied(true) | Answer::Done))
                .count();
            trace!(
                "string key {key}: {} operations, {applied} changes",
                history.len()
            );
            tally_tests::checker::linear::check(&history)
                .err()
                .map(|v| {
                    let stuck = &history[v.stuck];
                    format!(
                        "string key {key} is not linearizable: after a linearizable prefix of {} \
                     operations, {:?} -> {:?} [{:.3} s .. {:.3} s] can take effect nowhere",
                        v.prefix.len(),
                        stuck.call,
                        stuck.answer,
                        stuck.invoked as f64 / 1e9,
                        stuck.completed as f64 / 1e9,
                    )
                })
        })
        .collect()
}
