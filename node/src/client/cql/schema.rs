//! The schema: keyspaces and their counter tables, and the rules of the
//! statements that change them, without I/O.
//!
//! The catalog is agreed by the cluster: each keyspace is one register of
//! a reserved partition, changed through agreement (a change worked out
//! from the catalog a read found, agreed only if it is still that), so a
//! table created through one node is there through every other, two
//! nodes never both create one name, and the catalog survives restarts
//! as every agreed value does. Its version (`schema_version`, which
//! drivers compare across nodes) is a hash of it.
//!
//! Replication is Tally's ring's: a keyspace asks for `SimpleStrategy`
//! (or `NetworkTopologyStrategy` with the one data center) with the
//! cluster's replication factor, and says so in `system_schema`, which is
//! the placement token-aware drivers compute (the first N distinct nodes
//! clockwise). A table is a counter table (its columns besides the key
//! all counters) or a regular one (none); each gets an id at its
//! creation, so a table dropped and created again starts empty.
//!
//! A register's value, in the protocol's own notations (`body`):
//! ```text
//! keyspace := [byte] 1 (format), [byte] durable_writes, [short] n, n tables
//! table    := [string] name, 16 bytes id, [int] default_time_to_live,
//!             [string] comment, ([int] truncations: formats 2 to 4),
//!             ([short] n, n × [string] dropped columns: formats 3, 4),
//!             ([byte] token order, [int] gc_grace_seconds, and for
//!             each dropped column [byte] 1, [option] its type, [long]
//!             when (µs), or [byte] 0: format 4),
//!             [short] n, n columns
//! column   := [string] name, [option] type, [byte] kind (0 partition key,
//!             1 clustering, 2 regular, 3 static), [byte] descending
//! ```

use tally_net::wire::{Register, Registers};

use super::ast::{CreateTable, Literal, Statement, TableName};
use super::body::{Read, Reader, put_int, put_short, put_string};
use super::response::CqlError;
use super::result::{CqlType, SchemaChange};

/// The one data center, as `NetworkTopologyStrategy` and the system
/// tables name it.
pub(crate) const DATA_CENTER: &str = "datacenter1";

/// Longest column name.
const COLUMN_NAME_BYTES_MAX: usize = 256;

/// The format byte of an encoded keyspace: 1, or a later one once a
/// table of it needs it (so a build that reads only 1 reads every
/// keyspace that needs no more).
const FORMAT: u8 = 1;
/// The format that has each table's dropped columns too.
const FORMAT_DROPPED: u8 = 3;
/// The format that says, of each table, whether it is in token order,
/// and its gc grace.
const FORMAT_TOKEN_ORDER: u8 = 4;
/// The format that says, of each table, whether its rows are stored in
/// clustering order.
const FORMAT_SORTED_ROWS: u8 = 5;
/// `gc_grace_seconds` unless a table says otherwise: Cassandra's 10 days.
pub(crate) const GC_GRACE_S: i32 = 864_000;
/// The format that has each table's truncations.
const FORMAT_TRUNCATIONS: u8 = 2;

/// A column's place in its table's primary key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    PartitionKey,
    Clustering,
    Regular,
    /// A regular table's column of the whole partition.
    Static,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ColumnDef {
    pub(crate) name: String,
    pub(crate) ty: CqlType,
    pub(crate) kind: Kind,
    /// A clustering column ordered descending.
    pub(crate) descending: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableDef {
    pub(crate) name: String,
    pub(crate) id: [u8; 16],
    pub(crate) default_ttl_s: i32,
    /// How long its dead cells (deleted, or past their TTL) are kept
    /// before compactions may forget them (`gc_grace_seconds`).
    pub(crate) gc_grace_s: i32,
    pub(crate) comment: String,
    /// How many times it was truncated: its cells are those of this
    /// count (`cells::prefix`).
    pub(crate) truncations: u32,
    /// Partition key columns first, then clustering ones, in key order,
    /// then the others in the order written.
    pub(crate) columns: Vec<ColumnDef>,
    /// Columns `ALTER TABLE ... DROP` dropped: their cells are no longer
    /// read, and their names are not taken again (`alter`).
    pub(crate) dropped: Vec<Dropped>,
    /// Its partitions are stored in token order
    /// (`tally_net::ring::TOKEN_TABLE_MARK`): every table made once the
    /// cluster has feature `cql-token-order`.
    pub(crate) token_order: bool,
    /// Its clustering values are stored so that its rows sort in
    /// clustering order (`sortable`): every table made once the cluster
    /// has feature `row-slices`.
    pub(crate) sorted_rows: bool,
}

/// A column `ALTER TABLE ... DROP` dropped: its type and when (µs), so
/// that a column of its name added again reads only cells written after
/// (`None`: dropped by a build that did not keep them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) name: String,
    pub(crate) was: Option<(CqlType, i64)>,
}

