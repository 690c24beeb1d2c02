//! A CQL counter table's row read as a hash: `HGETALL "\xffcql:ks.cf:0"`
//! answers its counters by field, as `cql::named` names and prints them
//! (`HKEYS`, `HVALS`, `HLEN`, `HGET`, `HMGET` and `HEXISTS` too). Such a
//! row is written through CQL; any other command that names one is told
//! so.

use std::sync::Arc;

use tally_net::wire::Consistency;

use super::counters::read_err;
use super::hashes::whole;
use super::proto::Reply;
use crate::base::commands::Command;
use crate::client::cql::named;
use crate::node::Node;

/// Whether one of the keys of `words` (command `c`) names a CQL row.
pub(crate) fn names_one(c: &Command, words: &[Vec<u8>]) -> bool {
    c.key_positions(words.len())
        .any(|i| words.get(i).is_some_and(|k| named::is_name(k)))
}

/// Whether the first word after the command's name (an add's key) names
/// a CQL row.
pub(crate) fn first_names_one(cmd: &super::command::Cmd) -> bool {
    cmd.words.get(1).is_some_and(|k| named::is_name(k))
}

/// The answer to `words` (command `c`), which [`names_one`] a CQL row.
pub(crate) async fn answer(
    node: &Arc<Node>,
    cl: Consistency,
    c: &Command,
    words: &[Vec<u8>],
) -> Reply {
    let (key, rest) = (&words[1], &words[2..]);
    match (c.name, rest.len()) {
        ("hgetall" | "hkeys" | "hvals" | "hlen", 0) => match named::row(node, cl, key).await {
            Ok(row) => whole(c.name, decimal(row)),
            Err(e) => read_err(&e),
        },
        ("hget" | "hexists", 1) | ("hmget", 1..) => {
            match named::values(node, cl, key, rest).await {
                Ok(values) => fields(c.name, values),
                Err(e) => read_err(&e),
            }
        }
        _ => Reply::err(
            "ERR this key names a row of a CQL table: read it with HGETALL, HKEYS, HVALS, HLEN, \
             HGET, HMGET or HEXISTS, and write it through CQL",
        ),
    }
}

fn decimal(row: Vec<(Vec<u8>, i64)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    row.into_iter()
        .map(|(f, v)| (f, v.to_string().into_bytes()))
        .collect()
}

/// `HGET`'s, `HEXISTS`' or `HMGET`'s answer of the fields' `values`.
fn fields(name: &str, values: Vec<Option<i64>>) -> Reply {
    let bulk = |v: Option<i64>| v.map_or(Reply::NIL, |v| Reply::bulk(v.to_string()));
    match (name, values.as_slice()) {
        ("hget", [v]) => bulk(*v),
        ("hexists", [v]) => Reply::Int(i64::from(v.is_some())),
        _ => Reply::Array(values.into_iter().map(bulk).collect()),
    }
}
