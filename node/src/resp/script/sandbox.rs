//! What a script's interpreter holds, and what it cannot change.
//!
//! Scripts run in Luau (the Lua 5.1 dialect made for running untrusted
//! code), with the base, `table`, `string` and `math` libraries and the
//! `redis` table, as Redis 7 sandboxes its Lua 5.1:
//!
//! - No bytecode. Luau has no `string.dump` and no `load`; `loadstring`
//!   goes too, and a script's body is compiled as source text only (see
//!   `super::vm`), so no script can reach Luau's bytecode loader, which
//!   trusts its input.
//! - Nothing that reaches outside or inside the interpreter: no `print`,
//!   `require`, `getfenv`, `setfenv`, `collectgarbage`, `gcinfo`,
//!   `newproxy`, no `os`, `io`, `debug` or coroutines.
//! - Nothing shared that a script can change: [`seal`] makes every library
//!   table, `redis`, the strings' metatable and the globals read-only
//!   (Luau's own read-only tables, which `rawset` and `setmetatable`
//!   respect too), and each run gets an environment of its own holding its
//!   `KEYS` and `ARGV`, read-only as well: a new global is refused, as
//!   Redis 7 refuses it, and so is reading one that does not exist.

use std::sync::atomic::{AtomicBool, Ordering};

use mlua::{Lua, Table, Value};

/// Fault injection: interpreters are not sealed (see [`inject_unsealed`]).
static UNSEALED: AtomicBool = AtomicBool::new(false);

/// FAULT INJECTION for testing checkers: from now on, new interpreters
/// leave their libraries, `redis` and globals writable, so one script can
/// plant code that later scripts on the same interpreter run. Only the
/// test-only `tallyd-faults` calls it.
#[cfg(feature = "fault-injection")]
pub(crate) fn inject_unsealed() {
    UNSEALED.store(true, Ordering::Relaxed);
}

/// The base library's globals a script does not get.
const REMOVED: &[&str] = &[
    "loadstring",
    "getfenv",
    "setfenv",
    "collectgarbage",
    "gcinfo",
    "newproxy",
    "print",
    "require",
    "coroutine",
    "dofile",
    "loadfile",
    "module",
];

/// Turns a global that does not exist into Redis 7's error, not `nil`.
const STRICT: &str = r#"
return { __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end }
"#;

/// Removes what scripts must not have from `lua`'s globals, and makes
/// them, every table they hold and the strings' metatable read-only.
/// Answers the metatable each run's environment gets (reads fall through
/// to the globals).
pub(crate) fn seal(lua: &Lua) -> mlua::Result<Table> {
    let globals = lua.globals();
    for name in REMOVED {
        globals.raw_set(*name, Value::Nil)?;
    }
    let strict: Table = lua.load(STRICT).set_name("=sandbox").eval()?;
    strict.set_readonly(true);
    globals.set_metatable(Some(strict))?;
    // Every library table, the strings' metatable and the globals.
    if !UNSEALED.load(Ordering::Relaxed) {
        lua.sandbox(true)?;
    }
    let env_meta = lua.create_table()?;
    env_meta.raw_set("__index", globals)?;
    env_meta.set_readonly(true);
    Ok(env_meta)
}

/// A run's environment: its `KEYS` and `ARGV`, and the globals behind
/// them, read-only.
pub(crate) fn environment(
    lua: &Lua,
    meta: &Table,
    keys: &[Vec<u8>],
    argv: &[Vec<u8>],
) -> mlua::Result<Table> {
    let strings = |words: &[Vec<u8>]| -> mlua::Result<Table> {
        let t = lua.create_table_with_capacity(words.len(), 0)?;
        for (i, w) in words.iter().enumerate() {
            t.raw_set(i + 1, lua.create_string(w)?)?;
        }
        Ok(t)
    };
    let env = lua.create_table_with_capacity(0, 2)?;
    env.raw_set("KEYS", strings(keys)?)?;
    env.raw_set("ARGV", strings(argv)?)?;
    env.set_metatable(Some(meta.clone()))?;
    env.set_readonly(true);
    Ok(env)
}
