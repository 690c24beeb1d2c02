//! One Lua 5.1 interpreter, sandboxed as Redis sandboxes its own: the
//! base, `table`, `string` and `math` libraries, without `os`, `io`,
//! `dofile`, `loadfile` or coroutines; the `redis` table; a memory limit;
//! and a hook that aborts a script past its time limit or killed by
//! `SCRIPT KILL`.
//!
//! A script runs as a coroutine (see `super::runner`): its `redis.call`
//! yields while the command runs on the node ([`Host`]), so one thread
//! runs every script in flight. `pcall` and `xpcall` are replaced by
//! versions that let a yield through (Lua 5.1's own cannot), so
//! `pcall(redis.call, ...)` works. Once a script is past its time, the hook
//! raises an error on every line and every thousand instructions, so a
//! script that catches errors (`pcall`) cannot go on.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Value, VmState};

use super::super::proto::Reply;
use super::convert::{from_lua, to_lua};

/// Memory one interpreter may hold.
pub(crate) const MEMORY_MAX: usize = 32 << 20;

/// A command's reply, when it comes.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What runs a script's commands (the node, at the connection's database
/// and level).
pub(crate) trait Host: Send + Sync + 'static {
    /// Runs one command (its name first).
    fn call(&self, args: Vec<Vec<u8>>) -> Pending;
}

/// What the hook checks, and how the current script runs.
struct Running {
    host: Arc<dyn Host>,
    deadline: Instant,
    limit: Duration,
    /// Killed by `SCRIPT KILL` (see `super::kills`).
    killed: Box<dyn Fn() -> bool + Send>,
    read_only: bool,
}

/// A command error a script's `redis.call` raised: the script's answer if
/// the script does not catch it.
#[derive(Debug)]
struct CommandError(String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// An interpreter and the scripts it compiled, by sha1.
pub(crate) struct Vm {
    lua: Lua,
    compiled: HashMap<String, Function>,
    /// The script cache's generation the compiled scripts are of.
    pub(crate) generation: u64,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vm({} scripts)", self.compiled.len())
    }
}

/// How a run ended badly enough that the interpreter is dropped.
pub(crate) struct Spoiled;

impl Vm {
    /// A sandboxed interpreter with the `redis` table.
    pub(crate) fn new(generation: u64) -> mlua::Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        // Before `coroutine` goes: the new `pcall` and `redis.call` (async
        // functions) keep what they need of it.
        super::api::install_pcall(&lua)?;
        super::api::install(&lua)?;
        let g = lua.globals();
        for name in [
            "dofile",
            "loadfile",
            "coroutine",
            "module",
            "require",
            "newproxy",
        ] {
            g.raw_set(name, Value::Nil)?;
        }
        // Global: the coroutines a run makes (its call, `pcall`) get it too.
        lua.set_global_hook(
            HookTriggers::new().every_line().every_nth_instruction(1000),
            |lua, _| match lua.app_data_ref::<Running>() {
                Some(r) if (r.killed)() => Err(mlua::Error::runtime(
                    "ERR Script killed by user with SCRIPT KILL...",
                )),
                Some(r) if Instant::now() > r.deadline => Err(mlua::Error::runtime(format!(
                    "ERR Script ran past the time limit of {} ms and was aborted",
                    r.limit.as_millis()
                ))),
                _ => Ok(VmState::Continue),
            },
        )?;
        lua.set_memory_limit(MEMORY_MAX)?;
        Ok(Vm {
            lua,
            compiled: HashMap::new(),
            generation,
        })
    }

    /// Forgets the compiled scripts (the script cache was flushed).
    pub(crate) fn forget(&mut self, generation: u64) {
        self.compiled.clear();
        self.generation = generation;
    }

    /// Runs the script `body` (of `sha`) with `KEYS` and `ARGV`. `Err` when
    /// the interpreter should not be used again.
    #[allow(clippy::too_many_arguments, reason = "one script run's inputs")]
    pub(crate) async fn run(
        &mut self,
        sha: &str,
        body: &[u8],
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        host: Arc<dyn Host>,
        limit: Duration,
        killed: Box<dyn Fn() -> bool + Send>,
        read_only: bool,
    ) -> Result<Reply, (Reply, Spoiled)> {
        let f = match self.compile(sha, body) {
            Ok(f) => f,
            Err(e) => return Ok(Reply::err(compile_error(&e))),
        };
        let running = Running {
            host,
            deadline: Instant::now() + limit,
            limit,
            killed,
            read_only,
        };
        self.lua.set_app_data(running);
        let answer = match self.set_args(keys, argv) {
            Ok(()) => f.call_async::<MultiValue>(()).await,
            Err(e) => Err(e),
        };
        self.lua.remove_app_data::<Running>();
        match answer {
            Ok(values) => Ok(from_lua(values.front().unwrap_or(&Value::Nil))),
            Err(e) => {
                let reply = Reply::err(format!("{} script: {sha}", run_error(&e)));
                match spoils(&e) {
                    true => Err((reply, Spoiled)),
                    false => Ok(reply),
                }
            }
        }
    }

    fn compile(&mut self, sha: &str, body: &[u8]) -> mlua::Result<Function> {
        if let Some(f) = self.compiled.get(sha) {
            return Ok(f.clone());
        }
        let f = self
            .lua
            .load(body)
            .set_name("=user_script")
            .into_function()?;
        self.compiled.insert(sha.to_string(), f.clone());
        Ok(f)
    }

    fn set_args(&self, keys: &[Vec<u8>], argv: &[Vec<u8>]) -> mlua::Result<()> {
        let strings = |words: &[Vec<u8>]| -> mlua::Result<mlua::Table> {
            let t = self.lua.create_table_with_capacity(words.len(), 0)?;
            for (i, w) in words.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(w)?)?;
            }
            Ok(t)
        };
        let g = self.lua.globals();
        g.raw_set("KEYS", strings(keys)?)?;
        g.raw_set("ARGV", strings(argv)?)
    }
}

