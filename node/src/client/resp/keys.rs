//! Listing keys: `SCAN`, `KEYS`, `DBSIZE`, `RANDOMKEY`, `HSCAN`
//! (see `scan` for how a scan walks the cluster); and emptying databases:
//! `FLUSHDB`, `FLUSHALL` (see `topology::flush`: `ASYNC` and `SYNC` both
//! answer once every member reads the database as empty, and each node
//! drops the old cells in the background).
//!
//! A key is listed by the kind Redis would give it: `string` (a counter),
//! `list`, `hash` (a partition's columns), `set` (a unique counter); a
//! partition holding several is listed once, by the first of them in key
//! order, the kind `TYPE` names it by (`generic::kind`). `COUNT` is a
//! hint, as in Redis: a step answers at least that many keys unless the
//! scan ends, and often more (a page reads at least [`PAGE_MIN`]). `KEYS`
//! and `DBSIZE` walk the whole keyspace: their time grows with it.
//! `HSCAN` answers a whole row in one step, as Redis does for small hashes.

use std::sync::Arc;

use tally_net::wire::{Consistency, SCAN_KEYS_MAX, WireError, WireKeys, WireScan};

use super::counters::int_arg;
use super::cursors::Place;
use super::generic::type_name;
use super::glob;
use super::proto::Reply;
use super::session::{Session, arity};
use crate::node::Node;

/// Keys one page reads at least.
const PAGE_MIN: usize = 1000;
/// Pages one `SCAN` step reads at most, when a `MATCH` or `TYPE` leaves
/// too few keys: the step answers what it found.
const PAGES_PER_STEP: usize = 8;
/// Most keys `KEYS` answers.
pub(crate) const KEYS_MAX: usize = 1_000_000;

/// Answers `name` if it is one of this module's keyless commands.
pub(crate) async fn execute(
    node: &Arc<Node>,
    s: &Session,
    name: &str,
    args: &[Vec<u8>],
) -> Option<Reply> {
    let rest = &args[1..];
    let reply = match (name, rest.len()) {
        ("scan", n) if n >= 1 => scan(node, s, rest).await,
        ("keys", 1) => keys(node, s, &rest[0]).await,
        ("dbsize", 0) => dbsize(node, s).await,
        ("randomkey", 0) => randomkey(node, s).await,
        ("flushdb", n) if n <= 1 => flush(node, Some(s.db), rest).await,
        ("flushall", n) if n <= 1 => flush(node, None, rest).await,
        ("swapdb", 2) => Reply::err(
            "ERR SWAPDB is not supported: Tally's databases are keyspaces of the cluster",
        ),
        ("scan" | "keys" | "dbsize" | "randomkey" | "swapdb" | "flushdb" | "flushall", _) => {
            arity(name)
        }
        _ => return None,
    };
    Some(reply)
}

/// `FLUSHDB` of `db`, or `FLUSHALL` (`None`), `[ASYNC|SYNC]`.
async fn flush(node: &Arc<Node>, db: Option<u8>, rest: &[Vec<u8>]) -> Reply {
    if let Some(mode) = rest.first()
        && !mode.eq_ignore_ascii_case(b"async")
        && !mode.eq_ignore_ascii_case(b"sync")
    {
        return Reply::err("ERR syntax error");
    }
    let flushed = match db {
        Some(db) => node.flush(&[db]).await,
        None => node.flush_all().await,
    };
    match flushed {
        Ok(()) => Reply::Simple("OK"),
        Err(e) => Reply::err(format!("ERR {}", e.message)),
    }
}

/// Answers `name` if it is one of this module's keyed commands (its key
/// already as stored).
pub(crate) async fn keyed(
    node: &Arc<Node>,
    cl: Consistency,
    name: &str,
    rest: &[Vec<u8>],
) -> Option<Reply> {
    let reply = match (name, rest.len()) {
        ("hscan", n) if n >= 2 => hscan(node, cl, rest).await,
        ("move", 2) => {
            Reply::err("ERR MOVE is not supported: Tally's databases are keyspaces of the cluster")
        }
        ("hscan" | "move", _) => arity(name),
        _ => return None,
    };
    Some(reply)
}

