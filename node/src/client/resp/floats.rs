//! `INCRBYFLOAT key increment` and `HINCRBYFLOAT key field increment`,
//! exact (`base::decimal`); a field is as a key (its column's counter or
//! string).
//!
//! - A whole increment of a counter, or of a key that holds nothing, is
//!   an add (`INCRBY`): counters stay counters, as fast as ever.
//! - On a string, the sum is agreed (`base::strings::add_float_to_string`),
//!   so two clients never answer the same value.
//! - A fraction added to a live counter turns it into a string, as a
//!   string `SET` replaces a counter: the counter is reset at `QUORUM`,
//!   answering its value, and the string of value plus increment is
//!   agreed. Two steps, like `SET`'s: adds racing the reset are lost with
//!   the counter, as they are to a `DEL`.
//! - At `SERIAL`, a key without a live counter always goes through
//!   agreement (a linearizable counter, as `INCR` at `SERIAL`).

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Change, Consistency, WireKey};

use super::counters::wire_err;
use super::proto::Reply;
use crate::base::convert::live_value;
use crate::base::decimal::Decimal;
use crate::base::refusal::is_holds_string;
use crate::base::strings::add_float_to_string;
use crate::node::Node;

/// `INCRBYFLOAT key by` (`column` empty) or `HINCRBYFLOAT key column by`:
/// the new value, as a bulk string.
pub(crate) async fn incr_by_float(
    node: &Arc<Node>,
    cl: Consistency,
    (key, column): (&[u8], &[u8]),
    by: &[u8],
) -> Reply {
    let by = match Decimal::parse(by) {
        Ok(by) => by,
        Err(e) => return Reply::err(e),
    };
    let counter = WireKey::new(key, column);
    let held = match node.get_cell(&counter, Consistency::One).await {
        Ok(cell) => live_value(&cell, now_ms()),
        Err(e) => Err(e),
    };
    let held = match held {
        Ok(held) => held,
        Err(e) => return wire_err(&e),
    };
    let whole = by.as_integer();
    let base = match (held, whole) {
        // A counter, or nothing, with a whole increment: an add.
        (Some(_), Some(n)) => return add(node, cl, &counter, n).await,
        (None, Some(n)) if cl != Consistency::Serial => {
            return add(node, cl, &counter, n).await;
        }
        // A counter that takes a fraction: reset, its value the base.
        (Some(_), None) => match node
            .change_reading(&counter, Change::Delete, Consistency::Quorum)
            .await
        {
            Ok(done) => done.before.unwrap_or(0),
            Err(e) => return wire_err(&e),
        },
        (None, _) => 0,
    };
    agreed(node, &counter, base, by).await
}

/// A whole increment as a counter's add, or, where the key turns out to
/// hold a string, the string's agreed sum.
async fn add(node: &Arc<Node>, cl: Consistency, counter: &WireKey, n: i64) -> Reply {
    let cl = match cl {
        Consistency::Serial => Consistency::Quorum,
        cl => cl,
    };
    match node.add(counter, n, cl).await {
        Ok(v) => Reply::bulk(v.to_string()),
        Err(e) if is_holds_string(&e) => agreed(node, counter, 0, Decimal::of(n)).await,
        Err(e) => wire_err(&e),
    }
}

/// The string of `key`'s column plus `by` (or, where it holds none,
/// `base + by`), agreed.
async fn agreed(node: &Arc<Node>, key: &WireKey, base: i64, by: Decimal) -> Reply {
    let column = key.column().to_vec();
    let done = node
        .agree(key.partition(), move |registers, now| {
            Ok(add_float_to_string(registers, &column, (base, by), now))
        })
        .await;
    match done {
        Ok(Ok(value)) => Reply::bulk(value),
        Ok(Err(e)) => Reply::err(e),
        Err(e) => wire_err(&e),
    }
}
