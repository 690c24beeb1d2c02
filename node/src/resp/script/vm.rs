//! One Lua 5.1 interpreter, sandboxed as Redis sandboxes its own: the
//! base, `table`, `string` and `math` libraries, without `os`, `io`,
//! `dofile`, `loadfile` or coroutines; the `redis` table; a memory limit;
//! and a hook that aborts a script past its time limit or killed by
//! `SCRIPT KILL`.
//!
//! A script runs as a coroutine (see `super::runner`): its `redis.call`
//! yields the command to [`Vm::run`], which runs it on the node ([`Host`])
//! and resumes the script with the reply, so one thread runs every script
//! in flight. `pcall` and `xpcall` are replaced by versions that let a
//! yield through (Lua 5.1's own cannot), so `pcall(redis.call, ...)`
//! works. Once a script is past its time, the hook raises an error on
//! every line and every thousand instructions, so a script that catches
//! errors (`pcall`) cannot go on.
//!
//! The memory limit holds while Lua code runs: the hook turns it on at
//! the script's first line and at the line after each yield, and the run
//! turns it off while it makes the script's arguments and replies (of
//! bounded size). With a limit on, mlua makes each value inside a
//! protected call of its own, which cost a short script a fifth of its run.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mlua::{
    Function, HookTriggers, IntoLuaMulti, Lua, LuaOptions, MultiValue, StdLib, Thread,
    ThreadStatus, Value, VmState,
};

use super::super::proto::Reply;
use super::api::CommandError;
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

/// What the hook checks while a script runs.
struct Running {
    deadline: Instant,
    limit: Duration,
    /// Killed by `SCRIPT KILL` (see `super::kills`).
    killed: Box<dyn Fn() -> bool + Send>,
    /// Whether the memory limit is on (the hook turns it on).
    limited: AtomicBool,
}

