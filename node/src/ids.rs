//! The `[cluster.ids]` table: how long operation ids are remembered (see
//! `tally_engine::ids` for what is kept).

use serde::{Deserialize, Serialize};

/// The `[cluster.ids]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Ids {
    /// A retry of an add with an id is answered for this long after the
    /// add; later it is refused as "outcome unknown".
    pub window_ms: u64,
    /// A client's ids read as expired this long after its last add to a
    /// counter; after that, the counter no longer knows the client.
    pub forget_ms: u64,
}

impl Default for Ids {
    fn default() -> Self {
        let r = tally_engine::Retention::default();
        Ids {
            window_ms: r.window_ms,
            forget_ms: r.forget_ms,
        }
    }
}

impl Ids {
    /// Checks the table; an error names the key (under `cluster.ids.`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.window_ms == 0 {
            return Err(("window_ms", "must be > 0".into()));
        }
        if self.forget_ms < self.window_ms {
            return Err((
                "forget_ms",
                format!("must be at least window_ms ({})", self.window_ms),
            ));
        }
        Ok(())
    }

    /// The engine's retention.
    pub fn retention(&self) -> tally_engine::Retention {
        tally_engine::Retention {
            window_ms: self.window_ms,
            forget_ms: self.forget_ms,
        }
    }
}
