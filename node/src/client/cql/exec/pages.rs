//! A SELECT of named partitions in a table with its rows sorted
//! (`sortable`) reads only what its page needs: the ranges of columns its
//! clustering restrictions name (`slices`), from the row after the page
//! before, slice by slice (`cluster::slice`), until it holds the rows the
//! page answers and one more (which says another page follows). Its
//! first read of a partition goes from the first range to the
//! partition's end, so that a small partition, with its static columns
//! and deleted ranges, costs one round trip; a wider one has those read
//! whole next. Then `paging` cuts the page as for any read.
//!
//! A page in the reverse of the table's order reads its ranges forward,
//! up to its end, holding only the last rows it answers. A SELECT that
//! needs every row (an aggregate, `GROUP BY`, `ORDER BY` across
//! partitions) reads its ranges whole, slice by slice, up to
//! [`WIDE_CELLS_MAX`] cells.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tally_net::wire::ROW_COLUMNS_MAX;

use super::super::ast::Select;
use super::super::cells::Layout;
use super::super::paging;
use super::super::response::CqlError;
use super::super::result::Cell;
use super::super::rows::{Query, Rows};
use super::super::schema::Kind;
use super::super::select;
use super::super::slices::{self, Range};
use super::super::work::{Part, RowWork};
use super::{Level, Partition, table_rows};
use crate::node::{Node, WIDE_CELLS_MAX};

/// The cells of each of `q`'s partitions that the page `work` asks for
/// needs; `None` if the table's rows are not sorted, or the cluster
/// cannot read slices yet (then every partition is read whole).
pub(super) async fn read(
    node: &Node,
    part: &Part,
    (s, q): (&Select, &Query),
    (work, now): (&RowWork, u64),
    lv: Level,
) -> Result<Option<Vec<Partition>>, CqlError> {
    let t = part.target();
    if !t.table.sorted_rows || lv.serial || !node.serves_row_slices() {
        return Ok(None);
    }
    let layout = Layout::of(t.table);
    let place = match work.paging_state.as_deref() {
        Some(state) => Some(paging::resumes_after(state, layout.clustering_columns())?),
        None => None,
    };
    let all = slices::ranges(&layout, &q.rows.clustering)?;
    let limit = match &s.limit {
        Some(term) => Some(select::limit(term, &part.values)?),
        None => None,
    };
    let mut need = wanted(s, q, (work.page_size, limit));
    let budget = AtomicUsize::new(WIDE_CELLS_MAX);
    let mut out = Vec::with_capacity(q.rows.partitions.len());
    for i in 0..q.rows.partitions.len() {
        let before = place.as_ref().is_some_and(|(p, _)| i < *p);
        if before || need == Some(0) {
            out.push(Partition::new());
            continue;
        }
        // A partition the page before ended in is read from after its
        // row; unless it answers its first rows only (PER PARTITION
        // LIMIT, DISTINCT): then from its start, and `paging` skips those
        // answered.
        let resumed = place.as_ref().is_some_and(|(p, _)| *p == i);
        let ranges = match &place {
            Some((_, clustering))
                if resumed && layout.clustering_columns() > 0 && q.per_partition.is_none() =>
            {
                let Ok((from, upto)) = slices::resume(&layout, clustering) else {
                    // The page ended on the partition's static row: it
                    // has no rows.
                    out.push(Partition::new());
                    continue;
                };
                match q.reversed {
                    false => slices::clip(all.clone(), Some(&from), None),
                    true => slices::clip(all.clone(), None, upto.as_deref()),
                }
            }
            _ => all.clone(),
        };
        let want = match (resumed, q.per_partition) {
            // Read from its start: every row it may answer.
            (true, Some(most)) => Some(most),
            _ => need.map(|n| n.min(q.per_partition.unwrap_or(usize::MAX))),
        };
        let one = Reading {
            node,
            part,
            select: s,
            query: one_partition(q, i),
            now,
            lv,
        };
        let (cells, rows) = one.partition(ranges, want, &budget).await?;
        if !(resumed && q.per_partition.is_some()) {
            // (Read from its start, it holds rows answered before.)
            need = need.map(|n| n.saturating_sub(rows));
        }
        out.push(cells);
    }
    Ok(Some(out))
}

