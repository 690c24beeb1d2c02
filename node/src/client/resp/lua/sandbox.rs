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
//!   respect too): a new global is refused, as Redis 7 refuses it, and so
//!   is reading one that does not exist. A run's `KEYS` and `ARGV` are
//!   its own: each script is compiled as a function of them ([`wrap`]),
//!   not given them as globals.

use mlua::{Lua, Table, Value};

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
/// Answers the globals, which scripts are compiled with (the main thread's
/// own become a writable table of Luau's, which no script may see).
/// Unless `sealed` (FAULT INJECTION, `Fault::UnsealedScripts`): then the
/// libraries, `redis` and the globals stay writable, so one script can
/// plant code that later scripts on the same interpreter run.
pub(crate) fn seal(lua: &Lua, sealed: bool) -> mlua::Result<Table> {
    let globals = lua.globals();
    for name in REMOVED {
        globals.raw_set(*name, Value::Nil)?;
    }
    let strict: Table = lua.load(STRICT).set_name("=sandbox").eval()?;
    strict.set_readonly(true);
    globals.set_metatable(Some(strict))?;
    // Every library table, the strings' metatable and the globals.
    if sealed {
        lua.sandbox(true)?;
    }
    Ok(globals)
}

/// What a script's body is compiled as: a function of its `KEYS` and
/// `ARGV`, as locals on its first line (so its lines keep their numbers).
pub(crate) fn wrap(body: &[u8]) -> Vec<u8> {
    const HEAD: &[u8] = b"local KEYS, ARGV = ... ";
    let mut wrapped = Vec::with_capacity(HEAD.len() + body.len());
    wrapped.extend_from_slice(HEAD);
    wrapped.extend_from_slice(body);
    wrapped
}

/// A run's `KEYS` and `ARGV`, as tables of strings.
pub(crate) fn arguments(
    lua: &Lua,
    keys: &[Vec<u8>],
    argv: &[Vec<u8>],
) -> mlua::Result<(Table, Table)> {
    let strings = |words: &[Vec<u8>]| -> mlua::Result<Table> {
        let t = lua.create_table_with_capacity(words.len(), 0)?;
        for (i, w) in words.iter().enumerate() {
            t.raw_set(i + 1, lua.create_string(w)?)?;
        }
        Ok(t)
    };
    Ok((strings(keys)?, strings(argv)?))
}
