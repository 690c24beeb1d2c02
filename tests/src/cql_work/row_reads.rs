//! Paged reads of the row workers' partitions during the run: a
//! partition of `chaos.rows` read at QUORUM a page of one to three rows
//! at a time, so that each page is read slice by slice
//! (`cluster::slice`) from replicas that disagree while nodes die, stall
//! and come back.
//!
//! The workers write fresh partitions too, a new one every 12 seconds,
//! a row a second in clustering order, as a time series is written
//! ([`fresh_row`]): a replica away for a few seconds while one was
//! written lacks a band of rows between rows it holds, so its slices of
//! the partition end past its peers'.
//!
//! Each read is judged against what was acknowledged at a level a QUORUM
//! read must see (QUORUM, ALL, LOCAL_QUORUM) before it began:
//! - its rows come in clustering order, each once;
//! - a row shown is some write's value at that write's timestamp, and
//!   no later than the newest such acknowledged change of the row (a
//!   stale or resurrected row);
//! - a row not shown: the newest such change, if a write, lies under
//!   some delete (a row a slice lost).

use std::collections::HashMap;

use tally_net::cql::{CqlClient, Prepared};
use tally_world::Instant;

use super::rows::Change;

/// The statement a paged read runs.
pub const READ_PARTITION: &str = "SELECT c, v, writetime(v) FROM chaos.rows WHERE k = ?";

/// QUORUM.
const QUORUM: u16 = 0x04;

/// The first of the fresh partitions: the row workers write the rows of
/// a new one every [`FRESH_MS`], so that a replica that was away while
/// one was written lacks rows its peers hold, and slices of it differ.
pub const FRESH_BASE: i32 = 1000;
/// Rows of a fresh partition.
pub const FRESH_ROWS: i32 = 12;
/// How long a fresh partition takes writes, in ms: a row a second.
const FRESH_MS: u64 = 12_000;

/// The fresh partition of now (`back` 0), or of `back` periods before.
pub fn fresh_partition(back: i32) -> i32 {
    fresh_at(since_epoch_ms()).0 - back
}

/// The fresh partition a write goes to now, and its row: the row of the
/// partition's current second.
pub fn fresh_row() -> (i32, i32) {
    fresh_at(since_epoch_ms())
}

