//! Pages of a SELECT that names its partitions, without I/O: the rows it
//! answers (every row of its partitions, in order) cut into pages of the
//! driver's fetch size. A paging state names the last row a page held,
//! by its partition's place in the statement and its clustering values,
//! as Cassandra's does: the next page holds the rows after it, so a row
//! changed meanwhile is never answered twice.
//!
//! ```text
//! state := 'P', [u16 BE] partition, for each clustering column:
//!          [u16 BE] length, value
//! ```
//!
//! An aggregate, or a SELECT with a LIMIT, answers in one page; one that
//! orders the rows of several partitions is refused paging, as Cassandra
//! refuses it.

use std::cmp::Ordering;

use super::ast::{Select, Selection};
use super::response::CqlError;
use super::result::Cell;
use super::rows::{Query, Target, clustering_types, descending, order};
use super::schema::Kind;

/// A page: its rows, and the state to ask for the next with, if any.
pub(crate) type Page = (Vec<Vec<Cell>>, Option<Vec<u8>>);

/// The first byte of a page's state (a scan's begins otherwise).
const MARK: u8 = b'P';

/// Where a page ended: its last row's partition (its place in the
/// query) and clustering values.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Place {
    partition: usize,
    clustering: Vec<Vec<u8>>,
}

/// The page of `rows` (the SELECT's rows, with every column, in order)
/// after `state`, at most `size` rows; and the state after it, if rows
/// are left.
pub(crate) fn page(
    t: Target,
    (s, q): (&Select, &Query),
    rows: Vec<Vec<Cell>>,
    size: Option<i32>,
    state: Option<&[u8]>,
) -> Result<Page, CqlError> {
    let size = match size {
        Some(n) if n > 0 => n as usize,
        _ => return Ok((rows, None)),
    };
    if aggregates(s) || s.limit.is_some() {
        return Ok((rows, None));
    }
    if !s.order_by.is_empty() && q.rows.partitions.len() > 1 {
        return Err(CqlError::Invalid(
            "Cannot page queries with both ORDER BY and a IN restriction on the partition key; \
             you must either remove the ORDER BY or the IN and sort client side, or disable \
             paging for this query"
                .into(),
        ));
    }
    let keys = t
        .table
        .columns
        .iter()
        .filter(|c| c.kind == Kind::PartitionKey)
        .count();
    let clustering = clustering_types(t).len();
    let place_of = |row: &[Cell]| -> Option<Place> {
        let key: Vec<Vec<u8>> = row[..keys]
            .iter()
            .map(|c| c.clone().unwrap_or_default())
            .collect();
        let partition = q.rows.partitions.iter().position(|(k, _)| *k == key)?;
        let values = row[keys..keys + clustering].iter();
        let clustering = values.map(|c| c.clone().unwrap_or_default()).collect();
        Some(Place {
            partition,
            clustering,
        })
    };
    // A partition's row of static columns alone (no clustering values)
    // comes only when it has no rows: never after a row of it.
    let statics_only =
        |row: &[Cell]| clustering > 0 && row[keys..keys + clustering].iter().all(Option::is_none);
    let from = match state {
        None => 0,
        Some(state) => {
            let after = decode(state, clustering)?;
            let types = clustering_types(t);
            let descending = descending(t);
            let later = |p: &Place, statics: bool| match p.partition.cmp(&after.partition) {
                Ordering::Equal if statics => false,
                Ordering::Equal => {
                    let o = order(&types, &descending, &p.clustering, &after.clustering);
                    if q.reversed {
                        o == Ordering::Less
                    } else {
                        o == Ordering::Greater
                    }
                }
                o => o == Ordering::Greater,
            };
            rows.iter()
                .position(|r| place_of(r).is_none_or(|p| later(&p, statics_only(r))))
                .unwrap_or(rows.len())
        }
    };
    let end = (from + size).min(rows.len());
    let next = match end < rows.len() {
        true => place_of(&rows[end - 1]).map(|p| encode(&p)),
        false => None,
    };
    Ok((rows.into_iter().skip(from).take(end - from).collect(), next))
}

/// Where the page before a `state` ended: its last row's partition (its
/// place in the statement) and clustering values.
pub(crate) fn resumes_after(
    state: &[u8],
    clustering: usize,
) -> Result<(usize, Vec<Vec<u8>>), CqlError> {
    let p = decode(state, clustering)?;
    Ok((p.partition, p.clustering))
}

