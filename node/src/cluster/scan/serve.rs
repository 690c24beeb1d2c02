//! A replica's side of a scan: one page of the live keys it holds in the
//! ranges it was asked for (see `scan`).

use std::ops::{Bound, ControlFlow};

use tally_engine::{Cell, Engine, Key, unique};
use tally_net::ring::{TokenRange, partition_token};
use tally_net::wire::{
    ErrorKind, REPAIR_RANGES_MAX, Registers, SCAN_KEYS_MAX, WireError, WireKeys, WireKind,
    WireRange, WireScan, WireScanned,
};

use crate::base::convert::{engine_error, key, wire_key};
use crate::base::fields::is_field;
use crate::base::keyspace::Keyspace;
use crate::base::zset;
use crate::cluster::scan::Space;

/// Cells a page reads from each memtable, per key it may answer: keys of
/// other ranges, dead cells and members of unique counters come between.
const WINDOW_PER_KEY: usize = 4;

/// Checks a scan request's bounds; answers its token ranges.
pub(crate) fn check(scan: &WireScan, ranges: &[WireRange]) -> Result<Vec<TokenRange>, WireError> {
    Keyspace::check(&scan.prefix)?;
    check_table(scan, ranges)
}

/// Checks a table scan's bounds (its prefix, one of the partition key,
/// may be any bytes); answers its token ranges.
pub(crate) fn check_table(
    scan: &WireScan,
    ranges: &[WireRange],
) -> Result<Vec<TokenRange>, WireError> {
    let invalid = |why: String| WireError::not_applied(ErrorKind::Invalid, why);
    if scan.db >= crate::base::keyspace::DATABASES {
        return Err(invalid(format!("database {} does not exist", scan.db)));
    }
    if scan.prefix.len() > tally_engine::PARTITION_BYTES_MAX {
        return Err(invalid("a scan's prefix is longer than a partition".into()));
    }
    if !(1..=SCAN_KEYS_MAX).contains(&(scan.limit as usize)) {
        return Err(invalid(format!("1 to {SCAN_KEYS_MAX} keys per scan page")));
    }
    if ranges.is_empty() || ranges.len() > REPAIR_RANGES_MAX {
        return Err(invalid(format!(
            "1 to {REPAIR_RANGES_MAX} ranges per scan page"
        )));
    }
    Ok(crate::base::convert::token_ranges(ranges))
}

/// What a live cell makes of its partition, if it lists it at all. A
/// string is listed as the Redis string it is (`Counter`), string fields
/// as a hash (`Row`): they live in the agreed part of the partition's
/// reserved cell, whose count is not live unless the key is a set too
/// (the newest value this replica accepted or knows committed; a scan is
/// not linearizable), and so does a sorted set.
pub(crate) fn kind(key: &Key, cell: &Cell, now_ms: u64) -> Option<WireKind> {
    if unique::is_member(key) {
        return None;
    }
    if !cell.live(now_ms) {
        if !unique::is_reserved(key.column()) {
            return None;
        }
        let a = cell.agreed()?;
        let newest = match &a.accepted {
            Some(x) if x.ballot > a.committed.ballot => x,
            _ => &a.committed,
        };
        return registered_kind(&newest.value, now_ms);
    }
    Some(match key.column() {
        [] if cell.is_list() => WireKind::List,
        [] => WireKind::Counter,
        c if unique::is_reserved(c) => WireKind::Unique,
        _ => WireKind::Row,
    })
}

/// The kind agreed registers make of their partition: its string, else
/// its string fields, else its sorted set.
fn registered_kind(registers: &Registers, now_ms: u64) -> Option<WireKind> {
    let live = |r: &&tally_net::wire::Register| !r.expired(now_ms);
    if registers.get(b"", now_ms).is_some() {
        Some(WireKind::Counter)
    } else if registers.0.iter().filter(live).any(|r| is_field(&r.column)) {
        Some(WireKind::Row)
    } else if registers.get(zset::COLUMN, now_ms).is_some() {
        Some(WireKind::SortedSet)
    } else {
        None
    }
}

