//! Logged batches under chaos: workers write CQL logged batches through
//! random nodes' CQL ports at every level, each of three new rows of one
//! batch id in three of 256 partitions of `chaos.batched (p int, id
//! bigint, i int, PRIMARY KEY (p, id))`. The nodes stop every few logged batches
//! they coordinate half way, after the batch's log entry and first
//! partition, as a coordinator that crashes there does
//! (`--batch-crash-every`).
//!
//! After healing (and a repair of every node), each partition is read at
//! QUORUM and each batch judged all or nothing: its rows are in all three
//! partitions or in none, and in all three if it was acknowledged. A batch
//! left half way is whole once the log's replay has run, so the check
//! reads again for a while before it calls a batch broken.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::cql::{CqlClient, CqlError, Prepared};
use tally_world::Instant;

use super::{Dial, be, reconnect};

/// Partitions the batches write, three of them each: enough that one
/// holds a few thousand rows after a long run (the check reads each
/// whole, and a read returns at most 10,000 cells of a partition).
const PARTITIONS: i32 = 256;
/// Rows of one batch.
const ROWS: usize = 3;
/// How long the check waits for the log's replays to finish batches.
const REPLAYED_WITHIN: Duration = Duration::from_secs(40);

const INSERT: &str = "INSERT INTO chaos.batched (p, id, i) VALUES (?, ?, ?)";
const READ: &str = "SELECT id FROM chaos.batched WHERE p = ?";

/// ONE, QUORUM, ALL.
const LEVELS: [u16; 3] = [0x01, 0x04, 0x05];

/// What the batch workers did: each batch's partitions, and whether it
/// was acknowledged.
#[derive(Debug, Default)]
pub struct BatchLog {
    batches: BTreeMap<i64, (Vec<i32>, bool)>,
}

impl BatchLog {
    /// Merges another worker's log into this one.
    pub fn absorb(&mut self, other: BatchLog) {
        self.batches.extend(other.batches);
    }

    /// Batches sent, and how many were acknowledged.
    pub fn counts(&self) -> (usize, usize) {
        let acked = self.batches.values().filter(|(_, a)| *a).count();
        (self.batches.len(), acked)
    }
}

/// Makes the table (replication factor `rf`).
pub async fn setup(dial: &dyn Dial, rf: usize) -> Result<(), String> {
    super::make_table(
        dial,
        rf,
        "CREATE TABLE IF NOT EXISTS chaos.batched (p int, id bigint, i int, PRIMARY KEY (p, id))",
    )
    .await
}

async fn prepared(dial: &dyn Dial, n: usize, text: &str) -> Option<(CqlClient, Prepared)> {
    let client = dial.dial(n).await.ok()?;
    let p = client.prepare(text).await.ok()?;
    Some((client, p))
}

/// One worker (`w`): logged batches until `stop`.
pub async fn worker(w: usize, dial: Arc<dyn Dial>, seed: u64, stop: Arc<AtomicBool>) -> BatchLog {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut conns: Vec<Option<(CqlClient, Prepared)>> = (0..dial.nodes()).map(|_| None).collect();
    let mut log = BatchLog::default();
    let mut n = 0i64;
    while !stop.load(Ordering::Acquire) {
        super::think(&*dial).await;
        let i = rng.random_range(0..dial.nodes());
        if conns[i].is_none() {
            conns[i] = prepared(&*dial, i, INSERT).await;
        }
        let Some((client, insert)) = conns[i].as_ref() else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        n += 1;
        let id = (w as i64) << 40 | n;
        let mut partitions: Vec<i32> = Vec::with_capacity(ROWS);
        while partitions.len() < ROWS {
            let p = rng.random_range(0..PARTITIONS);
            if !partitions.contains(&p) {
                partitions.push(p);
            }
        }
        let values: Vec<[Vec<u8>; 3]> = (0i32..)
            .zip(&partitions)
            .map(|(i, p)| [be(*p), id.to_be_bytes().to_vec(), be(i)])
            .collect();
        let refs: Vec<Vec<&[u8]>> = values
            .iter()
            .map(|v| v.iter().map(Vec::as_slice).collect())
            .collect();
        let statements: Vec<(&Prepared, &[&[u8]])> =
            refs.iter().map(|r| (insert, r.as_slice())).collect();
        let level = LEVELS[rng.random_range(0..LEVELS.len())];
        let done = client.batch_on(0, &statements, level).await;
        let acked = match &done {
            Ok(_) => true,
            // Refused before it was tried: it never happened.
            Err(CqlError::Server { code: 0x2200, .. }) => continue,
            Err(_) => false,
        };
        if reconnect(&done) {
            conns[i] = None;
        }
        log.batches.insert(id, (partitions, acked));
    }
    log
}

