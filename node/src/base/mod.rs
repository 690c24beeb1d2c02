//! What every layer speaks: the RESP command table, the metrics
//! registry, keyspaces and the conversions between engine and wire types.

pub(crate) mod commands;
pub(crate) mod convert;
pub(crate) mod keyspace;
pub(crate) mod registry;
