//! `EXPIRE`/`PERSIST` of a whole key (a partition): one leader-side
//! operation, as the coordinator skeleton runs it (`coordinate::run`).
//! Every column of a partition has the same replicas (`placement` places
//! the partition), so the coordinator routes the partition's key, and its
//! leader (any writable replica):
//!
//! 1. catches up on the row: reads every column's cell from every live
//!    replica (at least the level's count, within the read timeout) and
//!    merges what it learns, and the same for its unique counter's count
//!    (a reserved column, which row reads leave out), as a change of one
//!    counter catches up on its cell (`change::catch_up`); a live counter
//!    is read alone, first, and is then all it changes, so an `EXPIRE` of
//!    a counter costs what a change of one counter does;
//! 2. picks the cells the key's first kind names
//!    (`tally_engine::change::expire_targets`: its counter, else every
//!    live column of its hash, else its unique counter's count) and makes
//!    the change to each under the engine (`Engine::change_row`, each cell
//!    decided by `tally_engine::change::decide` with the condition `NX`,
//!    `XX`, `GT`, `LT`);
//! 3. replicates the changed cells' headers in one replication round and
//!    answers whether any changed (`tally_engine::change::expire_answer`);
//!    a cell that a newer epoch overtook (a restart, a reset) makes the
//!    whole `EXPIRE` again, from step 1 (`retry::made_again`).
//!
//! A hash field first written while the `EXPIRE` runs is expired with the
//! row when the leader's catch-up (or its own cell) sees it, else it was
//! added after the `EXPIRE` and stays, without a deadline. A field whose
//! write was answered before the `EXPIRE` was asked is seen: that write is
//! on its level's count of replicas and the catch-up reads every live one
//! (as for a change of one counter, a replica down, and the only one that
//! holds it, is not read: a write at `ONE` may then be missed).
//! (Redis, which expires the key whole, would give a field added
//! after the `EXPIRE` the key's deadline too; here a deadline is a cell's,
//! and a new cell has none.)

use std::future::Future;
use std::sync::Arc;

use tally_engine::change::{expire_answer, expire_targets};
use tally_engine::{Epoch, Key, Wait, now_ms, unique};
use tally_net::wire::{Change, Changed, Consistency, PeerRequest, PeerResponse, When, WireError};
use tokio::sync::oneshot;

use super::change::settle_unmade;
use super::coordinate::{Lead, Leader, Op};
use super::replicate::{Write, replicate};
use super::retry::{self, Next};
use super::round::Verdict;
use crate::base::convert::engine_error;
use crate::cluster::ctx::Ctx;
use crate::cluster::read::{self, Reach};
use crate::ring::Replicas;

/// An `EXPIRE` (or `PERSIST`: `at_ms` 0) of a whole key: led by any
/// writable replica of its partition.
pub(crate) struct ExpireRowOp {
    /// The partition's key (its empty column), which routes it.
    key: Key,
    at_ms: u64,
    only: When,
    cl: Consistency,
}

impl ExpireRowOp {
    /// The deadline `at_ms` (0: none) for the key `partition`, if `only`
    /// allows, at `cl`.
    pub(crate) fn new(
        partition: &[u8],
        (at_ms, only): (u64, When),
        cl: Consistency,
    ) -> Result<Self, WireError> {
        let key = Key::new(partition, b"").map_err(|e| engine_error(&e))?;
        Ok(ExpireRowOp {
            key,
            at_ms,
            only,
            cl,
        })
    }

    /// The change it makes to each cell.
    fn change(&self) -> Change {
        Change::Expire {
            at_ms: self.at_ms,
            only: self.only,
        }
    }
}

impl Op for ExpireRowOp {
    type Answer = Changed;

    fn what(&self) -> &'static str {
        "expire"
    }

    fn key(&self) -> &Key {
        &self.key
    }

    fn cl(&self) -> Consistency {
        self.cl
    }

    fn leader(&self) -> Leader<'_> {
        Leader::Any
    }

    fn request(self) -> PeerRequest {
        PeerRequest::LeaderExpireRow {
            partition: self.key.partition().to_vec(),
            at_ms: self.at_ms,
            only: self.only,
            cl: self.cl,
        }
    }

    fn answer(resp: PeerResponse) -> Result<Changed, PeerResponse> {
        match resp {
            PeerResponse::Changed(done) => Ok(done),
            other => Err(other),
        }
    }

    fn respond(done: Changed) -> PeerResponse {
        PeerResponse::Changed(done)
    }
}

impl Lead for ExpireRowOp {
    fn lead(
        self,
        ctx: &Arc<Ctx>,
        replicas: Replicas,
    ) -> impl Future<Output = Result<Changed, WireError>> + Send {
        lead(ctx, self, replicas)
    }
}

/// The leader's `EXPIRE` of a key (see the module doc): catch up on the
/// row, change the cells of its first kind, replicate them in one round;
/// made again while a newer epoch overtakes some of its cells
/// (`retry::made_again`). It answers whether any cell changed and held:
/// a change a newer epoch overtook counts for nothing.
async fn lead(ctx: &Arc<Ctx>, op: ExpireRowOp, replicas: Replicas) -> Result<Changed, WireError> {
    let mut held = false;
    let mut attempt = 1;
    loop {
        let (applied, changed) = make(ctx, &op, &replicas, attempt).await?;
        let overtaken = match changed.len() {
            0 => {
                settle_unmade(ctx).await?; // nothing changed, nothing to replicate
                Vec::new()
            }
            n => {
                let overtaken = replicate_headers(ctx, changed).await?;
                held |= overtaken.len() < n;
                overtaken
            }
        };
        if overtaken.is_empty() || !retry::made_again(&op.change()) {
            return Ok(Changed {
                applied: held || applied,
                before: None,
            });
        }
        for (key, newer) in &overtaken {
            retry::catch_up(ctx, key, *newer).await?;
        }
        attempt += 1;
    }
}

