//! The `[cluster.hints]` table: how long and how much a node keeps for a
//! peer that is down (`cluster::hints`).

use serde::{Deserialize, Serialize};

/// Largest hint record, its length and crc left out (`cluster::hints::file`).
pub const RECORD_BYTES_MAX: usize = 4096;

/// Three hours, Cassandra's default `max_hint_window`.
pub const WINDOW_MS_DEFAULT: u64 = 3 * 3600 * 1000;
/// Pending hint records per peer, at most (256 MiB: about four million keys).
pub const BYTES_MAX_DEFAULT: u64 = 256 << 20;

/// The `[cluster.hints]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HintLimits {
    /// Hints for a peer are kept this long after the first of an episode.
    pub window_ms: u64,
    /// Bytes of hint records pending for one peer, at most.
    pub bytes_max: u64,
}

impl Default for HintLimits {
    fn default() -> Self {
        HintLimits {
            window_ms: WINDOW_MS_DEFAULT,
            bytes_max: BYTES_MAX_DEFAULT,
        }
    }
}

impl HintLimits {
    /// Checks the table; an error names the key (under `cluster.hints.`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.window_ms == 0 {
            return Err(("window_ms", "must be > 0".into()));
        }
        let one_record = (RECORD_BYTES_MAX + 8) as u64;
        if self.bytes_max < one_record {
            return Err((
                "bytes_max",
                format!("must be at least {one_record} (one hint of the largest key)"),
            ));
        }
        Ok(())
    }
}