impl TableDef {
    /// The time (µs) at and before which cells of column `name` were
    /// dropped with it, if it was.
    pub(crate) fn dropped_until(&self, name: &str) -> Option<i64> {
        let d = self.dropped.iter().find(|d| d.name == name)?;
        Some(d.was.as_ref().map_or(i64::MAX, |(_, at)| *at))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keyspace {
    pub(crate) name: String,
    pub(crate) durable_writes: bool,
    pub(crate) tables: Vec<TableDef>,
}

impl TableDef {
    /// Whether it is a counter table (else a regular one).
    pub(crate) fn is_counter(&self) -> bool {
        self.columns.iter().any(|c| c.ty == CqlType::Counter)
    }
}

impl Keyspace {
    pub(crate) fn table(&self, name: &str) -> Option<&TableDef> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// The keyspace as its register holds it.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let any = |f: fn(&TableDef) -> bool| self.tables.iter().any(f);
        let format = match () {
            _ if any(|t| t.sorted_rows) => FORMAT_SORTED_ROWS,
            _ if any(|t| t.token_order || t.gc_grace_s != GC_GRACE_S) => FORMAT_TOKEN_ORDER,
            _ if any(|t| !t.dropped.is_empty()) => FORMAT_DROPPED,
            _ if any(|t| t.truncations > 0) => FORMAT_TRUNCATIONS,
            _ => FORMAT,
        };
        let mut b = vec![format, u8::from(self.durable_writes)];
        put_short(
            &mut b,
            u16::try_from(self.tables.len()).expect("tables fit a short"),
        );
        for t in &self.tables {
            put_string(&mut b, &t.name);
            b.extend_from_slice(&t.id);
            put_int(&mut b, t.default_ttl_s);
            put_string(&mut b, &t.comment);
            if format >= FORMAT_TRUNCATIONS {
                b.extend_from_slice(&t.truncations.to_be_bytes());
            }
            if format >= FORMAT_DROPPED {
                put_short(
                    &mut b,
                    u16::try_from(t.dropped.len()).expect("dropped fit a short"),
                );
                t.dropped.iter().for_each(|d| put_string(&mut b, &d.name));
            }
            if format >= FORMAT_TOKEN_ORDER {
                b.push(u8::from(t.token_order));
                put_int(&mut b, t.gc_grace_s);
                for d in &t.dropped {
                    match &d.was {
                        Some((ty, at)) => {
                            b.push(1);
                            ty.put(&mut b);
                            super::body::put_long(&mut b, *at);
                        }
                        None => b.push(0),
                    }
                }
            }
            if format >= FORMAT_SORTED_ROWS {
                b.push(u8::from(t.sorted_rows));
            }
            put_short(
                &mut b,
                u16::try_from(t.columns.len()).expect("columns fit a short"),
            );
            for c in &t.columns {
                put_string(&mut b, &c.name);
                c.ty.put(&mut b);
                b.push(match c.kind {
                    Kind::PartitionKey => 0,
                    Kind::Clustering => 1,
                    Kind::Regular => 2,
                    Kind::Static => 3,
                });
                b.push(u8::from(c.descending));
            }
        }
        b
    }

    /// The keyspace `name` from its register's value.
    pub(crate) fn decode(name: &str, bytes: &[u8]) -> Read<Keyspace> {
        let mut r = Reader::new(bytes);
        let bad = |what: String| super::body::Malformed(format!("keyspace {name}: {what}"));
        let format = r.byte()?;
        if !(FORMAT..=FORMAT_SORTED_ROWS).contains(&format) {
            return Err(bad(format!("format {format}")));
        }
        let durable_writes = r.byte()? != 0;
        let mut tables = Vec::new();
        for _ in 0..r.short()? {
            let name = r.string()?;
            let mut id = [0u8; 16];
            for b in &mut id {
                *b = r.byte()?;
            }
            let default_ttl_s = r.int()?;
            let comment = r.string()?;
            let truncations = match format {
                FORMAT => 0,
                _ => u32::from_be_bytes(r.int()?.to_be_bytes()),
            };
            let mut dropped = Vec::new();
            if format >= FORMAT_DROPPED {
                for _ in 0..r.short()? {
                    let name = r.string()?;
                    dropped.push(Dropped { name, was: None });
                }
            }
            let (token_order, gc_grace_s) = match format >= FORMAT_TOKEN_ORDER {
                true => (r.byte()? != 0, r.int()?),
                false => (false, GC_GRACE_S),
            };
            if format >= FORMAT_TOKEN_ORDER {
                for d in &mut dropped {
                    d.was = match r.byte()? {
                        0 => None,
                        _ => Some((CqlType::read(&mut r)?, r.long()?)),
                    };
                }
            }
            let sorted_rows = format >= FORMAT_SORTED_ROWS && r.byte()? != 0;
            let mut columns = Vec::new();
            for _ in 0..r.short()? {
                let name = r.string()?;
                let ty = CqlType::read(&mut r)?;
                let kind = match r.byte()? {
                    0 => Kind::PartitionKey,
                    1 => Kind::Clustering,
                    2 => Kind::Regular,
                    3 => Kind::Static,
                    k => return Err(bad(format!("column kind {k}"))),
                };
                let descending = r.byte()? != 0;
                columns.push(ColumnDef {
                    name,
                    ty,
                    kind,
                    descending,
                });
            }
            tables.push(TableDef {
                name,
                id,
                default_ttl_s,
                comment,
                truncations,
                columns,
                dropped,
                token_order,
                gc_grace_s,
                sorted_rows,
            });
        }
        if r.remaining() > 0 {
            return Err(bad(format!("{} bytes left over", r.remaining())));
        }
        Ok(Keyspace {
            name: name.into(),
            durable_writes,
            tables,
        })
    }
}

/// What a schema statement does to the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing (`IF NOT EXISTS` of one that exists, `IF EXISTS` of one
    /// that does not).
    None,
    /// Put this keyspace (new, or with a table added or dropped).
    Put(Keyspace, SchemaChange),
    /// Remove the keyspace `name`.
    Drop(String, SchemaChange),
    /// Put this keyspace, one of its tables truncated (which answers no
    /// schema change).
    Truncate(Keyspace),
}