fn encode(p: &Place) -> Vec<u8> {
    let mut out = vec![MARK];
    out.extend_from_slice(&u16::try_from(p.partition).unwrap_or(u16::MAX).to_be_bytes());
    for v in &p.clustering {
        out.extend_from_slice(&u16::try_from(v.len()).unwrap_or(u16::MAX).to_be_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn decode(state: &[u8], clustering: usize) -> Result<Place, CqlError> {
    let bad = || CqlError::Protocol("a paging state this node did not make".into());
    let rest = state.strip_prefix(&[MARK]).ok_or_else(bad)?;
    let (partition, mut rest) = rest.split_first_chunk::<2>().ok_or_else(bad)?;
    let mut values = Vec::with_capacity(clustering);
    for _ in 0..clustering {
        let (len, tail) = rest.split_first_chunk::<2>().ok_or_else(bad)?;
        let len = usize::from(u16::from_be_bytes(*len));
        values.push(tail.get(..len).ok_or_else(bad)?.to_vec());
        rest = &tail[len..];
    }
    match rest.is_empty() {
        true => Ok(Place {
            partition: usize::from(u16::from_be_bytes(*partition)),
            clustering: values,
        }),
        false => Err(bad()),
    }
}

/// Whether `s` answers aggregates (one page, whatever the page size).
pub(crate) fn aggregates(s: &Select) -> bool {
    match &s.selection {
        Selection::Count(_) => true,
        Selection::Columns(c) => super::select::aggregate::any(c) || !s.group_by.is_empty(),
        Selection::All => !s.group_by.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::ast::Statement;
    use super::super::parse::parse;
    use super::super::rows::{query, table_rows};
    use super::super::schema::{Change, Keyspace, TableDef, apply};
    use super::*;
    use std::collections::BTreeMap;

    fn table() -> TableDef {
        let ks = Keyspace {
            name: "ks".into(),
            durable_writes: true,
            tables: Vec::new(),
        };
        let create = "CREATE TABLE cf (pk int, ck int, c counter, PRIMARY KEY (pk, ck))";
        let (statement, _) = parse(create).unwrap();
        match apply(&statement, &[ks], Some("ks"), 3, [1; 16].into()).unwrap() {
            Change::Put(ks, _) => ks.tables[0].clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Every page of `q` over partitions 1 and 2 of ten rows each, `size`
    /// at a time, following the states: each page's `ck`s.
    fn pages(q: &str, size: i32) -> Result<Vec<Vec<i32>>, CqlError> {
        let t = table();
        let target = Target {
            keyspace: "ks",
            table: &t,
        };
        let Statement::Select(s) = parse(q).unwrap().0 else {
            panic!()
        };
        let plan = query(target, &s, &[])?;
        let read: Vec<BTreeMap<Vec<u8>, Option<i64>>> = (0..2)
            .map(|_| {
                (0..10)
                    .map(|ck: i32| {
                        let column = super::super::cells::Layout::of(&t)
                            .column(&[ck.to_be_bytes().to_vec()], "c");
                        (column.unwrap(), Some(1))
                    })
                    .collect()
            })
            .collect();
        let all = table_rows(target, &s, &plan, &read);
        let (mut out, mut state) = (Vec::new(), None::<Vec<u8>>);
        loop {
            let (rows, next) = page(
                target,
                (&s, &plan),
                all.clone(),
                Some(size),
                state.as_deref(),
            )?;
            out.push(
                rows.iter()
                    .map(|r| i32::from_be_bytes(r[1].clone().unwrap().try_into().unwrap()))
                    .collect(),
            );
            match next {
                Some(n) => state = Some(n),
                None => return Ok(out),
            }
        }
    }

    #[test]
    fn pages_follow_each_other_without_a_row_twice() {
        let got = pages("SELECT * FROM cf WHERE pk IN (1, 2)", 7).unwrap();
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [7, 7, 6]);
        let flat: Vec<i32> = got.concat();
        let want: Vec<i32> = (0..10).chain(0..10).collect();
        assert_eq!(flat, want);
        let reversed = pages("SELECT * FROM cf WHERE pk = 1 ORDER BY ck DESC", 4).unwrap();
        assert_eq!(reversed.concat(), (0..10).rev().collect::<Vec<_>>());
        assert_eq!(
            pages("SELECT * FROM cf WHERE pk = 1", 10).unwrap(),
            [(0..10).collect::<Vec<_>>()]
        );
    }

    #[test]
    fn what_pages_cannot_be_is_answered_whole_or_refused() {
        assert_eq!(
            pages("SELECT * FROM cf WHERE pk = 1 LIMIT 9", 2)
                .unwrap()
                .len(),
            1
        );
        let e = pages("SELECT * FROM cf WHERE pk IN (1, 2) ORDER BY ck DESC", 2).unwrap_err();
        assert!(
            e.message()
                .starts_with("Cannot page queries with both ORDER BY"),
            "{e:?}"
        );
        assert!(decode(b"Pxx", 1).is_err());
        assert!(decode(b"\x00\x01", 0).is_err());
        assert_eq!(
            decode(
                &encode(&Place {
                    partition: 3,
                    clustering: vec![b"ab".to_vec()]
                }),
                1
            ),
            Ok(Place {
                partition: 3,
                clustering: vec![b"ab".to_vec()]
            })
        );
    }
}
