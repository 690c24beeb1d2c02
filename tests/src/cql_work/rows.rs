//! Last-write-wins rows under chaos: workers write the rows of a CQL
//! regular table, `chaos.rows (k int, c int, v bigint, PRIMARY KEY (k,
//! c))`, through random nodes' CQL ports at every level, and delete
//! ranges of them (`DELETE ... WHERE k = ? AND c >= ? AND c <= ?`), each
//! with a client timestamp unique to its worker (`USING TIMESTAMP`); and
//! write other rows with the coordinator's timestamp. Every value is
//! unique, so a row's final value names its write.
//!
//! After healing (and a repair of every node), each row is read at ONE
//! through every member, with `writetime(v)`, and judged by the rule of
//! last-write-wins:
//! - a value shown must be a write's, at that write's timestamp, and no
//!   acknowledged write or delete of the row may be later (a lost write,
//!   or a delete a replica undid);
//! - no value: the latest acknowledged write must lie under a delete.
//!
//! For the coordinator-stamped rows only the first holds: a value shown
//! is one some write wrote.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::cql::{CqlClient, CqlError, Prepared};

use super::{Dial, be, reconnect, row_reads};

/// Partitions.
pub const PARTITIONS: i32 = 2;
/// Rows in each partition.
pub const ROWS: i32 = 6;
/// The partition of the coordinator-stamped rows.
const SERVER_STAMPED: i32 = 100;

const WRITE: &str = "INSERT INTO chaos.rows (k, c, v) VALUES (?, ?, ?) USING TIMESTAMP ?";
const WRITE_NOW: &str = "UPDATE chaos.rows SET v = ? WHERE k = ? AND c = ?";
const DELETE: &str = "DELETE FROM chaos.rows USING TIMESTAMP ? WHERE k = ? AND c >= ? AND c <= ?";
const READ: &str = "SELECT v, writetime(v) FROM chaos.rows WHERE k = ? AND c = ?";

/// ONE, QUORUM, ALL, LOCAL_QUORUM, LOCAL_ONE.
const LEVELS: [u16; 5] = [0x01, 0x04, 0x05, 0x06, 0x0A];

/// How a change ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Acked,
    Unknown,
}

/// One change of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A value at a client timestamp (`None`: the coordinator's).
    Write {
        /// The client timestamp, if any.
        ts: Option<i64>,
        /// The value, unique to the write.
        v: i64,
    },
    /// A delete at a client timestamp.
    Delete {
        /// The client timestamp.
        ts: i64,
    },
}

impl Change {
    /// Its client timestamp (`i64::MIN` for the coordinator's).
    pub fn ts(&self) -> i64 {
        match self {
            Change::Write { ts, .. } => ts.unwrap_or(i64::MIN),
            Change::Delete { ts } => *ts,
        }
    }
}

/// What the row workers did: each row's changes; those acknowledged at
/// a level a QUORUM read sees, and when; the paged reads.
#[derive(Debug, Default)]
pub struct RowLog {
    rows: HashMap<(i32, i32), Vec<(Change, Ended)>>,
    seen: row_reads::Seen,
    reads: Vec<row_reads::PagedRead>,
}

impl RowLog {
    /// Merges another worker's log into this one.
    pub fn absorb(&mut self, other: RowLog) {
        for (k, changes) in other.rows {
            self.rows.entry(k).or_default().extend(changes);
        }
        for (k, seen) in other.seen {
            self.seen.entry(k).or_default().extend(seen);
        }
        self.reads.extend(other.reads);
    }

    /// Writes and deletes sent, how many were acknowledged, and how many
    /// paged reads ended.
    pub fn counts(&self) -> (usize, usize, usize) {
        let all = self.rows.values().flatten();
        let acked = all.clone().filter(|(_, e)| *e == Ended::Acked).count();
        (all.count(), acked, self.reads.len())
    }

