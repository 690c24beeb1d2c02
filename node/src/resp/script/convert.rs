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

use mlua::{Lua, Table, Value};

use super::super::proto::Reply;

/// How deep a table may nest in a script's answer (a table holding itself
/// would never end).
const DEPTH_MAX: usize = 64;

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
        Reply::Map(pairs) => {
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

/// A script's answer as a reply.
pub(crate) fn from_lua(v: &Value) -> Reply {
    from_lua_at(v, 0)
}

fn from_lua_at(v: &Value, depth: usize) -> Reply {
    match v {
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        // As Redis casts: toward zero (and saturating, where C is undefined).
        Value::Number(n) => Reply::Int(*n as i64),
        Value::String(s) => Reply::bulk(s.as_bytes().to_vec()),
        Value::Table(t) if depth >= DEPTH_MAX => {
            let _ = t;
            Reply::err("ERR reached lua stack limit")
        }
        Value::Table(t) => from_table(t, depth),
        _ => Reply::NIL,
    }
}

fn from_table(t: &Table, depth: usize) -> Reply {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Reply::err(one_line(&e.to_string_lossy()));
    }
    if let Ok(Value::String(ok)) = t.raw_get::<Value>("ok") {
        return Reply::Status(one_line(&ok.to_string_lossy()));
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(from_lua_at(&v, depth + 1)),
        }
    }
    Reply::Array(items)
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
        let cyclic = eval(&lua, "local t = {} t[1] = t return t");
        let mut r = &cyclic;
        while let Reply::Array(items) = r {
            r = &items[0];
        }
        assert_eq!(*r, Reply::err("ERR reached lua stack limit"));
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
