//! Hashes over RESP: `HSET`, `HSETNX`, `HDEL`, `HINCRBYFLOAT`, `HGETALL`, `HMGET`,
//! `HKEYS`, `HVALS`, `HLEN`, `HEXISTS`, `HSTRLEN`, `HRANDFIELD` (and the
//! row `HSCAN` walks). A hash is a partition: each field is a column that
//! holds a counter (an integer value, `HINCRBY`) or a string (any other
//! value: the register of the field's column, agreed, see
//! `base::fields`). `HGET` is the counters' read, which falls back to a
//! field's string.
//!
//! A field holds one kind. A string set where a counter is resets the
//! counter (at `QUORUM`) and then agrees the string, two steps as a
//! string `SET` over a counter; an integer set where this node saw a
//! string sets the string; an `HINCRBY` of a string field that holds an
//! integer counts in the string (`counters`).

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Consistency, Presence, Ttl, WireError, WireKey};

use super::counters::{int_arg, read_err, wire_err};
use super::proto::Reply;
use super::session::arity;
use super::strings::{set_change, value_arg};
use crate::base::convert::{live_value, user_key_of};
use crate::base::fields::{self, remove_fields, set_field};
use crate::base::join::join_all;
use crate::base::strings::STRING_BYTES_MAX;
use crate::node::Node;

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("hset", n) if n >= 3 && n % 2 == 1 => hset(node, cl, rest, false).await,
        ("hsetnx", 3) => hset(node, cl, rest, true).await,
        ("hdel", n) if n >= 2 => hdel(node, cl, &rest[0], &rest[1..]).await,
        ("hincrbyfloat", 3) => {
            super::floats::incr_by_float(node, cl, (&rest[0], &rest[1]), &rest[2]).await
        }
        ("hexists" | "hstrlen", 2) => match field(node, cl, &rest[0], &rest[1]).await {
            Ok(v) if name == "hexists" => Reply::Int(i64::from(v.is_some())),
            Ok(v) => Reply::Int(v.map_or(0, |v| v.len() as i64)),
            Err(e) => read_err(&e),
        },
        ("hrandfield", 1..=3) => match random_args(&rest[1..]) {
            Ok(args) => on_row(node, cl, &rest[0], |row| random_fields(row, args)).await,
            Err(e) => e,
        },
        ("hgetall" | "hkeys" | "hvals" | "hlen", 1) => {
            on_row(node, cl, &rest[0], |row| whole(name, row)).await
        }
        ("hmget", n) if n >= 2 => hmget(node, cl, &rest[0], &rest[1..]).await,
        (
            "hset" | "hsetnx" | "hdel" | "hincrbyfloat" | "hexists" | "hstrlen" | "hrandfield"
            | "hgetall" | "hkeys" | "hvals" | "hlen" | "hmget",
            _,
        ) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// Most fields of one `HMGET` read at once.
const READS_AT_ONCE: usize = 256;

/// A hash's fields and their values (a counter's as its decimal), in
/// field order.
pub(crate) type Row = Vec<(Vec<u8>, Vec<u8>)>;

/// The hash `key` at `cl`: its live counters, and its string fields
/// (agreed); where a field has both (a race of kinds), the counter, as
/// `HGET` reads it.
pub(crate) async fn row(node: &Arc<Node>, cl: Consistency, key: &[u8]) -> Result<Row, WireError> {
    // Both at once: the string fields cost no second round trip's wait.
    let (counters, registers) = tokio::join!(node.get_row(key, cl), node.read_registers(key));
    let (counters, registers) = (counters?, registers?);
    let mut row: Row = counters
        .into_iter()
        .map(|(f, v)| (f, v.to_string().into_bytes()))
        .collect();
    for r in fields::fields(&registers, now_ms()) {
        if let Err(i) = row.binary_search_by(|(f, _)| f.as_slice().cmp(&r.column)) {
            row.insert(i, (r.column.clone(), r.value.clone()));
        }
    }
    Ok(row)
}

/// `answer` of the hash `key`'s row, or the read's error.
async fn on_row(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
    answer: impl FnOnce(Row) -> Reply,
) -> Reply {
    match row(node, cl, key).await {
        Ok(row) => answer(row),
        Err(e) => read_err(&e),
    }
}

/// `HGETALL`, `HKEYS`, `HVALS` or `HLEN` of `row`.
pub(super) fn whole(name: &str, row: Row) -> Reply {
    match name {
        "hgetall" => Reply::Map(
            row.into_iter()
                .map(|(f, v)| (Reply::bulk(f), Reply::bulk(v)))
                .collect(),
        ),
        "hkeys" => Reply::Array(row.into_iter().map(|(f, _)| Reply::bulk(f)).collect()),
        "hvals" => Reply::Array(row.into_iter().map(|(_, v)| Reply::bulk(v)).collect()),
        _ => Reply::Int(row.len() as i64),
    }
}

