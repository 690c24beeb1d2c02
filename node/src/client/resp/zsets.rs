//! Sorted sets over RESP: `ZADD` (`NX`, `XX`, `GT`, `LT`, `CH`, `INCR`),
//! `ZINCRBY`, `ZREM`, `ZCARD`, `ZSCORE`, `ZMSCORE`, `ZCOUNT`, `ZRANK`,
//! `ZREVRANK`, `ZRANGE` (by rank or `BYSCORE`, `REV`, `LIMIT`,
//! `WITHSCORES`), `ZREVRANGE`, `ZRANGEBYSCORE`, `ZREVRANGEBYSCORE`,
//! `ZREMRANGEBYSCORE`, `ZREMRANGEBYRANK`, `ZPOPMIN`, `ZPOPMAX`.
//!
//! A key's sorted set is a register of its partition (`base::zset`),
//! agreed: a change is one agreement round that runs the command on the
//! set decided so far ([`apply`], pure, which a script's view runs too),
//! and a read is a linearizable read of it. So a semaphore's
//! `ZREMRANGEBYSCORE`, `ZCARD`, `ZADD` in one script, or a `ZREM`
//! through another node, act on one history.
//!
//! A key holds one kind: a sorted-set command on a key that holds a
//! string (or string fields) answers `WRONGTYPE`, as does one that would
//! make a set where the key holds a live counter (read at the connection's
//! level unless this node last saw the set).

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Consistency, Registers, WireKey};

use super::counters::{int_arg, read_err, wire_err};
use super::proto::Reply;
use crate::base::fields;
use crate::base::refusal::WRONGTYPE;
use crate::base::zset::{self, AddOnly, Added, Bound, ZSet, parse_score};
use crate::node::Node;

const NOT_A_FLOAT: &str = "ERR value is not a valid float";
const BOUND_NOT_A_FLOAT: &str = "ERR min or max is not a float";
const SYNTAX: &str = "ERR syntax error";

/// What a sorted-set command did: the next registers (`None`: unchanged)
/// and its reply.
#[derive(Debug, PartialEq)]
pub(crate) struct Applied {
    pub(crate) next: Option<Registers>,
    pub(crate) reply: Reply,
}

impl Applied {
    fn read(reply: Reply) -> Applied {
        Applied { next: None, reply }
    }
}

/// Whether `name` changes the set.
fn writes(name: &str) -> bool {
    matches!(
        name,
        "zadd"
            | "zincrby"
            | "zrem"
            | "zremrangebyscore"
            | "zremrangebyrank"
            | "zpopmin"
            | "zpopmax"
    )
}

/// Answers `name` if it is one of this module's commands (keys as
/// stored; arity checked by the table).
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let (key, args) = rest.split_first()?;
    let now = now_ms();
    // The command is checked on an empty set first: a syntax error costs
    // no round.
    let probe = apply(&Registers::default(), name, args, now)?;
    if probe.reply.is_error() {
        return Some(probe.reply);
    }
    Some(match writes(name) {
        true => change(node, cl, key, name, args).await,
        false => match node.read_registers(key).await {
            Ok(registers) => apply(&registers, name, args, now_ms())?.reply,
            Err(e) => read_err(&e),
        },
    })
}

/// A change of the set, agreed.
async fn change(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
    name: &str,
    args: &[Vec<u8>],
) -> Reply {
    let makes = matches!(name, "zadd" | "zincrby");
    if makes && let Err(e) = refuse_counter(node, cl, key).await {
        return e;
    }
    let (name, args) = (name.to_string(), args.to_vec());
    let changed = node
        .agree(key, move |registers, now| {
            let applied = apply(registers, &name, &args, now)
                .unwrap_or_else(|| Applied::read(Reply::err(SYNTAX)));
            Ok((
                applied.next.unwrap_or_else(|| registers.clone()),
                applied.reply,
            ))
        })
        .await;
    changed.unwrap_or_else(|e| wire_err(&e))
}

