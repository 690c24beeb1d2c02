//! Runs a group of a pipeline's commands that may run together (see
//! `pipeline`): its plain adds go straight to the write queue, all of them
//! before any is waited for, and the other commands run side by side; the
//! replies come back in the commands' order.
//!
//! An add is most of what a counter's pipeline holds: queued this way it
//! costs no future, task or key copy of its own, only its place in the
//! queue and its answer. Anything unusual about an add (another database,
//! an argument that is not an integer, a key too long) takes the general
//! path, which answers it in Redis' words.

use std::sync::Arc;

use tally_net::wire::Consistency;

use super::counters::{int_arg, wire_err};
use super::join::join_all;
use super::pipeline::Named;
use super::proto::Reply;
use crate::base::keyspace::Keyspace;
use crate::node::Node;

/// The replies to `cmds` of `user` (`None` without users), in order, run
/// at `cl` in `space`.
pub(crate) async fn run(
    node: &Arc<Node>,
    cl: Consistency,
    space: Keyspace,
    user: Option<&str>,
    cmds: &[Named],
) -> Vec<Reply> {
    let mut adds = Vec::with_capacity(cmds.len());
    let mut others = Vec::new();
    for (name, args) in cmds {
        match plain_add(space, name, args) {
            Some((partition, column, delta)) => {
                adds.push(Some(node.queue_add(partition, column, delta, cl)));
            }
            None => {
                adds.push(None);
                others.push((name, args));
            }
        }
    }
    let others = others
        .into_iter()
        .map(|(name, args)| super::keyed_as(node, cl, space, user, name, args));
    let mut others = join_all(others).await.into_iter();
    let mut replies = Vec::with_capacity(cmds.len());
    for add in adds {
        replies.push(match add {
            Some(Ok(queued)) => match queued.answer().await {
                Ok(value) => Reply::Int(value),
                Err(e) => wire_err(&e),
            },
            Some(Err(e)) => wire_err(&e),
            None => others.next().expect("one reply for every other command"),
        });
    }
    replies
}

/// `(partition, column, delta)` of a well-formed add in the default
/// database: `INCR`, `DECR`, `INCRBY`, `DECRBY`, `HINCRBY`; `None` for
/// anything else (`args` holds the name first).
fn plain_add<'a>(
    space: Keyspace,
    name: &str,
    args: &'a [Vec<u8>],
) -> Option<(&'a [u8], &'a [u8], i64)> {
    if space != Keyspace::DEFAULT {
        return None;
    }
    let (partition, column, delta) = match (name, args) {
        ("incr", [_, k]) => (k, &[][..], 1),
        ("decr", [_, k]) => (k, &[][..], -1),
        ("incrby", [_, k, d]) => (k, &[][..], int_arg(d).ok()?),
        ("decrby", [_, k, d]) => (k, &[][..], int_arg(d).ok()?.checked_neg()?),
        ("hincrby", [_, k, f, d]) => (k, f.as_slice(), int_arg(d).ok()?),
        _ => return None,
    };
    Keyspace::check(partition).ok()?;
    Some((partition, column, delta))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    fn add(line: &str) -> Option<(Vec<u8>, Vec<u8>, i64)> {
        let args = words(line);
        let name = line
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        plain_add(Keyspace::DEFAULT, &name, &args).map(|(p, c, d)| (p.to_vec(), c.to_vec(), d))
    }

    #[test]
    fn plain_adds_are_taken_apart() {
        assert_eq!(add("INCR a"), Some((b"a".to_vec(), vec![], 1)));
        assert_eq!(add("DECR a"), Some((b"a".to_vec(), vec![], -1)));
        assert_eq!(add("INCRBY a -7"), Some((b"a".to_vec(), vec![], -7)));
        assert_eq!(add("DECRBY a 7"), Some((b"a".to_vec(), vec![], -7)));
        assert_eq!(
            add("HINCRBY h f 2"),
            Some((b"h".to_vec(), b"f".to_vec(), 2))
        );
    }

    /// What the general path answers with an error, or runs elsewhere,
    /// is left to it.
    #[test]
    fn anything_unusual_takes_the_general_path() {
        for line in [
            "INCR",
            "INCR a b",
            "INCRBY a x",
            "INCRBY a 1.5",
            "DECRBY a -9223372036854775808",
            "HINCRBY h f",
            "GET a",
            "SET a 1",
        ] {
            assert_eq!(add(line), None, "{line}");
        }
        let long = format!("INCR {}", "k".repeat(tally_engine::PARTITION_BYTES_MAX + 1));
        assert_eq!(add(&long), None);
        let args = words("INCR a");
        assert!(plain_add(Keyspace::DEFAULT, "incr", &args).is_some());
        let flushed = Keyspace {
            db: 0,
            generation: 1,
        };
        assert_eq!(plain_add(flushed, "incr", &args), None);
        let other = Keyspace {
            db: 3,
            generation: 0,
        };
        assert_eq!(plain_add(other, "incr", &args), None);
    }
}