/// The hook: turns the memory limit on, and aborts a script past its time
/// or killed.
fn hook(lua: &Lua) -> mlua::Result<VmState> {
    let Some(r) = lua.app_data_ref::<Running>() else {
        return Ok(VmState::Continue);
    };
    if !r.limited.swap(true, Ordering::Relaxed) {
        lua.set_memory_limit(MEMORY_MAX)?;
    }
    if (r.killed)() {
        return Err(mlua::Error::runtime(
            "ERR Script killed by user with SCRIPT KILL...",
        ));
    }
    if Instant::now() > r.deadline {
        return Err(mlua::Error::runtime(format!(
            "ERR Script ran past the time limit of {} ms and was aborted",
            r.limit.as_millis()
        )));
    }
    Ok(VmState::Continue)
}

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
        // Before `coroutine` goes: the new `pcall` and `redis.call` keep
        // what they need of it.
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
        // Global: the coroutines a run makes (its own, `pcall`'s) get it too.
        lua.set_global_hook(
            HookTriggers::new().every_line().every_nth_instruction(1000),
            |lua, _| hook(lua),
        )?;
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
        self.lua.set_app_data(Running {
            deadline: Instant::now() + limit,
            limit,
            killed,
            limited: AtomicBool::new(false),
        });
        let answer = match self.set_args(keys, argv) {
            Ok(()) => self.drive(f, &*host, read_only).await,
            Err(e) => Err(e),
        };
        self.lua.remove_app_data::<Running>();
        match answer {
            Ok(value) => Ok(from_lua(&value)),
            Err(e) => {
                let reply = Reply::err(format!("{} script: {sha}", run_error(&e)));
                match spoils(&e) {
                    true => Err((reply, Spoiled)),
                    false => Ok(reply),
                }
            }
        }
    }

    /// Runs `f` as a coroutine until it returns: each time it yields (a
    /// `redis.call`), runs the command on `host` and resumes it with the
    /// reply and whether that is an error. Answers its first value.
    async fn drive(&self, f: Function, host: &dyn Host, read_only: bool) -> mlua::Result<Value> {
        let run = self.lua.create_thread(f)?;
        let mut values = self.resume(&run, ())?;
        while run.status() == ThreadStatus::Resumable {
            let reply = match super::api::command(&values, read_only) {
                Ok(words) => host.call(words).await,
                Err(refused) => refused,
            };
            let failed = matches!(reply, Reply::Error(_));
            values = self.resume(&run, (to_lua(&self.lua, &reply)?, failed))?;
        }
        Ok(values.into_iter().next().unwrap_or(Value::Nil))
    }

    /// Resumes `run` with `args`, its memory limit on while it runs (the
    /// hook turns it on) and off again once it has yielded or ended.
    fn resume(&self, run: &Thread, args: impl IntoLuaMulti) -> mlua::Result<MultiValue> {
        let out = run.resume(args);
        if let Some(r) = self.lua.app_data_ref::<Running>()
            && r.limited.swap(false, Ordering::Relaxed)
        {
            self.lua.set_memory_limit(0)?;
        }
        out
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// Answers `INCR` with 1 and anything else with an error.
    struct Ones;

    impl Host for Ones {
        fn call(&self, args: Vec<Vec<u8>>) -> Pending {
            let reply = match args[0].as_slice() {
                b"INCR" => Reply::Int(1),
                _ => Reply::err("WRONGTYPE not a counter"),
            };
            Box::pin(std::future::ready(reply))
        }
    }

    /// Runs `body` on `vm`: its reply, and whether it spoiled the interpreter.
    fn run(vm: &mut Vm, body: &str) -> (Reply, bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let sha = crate::scripts::sha1_hex(body.as_bytes());
        let ran = rt.block_on(vm.run(
            &sha,
            body.as_bytes(),
            &[b"k".to_vec()],
            &[],
            Arc::new(Ones),
            Duration::from_secs(5),
            Box::new(|| false),
            false,
        ));
        match ran {
            Ok(reply) => (reply, false),
            Err((reply, Spoiled)) => (reply, true),
        }
    }

    #[test]
    fn commands_yield_to_the_run_and_errors_raise_or_return() {
        let mut vm = Vm::new(0).unwrap();
        let two = "return redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[1])";
        assert_eq!(run(&mut vm, two), (Reply::Int(2), false));
        let (raised, spoiled) = run(&mut vm, "return redis.call('GET', KEYS[1])");
        assert!(
            matches!(&raised, Reply::Error(e) if e.starts_with("WRONGTYPE not a counter script:")),
            "{raised:?}"
        );
        assert!(!spoiled);
        let caught = "return redis.pcall('GET', KEYS[1])['err']";
        assert_eq!(
            run(&mut vm, caught),
            (Reply::bulk("WRONGTYPE not a counter"), false)
        );
        let wrapped = "local ok, v = pcall(redis.call, 'INCR', KEYS[1]) return {tostring(ok), v}";
        assert_eq!(
            run(&mut vm, wrapped).0,
            Reply::Array(vec![Reply::bulk("true"), Reply::Int(1)])
        );
    }

    #[test]
    fn the_memory_limit_holds_from_the_first_line_and_after_every_command() {
        for body in [
            "return #string.rep('x', 1e8)",
            "local n = redis.call('INCR', KEYS[1]) .. string.rep('x', 1e8) return #n",
            "local ok, n = pcall(redis.call, 'INCR', KEYS[1]) return #(n .. string.rep('x', 1e8))",
        ] {
            let mut vm = Vm::new(0).unwrap();
            let (reply, spoiled) = run(&mut vm, body);
            assert!(
                matches!(&reply, Reply::Error(e) if e.contains("more than 32 MiB")),
                "{body}: {reply:?}"
            );
            assert!(spoiled, "{body}");
        }
        // Under the limit, a run goes on as before.
        let mut vm = Vm::new(0).unwrap();
        let fits = "return #(redis.call('INCR', KEYS[1]) .. string.rep('x', 1e6))";
        assert_eq!(run(&mut vm, fits), (Reply::Int(1_000_001), false));
    }
}
