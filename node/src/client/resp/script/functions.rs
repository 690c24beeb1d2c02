//! Redis 7 functions: `FUNCTION LOAD | DELETE | FLUSH | LIST | DUMP |
//! RESTORE | STATS | KILL` and `FCALL`, `FCALL_RO`.
//!
//! The cluster's libraries are the registers of one reserved partition
//! ([`PARTITION`], in no database: `FLUSHALL` leaves them, as Redis
//! does), one register per library (its name, its code), changed through
//! agreement: a library loaded through one node is called through any
//! other at once, and two loads through two nodes never both take a
//! name. A change is worked out from the libraries a read found (the
//! function names each declares need Lua to learn, `lua::library`) and
//! agreed only if they are still what was read; otherwise it is worked
//! out again. Together the libraries take at most [`LIBRARIES_BYTES_MAX`].
//!
//! `FCALL` reads the libraries (a quorum read, linearizable), finds the
//! one that declares the function, and runs it as a script
//! (`lua::library::call_script`): a function of one key runs as one
//! agreed change of it, as a script does. Changing the libraries needs an
//! administrator (every user's `FCALL` runs their code); `FUNCTION DUMP`'s
//! payload is Tally's own, for `FUNCTION RESTORE` on Tally.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use tally_net::wire::{REGISTERS_BYTES_MAX, Register, Registers};

use super::super::counters::wire_err;
use super::super::glob;
use super::super::lua::library::{self, Declared};
use super::super::proto::Reply;
use super::super::session::Session;
use super::agreed::apply_if_unchanged;
use super::{Run, key_count, run};
use crate::cluster::agree::history;
use crate::cluster::scripts::sha1_hex;
use crate::node::Node;

/// The reserved partition that holds the libraries.
const PARTITION: &[u8] = b"\xff\xfffunctions";
/// Most bytes of libraries (names and code) the cluster keeps: the
/// registers' limit, less room for the round history.
pub(crate) const LIBRARIES_BYTES_MAX: usize = REGISTERS_BYTES_MAX - 4096;
/// Most times a change is worked out again because the libraries changed.
const ATTEMPTS_MAX: usize = 10;

/// Library name → code.
type Libraries = BTreeMap<String, Vec<u8>>;

/// What a library's code declares, or Redis' error ([`declared`]).
type DeclaredOf = dyn Fn(&[u8]) -> Result<Arc<Vec<Declared>>, String>;

/// The libraries `registers` hold.
fn libraries(registers: &Registers) -> Libraries {
    registers
        .0
        .iter()
        .filter(|r| r.column != history::COLUMN)
        .map(|r| {
            (
                String::from_utf8_lossy(&r.column).into_owned(),
                r.value.clone(),
            )
        })
        .collect()
}

/// The registers that hold `libs`, or the error when they are too big.
fn registers_of(libs: &Libraries) -> Result<Registers, String> {
    let registers = Registers(
        libs.iter()
            .map(|(name, code)| Register {
                column: name.as_bytes().to_vec(),
                value: code.clone(),
                at_ms: 0,
            })
            .collect(),
    );
    match registers.size() <= LIBRARIES_BYTES_MAX && registers.check().is_ok() {
        true => Ok(registers),
        false => Err(format!(
            "ERR the cluster keeps at most {} KiB of function libraries",
            LIBRARIES_BYTES_MAX >> 10
        )),
    }
}

/// Most libraries whose declared functions are remembered (by code).
const DECLARED_MAX: usize = 1024;
static DECLARED: Mutex<Option<HashMap<String, Arc<Vec<Declared>>>>> = Mutex::new(None);

/// What `code` declares, if it is remembered.
fn remembered(code: &[u8]) -> Option<Arc<Vec<Declared>>> {
    DECLARED.lock().as_ref()?.get(&sha1_hex(code)).cloned()
}

