//! The node (`tallyd`): config, ring, coordinator, replication and hints: built by the cluster issue.
