//! The commands the RESP listener knows: arity, flags and docs, as Redis
//! describes its own. `COMMAND` answers from this table, and a command
//! queued in a `MULTI` is checked against it, as Redis checks it then.

/// One command Tally serves over RESP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command {
    /// Its name, lowercase.
    pub name: &'static str,
    /// Redis' arity: `n` exactly n words with the name, `-n` at least n.
    pub arity: i64,
    /// Redis' flags for it.
    pub flags: &'static [&'static str],
    /// First key, last key (-1: the last word) and step; 0 for none.
    pub keys: (i64, i64, i64),
    /// Redis' command group.
    pub group: &'static str,
    /// One line on what it does here.
    pub summary: &'static str,
}

const W: &[&str] = &["write", "denyoom", "fast"];
const R: &[&str] = &["readonly", "fast"];
const C: &[&str] = &["fast", "no-auth", "loading", "stale"];
const T: &[&str] = &["noscript", "loading", "stale", "fast", "allow-busy"];

const fn cmd(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
    group: &'static str,
    summary: &'static str,
) -> Command {
    Command {
        name,
        arity,
        flags,
        keys,
        group,
        summary,
    }
}

const ONE: (i64, i64, i64) = (1, 1, 1);
const ALL: (i64, i64, i64) = (1, -1, 1);
const NONE: (i64, i64, i64) = (0, 0, 0);

