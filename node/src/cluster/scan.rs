//! Listing keys, cluster-wide: what `SCAN`, `KEYS`, `DBSIZE` and
//! `tally scan` read.
//!
//! A scan walks the live keys of one keyspace (see `keyspace`) in key
//! order, a page at a time. For a page the coordinator picks, for every
//! token range of its ring, as many live replicas as the level asks (this
//! node first when it is one: [`plan`]), and asks each chosen node for its
//! first live keys after the last page's end, in the ranges it was chosen
//! for (`serve`). A node answers in key order and says where it stopped
//! when it stopped before its end. The page is every key up to the
//! earliest of those stops ([`merge`]): up to there every node said all it
//! holds, so no key is skipped, and the next page begins after it, so none
//! is read twice.
//!
//! So when nothing changes, a whole scan lists every live key once
//! (Redis' guarantee); a key written or removed meanwhile may or may not be
//! listed. At ONE a range needs one live replica, so a scan goes on while
//! a node is down; at QUORUM and ALL a key is listed if one of the
//! replicas read holds it live. A partition is listed once per kind it
//! holds (a counter, a row of columns, a unique counter), and a page may
//! end inside a partition, so the next may list it again: callers skip
//! the partition they listed last.

pub(crate) mod serve;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tally_net::ring::{Replicas, TABLE_PREFIX_BYTES, TokenRange, is_table_partition};
use tally_net::wire::{
    Consistency, ErrorKind, PeerRequest, PeerResponse, WireError, WireKeys, WireRange, WireScan,
    WireScanned,
};
use tokio::task::JoinSet;

use crate::base::keyspace::Keyspace;
use crate::cluster::ctx::Ctx;

/// What a scan walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    /// A Redis database's keyspace.
    Db(Keyspace),
    /// A CQL table's partitions: those that begin with its prefix (see
    /// `tally_net::ring::is_table_partition`); a partition as the client
    /// names it is what follows (its token, in a table in token order,
    /// then its partition key).
    Table([u8; TABLE_PREFIX_BYTES]),
}

impl Space {
    /// The bytes every stored partition of the space begins with.
    pub(crate) fn prefix(self) -> Vec<u8> {
        match self {
            Space::Db(k) => k.prefix(),
            Space::Table(t) => t.to_vec(),
        }
    }

    /// The stored partition of a client's.
    pub(crate) fn stored(self, partition: &[u8]) -> Result<Vec<u8>, WireError> {
        match self {
            Space::Db(k) => Ok(k.stored(partition)?),
            Space::Table(t) => Ok([&t[..], partition].concat()),
        }
    }

    /// The client's partition of a stored one, if it is the space's.
    pub(crate) fn client(self, stored: &[u8]) -> Option<&[u8]> {
        match self {
            Space::Db(k) => k.client(stored),
            Space::Table(t) => stored.strip_prefix(&t[..]),
        }
    }

    /// The table a `ScanTable` names, checked.
    pub(crate) fn table(prefix: &[u8]) -> Result<Space, WireError> {
        match <[u8; TABLE_PREFIX_BYTES]>::try_from(prefix) {
            Ok(t) if is_table_partition(&t) => Ok(Space::Table(t)),
            _ => Err(WireError::not_applied(
                ErrorKind::Invalid,
                "a table's prefix is its mark and 6 bytes",
            )),
        }
    }
}

/// How long one node may take to answer a page.
const PAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// A range no page can read: fewer of its replicas are live than the level asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Short {
    pub(crate) range: TokenRange,
    pub(crate) live: usize,
    pub(crate) required: usize,
}

/// The nodes a page asks, each with the ranges it answers for: for each
/// range, the first of its live replicas (`live` lists them, this node
/// first) as many as `cl` requires.
pub(crate) fn plan(
    ranges: Vec<(TokenRange, Replicas)>,
    live: impl Fn(&[usize]) -> Vec<usize>,
    cl: Consistency,
) -> Result<BTreeMap<usize, Vec<TokenRange>>, Short> {
    let mut nodes: BTreeMap<usize, Vec<TokenRange>> = BTreeMap::new();
    for (range, replicas) in ranges {
        let up = live(&replicas);
        let required = cl.required(replicas.len());
        if up.len() < required {
            return Err(Short {
                range,
                live: up.len(),
                required,
            });
        }
        for &node in &up[..required] {
            nodes.entry(node).or_default().push(range);
        }
    }
    Ok(nodes)
}

/// Where a key stands in the engine's order: its stored partition, then
/// its column.
fn position(space: Space, s: &WireScanned) -> (Vec<u8>, Vec<u8>) {
    let mut stored = space.prefix();
    stored.extend_from_slice(&s.partition);
    (stored, s.column.clone())
}