/// Judges every batch all or nothing (see the module doc), reading again
/// until [`REPLAYED_WITHIN`] while some are not.
pub async fn check(dial: &dyn Dial, log: &BatchLog) -> Vec<String> {
    let began = Instant::now();
    loop {
        let violations = match read_all(dial).await {
            Ok(held) => judge(log, &held),
            Err(e) => vec![e],
        };
        if violations.is_empty() || began.elapsed() > REPLAYED_WITHIN {
            return violations;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The batch ids each partition holds, read at QUORUM.
async fn read_all(dial: &dyn Dial) -> Result<BTreeMap<i32, BTreeSet<i64>>, String> {
    let mut last = String::new();
    for attempt in 0..20 {
        let Some((client, read)) = prepared(dial, attempt % dial.nodes(), READ).await else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let mut held = BTreeMap::new();
        let mut failed = None;
        for p in 0..PARTITIONS {
            match client.execute_on(0, &read, &[&be(p)], 0x04, None).await {
                Ok(body) => {
                    let rows = tally_net::cql::rows(&body).ok_or("a malformed answer")?;
                    let ids = rows.iter().filter_map(|r| {
                        let b = r.first()?.as_ref()?;
                        Some(i64::from_be_bytes(b.as_slice().try_into().ok()?))
                    });
                    held.insert(p, ids.collect());
                }
                Err(e) => failed = Some(e.to_string()),
            }
        }
        match failed {
            None => return Ok(held),
            Some(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("final read of the batches: {last}"))
}

/// The batches that are not all or nothing in `held`.
fn judge(log: &BatchLog, held: &BTreeMap<i32, BTreeSet<i64>>) -> Vec<String> {
    let mut violations = Vec::new();
    for (id, (partitions, acked)) in &log.batches {
        let present: Vec<i32> = partitions
            .iter()
            .copied()
            .filter(|p| held.get(p).is_some_and(|ids| ids.contains(id)))
            .collect();
        let whole = present.len() == partitions.len();
        if !(whole || present.is_empty() && !acked) {
            violations.push(format!(
                "logged batch {id} ({}): its rows are in partitions {present:?} of {partitions:?}",
                if *acked {
                    "acknowledged"
                } else {
                    "not acknowledged"
                }
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_judged_all_or_nothing() {
        let mut log = BatchLog::default();
        log.batches.insert(1, (vec![0, 1, 2], true));
        log.batches.insert(2, (vec![0, 1, 2], false));
        log.batches.insert(3, (vec![3, 4, 5], false));
        let mut held: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
        for p in 0..3 {
            held.entry(p).or_default().insert(1);
        }
        held.entry(0).or_default().insert(2);
        let violations = judge(&log, &held);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("batch 2"), "{violations:?}");
        // Acknowledged and missing: a violation too.
        held.get_mut(&2).map(|ids| ids.remove(&1));
        held.get_mut(&0).map(|ids| ids.remove(&2));
        assert_eq!(judge(&log, &held).len(), 1);
    }
}
