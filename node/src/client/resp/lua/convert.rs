//! Redis' conversions between command replies and Lua values, both ways
//! (as `script_lua.c` makes them for RESP2 scripts).
//!
//! | reply | Lua | and back |
//! |---|---|---|
//! | integer | number | a number is truncated to an integer |
//! | bulk string | string | string |
//! | nil | `false` | `nil` and `false` are nil, `true` is 1 |
//! | array (and a RESP3 set or flattened map) | table | a table up to its first nil |
//! | status | `{ok = ...}` | a table with `ok` |
//! | error | `{err = ...}` (`redis.pcall`) | a table with `err` |
//! | double, verbatim | string | |

use std::collections::HashSet;

use mlua::{Lua, Table, Value};

use super::super::proto::Reply;

/// How deep a table may nest in a script's answer.
const DEPTH_MAX: usize = 64;
/// Most values a script's answer may hold (each table and each element).
pub(crate) const REPLY_VALUES_MAX: usize = 1 << 20;
/// Most bytes of strings a script's answer may hold.
pub(crate) const REPLY_BYTES_MAX: usize = 64 << 20;

/// A command's reply as a script sees it.
pub(crate) fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    let table = |key: &str, s: &str| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(key, s)?;
        Ok(Value::Table(t))
    };
    Ok(match reply {
        Reply::Int(n) => Value::Integer(*n),
        Reply::Bulk(Some(b)) | Reply::Verbatim(_, b) => Value::String(lua.create_string(b)?),
        Reply::Bulk(None) => Value::Boolean(false),
        Reply::Simple(s) => table("ok", s)?,
        Reply::Status(s) => table("ok", s)?,
        Reply::Error(e) => table("err", e)?,
        Reply::Array(items) | Reply::Set(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) | Reply::Pairs(pairs) => {
            let t = lua.create_table()?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, to_lua(lua, k)?)?;
                t.raw_set(2 * i + 2, to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
        Reply::Double(d) => Value::String(lua.create_string(d.to_string())?),
        Reply::Bool(b) => Value::Integer(i64::from(*b)),
    })
}

/// Why a script's answer cannot be a reply.
#[derive(Debug, PartialEq, Eq)]
enum TooBig {
    Deep,
    Twice,
    Values,
    Bytes,
}

/// What a script's answer may still take, and the tables it took.
struct Budget {
    values: usize,
    bytes: usize,
    seen: HashSet<*const std::ffi::c_void>,
}

impl Budget {
    fn take(&mut self, bytes: usize) -> Result<(), TooBig> {
        self.values = self.values.checked_sub(1).ok_or(TooBig::Values)?;
        self.bytes = self.bytes.checked_sub(bytes).ok_or(TooBig::Bytes)?;
        Ok(())
    }
}

/// A script's answer as a reply: within [`REPLY_VALUES_MAX`] values and
/// [`REPLY_BYTES_MAX`] bytes, each table once (a table held twice, or
/// holding itself, would be made again each time), or else an error.
pub(crate) fn from_lua(v: &Value) -> Reply {
    let mut budget = Budget {
        values: REPLY_VALUES_MAX,
        bytes: REPLY_BYTES_MAX,
        seen: HashSet::new(),
    };
    match from_lua_at(v, 0, &mut budget) {
        Ok(reply) => reply,
        Err(TooBig::Deep) => Reply::err("ERR reached lua stack limit"),
        Err(TooBig::Twice) => {
            Reply::err("ERR the script's answer holds a table twice, or a table that holds itself")
        }
        Err(TooBig::Values) => Reply::err(format!(
            "ERR the script's answer holds more than {REPLY_VALUES_MAX} values"
        )),
        Err(TooBig::Bytes) => Reply::err(format!(
            "ERR the script's answer holds more than {} MiB",
            REPLY_BYTES_MAX >> 20
        )),
    }
}

fn from_lua_at(v: &Value, depth: usize, budget: &mut Budget) -> Result<Reply, TooBig> {
    let bytes = match v {
        Value::String(s) => s.as_bytes().len(),
        _ => 0,
    };
    budget.take(bytes)?;
    Ok(match v {
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        // As Redis casts: toward zero (and saturating, where C is undefined).
        Value::Number(n) => Reply::Int(*n as i64),
        Value::String(s) => Reply::bulk(s.as_bytes().to_vec()),
        Value::Table(_) if depth >= DEPTH_MAX => return Err(TooBig::Deep),
        Value::Table(t) => {
            if !budget.seen.insert(t.to_pointer()) {
                return Err(TooBig::Twice);
            }
            from_table(t, depth, budget)?
        }
        _ => Reply::NIL,
    })
}