/// Every command, by name.
pub(crate) const COMMANDS: &[Command] = &[
    cmd(
        "incr",
        2,
        W,
        ONE,
        "string",
        "Adds 1 to a counter; answers its new value.",
    ),
    cmd(
        "decr",
        2,
        W,
        ONE,
        "string",
        "Subtracts 1 from a counter; answers its new value.",
    ),
    cmd(
        "incrby",
        3,
        W,
        ONE,
        "string",
        "Adds an integer to a counter; answers its new value.",
    ),
    cmd(
        "decrby",
        3,
        W,
        ONE,
        "string",
        "Subtracts an integer from a counter; answers its new value.",
    ),
    cmd(
        "get",
        2,
        R,
        ONE,
        "string",
        "Reads a counter; nil if never written or reset.",
    ),
    cmd("mget", -2, R, ALL, "string", "Reads several counters."),
    cmd(
        "del",
        -2,
        &["write"],
        ALL,
        "generic",
        "Deletes keys of every kind: counters, lists, hashes, unique counters.",
    ),
    cmd(
        "unlink",
        -2,
        &["write", "fast"],
        ALL,
        "generic",
        "Deletes keys, as DEL does (nothing is left to free in the background).",
    ),
    cmd(
        "exists",
        -2,
        R,
        ALL,
        "generic",
        "Counts the keys that hold a value.",
    ),
    cmd(
        "set",
        -3,
        &["write", "denyoom"],
        ONE,
        "string",
        "Sets a counter to an integer; NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL.",
    ),
    cmd(
        "setnx",
        3,
        W,
        ONE,
        "string",
        "Sets a counter that does not exist; answers 1 if it did.",
    ),
    cmd(
        "setex",
        4,
        &["write", "denyoom"],
        ONE,
        "string",
        "Sets a counter with a deadline in seconds.",
    ),
    cmd(
        "psetex",
        4,
        &["write", "denyoom"],
        ONE,
        "string",
        "Sets a counter with a deadline in milliseconds.",
    ),
    cmd(
        "getset",
        3,
        W,
        ONE,
        "string",
        "Sets a counter; answers its value before.",
    ),
    cmd(
        "getdel",
        2,
        W,
        ONE,
        "string",
        "Resets a counter; answers its value before.",
    ),
    cmd(
        "getex",
        -2,
        W,
        ONE,
        "string",
        "Reads a counter and sets or removes its deadline.",
    ),
    cmd(
        "mset",
        -3,
        &["write", "denyoom"],
        (1, -1, 2),
        "string",
        "Sets several counters, one after another.",
    ),
    cmd(
        "rename",
        3,
        &["write"],
        (1, 2, 1),
        "generic",
        "Moves a counter's value and deadline to another key (two steps, not atomic).",
    ),
    cmd(
        "renamenx",
        3,
        &["write", "fast"],
        (1, 2, 1),
        "generic",
        "RENAME, if the new key does not exist.",
    ),
    cmd(
        "expire",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline in seconds; NX, XX, GT, LT.",
    ),
    cmd(
        "pexpire",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline in milliseconds; NX, XX, GT, LT.",
    ),
    cmd(
        "expireat",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline as a Unix time in seconds.",
    ),
    cmd(
        "pexpireat",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline as a Unix time in milliseconds.",
    ),
    cmd("persist", 2, W, ONE, "generic", "Removes a key's deadline."),
    cmd(
        "ttl",
        2,
        R,
        ONE,
        "generic",
        "Seconds until a key's deadline; -1 none, -2 no key.",
    ),
    cmd(
        "pttl",
        2,
        R,
        ONE,
        "generic",
        "Milliseconds until a key's deadline; -1 none, -2 no key.",
    ),
    cmd(
        "expiretime",
        2,
        R,
        ONE,
        "generic",
        "A key's deadline as a Unix time in seconds.",
    ),
    cmd(
        "pexpiretime",
        2,
        R,
        ONE,
        "generic",
        "A key's deadline as a Unix time in milliseconds.",
    ),
    cmd(
        "hset",
        -4,
        &["write", "denyoom", "fast"],
        ONE,
        "hash",
        "Sets columns of a partition to integers; answers how many were new.",
    ),
    cmd(
        "hsetnx",
        4,
        W,
        ONE,
        "hash",
        "Sets a column that does not exist.",
    ),
    cmd(
        "hincrby",
        4,
        W,
        ONE,
        "hash",
        "Adds an integer to a column of a partition.",
    ),
    cmd("hget", 3, R, ONE, "hash", "Reads a column of a partition."),
    cmd(
        "hgetall",
        2,
        &["readonly"],
        ONE,
        "hash",
        "Reads every column of a partition.",
    ),
    cmd("hdel", -3, W, ONE, "hash", "Resets columns of a partition."),
    cmd(
        "sadd",
        -3,
        W,
        ONE,
        "set",
        "Counts members once; answers how many were new.",
    ),
    cmd(
        "scard",
        2,
        R,
        ONE,
        "set",
        "The exact number of members of a unique counter.",
    ),
    cmd(
        "sismember",
        3,
        R,
        ONE,
        "set",
        "Whether a member was counted.",
    ),
    cmd(
        "smismember",
        -3,
        R,
        ONE,
        "set",
        "Whether each member was counted.",
    ),
    cmd(
        "pfadd",
        -2,
        W,
        ONE,
        "hyperloglog",
        "Counts members once, exactly.",
    ),
    cmd(
        "pfcount",
        -2,
        R,
        ONE,
        "hyperloglog",
        "The exact number of members of one key.",
    ),
    cmd(
        "tally.incrby",
        5,
        W,
        ONE,
        "string",
        "An add with an operation id: applied at most once.",
    ),
    cmd(
        "tally.hincrby",
        6,
        W,
        ONE,
        "hash",
        "A column add with an operation id: applied at most once.",
    ),
    cmd(
        "ping",
        -1,
        &["fast"],
        NONE,
        "connection",
        "Answers PONG, or the message.",
    ),
    cmd(
        "echo",
        2,
        &["fast"],
        NONE,
        "connection",
        "Answers the message.",
    ),
    cmd(
        "select",
        2,
        &["loading", "stale", "fast"],
        NONE,
        "connection",
        "Selects a database, 0 to 15: a keyspace of its own.",
    ),
    cmd("quit", -1, C, NONE, "connection", "Closes the connection."),
    cmd(
        "scan",
        -2,
        &["readonly"],
        NONE,
        "generic",
        "Lists the database's keys, a step at a time; MATCH, COUNT, TYPE.",
    ),
    cmd(
        "keys",
        2,
        &["readonly"],
        NONE,
        "generic",
        "Lists the database's keys that match a pattern (a whole scan).",
    ),
    cmd(
        "dbsize",
        1,
        &["readonly", "fast"],
        NONE,
        "server",
        "Counts the database's keys (a whole scan).",
    ),
    cmd(
        "randomkey",
        1,
        &["readonly"],
        NONE,
        "generic",
        "A key of the database, from a random place.",
    ),
    cmd(
        "type",
        2,
        R,
        ONE,
        "generic",
        "What a key holds: string, list, hash, set or none.",
    ),
    cmd(
        "hscan",
        -3,
        &["readonly"],
        ONE,
        "hash",
        "Lists a hash's fields and values in one step; MATCH, COUNT, NOVALUES.",
    ),
    cmd(
        "eval",
        -3,
        &[
            "noscript",
            "stale",
            "skip_monitor",
            "no-mandatory-keys",
            "movablekeys",
        ],
        NONE,
        "scripting",
        "Runs a Lua script; its commands run in order, without isolation.",
    ),
    cmd(
        "evalsha",
        -3,
        &[
            "noscript",
            "stale",
            "skip_monitor",
            "no-mandatory-keys",
            "movablekeys",
        ],
        NONE,
        "scripting",
        "Runs a cached Lua script by its sha1.",
    ),
    cmd(
        "eval_ro",
        -3,
        &[
            "noscript",
            "stale",
            "skip_monitor",
            "no-mandatory-keys",
            "movablekeys",
            "readonly",
        ],
        NONE,
        "scripting",
        "Runs a Lua script that may only read.",
    ),
    cmd(
        "evalsha_ro",
        -3,
        &[
            "noscript",
            "stale",
            "skip_monitor",
            "no-mandatory-keys",
            "movablekeys",
            "readonly",
        ],
        NONE,
        "scripting",
        "Runs a cached Lua script that may only read.",
    ),
    cmd(
        "script",
        -2,
        &["noscript"],
        NONE,
        "scripting",
        "SCRIPT LOAD, EXISTS, FLUSH, KILL: the node's cache of scripts.",
    ),
    cmd(
        "flushdb",
        -1,
        &["write"],
        NONE,
        "server",
        "Resets every counter of the database, cluster-wide, at once; ASYNC, SYNC.",
    ),
    cmd(
        "flushall",
        -1,
        &["write"],
        NONE,
        "server",
        "Resets every counter of every database, cluster-wide, at once; ASYNC, SYNC.",
    ),
    cmd(
        "swapdb",
        3,
        &["write", "fast"],
        NONE,
        "server",
        "Not supported: answers an error.",
    ),
    cmd(
        "move",
        3,
        &["write", "fast"],
        ONE,
        "generic",
        "Not supported: answers an error.",
    ),
    cmd(
        "hello",
        -1,
        C,
        NONE,
        "connection",
        "Handshake: protocol 2 or 3, client name.",
    ),
    cmd(
        "auth",
        -2,
        C,
        NONE,
        "connection",
        "Authenticates (the default user has no password).",
    ),
    cmd(
        "client",
        -2,
        &["loading", "stale"],
        NONE,
        "connection",
        "Connection settings: SETNAME, GETNAME, ID, INFO, SETINFO, CONSISTENCY.",
    ),
    cmd(
        "readonly",
        1,
        &["loading", "stale", "fast"],
        NONE,
        "cluster",
        "Accepted: every node serves reads.",
    ),
    cmd(
        "readwrite",
        1,
        &["loading", "stale", "fast"],
        NONE,
        "cluster",
        "Accepted: every node serves writes.",
    ),
    cmd(
        "command",
        -1,
        &["loading", "stale"],
        NONE,
        "server",
        "Describes the commands: COUNT, LIST, INFO, DOCS.",
    ),
    cmd(
        "config",
        -2,
        &["admin", "loading", "stale"],
        NONE,
        "server",
        "CONFIG GET answers empty values.",
    ),
    cmd(
        "info",
        -1,
        &["loading", "stale"],
        NONE,
        "server",
        "Server, clients, persistence and replication sections.",
    ),
    cmd(
        "time",
        1,
        &["loading", "stale", "fast"],
        NONE,
        "server",
        "The node's clock: seconds and microseconds.",
    ),
    cmd(
        "multi",
        1,
        T,
        NONE,
        "transactions",
        "Queues the next commands until EXEC.",
    ),
    cmd(
        "exec",
        1,
        &["noscript", "loading", "stale"],
        NONE,
        "transactions",
        "Runs the queued commands in order, without isolation.",
    ),
    cmd(
        "discard",
        1,
        T,
        NONE,
        "transactions",
        "Drops the queued commands.",
    ),
    cmd(
        "watch",
        -2,
        T,
        ALL,
        "transactions",
        "Refused: transactions run without isolation.",
    ),
    cmd(
        "unwatch",
        1,
        T,
        NONE,
        "transactions",
        "Accepted: nothing is watched.",
    ),
    cmd(
        "lpush",
        -3,
        W,
        ONE,
        "list",
        "Pushes elements onto the head of a list; answers its length.",
    ),
    cmd(
        "rpush",
        -3,
        W,
        ONE,
        "list",
        "Pushes elements onto the tail of a list; answers its length.",
    ),
    cmd(
        "lpushx",
        -3,
        W,
        ONE,
        "list",
        "LPUSH, only onto a list that exists.",
    ),
    cmd(
        "rpushx",
        -3,
        W,
        ONE,
        "list",
        "RPUSH, only onto a list that exists.",
    ),
    cmd(
        "lpop",
        -2,
        &["write", "fast"],
        ONE,
        "list",
        "Removes and answers the first elements of a list.",
    ),
    cmd(
        "rpop",
        -2,
        &["write", "fast"],
        ONE,
        "list",
        "Removes and answers the last elements of a list.",
    ),
    cmd(
        "ltrim",
        4,
        &["write"],
        ONE,
        "list",
        "Keeps a range of a list.",
    ),
    cmd(
        "lset",
        4,
        &["write", "denyoom"],
        ONE,
        "list",
        "Sets an element of a list by index.",
    ),
    cmd(
        "lrem",
        4,
        &["write"],
        ONE,
        "list",
        "Removes elements equal to a value from a list.",
    ),
    cmd(
        "linsert",
        5,
        &["write", "denyoom"],
        ONE,
        "list",
        "Inserts an element before or after another.",
    ),
    cmd("llen", 2, R, ONE, "list", "Answers the length of a list."),
    cmd(
        "lrange",
        4,
        &["readonly"],
        ONE,
        "list",
        "Answers a range of a list.",
    ),
    cmd(
        "lindex",
        3,
        &["readonly"],
        ONE,
        "list",
        "Answers an element of a list by index.",
    ),
];