/// How many rows (with every column, before the page is cut) a SELECT's
/// read must hold: a page's size and one more, or its LIMIT (a SELECT
/// with one answers in one page); `None`: every row it names.
fn wanted(
    s: &Select,
    q: &Query,
    (page_size, limit): (Option<i32>, Option<usize>),
) -> Option<usize> {
    let every = paging::aggregates(s) || (!s.order_by.is_empty() && q.rows.partitions.len() > 1);
    if every {
        return None;
    }
    let page = page_size
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
        .map(|n| n + 1);
    limit.or(page)
}

/// `q` with only its partition `i`.
fn one_partition(q: &Query, i: usize) -> Query {
    Query {
        rows: Rows {
            partitions: vec![q.rows.partitions[i].clone()],
            clustering: q.rows.clustering.clone(),
        },
        ..q.clone()
    }
}

/// The read of one partition of a SELECT (`query` names it alone).
struct Reading<'a> {
    node: &'a Node,
    part: &'a Part,
    select: &'a Select,
    query: Query,
    /// The clock the rows are read at.
    now: u64,
    lv: Level,
}

impl Reading<'_> {
    /// The partition's static columns and deleted ranges, and its rows in
    /// `ranges` until it holds `want` rows (`None`: all of them); and how
    /// many rows it holds. Fails past `budget` cells.
    async fn partition(
        &self,
        ranges: Vec<Range>,
        want: Option<usize>,
        budget: &AtomicUsize,
    ) -> Result<(Partition, usize), CqlError> {
        let layout = Layout::of(&self.part.table);
        if let (true, Some(want)) = (self.query.reversed, want) {
            return self.last_rows(ranges, want, budget).await;
        }
        let start = match ranges.first() {
            Some((start, _)) => start.clone(),
            // No rows named: the static columns alone.
            None => slices::tail().0,
        };
        let limit = match want {
            Some(n) => (n + 1).saturating_mul(self.columns_per_row()),
            None => ROW_COLUMNS_MAX,
        };
        // From the first range on to the partition's end: a small
        // partition, with its static columns and deleted ranges, costs one
        // round trip.
        let first = self.slice((start, None), limit, budget).await?;
        let mut cells: Partition = (first.cells.into_iter())
            .filter(|(column, _)| slices::holds(&ranges, column))
            .collect();
        let Some(next) = first.next else {
            let rows = self.rows(&cells);
            return Ok((cells, rows));
        };
        // The rest of the static columns and deleted ranges; then the
        // ranges from the last row read on, as it may go on past `next`.
        let tail = slices::tail().0;
        let from = match next < tail {
            true => {
                // Its cells go: the row is read again, whole.
                let start = last_row_start(&layout, &cells);
                last_row(&layout, &mut cells);
                start.unwrap_or_else(|| next.clone())
            }
            false => next.clone(),
        };
        cells.extend(self.whole((tail.max(next), None), budget).await?);
        let rest = slices::clip(ranges, Some(&from), None);
        self.rows_in(rest, cells, (want, limit), budget).await
    }

    /// `cells` (the partition's static columns and deleted ranges, and
    /// its rows before `ranges`) with the rows in `ranges`, read until
    /// they hold `want` rows (`None`: all of them), `limit` cells a slice;
    /// and how many rows they hold.
    async fn rows_in(
        &self,
        ranges: Vec<Range>,
        mut cells: Partition,
        (want, limit): (Option<usize>, usize),
        budget: &AtomicUsize,
    ) -> Result<(Partition, usize), CqlError> {
        let layout = Layout::of(&self.part.table);
        for mut range in ranges {
            if want.is_some_and(|want| self.rows(&cells) >= want) {
                break;
            }
            // The cells of the last row read, which may go on in the next
            // slice: kept apart until it is whole.
            let mut pending = Partition::new();
            loop {
                let slice = self.slice(range.clone(), limit, budget).await?;
                cells.append(&mut pending);
                cells.extend(slice.cells);
                let Some(next) = slice.next else {
                    break;
                };
                if let Some(want) = want {
                    pending = last_row(&layout, &mut cells);
                    let rows = self.rows(&cells);
                    if rows >= want {
                        return Ok((cells, rows));
                    }
                }
                range.0 = next;
            }
        }
        let rows = self.rows(&cells);
        Ok((cells, rows))
    }

    /// The partition's static columns and deleted ranges, and of its rows
    /// in `ranges` the last `want` (the first a page in the reverse order
    /// answers): read forward, slice by slice, holding no more rows than
    /// those. What it reads is not counted against `budget`, as it does
    /// not hold it.
    async fn last_rows(
        &self,
        ranges: Vec<Range>,
        want: usize,
        budget: &AtomicUsize,
    ) -> Result<(Partition, usize), CqlError> {
        let layout = Layout::of(&self.part.table);
        let mut cells = self.whole(slices::tail(), budget).await?;
        let unheld = AtomicUsize::new(usize::MAX);
        for mut range in ranges {
            let mut pending = Partition::new();
            loop {
                let slice = self.slice(range.clone(), ROW_COLUMNS_MAX, &unheld).await?;
                cells.append(&mut pending);
                cells.extend(slice.cells);
                let Some(next) = slice.next else {
                    break;
                };
                pending = last_row(&layout, &mut cells);
                self.keep_last(&layout, &mut cells, want);
                range.0 = next;
            }
        }
        self.keep_last(&layout, &mut cells, want);
        let rows = self.rows(&cells);
        Ok((cells, rows))
    }

    /// Drops from `cells` the rows before the last `want` live ones (in
    /// clustering order), keeping the static columns and deleted ranges.
    fn keep_last(&self, layout: &Layout, cells: &mut Partition, want: usize) {
        let Some(first) = self.placed(cells).into_iter().nth(want.saturating_sub(1)) else {
            return;
        };
        if let Ok(row) = layout.prefix(&first) {
            *cells = cells.split_off(&row);
        }
    }

    /// All of `range`.
    async fn whole(&self, mut range: Range, budget: &AtomicUsize) -> Result<Partition, CqlError> {
        let mut cells = Partition::new();
        loop {
            let slice = self.slice(range.clone(), ROW_COLUMNS_MAX, budget).await?;
            cells.extend(slice.cells);
            match slice.next {
                Some(next) => range.0 = next,
                None => return Ok(cells),
            }
        }
    }

    /// One slice of the partition, counted against `budget`.
    async fn slice(
        &self,
        range: Range,
        limit: usize,
        budget: &AtomicUsize,
    ) -> Result<crate::cluster::slice::Slice, CqlError> {
        let (_, partition) = &self.query.rows.partitions[0];
        let slice = self
            .node
            .get_slice(
                partition,
                range,
                limit.clamp(2, ROW_COLUMNS_MAX),
                self.lv.cl,
            )
            .await
            .map_err(|e| self.lv.error(&e))?;
        let n = slice.cells.len();
        let took = budget.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(n));
        took.map_err(|_| {
            CqlError::Invalid(format!(
                "the rows this SELECT reads hold more than the {WIDE_CELLS_MAX} cells one read \
                 holds: restrict its clustering columns, or page it in the same order as the table"
            ))
        })?;
        Ok(slice)
    }

    /// How many rows with clustering values `cells` (the partition's, or
    /// a part of them) answer: not the row of static columns alone, which
    /// a partition read in part may answer for want of its rows.
    fn rows(&self, cells: &Partition) -> usize {
        match Layout::of(&self.part.table).clustering_columns() {
            0 => self.answered(cells).len(),
            _ => self.placed(cells).len(),
        }
    }

    /// The rows `cells` answer, in the order the SELECT answers them.
    fn answered(&self, cells: &Partition) -> Vec<Vec<Cell>> {
        let t = self.part.target();
        let read = std::slice::from_ref(cells);
        table_rows(t, self.select, &self.query, read, self.now)
    }

    /// The clustering values of each row with them that `cells` answer,
    /// in the order the SELECT answers them.
    fn placed(&self, cells: &Partition) -> Vec<Vec<Vec<u8>>> {
        let columns = &self.part.table.columns;
        let count = |kind: Kind| columns.iter().filter(|c| c.kind == kind).count();
        let (keys, clustering) = (count(Kind::PartitionKey), count(Kind::Clustering));
        (self.answered(cells).into_iter())
            .filter_map(|row| {
                let values = row.get(keys..keys + clustering)?;
                let placed = values.iter().any(Option::is_some);
                placed.then(|| {
                    values
                        .iter()
                        .map(|v| v.clone().unwrap_or_default())
                        .collect()
                })
            })
            .collect()
    }

    /// How many cells a row has at most: its columns and its marker.
    fn columns_per_row(&self) -> usize {
        let columns = self.part.table.columns.iter();
        1 + columns.filter(|c| c.kind == Kind::Regular).count()
    }
}

