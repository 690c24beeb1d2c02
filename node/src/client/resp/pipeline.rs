//! Which commands of a pipeline may run at once: pure, tested here.
//!
//! A client that pipelines sends many commands before it reads a reply.
//! Run one after another, each waits for its replicas before the next
//! starts; run together, they share the node's batches. The replies still
//! go back in the order the commands came, and commands on one key keep
//! their order: a run of commands goes together only while no two touch
//! the same partition, except adds, which the write queue takes in arrival
//! order and answers as if they ran one after another. Anything that is
//! not a plain keyed command (connection settings, transactions, unknown
//! commands, wrong arity) runs alone, in its place.

use smallvec::SmallVec;

use crate::base::commands;

/// A command's name, lowercased, and its words (the name first).
pub(crate) type Named = (String, Vec<Vec<u8>>);

/// Most commands run together.
pub(crate) const GROUP_MAX: usize = 256;

/// How a command touches its partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// A plain add: adds to one key may run together.
    Add,
    /// Anything else: runs after what came before it on its keys.
    Other,
}

/// The command groups whose commands touch only their keys.
const KEYED_GROUPS: &[&str] = &["string", "hash", "set", "hyperloglog", "generic", "list"];

/// The partitions `args` touches and how, or `None` if it must run alone.
fn footprint<'a>(name: &str, args: &'a [Vec<u8>]) -> Option<(Access, SmallVec<[&'a [u8]; 4]>)> {
    let c = commands::find(name)?;
    if !c.arity_ok(args.len()) || !KEYED_GROUPS.contains(&c.group) {
        return None;
    }
    if c.keys.0 < 1 {
        return None;
    }
    let keys = c
        .key_positions(args.len())
        .map(|i| args[i].as_slice())
        .collect();
    let access = match name {
        "incr" | "decr" | "incrby" | "decrby" | "hincrby" => Access::Add,
        _ => Access::Other,
    };
    Some((access, keys))
}

/// How many of the commands at the front of `cmds` (name lowercased,
/// arguments) may run together: 0 when the first must run alone.
pub(crate) fn together(cmds: &[Named]) -> usize {
    let mut seen: Vec<(&[u8], Access)> = Vec::new();
    for (n, (name, args)) in cmds.iter().take(GROUP_MAX).enumerate() {
        let Some((access, keys)) = footprint(name, args) else {
            return n;
        };
        let clash = keys.iter().any(|k| {
            seen.iter()
                .any(|(s, a)| s == k && (*a, access) != (Access::Add, Access::Add))
        });
        if clash {
            return n;
        }
        seen.extend(keys.iter().map(|k| (*k, access)));
    }
    cmds.len().min(GROUP_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(lines: &[&str]) -> Vec<Named> {
        lines
            .iter()
            .map(|l| {
                let args: Vec<Vec<u8>> = l.split(' ').map(|w| w.as_bytes().to_vec()).collect();
                (
                    l.split(' ').next().unwrap_or_default().to_ascii_lowercase(),
                    args,
                )
            })
            .collect()
    }

    #[test]
    fn distinct_keys_and_adds_to_one_key_go_together() {
        assert_eq!(
            together(&cmds(&["INCR a", "INCRBY b 2", "GET c", "MGET d e"])),
            4
        );
        assert_eq!(
            together(&cmds(&["INCR a", "INCR a", "DECRBY a 3", "HINCRBY h f 1"])),
            4
        );
        assert_eq!(
            together(&cmds(&["SADD s x", "SCARD t", "TALLY.INCRBY u 1 c 1"])),
            3
        );
    }

    #[test]
    fn a_key_read_or_reset_after_a_write_waits() {
        assert_eq!(together(&cmds(&["INCR a", "GET a"])), 1);
        assert_eq!(together(&cmds(&["INCR a", "INCR b", "MGET b c"])), 2);
        assert_eq!(together(&cmds(&["GET a", "INCR a"])), 1);
        assert_eq!(together(&cmds(&["HINCRBY h f 1", "HGETALL h"])), 1);
        assert_eq!(together(&cmds(&["INCR a", "DEL a"])), 1);
        assert_eq!(together(&cmds(&["SADD s x", "SADD s y"])), 1);
    }

    #[test]
    fn connection_commands_and_bad_ones_run_alone() {
        for alone in [
            "MULTI",
            "HELLO 3",
            "CLIENT SETNAME x",
            "PING",
            "INCR",
            "NOPE a",
            "EXEC",
        ] {
            assert_eq!(together(&cmds(&[alone, "INCR a"])), 0, "{alone}");
        }
        assert_eq!(together(&cmds(&["INCR a", "MULTI", "INCR b"])), 1);
        let many = vec!["INCR a"; GROUP_MAX + 5];
        assert_eq!(together(&cmds(&many)), GROUP_MAX);
    }
}
