//! What running a statement comes to, for the connection to finish: an
//! answer, a schema change to agree on, or statements on counter tables'
//! rows to run against the cluster.

use super::ast::{BatchKind, Statement};
use super::body::Value;
use super::frame::Opcode;
use super::rows::Target;
use super::schema::TableDef;

/// A connection's own state.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// The keyspace of `USE`.
    pub(crate) keyspace: Option<String>,
}

/// The response to a statement: its opcode and body.
pub(crate) type Answer = (Opcode, Vec<u8>);

/// What a statement comes to.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Its answer.
    Answer(Answer),
    /// A schema change, to agree on; `keyspace` the session's.
    Schema {
        statement: Box<Statement>,
        keyspace: Option<String>,
    },
    /// Statements on counter tables' rows, to run against the cluster.
    Rows(RowWork),
    /// The answer needs the schema as the cluster has it now: read it and
    /// run the request again.
    Refresh,
}

/// Statements on counter tables' rows (one, or a batch's), each with its
/// table and values, and the request's parameters.
#[derive(Debug)]
pub(crate) struct RowWork {
    pub(crate) parts: Vec<Part>,
    /// The consistency level's code.
    pub(crate) consistency: u16,
    /// The client already has a SELECT's result metadata.
    pub(crate) skip_metadata: bool,
    /// Rows per page the client asks for (a scan's pages).
    pub(crate) page_size: Option<i32>,
    /// Where the client's last page of a scan ended.
    pub(crate) paging_state: Option<Vec<u8>>,
    /// The client's timestamp of its writes (µs), if it gave one.
    pub(crate) timestamp: Option<i64>,
    /// The batch the statements are, if they are one (a conditional
    /// batch answers with the primary key; a logged one goes through the
    /// batch log).
    pub(crate) batch: Option<BatchKind>,
}

/// One statement on a counter table's rows.
#[derive(Debug)]
pub(crate) struct Part {
    pub(crate) keyspace: String,
    pub(crate) table: TableDef,
    pub(crate) statement: Statement,
    pub(crate) values: Vec<Value>,
}

impl Part {
    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            keyspace: &self.keyspace,
            table: &self.table,
        }
    }
}