/// `WRONGTYPE` when `key` holds a live counter (or list), unless this
/// node last saw it hold a sorted set.
async fn refuse_counter(node: &Arc<Node>, cl: Consistency, key: &[u8]) -> Result<(), Reply> {
    let now = now_ms();
    if node
        .last_seen_registers(key)
        .is_some_and(|r| r.get(zset::COLUMN, now).is_some())
    {
        return Ok(());
    }
    match node.get_cell(&WireKey::new(key, b""), cl).await {
        Ok(c) if c.live(now_ms()) => Err(Reply::err(WRONGTYPE)),
        Ok(_) => Ok(()),
        Err(e) => Err(read_err(&e)),
    }
}

/// Runs sorted-set command `name` (`args` after the key) on a partition's
/// `registers` (live at `now_ms`); `None` for a command that is not one.
pub(crate) fn apply(
    registers: &Registers,
    name: &str,
    args: &[Vec<u8>],
    now_ms: u64,
) -> Option<Applied> {
    if !is_command(name) {
        return None;
    }
    if registers.get(b"", now_ms).is_some() || fields::fields(registers, now_ms).next().is_some() {
        return Some(Applied::read(Reply::err(WRONGTYPE)));
    }
    let (set, at_ms) = match ZSet::of(registers, now_ms) {
        Ok(set) => (
            set,
            registers.get(zset::COLUMN, now_ms).map_or(0, |r| r.at_ms),
        ),
        Err(e) => return Some(Applied::read(Reply::err(format!("ERR {e}")))),
    };
    let mut next = set.clone();
    let reply = match run(&mut next, name, args) {
        Ok(reply) => reply,
        Err(e) => return Some(Applied::read(e)),
    };
    if next == set {
        return Some(Applied::read(reply));
    }
    if !next.fits() {
        return Some(Applied::read(Reply::err(format!(
            "ERR the sorted set would be over {} bytes",
            crate::base::strings::STRING_BYTES_MAX
        ))));
    }
    Some(Applied {
        next: Some(next.store(registers, at_ms)),
        reply,
    })
}

/// Whether `name` is a sorted-set command of this module.
pub(crate) fn is_command(name: &str) -> bool {
    writes(name)
        || matches!(
            name,
            "zcard"
                | "zscore"
                | "zmscore"
                | "zcount"
                | "zrank"
                | "zrevrank"
                | "zrange"
                | "zrevrange"
                | "zrangebyscore"
                | "zrevrangebyscore"
        )
}

