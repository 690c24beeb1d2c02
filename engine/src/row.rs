//! Row reads with a column limit that holds while reading.
//!
//! A partition's columns sit in several sources: each memtable (unordered)
//! and each SSTable (in key order). A row read wants the first `max`
//! columns of their union, in column order, and whether there are more.
//! [`Bounded`] keeps the `max` smallest distinct columns offered so far,
//! merging a column offered twice, and tells a source in key order when
//! everything after the column it offered is beyond the limit, so that it
//! stops there: a read of a partition with a million columns holds at most
//! `max` of them and reads each table only a little past its first `max`.

use std::collections::BTreeMap;

use crate::cell::Cell;
use crate::key::Key;

/// The first columns of a partition, in column order.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// At most the number of columns asked for.
    pub cells: Vec<(Key, Cell)>,
    /// Whether the partition has more columns than were asked for.
    pub truncated: bool,
}

/// A range of a partition's columns: from `start` (inclusive) to `end`
/// (exclusive; `None`: to the partition's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns<'a> {
    /// The first column of the range.
    pub start: &'a [u8],
    /// The first column past it.
    pub end: Option<&'a [u8]>,
}

impl Columns<'_> {
    /// Every column.
    pub const ALL: Columns<'static> = Columns {
        start: b"",
        end: None,
    };

    /// Where a read of the range seeks to: its start, or, for a start
    /// longer than any column, as much of it as a column may hold (which
    /// sorts before it; the columns before the start are skipped).
    pub fn seek(&self) -> &[u8] {
        &self.start[..self.start.len().min(crate::key::STORED_COLUMN_BYTES_MAX)]
    }

    /// Whether `column` is in the range.
    pub fn contains(&self, column: &[u8]) -> bool {
        column >= self.start && self.before_end(column)
    }

    /// Whether `column` comes before the range's end.
    pub fn before_end(&self, column: &[u8]) -> bool {
        self.end.is_none_or(|end| column < end)
    }
}

/// What a source learns from [`Bounded::offer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// The column is kept (or merged into the one kept).
    Kept,
    /// The limit is reached and the column sorts after every kept one:
    /// a source in key order may stop.
    Beyond,
}

/// The `max` smallest distinct columns offered so far.
///
/// # Invariants
/// - `kept.len() <= max`.
/// - `truncated` is set once a distinct column was dropped or refused,
///   that is once more than `max` distinct columns were offered.
pub(crate) struct Bounded<V> {
    max: usize,
    kept: BTreeMap<Key, V>,
    truncated: bool,
}

impl<V> Bounded<V> {
    /// Keeps at most `max` columns.
    pub(crate) fn new(max: usize) -> Self {
        Bounded {
            max,
            kept: BTreeMap::new(),
            truncated: false,
        }
    }

    /// Offers a column; `merge` folds it into the same column already kept.
    /// The key is cloned only if it is kept.
    pub(crate) fn offer(&mut self, key: &Key, value: V, merge: impl FnOnce(&mut V, V)) -> Offer {
        if let Some(have) = self.kept.get_mut(key) {
            merge(have, value);
            return Offer::Kept;
        }
        if self.kept.len() < self.max {
            self.kept.insert(key.clone(), value);
            return Offer::Kept;
        }
        self.truncated = true;
        match self.kept.last_key_value() {
            Some((last, _)) if key < last => {
                self.kept.insert(key.clone(), value);
                self.kept.pop_last();
                Offer::Kept
            }
            _ => Offer::Beyond,
        }
    }

    /// Records that a source had more distinct columns than `max` (which
    /// the union then has too).
    pub(crate) fn mark_truncated(&mut self) {
        self.truncated = true;
    }