/// Takes the cells of the last row out of `cells` (a partition's, read
/// in column order up to some point), which may go on past it.
fn last_row(layout: &Layout, cells: &mut Partition) -> Partition {
    let tail = slices::tail().0;
    let Some(row) = last_row_start(layout, cells) else {
        return Partition::new();
    };
    let mut last = cells.split_off(&row);
    let mut statics = last.split_off(&tail);
    cells.append(&mut statics);
    last
}

/// Where the last row of `cells` (before the static columns) begins.
fn last_row_start(layout: &Layout, cells: &Partition) -> Option<Vec<u8>> {
    let (column, _) = cells.range(..slices::tail().0).next_back()?;
    let n = layout.row_bytes(column)?;
    Some(column[..n].to_vec())
}

#[cfg(test)]
mod tests {
    use super::super::super::ast::Statement;
    use super::super::super::parse::parse;
    use super::super::super::rows::{Target, query};
    use super::super::super::schema::test_table;
    use super::*;

    fn want(q: &str, page: Option<i32>) -> Option<usize> {
        let t = test_table("CREATE TABLE t (k int, c int, v int, PRIMARY KEY (k, c))");
        let target = Target {
            keyspace: "ks",
            table: &t,
        };
        let Statement::Select(s) = parse(q).unwrap().0 else {
            panic!("{q}")
        };
        let limit = s.limit.as_ref().map(|l| select::limit(l, &[]).unwrap());
        wanted(&s, &query(target, &s, &[]).unwrap(), (page, limit))
    }

