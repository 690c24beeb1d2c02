//! RESULT bodies that carry columns: rows, a prepared statement, a schema
//! change; and the column types and cell encodings they name.
//!
//! ```text
//! Rows      [int] 2, metadata, [int] row count, per row per column [bytes]
//! metadata  [int] flags, [int] column count, [bytes] paging state (flag 0x02),
//!           keyspace and table [string]s once (flag 0x01), per column
//!           [string] name and [option] type; flag 0x04: no columns follow
//! Prepared  [int] 4, [short bytes] id, bind metadata (as metadata, with
//!           [int] pk count and [short] pk indexes after the column
//!           count), result metadata
//! Schema    [int] 5, [string] change, [string] target, [string] keyspace,
//!           [string] name (not for a KEYSPACE)
//! ```
//!
//! Tally always sends the global table spec: every result reads one table.

use super::body::{
    Malformed, Read, Reader, put_bytes, put_int, put_short, put_short_bytes, put_string,
};

/// Most levels of collections within collections, in a type or a
/// literal: enough for any real schema, and a bound on recursion.
pub(crate) const NESTING_MAX: usize = 8;

/// A column's CQL type, as far as Tally's tables and the system tables
/// use them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CqlType {
    Ascii,
    Bigint,
    Blob,
    Boolean,
    Counter,
    Double,
    Int,
    Timestamp,
    Uuid,
    Varchar,
    Timeuuid,
    Inet,
    Date,
    Smallint,
    Tinyint,
    Varint,
    Float,
    Time,
    List(Box<CqlType>),
    Map(Box<CqlType>, Box<CqlType>),
    Set(Box<CqlType>),
}

impl CqlType {
    /// The type's `[option]` id.
    fn id(&self) -> u16 {
        match self {
            CqlType::Ascii => 0x0001,
            CqlType::Bigint => 0x0002,
            CqlType::Blob => 0x0003,
            CqlType::Boolean => 0x0004,
            CqlType::Counter => 0x0005,
            CqlType::Double => 0x0007,
            CqlType::Int => 0x0009,
            CqlType::Timestamp => 0x000B,
            CqlType::Uuid => 0x000C,
            CqlType::Varchar => 0x000D,
            CqlType::Timeuuid => 0x000F,
            CqlType::Inet => 0x0010,
            CqlType::Date => 0x0011,
            CqlType::Smallint => 0x0013,
            CqlType::Tinyint => 0x0014,
            CqlType::Varint => 0x000E,
            CqlType::Float => 0x0008,
            CqlType::Time => 0x0012,
            CqlType::List(_) => 0x0020,
            CqlType::Map(..) => 0x0021,
            CqlType::Set(_) => 0x0022,
        }
    }