fn from_table(t: &Table, depth: usize, budget: &mut Budget) -> Result<Reply, TooBig> {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Ok(Reply::err(one_line(&e.to_string_lossy())));
    }
    if let Ok(Value::String(ok)) = t.raw_get::<Value>("ok") {
        return Ok(Reply::Status(one_line(&ok.to_string_lossy())));
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(from_lua_at(&v, depth + 1, budget)?),
        }
    }
    Ok(Reply::Array(items))
}

/// A status or error line: no CR or LF may break the protocol.
fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn eval(lua: &Lua, code: &str) -> Reply {
        from_lua(&lua.load(code).eval::<Value>().unwrap())
    }

    #[test]
    fn lua_values_become_replies_as_redis_makes_them() {
        let lua = Lua::new();
        assert_eq!(eval(&lua, "return 3"), Reply::Int(3));
        assert_eq!(eval(&lua, "return 3.7"), Reply::Int(3));
        assert_eq!(eval(&lua, "return -3.7"), Reply::Int(-3));
        assert_eq!(eval(&lua, "return 'x'"), Reply::bulk("x"));
        assert_eq!(eval(&lua, "return true"), Reply::Int(1));
        assert_eq!(eval(&lua, "return false"), Reply::NIL);
        assert_eq!(eval(&lua, "return nil"), Reply::NIL);
        assert_eq!(
            eval(&lua, "return {1, 'a', {2}, nil, 5}"),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::bulk("a"),
                Reply::Array(vec![Reply::Int(2)])
            ])
        );
        assert_eq!(
            eval(&lua, "return {ok = 'FINE'}"),
            Reply::Status("FINE".into())
        );
        assert_eq!(
            eval(&lua, "return {err = 'BAD\\r\\nx'}"),
            Reply::err("BAD  x")
        );
        let twice = "ERR the script's answer holds a table twice, or a table that holds itself";
        assert_eq!(
            eval(&lua, "local t = {} t[1] = t return t"),
            Reply::err(twice)
        );
        assert_eq!(eval(&lua, "local t = {1} return {t, t}"), Reply::err(twice));
        // Doubling a table 40 times would make 2^40 values.
        let doubled = "local t = {1} for i = 1, 40 do t = {t, t} end return t";
        assert_eq!(eval(&lua, doubled), Reply::err(twice));
        let deep = "local t = {} for i = 1, 100 do t = {t} end return t";
        assert_eq!(eval(&lua, deep), Reply::err("ERR reached lua stack limit"));
        let wide = "local t = {} for i = 1, 1100000 do t[i] = i end return t";
        assert!(
            matches!(eval(&lua, wide), Reply::Error(e) if e.contains("more than 1048576 values"))
        );
        let long = "local t = {} for i = 1, 20 do t[i] = string.rep('x', 4e6) end return t";
        assert!(matches!(eval(&lua, long), Reply::Error(e) if e.contains("more than 64 MiB")));
    }

    #[test]
    fn replies_become_lua_values_as_redis_makes_them() {
        let lua = Lua::new();
        let back = |r: Reply| {
            lua.globals().set("v", to_lua(&lua, &r).unwrap()).unwrap();
            lua.load("return type(v) == 'table' and (v.ok or v.err or #v) or v")
                .eval::<Value>()
                .unwrap()
        };
        assert_eq!(back(Reply::Int(7)), Value::Integer(7));
        assert_eq!(back(Reply::NIL), Value::Boolean(false));
        assert!(matches!(back(Reply::bulk("s")), Value::String(s) if s == "s"));
        assert!(matches!(back(Reply::Simple("OK")), Value::String(s) if s == "OK"));
        assert!(matches!(back(Reply::err("ERR x")), Value::String(s) if s == "ERR x"));
        assert_eq!(
            back(Reply::Array(vec![Reply::Int(1), Reply::NIL])),
            Value::Integer(2)
        );
        assert_eq!(
            back(Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))])),
            Value::Integer(2)
        );
        assert_eq!(back(Reply::Bool(true)), Value::Integer(1));
    }
}
