//! Changes of a list (`LPUSH`, `LTRIM`, `LPOP` ...). A list is a
//! last-writer-wins value on its cell's epoch (`tally_engine::cell::list`),
//! so every change is led like a `SET` (`change`): the leader catches up
//! with every live replica, makes the change under the cell lock
//! (`tally_engine::list::decide_list`) and replicates the new epoch, list
//! and all, by an add's round.
//!
//! Unlike a `SET`, a list change is led by the list's **first writable
//! replica** (`placement::route_first`), whichever node a client asks: two
//! changes through different coordinators meet under one cell lock, and
//! neither overwrites the other. Only while that replica is down or cut
//! off can two leaders race, and then one change may lose to the other
//! (last writer wins); documented in `docs/redis.md`.
//!
//! The race is decided by when each leader *began reading* the list: a
//! change's epoch is at least the wall-clock time its catch-up began (and
//! above the epoch it was made on), not the time it is made. A leader held
//! up after it began (a read waiting for a silent replica, a pause) makes
//! its change on what it read then, so it must lose to the changes other
//! leaders made meanwhile, which began later; stamped with the time it is
//! made, it would win and erase pushes already acknowledged (the chaos
//! run's checker caught exactly that). A change that a replica shows has
//! lost (it holds a newer epoch another leader made, and answers `Stale`:
//! `Replicated::Overtaken`) answers an error, not success; a newer epoch
//! this node made holds the change (it was made on it).

use std::sync::Arc;

use tally_engine::list::{End, ListChange, ListReply};
use tally_engine::{Key, now_ms};
use tally_net::list::{WireEnd, WireListChange, WireListReply};
use tally_net::wire::{Consistency, ErrorKind, PeerRequest, PeerResponse, WireError};

use super::Writes;
use super::change::{Replicated, catch_up, replicate_header, settle_unmade};
use super::forward::{forward, unexpected};
use crate::base::convert::{engine_error, wire_key};
use crate::cluster::ctx::Ctx;
use crate::cluster::placement::Route;
use crate::ring::Replicas;

