//! What a script of one key sees while it runs as one agreed change of
//! that key (`script::agreed`): the key's registers (its string or its
//! sorted set), as the round read them, changed in memory by each command
//! the script calls, the way Redis changes a string or a sorted set.
//!
//! Only commands on that one key's string or sorted set are served here. Any other (a
//! key the script did not declare, a counter's or a hash's command, a
//! command this view lacks) makes the script leave the view
//! ([`Step::Leaves`]): its run is thrown away, nothing of it having been
//! applied, and it runs again the way every other script runs.

use tally_net::wire::{Presence, Register, Registers, Ttl, When};

use super::super::counters::int_arg;
use super::super::expiry::{self, Deadline};
use super::super::proto::Reply;
use super::super::registers::{
    self, AddedToString, expire_string, expire_value, remove_string, value_column,
};
use super::super::strings::{getex_args, set_opts, string, ttl_arg};
use super::super::text::{Edit, edit_string, offset, range, too_long};
use super::super::zsets;
use crate::base::compare::{delex_args, digest_hex};
use crate::base::{fields, zset};

/// The column of a key's string (as `registers` keeps it).
const COLUMN: &[u8] = b"";

/// What one command of the script did.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Served here: its reply.
    Done(Reply),
    /// Not a command of this view: the script must run another way.
    Leaves,
}

/// One key's string while a script runs on it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct View {
    /// The key, as the script names it.
    key: Vec<u8>,
    /// The partition's registers (live ones), as the commands so far left
    /// them.
    state: Registers,
    /// The wall clock the run reads (one reading for the whole run).
    now_ms: u64,
}

impl View {
    /// `key` holding `state` at `now_ms`.
    pub(crate) fn new(key: &[u8], mut state: Registers, now_ms: u64) -> View {
        state.drop_expired(now_ms);
        View {
            key: key.to_vec(),
            state,
            now_ms,
        }
    }

    /// The registers as the script left them.
    pub(crate) fn state(&self) -> &Registers {
        &self.state
    }

    /// The key's string now, if it has one.
    fn current(&self) -> Option<&Register> {
        self.state.get(COLUMN, self.now_ms)
    }

    fn value(&self) -> Option<Vec<u8>> {
        self.current().map(|r| r.value.clone())
    }

    /// Runs `args` (the command's name first, as the script sent it).
    pub(crate) fn call(&mut self, args: &[Vec<u8>]) -> Step {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let rest = &args[1..];
        let ours = |keys: &[Vec<u8>]| !keys.is_empty() && keys.iter().all(|k| *k == self.key);
        let reply = match (name.as_str(), rest) {
            ("del" | "unlink" | "exists", keys) if ours(keys) => self.keyed_all(&name, keys.len()),
            (_, [key, ..]) if *key == self.key => match self.on_key(&name, &rest[1..]) {
                Some(reply) => reply,
                None => return Step::Leaves,
            },
            _ => return Step::Leaves,
        };
        Step::Done(reply)
    }

    /// `DEL`, `UNLINK` or `EXISTS` naming the key `n` times: of whatever
    /// registers it holds (its string, string fields or sorted set).
    fn keyed_all(&mut self, name: &str, n: usize) -> Reply {
        let had = fields::holds_any(&self.state, self.now_ms);
        match name {
            "exists" => Reply::Int(if had { n as i64 } else { 0 }),
            _ => {
                self.state = fields::clear(&self.state, self.now_ms).0;
                Reply::Int(i64::from(had))
            }
        }
    }

    /// The key's own register: its string, else its sorted set.
    fn own(&self) -> Option<&Register> {
        value_column(&self.state, self.now_ms).and_then(|c| self.state.get(c, self.now_ms))
    }

