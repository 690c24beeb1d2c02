//! `tally set`, `tally expire`, `tally persist`, `tally ttl`, and the
//! deadline of `tally add --ttl`: changes of a counter's epoch.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use tally_net::wire::{Change, Changed, Presence, Ttl, When, WireCell};
use tally_net::{ClientError, Consistency};

use super::Target;

/// Wall-clock ms since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The deadline `secs` seconds from now, ms since the Unix epoch.
pub(crate) fn in_secs(secs: u64) -> u64 {
    now_ms().saturating_add(secs.saturating_mul(1000))
}

/// `SET` of `value`, with a deadline `ttl` seconds from now if given.
pub(crate) fn set(value: i64, ttl: Option<u64>) -> Change {
    Change::Set {
        value,
        ttl: ttl.map_or(Ttl::Clear, |s| Ttl::At(in_secs(s))),
        only: Presence::Any,
    }
}

/// A new deadline `secs` from now (or none, for `persist`), if `only` allows.
pub(crate) fn expire(secs: Option<u64>, only: When) -> Change {
    Change::Expire {
        at_ms: secs.map_or(0, in_secs),
        only,
    }
}

/// Runs `change` on the counter through `target`.
pub(crate) async fn change(
    target: &Target,
    key: &[u8],
    column: &[u8],
    change: Change,
    cl: Consistency,
) -> Result<Changed, ClientError> {
    match target {
        Target::One(c) => c.change(key, column, change, cl).await,
        Target::Ring(c) => c.change(key, column, change, cl).await,
    }
}

/// Seconds left before the counter's deadline, as Redis' `TTL` answers:
/// -2 when it does not exist, -1 when it has no deadline.
pub(crate) async fn ttl(
    target: &Target,
    key: &[u8],
    column: &[u8],
    cl: Consistency,
) -> Result<i64, ClientError> {
    let cell = match target {
        Target::One(c) => c.get_cell(key, column, cl).await?,
        Target::Ring(c) => c.get_cell(key, column, cl).await?,
    };
    Ok(seconds_left(&cell, now_ms()))
}

/// `TTL` of `cell` at `now`.
fn seconds_left(cell: &WireCell, now: u64) -> i64 {
    let at = cell.epoch.expiry.at_ms;
    let exists = !cell.shards.is_empty() || cell.epoch.origin != 0 || cell.epoch.fold != 0;
    if !exists || (at != 0 && now >= at) {
        return -2;
    }
    if at == 0 {
        return -1;
    }
    i64::try_from((at - now).div_ceil(1000)).unwrap_or(i64::MAX)
}

/// Prints whether a change applied.
pub(crate) fn print_changed(json: bool, key: &str, column: &str, what: &str, done: &Changed) {
    if json {
        println!(
            "{}",
            json!({ "key": key, "column": column, what: done.applied, "before": done.before })
        );
    } else if done.applied {
        println!("OK");
    } else {
        println!("not changed (no such counter, or its condition failed)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::{Epoch, Shard};

    #[test]
    fn ttl_answers_as_redis_does() {
        let shard = Shard {
            counter_id: 1,
            clock: 1,
            value: 3,
        };
        let cell = |at, shards: &[Shard]| WireCell {
            list: None,
            epoch: Epoch {
                expiry: tally_net::wire::Expiry {
                    at_ms: at,
                    ..Default::default()
                },
                ..Epoch::at(1)
            },
            shards: shards.iter().copied().collect(),
        };
        assert_eq!(seconds_left(&cell(0, &[]), 10), -2);
        assert_eq!(seconds_left(&cell(0, &[shard]), 10), -1);
        assert_eq!(seconds_left(&cell(5_000, &[shard]), 1_000), 4);
        assert_eq!(seconds_left(&cell(5_000, &[shard]), 1_001), 4);
        assert_eq!(seconds_left(&cell(5_000, &[shard]), 5_000), -2);
    }
}
