//! A request, parsed once: pure, tested here.
//!
//! `proto` cuts a request into words; [`Cmd::parse`] finds its command
//! in the table (`base::commands`, without allocating), checks its arity
//! and reads the arguments the fast path needs ([`Op`]), once. Everything
//! after runs the [`Cmd`]: authorization (`access::authorize`), the
//! pipeline's grouping (`pipeline`), a transaction's queue (`session`),
//! the group's adds (`group`) and the general dispatch (`super::execute`,
//! `super::keyed_as`), which hands a command to the one module its table
//! entry names.

use super::proto::Reply;
use crate::base::commands::{self, COMMANDS, Command};

/// Redis' answer to an amount that is not an integer.
pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
/// Redis' answer to a `DECRBY` whose amount cannot be negated.
pub(crate) const DECREMENT_OVERFLOWS: &str = "ERR decrement would overflow";

/// One client request, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cmd {
    /// Its place in the command table; `None` for a name the table lacks.
    id: Option<usize>,
    /// The words as the client sent them, the name first (never empty,
    /// but in a command [`Cmd::take`] left behind).
    pub(crate) words: Vec<Vec<u8>>,
    /// What the fast path needs of them.
    pub(crate) op: Op,
}

/// A request's arguments as the fast path reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// A name the command table does not know.
    Unknown,
    /// A known command with the wrong number of words.
    Arity,
    /// `INCR`, `DECR`, `INCRBY`, `DECRBY`, `HINCRBY`: an add to the counter
    /// `words[1]` (its column `words[2]` if `column`), or the error its
    /// amount gets.
    Add {
        column: bool,
        delta: Result<i64, &'static str>,
    },
    /// `GET`, `HGET`: a read of the counter `words[1]` (its column
    /// `words[2]` if `column`).
    Get { column: bool },
    /// `MGET`: reads of the counters `words[1..]`.
    MGet,
    /// `SADD`: the members `words[2..]` counted once in the unique
    /// counter `words[1]`.
    SAdd,
    /// Any other command: its module reads its words.
    Words,
}

impl Cmd {
    /// `words` (the name first, never empty) as a command.
    pub(crate) fn parse(words: Vec<Vec<u8>>) -> Cmd {
        let id = words.first().and_then(|w| commands::index_of_word(w));
        let op = match id.map(|i| &COMMANDS[i]) {
            None => Op::Unknown,
            Some(c) if !c.arity_ok(words.len()) => Op::Arity,
            Some(c) => op_of(c.name, &words),
        };
        Cmd { id, words, op }
    }

    /// This command, leaving in its place an empty one that is never run
    /// (a pipeline's commands are taken one by one).
    pub(crate) fn take(&mut self) -> Cmd {
        std::mem::replace(
            self,
            Cmd {
                id: None,
                words: Vec::new(),
                op: Op::Unknown,
            },
        )
    }

    /// Its entry in the command table, if it has one.
    pub(crate) fn command(&self) -> Option<&'static Command> {
        self.id.map(|i| &COMMANDS[i])
    }

    /// Its place in the command table, if it has one (the metrics count by it).
    pub(crate) fn id(&self) -> Option<usize> {
        self.id
    }

    /// Its name, lowercase, as the table has it; `None` for an unknown one.
    pub(crate) fn name(&self) -> Option<&'static str> {
        self.command().map(|c| c.name)
    }

    /// Its arguments: the words after the name.
    pub(crate) fn rest(&self) -> &[Vec<u8>] {
        self.words.get(1..).unwrap_or_default()
    }
}

/// Redis commands the table lacks because Tally does not serve them, and
/// why: a client hears the reason rather than "unknown command".
const UNSERVED: &[(&[&str], &str)] = &[(
    &["smembers", "srem", "spop", "sscan", "pfmerge"],
    "Tally's sets are unique counters, which count members but do not list or remove them",
)];

/// What a command the table does not know (`words`, the name first) is
/// told: why Tally does not serve it, or Redis' unknown command.
pub(crate) fn unknown(words: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&words[0]).to_ascii_lowercase();
    let why = UNSERVED
        .iter()
        .find(|(names, _)| names.contains(&name.as_str()));
    match why {
        Some((_, why)) => Reply::err(format!(
            "ERR {} is not supported: {why}",
            name.to_ascii_uppercase()
        )),
        None => redis_unknown(words),
    }
}

/// Redis' answer to an unknown command (`words`, the name first).
pub(crate) fn redis_unknown(args: &[Vec<u8>]) -> Reply {
    let shown: Vec<String> = args[1..]
        .iter()
        .take(3)
        .map(|a| format!("'{}'", String::from_utf8_lossy(a)))
        .collect();
    Reply::err(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(&args[0]),
        shown.join(" ")
    ))
}

