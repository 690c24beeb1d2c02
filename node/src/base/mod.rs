//! What every layer speaks: the RESP command table, the metrics
//! registry, keyspaces, the conversions between engine and wire types,
//! the engine's refusals in Redis' words, and a few futures run at once.

pub(crate) mod commands;
pub(crate) mod compare;
pub(crate) mod convert;
pub(crate) mod decimal;
pub(crate) mod fields;
pub(crate) mod join;
pub(crate) mod keyspace;
pub(crate) mod refusal;
pub(crate) mod registry;
pub(crate) mod strings;
pub(crate) mod zset;
