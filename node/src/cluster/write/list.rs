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
//! The race is decided by when each change *began*: a change's epoch is
//! at least its stamp (and above the epoch it was made on), and its stamp
//! is the wall-clock time its leader began reading the list, or the time
//! its coordinator was asked for it if that is earlier ([`stamp`]), never
//! the time it is made. A leader held up after it began (a read waiting
//! for a silent replica, a pause) makes its change on what it read then,
//! so it must lose to the changes other leaders made meanwhile, which
//! began later; stamped with the time it is made, it would win and erase
//! pushes already acknowledged (the chaos run's checker caught exactly
//! that). Likewise a request that reaches its leader late (the leader was
//! paused or cut off while the request waited in the network, and its
//! coordinator gave up on it; the client pushed on, through another
//! leader): it is stamped with when its coordinator was asked, which the
//! peer request carries (`PeerRequest::LeaderListAt`, once every member
//! has feature `list-asked-at`), so it loses to the pushes asked for after
//! it. Stamped with when its leader read, it would win over them and
//! could erase one acknowledged meanwhile, if its leader's read missed it
//! (the likeliest cause of an acknowledged push a chaos run once found
//! lost). A change that a replica shows has lost
//! (it holds a newer epoch another leader made, and answers `Stale`:
//! `Replicated::Overtaken`) answers an error, not success; a newer epoch
//! this node made holds the change (it was made on it).

use std::future::Future;
use std::sync::Arc;

use tally_engine::list::At;
use tally_engine::{Key, now_ms};
use tally_net::list::{ListChange, ListReply};
use tally_net::wire::{Consistency, ErrorKind, PeerRequest, PeerResponse, WireError};

use super::Writes;
use super::change::{Replicated, catch_up, replicate_header, settle_unmade, unmade};
use super::changing::{Changing, Step};
use super::coordinate::{self, Lead, Leader, Op};
use super::queue::Origin;
use crate::base::convert::{engine_error, wire_key};
use crate::cluster::ctx::Ctx;
use crate::ring::Replicas;

impl Writes {
    /// Makes `change` to the list `key` at `cl`, led by its first writable
    /// replica (here, or forwarded there), as asked of this node `asked`.
    pub(crate) async fn change_list(
        &self,
        key: &Key,
        change: ListChange,
        cl: Consistency,
        asked: Asked,
    ) -> Result<ListReply, WireError> {
        let op = ListOp::new(self, key, change, cl, asked);
        coordinate::run(&self.ctx, op, Origin::Client).await
    }
}

/// When a list change's coordinator was asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asked {
    /// The coordinator's wall clock then (ms); `None` for a change an
    /// older peer forwarded, which does not say.
    pub(crate) ms: Option<u64>,
    /// Whether a leader it is forwarded to may be told: every member up
    /// has feature `list-asked-at` (else it goes as a `LeaderList`, which
    /// every build reads).
    pub(crate) tell: bool,
}

impl Asked {
    /// A change forwarded by an older peer: when it was asked is unsaid.
    pub(crate) const UNSAID: Asked = Asked {
        ms: None,
        tell: false,
    };

    /// Asked of its coordinator at `ms` (a forwarded change, led where it
    /// arrives: never forwarded again).
    pub(crate) fn at(ms: u64) -> Asked {
        Asked {
            ms: Some(ms),
            tell: false,
        }
    }
}

/// The stamp of a list change whose leader began reading the list at
/// `read_at` and whose coordinator was asked for it at `asked_ms`: the
/// earlier of the two (see the module docs), both wall-clock ms.
pub(crate) fn stamp(read_at: u64, asked_ms: Option<u64>) -> u64 {
    asked_ms.map_or(read_at, |asked| asked.min(read_at))
}

/// A change of a list, as the coordinator skeleton runs it
/// (`coordinate::run`): led by the list's first writable replica.
pub(crate) struct ListOp<'a> {
    writes: &'a Writes,
    key: &'a Key,
    change: ListChange,
    cl: Consistency,
    asked: Asked,
}

impl<'a> ListOp<'a> {
    /// `change` to the list `key` at `cl`, asked of its coordinator
    /// `asked`, led (if here) by `writes`.
    pub(crate) fn new(
        writes: &'a Writes,
        key: &'a Key,
        change: ListChange,
        cl: Consistency,
        asked: Asked,
    ) -> Self {
        ListOp {
            writes,
            key,
            change,
            cl,
            asked,
        }
    }
}

impl Op for ListOp<'_> {
    type Answer = ListReply;

    fn what(&self) -> &'static str {
        self.change.name()
    }

    fn key(&self) -> &Key {
        self.key
    }

    fn cl(&self) -> Consistency {
        self.cl
    }

    fn leader(&self) -> Leader<'_> {
        Leader::First
    }

    fn request(self) -> PeerRequest {
        let (key, change, cl) = (wire_key(self.key), self.change, self.cl);
        match self.asked {
            Asked {
                ms: Some(asked_ms),
                tell: true,
            } => PeerRequest::LeaderListAt {
                key,
                change,
                cl,
                asked_ms,
            },
            _ => PeerRequest::LeaderList { key, change, cl },
        }
    }

    fn answer(resp: PeerResponse) -> Result<ListReply, PeerResponse> {
        match resp {
            PeerResponse::Listed(reply) => Ok(reply),
            other => Err(other),
        }
    }

    fn respond(reply: ListReply) -> PeerResponse {
        PeerResponse::Listed(reply)
    }
}

