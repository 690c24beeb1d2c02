//! The `redis` table scripts call: `redis.call`, `redis.pcall`,
//! `redis.error_reply`, `redis.status_reply`, `redis.sha1hex`,
//! `redis.log`, and the no-ops Redis 7 keeps for old scripts.

use mlua::{Lua, MultiValue, Value};

use super::super::commands;
use super::super::proto::Reply;

/// Commands a script may not run: scripts, transactions, and what only a
/// connection does.
const NOT_IN_SCRIPTS: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "script",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "select",
    "hello",
    "auth",
    "client",
    "quit",
    "readonly",
    "readwrite",
    "swapdb",
    "flushdb",
    "flushall",
    "scan",
    "keys",
    "dbsize",
    "randomkey",
];

/// `redis.call` and `redis.pcall`: each yields its arguments to the run
/// (see `super::vm`), which resumes it with the command's reply as Lua
/// sees it and whether that is an error; `redis.call` raises an error
/// reply ([`CommandError`], through `raise`), `redis.pcall` answers it as
/// the table `{err = ...}`.
///
/// Each yield has a line of its own after it: the line hook turns the
/// memory limit back on there, before the script goes on (see `super::vm`).
const CALLS: &str = r#"
local yield, raise = ...
function redis.call(...)
    local reply, failed = yield(...)
    if failed then return raise(reply) end
    return reply
end
function redis.pcall(...)
    local reply = yield(...)
    return reply
end
"#;

/// A command error a script's `redis.call` raised: the script's answer if
/// the script does not catch it.
#[derive(Debug)]
pub(crate) struct CommandError(pub(crate) String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// Puts the `redis` table in `lua`'s globals (before `coroutine` goes).
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let redis = lua.create_table()?;
    lua.globals().raw_set("redis", &redis)?;
    let coroutine: mlua::Table = lua.globals().raw_get("coroutine")?;
    let raise = lua.create_function(|_, reply: mlua::Table| -> mlua::Result<()> {
        let message: mlua::String = reply.raw_get("err")?;
        Err(mlua::Error::external(CommandError(
            message.to_string_lossy(),
        )))
    })?;
    lua.load(CALLS)
        .set_name("=redis")
        .call::<()>((coroutine.raw_get::<mlua::Function>("yield")?, raise))?;
    let reply = |key: &'static str| {
        lua.create_function(move |lua, msg: mlua::String| {
            let t = lua.create_table()?;
            t.raw_set(key, msg)?;
            Ok(t)
        })
    };
    redis.raw_set("error_reply", reply("err")?)?;
    redis.raw_set("status_reply", reply("ok")?)?;
    redis.raw_set(
        "sha1hex",
        lua.create_function(|_, s: mlua::String| Ok(crate::scripts::sha1_hex(&s.as_bytes())))?,
    )?;
    redis.raw_set(
        "log",
        lua.create_function(|_, (level, msg): (i64, mlua::String)| {
            tracing::info!(level, message = %msg.to_string_lossy(), "script log");
            Ok(())
        })?,
    )?;
    for (i, name) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"]
        .iter()
        .enumerate()
    {
        redis.raw_set(*name, i)?;
    }
    let yes = lua.create_function(|_, _: MultiValue| Ok(true))?;
    for name in [
        "replicate_commands",
        "set_repl",
        "setresp",
        "breakpoint",
        "debug",
    ] {
        redis.raw_set(name, yes.clone())?;
    }
    for (i, name) in [
        "REPL_NONE",
        "REPL_AOF",
        "REPL_SLAVE",
        "REPL_REPLICA",
        "REPL_ALL",
    ]
    .iter()
    .enumerate()
    {
        redis.raw_set(*name, i)?;
    }
    Ok(())
}

/// `pcall` and `xpcall` that let a yield through: each runs its function
/// as a coroutine and passes on what it yields (a `redis.call` waiting for
/// its command), as Kepler's coxpcall does. Lua 5.1's own raise "attempt
/// to yield across metamethod/C-call boundary" instead.
const PCALL: &str = r#"
local create, resume, yield, status =
    coroutine.create, coroutine.resume, coroutine.yield, coroutine.status
