//! The statements Tally serves, as the parser ([`super::parse`]) makes
//! them: what a statement says, not yet checked against a schema.

use super::result::CqlType;

/// A table's name, its keyspace if the statement names one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableName {
    pub(crate) keyspace: Option<String>,
    pub(crate) name: String,
}

/// A literal value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Literal {
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
    Null,
    Uuid([u8; 16]),
    Blob(Vec<u8>),
    /// `{k: v, ...}` (a map, as replication options are written).
    Map(Vec<(Literal, Literal)>),
    /// `{a, b}` (a set) or `[a, b]` (a list).
    Collection(Vec<Literal>),
}

/// A value in a statement: written in it, or bound to a marker.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Term {
    Literal(Literal),
    /// `?`: the next positional value (markers count from 0 in order).
    Marker(usize),
    /// `:name`, bound by name (or positionally, in marker order).
    Named(usize, String),
}

/// A comparison of a WHERE clause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
    /// `!=` (a condition's only).
    Ne,
    /// `IN (a, b)` or `IN ?`.
    In,
}

/// One relation of a WHERE clause: `column op term(s)`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Relation {
    pub(crate) column: String,
    pub(crate) op: Op,
    /// One term, or an `IN` list's (a single marker binds a whole list).
    pub(crate) terms: Vec<Term>,
}

/// A `TOKEN()` relation of a SELECT's WHERE: `token(columns) op bound`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TokenRelation {
    /// The columns `token()` is applied to (the partition key's, in
    /// order, to be valid).
    pub(crate) columns: Vec<String>,
    pub(crate) op: Op,
    pub(crate) bound: TokenBound,
}

/// The other side of a `TOKEN()` relation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TokenBound {
    /// A token (a bigint).
    Value(Term),
    /// `token(values)`: the token of a partition key.
    Of(Vec<Term>),
}

/// The name Cassandra gives `token(columns)` as a selector.
pub(crate) fn token_selector(columns: &[String]) -> String {
    format!("system.token({})", columns.join(", "))
}

/// What a SELECT answers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Selection {
    /// `*`.
    All,
    /// `COUNT(*)` or `COUNT(1)`, with its alias.
    Count(Option<String>),
    /// Columns, each with its alias (the same column may come twice).
    Columns(Vec<(String, Option<String>)>),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Select {
    pub(crate) table: TableName,
    pub(crate) selection: Selection,
    pub(crate) relations: Vec<Relation>,
    /// `token(pk) op bound` relations: a range of partitions to scan.
    pub(crate) tokens: Vec<TokenRelation>,
    /// `GROUP BY`'s columns (a prefix of the primary key's).
    pub(crate) group_by: Vec<String>,
    /// Clustering columns and whether descending.
    pub(crate) order_by: Vec<(String, bool)>,
    pub(crate) limit: Option<Term>,
    pub(crate) allow_filtering: bool,
    /// `SELECT DISTINCT`: one row per partition.
    pub(crate) distinct: bool,
    /// `PER PARTITION LIMIT n`.
    pub(crate) per_partition_limit: Option<Term>,
}

/// One assignment of an UPDATE's SET.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Assignment {
    /// `c = c + t` (or `c = t + c`).
    Add(String, Term),
    /// `c = c - t`.
    Sub(String, Term),
    /// `c = t`.
    Set(String, Term),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Update {
    pub(crate) table: TableName,
    pub(crate) ttl: Option<Term>,
    pub(crate) timestamp: Option<Term>,
    pub(crate) assignments: Vec<Assignment>,
    pub(crate) relations: Vec<Relation>,
    pub(crate) condition: Option<Condition>,
}

/// A lightweight transaction's condition: the statement applies only if
/// it holds, agreed with the row's replicas.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Condition {
    /// `IF NOT EXISTS` (an INSERT's).
    NotExists,
    /// `IF EXISTS`.
    Exists,
    /// `IF col op v AND ...` (`=`, `!=`, `<`, `<=`, `>`, `>=`, `IN`).
    Columns(Vec<Relation>),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Insert {
    pub(crate) table: TableName,
    /// The columns named, in order, and the value of each.
    pub(crate) columns: Vec<String>,
    pub(crate) values: Vec<Term>,
    pub(crate) ttl: Option<Term>,
    pub(crate) timestamp: Option<Term>,
    /// `IF NOT EXISTS`.
    pub(crate) if_not_exists: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Delete {
    /// The columns deleted; none: whole rows.
    pub(crate) columns: Vec<String>,
    pub(crate) table: TableName,
    pub(crate) timestamp: Option<Term>,
    pub(crate) relations: Vec<Relation>,
    pub(crate) condition: Option<Condition>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CreateTable {
    pub(crate) table: TableName,
    pub(crate) if_not_exists: bool,
    /// Every column and its type, in the order written.
    pub(crate) columns: Vec<(String, CqlType)>,
    pub(crate) partition_key: Vec<String>,
    pub(crate) clustering: Vec<String>,
    /// `WITH CLUSTERING ORDER BY`: columns and whether descending.
    pub(crate) clustering_order: Vec<(String, bool)>,
    /// The other `WITH` options, as written.
    pub(crate) options: Vec<(String, Literal)>,
    /// The columns declared `STATIC`.
    pub(crate) statics: Vec<String>,
}

/// What an `ALTER TABLE` changes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Alteration {
    /// `ADD c type [STATIC], ...`.
    Add(Vec<(String, CqlType, bool)>),
    /// `DROP c, ...`.
    Drop(Vec<String>),
    /// `WITH option = v AND ...`.
    With(Vec<(String, Literal)>),
}

/// The kinds of batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BatchKind {
    Logged,
    Unlogged,
    Counter,
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Statement {
    Select(Select),
    Update(Update),
    Insert(Insert),
    Delete(Delete),
    Batch(BatchKind, Vec<Statement>),
    Use(String),
    CreateKeyspace {
        name: String,
        if_not_exists: bool,
        options: Vec<(String, Literal)>,
    },
    CreateTable(CreateTable),
    DropKeyspace {
        name: String,
        if_exists: bool,
    },
    DropTable {
        table: TableName,
        if_exists: bool,
    },
    Truncate(TableName),
    AlterTable(TableName, Alteration),
}

impl Statement {
    /// A write's condition, if it is a lightweight transaction.
    pub(crate) fn condition(&self) -> Option<Condition> {
        match self {
            Statement::Insert(i) if i.if_not_exists => Some(Condition::NotExists),
            Statement::Update(u) => u.condition.clone(),
            Statement::Delete(d) => d.condition.clone(),
            _ => None,
        }
    }
}
