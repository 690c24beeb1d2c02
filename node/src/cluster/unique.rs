//! Reading unique counters (see `write::unique` for adding to them): the
//! count is an ordinary counter cell, read at the level asked; a member is
//! present when its cell is in the count's epoch (or a later one: the
//! count read may be behind) and positive, and the count's deadline has
//! not passed (`tally_engine::unique::is_present`).
//!
//! A unique counter expires as a Redis set does: its deadline is the
//! count's epoch's, changed by `EXPIRE`/`PERSIST` as any counter's, by
//! the expire of the whole key (`write::expire`: the count's key is
//! reserved, so clients reach it only through there). Past it the count reads 0 and every member absent; the
//! next admission restarts it (see `tally_engine::unique`).

use std::sync::Arc;

use tally_engine::{Cell, now_ms, unique};
use tally_net::wire::{Consistency, WireError};

use crate::base::convert::{engine_error, live_value};
use crate::cluster::ctx::Ctx;
use crate::cluster::read;
use crate::cluster::write::unique::check_members;

/// The number of distinct members of `partition` at `cl`: 0 once its
/// deadline has passed.
pub(crate) async fn count(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    cl: Consistency,
) -> Result<i64, WireError> {
    live_value(&count_cell(ctx, partition, cl).await?, now_ms()).map(|v| v.unwrap_or(0))
}

/// The merged cell of `partition`'s count at `cl`: its epoch holds the
/// unique counter's deadline.
pub(crate) async fn count_cell(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    cl: Consistency,
) -> Result<Cell, WireError> {
    let key = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    read::get_cell(ctx, &key, cl).await
}

/// Whether each of `members` is in `partition`, at `cl`.
pub(crate) async fn contains(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    members: &[Vec<u8>],
    cl: Consistency,
) -> Result<Vec<bool>, WireError> {
    check_members(members)?;
    let key = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    let epoch = read::get_cell(ctx, &key, cl).await?.epoch();
    // One clock for every member: a deadline passing mid-call does not
    // split them.
    let now = now_ms();
    let mut out = Vec::with_capacity(members.len());
    for m in members {
        let key = unique::member_key(partition, m).map_err(|e| engine_error(&e))?;
        let cell = read::get_cell(ctx, &key, cl).await?;
        out.push(unique::is_present(&cell, epoch, now));
    }
    Ok(out)
}

/// Resets the unique counter `partition` at `cl` if its count is live (it
/// has shards and its deadline has not passed); answers whether it was.
/// Its members' cells stay, in an epoch the count has left: absent.
pub(crate) async fn reset(
    ctx: &Arc<Ctx>,
    writes: &crate::cluster::write::Writes,
    partition: &[u8],
    cl: Consistency,
) -> Result<bool, WireError> {
    let key = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    if !read::get_cell(ctx, &key, cl).await?.live(now_ms()) {
        return Ok(false);
    }
    writes.reset(&key, cl).await.map(|()| true)
}