/// One page out of the nodes' pages: their keys up to the earliest place
/// one of them stopped (all of them if none did), each key once, in key
/// order; and that place, to go on after.
pub(crate) fn merge(space: Space, pages: Vec<WireKeys>) -> WireKeys {
    let bound = pages
        .iter()
        .filter_map(|p| p.more.as_ref())
        .min_by(|a, b| (a.partition(), a.column()).cmp(&(b.partition(), b.column())))
        .cloned();
    let within = |at: &(Vec<u8>, Vec<u8>)| {
        bound
            .as_ref()
            .is_none_or(|b| (at.0.as_slice(), at.1.as_slice()) <= (b.partition(), b.column()))
    };
    // (partition, kind) → (position, key): the first position wins.
    let mut keys = BTreeMap::new();
    for s in pages.into_iter().flat_map(|p| p.keys) {
        let at = position(space, &s);
        if within(&at) {
            let id = (s.partition.clone(), s.kind as u8);
            match keys.get(&id) {
                Some((have, _)) if *have <= at => {}
                _ => {
                    keys.insert(id, (at, s));
                }
            }
        }
    }
    let mut keys: Vec<_> = keys.into_values().collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    WireKeys {
        keys: keys.into_iter().map(|(_, s)| s).collect(),
        more: bound,
    }
}

/// One page of a scan at `cl` (see the module docs).
pub(crate) async fn page(
    ctx: &Arc<Ctx>,
    scan: WireScan,
    cl: Consistency,
) -> Result<WireKeys, WireError> {
    let whole = WireRange { start: 0, end: 0 };
    serve::check(&scan, &[whole])?;
    pages(ctx, Space::Db(ctx.keyspace(scan.db)), scan, cl).await
}

/// One page of the live partitions of a CQL table at `cl`: `scan.db` is
/// 0, and its prefix one of the partition key.
pub(crate) async fn table_page(
    ctx: &Arc<Ctx>,
    table: [u8; TABLE_PREFIX_BYTES],
    scan: WireScan,
    cl: Consistency,
) -> Result<WireKeys, WireError> {
    let whole = WireRange { start: 0, end: 0 };
    serve::check_table(&scan, &[whole])?;
    pages(ctx, Space::Table(table), scan, cl).await
}

/// A page of `space`: each node's pages merged.
async fn pages(
    ctx: &Arc<Ctx>,
    space: Space,
    scan: WireScan,
    cl: Consistency,
) -> Result<WireKeys, WireError> {
    let plan = plan(ctx.ring().ranges(), |r| ctx.live(r), cl).map_err(|s| {
        WireError::not_applied(
            ErrorKind::Unavailable,
            format!(
                "scan at {cl}: {} of the {} replicas it needs of the range ({}, {}] are live",
                s.live, s.required, s.range.start, s.range.end
            ),
        )
    })?;
    let mut calls = JoinSet::new();
    for (node, ranges) in plan {
        let (ctx, scan) = (ctx.clone(), scan.clone());
        calls.spawn(async move {
            let answer = ask(&ctx, node, (space, scan), ranges).await;
            answer.map_err(|e| format!("{}: {e}", ctx.name(node)))
        });
    }
    let mut pages = Vec::new();
    while let Some(done) = calls.join_next().await {
        let failed =
            |why: String| WireError::new(ErrorKind::Timeout, format!("scan at {cl}: {why}"));
        pages.push(done.map_err(|e| failed(e.to_string()))?.map_err(failed)?);
    }
    Ok(merge(space, pages))
}

/// Asks `node` (this one too) for its page of `ranges` of `scan` (in
/// `space`, the keyspace of its database now).
async fn ask(
    ctx: &Arc<Ctx>,
    node: usize,
    (space, scan): (Space, WireScan),
    ranges: Vec<TokenRange>,
) -> Result<WireKeys, WireError> {
    if node == ctx.me() {
        ctx.check_readable()?;
        let ctx = ctx.clone();
        return tally_world::blocking(move || serve::page(ctx.engine(), space, &scan, &ranges))
            .await
            .map_err(|e| WireError::new(ErrorKind::Internal, format!("scan failed: {e}")))?;
    }
    let ranges = crate::base::convert::wire_ranges(&ranges);
    let req = match space {
        Space::Db(_) => PeerRequest::ScanKeys { scan, ranges },
        Space::Table(t) => PeerRequest::ScanTable {
            table: t.to_vec(),
            scan,
            ranges,
        },
    };
    match ctx.transport().call(node, req, PAGE_TIMEOUT).await {
        Ok(PeerResponse::Keys(keys)) => Ok(keys),
        Ok(PeerResponse::Error(e)) => Err(e),
        Ok(_) => Err(WireError::new(ErrorKind::Internal, "unexpected answer")),
        Err(e) => Err(WireError::new(ErrorKind::Timeout, e.to_string())),
    }
}

