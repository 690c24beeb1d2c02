//! Where a counter table's cells live: each counter of a CQL row is one
//! Tally counter cell, so repair, hints, compaction, `tally row` and the
//! chaos checker treat them as any other.
//!
//! ```text
//! partition := TABLE_MARK, 6 bytes naming the table, partition key
//!            | TOKEN_TABLE_MARK, 6 bytes naming the table,
//!              the key's token (8 bytes, `ring::token_bytes`), partition key
//! key       := the one column's value | for each column:
//!              [u16 BE] length, value, 0x00     (Cassandra's CompositeType)
//! column    := for each clustering column: [u16 BE] length, value;
//!              then the counter's name
//! ```
//!
//! The partition key is serialized as Cassandra serializes it, and the
//! ring places a table's partition by that key alone
//! (`tally_net::ring::partition_token`), so a token-aware driver sends a
//! statement straight to a replica of its partition. A table made once
//! the cluster has feature `cql-token-order` puts that token before the
//! key, so its partitions sort by token, as Cassandra lists them, and a
//! `TOKEN()` range is a range of keys. The six bytes are a
//! hash of the table's id and how often it was truncated: a table made
//! again, or truncated, starts from no cells. A column never begins with
//! 0xFF (a length's first byte is 0 or 1, and a name is UTF-8), so none
//! is a reserved column.
//!
//! Clustering values sort by their type ([`compare`]), not bytewise, so
//! a partition's rows are read whole and ordered here.

use tally_engine::{COLUMN_BYTES_MAX, PARTITION_BYTES_MAX};
use tally_net::ring::{
    TABLE_MARK, TABLE_PREFIX_BYTES, TOKEN_BYTES, TOKEN_TABLE_MARK, murmur3_token, token_bytes,
};

use super::response::CqlError;
use super::result::CqlType;
use super::schema::{Keyspace, Kind, TableDef};
pub(crate) use super::sortable::compare;
use super::sortable::signed;

/// The bytes every stored partition of `table` begins with.
pub(crate) fn prefix(table: &TableDef) -> [u8; TABLE_PREFIX_BYTES] {
    let mut named = table.id.to_vec();
    named.extend_from_slice(&table.truncations.to_be_bytes());
    let hash = super::system::hash_id(&named, 0x7ab1e);
    let mark = match table.token_order {
        true => TOKEN_TABLE_MARK,
        false => TABLE_MARK,
    };
    let mut p = [0u8; TABLE_PREFIX_BYTES];
    p[..mark.len()].copy_from_slice(&mark);
    p[TABLE_MARK.len()..].copy_from_slice(&hash[..TABLE_PREFIX_BYTES - TABLE_MARK.len()]);
    p
}

/// The bytes of a table's stored partitions before their key: its
/// prefix, then for a table in token order the key's `token`.
pub(crate) fn token_prefix(table: &TableDef, token: i64) -> Vec<u8> {
    let mut p = prefix(table).to_vec();
    if table.token_order {
        p.extend_from_slice(&token_bytes(token));
    }
    p
}

/// Each regular table's prefix and gc grace (ms), of `catalog`: what
/// compactions may forget (`cluster::purge`).
pub(crate) fn graces(catalog: &[Keyspace]) -> Vec<([u8; TABLE_PREFIX_BYTES], u64)> {
    let tables = catalog.iter().flat_map(|k| &k.tables);
    tables
        .filter(|t| !t.is_counter())
        .map(|t| {
            let ms = u64::try_from(t.gc_grace_s).unwrap_or(0) * 1000;
            (prefix(t), ms)
        })
        .collect()
}

/// The stored partition of `key` (the partition key's values, in order).
pub(crate) fn partition(table: &TableDef, key: &[Vec<u8>]) -> Result<Vec<u8>, CqlError> {
    let mut p = Vec::new();
    match key {
        [one] => p.extend_from_slice(one),
        many => {
            for v in many {
                let len = u16::try_from(v.len()).map_err(|_| too_long("partition key"))?;
                p.extend_from_slice(&len.to_be_bytes());
                p.extend_from_slice(v);
                p.push(0);
            }
        }
    }
    let stored = token_prefix(table, murmur3_token(&p));
    if stored.len() - TABLE_PREFIX_BYTES + p.len() > PARTITION_BYTES_MAX {
        return Err(too_long("partition key"));
    }
    if p.is_empty() {
        return Err(CqlError::Invalid("Key may not be empty".into()));
    }
    Ok([stored, p].concat())
}

