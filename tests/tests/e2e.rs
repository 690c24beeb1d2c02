//! The end-to-end tests over real `tallyd` processes, one module per
//! subject, linked into one test binary: each of them links the whole
//! node, and one binary instead of one per file saves CI most of its
//! link time and gigabytes of disk. Run one subject with
//! `cargo test -p tally-tests --test e2e -- upgrade::`.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and benchmarks measure real time, and draw real random bytes"
)]

mod agreed_scripts;
mod answers;
mod chaos;
mod check_log;
mod client_auth;
mod client_limits;
mod client_sessions;
mod client_tls;
mod cluster;
mod cql;
mod cql_rust;
mod cql_tables;
mod expire_rows;
mod expiry;
mod flushes;
mod fold;
mod hostile;
mod hostile_scripts;
mod locks;
mod max_clients;
mod metrics;
mod native_strings;
mod node_clients;
mod once;
mod overflow_reads;
mod peer_auth;
mod poisoned;
mod rate_limiters;
mod redis_py;
mod resp;
mod resp3;
mod resp_keys;
mod resp_lists;
mod resp_multi;
mod resp_once;
mod resp_scripts;
mod resp_sets;
mod restart;
mod snapshots;
mod strings;
mod topology;
mod unique;
mod upgrade;
mod user_ids;
mod zsets;
