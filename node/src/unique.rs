//! Reading unique counters (see `write::unique` for adding to them): the
//! count is an ordinary counter cell, read at the level asked; a member is
//! present when its cell is in the count's epoch (or a later one: the
//! count read may be behind) and positive.

use std::sync::Arc;

use tally_engine::{now_ms, unique};
use tally_net::wire::{Consistency, ErrorKind, MEMBERS_MAX, WireError};

use crate::convert::{engine_error, value};
use crate::ctx::Ctx;
use crate::read;

/// The number of distinct members of `partition` at `cl`.
pub(crate) async fn count(
    ctx: &Arc<Ctx>,
    partition: &[u8],
    cl: Consistency,
) -> Result<i64, WireError> {
    let key = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    value(&read::get_cell(ctx, &key, cl).await?)
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
    let mut out = Vec::with_capacity(members.len());
    for m in members {
        let key = unique::member_key(partition, m).map_err(|e| engine_error(&e))?;
        let cell = read::get_cell(ctx, &key, cl).await?;
        out.push(unique::is_present(&cell, epoch, now_ms()));
    }
    Ok(out)
}

/// Resets the unique counter `partition` at `cl` if its count has shards;
/// answers whether it had. Its members' cells stay, in an epoch the count
/// has left: absent.
pub(crate) async fn reset(
    ctx: &Arc<Ctx>,
    writes: &crate::write::Writes,
    partition: &[u8],
    cl: Consistency,
) -> Result<bool, WireError> {
    let key = unique::count_key(partition).map_err(|e| engine_error(&e))?;
    if read::get_cell(ctx, &key, cl).await?.shards().is_empty() {
        return Ok(false);
    }
    writes.reset(&key, cl).await.map(|()| true)
}

/// Refuses a request with no members or too many.
pub(crate) fn check_members(members: &[Vec<u8>]) -> Result<(), WireError> {
    if members.is_empty() || members.len() > MEMBERS_MAX {
        return Err(WireError::new(
            ErrorKind::Invalid,
            format!(
                "{} members in one request (1 to {MEMBERS_MAX})",
                members.len()
            ),
        ));
    }
    Ok(())
}
