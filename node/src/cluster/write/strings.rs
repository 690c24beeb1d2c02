//! Adds to a key (or a hash's field) that holds a string, or to a key
//! that holds a sorted set: the leader refuses them, nothing applied, so
//! that no counter starts beside the register; the RESP layer then makes
//! the add to the string through agreement (`INCR` of a string that holds
//! an integer, as in Redis), or answers `WRONGTYPE` for a sorted set. The
//! check reads the partition's Paxos state from the cell cache only
//! (`Engine::holds_register_cached`): a key in use as a string has it
//! cached on every replica. A string
//! whose state is no longer cached on its leader, or one written through
//! another node that this leader has not yet heard was decided, is not
//! seen: the add then starts a counter beside it, and reads answer the
//! counter (the limit stated in `resp::registers`).

use tally_engine::{Engine, Key, now_ms};

use super::again::Attempted;
use super::combine::Combined;
use super::queue::Replies;
use crate::base::refusal::holds_string;
use crate::base::zset;
use crate::cluster::ctx::Ctx;

/// Fails, and takes out of `combined`, the adds whose key holds a string
/// as far as this leader knows.
pub(crate) fn refuse_beside_strings(
    ctx: &Ctx,
    combined: &mut Vec<Combined>,
    replies: &mut Replies,
) {
    let now = now_ms();
    let engine = ctx.engine();
    let holds = |c: &Combined| holds_register_cached(engine, &c.key, now);
    if !combined.iter().any(holds) {
        return;
    }
    let (mut strings, counters): (Vec<Combined>, Vec<Combined>) =
        std::mem::take(combined).into_iter().partition(holds);
    *combined = counters;
    let e = holds_string();
    strings.iter_mut().for_each(|c| c.fail(replies, &e));
}

/// Whether `key` holds a register live at `now_ms` as far as the cell
/// cache shows: a string in its column, or, for a key's own column, a
/// sorted set (a counter beside it would answer `INCR` where Redis
/// answers `WRONGTYPE`).
pub(crate) fn holds_register_cached(engine: &Engine, key: &Key, now_ms: u64) -> bool {
    let own: &[&[u8]] = &[b"", zset::COLUMN];
    let columns = if key.column().is_empty() {
        own
    } else {
        &[key.column()]
    };
    engine.holds_register_cached(key, columns, now_ms)
}
