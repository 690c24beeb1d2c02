//! The node (`tallyd`): config, ring, coordinator, replication, hints and
//! the client listener.

pub mod config;
pub mod ring;