    /// Judges every paged read (`row_reads`).
    fn judge_reads(&self) -> Vec<String> {
        let changes: HashMap<(i32, i32), Vec<Change>> = self
            .rows
            .iter()
            .map(|(k, v)| (*k, v.iter().map(|(c, _)| *c).collect()))
            .collect();
        let judged = self
            .reads
            .iter()
            .map(|r| (r.k, row_reads::judge(r, &changes, &self.seen)));
        judged
            .filter_map(|(k, j)| {
                j.err()
                    .map(|why| format!("paged read of partition {k}: {why}"))
            })
            .collect()
    }
}

/// Makes the table (replication factor `rf`) through the first node that
/// answers.
pub async fn setup(dial: &dyn Dial, rf: usize) -> Result<(), String> {
    super::make_table(
        dial,
        rf,
        "CREATE TABLE IF NOT EXISTS chaos.rows (k int, c int, v bigint, PRIMARY KEY (k, c))",
    )
    .await
}

/// A connection to one node, with the statements prepared.
struct Node {
    client: CqlClient,
    write: Prepared,
    write_now: Prepared,
    delete: Prepared,
    read: Prepared,
    read_partition: Prepared,
}

async fn node(dial: &dyn Dial, n: usize) -> Option<Node> {
    let client = dial.dial(n).await.ok()?;
    Some(Node {
        write: client.prepare(WRITE).await.ok()?,
        write_now: client.prepare(WRITE_NOW).await.ok()?,
        delete: client.prepare(DELETE).await.ok()?,
        read: client.prepare(READ).await.ok()?,
        read_partition: client.prepare(row_reads::READ_PARTITION).await.ok()?,
        client,
    })
}

/// A timestamp unique to worker `w` (of at most 16), later than the last
/// it made: the wall clock's µs, times 16, plus `w`.
fn stamp(w: usize, last: &mut i64) -> i64 {
    let us = i64::try_from(tally_world::since_epoch().as_micros()).unwrap_or(i64::MAX / 32);
    let ts = (us * 16 + w as i64).max(*last + 16);
    *last = ts;
    ts
}

/// One worker (`w`, below 16): writes and range deletes until `stop`.
pub async fn worker(w: usize, dial: Arc<dyn Dial>, seed: u64, stop: Arc<AtomicBool>) -> RowLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut conns: Vec<Option<Node>> = (0..dial.nodes()).map(|_| None).collect();
    let mut log = RowLog::default();
    let (mut last, mut n) = (0i64, 0i64);
    while !stop.load(Ordering::Acquire) {
        super::think(&*dial).await;
        let node_i = rng.random_range(0..dial.nodes());
        let level = LEVELS[rng.random_range(0..LEVELS.len())];
        if conns[node_i].is_none() {
            conns[node_i] = node(&*dial, node_i).await;
        }
        let Some(conn) = conns[node_i].as_ref() else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        n += 1;
        let v = (w as i64) << 40 | n;
        let (k, c) = match rng.random_bool(0.3) {
            true => row_reads::fresh_row(),
            false => (rng.random_range(0..PARTITIONS), rng.random_range(0..ROWS)),
        };
        if rng.random_range(0..11) == 0 {
            let page = rng.random_range(1..=3);
            // The fresh partitions of the last half minute: a node back
            // from a kill reads those it missed part of.
            let k = match k >= row_reads::FRESH_BASE {
                true => row_reads::fresh_partition(rng.random_range(0..3)),
                false => k,
            };
            if let Some(read) = row_reads::read(&conn.client, &conn.read_partition, k, page).await {
                log.reads.push(read);
            }
            continue;
        }
        let (touched, change, done) = match rng.random_range(0..10) {
            0..=5 => {
                let ts = stamp(w, &mut last);
                let values = vec![
                    be(k),
                    be(c),
                    v.to_be_bytes().to_vec(),
                    ts.to_be_bytes().to_vec(),
                ];
                let done = exec(conn, &conn.write, &values, level).await;
                (vec![(k, c)], Change::Write { ts: Some(ts), v }, done)
            }
            6..=7 => {
                // A fresh partition's deletes take its first rows, so that
                // a slice of it may hold dead rows only, and the page
                // reads on past it.
                let c = if k >= row_reads::FRESH_BASE { 0 } else { c };
                let c_hi = rng.random_range(c..row_reads::rows_of(k));
                let ts = stamp(w, &mut last);
                let values = vec![ts.to_be_bytes().to_vec(), be(k), be(c), be(c_hi)];
                let done = exec(conn, &conn.delete, &values, level).await;
                let rows = (c..=c_hi).map(|c| (k, c)).collect();
                (rows, Change::Delete { ts }, done)
            }
            _ => {
                let values = vec![v.to_be_bytes().to_vec(), be(SERVER_STAMPED), be(c)];
                let done = exec(conn, &conn.write_now, &values, level).await;
                (
                    vec![(SERVER_STAMPED, c)],
                    Change::Write { ts: None, v },
                    done,
                )
            }
        };
        let ended = match &done {
            Ok(_) => Ended::Acked,
            // Refused before it was tried: it never happened.
            Err(CqlError::Server { code: 0x2200, .. }) => continue,
            Err(_) => Ended::Unknown,
        };
        if reconnect(&done) {
            conns[node_i] = None;
        }
        let seen = ended == Ended::Acked && row_reads::seen_by_quorum(level);
        let now = tally_world::Instant::now();
        for row in touched {
            log.rows.entry(row).or_default().push((change, ended));
            if seen {
                log.seen.entry(row).or_default().push((change, now));
            }
        }
    }
    log
}