fn since_epoch_ms() -> u64 {
    u64::try_from(tally_world::since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// The fresh partition and row of the time `ms` after the epoch.
fn fresh_at(ms: u64) -> (i32, i32) {
    let period = i32::try_from(ms / FRESH_MS % 100_000).unwrap_or(0);
    let into = ms % FRESH_MS;
    let row = i32::try_from(into * FRESH_ROWS as u64 / FRESH_MS).unwrap_or(0);
    (FRESH_BASE + period, row)
}

/// How many rows partition `k` has.
pub fn rows_of(k: i32) -> i32 {
    match k >= FRESH_BASE {
        true => FRESH_ROWS,
        false => super::rows::ROWS,
    }
}

/// Levels whose acknowledged changes a QUORUM read must see.
pub fn seen_by_quorum(level: u16) -> bool {
    matches!(level, 0x04..=0x06)
}

/// One paged read of partition `k`: when it began, and each row it
/// showed (its clustering value, value and write time), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedRead {
    pub(crate) k: i32,
    pub(crate) began: Instant,
    pub(crate) rows: Vec<(i32, i64, i64)>,
}

/// Each row's changes acknowledged at a level a QUORUM read sees, and
/// when.
pub type Seen = HashMap<(i32, i32), Vec<(Change, Instant)>>;

/// Reads partition `k` at QUORUM, `page` rows a page, through `client`
/// (with `read` prepared); `None` if a page failed.
pub async fn read(client: &CqlClient, read: &Prepared, k: i32, page: i32) -> Option<PagedRead> {
    let began = Instant::now();
    let key = k.to_be_bytes();
    let mut rows = Vec::new();
    let mut state: Option<Vec<u8>> = None;
    // A partition takes at most a page a row, and one empty.
    for _ in 0..=rows_of(k) + 1 {
        let page = (page, state.as_deref());
        let body = client
            .execute_page(0, (read, &[&key]), QUORUM, page)
            .await
            .ok()?;
        for row in tally_net::cql::rows(&body)? {
            rows.push(shown(&row)?);
        }
        state = tally_net::cql::paging_state(&body);
        if state.is_none() {
            return Some(PagedRead { k, began, rows });
        }
    }
    None
}

/// A row of `READ_PARTITION`'s answer.
fn shown(row: &[Option<Vec<u8>>]) -> Option<(i32, i64, i64)> {
    let cell = |i: usize| row.get(i)?.as_deref();
    let c = i32::from_be_bytes(cell(0)?.try_into().ok()?);
    let v = i64::from_be_bytes(cell(1)?.try_into().ok()?);
    let wt = i64::from_be_bytes(cell(2)?.try_into().ok()?);
    Some((c, v, wt))
}

/// Judges `read` (see the module doc): `changes` are each row's changes
/// (any outcome), `seen` those acknowledged at a level it must see.
pub fn judge(
    read: &PagedRead,
    changes: &HashMap<(i32, i32), Vec<Change>>,
    seen: &Seen,
) -> Result<(), String> {
    if !read.rows.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err(format!("rows out of clustering order: {:?}", read.rows));
    }
    for c in 0..rows_of(read.k) {
        let key = (read.k, c);
        let all = changes.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        let newest = seen
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(_, at)| *at < read.began)
            .map(|(change, _)| *change)
            .max_by_key(Change::ts);
        let shown = read.rows.iter().find(|r| r.0 == c);
        match (shown, newest) {
            (Some(&(_, v, wt)), newest) => {
                let written = all.contains(&Change::Write { ts: Some(wt), v });
                if !written {
                    return Err(format!(
                        "row {key:?} shows {v} at {wt}, which no write wrote"
                    ));
                }
                if let Some(n) = newest.filter(|n| n.ts() > wt) {
                    return Err(format!(
                        "row {key:?} shows {v} at {wt}, but {n:?} was acknowledged at QUORUM \
                         before the read began"
                    ));
                }
            }
            (None, Some(w @ Change::Write { .. })) => {
                let deleted = all
                    .iter()
                    .any(|ch| matches!(ch, Change::Delete { .. }) && ch.ts() >= w.ts());
                if !deleted {
                    return Err(format!(
                        "row {key:?} shows nothing, but {w:?} was acknowledged at QUORUM before \
                         the read began and never deleted"
                    ));
                }
            }
            (None, _) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_fresh_partition_is_written_a_row_a_second_in_clustering_order() {
        let start = 7 * FRESH_MS;
        assert_eq!(fresh_at(start), (FRESH_BASE + 7, 0));
        assert_eq!(fresh_at(start + 999), (FRESH_BASE + 7, 0));
        assert_eq!(fresh_at(start + 1_000), (FRESH_BASE + 7, 1));
        assert_eq!(
            fresh_at(start + FRESH_MS - 1),
            (FRESH_BASE + 7, FRESH_ROWS - 1)
        );
        assert_eq!(fresh_at(start + FRESH_MS), (FRESH_BASE + 8, 0));
    }

    #[test]
    fn a_paged_read_shows_what_quorum_acknowledged_before_it() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let w = |ts: i64, v: i64| Change::Write { ts: Some(ts), v };
        let d = |ts: i64| Change::Delete { ts };
        let changes: HashMap<(i32, i32), Vec<Change>> = [
            ((0, 0), vec![w(10, 1), w(20, 2), w(30, 3)]),
            ((0, 1), vec![w(10, 4), d(15)]),
        ]
        .into();
        let seen: Seen = [
            ((0, 0), vec![(w(20, 2), t0), (w(30, 3), later)]),
            ((0, 1), vec![(w(10, 4), t0)]),
        ]
        .into();
        let read = |rows: Vec<(i32, i64, i64)>| PagedRead {
            k: 0,
            began: t0 + Duration::from_millis(500),
            rows,
        };
        let judged = |rows| judge(&read(rows), &changes, &seen);
        assert_eq!(
            judged(vec![(0, 2, 20)]),
            Ok(()),
            "the delete may have landed"
        );
        assert_eq!(judged(vec![(0, 3, 30), (1, 4, 10)]), Ok(()));
        assert!(judged(vec![(0, 1, 10)]).is_err(), "older than acknowledged");
        assert!(judged(vec![]).is_err(), "row 0 lost");
        assert!(judged(vec![(0, 2, 21)]).is_err(), "at the wrong time");
        assert!(
            judged(vec![(1, 4, 10), (0, 2, 20)]).is_err(),
            "out of order"
        );
        assert!(judged(vec![(0, 2, 20), (0, 2, 20)]).is_err(), "twice");
        let deleted: Seen = [((0, 1), vec![(w(10, 4), t0), (d(15), t0)])].into();
        let read_1 = read(vec![(0, 2, 20), (1, 4, 10)]);
        assert!(
            judge(&read_1, &changes, &deleted).is_err(),
            "a delete undone"
        );
    }
}
