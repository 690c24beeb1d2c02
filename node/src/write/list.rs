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
//! (last writer wins); documented in the README.

use std::sync::Arc;

use tally_engine::list::{End, ListChange, ListReply};
use tally_engine::{Key, now_ms};
use tally_net::list::{WireEnd, WireListChange, WireListReply};
use tally_net::wire::{Consistency, PeerRequest, PeerResponse, WireError};

use super::Writes;
use super::change::{catch_up, replicate_header, settle_unmade};
use super::forward::{forward, unexpected};
use crate::convert::{engine_error, wire_key};
use crate::ctx::Ctx;
use crate::placement::Route;
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

    /// The leader's change: catch up, change, replicate.
    async fn lead_list(
        &self,
        key: &Key,
        change: WireListChange,
        cl: Consistency,
        replicas: Replicas,
    ) -> Result<WireListReply, WireError> {
        let ctx: &Arc<Ctx> = &self.ctx;
        catch_up(ctx, key, &replicas, cl).await?;
        let change = engine_list_change(change);
        if self.drop_this_add() {
            // FAULT INJECTION: acknowledged as if made, never made (counted
            // with the adds: every `n`th led write).
            let mut cell = ctx.engine.get(key).map_err(|e| engine_error(&e))?;
            let done = tally_engine::list::decide_list(&mut cell, &change, 0, now_ms())
                .map_err(|e| engine_error(&e.into()))?;
            return Ok(wire_reply(done.reply));
        }
        let (done, state) = ctx
            .engine
            .change_list(key, &change, now_ms())
            .await
            .map_err(|e| engine_error(&e))?;
        match done.applied {
            true => replicate_header(ctx, key, state, replicas, cl).await?,
            false => settle_unmade(ctx).await?,
        }
        Ok(wire_reply(done.reply))
    }
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
