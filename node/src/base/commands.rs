//! The commands the RESP listener knows, as one table: Redis' own
//! description of each (arity, flags, key positions, group, docs), which
//! `COMMAND` answers from, and what Tally does with it, typed: the module
//! that runs it ([`Handler`]), the role it needs ([`Need`]) and how it may
//! join a pipeline's group ([`Pipe`]). A request is looked up here once
//! (`client::resp::command`), and every path runs what it found.
//!
//! Redis' flags answer `COMMAND`, and one Redis rule reads them as Redis
//! does: a script's `redis.call` of a `write` command (read-only scripts
//! may not; `client::resp::lua::api`). What a login needs to run a
//! command is its [`Need`] (with [`need`] for the subcommands that need
//! more), and a test checks that flags and needs agree.

/// One command Tally serves over RESP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command {
    /// Its name, lowercase.
    pub name: &'static str,
    /// Redis' arity: `n` exactly n words with the name, `-n` at least n.
    pub arity: i64,
    /// Redis' flags for it, as `COMMAND` shows them.
    pub flags: &'static [&'static str],
    /// First key, last key (-1: the last word) and step; 0 for none.
    pub keys: (i64, i64, i64),
    /// Redis' command group.
    pub group: &'static str,
    /// One line on what it does here.
    pub summary: &'static str,
    /// The client module that runs it.
    pub handler: Handler,
    /// What a login needs to run it (see [`need`] for subcommands).
    pub need: Need,
    /// How it may run beside a pipeline's other commands.
    pub pipe: Pipe,
}

/// What a request needs of a login: a role allows the levels up to its
/// own (`security::auth::access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// Nothing: logging in, leaving.
    Nothing,
    /// A logged-in user.
    Read,
    /// A user who may change counters.
    Write,
    /// An administrator.
    Admin,
}

/// How a command may run beside a pipeline's others (see
/// `client::resp::pipeline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pipe {
    /// A plain add to one key: adds to one key go together, the write
    /// queue keeping their order.
    Add,
    /// A command on its keys only: goes together with commands on other keys.
    Keyed,
    /// Anything else (connection settings, transactions, scripts, flushes,
    /// whole-keyspace walks): runs alone, in its place, after the commands
    /// before it and before those after it.
    Barrier,
}

/// The client module that runs a command (`client::resp`'s dispatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handler {
    /// `counters`: adds and reads of counters and columns.
    Counters,
    /// `generic`: keys of every kind.
    Generic,
    /// `strings`: sets of counters, and strings.
    Strings,
    /// `expiry`: deadlines.
    Expiry,
    /// `text`: commands on a key's bytes.
    Text,
    /// `cas`: compare-and-delete and digests of strings, `MSETNX`.
    Compare,
    /// `blocking`: pops that wait.
    Blocking,
    /// `sets`: unique counters.
    Sets,
    /// `hashes`: a partition's fields, counters and strings.
    Hashes,
    /// `copy`: renames and copies of counters and strings.
    Copy,
    /// `zsets`: sorted sets, agreed.
    ZSets,
    /// `tally`: adds with operation ids.
    Tally,
    /// `lists`.
    Lists,
    /// `keys::keyed`: the keyed ones of `keys` (`HSCAN`, `MOVE`).
    KeysKeyed,
    /// `keys`: whole-database walks and flushes.
    Keys,
    /// `admin`: the server and the connection's settings.
    Admin,
    /// `QUIT`: the connection closes after the reply.
    Quit,
    /// `login`'s `AUTH`.
    Auth,
    /// `login`'s `HELLO ... AUTH`, then `admin`'s `HELLO`.
    Hello,
    /// `session`: `MULTI` and its kin.
    Session,
    /// `script`.
    Script,
}

use Handler::*;
use Need::{Admin as AdminOnly, Nothing, Read, Write};
use Pipe::{Add, Barrier, Keyed};

