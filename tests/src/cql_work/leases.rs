//! Leases under chaos: workers take, renew, hand over and release a few
//! leases of a CQL table, `chaos.leases (name text PRIMARY KEY, owner
//! text)`, through random nodes' CQL ports by lightweight transactions
//! (`INSERT ... IF NOT EXISTS`, `UPDATE ... IF owner = ?`, `DELETE ... IF
//! owner = ?`; half the hand-overs as a conditional batch that also
//! sets the owner unconditionally) and read them at `SERIAL`, recording when each was sent and when it answered. A lease's owner is
//! one register: each lease's history is judged by
//! [`crate::checker::linear::check`], so no two workers ever hold one at
//! once, whichever node each asked. An error, a timeout or a lost
//! connection leaves a change's outcome unknown and a read unrecorded.
//! After healing, each lease is read at SERIAL through every member.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::cql::{CqlClient, CqlError, Prepared};
use tally_world::Instant;

use super::{Dial, reconnect};
use crate::checker::linear::{Answer, Call, Op, check};

/// How many leases the workers contend for.
pub const LEASES: usize = 3;

const ACQUIRE: &str = "INSERT INTO chaos.leases (name, owner) VALUES (?, ?) IF NOT EXISTS";
const HAND_OVER: &str = "UPDATE chaos.leases SET owner = ? WHERE name = ? IF owner = ?";
/// The owner set unconditionally: with `HAND_OVER`, a conditional batch.
const SET: &str = "UPDATE chaos.leases SET owner = ? WHERE name = ?";
const RELEASE: &str = "DELETE FROM chaos.leases WHERE name = ? IF owner = ?";
const READ: &str = "SELECT owner FROM chaos.leases WHERE name = ?";

/// The levels a transaction's cells are written at (its agreement is
/// SERIAL whatever the level): ONE, QUORUM, ALL, LOCAL_QUORUM.
const LEVELS: [u16; 4] = [0x01, 0x04, 0x05, 0x06];
/// SERIAL and LOCAL_SERIAL, the levels of a read.
const SERIAL: [u16; 2] = [0x08, 0x09];

/// What the lease workers did: each lease's history.
#[derive(Debug, Default)]
pub struct LeaseLog {
    /// Each lease's operations.
    pub leases: BTreeMap<String, Vec<Op>>,
    /// Why statements got no answer, and how often.
    pub errors: BTreeMap<String, usize>,
    /// Hand-overs sent as a conditional batch that applied.
    pub batches_applied: usize,
}

impl LeaseLog {
    /// Merges another worker's log into this one.
    pub fn absorb(&mut self, other: LeaseLog) {
        for (k, ops) in other.leases {
            self.leases.entry(k).or_default().extend(ops);
        }
        for (e, n) in other.errors {
            *self.errors.entry(e).or_default() += n;
        }
        self.batches_applied += other.batches_applied;
    }

    /// Operations recorded, how many of them answered, and how many
    /// conditional batches applied.
    pub fn counts(&self) -> (usize, usize, usize) {
        let all = self.leases.values().flatten();
        let known = all.clone().filter(|o| o.answer != Answer::Unknown).count();
        (all.count(), known, self.batches_applied)
    }
}

/// Makes the table (replication factor `rf`) through the first node that
/// answers.
pub async fn setup(dial: &dyn Dial, rf: usize) -> Result<(), String> {
    super::make_table(
        dial,
        rf,
        "CREATE TABLE IF NOT EXISTS chaos.leases (name text PRIMARY KEY, owner text)",
    )
    .await
}

/// A connection to one node, with the statements prepared.
struct Node {
    client: CqlClient,
    acquire: Prepared,
    hand_over: Prepared,
    set: Prepared,
    release: Prepared,
    read: Prepared,
}

