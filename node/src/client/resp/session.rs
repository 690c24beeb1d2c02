//! One RESP connection's state, and the rules of `MULTI`: pure, tested here.
//!
//! A connection starts in RESP2 at QUORUM with no name. `HELLO 3` switches
//! it to RESP3, `CLIENT SETNAME` names it, `CLIENT CONSISTENCY` sets the
//! level of its reads and writes. `MULTI` queues the commands that follow
//! until `EXEC` runs them in order or `DISCARD` drops them, as Redis does:
//! a command that is unknown or has the wrong arity is refused when it is
//! queued, and makes `EXEC` refuse the whole transaction. The commands of
//! an `EXEC` run one after another on this node as coordinator, without
//! isolation: another client's commands may run between them, and there
//! is no rollback (`WATCH` is refused, saying so). A queue is bounded by
//! what it holds, and a node's queues by a budget they share (`queued`).

use std::sync::Arc;

use tally_net::wire::Consistency;

use super::command::{Cmd, Op, redis_unknown};
use super::proto::{Proto, Reply};
use super::queued::{self, Budget, Charge};
use super::shared::Shared;
use crate::security::auth::Login;

/// A connection's settings and transaction.
#[derive(Debug)]
pub(crate) struct Session {
    /// The protocol replies are encoded in.
    pub proto: Proto,
    /// The connection's id, unique on this node (`CLIENT ID`).
    pub id: u64,
    /// `CLIENT SETNAME`'s name.
    pub name: Option<Vec<u8>>,
    /// `CLIENT SETINFO LIB-NAME` and `LIB-VER`.
    pub lib: (Option<String>, Option<String>),
    /// The level of this connection's reads and writes.
    pub cl: Consistency,
    /// The database `SELECT` chose.
    pub db: u8,
    /// The client's address and ours, for `CLIENT INFO`.
    pub addrs: (String, String),
    /// Who it is logged in as, and what it may do.
    pub login: Login,
    multi: Option<Multi>,
    /// The node's budget for queued transactions.
    budget: Arc<Budget>,
    /// The node's RESP state (cursors, connection ids).
    pub(crate) shared: Arc<Shared>,
}

#[derive(Debug)]
struct Multi {
    /// The commands, as parsed when they came.
    queued: Vec<Cmd>,
    /// What `queued` holds, charged to the node's budget.
    charge: Charge,
    /// A command was refused while queueing: `EXEC` refuses them all.
    dirty: bool,
}

impl Multi {
    fn new(budget: Arc<Budget>) -> Multi {
        Multi {
            queued: Vec::new(),
            charge: Charge::new(budget),
            dirty: false,
        }
    }

    /// A command was refused: `EXEC` will refuse the transaction, so its
    /// queue is dropped now, and gives its budget back.
    fn spoil(&mut self) {
        self.dirty = true;
        self.queued = Vec::new();
        self.charge = Charge::new(self.charge.budget_arc());
    }
}

/// What to do with a command, given the transaction state.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Run it now.
    Run(Cmd),
    /// Answer this, run nothing.
    Answer(Reply),
    /// Run these, in order, and answer their replies as one array.
    Exec(Vec<Cmd>),
}

impl Session {
    /// A new connection's session; its transactions draw on `budget`;
    /// `shared` is its node's RESP state.
    pub(crate) fn new(
        addrs: (String, String),
        login: Login,
        budget: Arc<Budget>,
        shared: Arc<Shared>,
    ) -> Session {
        Session {
            proto: Proto::Resp2,
            id: shared.next_session_id(),
            name: None,
            lib: (None, None),
            cl: Consistency::Quorum,
            db: 0,
            addrs,
            login,
            multi: None,
            budget,
            shared,
        }
    }

    /// A command was refused before it could be queued: the open
    /// `MULTI`, if any, is refused at `EXEC`, as Redis does.
    pub(crate) fn refused(&mut self) {
        if let Some(multi) = &mut self.multi {
            multi.spoil();
        }
    }

