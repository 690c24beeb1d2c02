//! Writes of whole cells that merge by their own order: the columns of a
//! CQL regular table, each a last-write-wins value or tombstone on its
//! epoch (`client::cql::lww`).
//!
//! Such a write needs no catch-up and no leader's decision, unlike a
//! counter's change: its cells are made whole by the coordinator (their
//! epochs are the write's timestamp), so any writable replica leads it.
//! The leader merges them durably, then replicates them by an add's
//! round. A replica that holds a newer value of a column answers `Stale`:
//! the write is overwritten there, as last-write-wins says, and that
//! replica counts as holding it (`Write::superseded_holds`).

use std::future::Future;
use std::sync::Arc;

use tally_engine::{Cell, Key, Wait};
use tally_net::wire::{Consistency, ErrorKind, PeerRequest, PeerResponse, WireCell, WireError};
use tokio::sync::oneshot;

use super::Writes;
use super::coordinate::{self, Lead, Leader, Op};
use super::queue::Origin;
use super::replicate::{Write, replicate};
use super::retry::{self, Next};
use crate::base::convert::{self, engine_error, wire_cell};
use crate::cluster::ctx::Ctx;
use crate::ring::Replicas;

/// Most cells one write carries (a CQL statement's columns of one
/// partition).
pub(crate) const CELLS_MAX: usize = tally_net::wire::LEADER_CELLS_MAX;

impl Writes {
    /// Writes `cells` (of one partition) at `cl`, led by any writable
    /// replica of it (here, or forwarded there).
    pub(crate) async fn put_cells(
        &self,
        cells: Vec<(Key, Cell)>,
        cl: Consistency,
    ) -> Result<(), WireError> {
        let op = CellsOp::new(cells, cl)?;
        coordinate::run(&self.ctx, op, Origin::Client).await
    }
}

/// Whole cells of several partitions: each partition's, by column.
pub(crate) type Partitions = Vec<(Vec<u8>, Vec<(Vec<u8>, Cell)>)>;

impl Writes {
    /// Writes each partition's cells (by column) at `cl`, in writes of at
    /// most [`CELLS_MAX`], all partitions at once.
    pub(crate) async fn put_partitions(
        &self,
        partitions: Partitions,
        cl: Consistency,
    ) -> Result<(), WireError> {
        let puts = partitions.into_iter().map(|(partition, cells)| async move {
            let mut keyed = keyed(&partition, cells)?;
            while !keyed.is_empty() {
                let rest = keyed.split_off(keyed.len().min(CELLS_MAX));
                self.put_cells(std::mem::replace(&mut keyed, rest), cl)
                    .await?;
            }
            Ok::<(), WireError>(())
        });
        for done in crate::base::join::join_all(puts).await {
            done?;
        }
        Ok(())
    }
}

/// `cells` (by column) of `partition`, keyed.
pub(crate) fn keyed(
    partition: &[u8],
    cells: Vec<(Vec<u8>, Cell)>,
) -> Result<Vec<(Key, Cell)>, WireError> {
    cells
        .into_iter()
        .map(|(c, cell)| {
            let key = Key::new(partition, &c)
                .map_err(|e| WireError::not_applied(ErrorKind::Invalid, e.to_string()))?;
            Ok((key, cell))
        })
        .collect()
}

/// A write of whole cells of one partition, as the coordinator skeleton
/// runs it (`coordinate::run`).
pub(crate) struct CellsOp {
    cells: Vec<(Key, Cell)>,
    cl: Consistency,
}

impl CellsOp {
    /// The write of `cells` at `cl`: at least one, at most [`CELLS_MAX`],
    /// all of one partition.
    pub(crate) fn new(cells: Vec<(Key, Cell)>, cl: Consistency) -> Result<CellsOp, WireError> {
        let invalid = |m: &str| WireError::not_applied(ErrorKind::Invalid, m.to_string());
        let Some((first, _)) = cells.first() else {
            return Err(invalid("a write of cells names at least one"));
        };
        if cells.len() > CELLS_MAX {
            return Err(invalid("a write of cells names too many"));
        }
        if cells
            .iter()
            .any(|(k, _)| k.partition() != first.partition())
        {
            return Err(invalid("a write of cells names one partition"));
        }
        Ok(CellsOp { cells, cl })
    }