async fn node(dial: &dyn Dial, n: usize) -> Option<Node> {
    let client = dial.dial(n).await.ok()?;
    Some(Node {
        acquire: client.prepare(ACQUIRE).await.ok()?,
        hand_over: client.prepare(HAND_OVER).await.ok()?,
        set: client.prepare(SET).await.ok()?,
        release: client.prepare(RELEASE).await.ok()?,
        read: client.prepare(READ).await.ok()?,
        client,
    })
}

/// Sends `call` on `lease` through `conn` (made if missing) at `level`
/// (a hand-over `batched` with an unconditional write of the same owner,
/// as one conditional batch); answers the result's body, or why there is
/// none.
async fn send(
    conn: &mut Option<Node>,
    (dial, node_i): (&dyn Dial, usize),
    (lease, call): (&str, &Call),
    level: u16,
    batched: bool,
) -> Option<Result<Vec<u8>, CqlError>> {
    if conn.is_none() {
        *conn = node(dial, node_i).await;
    }
    let n = conn.as_ref()?;
    let name = lease.as_bytes();
    let done = match call {
        Call::SetIfAbsent(v) => {
            n.client
                .execute_on(0, &n.acquire, &[name, v], level, None)
                .await
        }
        Call::Cas { expected, new } if batched => {
            let both: [(&Prepared, &[&[u8]]); 2] = [
                (&n.hand_over, &[new, name, expected]),
                (&n.set, &[new, name]),
            ];
            n.client.batch_on(0, &both, level).await
        }
        Call::Cas { expected, new } => {
            n.client
                .execute_on(0, &n.hand_over, &[new, name, expected], level, None)
                .await
        }
        Call::DeleteIf(v) => {
            n.client
                .execute_on(0, &n.release, &[name, v], level, None)
                .await
        }
        _ => n.client.execute_on(0, &n.read, &[name], level, None).await,
    };
    if reconnect(&done) {
        *conn = None;
    }
    Some(done)
}

/// What a result body answers `call`: `[applied]` of a transaction, the
/// owner a read found; `None` for a body that says neither.
fn answer(call: &Call, body: &[u8]) -> Option<Answer> {
    let rows = tally_net::cql::rows(body)?;
    match call {
        Call::Read => Some(Answer::Value(
            rows.first().and_then(|r| r.first().cloned().flatten()),
        )),
        _ => {
            let applied = rows.first()?.first()?.as_ref()?;
            Some(Answer::Applied(applied.first() == Some(&1)))
        }
    }
}

/// One worker (`w`): random transactions and SERIAL reads on the leases
/// until `stop`.
pub async fn worker(
    w: usize,
    dial: Arc<dyn Dial>,
    seed: u64,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> LeaseLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut conns: Vec<Option<Node>> = (0..dial.nodes()).map(|_| None).collect();
    let mut log = LeaseLog::default();
    // The owner this worker last saw hold each lease.
    let mut seen: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        super::think(&*dial).await;
        let lease = format!("lease-{}", rng.random_range(0..LEASES));
        let value = format!("w{w}-{n}").into_bytes();
        n += 1;
        let (call, level) = match (rng.random_range(0..5), seen.get(&lease).cloned()) {
            (0, _) => (
                Call::SetIfAbsent(value),
                LEVELS[rng.random_range(0..LEVELS.len())],
            ),
            (1, Some(expected)) => (
                Call::Cas {
                    expected,
                    new: value,
                },
                LEVELS[rng.random_range(0..LEVELS.len())],
            ),
            (2, Some(owner)) => (
                Call::DeleteIf(owner),
                LEVELS[rng.random_range(0..LEVELS.len())],
            ),
            _ => (Call::Read, SERIAL[rng.random_range(0..SERIAL.len())]),
        };
        let node = rng.random_range(0..dial.nodes());
        let invoked = since(started);
        let batched = rng.random_bool(0.5);
        let sent = send(
            &mut conns[node],
            (&*dial, node),
            (&lease, &call),
            level,
            batched,
        )
        .await;
        let Some(done) = sent else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let completed = since(started);
        let answer = match done {
            Ok(body) => answer(&call, &body).unwrap_or(Answer::Unknown),
            Err(e) => {
                let kind = e.kind();
                *log.errors.entry(kind).or_default() += 1;
                // Refused as invalid before any round: it never happened.
                if matches!(e, CqlError::Server { code: 0x2200, .. }) {
                    continue;
                }
                Answer::Unknown
            }
        };
        if call == Call::Read && answer == Answer::Unknown {
            continue;
        }
        if batched && matches!((&call, &answer), (Call::Cas { .. }, Answer::Applied(true))) {
            log.batches_applied += 1;
        }
        remember(&mut seen, &lease, &call, &answer);
        let op = Op {
            call,
            answer,
            invoked,
            completed,
        };
        log.leases.entry(lease).or_default().push(op);
    }
    log
}

