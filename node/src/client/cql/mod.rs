//! CQL: the native protocol v4 that Cassandra's and ScyllaDB's drivers
//! speak, for the people who count in counter tables
//! (`../shared/DESIGN.md`, "CQL front door"; what each driver sends and
//! expects: `research/cql-drivers.md` beside it).
//!
//! One module per layer of a request, each without I/O:
//!
//! - [`frame`]: the 9-byte header, judged before the body is read (its
//!   version negotiated, its length bounded); [`compress`]: LZ4 bodies;
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
//! - [`tables`]: the tables a statement names; [`prepared`]: statements
//!   prepared on the node, by an id every node computes alike;
//! - [`cells`]: where a counter table's rows live, as Tally counter cells
//!   placed by their partition key; [`rows`]: what an UPDATE, DELETE or
//!   SELECT on them writes, resets and reads, and the rows it answers
//!   ([`paging`]: in pages, when the driver asks);
//!   [`batch`]: counter batches; [`levels`]: CQL's consistency levels,
//!   operation ids and errors as Tally's; [`grants`]: who may run what;
//!   [`strict`]: what `strict = true` refuses, as Cassandra does;
//! - [`run`]: a statement run against what the node holds, coming to a
//!   [`work`]: an answer, a schema change, or statements on rows.
//!
//! [`serve`] is the listener; [`conn`] the one task per connection that
//! moves its bytes, many statements in flight ([`inbox`] cuts its frames
//! out of what it reads); [`shared`] what a node's connections share (its
//! view of the cluster, schema changes, the watcher of [`events`]);
//! [`exec`] runs statements on rows against the cluster.

pub(crate) mod ast;
pub(crate) mod batch;
pub(crate) mod body;
pub(crate) mod cells;
pub(crate) mod compress;
pub(crate) mod conn;
pub(crate) mod events;
pub(crate) mod exec;
pub(crate) mod frame;
pub(crate) mod grants;
pub(crate) mod handshake;
pub(crate) mod inbox;
pub(crate) mod levels;
pub(crate) mod lex;
pub(crate) mod lwt;
pub(crate) mod lww;
pub(crate) mod named;
pub(crate) mod paging;
pub(crate) mod parse;
pub(crate) mod prepared;
pub(crate) mod regular;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod result;
pub(crate) mod rows;
pub(crate) mod run;
pub(crate) mod schema;
pub(crate) mod select;
pub(crate) mod serve;
pub(crate) mod shared;
pub(crate) mod slices;
pub(crate) mod sortable;
pub(crate) mod strict;
pub(crate) mod system;
pub(crate) mod tables;
pub(crate) mod tokens;
pub(crate) mod work;