/// Executes `p` with `values` at `level` through `conn`.
async fn exec(
    conn: &Node,
    p: &Prepared,
    values: &[Vec<u8>],
    level: u16,
) -> Result<Vec<u8>, CqlError> {
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    conn.client.execute_on(0, p, &refs, level, None).await
}

/// What a read of a row shows: its value and write time, or none.
type Shown = Option<(i64, i64)>;

/// Reads every row at ONE through every member and judges it.
pub async fn check(dial: &dyn Dial, log: &RowLog) -> Vec<String> {
    let mut violations = log.judge_reads();
    let rows = (0..PARTITIONS)
        .flat_map(|k| (0..ROWS).map(move |c| (k, c)))
        .chain((0..ROWS).map(|c| (SERVER_STAMPED, c)));
    let mut conns: Vec<Option<Node>> = (0..dial.nodes()).map(|_| None).collect();
    for (k, c) in rows {
        let changes = log.rows.get(&(k, c)).map(Vec::as_slice).unwrap_or(&[]);
        for (i, conn) in conns.iter_mut().enumerate() {
            match read_one(conn, (dial, i), k, c).await {
                Ok(shown) => {
                    if let Err(why) = judge(changes, shown) {
                        violations.push(format!("row ({k}, {c}) at ONE via n{}: {why}", i + 1));
                    }
                }
                Err(e) => violations.push(format!("row ({k}, {c}) via n{}: {e}", i + 1)),
            }
        }
    }
    violations
}

