//! Which commands of a pipeline may run at once: pure, tested here.
//!
//! A client that pipelines sends many commands before it reads a reply.
//! Run one after another, each waits for its replicas before the next
//! starts; run together, they share the node's batches. The replies still
//! go back in the order the commands came, and commands on one key keep
//! their order: a run of commands goes together only while no two touch
//! the same partition, except adds, which the write queue takes in arrival
//! order and answers as if they ran one after another. The command table
//! says how each command may join (`commands::Pipe`); a barrier
//! (connection settings such as `SELECT`, transactions, scripts, flushes),
//! an unknown command, one of the wrong arity and one the login may not
//! run end the group and run alone, in their places, and the commands
//! after them group again: in any database, before and after a flush.

use smallvec::SmallVec;

use super::command::{Cmd, Op};
use crate::base::commands::Pipe;

/// Most commands run together.
pub(crate) const GROUP_MAX: usize = 256;

/// The partitions `cmd` touches and how (its table entry's [`Pipe`]), or
/// `None` if it must run alone: a barrier, an unknown command, one of the
/// wrong arity. Nothing here depends on the connection's database: a
/// pipeline groups the same in every one.
fn footprint(cmd: &Cmd) -> Option<(Pipe, SmallVec<[&[u8]; 4]>)> {
    let c = cmd.command()?;
    if matches!(cmd.op, Op::Arity | Op::Unknown) || c.pipe == Pipe::Barrier {
        return None;
    }
    let keys = c
        .key_positions(cmd.words.len())
        .map(|i| cmd.words[i].as_slice())
        .collect();
    Some((c.pipe, keys))
}

/// How many of the commands at the front of `cmds` may run together: 0
/// when the first must run alone. A command `allowed` refuses (the login
/// may not run it) ends the group, to be refused in its place.
pub(crate) fn together(cmds: &[Cmd], allowed: impl Fn(&Cmd) -> bool) -> usize {
    let mut seen: Vec<(&[u8], Pipe)> = Vec::new();
    for (n, cmd) in cmds.iter().take(GROUP_MAX).enumerate() {
        let Some((pipe, keys)) = footprint(cmd).filter(|_| allowed(cmd)) else {
            return n;
        };
        let clash = keys.iter().any(|k| {
            seen.iter()
                .any(|(s, p)| s == k && (*p, pipe) != (Pipe::Add, Pipe::Add))
        });
        if clash {
            return n;
        }
        seen.extend(keys.iter().map(|k| (*k, pipe)));
    }
    cmds.len().min(GROUP_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(lines: &[&str]) -> Vec<Cmd> {
        lines
            .iter()
            .map(|l| Cmd::parse(l.split(' ').map(|w| w.as_bytes().to_vec()).collect()))
            .collect()
    }

    fn together(cmds: &[Cmd]) -> usize {
        super::together(cmds, |_| true)
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

    /// `SELECT` and `FLUSHDB` are barriers: each runs alone, in its place,
    /// and the commands after it group again, whatever the database.
    #[test]
    fn select_and_flushes_are_barriers_the_pipeline_groups_after() {
        let p = cmds(&[
            "INCR a", "SELECT 3", "INCR a", "INCR b", "FLUSHDB", "INCR a", "GET b",
        ]);
        assert_eq!(together(&p), 1);
        assert_eq!(together(&p[1..]), 0, "SELECT runs alone");
        assert_eq!(together(&p[2..]), 2);
        assert_eq!(together(&p[4..]), 0, "FLUSHDB runs alone");
        assert_eq!(together(&p[5..]), 2);
        for alone in [
            "FLUSHALL",
            "FLUSHDB ASYNC",
            "SWAPDB 0 1",
            "SCAN 0",
            "EVAL x 0",
        ] {
            assert_eq!(together(&cmds(&[alone, "INCR a"])), 0, "{alone}");
        }
    }

    /// A command the login may not run ends the group before it.
    #[test]
    fn a_refused_command_ends_the_group() {
        let p = cmds(&["GET a", "GET b", "INCR c", "GET d"]);
        let reads_only = |c: &Cmd| c.name() == Some("get");
        assert_eq!(super::together(&p, reads_only), 2);
        assert_eq!(super::together(&p[2..], reads_only), 0);
        assert_eq!(super::together(&p[3..], reads_only), 1);
    }
}