/// The options of `SCAN` and `HSCAN`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Options {
    pub(crate) pattern: Option<Vec<u8>>,
    pub(crate) count: usize,
    pub(crate) kind: Option<Vec<u8>>,
    pub(crate) novalues: bool,
}

/// Parses `[MATCH p] [COUNT n] [TYPE t] [NOVALUES]` as Redis does (`TYPE`
/// for `SCAN`, `NOVALUES` for `HSCAN`).
pub(crate) fn options(opts: &[Vec<u8>], hash: bool) -> Result<Options, Reply> {
    let mut o = Options {
        count: 10,
        ..Options::default()
    };
    let syntax = || Reply::err("ERR syntax error");
    let mut i = 0;
    while i < opts.len() {
        let word = opts[i].to_ascii_lowercase();
        let value = opts.get(i + 1);
        match (word.as_slice(), value) {
            (b"match", Some(p)) => o.pattern = Some(p.clone()),
            (b"count", Some(n)) => {
                let n = int_arg(n)?;
                o.count = usize::try_from(n)
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(syntax)?;
            }
            (b"type", Some(t)) if !hash => o.kind = Some(t.to_ascii_lowercase()),
            (b"novalues", _) if hash => {
                o.novalues = true;
                i += 1;
                continue;
            }
            _ => return Err(syntax()),
        }
        i += 2;
    }
    Ok(o)
}

/// The literal start of a glob pattern: every key it matches begins with it.
pub(crate) fn literal_prefix(pattern: &[u8]) -> &[u8] {
    let end = pattern
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    &pattern[..end]
}

/// The keys of one page that a step lists, given the partition seen
/// last (which a page may begin with again); updates it. A partition is
/// of the kind it is first seen with: its other kinds are not listed.
fn listed(page: &WireKeys, o: &Options, last: &mut Option<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for s in &page.keys {
        if last.as_deref() == Some(s.partition.as_slice()) {
            continue;
        }
        *last = Some(s.partition.clone());
        let wanted = o
            .kind
            .as_deref()
            .is_none_or(|k| k == type_name(Some(s.kind)).as_bytes())
            && o.pattern
                .as_deref()
                .is_none_or(|p| glob::matches(p, &s.partition));
        if wanted {
            out.push(s.partition.clone());
        }
    }
    out
}

/// The first scan request of a keyspace for a pattern.
fn first_page(db: u8, o: &Options, limit: usize) -> WireScan {
    let prefix = o.pattern.as_deref().map_or(&[][..], literal_prefix);
    WireScan {
        db,
        prefix: prefix.to_vec(),
        after: None,
        limit: limit.clamp(PAGE_MIN, SCAN_KEYS_MAX) as u32,
    }
}

/// `SCAN cursor [MATCH p] [COUNT n] [TYPE t]`.
async fn scan(node: &Arc<Node>, s: &Session, rest: &[Vec<u8>]) -> Reply {
    let o = match options(&rest[1..], false) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let cursor = std::str::from_utf8(&rest[0])
        .ok()
        .and_then(|c| c.parse::<u64>().ok());
    let (mut req, mut last) = match cursor {
        Some(0) => (first_page(s.db, &o, o.count), None),
        Some(id) => match s.shared.cursors().place(id) {
            Some(p) => {
                let req = WireScan {
                    after: Some(p.after),
                    ..first_page(p.db, &o, o.count)
                };
                (req, p.last)
            }
            None => return Reply::err("ERR invalid cursor"),
        },
        None => return Reply::err("ERR invalid cursor"),
    };
    let mut keys = Vec::new();
    for _ in 0..PAGES_PER_STEP {
        let page = match node.scan(req.clone(), s.cl).await {
            Ok(p) => p,
            Err(e) => return scan_err(&e),
        };
        keys.extend(listed(&page, &o, &mut last));
        req.after = page.more;
        if req.after.is_none() || keys.len() >= o.count {
            break;
        }
    }
    let next = match req.after {
        None => 0,
        Some(after) => s.shared.cursors().issue(Place {
            db: req.db,
            after,
            last,
        }),
    };
    Reply::Array(vec![
        Reply::bulk(next.to_string()),
        Reply::Array(keys.into_iter().map(Reply::bulk).collect()),
    ])
}