/// One attempt's change of the key's cells here: whether any changed,
/// and the writes of those that did.
async fn make(
    ctx: &Arc<Ctx>,
    op: &ExpireRowOp,
    replicas: &Replicas,
    attempt: u32,
) -> Result<(bool, Vec<Write>), WireError> {
    let (partition, cl) = (op.key.partition(), op.cl);
    let columns = targets(ctx, &op.key, replicas, cl).await?;
    let columns: Vec<&[u8]> = columns.iter().map(Vec::as_slice).collect();
    let done = ctx
        .engine()
        .change_row(partition, &columns, op.change(), now_ms())
        .await
        .map_err(|e| partial(engine_error(&e), columns.len()))?;
    let applied = expire_answer(done.iter().map(|(_, d, _)| d.applied));
    let changed = done
        .into_iter()
        .filter(|(_, d, _)| d.applied)
        .map(|(key, _, state)| Write::new(ctx, key, state, replicas.clone(), cl, attempt))
        .collect();
    Ok((applied, changed))
}

/// Catches this node up on `key`'s partition from every live replica
/// (at least `cl`'s count) and answers the columns an `EXPIRE` of it
/// changes (`expire_targets`). A live counter is the whole answer, so its
/// cell alone is read first, as a change of one counter reads it; only a
/// key without one costs the row's read and its count's, at once.
async fn targets(
    ctx: &Arc<Ctx>,
    key: &Key,
    replicas: &Replicas,
    cl: Consistency,
) -> Result<Vec<Vec<u8>>, WireError> {
    let partition = key.partition();
    let counter = learn(ctx, key, replicas, cl).await?;
    if counter.live(now_ms()) {
        return Ok(vec![Vec::new()]);
    }
    let count = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    let (row, count_cell) = tokio::try_join!(
        read::read_row(ctx, partition, replicas, cl, Reach::AllLive),
        learn(ctx, &count, replicas, cl),
    )?;
    for (column, cell) in &row {
        let key = Key::new(partition, column).map_err(|e| engine_error(&e))?;
        read::apply_here(ctx, &key, cell, Wait::IfChanged)
            .await
            .map_err(|e| engine_error(&e))?;
    }
    let now = now_ms();
    let cells = row
        .iter()
        .map(|(column, cell)| (column.as_slice(), cell.live(now)))
        .chain([(count.column(), count_cell.live(now))]);
    Ok(expire_targets(cells)
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect())
}

/// `change::catch_up` of one cell, answering the merge it learned.
async fn learn(
    ctx: &Arc<Ctx>,
    key: &Key,
    replicas: &Replicas,
    cl: Consistency,
) -> Result<tally_engine::Cell, WireError> {
    let (merged, _) = read::read_key(ctx, key, replicas, cl, Reach::AllLive).await?;
    read::apply_here(ctx, key, &merged, Wait::IfChanged)
        .await
        .map_err(|e| engine_error(&e))?;
    Ok(merged)
}

/// Replicates the changed cells' headers (durable here) in one round;
/// answers at the verdict of their level, with the cells a newer epoch
/// overtook (each key and that epoch, to make the `EXPIRE` again), and
/// the replication goes on for its hints.
async fn replicate_headers(
    ctx: &Arc<Ctx>,
    mut writes: Vec<Write>,
) -> Result<Vec<(Key, Epoch)>, WireError> {
    let keys: Vec<Key> = writes.iter().map(|w| w.key.clone()).collect();
    let (tx, rx) = oneshot::channel();
    let task_ctx = ctx.clone();
    tokio::spawn(async move {
        // The changes returned once their new states were durable here.
        let local = std::future::ready(Ok(()));
        replicate(&task_ctx, &mut writes, local, |w| {
            let verdicts: Option<Vec<_>> = w.iter().map(|w| w.round.verdict().cloned()).collect();
            let _ = tx.send(verdicts);
        })
        .await;
    });
    match rx.await {
        Ok(Some(verdicts)) => match retry::next(&verdicts) {
            Next::Fail(e) => Err(e.clone()),
            Next::Answer | Next::Again(_) => Ok(keys
                .into_iter()
                .zip(&verdicts)
                .filter_map(|(key, v)| match v {
                    Verdict::Retry { epoch } => Some((key, *epoch)),
                    _ => None,
                })
                .collect()),
        },
        Ok(None) | Err(_) => Err(WireError::unknown(
            tally_net::wire::ErrorKind::Internal,
            "the expire's replication ended without a verdict",
        )),
    }
}

/// The error of a row change that failed part way: the columns changed
/// before the failure stay changed here, so with more than one column
/// whether anything applied is unknown (never "not applied", which would
/// let a coordinator try the next leader, or a client trust an `NX`).
fn partial(e: WireError, columns: usize) -> WireError {
    match columns > 1 {
        true => WireError::unknown(e.kind, e.message),
        false => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::{ErrorKind, Outcome};

    #[test]
    fn a_row_change_that_failed_part_way_has_an_unknown_outcome() {
        let full = || WireError::not_applied(ErrorKind::Unavailable, "disk full");
        assert_eq!(partial(full(), 1).outcome, Outcome::NotApplied);
        let e = partial(full(), 3);
        assert_eq!(
            (e.outcome, e.kind),
            (Outcome::Unknown, ErrorKind::Unavailable)
        );
        assert_eq!(e.message, "disk full");
    }
}
