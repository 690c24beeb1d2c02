//! A property test over the script surface: `EVAL` bodies made of pieces
//! that reach for what a sandbox must hold (globals, metatables, library
//! tables, patterns, errors, memory, replies), random bytes, and random
//! keys and arguments. Every run must answer a reply without a panic,
//! within its time limit, and leave the interpreter as it found it.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;
use tally_world::Instant;

use proptest::prelude::*;

use super::super::proto::Reply;
use super::api::May;
use super::runs;
use super::vm::{Busy, Host, Pending, Script, Vm};

/// Answers a few commands as the node would, the rest with an error.
struct Echo;

impl Host for Echo {
    fn call(&self, args: Vec<Vec<u8>>) -> Pending {
        let reply = match args[0].to_ascii_uppercase().as_slice() {
            b"INCR" | b"INCRBY" => Reply::Int(1),
            b"GET" => Reply::Bulk(args.get(1).cloned()),
            b"LRANGE" => Reply::Array(vec![Reply::bulk("a"), Reply::NIL]),
            _ => Reply::err("ERR unknown"),
        };
        Box::pin(std::future::ready(reply))
    }
}

/// Statements script bodies are made of.
const STATEMENTS: &[&str] = &[
    "redis.call('INCR', KEYS[1])",
    "redis.pcall('NOPE')",
    "local v = redis.call('GET', ARGV[1] or 'k')",
    "local l = redis.call('LRANGE', 'l', 0, -1)",
    "redis.call = nil",
    "redis.pcall = function() end",
    "x = 1",
    "_G.x = 1",
    "rawset(_G, 'x', 1)",
    "KEYS[1] = nil",
    "setmetatable(_G, {})",
    "getmetatable('').__index = {}",
    "string.rep = nil",
    "local s = string.rep('ab', 1e3)",
    "local s = string.rep('x', 1e8)",
    "local p = string.find(string.rep('a', 2e3), string.rep('a*', 6) .. 'b')",
    "local g = string.gsub('hello world', '(%w+)', '%1 %1')",
    "local g = string.gsub('abc', '%', 'x')",
    "local m = string.match('key:7', '^(%a+):(%d+)$')",
    "local q = string.format('%q', ARGV[1] or '')",
    "local d = string.format('%d', 'x')",
    "local t = tostring(setmetatable({}, {__tostring = function() return 1 end}))",
    "local r = setmetatable({}, {__index = function(t, k) return t[k] end}).x",
    "pcall(error, {})",
    "error('a\\r\\nb')",
    "pcall(error)",
    "error(setmetatable({}, {__tostring = error}))",
    "xpcall(function() error('x') end, function(e) return e end)",
    "local n = select('#', unpack({1, 2, 3}))",
    "local u = unpack({}, 1, 1e6)",
    "local c = table.concat({1, 'a', 2.5}, ',')",
    "table.sort({3, 1, 2}, function(a, b) return a > b end)",
    "local h = tonumber('0x10') + 1 / 0",
    "local e = getfenv(1)",
    "local f = loadstring('return 1')",
    "local d = string.dump(tostring)",
    "local w = coroutine.wrap(function() end)",
    "local p = newproxy(true)",
    "local k = collectgarbage('count')",
    "while true do end",
    "for i = 1, 1e5 do local s = tostring(i) end",
];

/// How script bodies end.
const RETURNS: &[&str] = &[
    "",
    "local t = {} t[1] = t return t",
    "local t = {1} return {t, t}",
    "return {err = 'E\\r\\nx'}",
    "return {ok = 'fine'}",
    "return 3.7",
    "return true",
    "return nil",
    "return {1, 'a', {2, {3}}, false, 5}",
    "return KEYS",
    "return ARGV[1]",
];

fn body() -> impl Strategy<Value = Vec<u8>> {
    let statement = prop_oneof![
        8 => proptest::sample::select(STATEMENTS).prop_map(|p| p.as_bytes().to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..24),
    ];
    let statements = proptest::collection::vec(statement, 0..5);
    (statements, proptest::sample::select(RETURNS)).prop_map(|(mut pieces, last)| {
        pieces.push(last.as_bytes().to_vec());
        pieces.join(&b" "[..])
    })
}

fn words() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..16), 0..4)
}

/// What an untouched interpreter answers to [`PROBE`].
const PROBE: &str = "return {type(redis.call), type(redis.pcall), string.rep('a', 2), \
                     type(rawget(_G, 'x')), type(getmetatable('').__index.rep), #KEYS}";

fn probe_answer() -> Reply {
    Reply::Array(vec![
        Reply::bulk("function"),
        Reply::bulk("function"),
        Reply::bulk("aa"),
        Reply::bulk("nil"),
        Reply::bulk("function"),
        Reply::Int(1),
    ])
}

fn run(vm: &mut Vm, body: &[u8], keys: &[Vec<u8>], argv: &[Vec<u8>]) -> Result<Reply, Reply> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let sha = crate::cluster::scripts::sha1_hex(body);
    let script = Script {
        sha: &sha,
        body,
        keys,
        argv,
        may: May {
            read_only: false,
            admin: false,
        },
    };
    let runs = runs::Runs::default();
    let registered = runs.start(None);
    let ran = rt.block_on(vm.run(
        script,
        Arc::new(Echo),
        Duration::from_millis(100),
        registered.run.clone(),
        &Busy::default(),
    ));
    ran.map_err(|(reply, _)| reply)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn any_script_answers_in_time_and_leaves_the_interpreter_as_it_was(
        body in body(),
        keys in words(),
        argv in words(),
    ) {
        let mut vm = Vm::new(0, &std::sync::Arc::default(), true).unwrap();
        let started = Instant::now();
        let ran = run(&mut vm, &body, &keys, &argv);

        prop_assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        if ran.is_ok() {
            // The interpreter is kept for the next script: it must be as new.
            let probe = run(&mut vm, PROBE.as_bytes(), &[b"k".to_vec()], &[]);
            prop_assert_eq!(probe, Ok(probe_answer()), "after {:?}", String::from_utf8_lossy(&body));
        }
    }
}