fn scan_err(e: &WireError) -> Reply {
    Reply::err(format!("ERR scan failed: {}", e.message))
}

/// Walks the whole keyspace of `req`, giving each listed key to `each`
/// until it says stop.
async fn walk(
    node: &Arc<Node>,
    cl: Consistency,
    mut req: WireScan,
    o: &Options,
    mut each: impl FnMut(Vec<u8>) -> bool,
) -> Result<(), Reply> {
    let mut last = None;
    loop {
        let page = node.scan(req.clone(), cl).await.map_err(|e| scan_err(&e))?;
        for k in listed(&page, o, &mut last) {
            if !each(k) {
                return Ok(());
            }
        }
        match page.more {
            Some(after) => req.after = Some(after),
            None => return Ok(()),
        }
    }
}

/// `KEYS pattern`: at most [`KEYS_MAX`] keys.
async fn keys(node: &Arc<Node>, s: &Session, pattern: &[u8]) -> Reply {
    let o = Options {
        pattern: (!glob::matches_all(pattern)).then(|| pattern.to_vec()),
        ..Options::default()
    };
    let mut found = Vec::new();
    let mut over = false;
    let walked = walk(node, s.cl, first_page(s.db, &o, SCAN_KEYS_MAX), &o, |k| {
        over = found.len() == KEYS_MAX;
        found.push(Reply::bulk(k));
        !over
    })
    .await;
    match (walked, over) {
        (Err(e), _) => e,
        (Ok(()), true) => Reply::err(format!(
            "ERR KEYS would answer more than {KEYS_MAX} keys: use SCAN"
        )),
        (Ok(()), false) => Reply::Array(found),
    }
}

/// `DBSIZE`: counts the keys of the keyspace (a whole scan).
async fn dbsize(node: &Arc<Node>, s: &Session) -> Reply {
    let o = Options::default();
    let mut n = 0i64;
    let walked = walk(node, s.cl, first_page(s.db, &o, SCAN_KEYS_MAX), &o, |_| {
        n += 1;
        true
    })
    .await;
    match walked {
        Ok(()) => Reply::Int(n),
        Err(e) => e,
    }
}

/// `RANDOMKEY`: the first key after a random place, or the first key.
async fn randomkey(node: &Arc<Node>, s: &Session) -> Reply {
    let o = Options::default();
    let mut place = crate::base::keyspace::Keyspace {
        db: s.db,
        generation: 0,
    }
    .prefix();
    place.extend_from_slice(&rand_bytes());
    let from_random = WireScan {
        after: Some(tally_net::wire::WireKey::new(&place, b"")),
        ..first_page(s.db, &o, 1)
    };
    for req in [from_random, first_page(s.db, &o, 1)] {
        let mut found = None;
        if let Err(e) = walk(node, s.cl, req, &o, |k| {
            found = Some(k);
            false
        })
        .await
        {
            return e;
        }
        if let Some(k) = found {
            return Reply::bulk(k);
        }
    }
    Reply::NIL
}

/// Eight bytes that differ from call to call (a place to start from, not a secret).
fn rand_bytes() -> [u8; 8] {
    tally_world::random_u64().to_be_bytes()
}