/// `CREATE KEYSPACE name WITH options`, given the keyspace as it is now
/// (`existing`) and the cluster's replication factor.
pub(crate) fn create_keyspace(
    name: &str,
    if_not_exists: bool,
    options: &[(String, Literal)],
    existing: Option<&Keyspace>,
    rf: usize,
) -> Result<Change, CqlError> {
    check_name(name)?;
    let mut durable_writes = true;
    let mut replication = None;
    for (option, value) in options {
        match (option.as_str(), value) {
            ("replication", Literal::Map(pairs)) => replication = Some(pairs),
            ("durable_writes", Literal::Bool(b)) => durable_writes = *b,
            (other, _) => {
                return Err(CqlError::Syntax(format!("Unknown property '{other}'")));
            }
        }
    }
    let pairs = replication
        .ok_or_else(|| CqlError::Config("Missing mandatory replication strategy class".into()))?;
    check_replication(pairs, rf)?;
    match existing {
        Some(_) if if_not_exists => Ok(Change::None),
        Some(_) => Err(CqlError::AlreadyExists {
            message: format!("Keyspace {name} already exists"),
            keyspace: name.into(),
            table: String::new(),
        }),
        None => Ok(Change::Put(
            Keyspace {
                name: name.into(),
                durable_writes,
                tables: Vec::new(),
            },
            SchemaChange {
                change: "CREATED",
                keyspace: name.into(),
                table: None,
            },
        )),
    }
}

