//! The client ports: accepting connections, the native protocol, RESP,
//! CQL, and the streams and answers they move.

pub mod accept;
pub(crate) mod cql;
pub mod memory;
pub(crate) mod output;
pub mod resp;
pub mod server;
pub mod stream;
