//! Strings in the simulation: clients read and change a few string keys
//! through random nodes (set, set-if-absent, compare-and-set from the
//! value last seen, delete, compare-and-delete), each change agreed by
//! Paxos. Each key's history is judged by the chaos harness's
//! linearizability checker. An error or a timeout leaves a change's
//! outcome unknown and a read unrecorded.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::wire::{Deadline, StringCondition};
use tally_tests::checker::linear::{Answer, Call, Op};

use crate::cluster::Cluster;
use crate::trace;
use crate::workload::now_ns;
use crate::world::{Stream, stream};

/// The string keys.
pub const STRING_KEYS: usize = 2;
/// How long a client waits for an answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// String key `k`.
pub fn string_key(k: usize) -> Vec<u8> {
    format!("sim-string:{k}").into_bytes()
}

/// One operation, and on which key.
pub struct KeyOp {
    /// The key's index.
    pub key: usize,
    /// What was asked and answered, when.
    pub op: Op,
}

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
    while tally_world::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..80))).await;
        let at = rng.random_range(0..cluster.len());
        let Some(node) = cluster.node(at) else {
            continue;
        };
        let key = rng.random_range(0..STRING_KEYS);
        n += 1;
        let fresh = format!("c{id}-{n}").into_bytes();
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
        let invoked = now_ns();
        let answer = match tokio::time::timeout(TIMEOUT, send(&node, key, &call)).await {
            Ok(Some(answer)) => answer,
            // Certainly not applied: it had no effect to judge.
            Ok(None) => continue,
            Err(_) => Answer::Unknown,
        };
        drop(node);
        if let Answer::Value(v) = &answer {
            seen[key] = v.clone();
        }
        if answer == Answer::Unknown && call == Call::Read {
            continue;
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
        history.push(KeyOp { key, op });
    }
    history
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

/// Every string key read through every node, after healing.
pub async fn final_reads(cluster: &Cluster, violations: &mut Vec<String>) -> Vec<KeyOp> {
    let mut ops = Vec::new();
    for n in cluster.membership().members {
        let Some(node) = cluster.node(n) else {
            continue;
        };
        for key in 0..STRING_KEYS {
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
    (0..STRING_KEYS)
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