    #[test]
    fn a_page_reads_one_row_more_than_it_answers_unless_it_needs_them_all() {
        assert_eq!(want("SELECT * FROM t WHERE k = 1", Some(100)), Some(101));
        assert_eq!(
            want("SELECT * FROM t WHERE k = 1 AND c > 3", Some(1)),
            Some(2)
        );
        assert_eq!(want("SELECT * FROM t WHERE k = 1", None), None);
        assert_eq!(want("SELECT * FROM t WHERE k = 1", Some(-1)), None);
        assert_eq!(
            want("SELECT * FROM t WHERE k = 1 LIMIT 5", Some(100)),
            Some(5)
        );
        assert_eq!(want("SELECT * FROM t WHERE k = 1 LIMIT 5", None), Some(5));
        assert_eq!(want("SELECT count(*) FROM t WHERE k = 1", Some(100)), None);
        // The reverse order: the last rows before the page's end.
        let reversed = "SELECT * FROM t WHERE k = 1 ORDER BY c DESC";
        assert_eq!(want(reversed, Some(100)), Some(101));
        let across = "SELECT * FROM t WHERE k IN (1, 2) ORDER BY c DESC";
        assert_eq!(want(across, Some(100)), None);
    }

    #[test]
    fn the_last_row_read_is_kept_apart_from_the_statics() {
        let t =
            test_table("CREATE TABLE t (k int, c int, s int static, v int, PRIMARY KEY (k, c))");
        let layout = Layout::of(&t);
        let column = |c: i32, name: &str| layout.column(&[c.to_be_bytes().to_vec()], name).unwrap();
        let mut cells: Partition = [
            column(1, ""),
            column(1, "v"),
            column(2, ""),
            vec![0xFD, b's'],
        ]
        .into_iter()
        .map(|c| (c, tally_engine::Cell::new()))
        .collect();
        let last = last_row(&layout, &mut cells);
        assert_eq!(last.keys().collect::<Vec<_>>(), [&column(2, "")]);
        let kept: Vec<&Vec<u8>> = cells.keys().collect();
        assert_eq!(kept, [&column(1, ""), &column(1, "v"), &vec![0xFD, b's']]);
    }
}