    /// Appends the type as an `[option]`.
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        put_short(out, self.id());
        match self {
            CqlType::List(t) | CqlType::Set(t) => t.put(out),
            CqlType::Map(k, v) => {
                k.put(out);
                v.put(out);
            }
            _ => {}
        }
    }

    /// Reads a type written by [`CqlType::put`].
    pub(crate) fn read(r: &mut Reader<'_>) -> Read<CqlType> {
        CqlType::read_nested(r, 0)
    }

    fn read_nested(r: &mut Reader<'_>, depth: usize) -> Read<CqlType> {
        if depth > NESTING_MAX {
            return Err(Malformed("a type nested too deeply".into()));
        }
        let id = r.short()?;
        let mut inner = || CqlType::read_nested(r, depth + 1).map(Box::new);
        Ok(match id {
            0x0001 => CqlType::Ascii,
            0x0002 => CqlType::Bigint,
            0x0003 => CqlType::Blob,
            0x0004 => CqlType::Boolean,
            0x0005 => CqlType::Counter,
            0x0007 => CqlType::Double,
            0x0009 => CqlType::Int,
            0x000B => CqlType::Timestamp,
            0x000C => CqlType::Uuid,
            0x000D => CqlType::Varchar,
            0x000F => CqlType::Timeuuid,
            0x0010 => CqlType::Inet,
            0x0011 => CqlType::Date,
            0x0013 => CqlType::Smallint,
            0x0014 => CqlType::Tinyint,
            0x000E => CqlType::Varint,
            0x0008 => CqlType::Float,
            0x0012 => CqlType::Time,
            0x0020 => CqlType::List(inner()?),
            0x0021 => CqlType::Map(inner()?, inner()?),
            0x0022 => CqlType::Set(inner()?),
            id => return Err(Malformed(format!("type {id:#06x}"))),
        })
    }

    /// The type as CQL writes it (`system_schema.columns.type`).
    pub(crate) fn name(&self) -> String {
        match self {
            CqlType::Ascii => "ascii".into(),
            CqlType::Bigint => "bigint".into(),
            CqlType::Blob => "blob".into(),
            CqlType::Boolean => "boolean".into(),
            CqlType::Counter => "counter".into(),
            CqlType::Double => "double".into(),
            CqlType::Int => "int".into(),
            CqlType::Timestamp => "timestamp".into(),
            CqlType::Uuid => "uuid".into(),
            CqlType::Varchar => "text".into(),
            CqlType::Timeuuid => "timeuuid".into(),
            CqlType::Inet => "inet".into(),
            CqlType::Date => "date".into(),
            CqlType::Smallint => "smallint".into(),
            CqlType::Tinyint => "tinyint".into(),
            CqlType::Varint => "varint".into(),
            CqlType::Float => "float".into(),
            CqlType::Time => "time".into(),
            CqlType::List(t) => format!("list<{}>", t.name()),
            CqlType::Map(k, v) => format!("map<{}, {}>", k.name(), v.name()),
            CqlType::Set(t) => format!("set<{}>", t.name()),
        }
    }
}

/// A result column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) ty: CqlType,
}

/// The table a result reads, and its columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Metadata {
    pub(crate) keyspace: String,
    pub(crate) table: String,
    pub(crate) columns: Vec<Column>,
}

/// Metadata flags.
const GLOBAL_TABLES_SPEC: i32 = 0x0001;
const HAS_MORE_PAGES: i32 = 0x0002;
const NO_METADATA: i32 = 0x0004;

/// RESULT kinds.
const ROWS: i32 = 0x0002;
const PREPARED: i32 = 0x0004;
const SCHEMA_CHANGE: i32 = 0x0005;

/// A cell of a row: its bytes, or null.
pub(crate) type Cell = Option<Vec<u8>>;

impl Metadata {
    fn count(&self) -> i32 {
        i32::try_from(self.columns.len()).expect("columns fit an int")
    }

    fn put_spec(&self, out: &mut Vec<u8>) {
        put_string(out, &self.keyspace);
        put_string(out, &self.table);
        for c in &self.columns {
            put_string(out, &c.name);
            c.ty.put(out);
        }
    }

    /// Appends rows metadata; `skip`: the client has it (no columns).
    fn put(&self, out: &mut Vec<u8>, paging_state: Option<&[u8]>, skip: bool) {
        let mut flags = match skip || self.columns.is_empty() {
            true => NO_METADATA,
            false => GLOBAL_TABLES_SPEC,
        };
        if paging_state.is_some() {
            flags |= HAS_MORE_PAGES;
        }
        put_int(out, flags);
        put_int(out, self.count());
        if let Some(state) = paging_state {
            put_bytes(out, Some(state));
        }
        if flags & NO_METADATA == 0 {
            self.put_spec(out);
        }
    }
}

/// A Rows result: `rows` of `meta`'s columns, in order; `paging_state`
/// where more pages follow; `skip_metadata` as the request asked.
pub(crate) fn rows(
    meta: &Metadata,
    rows: &[Vec<Cell>],
    paging_state: Option<&[u8]>,
    skip_metadata: bool,
) -> Vec<u8> {
    let mut b = Vec::new();
    put_int(&mut b, ROWS);
    meta.put(&mut b, paging_state, skip_metadata);
    put_int(&mut b, i32::try_from(rows.len()).expect("rows fit an int"));
    for row in rows {
        assert_eq!(row.len(), meta.columns.len(), "a row has every column");
        for cell in row {
            put_bytes(&mut b, cell.as_deref());
        }
    }
    b
}

