//! Runs a group of a pipeline's commands that may run together (see
//! `pipeline`): its plain adds go straight to the write queue, all of them
//! before any is waited for, and the other commands run side by side; the
//! replies come back in the commands' order.
//!
//! An add is most of what a counter's pipeline holds: queued this way it
//! costs no future or task of its own, only its place in the queue and its
//! answer, in any database. The group runs the commands as parsed
//! (`command`): an add's key and amount were read once, and
//! [`counters::queue_add`] queues it as the general path does.

use std::sync::Arc;

use tally_net::wire::Consistency;

use super::command::{Cmd, Op};
use super::counters;
use super::proto::Reply;
use crate::base::join::join_all;
use crate::base::keyspace::Keyspace;
use crate::node::Node;

/// The replies to `cmds` of `user` (`None` without users), in order, run
/// at `cl` in `space`.
pub(crate) async fn run(
    node: &Arc<Node>,
    cl: Consistency,
    space: Keyspace,
    user: Option<&str>,
    cmds: &[Cmd],
) -> Vec<Reply> {
    // At SERIAL an add may be an agreed round (`counters::serial_add`):
    // the commands run one after another, so those of a key answer in
    // their order.
    if cl == Consistency::Serial {
        let mut replies = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            replies.push(super::keyed_as(node, cl, space, user, cmd).await);
        }
        return replies;
    }
    let mut adds = Vec::with_capacity(cmds.len());
    let mut others = Vec::new();
    for cmd in cmds {
        match cmd.op {
            // (A CQL row's name is refused by `keyed_as`, in words.)
            Op::Add { column, delta } if !super::cql_rows::first_names_one(cmd) => {
                let queued = counters::queue_add(node, cl, space, cmd, column, delta);
                adds.push(Some((queued, cmd)));
            }
            _ => {
                adds.push(None);
                others.push(cmd);
            }
        }
    }
    let others = others
        .into_iter()
        .map(|cmd| super::keyed_as(node, cl, space, user, cmd));
    let mut others = join_all(others).await.into_iter();
    let mut replies = Vec::with_capacity(cmds.len());
    for add in adds {
        replies.push(match add {
            Some((Ok(queued), cmd)) => counters::answer(node, (cl, space), cmd, queued).await,
            Some((Err(refused), _)) => refused,
            None => others.next().expect("one reply for every other command"),
        });
    }
    replies
}