    /// A command on the key, `args` after the key; `None` for one this
    /// view does not serve.
    fn on_key(&mut self, name: &str, args: &[Vec<u8>]) -> Option<Reply> {
        let now = self.now_ms;
        let reply = match (name, args) {
            ("get", []) => self.value().map_or(Reply::NIL, Reply::bulk),
            ("set", [value, opts @ ..]) => match set_opts(opts, now) {
                Ok(o) => {
                    let set = o.string(value);
                    let get = set.get;
                    self.set(set, get)
                }
                Err(e) => e,
            },
            ("digest", []) => self
                .value()
                .map_or(Reply::NIL, |v| Reply::bulk(digest_hex(&v))),
            ("setnx", [value]) => {
                let s = string(value, Ttl::Clear, Presence::Absent, false);
                match self.set(s, false) {
                    Reply::NIL => Reply::Int(0),
                    _ => Reply::Int(1),
                }
            }
            ("setex" | "psetex", [t, value]) => match ttl_arg(name, t, now) {
                Ok(ttl) => self.set(string(value, ttl, Presence::Any, false), false),
                Err(e) => e,
            },
            ("getset", [value]) => self.set(string(value, Ttl::Clear, Presence::Any, false), true),
            ("delex", opts) => match delex_args(opts) {
                Ok(c) => {
                    let current = self.value();
                    let gone = current.is_some() && c.is_none_or(|c| c.holds(current.as_deref()));
                    if gone {
                        self.state = remove_string(&self.state).0;
                    }
                    Reply::Int(i64::from(gone))
                }
                Err(e) => Reply::err(e),
            },
            ("getdel", []) => {
                let before = self.value();
                self.state = remove_string(&self.state).0;
                before.map_or(Reply::NIL, Reply::bulk)
            }
            ("getex", opts) => match getex_args(opts, now) {
                Ok(at) => self.get_and_expire(at),
                Err(e) => e,
            },
            ("type", []) => Reply::Status(self.type_name().into()),
            ("incr" | "decr", []) => return self.add(if name == "incr" { 1 } else { -1 }),
            ("incrby" | "decrby", [by]) => match int_arg(by) {
                Ok(by) if name == "incrby" => return self.add(by),
                Ok(by) => match by.checked_neg() {
                    Some(by) => return self.add(by),
                    None => Reply::err("ERR decrement would overflow"),
                },
                Err(e) => e,
            },
            ("expire" | "pexpire" | "expireat" | "pexpireat", [t, opts @ ..]) => {
                match expiry::expire_args(name, t, opts, now) {
                    Ok((at_ms, only)) => self.expire(at_ms, only),
                    Err(e) => e,
                }
            }
            ("persist", []) => self.expire(0, When::Always),
            ("ttl" | "pttl" | "expiretime" | "pexpiretime", []) => {
                let d = match self.own().map(|r| r.at_ms) {
                    None => Deadline::Absent,
                    Some(0) => Deadline::Never,
                    Some(at) => Deadline::At(at),
                };
                Reply::Int(expiry::time_reply(name, d, now))
            }
            ("strlen", []) => Reply::Int(self.value().map_or(0, |v| v.len() as i64)),
            ("getrange" | "substr", [start, end]) => match (int_arg(start), int_arg(end)) {
                (Ok(start), Ok(end)) => {
                    Reply::bulk(range(&self.value().unwrap_or_default(), start, end))
                }
                (Err(e), _) | (_, Err(e)) => e,
            },
            ("append", [bytes]) => self.edit(&Edit::Append(bytes.clone())),
            ("setrange", [at, bytes]) => match int_arg(at).and_then(offset) {
                Ok(at) => self.edit(&Edit::SetRange(at, bytes.clone())),
                Err(e) => e,
            },
            _ => {
                let applied = zsets::apply(&self.state, name, args, now)?;
                if let Some(next) = applied.next {
                    self.state = next;
                }
                applied.reply
            }
        };
        Some(reply)
    }