const W: &[&str] = &["write", "denyoom", "fast"];
const R: &[&str] = &["readonly", "fast"];
const C: &[&str] = &["fast", "no-auth", "loading", "stale"];
const T: &[&str] = &["noscript", "loading", "stale", "fast", "allow-busy"];

/// Redis' description of a command; [`Command::runs`] says what Tally does with it.
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
        handler: Admin,
        need: Read,
        pipe: Barrier,
    }
}

impl Command {
    /// This command, run by `handler`, needing `need`, joining a pipeline as `pipe`.
    const fn runs(self, handler: Handler, need: Need, pipe: Pipe) -> Command {
        Command {
            handler,
            need,
            pipe,
            ..self
        }
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
    )
    .runs(Counters, Write, Add),
    cmd(
        "decr",
        2,
        W,
        ONE,
        "string",
        "Subtracts 1 from a counter; answers its new value.",
    )
    .runs(Counters, Write, Add),
    cmd(
        "incrby",
        3,
        W,
        ONE,
        "string",
        "Adds an integer to a counter; answers its new value.",
    )
    .runs(Counters, Write, Add),
    cmd(
        "decrby",
        3,
        W,
        ONE,
        "string",
        "Subtracts an integer from a counter; answers its new value.",
    )
    .runs(Counters, Write, Add),
    cmd(
        "incrbyfloat",
        3,
        W,
        ONE,
        "string",
        "Adds a decimal to a string, exactly (a whole one to a counter); answers the new value.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "get",
        2,
        R,
        ONE,
        "string",
        "Reads a counter; nil if never written or reset.",
    )
    .runs(Counters, Read, Keyed),
    cmd("mget", -2, R, ALL, "string", "Reads several counters.").runs(Counters, Read, Keyed),
    cmd(
        "del",
        -2,
        &["write"],
        ALL,
        "generic",
        "Deletes keys of every kind: counters, lists, hashes, unique counters.",
    )
    .runs(Generic, Write, Keyed),
    cmd(
        "unlink",
        -2,
        &["write", "fast"],
        ALL,
        "generic",
        "Deletes keys, as DEL does (nothing is left to free in the background).",
    )
    .runs(Generic, Write, Keyed),
    cmd(
        "exists",
        -2,
        R,
        ALL,
        "generic",
        "Counts the keys that hold a value.",
    )
    .runs(Generic, Read, Keyed),
    cmd(
        "set",
        -3,
        &["write", "denyoom"],
        ONE,
        "string",
        "Sets a counter to an integer; NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "setnx",
        3,
        W,
        ONE,
        "string",
        "Sets a counter that does not exist; answers 1 if it did.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "setex",
        4,
        &["write", "denyoom"],
        ONE,
        "string",
        "Sets a counter with a deadline in seconds.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "psetex",
        4,
        &["write", "denyoom"],
        ONE,
        "string",
        "Sets a counter with a deadline in milliseconds.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "getset",
        3,
        W,
        ONE,
        "string",
        "Sets a counter; answers its value before.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "getdel",
        2,
        W,
        ONE,
        "string",
        "Resets a counter; answers its value before.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "getex",
        -2,
        W,
        ONE,
        "string",
        "Reads a counter and sets or removes its deadline.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "mset",
        -3,
        &["write", "denyoom"],
        (1, -1, 2),
        "string",
        "Sets several counters, one after another.",
    )
    .runs(Strings, Write, Keyed),
    cmd(
        "msetnx",
        -3,
        &["write", "denyoom"],
        (1, -1, 2),
        "string",
        "Sets a key that does not exist, agreed (one key per call).",
    )
    .runs(Compare, Write, Keyed),
    cmd(
        "delex",
        -2,
        &["write", "fast"],
        ONE,
        "string",
        "Deletes a key, if its string equals (IFEQ) or not (IFNE) a value or digest.",
    )
    .runs(Compare, Write, Keyed),
    cmd(
        "digest",
        2,
        R,
        ONE,
        "string",
        "Answers the XXH3 digest of a key's value, in hex.",
    )
    .runs(Compare, Read, Keyed),
    cmd(
        "append",
        3,
        &["write", "denyoom", "fast"],
        ONE,
        "string",
        "Appends to a string, agreed; answers its length.",
    )
    .runs(Text, Write, Keyed),
    cmd(
        "setrange",
        4,
        &["write", "denyoom"],
        ONE,
        "string",
        "Overwrites part of a string, agreed; answers its length.",
    )
    .runs(Text, Write, Keyed),
    cmd(
        "strlen",
        2,
        R,
        ONE,
        "string",
        "The length of a string (of a counter: its digits).",
    )
    .runs(Text, Read, Keyed),
    cmd(
        "getrange",
        4,
        &["readonly"],
        ONE,
        "string",
        "Part of a string (of a counter: its digits).",
    )
    .runs(Text, Read, Keyed),
    cmd(
        "substr",
        4,
        &["readonly"],
        ONE,
        "string",
        "GETRANGE, by its old name.",
    )
    .runs(Text, Read, Keyed),
    cmd(
        "lcs",
        -3,
        &["readonly"],
        (1, 2, 1),
        "string",
        "The longest common subsequence of two strings (read one after the other).",
    )
    .runs(Text, Read, Keyed),
    cmd(
        "rename",
        3,
        &["write"],
        (1, 2, 1),
        "generic",
        "Moves a counter's or a string's value and deadline to another key (two steps, not atomic).",
    )
    .runs(Copy, Write, Keyed),
    cmd(
        "copy",
        -3,
        &["write", "denyoom"],
        (1, 2, 1),
        "generic",
        "Copies a counter's or a string's value and deadline to another key; REPLACE.",
    )
    .runs(Copy, Write, Keyed),
    cmd(
        "renamenx",
        3,
        &["write", "fast"],
        (1, 2, 1),
        "generic",
        "RENAME, if the new key does not exist.",
    )
    .runs(Copy, Write, Keyed),
    cmd(
        "expire",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline in seconds; NX, XX, GT, LT.",
    )
    .runs(Expiry, Write, Keyed),
    cmd(
        "pexpire",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline in milliseconds; NX, XX, GT, LT.",
    )
    .runs(Expiry, Write, Keyed),
    cmd(
        "expireat",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline as a Unix time in seconds.",
    )
    .runs(Expiry, Write, Keyed),
    cmd(
        "pexpireat",
        -3,
        W,
        ONE,
        "generic",
        "Gives a key a deadline as a Unix time in milliseconds.",
    )
    .runs(Expiry, Write, Keyed),
    cmd("persist", 2, W, ONE, "generic", "Removes a key's deadline.").runs(Expiry, Write, Keyed),
    cmd(
        "ttl",
        2,
        R,
        ONE,
        "generic",
        "Seconds until a key's deadline; -1 none, -2 no key.",
    )
    .runs(Expiry, Read, Keyed),
    cmd(
        "pttl",
        2,
        R,
        ONE,
        "generic",
        "Milliseconds until a key's deadline; -1 none, -2 no key.",
    )
    .runs(Expiry, Read, Keyed),
    cmd(
        "expiretime",
        2,
        R,
        ONE,
        "generic",
        "A key's deadline as a Unix time in seconds.",
    )
    .runs(Expiry, Read, Keyed),
    cmd(
        "pexpiretime",
        2,
        R,
        ONE,
        "generic",
        "A key's deadline as a Unix time in milliseconds.",
    )
    .runs(Expiry, Read, Keyed),
    cmd(
        "hset",
        -4,
        &["write", "denyoom", "fast"],
        ONE,
        "hash",
        "Sets fields of a hash (integers as counters); answers how many were new.",
    )
    .runs(Hashes, Write, Keyed),
    cmd(
        "hsetnx",
        4,
        W,
        ONE,
        "hash",
        "Sets a field of a hash that does not exist.",
    )
    .runs(Hashes, Write, Keyed),
    cmd(
        "hincrby",
        4,
        W,
        ONE,
        "hash",
        "Adds an integer to a column of a partition.",
    )
    .runs(Counters, Write, Add),
    cmd("hget", 3, R, ONE, "hash", "Reads a column of a partition.").runs(Counters, Read, Keyed),
    cmd(
        "hgetall",
        2,
        &["readonly"],
        ONE,
        "hash",
        "Reads every field of a hash.",
    )
    .runs(Hashes, Read, Keyed),
    cmd("hdel", -3, W, ONE, "hash", "Deletes fields of a hash.").runs(Hashes, Write, Keyed),
    cmd("hmget", -3, R, ONE, "hash", "Reads fields of a hash.").runs(Hashes, Read, Keyed),
    cmd(
        "hincrbyfloat",
        4,
        W,
        ONE,
        "hash",
        "Adds a decimal to a field's string, exactly (a whole one to a counter).",
    )
    .runs(Hashes, Write, Keyed),
    cmd("hkeys", 2, &["readonly"], ONE, "hash", "Names a hash's fields.").runs(Hashes, Read, Keyed),
    cmd("hvals", 2, &["readonly"], ONE, "hash", "Reads a hash's values.").runs(Hashes, Read, Keyed),
    cmd("hlen", 2, R, ONE, "hash", "Counts a hash's fields.").runs(Hashes, Read, Keyed),
    cmd("hexists", 3, R, ONE, "hash", "Whether a hash has a field.").runs(Hashes, Read, Keyed),
    cmd("hstrlen", 3, R, ONE, "hash", "The length of a field's value.").runs(Hashes, Read, Keyed),
    cmd(
        "hrandfield",
        -2,
        &["readonly"],
        ONE,
        "hash",
        "Random fields of a hash; a count, WITHVALUES.",
    )
    .runs(Hashes, Read, Keyed),
    cmd("zadd", -4, W, ONE, "sorted-set", "Adds members to a sorted set, agreed.").runs(ZSets, Write, Keyed),
    cmd("zincrby", 4, W, ONE, "sorted-set", "Adds to a member's score, agreed.").runs(ZSets, Write, Keyed),
    cmd("zrem", -3, &["write", "fast"], ONE, "sorted-set", "Removes members of a sorted set.")
        .runs(ZSets, Write, Keyed),
    cmd("zcard", 2, R, ONE, "sorted-set", "Counts a sorted set's members.").runs(ZSets, Read, Keyed),
    cmd("zscore", 3, R, ONE, "sorted-set", "A member's score.").runs(ZSets, Read, Keyed),
    cmd("zmscore", -3, R, ONE, "sorted-set", "Members' scores.").runs(ZSets, Read, Keyed),
    cmd("zcount", 4, R, ONE, "sorted-set", "Counts members in a score range.").runs(ZSets, Read, Keyed),
    cmd("zrank", -3, R, ONE, "sorted-set", "A member's rank, lowest first.").runs(ZSets, Read, Keyed),
    cmd("zrevrank", -3, R, ONE, "sorted-set", "A member's rank, highest first.")
        .runs(ZSets, Read, Keyed),
    cmd("zrange", -4, &["readonly"], ONE, "sorted-set", "Members by rank or score.")
        .runs(ZSets, Read, Keyed),
    cmd("zrevrange", -4, &["readonly"], ONE, "sorted-set", "Members by rank, highest first.")
        .runs(ZSets, Read, Keyed),
    cmd("zrangebyscore", -4, &["readonly"], ONE, "sorted-set", "Members by score.")
        .runs(ZSets, Read, Keyed),
    cmd("zrevrangebyscore", -4, &["readonly"], ONE, "sorted-set", "Members by score, highest first.")
        .runs(ZSets, Read, Keyed),
    cmd("zremrangebyscore", 4, &["write"], ONE, "sorted-set", "Removes members in a score range.")
        .runs(ZSets, Write, Keyed),
    cmd("zremrangebyrank", 4, &["write"], ONE, "sorted-set", "Removes members in a rank range.")
        .runs(ZSets, Write, Keyed),
    cmd("zpopmin", -2, &["write", "fast"], ONE, "sorted-set", "Takes the lowest-scored members.")
        .runs(ZSets, Write, Keyed),
    cmd("zpopmax", -2, &["write", "fast"], ONE, "sorted-set", "Takes the highest-scored members.")
        .runs(ZSets, Write, Keyed),
    cmd(
        "sadd",
        -3,
        W,
        ONE,
        "set",
        "Counts members once; answers how many were new.",
    )
    .runs(Sets, Write, Keyed),
    cmd(
        "scard",
        2,
        R,
        ONE,
        "set",
        "The exact number of members of a unique counter.",
    )
    .runs(Sets, Read, Keyed),
    cmd(
        "sismember",
        3,
        R,
        ONE,
        "set",
        "Whether a member was counted.",
    )
    .runs(Sets, Read, Keyed),
    cmd(
        "smismember",
        -3,
        R,
        ONE,
        "set",
        "Whether each member was counted.",
    )
    .runs(Sets, Read, Keyed),
    cmd(
        "pfadd",
        -2,
        W,
        ONE,
        "hyperloglog",
        "Counts members once, exactly.",
    )
    .runs(Sets, Write, Keyed),
    cmd(
        "pfcount",
        -2,
        R,
        ONE,
        "hyperloglog",
        "The exact number of members of one key.",
    )
    .runs(Sets, Read, Keyed),
    cmd(
        "tally.cas",
        4,
        W,
        ONE,
        "string",
        "Sets a key's string to a new value if it holds the expected one, keeping its deadline.",
    )
    .runs(Compare, Write, Keyed),
    cmd(
        "tally.incrby",
        5,
        W,
        ONE,
        "string",
        "An add with an operation id: applied at most once.",
    )
    .runs(Tally, Write, Keyed),
    cmd(
        "tally.hincrby",
        6,
        W,
        ONE,
        "hash",
        "A column add with an operation id: applied at most once.",
    )
    .runs(Tally, Write, Keyed),
    cmd(
        "ping",
        -1,
        &["fast"],
        NONE,
        "connection",
        "Answers PONG, or the message.",
    )
    .runs(Admin, Read, Barrier),
    cmd(
        "echo",
        2,
        &["fast"],
        NONE,
        "connection",
        "Answers the message.",
    )
    .runs(Admin, Read, Barrier),
    cmd(
        "select",
        2,
        &["loading", "stale", "fast"],
        NONE,
        "connection",
        "Selects a database, 0 to 15: a keyspace of its own.",
    )
    .runs(Admin, Read, Barrier),
    cmd("quit", -1, C, NONE, "connection", "Closes the connection.").runs(Quit, Nothing, Barrier),
    cmd(
        "scan",
        -2,
        &["readonly"],
        NONE,
        "generic",
        "Lists the database's keys, a step at a time; MATCH, COUNT, TYPE.",
    )
    .runs(Keys, Read, Barrier),
    cmd(
        "keys",
        2,
        &["readonly"],
        NONE,
        "generic",
        "Lists the database's keys that match a pattern (a whole scan).",
    )
    .runs(Keys, AdminOnly, Barrier),
    cmd(
        "dbsize",
        1,
        &["readonly", "fast"],
        NONE,
        "server",
        "Counts the database's keys (a whole scan).",
    )
    .runs(Keys, Read, Barrier),
    cmd(
        "randomkey",
        1,
        &["readonly"],
        NONE,
        "generic",
        "A key of the database, from a random place.",
    )
    .runs(Keys, Read, Barrier),
    cmd(
        "type",
        2,
        R,
        ONE,
        "generic",
        "What a key holds: string, list, hash, set or none.",
    )
    .runs(Generic, Read, Keyed),
    cmd(
        "hscan",
        -3,
        &["readonly"],
        ONE,
        "hash",
        "Lists a hash's fields and values in one step; MATCH, COUNT, NOVALUES.",
    )
    .runs(KeysKeyed, Read, Keyed),
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
        "Runs a Lua script: one of one key as one agreed change of it, others command by command.",
    )
    .runs(Script, Read, Barrier),
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
    )
    .runs(Script, Read, Barrier),
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
    )
    .runs(Script, Read, Barrier),
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
    )
    .runs(Script, Read, Barrier),
    cmd(
        "fcall",
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
        "Calls a function of the cluster's libraries, as a script runs.",
    )
    .runs(Script, Read, Barrier),
    cmd(
        "fcall_ro",
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
        "Calls a function flagged no-writes, read-only.",
    )
    .runs(Script, Read, Barrier),
    cmd(
        "function",
        -2,
        &["noscript"],
        NONE,
        "scripting",
        "FUNCTION LOAD, DELETE, FLUSH, LIST, DUMP, RESTORE, STATS, KILL: the cluster's libraries, agreed.",
    )
    .runs(Script, Read, Barrier),
    cmd(
        "script",
        -2,
        &["noscript"],
        NONE,
        "scripting",
        "SCRIPT LOAD, EXISTS, FLUSH, KILL: the node's cache of scripts.",
    )
    .runs(Script, Read, Barrier),
    cmd(
        "flushdb",
        -1,
        &["write"],
        NONE,
        "server",
        "Resets every counter of the database, cluster-wide, at once; ASYNC, SYNC.",
    )
    .runs(Keys, AdminOnly, Barrier),
    cmd(
        "flushall",
        -1,
        &["write"],
        NONE,
        "server",
        "Resets every counter of every database, cluster-wide, at once; ASYNC, SYNC.",
    )
    .runs(Keys, AdminOnly, Barrier),
    cmd(
        "swapdb",
        3,
        &["write", "fast"],
        NONE,
        "server",
        "Not supported: answers an error.",
    )
    .runs(Keys, AdminOnly, Barrier),
    cmd(
        "move",
        3,
        &["write", "fast"],
        ONE,
        "generic",
        "Not supported: answers an error.",
    )
    .runs(KeysKeyed, Write, Keyed),
    cmd(
        "hello",
        -1,
        C,
        NONE,
        "connection",
        "Handshake: protocol 2 or 3, client name.",
    )
    .runs(Hello, Nothing, Barrier),
    cmd(
        "auth",
        -2,
        C,
        NONE,
        "connection",
        "Authenticates (the default user has no password).",
    )
    .runs(Auth, Nothing, Barrier),
    cmd(
        "client",
        -2,
        &["loading", "stale"],
        NONE,
        "connection",
        "Connection settings: SETNAME, GETNAME, ID, INFO, SETINFO, CONSISTENCY.",
    )
    .runs(Admin, Read, Barrier),
    cmd(
        "readonly",
        1,
        &["loading", "stale", "fast"],
        NONE,
        "cluster",
        "Accepted: every node serves reads.",
    )
    .runs(Admin, Read, Barrier),
    cmd(
        "readwrite",
        1,
        &["loading", "stale", "fast"],
        NONE,
        "cluster",
        "Accepted: every node serves writes.",
    )
    .runs(Admin, Read, Barrier),
    cmd(
        "command",
        -1,
        &["loading", "stale"],
        NONE,
        "server",
        "Describes the commands: COUNT, LIST, INFO, DOCS.",
    )
    .runs(Admin, Read, Barrier),
    cmd(
        "config",
        -2,
        &["admin", "loading", "stale"],
        NONE,
        "server",
        "CONFIG GET answers empty values.",
    )
    .runs(Admin, AdminOnly, Barrier),
    cmd(
        "info",
        -1,
        &["loading", "stale"],
        NONE,
        "server",
        "Server, clients, persistence and replication sections.",
    )
    .runs(Admin, AdminOnly, Barrier),
    cmd(
        "time",
        1,
        &["loading", "stale", "fast"],
        NONE,
        "server",
        "The node's clock: seconds and microseconds.",
    )
    .runs(Admin, Read, Barrier),
    cmd(
        "multi",
        1,
        T,
        NONE,
        "transactions",
        "Queues the next commands until EXEC.",
    )
    .runs(Session, Read, Barrier),
    cmd(
        "exec",
        1,
        &["noscript", "loading", "stale"],
        NONE,
        "transactions",
        "Runs the queued commands in order, without isolation.",
    )
    .runs(Session, Read, Barrier),
    cmd(
        "discard",
        1,
        T,
        NONE,
        "transactions",
        "Drops the queued commands.",
    )
    .runs(Session, Read, Barrier),
    cmd(
        "watch",
        -2,
        T,
        ALL,
        "transactions",
        "Refused: transactions run without isolation.",
    )
    .runs(Session, Read, Barrier),
    cmd(
        "unwatch",
        1,
        T,
        NONE,
        "transactions",
        "Accepted: nothing is watched.",
    )
    .runs(Session, Read, Barrier),
    cmd(
        "lpush",
        -3,
        W,
        ONE,
        "list",
        "Pushes elements onto the head of a list; answers its length.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "rpush",
        -3,
        W,
        ONE,
        "list",
        "Pushes elements onto the tail of a list; answers its length.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "lpushx",
        -3,
        W,
        ONE,
        "list",
        "LPUSH, only onto a list that exists.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "rpushx",
        -3,
        W,
        ONE,
        "list",
        "RPUSH, only onto a list that exists.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "blpop",
        -3,
        &["write", "blocking"],
        (1, -2, 1),
        "list",
        "Pops the first element of the first list that has one, waiting up to a timeout.",
    )
    .runs(Blocking, Write, Barrier),
    cmd(
        "brpop",
        -3,
        &["write", "blocking"],
        (1, -2, 1),
        "list",
        "Pops the last element of the first list that has one, waiting up to a timeout.",
    )
    .runs(Blocking, Write, Barrier),
    cmd(
        "lpop",
        -2,
        &["write", "fast"],
        ONE,
        "list",
        "Removes and answers the first elements of a list.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "rpop",
        -2,
        &["write", "fast"],
        ONE,
        "list",
        "Removes and answers the last elements of a list.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "ltrim",
        4,
        &["write"],
        ONE,
        "list",
        "Keeps a range of a list.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "lset",
        4,
        &["write", "denyoom"],
        ONE,
        "list",
        "Sets an element of a list by index.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "lrem",
        4,
        &["write"],
        ONE,
        "list",
        "Removes elements equal to a value from a list.",
    )
    .runs(Lists, Write, Keyed),
    cmd(
        "linsert",
        5,
        &["write", "denyoom"],
        ONE,
        "list",
        "Inserts an element before or after another.",
    )
    .runs(Lists, Write, Keyed),
    cmd("llen", 2, R, ONE, "list", "Answers the length of a list.").runs(Lists, Read, Keyed),
    cmd(
        "lrange",
        4,
        &["readonly"],
        ONE,
        "list",
        "Answers a range of a list.",
    )
    .runs(Lists, Read, Keyed),
    cmd(
        "lindex",
        3,
        &["readonly"],
        ONE,
        "list",
        "Answers an element of a list by index.",
    )
    .runs(Lists, Read, Keyed),
];