/// A Prepared result: the statement's `id`, its bind markers (`bind`,
/// with the indexes of those that make the partition key, for token-aware
/// drivers), and the columns it answers.
pub(crate) fn prepared(
    id: &[u8],
    bind: &Metadata,
    pk_indexes: &[u16],
    result: &Metadata,
) -> Vec<u8> {
    let mut b = Vec::new();
    put_int(&mut b, PREPARED);
    put_short_bytes(&mut b, id);
    let flags = match bind.columns.is_empty() {
        true => 0,
        false => GLOBAL_TABLES_SPEC,
    };
    put_int(&mut b, flags);
    put_int(&mut b, bind.count());
    put_int(
        &mut b,
        i32::try_from(pk_indexes.len()).expect("few key columns"),
    );
    pk_indexes.iter().for_each(|&i| put_short(&mut b, i));
    if flags != 0 {
        bind.put_spec(&mut b);
    }
    result.put(&mut b, None, false);
    b
}

/// What a schema change did and to what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SchemaChange {
    /// `CREATED`, `UPDATED` or `DROPPED`.
    pub(crate) change: &'static str,
    pub(crate) keyspace: String,
    /// The table; `None` for a change of the keyspace itself.
    pub(crate) table: Option<String>,
}

impl SchemaChange {
    /// Appends the change as a RESULT and an EVENT carry it.
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        put_string(out, self.change);
        match &self.table {
            None => {
                put_string(out, "KEYSPACE");
                put_string(out, &self.keyspace);
            }
            Some(t) => {
                put_string(out, "TABLE");
                put_string(out, &self.keyspace);
                put_string(out, t);
            }
        }
    }

    /// The RESULT of the statement that made it.
    pub(crate) fn result(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put_int(&mut b, SCHEMA_CHANGE);
        self.put(&mut b);
        b
    }
}

/// Cell encodings of the types the system tables use.
pub(crate) mod cell {
    use super::Cell;

    pub(crate) fn text(s: &str) -> Cell {
        Some(s.as_bytes().to_vec())
    }

    pub(crate) fn bigint(v: i64) -> Cell {
        Some(v.to_be_bytes().to_vec())
    }

    pub(crate) fn int(v: i32) -> Cell {
        Some(v.to_be_bytes().to_vec())
    }

    pub(crate) fn boolean(v: bool) -> Cell {
        Some(vec![u8::from(v)])
    }

    pub(crate) fn uuid(v: [u8; 16]) -> Cell {
        Some(v.to_vec())
    }

    /// An `inet`: 4 bytes for IPv4, 16 for IPv6.
    pub(crate) fn inet(ip: std::net::IpAddr) -> Cell {
        Some(match ip {
            std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
            std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
        })
    }

    fn element(out: &mut Vec<u8>, bytes: &[u8]) {
        let n = i32::try_from(bytes.len()).expect("an element under 2 GiB");
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(bytes);
    }

    fn count(out: &mut Vec<u8>, n: usize) {
        let n = i32::try_from(n).expect("elements fit an int");
        out.extend_from_slice(&n.to_be_bytes());
    }

    /// A `set<text>` or `list<text>`: `[int] n`, then each `[int]`-long.
    pub(crate) fn texts(items: &[&str]) -> Cell {
        let mut out = Vec::new();
        count(&mut out, items.len());
        items.iter().for_each(|s| element(&mut out, s.as_bytes()));
        Some(out)
    }