/// The partition key's values of a stored partition of `table` (`keys`
/// columns of it); `None` if it is not one [`partition`] makes.
pub(crate) fn partition_key(table: &TableDef, stored: &[u8], keys: usize) -> Option<Vec<Vec<u8>>> {
    let mut key = stored.strip_prefix(&prefix(table)[..])?;
    if table.token_order {
        key = key.get(TOKEN_BYTES..)?;
    }
    if keys == 1 {
        return Some(vec![key.to_vec()]);
    }
    let mut rest = key;
    let mut values = Vec::with_capacity(keys);
    for _ in 0..keys {
        let (len, tail) = rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        let (value, tail) = (tail.get(..len)?, tail.get(len..)?);
        let (&0, tail) = tail.split_first()? else {
            return None;
        };
        values.push(value.to_vec());
        rest = tail;
    }
    rest.is_empty().then_some(values)
}

/// How a table names its rows' columns: by its clustering columns'
/// values (of these types, each with whether it is DESC), length-prefixed
/// as they are, or, for a table with its rows sorted, as bytes that sort
/// as they do (`sortable`).
#[derive(Clone, Debug)]
pub(crate) struct Layout<'t> {
    types: Vec<(&'t CqlType, bool)>,
    sorted: bool,
}

impl<'t> Layout<'t> {
    /// The layout of `table`'s columns.
    pub(crate) fn of(table: &'t TableDef) -> Layout<'t> {
        let types = table
            .columns
            .iter()
            .filter(|c| c.kind == Kind::Clustering)
            .map(|c| (&c.ty, c.descending))
            .collect();
        Layout {
            types,
            sorted: table.sorted_rows,
        }
    }

    /// How many clustering columns it has.
    pub(crate) fn clustering_columns(&self) -> usize {
        self.types.len()
    }

    /// Whether clustering column `i` is DESC.
    pub(crate) fn descending(&self, i: usize) -> bool {
        self.types.get(i).is_some_and(|(_, d)| *d)
    }

    /// The column of `name` (a counter, a regular column, or "" for the
    /// row's marker) in the row of `clustering`.
    pub(crate) fn column(&self, clustering: &[Vec<u8>], name: &str) -> Result<Vec<u8>, CqlError> {
        let mut c = match self.sorted {
            true => self.prefix(clustering)?,
            false => length_prefixed(clustering)?,
        };
        c.extend_from_slice(name.as_bytes());
        match c.len() <= COLUMN_BYTES_MAX {
            true => Ok(c),
            false => Err(too_long("clustering key and counter name")),
        }
    }

    /// The bytes the columns of the rows whose first clustering values
    /// are `values` begin with, in a table with its rows sorted.
    pub(crate) fn prefix(&self, values: &[Vec<u8>]) -> Result<Vec<u8>, CqlError> {
        super::sortable::encode(&self.types, values)
            .ok_or_else(|| CqlError::Invalid("a clustering value of the wrong size".into()))
    }

    /// A column's clustering values and name; `None` if it is not one
    /// [`Layout::column`] makes.
    pub(crate) fn split<'c>(&self, column: &'c [u8]) -> Option<(Vec<Vec<u8>>, &'c str)> {
        let (values, used) = match self.sorted {
            true => super::sortable::decode(&self.types, column)?,
            false => split_length_prefixed(column, self.types.len())?,
        };
        Some((values, std::str::from_utf8(&column[used..]).ok()?))
    }

    /// How many bytes of `column` its row's clustering values take.
    pub(crate) fn row_bytes(&self, column: &[u8]) -> Option<usize> {
        match self.sorted {
            true => super::sortable::decode(&self.types, column).map(|(_, n)| n),
            false => split_length_prefixed(column, self.types.len()).map(|(_, n)| n),
        }
    }
}

/// Clustering values as a table not sorted stores them: each
/// length-prefixed.
fn length_prefixed(clustering: &[Vec<u8>]) -> Result<Vec<u8>, CqlError> {
    let mut c = Vec::with_capacity(clustering.iter().map(|v| v.len() + 2).sum::<usize>() + 16);
    for v in clustering {
        let len = u16::try_from(v.len()).map_err(|_| too_long("clustering key"))?;
        c.extend_from_slice(&len.to_be_bytes());
        c.extend_from_slice(v);
    }
    Ok(c)
}

/// The `clustering` length-prefixed values `column` begins with, and
/// their bytes.
fn split_length_prefixed(column: &[u8], clustering: usize) -> Option<(Vec<Vec<u8>>, usize)> {
    let mut rest = column;
    let mut values = Vec::with_capacity(clustering);
    for _ in 0..clustering {
        let (len, tail) = rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        values.push(tail.get(..len)?.to_vec());
        rest = &tail[len..];
    }
    Some((values, column.len() - rest.len()))
}

