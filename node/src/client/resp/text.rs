//! Commands on a key's bytes: `APPEND`, `SETRANGE` (agreed changes of the
//! key's string, see `registers`), `STRLEN`, `GETRANGE`/`SUBSTR` and `LCS`
//! (reads). A counter reads as its decimal digits, as Redis keeps an
//! integer; a change of bytes over a live counter answers `WRONGTYPE` (a
//! key holds one kind: DEL it first). The rules (ranges, padding, the
//! longest common subsequence) are pure functions with unit tests.

use std::sync::Arc;

use tally_engine::now_ms;
use tally_net::wire::{Consistency, Register, Registers, WireKey};

use super::counters::{WRONGTYPE, int_arg, wire_err};
use super::proto::Reply;
use super::registers::STRING_BYTES_MAX;
use super::session::arity;
use crate::base::convert;
use crate::node::Node;

/// The column of a key's string (as `registers` keeps it).
const COLUMN: &[u8] = b"";

/// Answers `name` if it is one of this module's commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("append", 2) => change(node, cl, &rest[0], Edit::Append(rest[1].clone())).await,
        ("setrange", 3) => match int_arg(&rest[1]).and_then(offset) {
            Ok(at) => change(node, cl, &rest[0], Edit::SetRange(at, rest[2].clone())).await,
            Err(e) => e,
        },
        ("strlen", 1) => match value(node, cl, &rest[0]).await {
            Ok(v) => Reply::Int(v.map_or(0, |v| v.len() as i64)),
            Err(e) => e,
        },
        ("getrange" | "substr", 3) => match (int_arg(&rest[1]), int_arg(&rest[2])) {
            (Ok(start), Ok(end)) => match value(node, cl, &rest[0]).await {
                Ok(v) => Reply::bulk(range(&v.unwrap_or_default(), start, end)),
                Err(e) => e,
            },
            (Err(e), _) | (_, Err(e)) => e,
        },
        ("lcs", n) if n >= 2 => lcs(node, cl, rest).await,
        ("append" | "setrange" | "strlen" | "getrange" | "substr" | "lcs", _) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// A change of a string's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Edit {
    /// `APPEND`.
    Append(Vec<u8>),
    /// `SETRANGE`: these bytes from this offset, zeros before if short.
    SetRange(usize, Vec<u8>),
}

/// `SETRANGE`'s offset, as Redis checks it.
pub(crate) fn offset(n: i64) -> Result<usize, Reply> {
    usize::try_from(n).map_err(|_| Reply::err("ERR offset is out of range"))
}

/// The error of a string grown past [`STRING_BYTES_MAX`].
pub(crate) fn too_long() -> Reply {
    Reply::err(format!(
        "ERR string exceeds maximum allowed size ({STRING_BYTES_MAX} bytes)"
    ))
}

/// `edit` applied to `registers`' string (live at `now_ms`): the next
/// registers and the new length, or the length unchanged (an empty edit
/// makes no key), or `None` when it would grow past the limit.
pub(crate) fn edit_string(
    registers: &Registers,
    edit: &Edit,
    now_ms: u64,
) -> Option<(Registers, usize)> {
    let current = registers.get(COLUMN, now_ms);
    let mut value = current.map(|r| r.value.clone()).unwrap_or_default();
    let (at, bytes) = match edit {
        Edit::Append(b) => (value.len(), b),
        Edit::SetRange(at, b) => (*at, b),
    };
    if bytes.is_empty() {
        return Some((registers.clone(), value.len()));
    }
    let end = at
        .checked_add(bytes.len())
        .filter(|e| *e <= STRING_BYTES_MAX)?;
    if value.len() < end {
        value.resize(end, 0);
    }
    value[at..end].copy_from_slice(bytes);
    let len = value.len();
    let mut next = registers.clone();
    next.put(Register {
        column: COLUMN.to_vec(),
        value,
        at_ms: current.map_or(0, |r| r.at_ms),
    });
    Some((next, len))
}

/// Makes `edit` to `key`'s string, agreed; answers the new length.
async fn change(node: &Arc<Node>, cl: Consistency, key: &[u8], edit: Edit) -> Reply {
    match node.get_cell(&WireKey::new(key, COLUMN), cl).await {
        Ok(c) if c.live(now_ms()) => return Reply::err(WRONGTYPE),
        Ok(_) => {}
        Err(e) => return wire_err(&e),
    }
    let done = node
        .agree(key, move |registers, now| {
            Ok(match edit_string(registers, &edit, now) {
                Some((next, len)) => (next, Some(len)),
                None => (registers.clone(), None),
            })
        })
        .await;
    match done {
        Ok(Some(len)) => Reply::Int(len as i64),
        Ok(None) => too_long(),
        Err(e) => wire_err(&e),
    }
}

