//! Redis 7 function libraries: what a library's code declares, and the
//! script a call of one of its functions runs.
//!
//! A library is Lua source whose first line names it (`#!lua name=mylib`)
//! and whose body registers functions (`redis.register_function('f', fn)`
//! or `redis.register_function{function_name='f', callback=fn,
//! flags={'no-writes'}}`). [`declare`] runs the body once in an
//! interpreter of its own, bounded in time and memory, with only
//! `redis.register_function` and `redis.log` to call, and answers what it
//! registered, with Redis' errors. [`call_script`] is the script an
//! `FCALL` runs: the library's body with `redis.register_function`
//! recording the callbacks, then the one named, called with `KEYS` and
//! `ARGV` (so a function runs where and as every script runs, and a
//! function of one key runs as one agreed change of it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tally_world::Instant;

use mlua::{ChunkMode, Lua, LuaOptions, StdLib, Table, Value, VmState};
use parking_lot::Mutex;

/// How long a library's body may run when it is loaded.
const LOAD_TIME_MAX: Duration = Duration::from_millis(500);
/// Memory a library's body may take when it is loaded.
const LOAD_MEMORY_MAX: usize = 16 << 20;

/// A function a library registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Declared {
    /// Its name.
    pub(crate) name: String,
    /// Its flags (`no-writes`, `allow-oom`, ...), as given.
    pub(crate) flags: Vec<String>,
    /// Its description, if it has one.
    pub(crate) description: Option<String>,
}

/// A library's name and its body (the code after the first line, which
/// is kept as an empty line so that line numbers stay).
pub(crate) fn header(code: &[u8]) -> Result<(String, Vec<u8>), String> {
    let text = std::str::from_utf8(code).map_err(|_| "ERR Missing library metadata")?;
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let Some(shebang) = first.strip_prefix("#!") else {
        return Err("ERR Missing library metadata".into());
    };
    let mut words = shebang.split_whitespace();
    let engine = words.next().unwrap_or_default();
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    let mut name = None;
    for w in words {
        match w.split_once('=') {
            Some(("name", n)) => name = Some(n.to_string()),
            _ => return Err(format!("ERR Invalid metadata value given: {w}")),
        }
    }
    let name = name.ok_or("ERR Library name was not given")?;
    if !valid_name(&name) {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    let mut body = b"\n".to_vec();
    body.extend_from_slice(rest.as_bytes());
    Ok((name, body))
}

/// Whether `name` may name a library or a function.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The `redis` table a library's body sees when it is loaded: it may
/// register functions and log, nothing else.
const LOADING: &str = r#"
local record = ...
local log = function() end
return {
    register_function = record,
    log = log,
    LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
    REDIS_VERSION = "7.4.0", REDIS_VERSION_NUM = 0x070400,
}
"#;

/// Runs `body` (a library's, after [`header`]) and answers the functions
/// it registers, in order, or Redis' error.
pub(crate) fn declare(body: &[u8]) -> Result<Vec<Declared>, String> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )
    .map_err(|e| format!("ERR {e}"))?;
    lua.set_memory_limit(LOAD_MEMORY_MAX)
        .map_err(|e| format!("ERR {e}"))?;
    let deadline = Instant::now() + LOAD_TIME_MAX;
    let ticks = AtomicU32::new(0);
    lua.set_interrupt(move |_| {
        let late =
            ticks.fetch_add(1, Ordering::Relaxed).is_multiple_of(64) && Instant::now() > deadline;
        match late {
            true => Err(mlua::Error::runtime("FUNCTION LOAD timeout")),
            false => Ok(VmState::Continue),
        }
    });
    let declared: Arc<Mutex<Result<Vec<Declared>, String>>> = Arc::new(Mutex::new(Ok(Vec::new())));
    let into = declared.clone();
    let record = lua
        .create_function(move |_, args: mlua::MultiValue| {
            let mut d = into.lock();
            if let Ok(list) = d.as_mut()
                && let Err(e) = register(list, &args)
            {
                *d = Err(e);
            }
            Ok(())
        })
        .map_err(|e| format!("ERR {e}"))?;
    let chunk = lua
        .load(body)
        .set_name("=user_function")
        .set_mode(ChunkMode::Text)
        .into_function()
        .map_err(|e| format!("ERR Error compiling function: {}", first_line(&e)))?;
    let run = || -> mlua::Result<()> {
        let redis: Table = lua.load(LOADING).set_name("=loading").call(record)?;
        lua.globals().raw_set("redis", redis)?;
        chunk.call(())
    };
    if let Err(e) = run() {
        return Err(format!(
            "ERR Error registering functions: {}",
            first_line(&e)
        ));
    }
    let declared = std::mem::replace(&mut *declared.lock(), Ok(Vec::new()))?;
    if declared.is_empty() {
        return Err("ERR No functions registered".into());
    }
    Ok(declared)
}