/// Where a scan goes on: after the stored key `after` (partition,
/// column), with `left` rows of its LIMIT still to answer (`None`: no
/// LIMIT).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resume {
    pub(crate) after: (Vec<u8>, Vec<u8>),
    pub(crate) left: Option<usize>,
}

/// The first byte of a paging state that counts a LIMIT down (one that
/// does not begins with its partition's length, at most 0x04).
const LIMITED: u8 = b'L';

/// The paging state of a scan that goes on after the stored key
/// `(partition, column)` with `left` rows of its LIMIT to answer:
/// `'L'` and `left` (u32, big-endian) if it has one, then the
/// partition's length (u16, big-endian), the partition, the column.
pub(crate) fn paging_state(
    (partition, column): &(Vec<u8>, Vec<u8>),
    left: Option<usize>,
) -> Vec<u8> {
    let mut state = Vec::with_capacity(partition.len() + column.len() + 7);
    if let Some(n) = left {
        state.push(LIMITED);
        state.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
    }
    let len = u16::try_from(partition.len()).unwrap_or(u16::MAX);
    state.extend_from_slice(&len.to_be_bytes());
    state.extend_from_slice(partition);
    state.extend_from_slice(column);
    state
}

/// Where a scan of `table` goes on, from a driver's paging state; one
/// that is not the table's is refused.
pub(crate) fn resume(table: &TableDef, state: &[u8]) -> Result<Resume, CqlError> {
    let bad = || CqlError::Protocol("a paging state this node did not make".into());
    let (left, state) = match state.split_first() {
        Some((&LIMITED, rest)) => {
            let (n, rest) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
            (Some(u32::from_be_bytes(*n) as usize), rest)
        }
        _ => (None, state),
    };
    let (len, rest) = state.split_first_chunk::<2>().ok_or_else(bad)?;
    let len = usize::from(u16::from_be_bytes(*len));
    let (partition, column) = (rest.get(..len).ok_or_else(bad)?, &rest[len..]);
    let fits = partition.len() <= tally_engine::STORED_PARTITION_BYTES_MAX
        && column.len() <= tally_engine::STORED_COLUMN_BYTES_MAX;
    match partition.starts_with(&prefix(table)) && fits && left != Some(0) {
        true => Ok(Resume {
            after: (partition.to_vec(), column.to_vec()),
            left,
        }),
        false => Err(bad()),
    }
}

/// Where the next page of a scan begins after: the scan's own place
/// (`more`), unless it stopped inside `last`, the last partition read
/// whole, which the next page must not list again.
pub(crate) fn after_page(more: (&[u8], &[u8]), last: Option<&[u8]>) -> (Vec<u8>, Vec<u8>) {
    match last {
        Some(p) if p == more.0 => (
            p.to_vec(),
            vec![0xFF; tally_engine::STORED_COLUMN_BYTES_MAX],
        ),
        _ => (more.0.to_vec(), more.1.to_vec()),
    }
}

fn too_long(what: &str) -> CqlError {
    CqlError::Invalid(format!(
        "the {what} is too long: a partition key may be {PARTITION_BYTES_MAX} bytes, and a \
         row's clustering values with a counter's name {COLUMN_BYTES_MAX}"
    ))
}