/// One field's value: its live counter's, else its string.
async fn field(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
    field: &[u8],
) -> Result<Option<Vec<u8>>, WireError> {
    let cell = node.get_cell(&WireKey::new(key, field), cl).await?;
    if let Some(v) = live_value(&cell, now_ms())? {
        return Ok(Some(v.to_string().into_bytes()));
    }
    super::registers::get_column(node, key, field).await
}

/// `HMGET key field...`: each field's value (nil for none), its counter
/// read at `cl`, and the hash's string fields in one agreed read, not the
/// whole row.
async fn hmget(node: &Arc<Node>, cl: Consistency, key: &[u8], names: &[Vec<u8>]) -> Reply {
    let counters = async {
        let mut cells = Vec::with_capacity(names.len());
        for names in names.chunks(READS_AT_ONCE) {
            let reads = names
                .iter()
                .map(|f| async move { node.get_cell(&WireKey::new(key, f), cl).await });
            cells.extend(join_all(reads).await);
        }
        cells
    };
    let (cells, registers) = tokio::join!(counters, node.read_registers(key));
    let registers = match registers {
        Ok(r) => r,
        Err(e) => return read_err(&e),
    };
    let now = now_ms();
    let mut values = Vec::with_capacity(names.len());
    for (name, cell) in names.iter().zip(cells) {
        let counter = cell.and_then(|c| live_value(&c, now));
        values.push(match counter {
            Ok(Some(v)) => Reply::bulk(v.to_string()),
            Ok(None) => registers
                .get(name, now)
                .filter(|_| fields::is_field(name))
                .map_or(Reply::NIL, |r| Reply::bulk(r.value.clone())),
            Err(e) => return read_err(&e),
        });
    }
    Reply::Array(values)
}

/// `HSET key field value ...` (answers how many fields are new), or
/// `HSETNX key field value` (`nx`: answers whether it set it).
async fn hset(node: &Arc<Node>, cl: Consistency, rest: &[Vec<u8>], nx: bool) -> Reply {
    let key = &rest[0];
    let mut count = 0;
    for pair in rest[1..].chunks(2) {
        match set_one(node, cl, key, (&pair[0], &pair[1]), nx).await {
            Ok((applied, new)) => count += i64::from(if nx { applied } else { new }),
            Err(e) => return e,
        }
    }
    Reply::Int(count)
}

/// Sets one field, a counter or a string as its value says: whether it
/// did, and whether the field is new.
async fn set_one(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
    (field, value): (&[u8], &[u8]),
    nx: bool,
) -> Result<(bool, bool), Reply> {
    let counter = match cl {
        Consistency::Serial => None,
        _ if node.holds_string_here(key, field) => None,
        _ => value_arg(value).ok(),
    };
    let only = if nx { Presence::Absent } else { Presence::Any };
    let Some(v) = counter else {
        return set_string_field(node, key, (field, value), nx).await;
    };
    let done = node
        .change_reading(
            &WireKey::new(key, field),
            set_change(v, Ttl::Clear, only),
            cl,
        )
        .await
        .map_err(|e| wire_err(&e))?;
    Ok((done.applied, done.before.is_none()))
}

/// Sets a string field: a counter there is reset first (`nx`: kept, and
/// nothing set); then the string is agreed.
async fn set_string_field(
    node: &Arc<Node>,
    key: &[u8],
    (field, value): (&[u8], &[u8]),
    nx: bool,
) -> Result<(bool, bool), Reply> {
    if field.is_empty() {
        // The empty column is the key's own value, not a field.
        return Err(Reply::err(
            "ERR a field that holds a string needs a name (the empty field is the key's own value)",
        ));
    }
    user_key_of(key, field).map_err(|e| Reply::err(format!("ERR {}", e.message)))?;
    if value.len() > STRING_BYTES_MAX {
        return Err(Reply::err(format!(
            "ERR a field's string exceeds maximum allowed size ({STRING_BYTES_MAX} bytes)"
        )));
    }
    let counter = WireKey::new(key, field);
    let cell = node
        .get_cell(&counter, Consistency::One)
        .await
        .map_err(|e| wire_err(&e))?;
    let had_counter = cell.live(now_ms());
    if had_counter && nx {
        return Ok((false, false));
    }
    if had_counter {
        node.reset(&counter, Consistency::Quorum)
            .await
            .map_err(|e| wire_err(&e))?;
    }
    let (field, value) = (field.to_vec(), value.to_vec());
    let done = node
        .agree(key, move |registers, now| {
            Ok(set_field(registers, (&field, &value), nx, now))
        })
        .await
        .map_err(|e| wire_err(&e))?;
    Ok((done.applied, !had_counter && !done.existed))
}

