//! Adds with operation ids, sealed on the caller's thread under the cell
//! lock: the ledger is asked, the new adds make one read-modify-write, and
//! one record holds the new shard and the ids it applied (see `ids`).
//!
//! # Ids travel with their shard
//!
//! A shard version that holds an add with an id may leave this node before
//! its record is durable here only with the ids that this node could still
//! lose in a crash: every add with an id to the cell in a group commit not
//! durable yet (`Cached::unsynced`), sent as one [`TailIds`] beside the
//! shard. A replica keeps them until this node's watermark passes them
//! (see `ids::tail`), so a crash here can never leave a replica counting
//! an add whose id nobody remembers. When there are more of them than
//! [`TAIL_SEND_MAX`] (a hot counter), the caller waits for the fsync
//! first and sends the shard alone.
//!
//! Plain adds, whose shards would carry these adds along without their
//! ids, wait for their fsync before they answer early while such a record
//! is not durable ([`GroupCommit::ids_unsynced`]); so do reads that leave
//! the node (`Engine::settled`).

use std::sync::atomic::Ordering::{Acquire, Release};

use smallvec::SmallVec;

use super::GroupCommit;
use crate::add::OwnAdd;
use crate::cache::Cached;
use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::ids::ledger::Ledger;
use crate::ids::record::{Applied, Check};
use crate::ids::tail::{TAIL_OPS_MAX, TailIds, TailOp};
use crate::ids::{ClientId, OpId};
use crate::key::Key;
use crate::version::Version;

/// Most ids not durable yet that go with a shard. A hot counter has more:
/// they would go again with every batch's shard until the fsync, so its
/// shards wait for the fsync instead, which costs it little (its batches
/// overlap: the next one seals while this one waits).
pub(crate) const TAIL_SEND_MAX: usize = 64;
const _: () = assert!(TAIL_SEND_MAX <= TAIL_OPS_MAX);

/// One add with an operation id.
#[derive(Clone, Debug)]
pub struct OnceAdd {
    /// The amount.
    pub delta: i64,
    /// The operation id.
    pub id: OpId,
    /// An add of this id applied in an epoch other than the cell's current
    /// one is made again (the leader's catch-up after a reset or SET it had
    /// missed; false otherwise).
    pub reapply_stale: bool,
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

/// What [`Engine::add_once`](crate::Engine) did to one counter.
#[derive(Debug)]
pub struct OnceSealed {
    /// Per add, in order: its answer, or why it was refused (nothing
    /// applied for it).
    pub answers: Vec<Result<Once>>,
    /// The state to replicate before any answer is acknowledged: the new
    /// own shard, or the whole cell when a retry answered (its add may sit
    /// in any shard this node holds, an older incarnation's too). `None`
    /// when every add was refused.
    pub replicate: Option<Cell>,
    /// The ids to send with `replicate`, which may then leave before the
    /// batch is durable; `None` when they are too many for one message:
    /// `replicate` leaves only once `Durable` resolved (see the module doc).
    pub tail: Option<TailIds>,
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

    /// Whether a replica's record with a tail of ids may not be durable yet.
    pub(crate) fn tails_unsynced(&self) -> bool {
        self.tail_batch.load(Acquire) > self.durable_batch()
    }

    /// Seals `adds` to `key` under its cell lock (held by `cached`'s
    /// owner) and the version `v` (read-locked), straight into the
    /// outbox, as every new version of this node's shard is (see `seal`).
    /// Covered by the next ack there ([`GroupCommit::ack_now`]).
    pub(crate) fn seal_once_now(
        &self,
        key: &Key,
        cached: &mut Cached,
        v: &Version,
        adds: &[OnceAdd],
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<OnceSealed> {
        let fingerprint = crate::ids::fingerprint(key);
        let mut rule = OwnAdd::start(&cached.cell, self.counter_id, self.on_expired(cached));
        let Decided {
            ops,
            fates,
            retried,
        } = decide(&mut rule, adds, ledger, fingerprint, now_ms);
        let durable = self.durable_batch();
        cached.unsynced.retain(|op| op.batch > durable);
        if cached.unsynced.is_empty() {
            // Most counters take an id now and then: hold no room between.
            cached.unsynced = Vec::with_capacity(ops.len());
        }
        let mut sealed_own = None;
        if !ops.is_empty() {
            let generation = v.active.generation();
            let outcome = self.seal_own(key, cached, v, &rule, |out, outcome| {
                for (client, op) in &ops {
                    ledger.record(fingerprint, client, *op);
                }
                out.add_once(key, outcome, &ops, generation);
                self.ids_batch.fetch_max(out.batch, Release);
                false // the batch's ack wakes the syncer
            })?;
            let batch = cached.sealed_batch;
            cached
                .unsynced
                .extend(ops.iter().map(|(client, op)| TailOp {
                    batch,
                    client: client.clone(),
                    op: *op,
                }));
            sealed_own = Some(outcome.shard);
        }
        let tail = (cached.unsynced.len() <= TAIL_SEND_MAX).then(|| TailIds {
            counter_id: self.counter_id,
            durable,
            ops: cached.unsynced.clone(),
        });
        let answers = fates
            .into_iter()
            .map(|f| match f {
                Fate::Answer(a) => a,
                Fate::Apply(i) => Ok(Once::Applied(ops[i].1.value)),
            })
            .collect();
        let replicate = match (retried, sealed_own) {
            (true, _) => Some(cached.cell.clone()),
            (false, Some(own)) => Some(Cell::from_parts(rule.epoch(), [own])),
            (false, None) => None,
        };
        Ok(OnceSealed {
            answers,
            replicate,
            tail,
        })
    }
}

/// What the ledger and the add rule decided of one call's adds to a cell.
struct Decided {
    /// The adds taken, as the record holds them.
    ops: SmallVec<[(ClientId, Applied); 1]>,
    /// Each add's fate, in order.
    fates: Vec<Fate>,
    /// Some add is a retry of one applied before.
    retried: bool,
}

/// Asks the ledger about each of `adds` in turn, and feeds the new ones
/// to `rule`; nothing is recorded or written yet.
fn decide(
    rule: &mut OwnAdd,
    adds: &[OnceAdd],
    ledger: &Ledger,
    fingerprint: u64,
    now_ms: u64,
) -> Decided {
    let epoch = rule.epoch();
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
            None => ledger.check(
                fingerprint,
                id,
                add.delta,
                add.reapply_stale.then_some(epoch.tag()),
                now_ms,
            ),
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
            Check::Full => Fate::Answer(Err(Error::IdsFull {
                clients_max: ledger.retention().clients_max,
            })),
            Check::New => match rule.add(add.delta) {
                Err(e) => Fate::Answer(Err(e)),
                Ok(value) => {
                    let op = Applied {
                        seq: id.seq,
                        delta: add.delta,
                        value,
                        epoch: epoch.tag(),
                        at_ms: now_ms,
                    };
                    ops.push((id.client.clone(), op));
                    Fate::Apply(ops.len() - 1)
                }
            },
        };
        fates.push(fate);
    }
    Decided {
        ops,
        fates,
        retried,
    }
}