impl Lead for ListOp<'_> {
    fn lead(
        self,
        _ctx: &Arc<Ctx>,
        replicas: Replicas,
    ) -> impl Future<Output = Result<ListReply, WireError>> + Send {
        self.writes
            .lead_list(self.key, self.change, self.cl, self.asked.ms, replicas)
    }
}

impl Writes {
    /// The leader's change: catch up, change, replicate, by the steps of
    /// a `SET` (`changing::Changing`: a list change is never made again).
    /// The change takes the time its catch-up began, or its coordinator
    /// was asked at `asked_ms` if earlier, not the time it is made (see
    /// the module docs), and is not acknowledged if a replica holds a
    /// newer one another leader made.
    async fn lead_list(
        &self,
        key: &Key,
        change: ListChange,
        cl: Consistency,
        asked_ms: Option<u64>,
        replicas: Replicas,
    ) -> Result<ListReply, WireError> {
        let ctx: &Arc<Ctx> = &self.ctx;
        let read_at = now_ms();
        let mut changing = Changing::new(false);
        let (mut answer, mut state, mut lost) = (None, None, false);
        loop {
            match changing.step() {
                Step::CatchUp => {
                    catch_up(ctx, key, &replicas, cl).await?;
                    changing.on_caught_up();
                }
                Step::Make => {
                    self.hold_list_change(&change).await;
                    let at = self.list_stamp(stamp(read_at, asked_ms));
                    let Some((done, made)) = self.make_list(key, &change, at).await? else {
                        // FAULT INJECTION: acknowledged as if made, never made.
                        return self.dropped_list_change(key, &change, at);
                    };
                    changing.on_made(done.applied);
                    (answer, state) = (Some(done.reply), Some(made));
                }
                Step::Settle => {
                    settle_unmade(ctx).await?;
                    changing.on_settled();
                }
                Step::Replicate { attempt } => {
                    let made = state.take().ok_or_else(unmade)?;
                    match replicate_header(ctx, key, made, replicas.clone(), (cl, attempt)).await? {
                        Replicated::Held => changing.on_held(),
                        Replicated::Overtaken(newer) => {
                            // A later change led here was made on this one: it holds it.
                            lost = newer.origin != ctx.engine().counter_id();
                            changing.on_overtaken(newer);
                        }
                    }
                }
                Step::CatchUpTo(_) => return Err(unmade()),
                Step::Answer if lost => return Err(overtaken()),
                Step::Answer => return answer.ok_or_else(unmade),
            }
        }
    }

    /// Makes `change` here, stamped `at` (what expired is read now), and
    /// answers what the engine did and the cell's new state; `None` where
    /// fault injection drops the change.
    async fn make_list(
        &self,
        key: &Key,
        change: &ListChange,
        at: u64,
    ) -> Result<Option<(tally_engine::list::ListDone, tally_engine::Cell)>, WireError> {
        if self.drop_this_add() {
            return Ok(None);
        }
        let made = self
            .ctx
            .engine()
            .change_list(key, change, stamped(at))
            .await;
        made.map(Some).map_err(|e| engine_error(&e))
    }

    /// FAULT INJECTION: a list change acknowledged as if made, never made
    /// (counted with the adds: every `n`th led write).
    fn dropped_list_change(
        &self,
        key: &Key,
        change: &ListChange,
        at: u64,
    ) -> Result<ListReply, WireError> {
        let mut cell = self.ctx.engine().get(key).map_err(|e| engine_error(&e))?;
        let done = tally_engine::list::decide_list(&mut cell, change, 0, stamped(at))
            .map_err(|e| engine_error(&e.into()))?;
        Ok(done.reply)
    }
}

/// When a list change stamped `at` (the leader's stamp) is made: now, or
/// the stamp if this node's clock is behind it.
fn stamped(at: u64) -> At {
    At {
        now_ms: now_ms().max(at),
        stamp_ms: at,
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

    /// The time a list change of stamp `stamp` takes.
    fn list_stamp(&self, stamp: u64) -> u64 {
        let when_made = self
            .list_faults
            .stamp_when_made
            .load(std::sync::atomic::Ordering::Relaxed);
        if when_made { now_ms() } else { stamp }
    }

    /// Waits as the test seam says, if `change` is the push it holds.
    async fn hold_list_change(&self, change: &ListChange) {
        let held = self.list_faults.hold.lock().clone();
        let Some((value, hold)) = held else {
            return;
        };
        if let ListChange::Push { values, .. } = change
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
    /// The time a list change of stamp `stamp` takes.
    fn list_stamp(&self, stamp: u64) -> u64 {
        stamp
    }

    /// No test seam in this build.
    async fn hold_list_change(&self, _change: &ListChange) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_stamped_when_its_leader_read_or_its_coordinator_was_asked_if_earlier() {
        // Led where it was asked: its read began after.
        assert_eq!(stamp(1_005, Some(1_000)), 1_000);
        // Forwarded by an older peer: its read.
        assert_eq!(stamp(1_005, None), 1_005);
        // Delivered late, long after its coordinator gave up on it: it
        // takes the time it was asked, so the pushes asked for since win.
        assert_eq!(stamp(9_000, Some(1_000)), 1_000);
        // A coordinator whose clock runs ahead cannot stamp it later than
        // its leader's read.
        assert_eq!(stamp(1_000, Some(5_000)), 1_000);
    }
}