impl Writes {
    /// Makes `change` to the list `key` at `cl`, led by its first writable
    /// replica (here, or forwarded there).
    pub(crate) async fn change_list(
        &self,
        key: &Key,
        change: WireListChange,
        cl: Consistency,
    ) -> Result<WireListReply, WireError> {
        match self.ctx.route_first(key, cl, change.name())? {
            Route::Lead(replicas) => self.lead_list(key, change, cl, replicas).await,
            Route::Forward(live) => {
                let req = PeerRequest::LeaderList {
                    key: wire_key(key),
                    change,
                    cl,
                };
                match forward(&self.ctx, &live, req).await? {
                    PeerResponse::Listed(reply) => Ok(reply),
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// The leader's list change for a coordinator that forwarded it.
    pub(crate) async fn lead_list_forwarded(
        &self,
        key: &Key,
        change: WireListChange,
        cl: Consistency,
    ) -> Result<WireListReply, WireError> {
        let replicas = self.ctx.lead_here(key, cl, change.name())?;
        self.lead_list(key, change, cl, replicas).await
    }

    /// The leader's change: catch up, change, replicate. The change takes
    /// the time its catch-up began, not the time it is made (see the module
    /// docs), and is not acknowledged if a replica holds a newer one.
    async fn lead_list(
        &self,
        key: &Key,
        change: WireListChange,
        cl: Consistency,
        replicas: Replicas,
    ) -> Result<WireListReply, WireError> {
        let ctx: &Arc<Ctx> = &self.ctx;
        let read_at = now_ms();
        catch_up(ctx, key, &replicas, cl).await?;
        self.hold_list_change(&change).await;
        let at = self.list_stamp(read_at);
        let change = engine_list_change(change);
        if self.drop_this_add() {
            // FAULT INJECTION: acknowledged as if made, never made (counted
            // with the adds: every `n`th led write).
            let mut cell = ctx.engine().get(key).map_err(|e| engine_error(&e))?;
            let done = tally_engine::list::decide_list(&mut cell, &change, 0, at)
                .map_err(|e| engine_error(&e.into()))?;
            return Ok(wire_reply(done.reply));
        }
        let (done, state) = ctx
            .engine()
            .change_list(key, &change, at)
            .await
            .map_err(|e| engine_error(&e))?;
        if !done.applied {
            settle_unmade(ctx).await?;
            return Ok(wire_reply(done.reply));
        }
        match replicate_header(ctx, key, state, replicas, cl).await? {
            // A later change led here was made on this one: it holds it.
            Replicated::Overtaken(newer) if newer.origin != ctx.engine().counter_id() => {
                Err(overtaken())
            }
            Replicated::Held | Replicated::Overtaken(_) => Ok(wire_reply(done.reply)),
        }
    }
}

/// A list change that a newer one, made through another leader that never
/// saw it, overtook: the newer list wins whole, without this change.
fn overtaken() -> WireError {
    WireError::unknown(
        ErrorKind::Timeout,
        "a newer change of the list, made meanwhile through another replica, overtook this one; it may not be in the list",
    )
}

/// A list change from the wire as the engine's.
fn engine_list_change(c: WireListChange) -> ListChange {
    let end = |e| match e {
        WireEnd::Left => End::Left,
        WireEnd::Right => End::Right,
    };
    match c {
        WireListChange::Push {
            end: e,
            values,
            only_existing,
        } => ListChange::Push {
            end: end(e),
            values,
            only_existing,
        },
        WireListChange::Pop { end: e, count } => ListChange::Pop {
            end: end(e),
            count: usize::try_from(count).unwrap_or(usize::MAX),
        },
        WireListChange::Trim { start, stop } => ListChange::Trim { start, stop },
        WireListChange::Set { index, value } => ListChange::Set { index, value },
        WireListChange::Remove { count, value } => ListChange::Remove { count, value },
        WireListChange::Insert {
            before,
            pivot,
            value,
        } => ListChange::Insert {
            before,
            pivot,
            value,
        },
    }
}

/// An engine list reply for the wire.
fn wire_reply(r: ListReply) -> WireListReply {
    match r {
        ListReply::Int(n) => WireListReply::Int(n),
        ListReply::Popped(elements) => WireListReply::Popped(elements),
        ListReply::Done => WireListReply::Done,
    }
}

/// Fault injection and a test seam for list changes (the test-only
/// `tallyd-faults`), to show what the time a change takes protects.
#[cfg(feature = "fault-injection")]
#[derive(Default)]
pub(super) struct ListFaults {
    /// TEST SEAM: a push of this value led here waits this long between
    /// its catch-up and its change, as a leader paused there would.
    hold: parking_lot::Mutex<Option<(Vec<u8>, std::time::Duration)>>,
    /// FAULT INJECTION: a change takes the time it is made, not the time
    /// its catch-up began.
    stamp_when_made: std::sync::atomic::AtomicBool,
}

#[cfg(feature = "fault-injection")]
impl Writes {
    /// TEST SEAM: from now on, a push of `value` this node leads waits
    /// `hold` between its catch-up and its change.
    pub(crate) fn inject_hold_list_push(&self, value: Vec<u8>, hold: std::time::Duration) {
        *self.list_faults.hold.lock() = Some((value, hold));
    }

    /// FAULT INJECTION for testing checks: list changes this node leads
    /// take the time they are made (a leader held up after its catch-up
    /// then wins over the changes made meanwhile, which it never saw).
    pub(crate) fn inject_list_stamp_when_made(&self) {
        self.list_faults
            .stamp_when_made
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The time a list change whose catch-up began at `read_at` takes.
    fn list_stamp(&self, read_at: u64) -> u64 {
        let when_made = self
            .list_faults
            .stamp_when_made
            .load(std::sync::atomic::Ordering::Relaxed);
        if when_made { now_ms() } else { read_at }
    }

    /// Waits as the test seam says, if `change` is the push it holds.
    async fn hold_list_change(&self, change: &WireListChange) {
        let held = self.list_faults.hold.lock().clone();
        let Some((value, hold)) = held else {
            return;
        };
        if let WireListChange::Push { values, .. } = change
            && values.contains(&value)
        {
            tracing::warn!(
                ?hold,
                "TEST SEAM: holding a list push between its catch-up and its change"
            );
            tokio::time::sleep(hold).await;
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
impl Writes {
    /// The time a list change whose catch-up began at `read_at` takes.
    fn list_stamp(&self, read_at: u64) -> u64 {
        read_at
    }

    /// No test seam in this build.
    async fn hold_list_change(&self, _change: &WireListChange) {}
}
