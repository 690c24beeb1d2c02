//! Tally's own RESP commands: adds with operation ids, for Redis clients.
//!
//! - `TALLY.INCRBY key delta client_id seq`
//! - `TALLY.HINCRBY key field delta client_id seq`
//!
//! Each answers the value the add produced, also to a retry of the same
//! `(client_id, seq)`, which is applied at most once (see `write::once`).
//! The same id with another delta, and an id older than the retention
//! window, are errors that say so.

use std::sync::Arc;

use tally_net::once::OpId;
use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};

use super::proto::Reply;
use crate::node::Node;

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("tally.incrby", 4) => add(node, cl, &rest[0], b"", &rest[1], &rest[2], &rest[3]).await,
        ("tally.hincrby", 5) => {
            add(node, cl, &rest[0], &rest[1], &rest[2], &rest[3], &rest[4]).await
        }
        ("tally.incrby" | "tally.hincrby", _) => Reply::Error(format!(
            "ERR wrong number of arguments for '{name}' command"
        )),
        _ => return None,
    };
    Some(reply)
}

async fn add(
    node: &Arc<Node>,
    cl: Consistency,
    partition: &[u8],
    column: &[u8],
    delta: &[u8],
    client: &[u8],
    seq: &[u8],
) -> Reply {
    let Some(delta) = integer::<i64>(delta) else {
        return Reply::Error("ERR value is not an integer or out of range".into());
    };
    let Some(seq) = integer::<u64>(seq) else {
        return Reply::Error("ERR seq is not an integer from 1 to 18446744073709551614".into());
    };
    let id = match OpId::new(client.to_vec(), seq) {
        Ok(id) => id,
        Err(e) => return Reply::Error(format!("ERR {}", e.message)),
    };
    match node
        .add_once(&WireKey::new(partition, column), delta, &id, cl)
        .await
    {
        Ok(v) => Reply::Int(v),
        Err(e) => error(&e),
    }
}

fn integer<T: std::str::FromStr>(bytes: &[u8]) -> Option<T> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn error(e: &WireError) -> Reply {
    match e.kind {
        ErrorKind::IdConflict => Reply::Error(format!("IDCONFLICT {}", e.message)),
        ErrorKind::IdExpired => Reply::Error(format!("IDEXPIRED {}", e.message)),
        ErrorKind::Overflow => Reply::Error("ERR increment or decrement would overflow".into()),
        ErrorKind::WrongType => Reply::err(super::counters::WRONGTYPE),
        _ => Reply::Error(format!("ERR {e}")),
    }
}