/// A replica's answer to `ScanKeys`.
pub(crate) async fn answer(
    ctx: &Arc<Ctx>,
    scan: WireScan,
    ranges: Vec<WireRange>,
) -> Result<PeerResponse, WireError> {
    ctx.check_readable()?;
    let ranges = serve::check(&scan, &ranges)?;
    let space = Space::Db(ctx.keyspace(scan.db));
    let ctx = ctx.clone();
    tally_world::blocking(move || serve::page(ctx.engine(), space, &scan, &ranges))
        .await
        .map_err(|e| WireError::new(ErrorKind::Internal, format!("scan failed: {e}")))?
        .map(PeerResponse::Keys)
}

/// A replica's answer to `ScanTable`.
pub(crate) async fn answer_table(
    ctx: &Arc<Ctx>,
    table: Vec<u8>,
    scan: WireScan,
    ranges: Vec<WireRange>,
) -> Result<PeerResponse, WireError> {
    ctx.check_readable()?;
    let ranges = serve::check_table(&scan, &ranges)?;
    let space = Space::table(&table)?;
    let ctx = ctx.clone();
    tally_world::blocking(move || serve::page(ctx.engine(), space, &scan, &ranges))
        .await
        .map_err(|e| WireError::new(ErrorKind::Internal, format!("scan failed: {e}")))?
        .map(PeerResponse::Keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_net::wire::{WireKey, WireKind};

    fn range(end: i64) -> TokenRange {
        TokenRange {
            start: end - 10,
            end,
        }
    }

    #[test]
    fn a_page_asks_the_first_live_replicas_the_level_needs() {
        let ranges = vec![
            (range(10), Replicas::new(&[0, 1, 2], &[])),
            (range(20), Replicas::new(&[1, 2, 0], &[])),
            (range(30), Replicas::new(&[2, 0, 1], &[3])),
        ];
        // Node 1 is down; this node (0) comes first.
        let live = |r: &[usize]| {
            let mut up: Vec<usize> = r.iter().copied().filter(|&n| n != 1).collect();
            up.sort_by_key(|&n| n != 0);
            up
        };
        let one = plan(ranges.clone(), live, Consistency::One).unwrap();
        assert_eq!(one.len(), 1, "{one:?}");
        assert_eq!(one[&0], [range(10), range(20), range(30)]);
        let quorum = plan(ranges.clone(), live, Consistency::Quorum).unwrap();
        assert_eq!(quorum[&0].len(), 3);
        assert_eq!(quorum[&2].len(), 3);
        assert_eq!(
            plan(ranges, live, Consistency::All),
            Err(Short {
                range: range(10),
                live: 2,
                required: 3
            })
        );
    }

    fn scanned(p: &str, c: &str, kind: WireKind) -> WireScanned {
        WireScanned {
            partition: p.into(),
            column: c.into(),
            kind,
        }
    }

    fn more(p: &str, c: &str) -> Option<WireKey> {
        Some(WireKey::new(p.as_bytes(), c.as_bytes()))
    }

    #[test]
    fn a_page_ends_where_the_first_node_stopped_and_lists_each_key_once() {
        use WireKind::{Counter, Row};
        let a = WireKeys {
            keys: vec![
                scanned("a", "", Counter),
                scanned("b", "x", Row),
                scanned("d", "", Counter),
            ],
            more: more("d", ""),
        };
        let b = WireKeys {
            keys: vec![
                scanned("a", "", Counter),
                scanned("b", "w", Row),
                scanned("c", "", Counter),
            ],
            more: more("c", ""),
        };
        let c = WireKeys {
            keys: vec![scanned("e", "", Counter)],
            more: None,
        };
        let page = merge(Space::Db(Keyspace::DEFAULT), vec![a, b, c]);
        assert_eq!(
            page.keys,
            [
                scanned("a", "", Counter),
                scanned("b", "w", Row),
                scanned("c", "", Counter)
            ]
        );
        assert_eq!(page.more, more("c", ""));

        let done = merge(
            Space::Db(Keyspace::DEFAULT),
            vec![
                WireKeys::default(),
                WireKeys {
                    keys: vec![scanned("z", "", Counter)],
                    more: None,
                },
            ],
        );
        assert_eq!((done.keys.len(), done.more), (1, None));
    }

    #[test]
    fn positions_in_other_keyspaces_are_compared_as_stored() {
        let space = Keyspace {
            db: 2,
            generation: 0,
        };
        let stored = |p: &str| {
            let mut s = space.prefix();
            s.extend_from_slice(p.as_bytes());
            s
        };
        let a = WireKeys {
            keys: vec![
                scanned("a", "", WireKind::Counter),
                scanned("c", "", WireKind::Counter),
            ],
            more: Some(WireKey::new(&stored("b"), b"")),
        };
        let page = merge(Space::Db(space), vec![a]);
        assert_eq!(page.keys, [scanned("a", "", WireKind::Counter)]);
    }
}