/// A replication map is Tally's ring's: `SimpleStrategy` with the
/// cluster's factor, or `NetworkTopologyStrategy` with it in the one
/// data center.
fn check_replication(pairs: &[(Literal, Literal)], rf: usize) -> Result<(), CqlError> {
    let text = |l: &Literal| match l {
        Literal::Str(s) => Some(s.clone()),
        Literal::Int(i) => Some(i.to_string()),
        _ => None,
    };
    let map: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| Some((text(k)?, text(v)?)))
        .collect::<Option<_>>()
        .ok_or_else(|| CqlError::Config("replication options are strings".into()))?;
    let get = |k: &str| {
        map.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let class = get("class")
        .ok_or_else(|| CqlError::Config("Missing replication strategy class".into()))?;
    let factor = match class.rsplit('.').next().unwrap_or(class) {
        "SimpleStrategy" => get("replication_factor"),
        "NetworkTopologyStrategy" => get(DATA_CENTER).or(get("replication_factor")),
        other => {
            return Err(CqlError::Config(format!(
                "Unable to find replication strategy class '{other}': Tally places replicas as \
                 SimpleStrategy does"
            )));
        }
    };
    match factor.and_then(|f| f.parse::<usize>().ok()) {
        Some(f) if f == rf => Ok(()),
        _ => Err(CqlError::Config(format!(
            "Tally replicates every keyspace as its ring does: replication_factor {rf}"
        ))),
    }
}

fn check_name(name: &str) -> Result<(), CqlError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match ok {
        true => Ok(()),
        false => Err(CqlError::Invalid(format!(
            "\"{name}\" is not a valid name: at most 48 letters, digits and underscores"
        ))),
    }
}

/// Whether `statement` makes a regular table (which every member must
/// know before one is made: `features::CQL_REGULAR_TABLES`).
pub(crate) fn makes_regular_table(statement: &Statement) -> bool {
    match statement {
        Statement::CreateTable(t) => t.columns.iter().all(|(_, ty)| *ty != CqlType::Counter),
        _ => false,
    }
}

/// What a schema change is made with: a fresh id, whether it is
/// stored in token order (once the cluster has feature
/// `cql-token-order`) and with its rows sorted (`row-slices`), for a
/// table it makes; the time (µs), for a column
/// it drops.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fresh {
    pub(crate) id: [u8; 16],
    pub(crate) token_order: bool,
    pub(crate) sorted_rows: bool,
    pub(crate) now_us: i64,
}

impl From<[u8; 16]> for Fresh {
    /// A table of id `id`, in token order, its rows sorted, at time 0.
    fn from(id: [u8; 16]) -> Fresh {
        Fresh {
            id,
            token_order: true,
            sorted_rows: true,
            now_us: 0,
        }
    }
}

/// `CREATE TABLE`, given its keyspace as it is now, and what it is made
/// with.
pub(crate) fn create_table(
    t: &CreateTable,
    keyspace: &Keyspace,
    fresh: Fresh,
) -> Result<Change, CqlError> {
    check_name(&t.table.name)?;
    if keyspace.table(&t.table.name).is_some() {
        return match t.if_not_exists {
            true => Ok(Change::None),
            false => Err(CqlError::AlreadyExists {
                message: format!("Table {}.{} already exists", keyspace.name, t.table.name),
                keyspace: keyspace.name.clone(),
                table: t.table.name.clone(),
            }),
        };
    }
    let table = table_def(t, fresh)?;
    let mut next = keyspace.clone();
    next.tables.push(table);
    Ok(Change::Put(
        next,
        SchemaChange {
            change: "CREATED",
            keyspace: keyspace.name.clone(),
            table: Some(t.table.name.clone()),
        },
    ))
}