fn first_line(e: &mlua::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// One `redis.register_function` call, checked as Redis checks it.
fn register(list: &mut Vec<Declared>, args: &mlua::MultiValue) -> Result<(), String> {
    let args: Vec<&Value> = args.iter().collect();
    let d = match args.as_slice() {
        [Value::String(name), Value::Function(_)] => Declared {
            name: name.to_string_lossy(),
            flags: Vec::new(),
            description: None,
        },
        [Value::Table(t)] => named(t)?,
        _ => return Err("ERR wrong number of arguments to redis.register_function".into()),
    };
    if !valid_name(&d.name) {
        return Err("ERR Function names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    if list.iter().any(|f| f.name == d.name) {
        return Err("ERR Function already exists in the library".into());
    }
    list.push(d);
    Ok(())
}

/// `register_function{function_name=..., callback=..., flags=..., description=...}`.
fn named(t: &Table) -> Result<Declared, String> {
    let get = |k: &str| t.raw_get::<Value>(k).unwrap_or(Value::Nil);
    let Value::String(name) = get("function_name") else {
        return Err(
            "ERR function_name argument given to redis.register_function must be a string".into(),
        );
    };
    let Value::Function(_) = get("callback") else {
        return Err(
            "ERR callback argument given to redis.register_function must be a function".into(),
        );
    };
    let flags = match get("flags") {
        Value::Nil => Vec::new(),
        Value::Table(f) => f
            .sequence_values::<mlua::String>()
            .map(|s| s.map(|s| s.to_string_lossy()))
            .collect::<mlua::Result<Vec<_>>>()
            .map_err(|_| "ERR flags argument to redis.register_function must be a table representing function flags")?,
        _ => return Err("ERR flags argument to redis.register_function must be a table representing function flags".into()),
    };
    let description = match get("description") {
        Value::String(s) => Some(s.to_string_lossy()),
        _ => None,
    };
    Ok(Declared {
        name: name.to_string_lossy(),
        flags,
        description,
    })
}

/// The script an `FCALL` of `function` in the library of `body` runs:
/// the body with `redis.register_function` recording callbacks, then the
/// callback called with `KEYS` and `ARGV`.
pub(crate) fn call_script(body: &[u8], function: &str) -> Vec<u8> {
    let mut script = Vec::with_capacity(body.len() + 512);
    script.extend_from_slice(
        b"local __fns = {} \
          local redis = setmetatable({register_function = function(a, b) \
          if type(a) == 'table' then __fns[a.function_name] = a.callback else __fns[a] = b end \
          end}, {__index = redis}) ",
    );
    // The body's first line is empty (see `header`): it stays line 1.
    script.extend_from_slice(body);
    script.extend_from_slice(format!("\nreturn __fns[\"{function}\"](KEYS, ARGV)\n").as_bytes());
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: &str = "#!lua name=mylib\n\
        local function hello(keys, args) return 'hi ' .. args[1] end\n\
        redis.register_function('hello', hello)\n\
        redis.register_function{function_name='get', callback=function(keys) return redis.call('GET', keys[1]) end, flags={'no-writes'}}\n";

    #[test]
    fn a_library_names_itself_and_declares_its_functions() {
        let (name, body) = header(LIB.as_bytes()).unwrap();
        assert_eq!(name, "mylib");
        let declared = declare(&body).unwrap();
        let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["hello", "get"]);
        assert_eq!(declared[1].flags, ["no-writes"]);
    }

    #[test]
    fn bad_libraries_get_redis_errors() {
        let err = |code: &str| match header(code.as_bytes()).and_then(|(_, b)| declare(&b)) {
            Err(e) => e,
            Ok(d) => panic!("{code}: {d:?}"),
        };
        assert_eq!(err("return 1"), "ERR Missing library metadata");
        assert_eq!(err("#!js name=x\n"), "ERR Engine 'js' not found");
        assert!(err("#!lua name=a-b\n").starts_with("ERR Library names can only"));
        assert_eq!(
            err("#!lua name=x\nlocal a = 1"),
            "ERR No functions registered"
        );
        assert!(err("#!lua name=x\nredis.register_function('a', function() end) redis.register_function('a', function() end)").contains("already exists in the library"));
        assert!(
            err("#!lua name=x\nredis.call('GET', 'k')")
                .starts_with("ERR Error registering functions")
        );
        assert!(err("#!lua name=x\nwhile true do end").contains("timeout"));
        assert!(
            err("#!lua name=x\nreturn 'a' 'b' error").starts_with("ERR Error compiling function")
        );
        assert!(
            err("#!lua name=x\nredis.register_function('a b', function() end)")
                .starts_with("ERR Function names")
        );
    }

    #[test]
    fn a_call_runs_the_callback_with_keys_and_argv() {
        let (_, body) = header(LIB.as_bytes()).unwrap();
        let script = String::from_utf8(call_script(&body, "hello")).unwrap();
        assert!(script.ends_with("return __fns[\"hello\"](KEYS, ARGV)\n"));
        // The library's first line stays the script's first line.
        for line in 1..LIB.lines().count() {
            assert_eq!(
                script.lines().nth(line),
                LIB.lines().nth(line),
                "line {line}"
            );
        }
    }
}
