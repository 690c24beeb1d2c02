//! Tally's own RESP commands: adds with operation ids, for Redis clients.
//!
//! - `TALLY.INCRBY key delta client_id seq`
//! - `TALLY.HINCRBY key field delta client_id seq`
//!
//! Each answers the value the add produced, also to a retry of the same
//! `(client_id, seq)`, which is applied at most once (see `write::once`).
//! The same id with another delta, and an id older than the retention
//! window, are errors that say so. On a node with users a client id is the
//! logged-in user's own (`crate::config::ids::user_client`).

use std::sync::Arc;

use tally_net::once::OpId;
use tally_net::wire::{Consistency, ErrorKind, WireError, WireKey};

use super::proto::Reply;
use crate::node::Node;

/// Answers `name` if it is one of this module's commands.
/// `user`: the logged-in user, whose ids these are (`None` without users).
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    user: Option<&str>,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("tally.incrby", 4) => {
            add(
                node,
                cl,
                &rest[0],
                b"",
                &rest[1],
                Id::of(user, &rest[2], &rest[3]),
            )
            .await
        }
        ("tally.hincrby", 5) => {
            add(
                node,
                cl,
                &rest[0],
                &rest[1],
                &rest[2],
                Id::of(user, &rest[3], &rest[4]),
            )
            .await
        }
        ("tally.incrby" | "tally.hincrby", _) => Reply::Error(format!(
            "ERR wrong number of arguments for '{name}' command"
        )),
        _ => return None,
    };
    Some(reply)
}

/// An add's id as the command gives it, and whose it is.
struct Id<'a> {
    user: Option<&'a str>,
    client: &'a [u8],
    seq: &'a [u8],
}

impl<'a> Id<'a> {
    fn of(user: Option<&'a str>, client: &'a [u8], seq: &'a [u8]) -> Id<'a> {
        Id { user, client, seq }
    }
}

async fn add(
    node: &Arc<Node>,
    cl: Consistency,
    partition: &[u8],
    column: &[u8],
    delta: &[u8],
    id: Id<'_>,
) -> Reply {
    let Some(delta) = integer::<i64>(delta) else {
        return Reply::Error("ERR value is not an integer or out of range".into());
    };
    let Some(seq) = integer::<u64>(id.seq) else {
        return Reply::Error("ERR seq is not an integer from 1 to 18446744073709551614".into());
    };
    // Checked as the client gave it, so the limits read as they are written.
    let id = match OpId::new(id.client.to_vec(), seq) {
        Ok(given) => crate::config::ids::user_op_id(id.user, given),
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