/// Checks that `value` is a valid `ty`, as Cassandra checks a bound key
/// value (a wrong length is its error).
pub(crate) fn check(ty: &CqlType, value: &[u8], column: &str) -> Result<(), CqlError> {
    let fixed = match ty {
        CqlType::Int | CqlType::Date => Some(4),
        CqlType::Bigint | CqlType::Timestamp | CqlType::Counter | CqlType::Double => Some(8),
        CqlType::Time => Some(8),
        CqlType::Float => Some(4),
        CqlType::Smallint => Some(2),
        CqlType::Tinyint | CqlType::Boolean => Some(1),
        CqlType::Uuid | CqlType::Timeuuid => Some(16),
        _ => None,
    };
    let wrong = |why: String| {
        Err(CqlError::Invalid(format!(
            "Invalid value for {column}: {why}"
        )))
    };
    match (ty, fixed) {
        (_, Some(n)) if value.len() != n => wrong(format!(
            "expected {n} bytes for a {}, got {}",
            ty.name(),
            value.len()
        )),
        (CqlType::Inet, _) if value.len() != 4 && value.len() != 16 => {
            wrong(format!("an inet is 4 or 16 bytes, got {}", value.len()))
        }
        (CqlType::Varchar, _) if std::str::from_utf8(value).is_err() => {
            wrong("invalid UTF-8 bytes".into())
        }
        (CqlType::Ascii, _) if !value.is_ascii() => wrong("invalid ASCII bytes".into()),
        (CqlType::Varint, _) if value.is_empty() => wrong("an empty varint".into()),
        (CqlType::Time, _) if !(0..86_400_000_000_000).contains(&signed(value)) => {
            wrong("a time is from 0 to 86399999999999 ns".into())
        }
        (CqlType::Timeuuid, _) if value[6] >> 4 != 1 => {
            wrong("a timeuuid is a version 1 UUID".into())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::{ColumnDef, Kind};
    use super::*;

    fn table(truncations: u32) -> TableDef {
        TableDef {
            name: "cf".into(),
            id: [7; 16],
            default_ttl_s: 0,
            gc_grace_s: 864_000,
            comment: String::new(),
            truncations,
            dropped: Vec::new(),
            token_order: false,
            sorted_rows: false,
            columns: vec![ColumnDef {
                name: "pk".into(),
                ty: CqlType::Int,
                kind: Kind::PartitionKey,
                descending: false,
            }],
        }
    }

    #[test]
    fn a_table_in_token_order_puts_the_token_before_the_key() {
        let t = TableDef {
            token_order: true,
            ..table(0)
        };
        let key = |i: i32| partition(&t, &[i.to_be_bytes().to_vec()]).unwrap();
        let one = key(5);
        assert_eq!(&one[..2], &TOKEN_TABLE_MARK);
        assert_eq!(&one[TABLE_PREFIX_BYTES + TOKEN_BYTES..], &[0, 0, 0, 5]);
        let token = murmur3_token(&[0, 0, 0, 5]);
        assert_eq!(tally_net::ring::partition_token(&one), token);
        assert_eq!(one[..16], token_prefix(&t, token)[..]);
        assert_eq!(partition_key(&t, &one, 1), Some(vec![vec![0, 0, 0, 5]]));
        assert_eq!(
            partition_key(&table(0), &one, 1),
            None,
            "not the old layout's"
        );
        let mut stored: Vec<Vec<u8>> = (0..100).map(key).collect();
        stored.sort();
        let tokens: Vec<i64> = stored
            .iter()
            .map(|p| tally_net::ring::partition_token(p))
            .collect();
        assert!(tokens.is_sorted(), "partitions sort by token");
        let longest = PARTITION_BYTES_MAX - TOKEN_BYTES;
        assert!(partition(&t, &[vec![1; longest]]).is_ok());
        assert!(partition(&t, &[vec![1; longest + 1]]).is_err());
    }

    #[test]
    fn a_partition_is_placed_by_its_key_as_cassandra_serializes_it() {
        let t = table(0);
        let one = partition(&t, &[vec![0, 0, 0, 5]]).unwrap();
        assert_eq!(&one[..2], &TABLE_MARK);
        assert_eq!(&one[TABLE_PREFIX_BYTES..], &[0, 0, 0, 5]);
        assert_eq!(
            tally_net::ring::partition_token(&one),
            tally_net::ring::murmur3_token(&[0, 0, 0, 5])
        );
        let two = partition(&t, &[b"ab".to_vec(), vec![1]]).unwrap();
        assert_eq!(
            &two[TABLE_PREFIX_BYTES..],
            &[0, 2, b'a', b'b', 0, 0, 1, 1, 0]
        );
        assert_eq!(partition_key(&t, &one, 1), Some(vec![vec![0, 0, 0, 5]]));
        assert_eq!(
            partition_key(&t, &two, 2),
            Some(vec![b"ab".to_vec(), vec![1]])
        );
        assert_eq!(partition_key(&t, &two[..two.len() - 1], 2), None);
        assert_eq!(partition_key(&table(1), &one, 1), None, "another table's");
        assert!(partition(&t, &[vec![]]).is_err(), "an empty key");
        assert!(partition(&t, &[vec![0; PARTITION_BYTES_MAX + 1]]).is_err());
        assert_ne!(
            prefix(&t),
            prefix(&table(1)),
            "a truncated table starts anew"
        );
    }

    #[test]
    fn a_scan_goes_on_after_the_last_partition_it_read() {
        let t = table(0);
        let p = partition(&t, &[vec![0, 0, 0, 5]]).unwrap();
        let at = (p.clone(), b"c".to_vec());
        let state = paging_state(&at, None);
        assert_eq!(
            resume(&t, &state),
            Ok(Resume {
                after: at.clone(),
                left: None
            })
        );
        assert!(resume(&table(1), &state).is_err(), "another table's");
        assert!(resume(&t, &state[..3]).is_err());
        assert!(resume(&t, &[]).is_err());
        // A LIMIT counted down across pages.
        let limited = paging_state(&at, Some(40));
        assert_eq!(
            resume(&t, &limited),
            Ok(Resume {
                after: at.clone(),
                left: Some(40)
            })
        );
        assert!(resume(&t, &limited[..4]).is_err());
        assert!(
            resume(&t, &paging_state(&at, Some(0))).is_err(),
            "nothing left: no state"
        );
        let (at, column) = after_page((&p, b"c"), Some(&p));
        assert_eq!(at, p, "inside the last partition: after all of it");
        assert!(column.len() == tally_engine::STORED_COLUMN_BYTES_MAX && column[0] == 0xFF);
        let q = partition(&t, &[vec![0, 0, 0, 6]]).unwrap();
        assert_eq!(after_page((&q, b""), Some(&p)), (q.clone(), vec![]));
        assert_eq!(after_page((&q, b"x"), None), (q, b"x".to_vec()));
    }

    /// `table(0)` with clustering columns of `types`, its rows sorted or
    /// not.
    fn clustered(types: &[(CqlType, bool)], sorted_rows: bool) -> TableDef {
        let mut t = table(0);
        t.sorted_rows = sorted_rows;
        for (i, (ty, descending)) in types.iter().enumerate() {
            t.columns.push(ColumnDef {
                name: format!("c{i}"),
                ty: ty.clone(),
                kind: Kind::Clustering,
                descending: *descending,
            });
        }
        t
    }

    #[test]
    fn a_column_names_its_row_and_counter_and_splits_back() {
        let text = [(CqlType::Varchar, false), (CqlType::Blob, false)];
        let t = clustered(&text, false);
        let layout = Layout::of(&t);
        let c = layout.column(&[b"x".to_vec(), vec![]], "hits").unwrap();
        assert_eq!(c, b"\x00\x01x\x00\x00hits");
        assert!(!tally_engine::is_reserved(&c));
        assert_eq!(
            layout.split(&c),
            Some((vec![b"x".to_vec(), vec![]], "hits"))
        );
        assert_eq!(layout.row_bytes(&c), Some(5));
        let one = clustered(&text[..1], false);
        assert_eq!(
            Layout::of(&one).split(b"\x00\x09x"),
            None,
            "a length past the end"
        );
        assert_eq!(Layout::of(&table(0)).split(b"hits"), Some((vec![], "hits")));
        assert!(Layout::of(&one).column(&[vec![0; 250]], "counter").is_err());
    }

    #[test]
    fn a_sorted_table_s_columns_sort_by_row_then_name() {
        let types = [(CqlType::Int, false), (CqlType::Varchar, true)];
        let t = clustered(&types, true);
        let layout = Layout::of(&t);
        let row = |i: i32, s: &str| vec![i.to_be_bytes().to_vec(), s.as_bytes().to_vec()];
        let mut columns = Vec::new();
        for i in [-3, 0, 7] {
            for s in ["b", "a"] {
                for name in ["", "v", "w"] {
                    columns.push(layout.column(&row(i, s), name).unwrap());
                }
            }
        }
        assert!(columns.is_sorted(), "by c0, then c1 descending, then name");
        let c = layout.column(&row(-3, "b"), "v").unwrap();
        assert_eq!(c[0], 0x40, "never a static's or a deleted range's byte");
        assert_eq!(layout.split(&c), Some((row(-3, "b"), "v")));
        let prefix = layout.prefix(&row(-3, "b")[..1]).unwrap();
        assert!(c.starts_with(&prefix));
        assert_eq!(layout.row_bytes(&c), Some(c.len() - 1));
        assert!(
            layout.column(&[vec![1], vec![]], "v").is_err(),
            "an int of one byte"
        );
    }

    #[test]
    fn key_values_are_checked_by_type() {
        assert!(check(&CqlType::Int, &[0, 0, 0, 1], "pk").is_ok());
        let e = check(&CqlType::Int, &[0, 1], "pk").unwrap_err();
        assert_eq!(e.code(), 0x2200);
        assert!(check(&CqlType::Varchar, &[0xFF], "pk").is_err());
        assert!(check(&CqlType::Ascii, "é".as_bytes(), "pk").is_err());
        assert!(check(&CqlType::Inet, &[127, 0, 0, 1], "pk").is_ok());
        assert!(check(&CqlType::Timeuuid, &[0; 16], "pk").is_err());
    }
}