    /// The kept columns in order, and whether any was dropped.
    pub(crate) fn finish(self) -> (Vec<(Key, V)>, bool) {
        debug_assert!(
            self.kept.len() <= self.max,
            "{} kept over a limit of {}",
            self.kept.len(),
            self.max
        );
        (self.kept.into_iter().collect(), self.truncated)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn k(c: &str) -> Key {
        Key::new(b"p", c.as_bytes()).unwrap()
    }

    fn add(have: &mut u32, v: u32) {
        *have += v;
    }

    /// Offers `cols` in order with value 1 each; answers the kept columns
    /// with their merged values, whether it truncated, and each answer.
    fn run(max: usize, cols: &[&str]) -> (Vec<(String, u32)>, bool, Vec<Offer>) {
        let mut b = Bounded::new(max);
        let offers = cols.iter().map(|c| b.offer(&k(c), 1, add)).collect();
        let (kept, truncated) = b.finish();
        let kept = kept
            .into_iter()
            .map(|(k, v)| (String::from_utf8(k.column().to_vec()).unwrap(), v))
            .collect();
        (kept, truncated, offers)
    }

    fn kept(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
        pairs.iter().map(|(c, v)| (c.to_string(), *v)).collect()
    }

    #[test]
    fn keeps_the_smallest_columns_and_says_when_to_stop() {
        use Offer::{Beyond, Kept};
        /// Limit, columns offered; kept columns, truncated, each answer.
        type Case<'a> = (
            usize,
            &'a [&'a str],
            &'a [(&'a str, u32)],
            bool,
            &'a [Offer],
        );
        let table: &[Case] = &[
            (3, &["a", "b"], &[("a", 1), ("b", 1)], false, &[Kept, Kept]),
            (2, &["a", "b"], &[("a", 1), ("b", 1)], false, &[Kept, Kept]),
            // In order: the third distinct column is beyond.
            (
                2,
                &["a", "b", "c"],
                &[("a", 1), ("b", 1)],
                true,
                &[Kept, Kept, Beyond],
            ),
            // Out of order (a memtable): smaller ones push the largest out.
            (
                2,
                &["c", "b", "a"],
                &[("a", 1), ("b", 1)],
                true,
                &[Kept, Kept, Kept],
            ),
            // A column offered twice is one column, merged.
            (
                2,
                &["a", "a", "b"],
                &[("a", 2), ("b", 1)],
                false,
                &[Kept, Kept, Kept],
            ),
            (
                2,
                &["b", "a", "b"],
                &[("a", 1), ("b", 2)],
                false,
                &[Kept, Kept, Kept],
            ),
            // Limit 0: nothing kept, any column is beyond.
            (0, &["a"], &[], true, &[Beyond]),
            (0, &[], &[], false, &[]),
        ];
        for &(max, cols, want, truncated, offers) in table {
            let got = run(max, cols);
            assert_eq!(
                got,
                (kept(want), truncated, offers.to_vec()),
                "{max} {cols:?}"
            );
        }
    }

    #[test]
    fn sources_merge_into_the_first_columns_of_their_union() {
        // Two sorted sources, as a row read walks them one after the other.
        let a: Vec<String> = (0..50).map(|i| format!("c{:03}", i * 2)).collect();
        let b: Vec<String> = (0..50).map(|i| format!("c{:03}", i * 3)).collect();
        let mut bounded = Bounded::new(10);
        let mut read = 0;
        for source in [&a, &b] {
            for c in source {
                read += 1;
                if bounded.offer(&k(c), 1, add) == Offer::Beyond {
                    break;
                }
            }
        }
        let (kept, truncated) = bounded.finish();
        let cols: Vec<&[u8]> = kept.iter().map(|(k, _)| k.column()).collect();
        let want: [&[u8]; 10] = [
            b"c000", b"c002", b"c003", b"c004", b"c006", b"c008", b"c009", b"c010", b"c012",
            b"c014",
        ];
        assert_eq!(cols, want);
        assert!(truncated);
        assert!(
            read <= 2 * 11,
            "each source stops past its first 10: read {read}"
        );
    }
}