    /// Whether a `MULTI` is open.
    pub(crate) fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// Decides what to do with `cmd`.
    pub(crate) fn step(&mut self, cmd: Cmd) -> Step {
        let (name, words) = (cmd.name().unwrap_or_default(), cmd.words.len());
        let Some(multi) = &mut self.multi else {
            return match name {
                "multi" if words == 1 => {
                    self.multi = Some(Multi::new(self.budget.clone()));
                    Step::Answer(Reply::Simple("OK"))
                }
                "exec" if words == 1 => Step::Answer(Reply::err("ERR EXEC without MULTI")),
                "discard" if words == 1 => Step::Answer(Reply::err("ERR DISCARD without MULTI")),
                "watch" if words >= 2 => Step::Answer(Reply::err(
                    "ERR WATCH is not supported: Tally runs MULTI/EXEC without isolation",
                )),
                "unwatch" if words == 1 => Step::Answer(Reply::Simple("OK")),
                _ => Step::Run(cmd),
            };
        };
        match name {
            "exec" if words == 1 => {
                let multi = self.multi.take().expect("in a MULTI here");
                if multi.dirty {
                    Step::Answer(Reply::err(
                        "EXECABORT Transaction discarded because of previous errors.",
                    ))
                } else {
                    Step::Exec(multi.queued)
                }
            }
            "discard" if words == 1 => {
                self.multi = None;
                Step::Answer(Reply::Simple("OK"))
            }
            "multi" if words == 1 => Step::Answer(Reply::err("ERR MULTI calls can not be nested")),
            "watch" => Step::Answer(Reply::err("ERR WATCH inside MULTI is not allowed")),
            "quit" => Step::Run(cmd),
            _ => match queueable(&cmd) {
                Err(refusal) => {
                    multi.spoil();
                    Step::Answer(refusal)
                }
                // Redis keeps nothing more of a transaction EXEC will refuse.
                Ok(()) if multi.dirty => Step::Answer(Reply::Simple("QUEUED")),
                Ok(()) => match multi
                    .charge
                    .take(multi.queued.len(), queued::cost(&cmd.words))
                {
                    Ok(()) => {
                        multi.queued.push(cmd);
                        Step::Answer(Reply::Simple("QUEUED"))
                    }
                    Err(over) => {
                        let reply = over.reply(multi.charge.budget());
                        multi.spoil();
                        Step::Answer(reply)
                    }
                },
            },
        }
    }
}

/// Whether a command may be queued: known, and of the right arity.
fn queueable(cmd: &Cmd) -> Result<(), Reply> {
    match (cmd.name(), cmd.op) {
        (None, _) => Err(redis_unknown(&cmd.words)),
        (Some(name), Op::Arity) => Err(arity(name)),
        (Some(_), _) => Ok(()),
    }
}

