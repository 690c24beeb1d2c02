//! One Luau interpreter, sandboxed (see `super::sandbox`), with the
//! `redis` table, a memory limit, and an interrupt that aborts a script
//! past its time limit or killed by `SCRIPT KILL`.
//!
//! A script runs as a coroutine (see `super::runner`): its `redis.call`
//! yields the command to [`Vm::run`], which runs it on the node ([`Host`])
//! and resumes the script with the reply, so one thread runs every script
//! in flight. Luau's `pcall` and `xpcall` let a yield through, so
//! `pcall(redis.call, ...)` works.
//!
//! Luau calls the interrupt at every function call, every loop's turn and
//! every step of its pattern matcher (`string.find`, `match`, `gmatch`,
//! `gsub`), so a backtracking pattern is stopped like a loop. Once a
//! script is past its time, every interrupt raises an error again, so a
//! script that catches errors (`pcall`) cannot go on.
//!
//! The memory limit holds while Lua code runs: it is set before each
//! resume (to what the node's budget leaves, see `super::budget`) and
//! lifted while the run makes the script's arguments and replies (of
//! bounded size), which mlua would otherwise make inside a protected call
//! each.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tally_world::Instant;

use mlua::{
    ChunkMode, Function, IntoLuaMulti, Lua, LuaOptions, MultiValue, StdLib, Table, Thread,
    ThreadStatus, Value, VmState,
};

use super::super::proto::Reply;
use super::api::{CommandError, May};
use super::budget::{self, Limit, Memory, Share};
use super::convert::{from_lua, to_lua};
use super::runs::Run;

/// Scripts an interpreter keeps compiled; past it, it forgets them all.
const COMPILED_MAX: usize = 64;
/// Interrupts between two looks at the clock and the kill flag.
const TICKS_PER_CHECK: u32 = 64;

/// A command's reply, when it comes.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What runs a script's commands (the node, at the connection's database
/// and level).
pub(crate) trait Host: Send + Sync + 'static {
    /// Runs one command (its name first).
    fn call(&self, args: Vec<Vec<u8>>) -> Pending;
}

/// What the interrupt checks while a script runs.
struct Running {
    deadline: Instant,
    limit: Duration,
    run: Arc<Run>,
    /// The memory limit of the step running now.
    memory: Limit,
}

/// The interrupt: aborts a script past its time or killed, and from then
/// on every interrupt does (`stopping`), so that `pcall` cannot catch it
/// for long.
fn check(lua: &Lua, stopping: &AtomicBool) -> mlua::Result<VmState> {
    let Some(r) = lua.app_data_ref::<Running>() else {
        return Ok(VmState::Continue);
    };
    let stop = r.run.killed() || Instant::now() > r.deadline;
    stopping.store(stop, Ordering::Relaxed);
    if r.run.killed() {
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

/// Since when a script thread has run Lua without a break, for
/// `super::runner` to see which threads a script holds.
#[derive(Debug, Default)]
pub(crate) struct Busy(AtomicU64);

impl Busy {
    /// Now, as [`Busy`] counts time (microseconds, never 0).
    pub(crate) fn now() -> u64 {
        // Process-wide on purpose: a time origin, the same for every node.
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        let micros = EPOCH.get_or_init(Instant::now).elapsed().as_micros();
        u64::try_from(micros).unwrap_or(u64::MAX - 1) + 1
    }

    /// How long Lua has run without a break, as of `now`, if it runs.
    pub(crate) fn since(&self, now: u64) -> Option<Duration> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            began => Some(Duration::from_micros(now.saturating_sub(began))),
        }
    }

    fn set(&self, running: bool) {
        let at = if running { Busy::now() } else { 0 };
        self.0.store(at, Ordering::Release);
    }
}

/// One script run's inputs.
pub(crate) struct Script<'a> {
    pub(crate) sha: &'a str,
    pub(crate) body: &'a [u8],
    pub(crate) keys: &'a [Vec<u8>],
    pub(crate) argv: &'a [Vec<u8>],
    pub(crate) may: May,
}

