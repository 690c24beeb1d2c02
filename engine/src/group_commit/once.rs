//! Adds with operation ids, sealed on the caller's thread under the cell
//! lock: the ledger is asked, the new adds make one read-modify-write, and
//! one record holds the new shard and the ids it applied (see `ids`).
//!
//! # Sync before it leaves
//!
//! A shard version that holds an add with an id must not reach another
//! node before its record is durable here. Otherwise a crash could lose
//! the record, and with it the id, while replicas keep the add: the node
//! comes back under a new counter id, and a retry of the id would count
//! it again. So the caller replicates such a shard only after its
//! [`Durable`](crate::Durable) resolved, and while such a record is not
//! durable yet, plain adds, whose shards would carry the add along, wait
//! for their fsync before they answer early too ([`GroupCommit::ids_unsynced`]).

use std::sync::atomic::Ordering::{Acquire, Release};

use smallvec::SmallVec;

use super::GroupCommit;
use super::sealer::{added, own_shard, put_next_version};
use crate::cache::Cached;
use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::ids::ledger::Ledger;
use crate::ids::record::{Applied, Check};
use crate::ids::{ClientId, OpId};
use crate::key::Key;
use crate::version::Version;

/// One add with an operation id.
#[derive(Clone, Debug)]
pub struct OnceAdd {
    /// The amount.
    pub delta: i64,
    /// The operation id.
    pub id: OpId,
    /// An add of this id applied in an epoch below this one is made again
    /// (the leader's catch-up after a reset it had missed; 0 otherwise).
    pub reapply_below: u64,
}

/// What one add with an id answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Once {
    /// Applied now: the value it produced.
    Applied(i64),
    /// Applied before: the value it produced then.
    Duplicate(i64),
}

impl Once {
    /// The value the add produced.
    pub fn value(self) -> i64 {
        match self {
            Once::Applied(v) | Once::Duplicate(v) => v,
        }
    }
}

/// What [`Engine::leader_add_once_batch`](crate::Engine) did to one counter.
#[derive(Debug)]
pub struct OnceSealed {
    /// Per add, in order: its answer, or why it was refused (nothing
    /// applied for it).
    pub answers: Vec<Result<Once>>,
    /// The state to replicate before any answer is acknowledged, once the
    /// batch is durable: the new own shard, or the whole cell when a retry
    /// answered (its add may sit in any shard this node holds, an older
    /// incarnation's too). `None` when every add was refused.
    pub replicate: Option<Cell>,
}

/// An add's fate, decided before anything is written.
enum Fate {
    Answer(Result<Once>),
    /// New: applied at this index of the record's ops.
    Apply(usize),
}

impl GroupCommit {
    /// Whether a record with ids may not be durable yet (see the module doc).
    pub(crate) fn ids_unsynced(&self) -> bool {
        self.ids_batch.load(Acquire) > self.durable_batch()
    }

    /// Seals `adds` to `key` under its cell lock (held by `cached`'s
    /// owner) and the version `v` (read-locked), straight into the
    /// outbox. Covered by the next ack there ([`GroupCommit::ack_now`]).
    pub(crate) fn seal_once_now(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        adds: &[OnceAdd],
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<OnceSealed> {
        let cell = &mut cached.cell;
        let clock = cell.next_own_clock(self.counter_id);
        let mut own = own_shard(cell, self.counter_id);
        let others = cell.sum() - i128::from(own.value);
        let epoch = cell.epoch();
        let window_ms = ledger.retention().window_ms;
        let mut ops: SmallVec<[(ClientId, Applied); 1]> = SmallVec::new();
        let mut fates = Vec::with_capacity(adds.len());
        let mut retried = false;
        for add in adds {
            let id = &add.id;
            // A retry within this batch finds the add in `ops`, not the ledger.
            let seen = ops
                .iter()
                .position(|(c, op)| *c == id.client && op.seq == id.seq);
            let check = match seen {
                Some(i) if ops[i].1.delta != add.delta => Check::Conflict(ops[i].1),
                Some(i) => Check::Duplicate(ops[i].1),
                None => ledger.check(key, id, add.delta, add.reapply_below, now_ms),
            };
            let fate = match check {
                Check::Duplicate(op) => {
                    retried = true;
                    Fate::Answer(Ok(Once::Duplicate(op.value)))
                }
                Check::Conflict(op) => Fate::Answer(Err(Error::IdConflict {
                    delta_was: op.delta,
                    delta: add.delta,
                })),
                Check::Expired => Fate::Answer(Err(Error::IdExpired { window_ms })),
                Check::New => match (&clock, added(others, own.value, add.delta)) {
                    (Err(limit), _) => Fate::Answer(Err((*limit).into())),
                    (Ok(_), Err(e)) => Fate::Answer(Err(e)),
                    (Ok(_), Ok((o, value))) => {
                        own.value = o;
                        let op = Applied {
                            seq: id.seq,
                            delta: add.delta,
                            value,
                            epoch,
                            at_ms: now_ms,
                        };
                        ops.push((id.client.clone(), op));
                        Fate::Apply(ops.len() - 1)
                    }
                },
            };
            fates.push(fate);
        }
        let mut sealed_own = None;
        if let (false, Ok(clock)) = (ops.is_empty(), clock) {
            let mut out = self.outbox.lock();
            if out.closed {
                return Err(Error::Closed);
            }
            let combined = u32::try_from(ops.len()).unwrap_or(u32::MAX);
            let outcome = put_next_version(cell, own, clock, combined);
            for (client, op) in &ops {
                ledger.record(key, client, *op);
            }
            out.add_once(key, &outcome.shard, epoch, &ops, v.active.generation());
            cached.sealed_batch = out.batch;
            self.ids_batch.fetch_max(out.batch, Release);
            drop(out);
            cached.mark_written(key, v);
            sealed_own = Some(outcome.shard);
        }
        let answers = fates
            .into_iter()
            .map(|f| match f {
                Fate::Answer(a) => a,
                Fate::Apply(i) => Ok(Once::Applied(ops[i].1.value)),
            })
            .collect();
        let replicate = match (retried, sealed_own) {
            (true, _) => Some(cached.cell.clone()),
            (false, Some(own)) => Some(Cell::from_parts(epoch, [own])),
            (false, None) => None,
        };
        Ok(OnceSealed { answers, replicate })
    }
}