/// `key`'s bytes: its counter's decimal digits when it holds a live
/// counter, else its string, if any.
pub(crate) async fn value(
    node: &Arc<Node>,
    cl: Consistency,
    key: &[u8],
) -> Result<Option<Vec<u8>>, Reply> {
    let cell = node
        .get_cell(&WireKey::new(key, COLUMN), cl)
        .await
        .map_err(|e| wire_err(&e))?;
    match convert::live_value(&cell, now_ms()) {
        Ok(Some(v)) => return Ok(Some(v.to_string().into_bytes())),
        Ok(None) => {}
        Err(e) => return Err(wire_err(&e)),
    }
    super::registers::get(node, key)
        .await
        .map_err(|e| wire_err(&e))
}

/// `GETRANGE`'s bytes of `v` from `start` to `end`, both inclusive,
/// negative counting from the end, as Redis clamps them.
pub(crate) fn range(v: &[u8], start: i64, end: i64) -> Vec<u8> {
    let len = v.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return Vec::new();
    }
    let from_end = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (from_end(start), from_end(end).min(len - 1));
    if start > end {
        return Vec::new();
    }
    v[start as usize..=end as usize].to_vec()
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`: the two
/// keys are read one after the other (a change between them is seen by
/// the second read only).
async fn lcs(node: &Arc<Node>, cl: Consistency, rest: &[Vec<u8>]) -> Reply {
    let opts = match lcs_opts(&rest[2..]) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut values = Vec::with_capacity(2);
    for key in &rest[..2] {
        match value(node, cl, key).await {
            Ok(v) => values.push(v.unwrap_or_default()),
            Err(e) => return e,
        }
    }
    lcs_reply(&values[0], &values[1], &opts)
}

/// `LCS`'s options.
#[derive(Debug, Default, PartialEq, Eq)]
struct LcsOpts {
    len: bool,
    idx: bool,
    min_match_len: usize,
    with_match_len: bool,
}

fn lcs_opts(words: &[Vec<u8>]) -> Result<LcsOpts, Reply> {
    let mut o = LcsOpts::default();
    let mut i = 0;
    while i < words.len() {
        match words[i].to_ascii_lowercase().as_slice() {
            b"len" => o.len = true,
            b"idx" => o.idx = true,
            b"withmatchlen" => o.with_match_len = true,
            b"minmatchlen" if i + 1 < words.len() => {
                i += 1;
                o.min_match_len = usize::try_from(int_arg(&words[i])?).unwrap_or(0);
            }
            _ => return Err(Reply::err("ERR syntax error")),
        }
        i += 1;
    }
    if o.len && o.idx {
        return Err(Reply::err(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    Ok(o)
}

/// The largest table `LCS` fills (4 bytes a cell): longer strings are
/// refused rather than take the node's memory.
const LCS_CELLS_MAX: usize = 1 << 24;

/// A run of matching bytes: its ranges in the first and the second
/// string, both inclusive.
type Run = ((usize, usize), (usize, usize));

/// The longest common subsequence of `a` and `b`, as `LCS` answers it
/// with `opts` (Redis' dynamic programme, and its walk back from the end
/// for the matches).
fn lcs_reply(a: &[u8], b: &[u8], opts: &LcsOpts) -> Reply {
    let (n, m) = (a.len(), b.len());
    if (n + 1).saturating_mul(m + 1) > LCS_CELLS_MAX {
        return Reply::err(format!(
            "ERR strings too long for LCS (their lengths' product is at most {LCS_CELLS_MAX} here)"
        ));
    }
    // table[i][j]: the LCS length of a[..i] and b[..j].
    let mut table = vec![vec![0u32; m + 1]; n + 1];
    for i in 1..=n {
        for j in 1..=m {
            table[i][j] = match a[i - 1] == b[j - 1] {
                true => table[i - 1][j - 1] + 1,
                false => table[i - 1][j].max(table[i][j - 1]),
            };
        }
    }
    let total = table[n][m];
    if opts.len {
        return Reply::Int(i64::from(total));
    }
    let (mut i, mut j) = (n, m);
    let mut lcs = Vec::with_capacity(total as usize);
    let mut matches: Vec<Run> = Vec::new();
    // The current run of matches.
    let mut run: Option<Run> = None;
    let mut close = |run: &mut Option<Run>| {
        if let Some(r) = run.take()
            && r.0.1 - r.0.0 + 1 >= opts.min_match_len
        {
            matches.push(r);
        }
    };
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            lcs.push(a[i - 1]);
            let (ai, bj) = (i - 1, j - 1);
            run = match run {
                // Walking back: a match just before the run extends it.
                Some(((a_from, a_to), (b_from, b_to))) if a_from == ai + 1 && b_from == bj + 1 => {
                    Some(((ai, a_to), (bj, b_to)))
                }
                _ => {
                    close(&mut run);
                    Some(((ai, ai), (bj, bj)))
                }
            };
            i -= 1;
            j -= 1;
        } else if table[i - 1][j] > table[i][j - 1] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    close(&mut run);
    if !opts.idx {
        lcs.reverse();
        return Reply::bulk(lcs);
    }
    let pair = |(from, to): (usize, usize)| {
        Reply::Array(vec![Reply::Int(from as i64), Reply::Int(to as i64)])
    };
    let matches = matches
        .into_iter()
        .map(|(ra, rb)| {
            let mut m = vec![pair(ra), pair(rb)];
            if opts.with_match_len {
                m.push(Reply::Int((ra.1 - ra.0 + 1) as i64));
            }
            Reply::Array(m)
        })
        .collect();
    Reply::Map(vec![
        (Reply::bulk("matches"), Reply::Array(matches)),
        (Reply::bulk("len"), Reply::Int(i64::from(total))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &[u8]) -> Registers {
        Registers(vec![Register {
            column: Vec::new(),
            value: s.to_vec(),
            at_ms: 0,
        }])
    }

    fn edited(r: &Registers, edit: Edit) -> Option<(Vec<u8>, usize)> {
        let (next, len) = edit_string(r, &edit, 0)?;
        Some((next.get(COLUMN, 0)?.value.clone(), len))
    }

    #[test]
    fn append_and_setrange_edit_bytes_as_redis_does() {
        let none = Registers::default();
        assert_eq!(
            edited(&none, Edit::Append(b"ab".to_vec())),
            Some((b"ab".to_vec(), 2))
        );
        assert_eq!(
            edited(&string(b"ab"), Edit::Append(b"cd".to_vec())),
            Some((b"abcd".to_vec(), 4))
        );
        assert_eq!(
            edited(&string(b"hello"), Edit::SetRange(1, b"EL".to_vec())),
            Some((b"hELlo".to_vec(), 5))
        );
        // Past the end: zeros between.
        assert_eq!(
            edited(&none, Edit::SetRange(3, b"x".to_vec())),
            Some((b"\0\0\0x".to_vec(), 4))
        );
        // Nothing to write: no key made, the length answered.
        assert_eq!(
            edit_string(&none, &Edit::SetRange(9, Vec::new()), 0),
            Some((none.clone(), 0))
        );
        let five = string(b"12345");
        assert_eq!(
            edit_string(&five, &Edit::Append(Vec::new()), 0),
            Some((five, 5))
        );
        // Too long: refused.
        let big = Edit::SetRange(STRING_BYTES_MAX, b"x".to_vec());
        assert_eq!(edit_string(&none, &big, 0), None);
        assert_eq!(
            edit_string(&none, &Edit::SetRange(usize::MAX, b"x".to_vec()), 0),
            None
        );
    }

    #[test]
    fn an_edit_keeps_the_deadline() {
        let mut r = string(b"a");
        r.0[0].at_ms = 99;
        let (next, _) = edit_string(&r, &Edit::Append(b"b".to_vec()), 0).unwrap_or_default();
        assert_eq!(next.get(COLUMN, 0).map(|r| r.at_ms), Some(99));
    }

    #[test]
    fn ranges_clamp_as_redis_does() {
        let v = b"This is a string";
        assert_eq!(range(v, 0, 3), b"This");
        assert_eq!(range(v, -3, -1), b"ing");
        assert_eq!(range(v, 0, -1), v);
        assert_eq!(range(v, 10, 100), b"string");
        assert_eq!(range(v, 5, 3), b"");
        assert_eq!(range(v, -1, -5), b"");
        assert_eq!(range(v, -100, 2), b"Thi");
        assert_eq!(range(b"", 0, -1), b"");
    }

    #[test]
    fn lcs_answers_as_redis_does() {
        let (a, b) = (b"ohmytext", b"mynewtext");
        let opts = |words: &[&str]| {
            lcs_opts(
                &words
                    .iter()
                    .map(|w| w.as_bytes().to_vec())
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(lcs_reply(a, b, &LcsOpts::default()), Reply::bulk("mytext"));
        assert_eq!(
            lcs_reply(a, b, &opts(&["LEN"]).unwrap_or_default()),
            Reply::Int(6)
        );
        let p = |x: i64, y: i64| Reply::Array(vec![Reply::Int(x), Reply::Int(y)]);
        let idx = lcs_reply(
            a,
            b,
            &opts(&["IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"]).unwrap_or_default(),
        );
        assert_eq!(
            idx,
            Reply::Map(vec![
                (
                    Reply::bulk("matches"),
                    Reply::Array(vec![Reply::Array(vec![p(4, 7), p(5, 8), Reply::Int(4)])])
                ),
                (Reply::bulk("len"), Reply::Int(6)),
            ])
        );
        let all = lcs_reply(a, b, &opts(&["IDX"]).unwrap_or_default());
        assert_eq!(
            all,
            Reply::Map(vec![
                (
                    Reply::bulk("matches"),
                    Reply::Array(vec![
                        Reply::Array(vec![p(4, 7), p(5, 8)]),
                        Reply::Array(vec![p(2, 3), p(0, 1)]),
                    ])
                ),
                (Reply::bulk("len"), Reply::Int(6)),
            ])
        );
        assert!(opts(&["LEN", "IDX"]).is_err());
        let long = vec![b'x'; 1 << 13];
        assert!(lcs_reply(&long, &long, &LcsOpts::default()).is_error());
        assert!(opts(&["FOO"]).is_err());
    }
}