    /// The write a peer forwarded: `cells` of `partition`.
    pub(crate) fn forwarded(
        partition: &[u8],
        cells: Vec<(Vec<u8>, WireCell)>,
        cl: Consistency,
    ) -> Result<CellsOp, WireError> {
        let cells = cells
            .into_iter()
            .map(|(column, cell)| {
                let key = Key::new(partition, &column)
                    .map_err(|e| WireError::not_applied(ErrorKind::Invalid, e.to_string()))?;
                Ok((key, convert::cell(&cell)))
            })
            .collect::<Result<_, WireError>>()?;
        CellsOp::new(cells, cl)
    }

    /// What a leader answers it.
    pub(crate) fn respond((): ()) -> PeerResponse {
        PeerResponse::Applied
    }
}

impl Op for CellsOp {
    type Answer = ();

    fn what(&self) -> &'static str {
        "CQL write"
    }

    fn key(&self) -> &Key {
        &self.cells[0].0
    }

    fn cl(&self) -> Consistency {
        self.cl
    }

    fn leader(&self) -> Leader<'_> {
        Leader::Any
    }

    fn request(self) -> PeerRequest {
        let partition = self.cells[0].0.partition().to_vec();
        let cells = self
            .cells
            .iter()
            .map(|(k, c)| (k.column().to_vec(), wire_cell(c)))
            .collect();
        PeerRequest::LeaderCells {
            partition,
            cells,
            cl: self.cl,
        }
    }

    fn answer(resp: PeerResponse) -> Result<(), PeerResponse> {
        match resp {
            PeerResponse::Applied => Ok(()),
            other => Err(other),
        }
    }

    fn respond(answer: ()) -> PeerResponse {
        CellsOp::respond(answer)
    }
}

impl Lead for CellsOp {
    fn lead(
        self,
        ctx: &Arc<Ctx>,
        replicas: Replicas,
    ) -> impl Future<Output = Result<(), WireError>> + Send {
        lead(ctx.clone(), self, replicas)
    }
}

/// The leader's write: merge here durably, then replicate; answers at the
/// verdict of every cell's round.
async fn lead(ctx: Arc<Ctx>, op: CellsOp, replicas: Replicas) -> Result<(), WireError> {
    let items = op.cells.iter().map(|(k, c)| (k, c, None));
    let merged = ctx
        .engine()
        .apply(items, Wait::Durable)
        .await
        .map_err(|e| engine_error(&e))?;
    for result in merged {
        result.map_err(|e| engine_error(&e))?;
    }
    let writes: Vec<Write> = op
        .cells
        .into_iter()
        .map(|(k, c)| Write::new(&ctx, k, c, replicas.clone(), op.cl, 1).superseded_holds())
        .collect();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let mut writes = writes;
        // The cells were durable here before the round began.
        let local = std::future::ready(Ok(()));
        replicate(&ctx, &mut writes, local, |w| {
            let verdicts: Vec<_> = w.iter().map(|w| w.round.verdict().cloned()).collect();
            let _ = tx.send(verdicts);
        })
        .await;
    });
    let verdicts = rx.await.unwrap_or_default();
    let verdicts: Option<Vec<_>> = verdicts.into_iter().collect();
    match verdicts.as_deref().map(|v| retry::next(v.iter())) {
        Some(Next::Answer) => Ok(()),
        Some(Next::Fail(e)) => Err(e.clone()),
        // A replica's newer value holds a superseded cell: never `Stale`.
        Some(Next::Again(_)) | None => Err(WireError::unknown(
            ErrorKind::Internal,
            "the write's replication ended without a verdict",
        )),
    }
}
