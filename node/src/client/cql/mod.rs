//! CQL: the native protocol v4 that Cassandra's and ScyllaDB's drivers
//! speak, for the people who count in counter tables
//! (`../shared/DESIGN.md`, "CQL front door"; what each driver sends and
//! expects: `research/cql-drivers.md` beside it).
//!
//! One module per layer of a request, each without I/O:
//!
//! - [`frame`]: the 9-byte header, judged before the body is read (its
//!   version negotiated, its length bounded);
//! - [`body`]: the protocol's notations (`[string]`, `[bytes]`, maps ...),
//!   read with every length checked;
//! - [`request`]: a body decoded by its opcode, the custom payload (where
//!   an operation id rides) taken off first;
//! - [`response`]: the answers, and the errors with Cassandra's codes,
//!   chosen so that a driver's retry never counts an add twice;
//! - [`result`]: the answers that carry columns (rows, a prepared
//!   statement, a schema change), their types and cell encodings;
//! - [`lex`]: a statement's text cut into tokens, as Cassandra cuts it;
//! - [`parse`]: the tokens read by CQL's grammar into [`ast`]'s statements;
//! - [`schema`]: keyspaces and counter tables, the catalog the cluster
//!   agrees on, and the rules of the statements that change it;
//! - [`system`]: the system tables drivers read to learn the cluster and
//!   its schema, as rows; [`select`]: a SELECT over such rows;
//! - [`handshake`]: which request may come when (STARTUP, the password,
//!   then statements);
//! - [`run`]: a statement run against what the node holds (the system
//!   tables, `USE`, prepared statements).
//!
//! [`serve`] is the listener, and the one task per connection that moves
//! their bytes.
//!
//! Tally has no keyspace of its own yet: counter tables come with the
//! schema catalog, the next step of issue 40.

pub(crate) mod ast;
pub(crate) mod body;
pub(crate) mod frame;
pub(crate) mod handshake;
pub(crate) mod lex;
pub(crate) mod parse;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod result;
pub(crate) mod run;
pub(crate) mod schema;
pub(crate) mod select;
pub(crate) mod serve;
pub(crate) mod system;
