//! The `[cluster.cql]` table: how the CQL port serves counter tables
//! (`client::cql`).

use serde::{Deserialize, Serialize};

/// The `[cluster.cql]` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CqlConfig {
    /// Refuse what Cassandra refuses on counter tables, for code that
    /// relies on it: setting a counter (`SET c = 5`), `USING TTL` on a
    /// counter update, `default_time_to_live` on a counter table.
    pub strict: bool,
}
