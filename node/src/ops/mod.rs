//! Running a node: the daemon, metrics, and the offline tools (log
//! check, restore).

pub mod check_log;
pub mod daemon;
pub(crate) mod metrics;
pub mod restore;