/// An interpreter and the scripts it compiled, by sha1.
pub(crate) struct Vm {
    lua: Lua,
    compiled: HashMap<String, Function>,
    /// The sealed globals scripts are compiled with.
    globals: Table,
    /// Its part of the node's script memory.
    share: Share,
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
    /// A sandboxed interpreter (unless not `sealed`: see `sandbox::seal`)
    /// with the `redis` table, its memory counted in its node's `memory`.
    pub(crate) fn new(generation: u64, memory: &Arc<Memory>, sealed: bool) -> mlua::Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::COROUTINE;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        super::api::install(&lua)?;
        let globals = super::sandbox::seal(&lua, sealed)?;
        let ticks = AtomicU32::new(0);
        let stopping = AtomicBool::new(false);
        lua.set_interrupt(move |lua| {
            let tick = ticks.fetch_add(1, Ordering::Relaxed);
            match tick.is_multiple_of(TICKS_PER_CHECK) || stopping.load(Ordering::Relaxed) {
                true => check(lua, &stopping),
                false => Ok(VmState::Continue),
            }
        });
        let mut share = Share::new(memory.clone());
        share.tell(lua.used_memory());
        Ok(Vm {
            lua,
            compiled: HashMap::new(),
            globals,
            share,
            generation,
        })
    }

    /// Forgets the compiled scripts (the script cache was flushed).
    pub(crate) fn forget(&mut self, generation: u64) {
        self.compiled.clear();
        self.generation = generation;
    }

    /// Runs `script` as `run`, for at most `limit`, showing in `busy`
    /// while Lua runs. `Err` when the interpreter should not be used again.
    pub(crate) async fn run(
        &mut self,
        script: Script<'_>,
        host: Arc<dyn Host>,
        limit: Duration,
        run: Arc<Run>,
        busy: &Busy,
    ) -> Result<Reply, (Reply, Spoiled)> {
        let f = match self.compile(script.sha, script.body) {
            Ok(f) => f,
            Err(e) => return Ok(Reply::err(compile_error(&e))),
        };
        self.lua.set_app_data(Running {
            deadline: Instant::now() + limit,
            limit,
            run: run.clone(),
            memory: Limit::Own(budget::VM_MEMORY_MAX),
        });
        let answer = match super::sandbox::arguments(&self.lua, script.keys, script.argv) {
            Ok(args) => self.drive(f, args, &*host, script.may, (&run, busy)).await,
            Err(e) => Err(e),
        };
        let memory = self.lua.remove_app_data::<Running>().map(|r| r.memory);
        self.share.tell(self.lua.used_memory());
        match answer {
            Ok(value) => Ok(from_lua(&value)),
            Err(e) => {
                let text = run_error(&e, memory.unwrap_or(Limit::Own(budget::VM_MEMORY_MAX)));
                let reply = Reply::err(format!("{text} script: {}", script.sha));
                match spoils(&e) {
                    true => Err((reply, Spoiled)),
                    false => Ok(reply),
                }
            }
        }
    }

    /// Runs `f` on `args` (its `KEYS` and `ARGV`) as a coroutine until it
    /// returns: each time it yields (a `redis.call`), runs the command on
    /// `host` and resumes it with the reply and whether that is an error.
    /// Answers its first value.
    async fn drive(
        &mut self,
        f: Function,
        args: (Table, Table),
        host: &dyn Host,
        may: May,
        (run, busy): (&Run, &Busy),
    ) -> mlua::Result<Value> {
        let thread = self.lua.create_thread(f)?;
        let mut values = self.resume(&thread, args, busy)?;
        while thread.status() == ThreadStatus::Resumable {
            let reply = match super::api::command(&values, may) {
                Ok((words, writes)) => {
                    if writes {
                        run.wrote();
                    }
                    host.call(words).await
                }
                Err(refused) => refused,
            };
            let failed = matches!(reply, Reply::Error(_));
            values = self.resume(&thread, (to_lua(&self.lua, &reply)?, failed), busy)?;
        }
        Ok(values.into_iter().next().unwrap_or(Value::Nil))
    }

    /// Resumes `thread` with `args` under the memory limit the node's
    /// budget leaves this interpreter, lifted again once it has yielded or
    /// ended.
    fn resume(
        &mut self,
        thread: &Thread,
        args: impl IntoLuaMulti,
        busy: &Busy,
    ) -> mlua::Result<MultiValue> {
        self.share.tell(self.lua.used_memory());
        let limit = self.share.limit();
        if let Some(mut r) = self.lua.app_data_mut::<Running>() {
            r.memory = limit;
        }
        self.lua.set_memory_limit(limit.bytes())?;
        busy.set(true);
        let out = thread.resume(args);
        busy.set(false);
        self.lua.set_memory_limit(0)?;
        out
    }

    fn compile(&mut self, sha: &str, body: &[u8]) -> mlua::Result<Function> {
        if let Some(f) = self.compiled.get(sha) {
            return Ok(f.clone());
        }
        let f = load_text(&self.lua, body, Some(&self.globals))?;
        if self.compiled.len() >= COMPILED_MAX {
            self.compiled.clear();
        }
        self.compiled.insert(sha.to_string(), f.clone());
        Ok(f)
    }
}

