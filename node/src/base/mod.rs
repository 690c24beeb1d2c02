//! What every layer speaks: the RESP command table, the metrics
//! registry, keyspaces, the conversions between engine and wire types,
//! and the engine's refusals in Redis' words.

pub(crate) mod commands;
pub(crate) mod compare;
pub(crate) mod convert;
pub(crate) mod decimal;
pub(crate) mod fields;
pub(crate) mod keyspace;
pub(crate) mod refusal;
pub(crate) mod registry;
pub(crate) mod strings;
pub(crate) mod zset;