/// The definition `t` makes: its key columns checked, its other columns
/// all counters.
fn table_def(t: &CreateTable, fresh: Fresh) -> Result<TableDef, CqlError> {
    let invalid = |m: String| Err(CqlError::Invalid(m));
    let type_of = |name: &str| {
        t.columns
            .iter()
            .find(|(c, _)| c == name)
            .map(|(_, ty)| ty.clone())
    };
    if t.partition_key.is_empty() {
        return invalid("No PRIMARY KEY specified (exactly one required)".into());
    }
    let mut columns = Vec::new();
    let keys = t.partition_key.iter().map(|c| (c, Kind::PartitionKey));
    for (name, kind) in keys.chain(t.clustering.iter().map(|c| (c, Kind::Clustering))) {
        let Some(ty) = type_of(name) else {
            return invalid(format!(
                "Unknown definition {name} referenced in PRIMARY KEY"
            ));
        };
        if columns.iter().any(|c: &ColumnDef| c.name == *name) {
            return invalid(format!("Duplicate column {name} in PRIMARY KEY"));
        }
        if matches!(
            ty,
            CqlType::Counter | CqlType::List(_) | CqlType::Set(_) | CqlType::Map(..)
        ) {
            return invalid(format!(
                "Invalid type {} for PRIMARY KEY column {name}",
                ty.name()
            ));
        }
        columns.push(ColumnDef {
            name: name.clone(),
            ty,
            kind,
            descending: false,
        });
    }
    clustering_order(t, &mut columns)?;
    if let Some((name, _)) = t
        .columns
        .iter()
        .find(|(c, _)| c.is_empty() || c.len() > COLUMN_NAME_BYTES_MAX)
    {
        return invalid(format!(
            "a column name is 1 to {COLUMN_NAME_BYTES_MAX} bytes: {} given",
            name.len()
        ));
    }
    other_columns(t, &mut columns)?;
    let (default_ttl_s, comment, gc_grace_s) = table_options(&t.options)?;
    Ok(TableDef {
        name: t.table.name.clone(),
        id: fresh.id,
        default_ttl_s,
        gc_grace_s: gc_grace_s.unwrap_or(GC_GRACE_S),
        comment,
        truncations: 0,
        columns,
        dropped: Vec::new(),
        token_order: fresh.token_order,
        sorted_rows: fresh.sorted_rows,
    })
}

/// The columns besides the key, after `columns` (the key's): all
/// counters (a counter table), or none (a regular table, whose columns
/// may be static if it has clustering columns).
fn other_columns(t: &CreateTable, columns: &mut Vec<ColumnDef>) -> Result<(), CqlError> {
    let invalid = |m: String| Err(CqlError::Invalid(m));
    let keys = columns.len();
    let counter = t.columns.iter().any(|(_, ty)| *ty == CqlType::Counter);
    for (name, ty) in &t.columns {
        if columns[..keys].iter().any(|c| c.name == *name) {
            continue;
        }
        if t.columns.iter().filter(|(c, _)| c == name).count() > 1 {
            return invalid(format!("Multiple definition of identifier {name}"));
        }
        if counter != (*ty == CqlType::Counter) {
            return invalid("Cannot mix counter and non counter columns in the same table".into());
        }
        if matches!(ty, CqlType::List(_) | CqlType::Set(_) | CqlType::Map(..)) {
            return invalid(format!(
                "{name} is a {}: collections are not served yet",
                ty.name()
            ));
        }
        let kind = match t.statics.contains(name) {
            true if t.clustering.is_empty() => {
                return invalid(
                    "Static columns are only useful (and thus allowed) if the table has at \
                     least one clustering column"
                        .into(),
                );
            }
            true if counter => return invalid("Static counter columns are not served".into()),
            true => Kind::Static,
            false => Kind::Regular,
        };
        columns.push(ColumnDef {
            name: name.clone(),
            ty: ty.clone(),
            kind,
            descending: false,
        });
    }
    if let Some(s) = t
        .statics
        .iter()
        .find(|s| columns[..keys].iter().any(|c| c.name == **s))
    {
        return invalid(format!(
            "Static column {s} cannot be part of the PRIMARY KEY"
        ));
    }
    Ok(())
}

/// `WITH CLUSTERING ORDER BY`: the clustering columns, in their order.
fn clustering_order(t: &CreateTable, columns: &mut [ColumnDef]) -> Result<(), CqlError> {
    if t.clustering_order.is_empty() {
        return Ok(());
    }
    let order: Vec<&String> = t.clustering_order.iter().map(|(c, _)| c).collect();
    if order.len() > t.clustering.len() || order.iter().zip(&t.clustering).any(|(a, b)| *a != b) {
        return Err(CqlError::Invalid(
            "Columns in CLUSTERING ORDER BY must be the clustering columns, in their order".into(),
        ));
    }
    for (name, desc) in &t.clustering_order {
        if let Some(c) = columns.iter_mut().find(|c| c.name == *name) {
            c.descending = *desc;
        }
    }
    Ok(())
}