/// Compiles `body` as source text, never as bytecode, as a function of
/// its `KEYS` and `ARGV` whose globals are `globals`.
fn load_text(lua: &Lua, body: &[u8], globals: Option<&Table>) -> mlua::Result<Function> {
    refuse_bytecode(body)?;
    let chunk = lua
        .load(super::sandbox::wrap(body))
        .set_name("=user_script")
        .set_mode(ChunkMode::Text);
    match globals {
        Some(g) => chunk.set_environment(g.clone()).into_function(),
        None => chunk.into_function(),
    }
}

/// Refuses a precompiled chunk (Lua 5.1's, which starts `\x1bLua`, or
/// anything else that starts with a control byte, as Luau's bytecode does).
fn refuse_bytecode(body: &[u8]) -> mlua::Result<()> {
    match body.first() {
        Some(&b) if b < b'\t' || b == 0x1b => Err(mlua::Error::SyntaxError {
            message: "bytecode is not accepted, only Lua source".into(),
            incomplete_input: false,
        }),
        _ => Ok(()),
    }
}

/// Whether `body` compiles, or the error Redis gives when it does not.
pub(crate) fn check_syntax(body: &[u8]) -> Result<(), String> {
    let lua = Lua::new_with(StdLib::NONE, LuaOptions::default()).map_err(|e| e.to_string())?;
    load_text(&lua, body, None)
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
/// uncaught `redis.call` raised it. `memory` is the limit the run had.
fn run_error(e: &mlua::Error, memory: Limit) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => run_error(cause, memory),
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
        mlua::Error::MemoryError(_) => match memory {
            Limit::Own(n) => format!(
                "ERR Script used more than {} MiB of memory and was aborted",
                n >> 20
            ),
            Limit::Node(_) => format!(
                "ERR Script aborted: the node's scripts hold all of their {} MiB of memory",
                budget::NODE_MEMORY_MAX >> 20
            ),
        },
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
    use super::super::runs;
    use super::*;

    /// Answers `INCR` with 1, `SET` with OK and anything else with an error.
    struct Ones;

    impl Host for Ones {
        fn call(&self, args: Vec<Vec<u8>>) -> Pending {
            let reply = match args[0].as_slice() {
                b"INCR" => Reply::Int(1),
                b"SET" => Reply::Simple("OK"),
                _ => Reply::err("WRONGTYPE not a counter"),
            };
            Box::pin(std::future::ready(reply))
        }
    }

    /// Runs `body` on `vm` for at most `limit`: its reply, and whether it
    /// spoiled the interpreter.
    fn run_for(vm: &mut Vm, body: &[u8], limit: Duration, run: Arc<Run>) -> (Reply, bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let sha = crate::cluster::scripts::sha1_hex(body);
        let script = Script {
            sha: &sha,
            body,
            keys: &[b"k".to_vec()],
            argv: &[b"secret".to_vec()],
            may: May {
                read_only: false,
                admin: false,
            },
        };
        let busy = Busy::default();
        match rt.block_on(vm.run(script, Arc::new(Ones), limit, run, &busy)) {
            Ok(reply) => (reply, false),
            Err((reply, Spoiled)) => (reply, true),
        }
    }

    fn run(vm: &mut Vm, body: &str) -> (Reply, bool) {
        let all = runs::Runs::default();
        let run = all.start(None);
        run_for(vm, body.as_bytes(), Duration::from_secs(5), run.run.clone())
    }

    fn error(reply: &Reply) -> &str {
        match reply {
            Reply::Error(e) => e,
            _ => "",
        }
    }

    #[test]
    fn commands_yield_to_the_run_and_errors_raise_or_return() {
        let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
        let two = "return redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[1])";
        assert_eq!(run(&mut vm, two), (Reply::Int(2), false));
        let (raised, spoiled) = run(&mut vm, "return redis.call('GET', KEYS[1])");
        assert!(
            error(&raised).starts_with("WRONGTYPE not a counter script:"),
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
            "local t = {} for i = 1, 1e8 do t[i] = i end",
        ] {
            let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
            let (reply, spoiled) = run(&mut vm, body);
            assert!(
                error(&reply).contains("more than 32 MiB"),
                "{body}: {reply:?}"
            );
            assert!(spoiled, "{body}");
        }
        // Under the limit, a run goes on as before.
        let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
        let fits = "return #(redis.call('INCR', KEYS[1]) .. string.rep('x', 1e6))";
        assert_eq!(run(&mut vm, fits), (Reply::Int(1_000_001), false));
    }

    #[test]
    fn no_script_can_load_or_make_bytecode() {
        let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
        // Lua 5.1's precompiled chunk, and Luau's (a version byte first).
        for body in [&b"\x1bLuaQ\x00\x01\x04\x08"[..], b"\x05\x01\x02return"] {
            let (reply, _) = run_for(
                &mut vm,
                body,
                Duration::from_secs(5),
                runs::Runs::default().start(None).run.clone(),
            );
            assert!(
                error(&reply).contains("bytecode is not accepted"),
                "{reply:?}"
            );
            assert!(
                check_syntax(body)
                    .unwrap_err()
                    .contains("bytecode is not accepted")
            );
        }
        for name in [
            "loadstring",
            "load",
            "getfenv",
            "setfenv",
            "collectgarbage",
            "gcinfo",
            "newproxy",
            "print",
            "require",
            "coroutine",
            "debug",
            "os",
            "io",
        ] {
            let (reply, _) = run(&mut vm, &format!("return {name}"));
            assert!(
                error(&reply).contains(&format!(
                    "Script attempted to access nonexistent global variable '{name}'"
                )),
                "{name}: {reply:?}"
            );
        }
        let (reply, _) = run(&mut vm, "return string.dump");
        assert_eq!(reply, Reply::NIL);
    }

    #[test]
    fn a_script_changes_nothing_another_script_sees() {
        let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
        for body in [
            "redis.call = function() return 'planted' end",
            "redis.pcall = nil",
            "string.rep = function() return 'planted' end",
            "rawset(string, 'rep', tostring)",
            "getmetatable('').__index = {rep = function() return 'planted' end}",
            "setmetatable(_G, nil)",
            "setmetatable(string, {__index = function() return 'planted' end})",
            "_G.redis = {}",
            "rawset(_G, 'tostring', function() return 'planted' end)",
            "planted = ARGV[1]",
            "_G.KEYS = {'planted'}",
            "table.insert = nil",
            "math.floor = nil",
        ] {
            let (reply, spoiled) = run(&mut vm, body);
            assert!(
                error(&reply).contains("readonly table"),
                "{body}: {reply:?}"
            );
            assert!(!spoiled, "{body}");
        }
        // What another script sees afterwards is as it was.
        let check = "return {redis.call('INCR', KEYS[1]), string.rep('a', 2), \
                     math.floor(2.5), tostring(1), rawget(_G, 'planted') or 'none'}";
        assert_eq!(
            run(&mut vm, check).0,
            Reply::Array(vec![
                Reply::Int(1),
                Reply::bulk("aa"),
                Reply::Int(2),
                Reply::bulk("1"),
                Reply::bulk("none"),
            ])
        );
        // Locals and tables a script makes are its own.
        let own = "local t = {} t.x = 1 KEYS[2] = 'k2' return {t.x, KEYS[2]}";
        assert_eq!(
            run(&mut vm, own).0,
            Reply::Array(vec![Reply::Int(1), Reply::bulk("k2")])
        );
        assert_eq!(run(&mut vm, "return KEYS[2]").0, Reply::NIL);
    }

    #[test]
    fn loops_caught_errors_and_backtracking_patterns_stop_at_the_time_limit_and_at_script_kill() {
        let patterns = [
            "while true do pcall(function() while true do end end) end",
            "local function f() while true do pcall(f) end end f()",
            "return string.find(string.rep('a', 5e4), string.rep('a*', 12) .. 'b')",
            "return string.match(string.rep('a', 5e4), string.rep('.-', 12) .. 'b')",
            "return string.gsub(string.rep('a', 5e4), string.rep('a*', 12) .. 'b', '')",
            "for m in string.gmatch(string.rep('a', 5e4), string.rep('a*', 12) .. 'b') do end",
        ];
        for body in patterns {
            let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
            let started = Instant::now();
            let all = runs::Runs::default();
            let run = all.start(None);
            let (reply, spoiled) = run_for(
                &mut vm,
                body.as_bytes(),
                Duration::from_millis(200),
                run.run.clone(),
            );
            assert!(
                error(&reply).contains("time limit of 200 ms"),
                "{body}: {reply:?}"
            );
            assert!(spoiled);
            assert!(started.elapsed() < Duration::from_secs(3), "{body}");
        }
        // SCRIPT KILL, from another thread, stops one too.
        let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
        let runs = Arc::new(runs::Runs::default());
        let run = runs.start(Some("pattern-killer"));
        let other = runs.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            other.kill(Some("pattern-killer"), false)
        });
        let (reply, _) = run_for(
            &mut vm,
            patterns[2].as_bytes(),
            Duration::from_secs(60),
            run.run.clone(),
        );
        assert!(matches!(killer.join().unwrap(), runs::Kill::End(v) if v.len() == 1));
        assert!(error(&reply).contains("SCRIPT KILL"), "{reply:?}");
    }

    #[test]
    fn a_script_that_wrote_is_not_killed() {
        let mut vm = Vm::new(0, &Arc::default(), true).unwrap();
        let runs = Arc::new(runs::Runs::default());
        let run = runs.start(Some("writer-of-a-test"));
        let other = runs.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            other.kill(Some("writer-of-a-test"), false)
        });
        let body = "redis.call('SET', KEYS[1], 1) local t = os_clock or 0 \
                    local n = 0 for i = 1, 3e8 do n = n + 1 end return n";
        let (reply, _) = run_for(
            &mut vm,
            body.replace("os_clock or 0", "0").as_bytes(),
            Duration::from_millis(1500),
            run.run.clone(),
        );
        assert_eq!(killer.join().unwrap(), runs::Kill::Unkillable);
        // It ends at its time limit instead.
        assert!(error(&reply).contains("time limit"), "{reply:?}");
    }
}