    /// A `map<text, text>`.
    pub(crate) fn text_map(pairs: &[(&str, &str)]) -> Cell {
        let mut out = Vec::new();
        count(&mut out, pairs.len());
        for (k, v) in pairs {
            element(&mut out, k.as_bytes());
            element(&mut out, v.as_bytes());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::body::Reader;
    use super::*;

    fn local() -> Metadata {
        Metadata {
            keyspace: "system".into(),
            table: "local".into(),
            columns: vec![
                Column {
                    name: "key".into(),
                    ty: CqlType::Varchar,
                },
                Column {
                    name: "tokens".into(),
                    ty: CqlType::Set(Box::new(CqlType::Varchar)),
                },
            ],
        }
    }

    #[test]
    fn rows_carry_their_table_columns_and_cells_in_order() {
        let body = rows(
            &local(),
            &[vec![cell::text("local"), cell::texts(&["-5", "7"])]],
            None,
            false,
        );
        let mut r = Reader::new(&body);
        assert_eq!(r.int(), Ok(ROWS));
        assert_eq!((r.int(), r.int()), (Ok(GLOBAL_TABLES_SPEC), Ok(2)));
        assert_eq!(
            (r.string().unwrap(), r.string().unwrap()),
            ("system".into(), "local".into())
        );
        assert_eq!((r.string().unwrap(), r.short()), ("key".into(), Ok(0x000D)));
        assert_eq!(
            (r.string().unwrap(), r.short(), r.short()),
            ("tokens".into(), Ok(0x0022), Ok(0x000D))
        );
        assert_eq!(r.int(), Ok(1), "one row");
        assert_eq!(r.bytes(), Ok(Some(b"local".to_vec())));
        let set = r.bytes().unwrap().unwrap();
        let mut s = Reader::new(&set);
        assert_eq!(s.int(), Ok(2));
        assert_eq!(s.bytes(), Ok(Some(b"-5".to_vec())));
        assert_eq!(s.bytes(), Ok(Some(b"7".to_vec())));
        assert_eq!((r.remaining(), s.remaining()), (0, 0));
    }

    #[test]
    fn skipped_metadata_and_paging_state_are_flagged() {
        let body = rows(&local(), &[], Some(b"next"), true);
        let mut r = Reader::new(&body);
        assert_eq!(r.int(), Ok(ROWS));
        assert_eq!(
            (r.int(), r.int()),
            (Ok(NO_METADATA | HAS_MORE_PAGES), Ok(2))
        );
        assert_eq!(r.bytes(), Ok(Some(b"next".to_vec())));
        assert_eq!(r.int(), Ok(0));
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn a_prepared_statement_names_its_partition_key_markers() {
        let bind = Metadata {
            keyspace: "ks".into(),
            table: "cf".into(),
            columns: vec![Column {
                name: "pk".into(),
                ty: CqlType::Int,
            }],
        };
        let result = Metadata {
            columns: vec![],
            ..bind.clone()
        };
        let body = prepared(b"\x01\x02", &bind, &[0], &result);
        let mut r = Reader::new(&body);
        assert_eq!(r.int(), Ok(PREPARED));
        assert_eq!(r.short_bytes(), Ok(vec![1, 2]));
        assert_eq!(
            (r.int(), r.int(), r.int(), r.short()),
            (Ok(1), Ok(1), Ok(1), Ok(0))
        );
        assert_eq!(
            (r.string().unwrap(), r.string().unwrap()),
            ("ks".into(), "cf".into())
        );
        assert_eq!((r.string().unwrap(), r.short()), ("pk".into(), Ok(0x0009)));
        assert_eq!(
            (r.int(), r.int()),
            (Ok(NO_METADATA), Ok(0)),
            "a write answers no columns"
        );
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn types_are_named_as_cql_writes_them() {
        let m = CqlType::Map(Box::new(CqlType::Varchar), Box::new(CqlType::Varchar));
        assert_eq!(m.name(), "map<text, text>");
        assert_eq!(CqlType::Counter.name(), "counter");
        let change = SchemaChange {
            change: "CREATED",
            keyspace: "ks".into(),
            table: Some("cf".into()),
        };
        let body = change.result();
        let mut r = Reader::new(&body);
        assert_eq!(r.int(), Ok(SCHEMA_CHANGE));
        let words: Vec<String> = (0..4).map(|_| r.string().unwrap()).collect();
        assert_eq!(words, ["CREATED", "TABLE", "ks", "cf"]);
    }
}