/// `HSCAN key cursor [MATCH p] [COUNT n] [NOVALUES]`: the whole row, and
/// cursor 0.
async fn hscan(node: &Arc<Node>, cl: Consistency, rest: &[Vec<u8>]) -> Reply {
    let o = match options(&rest[2..], true) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if rest[1] != b"0" {
        return Reply::err("ERR invalid cursor");
    }
    let row = match super::hashes::row(node, cl, &rest[0]).await {
        Ok(row) => row,
        Err(e) => return Reply::err(format!("ERR {}", e.message)),
    };
    let mut items = Vec::new();
    for (field, value) in row {
        if o.pattern
            .as_deref()
            .is_none_or(|p| glob::matches(p, &field))
        {
            items.push(Reply::bulk(field));
            if !o.novalues {
                items.push(Reply::bulk(value));
            }
        }
    }
    Reply::Array(vec![Reply::bulk("0"), Reply::Array(items)])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use tally_net::wire::{WireKind, WireScanned};

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split(' ')
            .filter(|w| !w.is_empty())
            .map(|w| w.as_bytes().to_vec())
            .collect()
    }

    #[test]
    fn scan_options_follow_redis() {
        let o = options(&words("MATCH user:* COUNT 100 TYPE Hash"), false).unwrap();
        assert_eq!(o.pattern.as_deref(), Some(&b"user:*"[..]));
        assert_eq!((o.count, o.kind.as_deref()), (100, Some(&b"hash"[..])));
        assert_eq!(options(&[], false).unwrap().count, 10);
        for bad in [
            "COUNT 0", "COUNT -1", "MATCH", "COUNT", "NOVALUES", "FOO 1", "TYPE",
        ] {
            assert!(options(&words(bad), false).is_err(), "{bad}");
        }
        assert!(options(&words("COUNT x"), false).is_err());
        assert!(options(&words("NOVALUES MATCH f*"), true).unwrap().novalues);
        assert!(
            options(&words("TYPE string"), true).is_err(),
            "no TYPE for HSCAN"
        );
    }

    #[test]
    fn a_pattern_scans_from_its_literal_start() {
        assert_eq!(literal_prefix(b"user:*"), b"user:");
        assert_eq!(literal_prefix(b"a?c"), b"a");
        assert_eq!(literal_prefix(b"[ab]*"), b"");
        assert_eq!(literal_prefix(b"x\\*y"), b"x");
        assert_eq!(literal_prefix(b"exact"), b"exact");
    }

    #[test]
    fn a_step_lists_each_partition_once_by_kind_and_pattern() {
        let s = |p: &str, kind| WireScanned {
            partition: p.into(),
            column: Vec::new(),
            kind,
        };
        let page = WireKeys {
            keys: vec![
                s("a", WireKind::Counter),
                s("b", WireKind::Counter),
                s("b", WireKind::Row),
                s("c", WireKind::Unique),
                s("d", WireKind::Row),
                s("d", WireKind::Unique),
            ],
            more: None,
        };
        let mut last = Some(b"a".to_vec());
        assert_eq!(
            listed(&page, &Options::default(), &mut last),
            [b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        assert_eq!(last.as_deref(), Some(&b"d"[..]));
        let of = |kind: &str| Options {
            kind: Some(kind.as_bytes().to_vec()),
            ..Options::default()
        };
        // `b` is a string and `d` a hash, as `TYPE` names them.
        assert_eq!(listed(&page, &of("hash"), &mut None), [b"d".to_vec()]);
        assert_eq!(listed(&page, &of("set"), &mut None), [b"c".to_vec()]);
        assert_eq!(
            listed(&page, &of("string"), &mut None),
            [b"a".to_vec(), b"b".to_vec()]
        );
        let mut last = None;
        assert!(listed(&page, &of("list"), &mut last).is_empty());
        assert_eq!(last.as_deref(), Some(&b"d"[..]), "seen, if not listed");
        let pattern = Options {
            pattern: Some(b"[ac]".to_vec()),
            ..Options::default()
        };
        assert_eq!(
            listed(&page, &pattern, &mut None),
            [b"a".to_vec(), b"c".to_vec()]
        );
    }
}