/// The fast path's reading of `words`, a command `name` of the right arity.
fn op_of(name: &str, words: &[Vec<u8>]) -> Op {
    let add = |column, delta| Op::Add { column, delta };
    match (name, words) {
        ("incr", _) => add(false, Ok(1)),
        ("decr", _) => add(false, Ok(-1)),
        ("incrby", [_, _, d]) => add(false, int(d)),
        ("decrby", [_, _, d]) => add(
            false,
            int(d).and_then(|d| d.checked_neg().ok_or(DECREMENT_OVERFLOWS)),
        ),
        ("hincrby", [_, _, _, d]) => add(true, int(d)),
        ("get", _) => Op::Get { column: false },
        ("hget", _) => Op::Get { column: true },
        ("mget", _) => Op::MGet,
        ("sadd", _) => Op::SAdd,
        _ => Op::Words,
    }
}

/// An integer argument, as Redis reads one.
fn int(word: &[u8]) -> Result<i64, &'static str> {
    std::str::from_utf8(word)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(NOT_AN_INTEGER)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn cmd(line: &str) -> Cmd {
        Cmd::parse(line.split(' ').map(|w| w.as_bytes().to_vec()).collect())
    }

    fn add(column: bool, delta: Result<i64, &'static str>) -> Op {
        Op::Add { column, delta }
    }

    #[test]
    fn names_are_found_in_any_case_once() {
        let c = cmd("InCr a");
        assert_eq!(c.name(), Some("incr"));
        assert_eq!(c.id(), commands::index("incr"));
        assert_eq!(c.rest(), [b"a".to_vec()]);
        assert_eq!(c.words[0], b"InCr", "the words stay as sent");
        let unknown = cmd("NOPE a");
        assert_eq!((unknown.name(), unknown.op), (None, Op::Unknown));
        assert_eq!(cmd("tally.INCRBY k 1 c 1").name(), Some("tally.incrby"));
    }

    #[test]
    fn unknown_commands_hear_why_when_tally_knows() {
        let told = |line: &str| match unknown(&cmd(line).words) {
            Reply::Error(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(told("SMembers s").starts_with("ERR SMEMBERS is not supported: Tally's sets"));
        assert_eq!(
            told("NOPE a b"),
            "ERR unknown command 'NOPE', with args beginning with: 'a' 'b'"
        );
        for line in ["SREM s x", "PFMERGE a b"] {
            assert_eq!(cmd(line).op, Op::Unknown, "{line}: not in the table");
        }
    }

    #[test]
    fn arity_is_checked_against_the_table() {
        for line in [
            "INCR",
            "INCR a b",
            "GET",
            "HINCRBY h f",
            "MGET",
            "MULTI x",
            "SADD s",
        ] {
            assert_eq!(cmd(line).op, Op::Arity, "{line}");
        }
        for line in ["PFADD s x", "PING", "PING x", "SET a 1 EX 9"] {
            assert_eq!(cmd(line).op, Op::Words, "{line}");
        }
    }

    #[test]
    fn the_fast_paths_arguments_are_read_once() {
        assert_eq!(cmd("INCR a").op, add(false, Ok(1)));
        assert_eq!(cmd("decr a").op, add(false, Ok(-1)));
        assert_eq!(cmd("INCRBY a -7").op, add(false, Ok(-7)));
        assert_eq!(cmd("DECRBY a 7").op, add(false, Ok(-7)));
        assert_eq!(cmd("HINCRBY h f 2").op, add(true, Ok(2)));
        assert_eq!(cmd("GET a").op, Op::Get { column: false });
        assert_eq!(cmd("HGET h f").op, Op::Get { column: true });
        assert_eq!(cmd("MGET a b c").op, Op::MGet);
        assert_eq!(cmd("sadd s x y").op, Op::SAdd);
    }

    #[test]
    fn bad_amounts_get_redis_errors() {
        for line in [
            "INCRBY a x",
            "INCRBY a 1.5",
            "INCRBY a 99999999999999999999",
            "HINCRBY h f ?",
        ] {
            let Op::Add { delta, .. } = cmd(line).op else {
                panic!("{line}: not an add")
            };
            assert_eq!(delta, Err(NOT_AN_INTEGER), "{line}");
        }
        let min = format!("DECRBY a {}", i64::MIN);
        assert_eq!(cmd(&min).op, add(false, Err(DECREMENT_OVERFLOWS)));
        assert_eq!(cmd("DECRBY a x").op, add(false, Err(NOT_AN_INTEGER)));
    }
}
