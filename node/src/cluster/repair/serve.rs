//! A replica's side of a repair: digests of token slices, pages of leaves,
//! and "repaired" (see `repair`).
//!
//! Scans run on a thread of their own at the lowest CPU priority
//! ([`SCAN_NICE`]), never on the runtime's threads: a repair takes the CPU
//! adds leave idle, so adds keep flowing while it runs, and an idle node
//! scans at full speed.

use std::ops::ControlFlow;
use std::sync::Arc;

use tally_engine::{Engine, Key, cell_digest};
use tally_net::ring::{TokenRange, partition_token};
use tally_net::wire::{
    ErrorKind, PeerRequest, PeerResponse, REPAIR_LEAVES_MAX, REPAIR_RANGES_MAX,
    REPAIR_SEGMENTS_MAX, WireError, WireRange,
};

use super::{Locator, in_runs, runs_valid};
use crate::base::convert::{engine_error, key, wire_key};
use crate::cluster::ctx::Ctx;

/// Answers a repair request (`RepairDigests`, `RepairLeaves`, `Repaired`).
pub(crate) async fn serve(ctx: &Arc<Ctx>, req: PeerRequest) -> Result<PeerResponse, WireError> {
    match req {
        PeerRequest::RepairDigests { ranges, segments } => {
            let ranges = check(&ranges, segments)?;
            let ctx = ctx.clone();
            blocking(move || {
                let topology = ctx.topology();
                digests(ctx.engine(), &ranges, segments, &|p| topology.flushed(p))
            })
            .await
        }
        PeerRequest::RepairLeaves {
            ranges,
            segments,
            wanted,
            after,
            limit,
        } => {
            let ranges = check(&ranges, segments)?;
            if !runs_valid(&wanted, ranges.len() * segments as usize) {
                return Err(invalid("wanted slices out of order or out of range"));
            }
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            if !(1..=REPAIR_LEAVES_MAX).contains(&limit) {
                return Err(invalid("leaves per page out of range"));
            }
            let after = after.as_ref().map(key).transpose()?;
            let ctx = ctx.clone();
            blocking(move || {
                let topology = ctx.topology();
                leaves(
                    ctx.engine(),
                    &Locator::new(&ranges, segments),
                    &wanted,
                    (after, limit),
                    &|p| topology.flushed(p),
                )
            })
            .await
        }
        PeerRequest::Repaired { node, started_ms } => {
            if let Some(i) = ctx.config().nodes.iter().position(|n| n.id == node) {
                ctx.hints().repaired(i, started_ms);
            }
            Ok(PeerResponse::Applied)
        }
        _ => Err(invalid("not a repair request")),
    }
}

fn invalid(why: &str) -> WireError {
    WireError::new(ErrorKind::Invalid, format!("repair request refused: {why}"))
}

/// The ranges of a request, checked against the bounds.
fn check(ranges: &[WireRange], segments: u32) -> Result<Vec<TokenRange>, WireError> {
    if ranges.is_empty() || ranges.len() > REPAIR_RANGES_MAX {
        return Err(invalid("1 to 4096 ranges"));
    }
    if segments == 0 || ranges.len() * segments as usize > REPAIR_SEGMENTS_MAX {
        return Err(invalid("too many slices"));
    }
    Ok(crate::base::convert::token_ranges(ranges))
}

/// The nice value of scan threads: the lowest priority (see the module docs).
const SCAN_NICE: libc::c_int = 19;

/// Runs a scan on a thread of its own at [`SCAN_NICE`] (in a simulation,
/// on the runtime's thread: see `tally_world::runs_inline`).
async fn blocking(
    f: impl FnOnce() -> Result<PeerResponse, WireError> + Send + 'static,
) -> Result<PeerResponse, WireError> {
    if tally_world::runs_inline() {
        return f();
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("tally-repair".into())
        .spawn(move || {
            // On Linux this is the calling thread's nice value alone. A
            // failure leaves the scan at normal priority: it still works.
            // SAFETY: setpriority(2) takes plain integers and touches no memory of ours.
            #[expect(unsafe_code, reason = "setpriority(2) has no safe std wrapper")]
            let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, SCAN_NICE) };
            let _ = tx.send(f());
        });
    let failed =
        |why: String| WireError::new(ErrorKind::Internal, format!("repair scan failed: {why}"));
    spawned.map_err(|e| failed(e.to_string()))?;
    rx.await
        .unwrap_or_else(|_| Err(failed("the scan thread panicked".into())))
}

/// Per slice, the wrapping sum of its cells' digests: one scan. Cells of
/// flushed generations are garbage, left out (see `topology::flush`), and
/// so are cells of a node's own Paxos state alone (`agree::handoff` moves
/// that).
fn digests(
    engine: &Engine,
    ranges: &[TokenRange],
    segments: u32,
    flushed: &dyn Fn(&[u8]) -> bool,
) -> Result<PeerResponse, WireError> {
    let locator = Locator::new(ranges, segments);
    let mut sums = vec![0u64; ranges.len() * segments as usize];
    let mut scratch = Vec::new();
    engine
        .scan(None, |k, c| {
            if flushed(k.partition()) || c.holds_only_agreed() {
                return ControlFlow::Continue(());
            }
            if let Some(i) = locator.locate(partition_token(k.partition())) {
                let sum = &mut sums[i as usize];
                *sum = sum.wrapping_add(cell_digest(k, c, &mut scratch));
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| engine_error(&e))?;
    Ok(PeerResponse::Digests(sums))
}

/// Up to `limit` keys and cell digests in the `wanted` slices, after
/// `after`, in key order; none of flushed generations, none of Paxos
/// state alone.
fn leaves(
    engine: &Engine,
    locator: &Locator,
    wanted: &[(u32, u32)],
    (after, limit): (Option<Key>, usize),
    flushed: &dyn Fn(&[u8]) -> bool,
) -> Result<PeerResponse, WireError> {
    let mut out = Vec::new();
    let mut more = None;
    let mut scratch = Vec::new();
    engine
        .scan(after.as_ref(), |k, c| {
            let slice = locator.locate(partition_token(k.partition()));
            let compared = !flushed(k.partition()) && !c.holds_only_agreed();
            if slice.is_some_and(|s| in_runs(wanted, s)) && compared {
                out.push((wire_key(k), cell_digest(k, c, &mut scratch)));
                if out.len() == limit {
                    more = Some(wire_key(k));
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| engine_error(&e))?;
    Ok(PeerResponse::Leaves { leaves: out, more })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: i64, end: i64) -> WireRange {
        WireRange { start, end }
    }

    #[test]
    fn requests_past_the_bounds_are_refused() {
        assert_eq!(check(&[range(0, 10)], 16).unwrap().len(), 1);
        assert!(check(&[], 16).is_err(), "no ranges");
        assert!(check(&[range(0, 10)], 0).is_err(), "no slices");
        let many = vec![range(0, 10); REPAIR_RANGES_MAX + 1];
        assert!(check(&many, 1).is_err(), "too many ranges");
        let most = vec![range(0, 10); REPAIR_RANGES_MAX];
        assert!(check(&most, 256).is_ok());
        assert!(check(&most, 257).is_err(), "too many slices");
        assert!(check(&[range(0, 10)], u32::MAX).is_err());
    }
}