/// Notes the owner `call`'s answer shows (what this worker's next
/// transactions on the lease name).
fn remember(seen: &mut BTreeMap<String, Vec<u8>>, lease: &str, call: &Call, answer: &Answer) {
    match (call, answer) {
        (Call::Read, Answer::Value(Some(v)))
        | (Call::SetIfAbsent(v), Answer::Applied(true))
        | (Call::Cas { new: v, .. }, Answer::Applied(true)) => {
            seen.insert(lease.to_string(), v.clone());
        }
        (Call::Read, Answer::Value(None)) | (Call::DeleteIf(_), Answer::Applied(true)) => {
            seen.remove(lease);
        }
        _ => {}
    }
}

/// Nanoseconds since the run began.
fn since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Reads every lease at SERIAL through every member, adds the reads to
/// the histories, and judges each: the violations found.
pub async fn check_all(dial: &dyn Dial, log: &mut LeaseLog, started: Instant) -> Vec<String> {
    let mut violations = Vec::new();
    for i in 0..LEASES {
        let lease = format!("lease-{i}");
        for node in 0..dial.nodes() {
            let mut conn = None;
            let invoked = since(started);
            let read = (lease.as_str(), &Call::Read);
            match send(&mut conn, (dial, node), read, SERIAL[0], false).await {
                Some(Ok(body)) => {
                    if let Some(answer) = answer(&Call::Read, &body) {
                        let completed = since(started);
                        log.leases.entry(lease.clone()).or_default().push(Op {
                            call: Call::Read,
                            answer,
                            invoked,
                            completed,
                        });
                    }
                }
                other => violations.push(format!(
                    "lease {lease} cannot be read at SERIAL through n{}: {}",
                    node + 1,
                    match other {
                        Some(Err(e)) => e.to_string(),
                        _ => "no connection".into(),
                    }
                )),
            }
        }
    }
    for (lease, ops) in &log.leases {
        if let Err(v) = check(ops) {
            violations.push(format!(
                "lease {lease} is not linearizable: {} operations; the longest linearizable prefix has {}, then {:?}",
                ops.len(),
                v.prefix.len(),
                ops[v.stuck]
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_seen_follows_what_each_answer_shows() {
        let mut seen = BTreeMap::new();
        let v = |s: &str| s.as_bytes().to_vec();
        remember(
            &mut seen,
            "l",
            &Call::SetIfAbsent(v("a")),
            &Answer::Applied(true),
        );
        assert_eq!(seen["l"], v("a"));
        let cas = Call::Cas {
            expected: v("a"),
            new: v("b"),
        };
        remember(&mut seen, "l", &cas, &Answer::Applied(false));
        assert_eq!(seen["l"], v("a"), "not applied: as it was");
        remember(&mut seen, "l", &cas, &Answer::Applied(true));
        assert_eq!(seen["l"], v("b"));
        remember(
            &mut seen,
            "l",
            &Call::DeleteIf(v("b")),
            &Answer::Applied(true),
        );
        assert!(!seen.contains_key("l"));
    }
}