/// Up to `scan.limit` live keys of `space` that begin with `scan.prefix`,
/// in `ranges`, in key order from after `scan.after`; and the key to go on
/// after when more may follow. Blocking: disk reads.
pub(crate) fn page(
    engine: &Engine,
    space: Space,
    scan: &WireScan,
    ranges: &[TokenRange],
) -> Result<WireKeys, WireError> {
    let stored = space.stored(&scan.prefix)?;
    let first = Key::new(&stored, b"").map_err(|e| engine_error(&e))?;
    let after = scan.after.as_ref().map(key).transpose()?;
    let start = match &after {
        Some(a) if *a >= first => Bound::Excluded(a),
        _ => Bound::Included(&first),
    };
    let limit = scan.limit as usize;
    let now_ms = tally_engine::now_ms();
    let mut out = WireKeys::default();
    // The last key visited, and whether the keyspace (or prefix) ended.
    let (mut prev, mut ended): (Option<Key>, bool) = (None, false);
    let stopped = engine
        .scan_window(start, limit.saturating_mul(WINDOW_PER_KEY), |k, c| {
            let Some(partition) = space
                .client(k.partition())
                .filter(|p| p.starts_with(&scan.prefix))
            else {
                ended = true;
                return ControlFlow::Break(());
            };
            let listed = kind(k, c, now_ms).filter(|_| {
                ranges
                    .iter()
                    .any(|r| r.contains(partition_token(k.partition())))
            });
            if let Some(kind) = listed {
                let same = |s: &WireScanned| s.kind == kind && s.partition == partition;
                if !out.keys.last().is_some_and(same) {
                    if out.keys.len() == limit {
                        out.more = prev.as_ref().map(wire_key);
                        return ControlFlow::Break(());
                    }
                    out.keys.push(WireScanned {
                        partition: partition.to_vec(),
                        column: k.column().to_vec(),
                        kind,
                    });
                }
            }
            prev = Some(k.clone());
            ControlFlow::Continue(())
        })
        .map_err(|e| engine_error(&e))?;
    if let (Some(h), false) = (stopped, ended) {
        out.more = Some(wire_key(&h));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use tally_engine::Options;
    use tally_net::wire::WireKey;

    const WHOLE: TokenRange = TokenRange { start: 0, end: 0 };

    fn scan(db: u8, prefix: &str, after: Option<Key>, limit: u32) -> WireScan {
        WireScan {
            db,
            prefix: prefix.as_bytes().to_vec(),
            after: after.as_ref().map(wire_key),
            limit,
        }
    }

    fn names(keys: &WireKeys) -> Vec<String> {
        keys.keys
            .iter()
            .map(|s| format!("{}:{:?}", String::from_utf8_lossy(&s.partition), s.kind))
            .collect()
    }

    /// Every page, from the first to the last, of a scan with `limit`.
    fn all_pages(engine: &Engine, db: u8, prefix: &str, limit: u32) -> Vec<String> {
        let space = Keyspace { db, generation: 0 };
        let (mut out, mut after) = (Vec::new(), None);
        loop {
            let page = page(
                engine,
                Space::Db(space),
                &scan(db, prefix, after, limit),
                &[WHOLE],
            )
            .unwrap();
            assert!(page.keys.len() <= limit as usize);
            out.extend(names(&page));
            match page.more {
                Some(k) => after = Some(key(&k).unwrap()),
                None => return out,
            }
        }
    }

    #[test]
    fn a_table_page_lists_the_tables_partitions_by_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), Options::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let table = [0xFF, 0xC0, 1, 2, 3, 4, 5, 6];
        let mut other = table;
        other[7] = 7;
        rt.block_on(async {
            let stored = |t: &[u8], pk: &str| [t, pk.as_bytes()].concat();
            for (p, c) in [
                (stored(&table, "k1"), "c"),
                (stored(&table, "k1"), "d"),
                (stored(&table, "k2"), "c"),
                (stored(&other, "k3"), "c"),
                (b"k4".to_vec(), ""),
                (
                    Keyspace {
                        db: 3,
                        generation: 0,
                    }
                    .stored(b"k5")
                    .unwrap(),
                    "",
                ),
            ] {
                let k = Key::new(&p, c.as_bytes()).unwrap();
                let (_, durable) = engine.add([(&k, 1)]).unwrap();
                durable.wait().await.unwrap();
            }
        });
        let page = |limit, after: Option<WireKey>| {
            let scan = WireScan {
                db: 0,
                prefix: Vec::new(),
                after,
                limit,
            };
            page(&engine, Space::Table(table), &scan, &[WHOLE]).unwrap()
        };
        let all = page(10, None);
        assert_eq!(names(&all), ["k1:Row", "k2:Row"]);
        assert!(all.more.is_none(), "the table ended");
        let first = page(1, None);
        assert_eq!(names(&first), ["k1:Row"]);
        let rest = page(1, first.more);
        assert_eq!(names(&rest), ["k1:Row", "k2:Row"][1..].to_vec());
    }

    #[test]
    fn pages_list_each_live_key_of_one_keyspace_once_with_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), Options::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let db3 = Keyspace {
            db: 3,
            generation: 0,
        };
        rt.block_on(async {
            for (space, p, c) in [
                (Keyspace::DEFAULT, "a", ""),
                (Keyspace::DEFAULT, "b", "x"),
                (Keyspace::DEFAULT, "b", "y"),
                (Keyspace::DEFAULT, "bb", ""),
                (Keyspace::DEFAULT, "c", ""),
                (db3, "a", ""),
                (db3, "d", "f"),
            ] {
                let k = Key::new(&space.stored(p.as_bytes()).unwrap(), c.as_bytes()).unwrap();
                let (staged, durable) = engine.add([(&k, 1)]).unwrap();
                assert!(matches!(staged[..], [tally_engine::Staged::Sealed(_)]));
                durable.wait().await.unwrap();
            }
            engine.flush().unwrap();
            // A reset counter is not listed, a unique counter is, once.
            let gone = Key::new(b"c", b"").unwrap();
            let reset = Cell::from_parts(tally_engine::Epoch::at(5), []);
            let applied = engine
                .apply([(&gone, &reset, None)], tally_engine::Wait::Durable)
                .await
                .unwrap();
            assert!(applied.iter().all(Result::is_ok));
            engine
                .admit(b"s", &[&b"m1"[..], b"m2", b"m3"])
                .await
                .unwrap();
            // A string is listed as a Redis string, string fields as a
            // hash, a sorted set as one; a string deleted is not.
            let columns = [
                ("h", &b"field"[..]),
                ("t", b""),
                ("u", b"\xff\xffrounds"),
                ("z", b"\xff\xffzset"),
            ];
            for (p, column) in columns {
                let decided = tally_net::wire::Accepted {
                    ballot: tally_net::wire::Ballot {
                        ms: 1,
                        seq: 0,
                        proposer: 1,
                    },
                    value: tally_net::wire::Registers(vec![tally_net::wire::Register {
                        column: column.to_vec(),
                        value: b"v".to_vec(),
                        at_ms: 0,
                    }]),
                };
                engine.commit(p.as_bytes(), decided).await.unwrap();
            }
        });
        let want = [
            "a:Counter",
            "b:Row",
            "bb:Counter",
            "h:Row",
            "s:Unique",
            "t:Counter",
            "z:SortedSet",
        ];
        for limit in [1, 2, 3, 100] {
            assert_eq!(all_pages(&engine, 0, "", limit), want, "limit {limit}");
        }
        assert_eq!(all_pages(&engine, 0, "b", 1), ["b:Row", "bb:Counter"]);
        assert_eq!(all_pages(&engine, 3, "", 1), ["a:Counter", "d:Row"]);
        assert!(all_pages(&engine, 4, "", 10).is_empty());
    }

    #[test]
    fn requests_past_the_bounds_are_refused() {
        let r = [WireRange { start: 0, end: 0 }];
        assert!(check(&scan(0, "", None, 10), &r).is_ok());
        assert!(check(&scan(16, "", None, 10), &r).is_err(), "database");
        assert!(check(&scan(0, "", None, 0), &r).is_err(), "limit");
        assert!(check(&scan(0, "", None, SCAN_KEYS_MAX as u32 + 1), &r).is_err());
        assert!(check(&scan(0, "", None, 10), &[]).is_err(), "ranges");
        let reserved = WireScan {
            prefix: vec![0xFF],
            ..scan(0, "", None, 1)
        };
        assert!(check(&reserved, &r).is_err(), "prefix");
    }
}
