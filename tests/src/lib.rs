//! End-to-end tests over real node processes: arrive with the cluster issue.
