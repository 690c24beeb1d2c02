//! A SELECT that restricts no partition key, run against the cluster:
//! the table's partitions listed a scan page at a time (in token order,
//! for a table made so, and within its `TOKEN()` range) and read whole,
//! until the page holds the rows the client asks for, or its LIMIT, or
//! every row for an aggregate (and at most [`UNPAGED_ROWS_MAX`] when the
//! client does not page). The paging state names where the scan goes on,
//! and how many rows of its LIMIT are left, so a LIMIT counts across
//! pages, as Cassandra's does.

use tally_net::wire::{WireKey, WireScan};

use super::super::ast::Select;
use super::super::cells;
use super::super::paging;
use super::super::response::CqlError;
use super::super::result::Cell;
use super::super::rows::{self, Query, Rows};
use super::super::select;
use super::super::tokens;
use super::super::work::{Part, RowWork};
use super::{Level, read_cells, table_rows};
use crate::node::Node;

/// Most partitions a scan lists per page.
const SCAN_PARTITIONS: usize = 1_000;
/// Most rows a scan answers a client that does not page.
const UNPAGED_ROWS_MAX: usize = 100_000;

/// A page of the rows `q` scans (see the module docs): the rows, with
/// every column, and the paging state to go on from when the scan is not
/// over.
pub(super) async fn scan(
    node: &Node,
    part: &Part,
    s: &Select,
    q: &Query,
    work: &RowWork,
    lv: Level,
) -> Result<paging::Page, CqlError> {
    let t = part.target();
    let table = cells::prefix(t.table);
    let limit = match &s.limit {
        Some(term) if !paging::aggregates(s) => Some(select::limit(term, &part.values)?),
        _ => None,
    };
    let (mut after, left) = match (&work.paging_state, &q.tokens) {
        (Some(state), _) => {
            let r = cells::resume(t.table, state)?;
            (Some(r.after), r.left)
        }
        (None, Some(range)) if range.is_empty() => return Ok((Vec::new(), None)),
        (None, Some(range)) => (tokens::start(t.table, range), limit),
        (None, None) => (None, limit),
    };
    let page = work.page_size.filter(|&n| n > 0).map(|n| n as usize);
    let wanted = match paging::aggregates(s) {
        true => usize::MAX,
        false => page
            .unwrap_or(UNPAGED_ROWS_MAX + 1)
            .min(left.unwrap_or(usize::MAX)),
    };
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    loop {
        let page_of = (wanted - rows.len()).clamp(1, SCAN_PARTITIONS);
        let listing = WireScan {
            db: 0,
            prefix: Vec::new(),
            after: after.as_ref().map(|(p, c)| WireKey::new(p, c)),
            limit: u32::try_from(page_of).unwrap_or(1),
        };
        let listed = node
            .scan_table(table, listing, lv.cl)
            .await
            .map_err(|e| lv.error(&e))?;
        let mut stored: Vec<Vec<u8>> = Vec::new();
        for k in &listed.keys {
            let p = [&table[..], &k.partition].concat();
            let again = after.as_ref().is_some_and(|(a, _)| *a == p);
            if !again && stored.last() != Some(&p) {
                stored.push(p);
            }
        }
        let (stored, over) = match &q.tokens {
            Some(range) => tokens::keep(t.table, range, stored),
            None => (stored, false),
        };
        let named = Query {
            rows: Rows {
                partitions: rows::scanned(t, stored),
                clustering: q.rows.clustering.clone(),
            },
            ..q.clone()
        };
        let read = read_cells(node, &named.rows, lv).await?;
        rows.extend(table_rows(t, s, &named, &read, tally_engine::now_ms()));
        if let Some(n) = left.filter(|&n| rows.len() >= n) {
            rows.truncate(n);
            return Ok((rows, None));
        }
        let last = named.rows.partitions.last().map(|(_, p)| p.as_slice());
        let Some(more) = listed.more.filter(|_| !over) else {
            return Ok((rows, None));
        };
        let next = cells::after_page((more.partition(), more.column()), last);
        if rows.len() >= wanted {
            if page.is_none() {
                return Err(CqlError::Invalid(format!(
                    "the result has over {UNPAGED_ROWS_MAX} rows: page it (a fetch size)"
                )));
            }
            let left = left.map(|n| n - rows.len());
            return Ok((rows, Some(cells::paging_state(&next, left))));
        }
        after = Some(next);
    }
}