/// The functions `code` (a whole library) declares, remembered by its
/// sha1 (running its body takes an interpreter).
fn declared(code: &[u8]) -> Result<Arc<Vec<Declared>>, String> {
    if let Some(d) = remembered(code) {
        return Ok(d);
    }
    let sha = sha1_hex(code);
    let (_, body) = library::header(code)?;
    let d = Arc::new(library::declare(&body)?);
    let mut cache = DECLARED.lock();
    let map = cache.get_or_insert_with(HashMap::new);
    if map.len() >= DECLARED_MAX {
        map.clear();
    }
    map.insert(sha, d.clone());
    Ok(d)
}

/// [`declared`], on a thread where Lua may run unless it is remembered
/// (every `FCALL` asks it of each library).
async fn declared_off_thread(code: Vec<u8>) -> Result<Arc<Vec<Declared>>, String> {
    if let Some(d) = remembered(&code) {
        return Ok(d);
    }
    tally_world::blocking(move || declared(&code))
        .await
        .unwrap_or_else(|e| Err(format!("ERR the library could not be read: {e}")))
}

/// `libs` with `incoming` added (`replace`: a library of the same name is
/// replaced, else refused), unless a function of one is declared by
/// another: Redis' errors.
fn add(
    libs: &Libraries,
    incoming: &[(String, Vec<u8>)],
    replace: bool,
    declared_of: &DeclaredOf,
) -> Result<Libraries, String> {
    let mut next = libs.clone();
    for (name, code) in incoming {
        if next.contains_key(name) && !replace {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        next.insert(name.clone(), code.clone());
    }
    let mut owner: HashMap<String, &str> = HashMap::new();
    for (name, code) in &next {
        for f in declared_of(code)?.iter() {
            if owner.insert(f.name.to_ascii_lowercase(), name).is_some() {
                return Err(format!("ERR Function {} already exists", f.name));
            }
        }
    }
    Ok(next)
}

/// Changes the libraries by `rule` (from the ones read; it may run once
/// per attempt), agreed only over what was read.
async fn change<F, Fut>(node: &Arc<Node>, rule: F) -> Reply
where
    F: Fn(Libraries) -> Fut,
    Fut: Future<Output = Result<(Libraries, Reply), String>>,
{
    for _ in 0..ATTEMPTS_MAX {
        let read = match node.read_registers(PARTITION).await {
            Ok(r) => r,
            Err(e) => return wire_err(&e),
        };
        let (libs, reply) = match rule(libraries(&read)).await {
            Ok(done) => done,
            Err(e) => return Reply::err(e),
        };
        let next = match registers_of(&libs) {
            Ok(n) => n,
            Err(e) => return Reply::err(e),
        };
        let agreed = node
            .agree(PARTITION, move |current, _| {
                Ok(apply_if_unchanged(&read, &next, &reply, current))
            })
            .await;
        match agreed {
            Ok(Ok(reply)) => return reply,
            Ok(Err(_)) => continue,
            Err(e) => return wire_err(&e),
        }
    }
    Reply::err("ERR the function libraries kept changing; try again")
}

/// `FUNCTION LOAD [REPLACE] code`: the library's name.
async fn load(node: &Arc<Node>, code: &[u8], replace: bool) -> Reply {
    let (name, _) = match library::header(code) {
        Ok(h) => h,
        Err(e) => return Reply::err(e),
    };
    if let Err(e) = declared_off_thread(code.to_vec()).await {
        return Reply::err(e);
    }
    let incoming = vec![(name.clone(), code.to_vec())];
    change(node, |libs| {
        let incoming = incoming.clone();
        let name = name.clone();
        async move {
            let next = tally_world::blocking(move || add(&libs, &incoming, replace, &declared))
                .await
                .unwrap_or_else(|e| Err(format!("ERR {e}")))?;
            Ok((next, Reply::bulk(name)))
        }
    })
    .await
}

/// `FUNCTION DELETE name`.
async fn delete(node: &Arc<Node>, name: &[u8]) -> Reply {
    let name = String::from_utf8_lossy(name).into_owned();
    change(node, |mut libs| {
        let gone = libs.remove(&name).is_some();
        async move {
            match gone {
                true => Ok((libs, Reply::Simple("OK"))),
                false => Err("ERR Library not found".into()),
            }
        }
    })
    .await
}

/// `FUNCTION FLUSH`.
async fn flush(node: &Arc<Node>) -> Reply {
    change(node, |_| async {
        Ok((Libraries::new(), Reply::Simple("OK")))
    })
    .await
}

/// `FUNCTION RESTORE payload [FLUSH | APPEND | REPLACE]`.
async fn restore(node: &Arc<Node>, payload: &[u8], policy: &[u8]) -> Reply {
    let Some(incoming) = undump(payload) else {
        return Reply::err("ERR payload version or checksum are wrong");
    };
    let (flush, replace) = match policy.to_ascii_uppercase().as_slice() {
        b"APPEND" => (false, false),
        b"REPLACE" => (false, true),
        b"FLUSH" => (true, true),
        _ => {
            return Reply::err(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            );
        }
    };
    for (_, code) in &incoming {
        if let Err(e) = declared_off_thread(code.clone()).await {
            return Reply::err(e);
        }
    }
    change(node, |libs| {
        let incoming = incoming.clone();
        let libs = if flush { Libraries::new() } else { libs };
        async move {
            let next = tally_world::blocking(move || add(&libs, &incoming, replace, &declared))
                .await
                .unwrap_or_else(|e| Err(format!("ERR {e}")))?;
            Ok((next, Reply::Simple("OK")))
        }
    })
    .await
}

/// The tag `FUNCTION DUMP`'s payloads begin with.
const DUMP_TAG: &[u8] = b"TALLYFN1";

/// `libs` as one payload: the tag, each library's name and code (each a
/// u32 length, big-endian, and its bytes), and an XXH3 of all before.
fn dump(libs: &Libraries) -> Vec<u8> {
    let mut out = DUMP_TAG.to_vec();
    for (name, code) in libs {
        for part in [name.as_bytes(), code] {
            out.extend_from_slice(&(part.len() as u32).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    let sum = crate::base::compare::digest(&out);
    out.extend_from_slice(&sum.to_be_bytes());
    out
}

/// The libraries of a [`dump`] payload, if it is one.
fn undump(payload: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let (body, sum) = payload.split_at_checked(payload.len().checked_sub(8)?)?;
    if crate::base::compare::digest(body).to_be_bytes() != *sum {
        return None;
    }
    let mut rest = body.strip_prefix(DUMP_TAG)?;
    let mut take = || -> Option<Vec<u8>> {
        let (len, tail) = rest.split_at_checked(4)?;
        let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
        let (part, tail) = tail.split_at_checked(len)?;
        rest = tail;
        Some(part.to_vec())
    };
    let mut libs = Vec::new();
    while let Some(name) = take() {
        libs.push((String::from_utf8(name).ok()?, take()?));
    }
    Some(libs)
}

/// `FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]`.
async fn list(node: &Arc<Node>, opts: &[Vec<u8>]) -> Reply {
    let mut pattern: Option<&[u8]> = None;
    let mut with_code = false;
    let mut i = 0;
    while i < opts.len() {
        match opts[i].to_ascii_uppercase().as_slice() {
            b"WITHCODE" => with_code = true,
            b"LIBRARYNAME" if i + 1 < opts.len() => {
                pattern = Some(&opts[i + 1]);
                i += 1;
            }
            _ => return Reply::err("ERR Unknown argument"),
        }
        i += 1;
    }
    let libs = match node.read_registers(PARTITION).await {
        Ok(r) => libraries(&r),
        Err(e) => return wire_err(&e),
    };
    let mut out = Vec::new();
    for (name, code) in libs {
        if pattern.is_some_and(|p| !glob::matches(p, name.as_bytes())) {
            continue;
        }
        let functions = declared_off_thread(code.clone()).await.unwrap_or_default();
        out.push(listed(&name, &functions, with_code.then_some(code)));
    }
    Reply::Array(out)
}

/// One library as `FUNCTION LIST` shows it.
fn listed(name: &str, functions: &[Declared], code: Option<Vec<u8>>) -> Reply {
    let text = |s: &str| Reply::bulk(s.as_bytes().to_vec());
    let functions = functions
        .iter()
        .map(|f| {
            Reply::Map(vec![
                (text("name"), text(&f.name)),
                (
                    text("description"),
                    f.description.as_deref().map_or(Reply::NIL, text),
                ),
                (
                    text("flags"),
                    Reply::Set(f.flags.iter().map(|g| text(g)).collect()),
                ),
            ])
        })
        .collect();
    let mut fields = vec![
        (text("library_name"), text(name)),
        (text("engine"), text("LUA")),
        (text("functions"), Reply::Array(functions)),
    ];
    if let Some(code) = code {
        fields.push((text("library_code"), Reply::bulk(code)));
    }
    Reply::Map(fields)
}

/// `FUNCTION STATS`: the libraries and functions the cluster has (no
/// script is named running: runs are each node's own).
async fn stats(node: &Arc<Node>) -> Reply {
    let libs = match node.read_registers(PARTITION).await {
        Ok(r) => libraries(&r),
        Err(e) => return wire_err(&e),
    };
    let mut functions = 0;
    for code in libs.values() {
        functions += declared_off_thread(code.clone())
            .await
            .map_or(0, |d| d.len());
    }
    let text = |s: &str| Reply::bulk(s.as_bytes().to_vec());
    let lua = Reply::Map(vec![
        (text("libraries_count"), Reply::Int(libs.len() as i64)),
        (text("functions_count"), Reply::Int(functions as i64)),
    ]);
    Reply::Map(vec![
        (text("running_script"), Reply::NIL),
        (text("engines"), Reply::Map(vec![(text("LUA"), lua)])),
    ])
}

/// `FUNCTION subcommand ...` (`rest` from the subcommand on).
pub(crate) async fn function(node: &Arc<Node>, s: &Session, rest: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&rest[0]).to_ascii_lowercase();
    let is = |i: usize, word: &[u8]| rest.get(i).is_some_and(|w| w.eq_ignore_ascii_case(word));
    match (sub.as_str(), rest.len() - 1) {
        ("load", n) if n >= 1 => match rest[1..n]
            .iter()
            .find(|o| !o.eq_ignore_ascii_case(b"replace"))
        {
            Some(o) => Reply::err(format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(o)
            )),
            None => load(node, &rest[n], n > 1).await,
        },
        ("delete", 1) => delete(node, &rest[1]).await,
        ("flush", 0) => flush(node).await,
        ("flush", 1) if is(1, b"async") || is(1, b"sync") => flush(node).await,
        ("flush", 1) => Reply::err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
        ("list", _) => list(node, &rest[1..]).await,
        ("dump", 0) => match node.read_registers(PARTITION).await {
            Ok(r) => Reply::bulk(dump(&libraries(&r))),
            Err(e) => wire_err(&e),
        },
        ("restore", 1) => restore(node, &rest[1], b"APPEND").await,
        ("restore", 2) => restore(node, &rest[1], &rest[2]).await,
        ("stats", 0) => stats(node).await,
        ("kill", 0) => super::kill(s),
        ("load" | "delete" | "flush" | "dump" | "restore" | "stats" | "kill", _) => Reply::err(
            format!("ERR wrong number of arguments for 'function|{sub}' command"),
        ),
        _ => Reply::err(format!(
            "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
            String::from_utf8_lossy(&rest[0])
        )),
    }
}

/// `FCALL function numkeys key... arg...` (`FCALL_RO`: read-only, and only
/// of a function flagged `no-writes`).
pub(crate) async fn fcall(node: &Arc<Node>, s: &Session, name: &str, args: &[Vec<u8>]) -> Reply {
    let n = match key_count(&args[2], args.len() - 3) {
        Ok(n) => n,
        Err(Reply::Error(e)) if e.contains("not an integer") => {
            return Reply::err("ERR Bad number of keys provided");
        }
        Err(e) => return e,
    };
    let wanted = String::from_utf8_lossy(&args[1]).into_owned();
    let libs = match node.read_registers(PARTITION).await {
        Ok(r) => libraries(&r),
        Err(e) => return wire_err(&e),
    };
    let Some((code, function)) = find(&libs, &wanted).await else {
        return Reply::err("ERR Function not found");
    };
    let no_writes = function.flags.iter().any(|f| f == "no-writes");
    if name == "fcall_ro" && !no_writes {
        return Reply::err("ERR Can not execute a script with write flag using *_ro command.");
    }
    let body = match library::header(&code) {
        Ok((_, body)) => library::call_script(&body, &function.name),
        Err(e) => return Reply::err(e),
    };
    let script = Run {
        sha: sha1_hex(&body),
        body: body.into(),
        keys: &args[3..3 + n],
        argv: &args[3 + n..],
        read_only: no_writes,
    };
    run(node, s, script).await
}

/// The code of the library that declares `function` (names match in any
/// case, as in Redis), and the function as declared.
async fn find(libs: &Libraries, function: &str) -> Option<(Vec<u8>, Declared)> {
    for code in libs.values() {
        let declared = declared_off_thread(code.clone()).await.ok()?;
        if let Some(f) = declared
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(function))
        {
            return Some((code.clone(), f.clone()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, functions: &[&str]) -> (String, Vec<u8>) {
        let mut code = format!("#!lua name={name}\n");
        for f in functions {
            code.push_str(&format!(
                "redis.register_function('{f}', function() return 1 end)\n"
            ));
        }
        (name.to_string(), code.into_bytes())
    }

    #[test]
    fn loads_refuse_a_taken_library_or_function_name() {
        let libs = add(
            &Libraries::new(),
            &[lib("a", &["f", "g"])],
            false,
            &declared,
        )
        .unwrap();
        let again = add(&libs, &[lib("a", &["h"])], false, &declared);
        assert_eq!(again, Err("ERR Library 'a' already exists".into()));
        let replaced = add(&libs, &[lib("a", &["h"])], true, &declared).unwrap();
        assert!(std::str::from_utf8(&replaced["a"]).unwrap().contains("'h'"));
        let clash = add(&libs, &[lib("b", &["g"])], false, &declared);
        assert_eq!(clash, Err("ERR Function g already exists".into()));
        let clash = add(&libs, &[lib("b", &["G"])], false, &declared);
        assert_eq!(
            clash,
            Err("ERR Function G already exists".into()),
            "names in any case"
        );
        assert_eq!(
            add(&libs, &[lib("b", &["k"])], false, &declared).map(|l| l.len()),
            Ok(2)
        );
    }

    #[test]
    fn a_dump_restores_and_a_damaged_one_is_refused() {
        let libs: Libraries = [lib("a", &["f"]), lib("b", &["g"])].into_iter().collect();
        let payload = dump(&libs);
        let back: Libraries = undump(&payload).unwrap().into_iter().collect();
        assert_eq!(back, libs);
        assert_eq!(undump(&dump(&Libraries::new())), Some(Vec::new()));
        let mut bad = payload.clone();
        bad[10] ^= 1;
        assert!(undump(&bad).is_none());
        assert!(undump(b"short").is_none());
        assert!(undump(&payload[..payload.len() - 1]).is_none());
    }

    #[test]
    fn libraries_live_in_registers_beside_the_round_history() {
        let libs: Libraries = [lib("a", &["f"])].into_iter().collect();
        let mut registers = registers_of(&libs).unwrap();
        registers.put(Register {
            column: history::COLUMN.to_vec(),
            value: vec![1],
            at_ms: 0,
        });
        assert_eq!(libraries(&registers), libs);
        let huge: Libraries = (0..3)
            .map(|i| (format!("l{i}"), vec![b'-'; 400 << 10]))
            .collect();
        assert!(registers_of(&huge).is_err());
    }
}