/// Runs a script's command through the current run's host: its reply as
/// Lua sees it, or the error `redis.call` raises (`raise`).
pub(crate) async fn command(lua: Lua, args: MultiValue, raise: bool) -> mlua::Result<Value> {
    let words = super::api::words(args)?;
    let call = {
        let Some(r) = lua.app_data_ref::<Running>() else {
            return Err(mlua::Error::runtime("ERR redis.call outside of a script"));
        };
        let name = String::from_utf8_lossy(&words[0]).to_ascii_lowercase();
        match super::api::refuse(&name, words.len(), r.read_only) {
            Some(refused) => Err(refused),
            None => Ok(r.host.call(words)),
        }
    };
    let reply = match call {
        Ok(pending) => pending.await,
        Err(refused) => refused,
    };
    match reply {
        Reply::Error(e) if raise => Err(mlua::Error::external(CommandError(e))),
        other => to_lua(&lua, &other),
    }
}

/// Whether `body` compiles, or the error Redis gives when it does not.
pub(crate) fn check_syntax(body: &[u8]) -> Result<(), String> {
    let lua = Lua::new_with(StdLib::NONE, LuaOptions::default()).map_err(|e| e.to_string())?;
    lua.set_memory_limit(MEMORY_MAX)
        .map_err(|e| e.to_string())?;
    lua.load(body)
        .set_name("=user_script")
        .into_function()
        .map(|_| ())
        .map_err(|e| compile_error(&e))
}

/// A compile error as Redis words it.
fn compile_error(e: &mlua::Error) -> String {
    let message = match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    format!("ERR Error compiling script (new function): {message}")
}

/// A run's error as the client is told it: a command's own error when an
/// uncaught `redis.call` raised it.
fn run_error(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => run_error(cause),
        mlua::Error::ExternalError(x) => match x.downcast_ref::<CommandError>() {
            Some(CommandError(msg)) => msg.clone(),
            None => format!("ERR {x}"),
        },
        mlua::Error::RuntimeError(msg) if msg.contains("attempt to yield across") => {
            "ERR redis.call waited for its command inside a metamethod or a C \
             function's callback (table.sort, string.gsub), where a Tally script \
             cannot wait; the command may have run"
                .to_string()
        }
        mlua::Error::RuntimeError(msg) => {
            // The message, without the traceback Lua appends.
            let msg = msg.split("\nstack traceback:").next().unwrap_or_default();
            match msg.starts_with("ERR ") {
                true => msg.to_string(),
                false => format!("ERR {msg}"),
            }
        }
        mlua::Error::MemoryError(_) => format!(
            "ERR Script used more than {} MiB of memory and was aborted",
            MEMORY_MAX >> 20
        ),
        other => format!("ERR {other}"),
    }
}

/// Whether an error leaves the interpreter unfit to run again (out of
/// memory, or a limit hit part way through a library call).
fn spoils(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::CallbackError { cause, .. } => spoils(cause),
        mlua::Error::MemoryError(_) => true,
        mlua::Error::RuntimeError(msg) => msg.contains("time limit") || msg.contains("SCRIPT KILL"),
        _ => false,
    }
}