/// Runs `name` on `set` in place; its reply, or an error that changes
/// nothing.
fn run(set: &mut ZSet, name: &str, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let arity = || {
        Reply::err(format!(
            "ERR wrong number of arguments for '{name}' command"
        ))
    };
    Ok(match (name, args) {
        ("zadd", _) => zadd(set, args)?,
        ("zincrby", [by, member]) => {
            let by = parse_score(by).ok_or_else(|| Reply::err(NOT_A_FLOAT))?;
            match set
                .add(member, by, AddOnly::default(), true)
                .map_err(Reply::err)?
            {
                Added::New(s) | Added::Changed(s) | Added::Same(s) => Reply::Double(s),
                Added::Skipped => Reply::NIL,
            }
        }
        ("zrem", members) if !members.is_empty() => {
            Reply::Int(members.iter().filter(|m| set.remove(m)).count() as i64)
        }
        ("zcard", []) => Reply::Int(set.len() as i64),
        ("zscore", [member]) => set.score(member).map_or(Reply::NIL, Reply::Double),
        ("zmscore", members) if !members.is_empty() => Reply::Array(
            members
                .iter()
                .map(|m| set.score(m).map_or(Reply::NIL, Reply::Double))
                .collect(),
        ),
        ("zcount", [min, max]) => Reply::Int(set.by_score(bound(min)?, bound(max)?).len() as i64),
        ("zrank" | "zrevrank", [member, opts @ ..]) if opts.len() <= 1 => {
            rank(set, name == "zrevrank", member, opts)?
        }
        ("zrange", [start, stop, opts @ ..]) => range(set, RangeArgs::zrange(start, stop, opts)?)?,
        ("zrevrange", [start, stop, opts @ ..]) => {
            let mut a = RangeArgs::zrange(start, stop, opts)?;
            if a.by_score || a.limit.is_some() {
                return Err(Reply::err(SYNTAX));
            }
            a.rev = true;
            range(set, a)?
        }
        ("zrangebyscore" | "zrevrangebyscore", [min, max, opts @ ..]) => {
            let mut words = vec![b"byscore".to_vec()];
            if name == "zrevrangebyscore" {
                words.push(b"rev".to_vec());
            }
            words.extend_from_slice(opts);
            range(set, RangeArgs::zrange(min, max, &words)?)?
        }
        ("zremrangebyscore", [min, max]) => {
            let ranks = set.by_score(bound(min)?, bound(max)?);
            Reply::Int(set.remove_ranks(ranks) as i64)
        }
        ("zremrangebyrank", [start, stop]) => {
            let ranks = set.by_rank(int_arg(start)?, int_arg(stop)?);
            Reply::Int(set.remove_ranks(ranks) as i64)
        }
        ("zpopmin" | "zpopmax", count) if count.len() <= 1 => {
            pop(set, name == "zpopmax", count.first())?
        }
        _ => return Err(arity()),
    })
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ...`.
fn zadd(set: &mut ZSet, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (mut only, mut ch, mut incr) = (AddOnly::default(), false, false);
    let mut at = 0;
    while let Some(word) = args.get(at) {
        match word.to_ascii_lowercase().as_slice() {
            b"nx" => only.new = true,
            b"xx" => only.existing = true,
            b"gt" => only.greater = true,
            b"lt" => only.less = true,
            b"ch" => ch = true,
            b"incr" => incr = true,
            _ => break,
        }
        at += 1;
    }
    let pairs = &args[at..];
    if pairs.is_empty() || pairs.len() % 2 == 1 {
        return Err(Reply::err(SYNTAX));
    }
    if only.new && only.existing {
        return Err(Reply::err(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (only.greater && only.less) || (only.new && (only.greater || only.less)) {
        return Err(Reply::err(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && pairs.len() > 2 {
        return Err(Reply::err(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let scores = pairs
        .chunks(2)
        .map(|p| parse_score(&p[0]).ok_or_else(|| Reply::err(NOT_A_FLOAT)))
        .collect::<Result<Vec<f64>, Reply>>()?;
    let mut count = 0;
    for (pair, score) in pairs.chunks(2).zip(scores) {
        let added = set.add(&pair[1], score, only, incr).map_err(Reply::err)?;
        if incr {
            return Ok(match added {
                Added::New(s) | Added::Changed(s) | Added::Same(s) => Reply::Double(s),
                Added::Skipped => Reply::NIL,
            });
        }
        count +=
            i64::from(matches!(added, Added::New(_)) || (ch && matches!(added, Added::Changed(_))));
    }
    Ok(Reply::Int(count))
}

fn bound(arg: &[u8]) -> Result<Bound, Reply> {
    Bound::parse(arg).ok_or_else(|| Reply::err(BOUND_NOT_A_FLOAT))
}

/// `ZRANK`/`ZREVRANK member [WITHSCORE]`.
fn rank(set: &ZSet, rev: bool, member: &[u8], opts: &[Vec<u8>]) -> Result<Reply, Reply> {
    let with_score = match opts {
        [] => false,
        [w] if w.eq_ignore_ascii_case(b"withscore") => true,
        _ => return Err(Reply::err(SYNTAX)),
    };
    let Some(i) = set.rank(member) else {
        return Ok(Reply::NIL);
    };
    let r = if rev { set.len() - 1 - i } else { i } as i64;
    Ok(match with_score {
        true => Reply::Array(vec![Reply::Int(r), Reply::Double(set.entries()[i].score)]),
        false => Reply::Int(r),
    })
}

/// A `ZRANGE`'s arguments, parsed.
#[derive(Debug, Default)]
struct RangeArgs {
    start: Vec<u8>,
    stop: Vec<u8>,
    by_score: bool,
    rev: bool,
    limit: Option<(i64, i64)>,
    with_scores: bool,
}

impl RangeArgs {
    /// `ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]`.
    fn zrange(start: &[u8], stop: &[u8], opts: &[Vec<u8>]) -> Result<RangeArgs, Reply> {
        let mut a = RangeArgs {
            start: start.to_vec(),
            stop: stop.to_vec(),
            ..RangeArgs::default()
        };
        let mut i = 0;
        while let Some(word) = opts.get(i) {
            match word.to_ascii_lowercase().as_slice() {
                b"byscore" => a.by_score = true,
                b"rev" => a.rev = true,
                b"withscores" => a.with_scores = true,
                b"bylex" => return Err(Reply::err("ERR BYLEX ranges are not supported")),
                b"limit" => match (opts.get(i + 1), opts.get(i + 2)) {
                    (Some(o), Some(c)) => {
                        a.limit = Some((int_arg(o)?, int_arg(c)?));
                        i += 2;
                    }
                    _ => return Err(Reply::err(SYNTAX)),
                },
                _ => return Err(Reply::err(SYNTAX)),
            }
            i += 1;
        }
        if a.limit.is_some() && !a.by_score {
            return Err(Reply::err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
            ));
        }
        Ok(a)
    }
}

/// A range of the set, as `ZRANGE` and its kin answer it.
fn range(set: &ZSet, a: RangeArgs) -> Result<Reply, Reply> {
    let ranks = match a.by_score {
        // Reversed, the first argument is the high end.
        true if a.rev => set.by_score(bound(&a.stop)?, bound(&a.start)?),
        true => set.by_score(bound(&a.start)?, bound(&a.stop)?),
        false => {
            let (start, stop) = (int_arg(&a.start)?, int_arg(&a.stop)?);
            let len = set.len() as i64;
            match a.rev {
                // By rank from the top: rank r from the end is len-1-r.
                true => {
                    let r = set.by_rank(start, stop);
                    (len as usize - r.end)..(len as usize - r.start)
                }
                false => set.by_rank(start, stop),
            }
        }
    };
    let mut picked: Vec<&zset::Entry> = set.entries()[ranks].iter().collect();
    if a.rev {
        picked.reverse();
    }
    if let Some((offset, count)) = a.limit {
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = usize::try_from(count).unwrap_or(usize::MAX);
        picked = picked.into_iter().skip(skip).take(take).collect();
    }
    Ok(entries_reply(&picked, a.with_scores))
}

/// Members (and their scores) as a range answers them.
fn entries_reply(entries: &[&zset::Entry], with_scores: bool) -> Reply {
    match with_scores {
        true => Reply::Pairs(
            entries
                .iter()
                .map(|e| (Reply::bulk(e.member.clone()), Reply::Double(e.score)))
                .collect(),
        ),
        false => Reply::Array(
            entries
                .iter()
                .map(|e| Reply::bulk(e.member.clone()))
                .collect(),
        ),
    }
}

/// `ZPOPMIN`/`ZPOPMAX [count]`.
fn pop(set: &mut ZSet, max: bool, count: Option<&Vec<u8>>) -> Result<Reply, Reply> {
    let n = match count {
        None => 1,
        Some(c) => match int_arg(c)? {
            n if n < 0 => return Err(Reply::err("ERR value is out of range, must be positive")),
            n => usize::try_from(n).unwrap_or(usize::MAX),
        },
    }
    .min(set.len());
    let ranks = match max {
        true => set.len() - n..set.len(),
        false => 0..n,
    };
    let mut taken: Vec<zset::Entry> = set.entries()[ranks.clone()].to_vec();
    set.remove_ranks(ranks);
    if max {
        taken.reverse();
    }
    let refs: Vec<&zset::Entry> = taken.iter().collect();
    Ok(match (count, entries_reply(&refs, true)) {
        // Without a count, one member and its score, flat (or nothing).
        (None, Reply::Pairs(p)) => Reply::Array(p.into_iter().flat_map(|(m, s)| [m, s]).collect()),
        (_, reply) => reply,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    /// Runs `line` (name, then the arguments after the key) on `state`.
    fn call(state: &mut Registers, line: &str) -> Reply {
        let w = words(line);
        let name = String::from_utf8_lossy(&w[0]).to_ascii_lowercase();
        let applied = apply(state, &name, &w[1..], NOW).expect("a sorted-set command");
        if let Some(next) = applied.next {
            *state = next;
        }
        applied.reply
    }

    fn bulks(items: &[&str]) -> Reply {
        Reply::Array(items.iter().map(|s| Reply::bulk(*s)).collect())
    }

    #[test]
    fn a_semaphore_acquires_refreshes_and_releases() {
        // redis-semaphore's acquire: drop the expired, count, add.
        let mut s = Registers::default();
        assert_eq!(call(&mut s, "zremrangebyscore -inf 900"), Reply::Int(0));
        assert_eq!(call(&mut s, "zcard"), Reply::Int(0));
        assert_eq!(call(&mut s, "zadd 1000 id-1"), Reply::Int(1));
        assert_eq!(call(&mut s, "zadd 1500 id-2"), Reply::Int(1));
        assert_eq!(call(&mut s, "zscore id-1"), Reply::Double(1000.0));
        assert_eq!(call(&mut s, "zadd 2000 id-1"), Reply::Int(0), "a refresh");
        assert_eq!(call(&mut s, "zremrangebyscore -inf 1500"), Reply::Int(1));
        assert_eq!(call(&mut s, "zrange 0 -1"), bulks(&["id-1"]));
        assert_eq!(call(&mut s, "zrem id-1 id-9"), Reply::Int(1));
        assert_eq!(s, Registers::default(), "an empty set is no set");
        assert_eq!(call(&mut s, "zscore id-1"), Reply::NIL);
    }

    #[test]
    fn ranges_answer_as_redis_does() {
        let mut s = Registers::default();
        call(&mut s, "zadd 1 a 2 b 3 c 4 d");
        assert_eq!(call(&mut s, "zrange 1 2"), bulks(&["b", "c"]));
        assert_eq!(call(&mut s, "zrange 0 1 rev"), bulks(&["d", "c"]));
        assert_eq!(call(&mut s, "zrevrange 0 0"), bulks(&["d"]));
        assert_eq!(call(&mut s, "zrange (1 3 byscore"), bulks(&["b", "c"]));
        assert_eq!(call(&mut s, "zrange 3 (1 byscore rev"), bulks(&["c", "b"]));
        assert_eq!(
            call(&mut s, "zrangebyscore -inf +inf limit 1 2"),
            bulks(&["b", "c"])
        );
        assert_eq!(
            call(&mut s, "zrevrangebyscore +inf 2"),
            bulks(&["d", "c", "b"])
        );
        assert_eq!(
            call(&mut s, "zrange 0 0 withscores"),
            Reply::Pairs(vec![(Reply::bulk("a"), Reply::Double(1.0))])
        );
        assert_eq!(call(&mut s, "zcount (1 3"), Reply::Int(2));
        assert_eq!(call(&mut s, "zrank c"), Reply::Int(2));
        assert_eq!(call(&mut s, "zrevrank c"), Reply::Int(1));
        assert_eq!(
            call(&mut s, "zrank c withscore"),
            Reply::Array(vec![Reply::Int(2), Reply::Double(3.0)])
        );
        assert_eq!(call(&mut s, "zrank x"), Reply::NIL);
        assert_eq!(
            call(&mut s, "zmscore a x"),
            Reply::Array(vec![Reply::Double(1.0), Reply::NIL])
        );
        assert_eq!(
            call(&mut s, "zpopmin"),
            Reply::Array(vec![Reply::bulk("a"), Reply::Double(1.0)])
        );
        assert_eq!(
            call(&mut s, "zpopmax 2"),
            Reply::Pairs(vec![
                (Reply::bulk("d"), Reply::Double(4.0)),
                (Reply::bulk("c"), Reply::Double(3.0)),
            ])
        );
        assert_eq!(call(&mut s, "zremrangebyrank 0 -1"), Reply::Int(1));
        assert_eq!(call(&mut s, "zcard"), Reply::Int(0));
        assert_eq!(
            call(&mut s, "zpopmax"),
            Reply::Array(vec![]),
            "nothing to pop"
        );
        assert_eq!(call(&mut s, "zpopmin 3"), Reply::Pairs(vec![]));
    }

    #[test]
    fn zadd_flags_and_errors_are_redis_ones() {
        let mut s = Registers::default();
        assert_eq!(call(&mut s, "zadd 1 a"), Reply::Int(1));
        assert_eq!(call(&mut s, "zadd ch 2 a 1 b"), Reply::Int(2));
        assert_eq!(call(&mut s, "zadd xx 5 c"), Reply::Int(0));
        assert_eq!(call(&mut s, "zadd incr 3 a"), Reply::Double(5.0));
        assert_eq!(call(&mut s, "zadd nx incr 3 a"), Reply::NIL);
        assert_eq!(call(&mut s, "zincrby -1.5 b"), Reply::Double(-0.5));
        let err = |r: Reply| match r {
            Reply::Error(e) => e,
            other => panic!("not an error: {other:?}"),
        };
        assert_eq!(err(call(&mut s, "zadd x a")), NOT_A_FLOAT);
        assert_eq!(err(call(&mut s, "zadd nan a")), NOT_A_FLOAT);
        assert_eq!(err(call(&mut s, "zadd 1 a 2")), SYNTAX);
        assert!(err(call(&mut s, "zadd nx xx 1 a")).contains("not compatible"));
        assert!(err(call(&mut s, "zadd gt lt 1 a")).contains("not compatible"));
        assert!(err(call(&mut s, "zadd incr 1 a 2 b")).contains("single"));
        assert_eq!(err(call(&mut s, "zcount x 1")), BOUND_NOT_A_FLOAT);
        assert!(err(call(&mut s, "zrange 0 1 limit 0 1")).contains("LIMIT"));
        assert_eq!(err(call(&mut s, "zrangebyscore 0 1 sideways")), SYNTAX);
        assert_eq!(
            call(&mut s, "zscore a"),
            Reply::Double(5.0),
            "errors change nothing"
        );
    }

    #[test]
    fn a_set_keeps_its_deadline_and_refuses_other_kinds() {
        let mut s = Registers::default();
        call(&mut s, "zadd 1 a");
        let mut timed = s.clone();
        timed.0[0].at_ms = NOW + 500;
        call(&mut timed, "zadd 2 b");
        assert_eq!(
            timed.get(zset::COLUMN, NOW).map(|r| r.at_ms),
            Some(NOW + 500)
        );
        let mut string = crate::base::strings::set_string(
            &Registers::default(),
            &crate::base::strings::SetString {
                value: b"v".to_vec(),
                ttl: tally_net::wire::Ttl::Clear,
                only: tally_net::wire::Presence::Any,
                get: false,
                compare: None,
            },
            NOW,
        )
        .0;
        assert_eq!(call(&mut string, "zadd 1 a"), Reply::err(WRONGTYPE));
        assert_eq!(call(&mut string, "zcard"), Reply::err(WRONGTYPE));
        assert!(apply(&s, "get", &[], NOW).is_none());
    }
}
