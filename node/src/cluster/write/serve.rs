//! Writes a peer forwarded here to lead (`PeerRequest::Leader*`), each
//! decoded into its operation and run through the coordinator skeleton
//! (`coordinate::run`) as forwarded: led here or refused, never forwarded
//! again. An add's lead step is the batch: it is queued as forwarded
//! (`Origin::Lead`), and the batch routes it by the same rule.

use tally_net::wire::{Change, ErrorKind, PeerRequest, PeerResponse, WireError};

use super::Writes;
use super::cells::CellsOp;
use super::change::ChangeOp;
use super::coordinate::{Op, run};
use super::expire::ExpireRowOp;
use super::list::{Asked, ListOp};
use super::queue::Origin;
use super::unique::AdmitOp;
use crate::base::convert;

/// Leads a write a peer forwarded here, or refuses it; answers what the
/// peer expects of it.
pub(crate) async fn serve(writes: &Writes, req: PeerRequest) -> Result<PeerResponse, WireError> {
    let (ctx, led) = (&writes.ctx, Origin::Lead);
    match req {
        PeerRequest::LeaderAdd { key, delta, cl } => {
            let key = convert::key(&key)?;
            let added = writes.add_with(key, delta, None, cl, led).await?;
            Ok(PeerResponse::Added(added))
        }
        PeerRequest::LeaderAddOnce { key, delta, id, cl } => {
            let (key, id) = (convert::key(&key)?, convert::op_id(&id)?);
            let added = writes.add_with(key, delta, Some(id), cl, led).await?;
            Ok(PeerResponse::Added(added))
        }
        PeerRequest::LeaderReset { key, cl } => {
            let key = convert::key(&key)?;
            let op = ChangeOp::new(&key, Change::Delete, cl, false);
            run(ctx, op, led).await.map(|_| PeerResponse::Reset)
        }
        PeerRequest::LeaderChange {
            key,
            change,
            reads,
            cl,
        } => {
            let key = convert::key(&key)?;
            let op = ChangeOp::new(&key, change, cl, reads);
            run(ctx, op, led).await.map(ChangeOp::respond)
        }
        PeerRequest::LeaderList { key, change, cl } => {
            let key = convert::key(&key)?;
            let op = ListOp::new(writes, &key, change, cl, Asked::UNSAID);
            run(ctx, op, led).await.map(ListOp::respond)
        }
        PeerRequest::LeaderListAt {
            key,
            change,
            cl,
            asked_ms,
        } => {
            let key = convert::key(&key)?;
            let op = ListOp::new(writes, &key, change, cl, Asked::at(asked_ms));
            run(ctx, op, led).await.map(ListOp::respond)
        }
        PeerRequest::LeaderAdmit {
            partition,
            members,
            cl,
        } => {
            let count = AdmitOp::count_key(&partition)?;
            let op = AdmitOp::forwarded(writes, &count, members, cl)?;
            run(ctx, op, led).await.map(AdmitOp::respond)
        }
        PeerRequest::LeaderExpireRow {
            partition,
            at_ms,
            only,
            cl,
        } => {
            let op = ExpireRowOp::new(&partition, (at_ms, only), cl)?;
            run(ctx, op, led).await.map(ExpireRowOp::respond)
        }
        PeerRequest::LeaderCells {
            partition,
            cells,
            cl,
        } => {
            let op = CellsOp::forwarded(&partition, cells, cl)?;
            run(ctx, op, led).await.map(CellsOp::respond)
        }
        _ => Err(WireError::new(
            ErrorKind::Internal,
            "not a request for a leader",
        )),
    }
}