/// The command named `name` (lowercase).
pub(crate) fn find(name: &str) -> Option<&'static Command> {
    index(name).map(|i| &COMMANDS[i])
}

/// Longest name in [`COMMANDS`] that [`index_of_word`] looks up.
const NAME_BYTES_MAX: usize = 16;

/// The position in [`COMMANDS`] of the command a client's first word
/// names, in any case, without allocating.
pub(crate) fn index_of_word(word: &[u8]) -> Option<usize> {
    let mut lower = [0u8; NAME_BYTES_MAX];
    let lower = lower.get_mut(..word.len())?;
    for (l, b) in lower.iter_mut().zip(word) {
        *l = b.to_ascii_lowercase();
    }
    index(std::str::from_utf8(lower).ok()?)
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

/// Subcommands that need more than their command, as `command|subcommand`:
/// `SCRIPT FLUSH` is not `@dangerous` in Redis, but here it drops every
/// user's cached scripts on every node.
pub(crate) const ADMIN_SUBCOMMANDS: &[(&str, &[u8])] = &[
    ("script", b"flush"),
    ("function", b"load"),
    ("function", b"delete"),
    ("function", b"flush"),
    ("function", b"restore"),
];

/// What `c` needs when its arguments (the name not included) are `rest`:
/// its [`Need`], or an administrator for one of [`ADMIN_SUBCOMMANDS`].
pub(crate) fn need(c: &Command, rest: &[Vec<u8>]) -> Need {
    let admin_sub = ADMIN_SUBCOMMANDS.iter().any(|(name, sub)| {
        *name == c.name && rest.first().is_some_and(|s| s.eq_ignore_ascii_case(sub))
    });
    if admin_sub { Need::Admin } else { c.need }
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
            assert!(c.name.len() <= NAME_BYTES_MAX, "{}", c.name);
            assert_eq!(
                index_of_word(c.name.to_ascii_uppercase().as_bytes()),
                index(c.name)
            );
        }
        assert_eq!(index_of_word(b"GeT"), index("get"));
        assert_eq!(index_of_word(b"getx"), None);
        assert_eq!(index_of_word(&[b'g'; NAME_BYTES_MAX + 1]), None);
        assert_eq!(index_of_word(&[0xC3, 0xA9]), None);
        let get = find("get").expect("get");
        assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
        let mget = find("mget").expect("mget");
        assert!(mget.arity_ok(2) && mget.arity_ok(9) && !mget.arity_ok(1));
        assert!(find("swapdb").is_some() && find("bgsave").is_none());
    }

    /// The typed columns agree with Redis' flags: `no-auth` needs nothing,
    /// `admin` and Redis' `@dangerous` commands an administrator, `write`
    /// a writer; only keyed commands join a pipeline's group, and not
    /// those that wait.
    #[test]
    fn needs_and_pipes_agree_with_redis_flags() {
        const DANGEROUS: &[&str] = &["flushall", "flushdb", "keys", "swapdb", "info", "config"];
        for c in COMMANDS {
            let has = |f: &str| c.flags.contains(&f);
            let want = if has("no-auth") {
                Need::Nothing
            } else if has("admin") || DANGEROUS.contains(&c.name) {
                Need::Admin
            } else if has("write") {
                Need::Write
            } else {
                Need::Read
            };
            assert_eq!(c.need, want, "{}", c.name);
            assert_eq!(
                c.pipe != Pipe::Barrier,
                c.keys.0 >= 1 && c.group != "transactions" && !has("blocking"),
                "{}",
                c.name
            );
            let add = ["incr", "decr", "incrby", "decrby", "hincrby"].contains(&c.name);
            assert_eq!(c.pipe == Pipe::Add, add, "{}", c.name);
        }
        let script = find("script").expect("script");
        assert_eq!(need(script, &[b"FLUSH".to_vec()]), Need::Admin);
        assert_eq!(
            need(script, &[b"load".to_vec(), b"flush".to_vec()]),
            Need::Read
        );
        assert_eq!(need(script, &[]), Need::Read);
        let get = find("get").expect("get");
        assert_eq!(need(get, &[b"flush".to_vec()]), Need::Read);
    }
}
