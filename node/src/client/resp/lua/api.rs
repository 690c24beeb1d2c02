//! The `redis` table scripts call: `redis.call`, `redis.pcall`,
//! `redis.error_reply`, `redis.status_reply`, `redis.sha1hex`,
//! `redis.log`, and the no-ops Redis 7 keeps for old scripts.

use mlua::{Lua, MultiValue, Value};
use tally_net::log_limit::LogLimit;

use super::super::proto::Reply;
use crate::base::commands::{self, Command};
use crate::security::auth::{Role, access};

/// `redis.log` lines: at most ten a second from all scripts of the node.
static SCRIPT_LOG: LogLimit = LogLimit::every(std::time::Duration::from_millis(100));

/// Commands a script may not run: scripts, transactions, and what only a
/// connection does.
const NOT_IN_SCRIPTS: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "script",
    "fcall",
    "fcall_ro",
    "function",
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

/// Puts the `redis` table in `lua`'s globals (before `coroutine` goes:
/// `redis.call` keeps its `yield`).
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
        lua.create_function(|_, s: mlua::String| {
            Ok(crate::cluster::scripts::sha1_hex(&s.as_bytes()))
        })?,
    )?;
    redis.raw_set(
        "log",
        lua.create_function(|_, (level, msg): (i64, mlua::String)| {
            if let Some(suppressed) = SCRIPT_LOG.admit() {
                tracing::info!(level, suppressed, message = %msg.to_string_lossy(), "script log");
            }
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

/// What a script's user may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct May {
    /// No writes (`EVAL_RO`, or a read-only user).
    pub(crate) read_only: bool,
    /// What only an administrator runs, too.
    pub(crate) admin: bool,
}

/// The command a script's `redis.call` or `redis.pcall` yielded (`args`),
/// as words to run and whether it writes, or the error reply it gets
/// instead.
pub(crate) fn command(args: &MultiValue, may: May) -> Result<(Vec<Vec<u8>>, bool), Reply> {
    let words = words(args)?;
    let name = String::from_utf8_lossy(&words[0]).to_ascii_lowercase();
    let cmd = refuse(&name, words.len(), may.read_only)?;
    // The one RESP rule (`access::authorize`), for the role the script's
    // rights amount to; its writes were refused above if it may not write.
    let role = if may.admin {
        Role::Admin
    } else {
        Role::ReadWrite
    };
    if access::authorize(Some(role), Some(cmd), &words[1..]).is_err() {
        return Err(Reply::err(
            "ERR The user executing the script can't run this command or subcommand",
        ));
    }
    Ok((words, cmd.flags.contains(&"write")))
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

/// The command a script may run, or the error it gets instead.
fn refuse(name: &str, words: usize, read_only: bool) -> Result<&'static Command, Reply> {
    let Some(cmd) = commands::find(name) else {
        return Err(Reply::err("ERR Unknown Redis command called from script"));
    };
    if NOT_IN_SCRIPTS.contains(&name) {
        return Err(Reply::err(
            "ERR This Redis command is not allowed from script",
        ));
    }
    if !cmd.arity_ok(words) {
        return Err(Reply::err(
            "ERR Wrong number of args calling Redis command from script",
        ));
    }
    if read_only && cmd.flags.contains(&"write") {
        return Err(Reply::err(
            "ERR Write commands are not allowed from read-only scripts.",
        ));
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<T: std::fmt::Debug>(r: Result<T, Reply>) -> String {
        match r {
            Err(Reply::Error(e)) => e,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn a_scripts_commands_need_what_its_user_may_do() {
        let lua = Lua::new();
        let args = |words: &[&str]| -> MultiValue {
            words
                .iter()
                .map(|w| Value::String(lua.create_string(w).unwrap()))
                .collect()
        };
        let writer = May {
            read_only: false,
            admin: false,
        };
        let admin = May {
            read_only: false,
            admin: true,
        };
        let viewer = May {
            read_only: true,
            admin: false,
        };
        assert_eq!(
            command(&args(&["INCR", "k"]), writer).map(|c| c.1),
            Ok(true)
        );
        assert_eq!(
            command(&args(&["GET", "k"]), viewer).map(|c| c.1),
            Ok(false)
        );
        assert!(text(command(&args(&["INCR", "k"]), viewer).map(|_| ())).contains("read-only"));
        for dangerous in [&["INFO"][..], &["CONFIG", "GET", "x"]] {
            assert!(
                text(command(&args(dangerous), writer).map(|_| ()))
                    .contains("can't run this command"),
                "{dangerous:?}"
            );
            assert!(command(&args(dangerous), admin).is_ok(), "{dangerous:?}");
        }
    }

    #[test]
    fn commands_a_script_may_not_run_get_redis_errors() {
        assert!(refuse("incr", 2, false).is_ok());
        assert!(refuse("lpush", 3, false).is_ok());
        assert!(text(refuse("xadd", 5, false)).contains("Unknown Redis command"));
        assert!(text(refuse("lpush", 3, true)).contains("read-only scripts"));
        assert!(text(refuse("incr", 3, false)).contains("Wrong number of args"));
        assert!(text(refuse("eval", 3, false)).contains("not allowed from script"));
        assert!(text(refuse("incr", 2, true)).contains("read-only scripts"));
        assert!(refuse("get", 2, true).is_ok());
    }
}