/// The table options Tally keeps (`default_time_to_live`, `comment`);
/// Cassandra's others are accepted and have no effect here.
pub(crate) fn table_options(
    options: &[(String, Literal)],
) -> Result<(i32, String, Option<i32>), CqlError> {
    const IGNORED: [&str; 13] = [
        "bloom_filter_fp_chance",
        "caching",
        "cdc",
        "compaction",
        "compression",
        "crc_check_chance",
        "dclocal_read_repair_chance",
        "extensions",
        "max_index_interval",
        "memtable_flush_period_in_ms",
        "min_index_interval",
        "read_repair_chance",
        "speculative_retry",
    ];
    let (mut ttl, mut comment, mut gc_grace) = (0, String::new(), None);
    for (name, value) in options {
        match (name.as_str(), value) {
            ("default_time_to_live", Literal::Int(s)) => {
                ttl = i32::try_from(*s).ok().filter(|s| *s >= 0).ok_or_else(|| {
                    CqlError::Config(format!("default_time_to_live must be at least 0: {s}"))
                })?;
            }
            ("comment", Literal::Str(c)) => comment.clone_from(c),
            ("gc_grace_seconds", Literal::Int(s)) => {
                let s = i32::try_from(*s).ok().filter(|s| *s >= 0).ok_or_else(|| {
                    CqlError::Config(format!("gc_grace_seconds must be at least 0: {s}"))
                })?;
                gc_grace = Some(s);
            }
            (other, _) if IGNORED.contains(&other) => {}
            (other, _) => return Err(CqlError::Syntax(format!("Unknown property '{other}'"))),
        }
    }
    Ok((ttl, comment, gc_grace))
}

/// `DROP TABLE`, given the table's keyspace as it is now (if it exists).
pub(crate) fn drop_table(
    table: &TableName,
    if_exists: bool,
    keyspace: Option<&Keyspace>,
    ks_name: &str,
) -> Result<Change, CqlError> {
    let Some(ks) = keyspace else {
        return match if_exists {
            true => Ok(Change::None),
            false => Err(CqlError::Invalid(format!(
                "Keyspace {ks_name} does not exist"
            ))),
        };
    };
    if ks.table(&table.name).is_none() {
        return match if_exists {
            true => Ok(Change::None),
            false => Err(CqlError::Invalid(format!(
                "unconfigured table {}",
                table.name
            ))),
        };
    }
    let mut next = ks.clone();
    next.tables.retain(|t| t.name != table.name);
    Ok(Change::Put(
        next,
        SchemaChange {
            change: "DROPPED",
            keyspace: ks.name.clone(),
            table: Some(table.name.clone()),
        },
    ))
}

/// `DROP KEYSPACE`, given it as it is now.
pub(crate) fn drop_keyspace(
    name: &str,
    if_exists: bool,
    existing: Option<&Keyspace>,
) -> Result<Change, CqlError> {
    match (existing, if_exists) {
        (Some(_), _) => Ok(Change::Drop(
            name.into(),
            SchemaChange {
                change: "DROPPED",
                keyspace: name.into(),
                table: None,
            },
        )),
        (None, true) => Ok(Change::None),
        (None, false) => Err(CqlError::Invalid(format!("Keyspace {name} does not exist"))),
    }
}