local pcall_, xpcall_ = pcall, xpcall
local function finish(co, handler, ok, ...)
    if not ok then
        if handler then return false, handler(...) end
        return false, ...
    end
    if status(co) == "suspended" then
        return finish(co, handler, resume(co, yield(...)))
    end
    return true, ...
end
-- A coroutine of `f`, if `f` is a Lua function (only those can be one:
-- C functions get the old pcall, and cannot yield anyway).
local function coroutine_of(f)
    local ok, co = pcall_(create, f)
    if ok then return co end
end
function pcall(f, ...)
    local co = coroutine_of(f)
    if not co then return pcall_(f, ...) end
    return finish(co, nil, resume(co, ...))
end
function xpcall(f, handler)
    local co = coroutine_of(f)
    if not co then return xpcall_(f, handler) end
    return finish(co, handler, resume(co))
end
"#;

/// Replaces `pcall` and `xpcall` (see [`PCALL`]).
pub(crate) fn install_pcall(lua: &Lua) -> mlua::Result<()> {
    lua.load(PCALL).set_name("=pcall").exec()
}

/// The command a script's `redis.call` or `redis.pcall` yielded (`args`),
/// as words to run, or the error reply it gets instead.
pub(crate) fn command(args: &MultiValue, read_only: bool) -> Result<Vec<Vec<u8>>, Reply> {
    let words = words(args)?;
    let name = String::from_utf8_lossy(&words[0]).to_ascii_lowercase();
    match refuse(&name, words.len(), read_only) {
        Some(refused) => Err(refused),
        None => Ok(words),
    }
}

/// A `redis.call`'s arguments as a command's words: strings, and numbers
/// as Lua writes them.
fn words(args: &MultiValue) -> Result<Vec<Vec<u8>>, Reply> {
    if args.is_empty() {
        return Err(Reply::err(
            "ERR Please specify at least one argument for this redis lib call",
        ));
    }
    let bad = || Reply::err("ERR Lua redis lib command arguments must be strings or integers");
    args.iter()
        .map(|a| match a {
            Value::String(s) => Ok(s.as_bytes().to_vec()),
            Value::Integer(_) | Value::Number(_) => {
                a.to_string().map(String::into_bytes).map_err(|_| bad())
            }
            _ => Err(bad()),
        })
        .collect()
}

/// The error a command gets instead of running in a script, if it does.
fn refuse(name: &str, words: usize, read_only: bool) -> Option<Reply> {
    let Some(cmd) = commands::find(name) else {
        return Some(Reply::err("ERR Unknown Redis command called from script"));
    };
    if NOT_IN_SCRIPTS.contains(&name) {
        return Some(Reply::err(
            "ERR This Redis command is not allowed from script",
        ));
    }
    if !cmd.arity_ok(words) {
        return Some(Reply::err(
            "ERR Wrong number of args calling Redis command from script",
        ));
    }
    if read_only && cmd.flags.contains(&"write") {
        return Some(Reply::err(
            "ERR Write commands are not allowed from read-only scripts.",
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: Option<Reply>) -> String {
        match r {
            Some(Reply::Error(e)) => e,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn commands_a_script_may_not_run_get_redis_errors() {
        assert_eq!(refuse("incr", 2, false), None);
        assert_eq!(refuse("lpush", 3, false), None);
        assert!(text(refuse("zadd", 4, false)).contains("Unknown Redis command"));
        assert!(text(refuse("lpush", 3, true)).contains("read-only scripts"));
        assert!(text(refuse("incr", 3, false)).contains("Wrong number of args"));
        assert!(text(refuse("eval", 3, false)).contains("not allowed from script"));
        assert!(text(refuse("incr", 2, true)).contains("read-only scripts"));
        assert_eq!(refuse("get", 2, true), None);
    }
}