    /// Redis' name of what the key holds.
    fn type_name(&self) -> &'static str {
        if self.current().is_some() {
            "string"
        } else if fields::fields(&self.state, self.now_ms).next().is_some() {
            "hash"
        } else if self.state.get(zset::COLUMN, self.now_ms).is_some() {
            "zset"
        } else {
            "none"
        }
    }

    /// A `SET` of the string: as Redis answers it (`get`: the value
    /// before).
    fn set(&mut self, set: registers::SetString, get: bool) -> Reply {
        if set.value.len() > registers::STRING_BYTES_MAX {
            return too_long();
        }
        let (next, done) = registers::set_string(&self.state, &set, self.now_ms);
        self.state = next;
        match (get, done.applied) {
            (true, _) => done.before.map_or(Reply::NIL, Reply::bulk),
            (false, true) => Reply::Simple("OK"),
            (false, false) => Reply::NIL,
        }
    }

    /// `GETEX`: the value, given the deadline `at` if one is asked.
    fn get_and_expire(&mut self, at: Option<u64>) -> Reply {
        if let Some(at_ms) = at {
            self.state = expire_string(&self.state, at_ms, When::Always).0;
        }
        self.value().map_or(Reply::NIL, Reply::bulk)
    }

    /// `INCRBY by` of the string read as a 64-bit integer, its deadline
    /// kept, as Redis does; `None` (the script leaves the view) when
    /// there is no string: an add to a key that holds none starts a
    /// counter, as it does outside scripts, so a script never turns a
    /// counter's key into a string by counting.
    fn add(&mut self, by: i64) -> Option<Reply> {
        let (next, done) = registers::add_to_string(&self.state, by, self.now_ms);
        self.state = next;
        Some(match done {
            AddedToString::Value(v) => Reply::Int(v),
            AddedToString::NotInteger => Reply::err("ERR value is not an integer or out of range"),
            AddedToString::Overflow => Reply::err("ERR increment or decrement would overflow"),
            AddedToString::NoString => return None,
            AddedToString::WrongType => Reply::err(crate::base::refusal::WRONGTYPE),
        })
    }

    /// An `EXPIRE`-family change: 1 if it applied. A deadline that has
    /// passed deletes the string, as Redis does.
    fn expire(&mut self, at_ms: u64, only: When) -> Reply {
        let (next, done) = expire_value(&self.state, at_ms, only);
        self.state = next;
        self.state.drop_expired(self.now_ms);
        Reply::Int(i64::from(done))
    }

    /// `APPEND` or `SETRANGE`: the new length.
    fn edit(&mut self, edit: &Edit) -> Reply {
        match edit_string(&self.state, edit, self.now_ms) {
            Some((next, len)) => {
                self.state = next;
                Reply::Int(len as i64)
            }
            None => too_long(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn call(v: &mut View, line: &str) -> Step {
        let args: Vec<Vec<u8>> = line.split(' ').map(|w| w.as_bytes().to_vec()).collect();
        v.call(&args)
    }

    fn done(v: &mut View, line: &str) -> Reply {
        match call(v, line) {
            Step::Done(r) => r,
            Step::Leaves => panic!("{line} left the view"),
        }
    }

    fn empty() -> View {
        View::new(b"k", Registers::default(), NOW)
    }

    #[test]
    fn compare_and_delete_reads_and_deletes_the_string() {
        let mut v = empty();
        assert_eq!(done(&mut v, "set k tok NX PX 1000"), Reply::Simple("OK"));
        assert_eq!(done(&mut v, "set k other NX"), Reply::NIL);
        assert_eq!(done(&mut v, "get k"), Reply::bulk("tok"));
        assert_eq!(done(&mut v, "pttl k"), Reply::Int(1000));
        assert_eq!(done(&mut v, "del k"), Reply::Int(1));
        assert_eq!(done(&mut v, "exists k k"), Reply::Int(0));
        assert_eq!(done(&mut v, "del k"), Reply::Int(0));
        assert_eq!(v.state(), &Registers::default());
    }

    #[test]
    fn a_rate_limiter_counts_in_the_string_and_keeps_its_deadline() {
        let mut v = empty();
        // No string: counting would start a counter, which is no view's.
        assert_eq!(call(&mut v, "incr k"), Step::Leaves);
        assert_eq!(done(&mut v, "set k 0 EX 60 NX"), Reply::Simple("OK"));
        assert_eq!(done(&mut v, "incr k"), Reply::Int(1));
        assert_eq!(done(&mut v, "incrby k 4"), Reply::Int(5));
        assert_eq!(done(&mut v, "decrby k 2"), Reply::Int(3));
        assert_eq!(done(&mut v, "ttl k"), Reply::Int(60));
        assert_eq!(done(&mut v, "type k"), Reply::Status("string".into()));
        // The next run sees what this one left, the deadline with it.
        let mut next = View::new(b"k", v.state().clone(), NOW + 59_000);
        assert_eq!(done(&mut next, "get k"), Reply::bulk("3"));
        let mut later = View::new(b"k", v.state().clone(), NOW + 60_000);
        assert_eq!(
            done(&mut later, "set k 0 EX 60 NX"),
            Reply::Simple("OK"),
            "expired: anew"
        );
    }

    #[test]
    fn redis_errors_stay_redis_errors() {
        let mut v = empty();
        done(&mut v, "set k abc");
        assert!(matches!(done(&mut v, "incr k"), Reply::Error(e) if e.contains("not an integer")));
        done(&mut v, &format!("set k {}", i64::MAX));
        assert!(matches!(done(&mut v, "incr k"), Reply::Error(e) if e.contains("overflow")));
        assert!(
            matches!(done(&mut v, "set k v EX 0"), Reply::Error(e) if e.contains("invalid expire"))
        );
        assert!(matches!(done(&mut v, "set k v NX XX"), Reply::Error(e) if e.contains("syntax")));
    }

    #[test]
    fn strings_change_as_in_redis() {
        let mut v = empty();
        assert_eq!(done(&mut v, "append k ab"), Reply::Int(2));
        assert_eq!(done(&mut v, "setrange k 3 z"), Reply::Int(4));
        assert_eq!(done(&mut v, "getrange k 0 1"), Reply::bulk("ab"));
        assert_eq!(done(&mut v, "strlen k"), Reply::Int(4));
        assert_eq!(done(&mut v, "getset k x"), Reply::bulk(b"ab\0z".to_vec()));
        assert_eq!(done(&mut v, "setnx k y"), Reply::Int(0));
        assert_eq!(done(&mut v, "getex k PX 50"), Reply::bulk("x"));
        assert_eq!(done(&mut v, "persist k"), Reply::Int(1));
        assert_eq!(done(&mut v, "pttl k"), Reply::Int(-1));
        assert_eq!(done(&mut v, "pexpire k -1"), Reply::Int(1));
        assert_eq!(
            done(&mut v, "get k"),
            Reply::NIL,
            "a deadline passed deletes"
        );
        assert_eq!(done(&mut v, "getdel k"), Reply::NIL);
        // Redis 8.4's compare-and-set and compare-and-delete.
        done(&mut v, "set k tok");
        assert_eq!(done(&mut v, "set k next IFEQ other"), Reply::NIL);
        assert_eq!(done(&mut v, "set k next IFEQ tok"), Reply::Simple("OK"));
        let d = crate::base::compare::digest_hex(b"next");
        assert_eq!(done(&mut v, "digest k"), Reply::bulk(d.clone()));
        assert_eq!(done(&mut v, "delex k IFNE next"), Reply::Int(0));
        assert_eq!(done(&mut v, &format!("delex k IFDEQ {d}")), Reply::Int(1));
        assert_eq!(done(&mut v, "delex k"), Reply::Int(0));
    }

    #[test]
    fn a_semaphore_script_runs_in_the_view() {
        // redis-semaphore's acquire, then its refresh, then a lost permit.
        let mut v = empty();
        assert_eq!(done(&mut v, "zremrangebyscore k -inf 500"), Reply::Int(0));
        assert_eq!(done(&mut v, "zcard k"), Reply::Int(0));
        assert_eq!(done(&mut v, "zadd k 1000 id"), Reply::Int(1));
        assert_eq!(done(&mut v, "pexpire k 2000"), Reply::Int(1));
        assert_eq!(done(&mut v, "type k"), Reply::Status("zset".into()));
        assert_eq!(done(&mut v, "pttl k"), Reply::Int(2000));
        let mut next = View::new(b"k", v.state().clone(), NOW + 1000);
        assert_eq!(done(&mut next, "zscore k id"), Reply::Double(1000.0));
        assert_eq!(done(&mut next, "zadd k 2000 id"), Reply::Int(0));
        assert_eq!(
            done(&mut next, "pttl k"),
            Reply::Int(1000),
            "ZADD keeps the deadline"
        );
        let mut later = View::new(b"k", next.state().clone(), NOW + 2000);
        assert_eq!(done(&mut later, "exists k"), Reply::Int(0), "expired");
        assert_eq!(done(&mut later, "zadd k 1 id"), Reply::Int(1));
        assert_eq!(done(&mut later, "set k s NX"), Reply::NIL, "the key exists");
        assert_eq!(
            done(&mut later, "set k s"),
            Reply::Simple("OK"),
            "SET replaces it"
        );
        assert_eq!(done(&mut later, "type k"), Reply::Status("string".into()));
        assert!(
            matches!(done(&mut later, "zcard k"), Reply::Error(e) if e.starts_with("WRONGTYPE"))
        );
        assert_eq!(done(&mut later, "del k"), Reply::Int(1));
        assert_eq!(later.state(), &Registers::default());
    }

    #[test]
    fn other_keys_and_other_commands_leave_the_view() {
        let mut v = empty();
        assert_eq!(call(&mut v, "get other"), Step::Leaves);
        assert_eq!(call(&mut v, "del k other"), Step::Leaves);
        assert_eq!(call(&mut v, "hset k f v"), Step::Leaves);
        assert_eq!(call(&mut v, "lpush k a"), Step::Leaves);
        assert_eq!(call(&mut v, "mget k"), Step::Leaves);
        assert_eq!(call(&mut v, "get"), Step::Leaves);
    }
}