/// What `statement` (a schema change) does to `catalog`; `session` is
/// the connection's keyspace, `fresh` what a table it creates is made
/// with.
pub(crate) fn apply(
    statement: &Statement,
    catalog: &[Keyspace],
    session: Option<&str>,
    rf: usize,
    fresh: Fresh,
) -> Result<Change, CqlError> {
    let find = |name: &str| catalog.iter().find(|k| k.name == name);
    let keyspace_of = |t: &TableName| -> Result<String, CqlError> {
        t.keyspace.clone().or_else(|| session.map(str::to_string)).ok_or_else(|| {
            CqlError::Invalid(
                "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename"
                    .into(),
            )
        })
    };
    match statement {
        Statement::CreateKeyspace {
            name,
            if_not_exists,
            options,
        } => create_keyspace(name, *if_not_exists, options, find(name), rf),
        Statement::CreateTable(t) => {
            let ks = keyspace_of(&t.table)?;
            let keyspace = find(&ks)
                .ok_or_else(|| CqlError::Invalid(format!("Keyspace {ks} does not exist")))?;
            create_table(t, keyspace, fresh)
        }
        Statement::DropTable { table, if_exists } => {
            let ks = keyspace_of(table)?;
            drop_table(table, *if_exists, find(&ks), &ks)
        }
        Statement::DropKeyspace { name, if_exists } => drop_keyspace(name, *if_exists, find(name)),
        Statement::Truncate(table) => {
            let ks = keyspace_of(table)?;
            truncate(table, find(&ks), &ks)
        }
        Statement::AlterTable(table, alteration) => {
            let ks = keyspace_of(table)?;
            alter::alter(table, alteration, find(&ks), (&ks, fresh.now_us))
        }
        other => Err(CqlError::Server(format!("not a schema change: {other:?}"))),
    }
}

/// Whether `statement` changes the schema.
pub(crate) fn changes_schema(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::CreateKeyspace { .. }
            | Statement::CreateTable(_)
            | Statement::DropKeyspace { .. }
            | Statement::DropTable { .. }
            | Statement::Truncate(_)
            | Statement::AlterTable(..)
    )
}

/// Whether `change` leaves a table's cells behind (`TRUNCATE`, `DROP`):
/// a node must no longer run statements with the schema from before it.
pub(crate) fn empties(change: &Change) -> bool {
    match change {
        Change::None => false,
        Change::Truncate(_) | Change::Drop(..) => true,
        Change::Put(_, c) => c.change == "DROPPED",
    }
}

/// `TRUNCATE`: the table's cells from now on are a new set, empty.
pub(crate) fn truncate(
    table: &TableName,
    keyspace: Option<&Keyspace>,
    ks_name: &str,
) -> Result<Change, CqlError> {
    let Some(ks) = keyspace else {
        return Err(CqlError::Invalid(format!(
            "Keyspace {ks_name} does not exist"
        )));
    };
    let mut next = ks.clone();
    let Some(t) = next.tables.iter_mut().find(|t| t.name == table.name) else {
        return Err(CqlError::Invalid(format!(
            "unconfigured table {}",
            table.name
        )));
    };
    t.truncations = t.truncations.wrapping_add(1);
    Ok(Change::Truncate(next))
}

/// The catalog the registers of the schema's partition hold: a register
/// per keyspace, its name the column (`skip`: the columns the node keeps
/// beside them, like the round history).
pub(crate) fn catalog_of(registers: &Registers, skip: &[u8]) -> Read<Vec<Keyspace>> {
    registers
        .0
        .iter()
        .filter(|r| r.column != skip)
        .map(|r| Keyspace::decode(&String::from_utf8_lossy(&r.column), &r.value))
        .collect()
}

/// `registers` after `change`.
pub(crate) fn registers_after(registers: &Registers, change: &Change) -> Registers {
    let mut next = registers.clone();
    match change {
        Change::None => {}
        Change::Put(ks, _) | Change::Truncate(ks) => next.put(Register {
            column: ks.name.as_bytes().to_vec(),
            value: ks.encode(),
            at_ms: 0,
        }),
        Change::Drop(name, _) => {
            next.remove(name.as_bytes());
        }
    }
    next
}

mod alter;

/// The table `create` makes in an empty keyspace `ks`, as the schema
/// makes it: for the tests of the rules that work on tables.
#[cfg(test)]
pub(crate) fn test_table(create: &str) -> TableDef {
    let ks = Keyspace {
        name: "ks".into(),
        durable_writes: true,
        tables: Vec::new(),
    };
    let statement = super::parse::parse(create).expect("a statement").0;
    match apply(&statement, &[ks], Some("ks"), 3, [1; 16].into()) {
        Ok(Change::Put(ks, _)) => ks.tables[0].clone(),
        other => panic!("{create}: {other:?}"),
    }
}

#[cfg(test)]
mod tests;