/// Redis' answer to a wrong number of arguments.
pub(crate) fn arity(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(s: &mut Session, line: &str) -> Step {
        s.step(Cmd::parse(
            line.split(' ').map(|w| w.as_bytes().to_vec()).collect(),
        ))
    }

    use crate::client::resp::queued::MULTI_QUEUED_MAX;

    /// One transaction's share, as `[cluster.limits]` has it by default.
    const MULTI_QUEUED_BYTES_MAX: usize = 16 << 20;

    fn session() -> Session {
        let budget = Budget::new(MULTI_QUEUED_BYTES_MAX, 256 << 20);
        Session::new(
            (String::new(), String::new()),
            Login::admin(),
            budget,
            Shared::new(),
        )
    }

    #[test]
    fn multi_queues_then_exec_runs_in_order() {
        let mut s = session();
        assert!(matches!(step(&mut s, "INCR a"), Step::Run(_)));
        assert_eq!(step(&mut s, "MULTI"), Step::Answer(Reply::Simple("OK")));
        assert_eq!(
            step(&mut s, "INCR a"),
            Step::Answer(Reply::Simple("QUEUED"))
        );
        assert_eq!(
            step(&mut s, "MULTI"),
            Step::Answer(Reply::err("ERR MULTI calls can not be nested"))
        );
        assert_eq!(step(&mut s, "GET a"), Step::Answer(Reply::Simple("QUEUED")));
        let Step::Exec(cmds) = step(&mut s, "EXEC") else {
            panic!("EXEC runs the queue")
        };
        let words: Vec<_> = cmds.into_iter().map(|c| c.words).collect();
        assert_eq!(
            words,
            [
                vec![b"INCR".to_vec(), b"a".to_vec()],
                vec![b"GET".to_vec(), b"a".to_vec()]
            ]
        );
        assert!(!s.in_multi());
        assert_eq!(
            step(&mut s, "EXEC"),
            Step::Answer(Reply::err("ERR EXEC without MULTI"))
        );
    }

    #[test]
    fn a_refused_command_aborts_the_transaction() {
        let mut s = session();
        step(&mut s, "MULTI");
        assert!(
            matches!(step(&mut s, "GET"), Step::Answer(Reply::Error(e)) if e.contains("wrong number"))
        );
        assert!(
            matches!(step(&mut s, "NOPE x"), Step::Answer(Reply::Error(e)) if e.contains("unknown command 'NOPE'"))
        );
        assert_eq!(
            step(&mut s, "INCR a"),
            Step::Answer(Reply::Simple("QUEUED"))
        );
        assert!(
            matches!(step(&mut s, "EXEC"), Step::Answer(Reply::Error(e)) if e.starts_with("EXECABORT"))
        );
        assert!(!s.in_multi());
    }

    #[test]
    fn discard_watch_and_the_queue_limit() {
        let mut s = session();
        assert!(matches!(
            step(&mut s, "WATCH a"),
            Step::Answer(Reply::Error(_))
        ));
        assert_eq!(step(&mut s, "UNWATCH"), Step::Answer(Reply::Simple("OK")));
        assert_eq!(
            step(&mut s, "DISCARD"),
            Step::Answer(Reply::err("ERR DISCARD without MULTI"))
        );
        step(&mut s, "MULTI");
        assert!(matches!(
            step(&mut s, "WATCH a"),
            Step::Answer(Reply::Error(_))
        ));
        assert_eq!(step(&mut s, "DISCARD"), Step::Answer(Reply::Simple("OK")));
        assert!(!s.in_multi());
        step(&mut s, "MULTI");
        for _ in 0..MULTI_QUEUED_MAX {
            assert_eq!(
                step(&mut s, "INCR a"),
                Step::Answer(Reply::Simple("QUEUED"))
            );
        }
        assert!(
            matches!(step(&mut s, "INCR a"), Step::Answer(Reply::Error(e)) if e.contains("queue is full"))
        );
        assert!(
            matches!(step(&mut s, "EXEC"), Step::Answer(Reply::Error(e)) if e.starts_with("EXECABORT"))
        );
        // Bytes are bounded too.
        step(&mut s, "MULTI");
        let big = vec![b"MGET".to_vec(), vec![b'k'; MULTI_QUEUED_BYTES_MAX / 2]];
        assert_eq!(
            s.step(Cmd::parse(big.clone())),
            Step::Answer(Reply::Simple("QUEUED"))
        );
        assert!(
            matches!(s.step(Cmd::parse(big)), Step::Answer(Reply::Error(e)) if e.contains("queue is full"))
        );
    }

    #[test]
    fn a_transaction_counts_what_each_argument_holds() {
        // Empty arguments: no bytes of content, but each is a slot of the
        // command's argument array. Redis counts them (multiStateMemOverhead).
        let mut s = session();
        step(&mut s, "MULTI");
        let empties: Vec<Vec<u8>> = std::iter::once(b"SADD".to_vec())
            .chain(std::iter::repeat_with(Vec::new).take(4095))
            .collect();
        let held_per_command = empties.len() * std::mem::size_of::<Vec<u8>>();
        let commands = MULTI_QUEUED_BYTES_MAX / held_per_command + 1;
        let refused = (0..commands)
            .map(|_| s.step(Cmd::parse(empties.clone())))
            .position(|r| r != Step::Answer(Reply::Simple("QUEUED")));
        assert!(
            refused.is_some(),
            "{commands} commands holding {} MiB were queued",
            (commands * held_per_command) >> 20
        );
        assert!(
            matches!(step(&mut s, "EXEC"), Step::Answer(Reply::Error(e)) if e.starts_with("EXECABORT"))
        );
    }

    #[test]
    fn sessions_of_a_node_get_distinct_ids() {
        let shared = Shared::new();
        let budget = Budget::new(MULTI_QUEUED_BYTES_MAX, 256 << 20);
        let login = || Login::admin();
        let addrs = || (String::new(), String::new());
        let one = Session::new(addrs(), login(), budget.clone(), shared.clone());
        let two = Session::new(addrs(), login(), budget, shared);
        assert_ne!(one.id, two.id);
    }
}