async fn read_one(
    conn: &mut Option<Node>,
    (dial, n): (&dyn Dial, usize),
    k: i32,
    c: i32,
) -> Result<Shown, String> {
    let mut last = String::new();
    for _ in 0..20 {
        if conn.is_none() {
            *conn = node(dial, n).await;
        }
        if let Some(n) = conn.as_ref() {
            match n
                .client
                .execute_on(0, &n.read, &[&be(k), &be(c)], 0x01, None)
                .await
            {
                Ok(body) => return shown(&body).ok_or_else(|| "a malformed answer".to_string()),
                Err(e) => last = e.to_string(),
            }
            *conn = None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("final read: {last}"))
}

/// A read's answer: its one row's value and write time, or none.
fn shown(body: &[u8]) -> Option<Shown> {
    let rows = tally_net::cql::rows(body)?;
    let Some(row) = rows.first() else {
        return Some(None);
    };
    let int = |cell: &Option<Vec<u8>>| {
        cell.as_ref()
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map(i64::from_be_bytes)
    };
    match (row.first().map(int), row.get(1).map(int)) {
        (Some(Some(v)), Some(Some(wt))) => Some(Some((v, wt))),
        (Some(None), _) => Some(None),
        _ => None,
    }
}

/// Whether a row whose changes were `changes` may show `shown` (see the
/// module doc).
fn judge(changes: &[(Change, Ended)], shown: Shown) -> Result<(), String> {
    let newest_acked = changes
        .iter()
        .filter(|(_, e)| *e == Ended::Acked)
        .filter_map(|(c, _)| match c {
            Change::Write { ts: Some(ts), .. } | Change::Delete { ts } => Some((*ts, *c)),
            Change::Write { ts: None, .. } => None,
        })
        .max_by_key(|(ts, _)| *ts);
    match shown {
        Some((v, wt)) => {
            let Some((written, _)) = changes
                .iter()
                .find(|(c, _)| matches!(c, Change::Write { v: x, .. } if *x == v))
            else {
                return Err(format!("shows {v}, which no write wrote"));
            };
            match written {
                Change::Write { ts: Some(ts), .. } if *ts != wt => {
                    return Err(format!("shows {v} at {wt}, written at {ts}"));
                }
                Change::Write { ts: None, .. } => return Ok(()),
                _ => {}
            }
            match newest_acked {
                Some((ts, c))
                    if ts > wt || (ts == wt && c != Change::Write { ts: Some(wt), v }) =>
                {
                    Err(format!(
                        "shows {v} at {wt}, but {c:?} was acknowledged later"
                    ))
                }
                _ => Ok(()),
            }
        }
        None => match newest_acked {
            Some((ts, c @ Change::Write { .. })) => {
                let deleted = changes
                    .iter()
                    .any(|(d, _)| matches!(d, Change::Delete { ts: dts } if *dts >= ts));
                match deleted {
                    true => Ok(()),
                    false => Err(format!(
                        "shows nothing, but {c:?} was acknowledged and never deleted"
                    )),
                }
            }
            _ => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_shows_its_latest_write_or_nothing_after_a_later_delete() {
        let w = |ts: i64, v: i64| Change::Write { ts: Some(ts), v };
        let d = |ts: i64| Change::Delete { ts };
        let (a, u) = (Ended::Acked, Ended::Unknown);
        let changes = [(w(10, 1), a), (w(20, 2), a), (w(30, 3), u)];
        assert_eq!(judge(&changes, Some((2, 20))), Ok(()));
        assert_eq!(
            judge(&changes, Some((3, 30))),
            Ok(()),
            "the unknown one landed"
        );
        assert!(judge(&changes, Some((1, 10))).is_err(), "a lost write");
        assert!(judge(&changes, None).is_err());
        assert!(judge(&changes, Some((9, 9))).is_err(), "nobody wrote 9");
        assert!(judge(&changes, Some((2, 21))).is_err(), "at the wrong time");
        let deleted = [(w(10, 1), a), (d(15), a)];
        assert_eq!(judge(&deleted, None), Ok(()));
        assert!(judge(&deleted, Some((1, 10))).is_err(), "a delete undone");
        let unknown_delete = [(w(10, 1), a), (d(15), u)];
        assert_eq!(judge(&unknown_delete, None), Ok(()));
        assert_eq!(judge(&unknown_delete, Some((1, 10))), Ok(()));
        let server = [(Change::Write { ts: None, v: 5 }, a)];
        assert_eq!(judge(&server, Some((5, 123))), Ok(()));
        assert!(judge(&server, Some((6, 123))).is_err());
    }
}