/// The command named `name` (lowercase).
pub(crate) fn find(name: &str) -> Option<&'static Command> {
    index(name).map(|i| &COMMANDS[i])
}

/// The position of the command `name` (lowercase) in [`COMMANDS`].
pub(crate) fn index(name: &str) -> Option<usize> {
    // A map: every command a client sends is looked up, by the pipeline,
    // by its keyspace and by the metrics, and the table has about 80 entries.
    // Process-wide on purpose: a pure cache of the table.
    static BY_NAME: std::sync::OnceLock<foldhash::HashMap<&str, usize>> =
        std::sync::OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            COMMANDS
                .iter()
                .enumerate()
                .map(|(i, c)| (c.name, i))
                .collect()
        })
        .get(name)
        .copied()
}

impl Command {
    /// Whether `words` words (the name included) fit its arity.
    pub(crate) fn arity_ok(&self, words: usize) -> bool {
        let words = i64::try_from(words).unwrap_or(i64::MAX);
        if self.arity >= 0 {
            words == self.arity
        } else {
            words >= -self.arity
        }
    }

    /// Where its keys are among `words` words (the name is word 0): none
    /// for a command without keys.
    pub(crate) fn key_positions(&self, words: usize) -> impl Iterator<Item = usize> + use<> {
        let (first, last, step) = self.keys;
        let end = words.saturating_sub(1);
        let last = usize::try_from(last).map_or(end, |l| l.min(end));
        let (first, step) = match (usize::try_from(first), usize::try_from(step)) {
            (Ok(f @ 1..), Ok(s @ 1..)) => (f, s),
            _ => (1, 0),
        };
        // A step of 0 marks a command without keys: an empty range.
        let last = if step == 0 { 0 } else { last };
        (first..=last).step_by(step.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_and_unique_and_arity_reads_like_redis() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert_eq!(c.name, c.name.to_ascii_lowercase());
            assert!(
                COMMANDS[..i].iter().all(|o| o.name != c.name),
                "{} twice",
                c.name
            );
            assert_ne!(c.arity, 0, "{}", c.name);
        }
        let get = find("get").expect("get");
        assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
        let mget = find("mget").expect("mget");
        assert!(mget.arity_ok(2) && mget.arity_ok(9) && !mget.arity_ok(1));
        assert!(find("swapdb").is_some() && find("bgsave").is_none());
    }
}