/// `HDEL key field...`: resets the counter fields and removes the string
/// fields; answers how many held anything.
async fn hdel(node: &Arc<Node>, cl: Consistency, key: &[u8], names: &[Vec<u8>]) -> Reply {
    let mut count = 0;
    for name in names {
        let k = WireKey::new(key, name);
        match node.get_cell(&k, cl).await {
            Ok(c) if !c.live(now_ms()) => continue,
            Ok(_) => {}
            Err(e) => return wire_err(&e),
        }
        if let Err(e) = node.reset(&k, cl).await {
            return wire_err(&e);
        }
        count += 1;
    }
    match remove_strings(node, key, names).await {
        Ok(removed) => Reply::Int(count + removed),
        Err(e) => wire_err(&e),
    }
}

/// Removes the string fields among `names`, agreed, when a read shows any
/// (a hash of counters costs no round); how many there were.
async fn remove_strings(node: &Arc<Node>, key: &[u8], names: &[Vec<u8>]) -> Result<i64, WireError> {
    let now = now_ms();
    let registers = node.read_registers(key).await?;
    if !names
        .iter()
        .any(|n| registers.get(n, now).is_some() && fields::is_field(n))
    {
        return Ok(0);
    }
    let names = names.to_vec();
    let removed = node
        .agree(key, move |registers, now| {
            Ok(remove_fields(registers, &names, now))
        })
        .await?;
    Ok(removed.iter().filter(|r| **r).count() as i64)
}

/// `HRANDFIELD`'s arguments: a count (none: one field, not in an array)
/// and whether values come too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Random {
    count: Option<i64>,
    values: bool,
}

fn random_args(args: &[Vec<u8>]) -> Result<Random, Reply> {
    let count = args.first().map(|c| int_arg(c)).transpose()?;
    let values = match args.get(1) {
        None => false,
        Some(w) if w.eq_ignore_ascii_case(b"withvalues") => true,
        Some(_) => return Err(Reply::err("ERR syntax error")),
    };
    if count.is_some_and(|c| c.unsigned_abs() > (1 << 40)) {
        return Err(Reply::err("ERR value is out of range"));
    }
    Ok(Random { count, values })
}

/// `HRANDFIELD` of `row`, as Redis answers it: one field (nil for none);
/// a positive count, that many distinct fields at most; a negative one,
/// exactly that many, repeats allowed.
fn random_fields(row: Row, args: Random) -> Reply {
    let picks = pick(row.len(), args.count.unwrap_or(1), seed());
    let Some(_) = args.count else {
        return picks
            .first()
            .map_or(Reply::NIL, |&i| Reply::bulk(row[i].0.clone()));
    };
    let mut out = Vec::with_capacity(picks.len() * 2);
    for i in picks {
        out.push(Reply::bulk(row[i].0.clone()));
        if args.values {
            out.push(Reply::bulk(row[i].1.clone()));
        }
    }
    Reply::Array(out)
}

/// The indexes `HRANDFIELD count` picks of `len` fields, from `seed`.
fn pick(len: usize, count: i64, mut seed: u64) -> Vec<usize> {
    let mut next = move || {
        // xorshift64*: enough to pick fields.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    if len == 0 {
        return Vec::new();
    }
    if count < 0 {
        let n = count.unsigned_abs() as usize;
        return (0..n).map(|_| (next() % len as u64) as usize).collect();
    }
    let mut all: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        all.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    all.truncate(count as usize);
    all
}

fn seed() -> u64 {
    tally_world::random_u64() | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrandfield_picks_as_redis_does() {
        for seed in [1, 7, 12345] {
            let distinct = pick(5, 3, seed);
            assert_eq!(distinct.len(), 3);
            let mut sorted = distinct.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 3, "distinct: {distinct:?}");
            assert_eq!(pick(5, 9, seed).len(), 5, "at most every field");
            let repeats = pick(2, -6, seed);
            assert_eq!(repeats.len(), 6);
            assert!(repeats.iter().all(|&i| i < 2));
            assert!(pick(0, -3, seed).is_empty());
            assert!(pick(4, 0, seed).is_empty());
        }
    }

    #[test]
    fn hrandfield_arguments_are_checked() {
        let w = |s: &str| {
            s.split(' ')
                .map(|w| w.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            random_args(&[]),
            Ok(Random {
                count: None,
                values: false
            })
        );
        assert_eq!(
            random_args(&w("-3 WithValues")),
            Ok(Random {
                count: Some(-3),
                values: true
            })
        );
        assert!(random_args(&w("x")).is_err());
        assert!(random_args(&w("3 values")).is_err());
    }
}
