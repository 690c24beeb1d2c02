//! `cluster.toml`: the one file that describes the whole cluster.
//!
//! Every node is started with the same file and its own id. The file has a
//! `[cluster]` table (name, replication factor, vnodes per node, commit-log
//! sync mode, timeouts, where the TLS certificates live) and one `[[node]]`
//! table per node (id, QUIC peer address, native client and RESP listen
//! addresses, data directory, and optionally `peer_bind`, the address the
//! node binds when peers reach it through something else, like a proxy). The order of the `[[node]]` tables matters:
//! a node's position is its *node index*, which the token ring uses (see
//! [`crate::ring`]), so every node must list them in the same order.
//!
//! # Rules
//!
//! - Unknown keys are errors, so a typo (`replicaton_factor`) cannot
//!   silently fall back to a default.
//! - Optional, with defaults: `vnodes` (16), `sync_interval_ms` (10),
//!   `heartbeat_interval_ms` (200), `failure_timeout_ms` (1000),
//!   `certs_dir` (`"data/certs"`), `group_commit_window_us` (300), and the
//!   `[cluster.limits]`, `[cluster.ids]`, `[cluster.hints]`, `[cluster.auth]`
//!   and `[cluster.client_tls]` tables (see [`crate::config::limits`],
//!   [`crate::config::ids`], [`crate::cluster::hints::bound`], [`crate::security::auth`],
//!   [`crate::security::client_tls`]).
//!   Everything else is required. A node with `join = true` is not in the
//!   first ring: it joins a running cluster later (`tallyd run --join`).
//!   After the first start the ring is the one the nodes store and agree
//!   on ([`crate::cluster::topology`]); the file names the nodes that may be in it.
//! - At least one node; ids non-empty, unique without regard to case (they
//!   are certificate names), made of `[A-Za-z0-9_-]`
//!   (they end up in file names and vnode token seeds); every address
//!   (peer, client, resp, metrics and cql, over all nodes) distinct; data directories
//!   distinct, since two nodes cannot share one.
//! - `1 <= replication_factor <= nodes` of the first ring, `1 <= vnodes <= 4096`, every
//!   interval and timeout `> 0`, and `failure_timeout_ms >
//!   heartbeat_interval_ms` (or a healthy peer would be marked down between
//!   two heartbeats).
//! - Relative paths are resolved against the directory of the config file,
//!   not the working directory, so a node finds its data however it is
//!   launched.
//!
//! Every error is a [`ConfigError`] naming the file, the field
//! (`cluster.replication_factor`, `node[1].peer`; node indices count from 0)
//! and the reason, with the line and column for syntax and type errors.

pub mod auth;
pub mod client_tls;
pub mod cql;
pub mod hints;
pub mod ids;
pub mod limits;

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The most vnodes a node may have: beyond this the ring only costs memory.
pub const MAX_VNODES: usize = 4096;

/// A bad or unreadable config file: `"{file}: {field}: {reason}"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {field}: {reason}", .file.display())]
pub struct ConfigError {
    /// The config file.
    pub file: PathBuf,
    /// The offending field, like `node[1].peer`; `-` when there is none.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A loaded and validated `cluster.toml`.
///
/// # Invariants
///
/// Every rule in the [module docs](self) holds; paths are resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file this came from; relative paths were resolved against its directory.
    pub path: PathBuf,
    /// The `[cluster]` table.
    pub cluster: ClusterConfig,
    /// The `[[node]]` tables, in file order (the index is the node index).
    pub nodes: Vec<NodeConfig>,
}

/// The `[cluster]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// A name for humans and logs.
    pub name: String,
    /// How many distinct nodes hold each partition.
    pub replication_factor: usize,
    /// Virtual nodes (ring tokens) per node.
    #[serde(default = "defaults::vnodes")]
    pub vnodes: usize,
    /// When the commit log is fsynced.
    pub sync: SyncKind,
    /// Time between fsyncs in [`SyncKind::Periodic`] mode.
    #[serde(default = "defaults::sync_interval_ms")]
    pub sync_interval_ms: u64,
    /// How long a coordinator waits for replica acks on a write.
    pub write_timeout_ms: u64,
    /// How long a coordinator waits for replica answers on a read.
    pub read_timeout_ms: u64,
    /// Time between heartbeats to each peer.
    #[serde(default = "defaults::heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// A peer silent this long is marked down.
    #[serde(default = "defaults::failure_timeout_ms")]
    pub failure_timeout_ms: u64,
    /// Where the cluster's TLS certificates live (resolved).
    #[serde(default = "defaults::certs_dir")]
    pub certs_dir: PathBuf,
    /// `batch` sync: how long an fsync may wait for the writers the previous
    /// one released (0 disables the wait; at most 10,000). A node's writers
    /// come back after a network round trip, so its default is three times
    /// the engine's: on 3 nodes and 2 cores, 1000 took tally-bench uniform
    /// from 48-49k to 53-57k adds/s with p99 8 -> 5 ms (against 0), and cut
    /// CPU per add by 12%; 2000 and more cost Redis clients with one request
    /// in flight. With two batches in flight, 300 beat 1000 in every
    /// alternated round: 3-node `redis-benchmark -P 16` INCRBY 228k against
    /// 205k (medians of 4; 0 gave 219k), tally-bench 75-81k against 69-79k,
    /// one node at `-P 1` 70-81k against 63-74k; one node at `-P 16` even.
    #[serde(default = "defaults::group_commit_window_us")]
    pub group_commit_window_us: u64,
    /// What clients may hold of each node (`[cluster.limits]`, optional).
    #[serde(default)]
    pub limits: crate::config::limits::Limits,
    /// How long operation ids are remembered (`[cluster.ids]`, optional).
    #[serde(default)]
    pub ids: crate::config::ids::Ids,
    /// How long and how much each node hints a peer (`[cluster.hints]`, optional).
    #[serde(default)]
    pub hints: hints::HintLimits,
    /// Who may use the client ports (`[cluster.auth]`, optional: without
    /// users, loopback clients only).
    #[serde(default)]
    pub auth: auth::AuthConfig,
    /// TLS on the client ports (`[cluster.client_tls]`, optional: plain
    /// TCP without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<client_tls::ClientTlsConfig>,
    /// How the CQL port serves counter tables (`[cluster.cql]`, optional).
    #[serde(default)]
    pub cql: cql::CqlConfig,
}

/// When the commit log is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncKind {
    /// Before acknowledging each write batch (group commit): nothing acked is lost.
    Batch,
    /// Every `sync_interval_ms`: faster, but a crash loses the last interval.
    Periodic,
}

/// One `[[node]]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's id, unique in the cluster.
    pub id: String,
    /// QUIC (UDP) address other nodes dial.
    pub peer: SocketAddr,
    /// Where this node binds its QUIC socket, when it differs from `peer`
    /// (a proxy or NAT in between); optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_bind: Option<SocketAddr>,
    /// TCP address of the native client protocol.
    pub client: SocketAddr,
    /// TCP address of the RESP listener.
    pub resp: SocketAddr,
    /// HTTP address serving Prometheus metrics at `/metrics`; optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SocketAddr>,
    /// TCP address of the CQL listener (native protocol v4); optional.
    /// Drivers know a node by its IP alone (`system.peers` has no port),
    /// so each node of a cluster takes its own IP (127.0.0.1, .2, .3 on
    /// one machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cql: Option<SocketAddr>,
    /// The node's storage directory (resolved).
    pub data_dir: PathBuf,
    /// Not in the first ring: the node becomes a member later, with
    /// `tallyd run --join` (see [`crate::cluster::topology`]). Optional, false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
}

/// The file as written. The public types deserialize themselves; paths
/// are resolved only after validation.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    cluster: ClusterConfig,
    #[serde(default)]
    node: Vec<NodeConfig>,
}

mod defaults {
    pub fn vnodes() -> usize {
        16
    }
    pub fn sync_interval_ms() -> u64 {
        10
    }
    pub fn heartbeat_interval_ms() -> u64 {
        200
    }
    pub fn failure_timeout_ms() -> u64 {
        1000
    }
    pub fn certs_dir() -> std::path::PathBuf {
        "data/certs".into()
    }
    pub fn group_commit_window_us() -> u64 {
        300
    }
}

impl Config {
    /// Reads and validates the config at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = tally_world::fs::read_to_string(path)
            .map_err(|e| error(path, "-", format!("cannot read config file: {e}")))?;
        Config::parse(&text, path)
    }

    /// Validates `text` as if read from `path` (used in messages and to
    /// resolve relative paths).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(path, text, &e))?;
        validate(&raw, path)?;
        let base = path.parent().unwrap_or(Path::new(""));
        // `join` keeps an absolute path as it is.
        let mut cluster = raw.cluster;
        cluster.certs_dir = base.join(&cluster.certs_dir);
        if let Some(users) = &mut cluster.auth.users_file {
            *users = base.join(&*users);
        }
        if let Some(tls) = &mut cluster.client_tls {
            tls.resolve(base);
        }
        let mut nodes = raw.node;
        for n in &mut nodes {
            n.data_dir = base.join(&n.data_dir);
        }
        Ok(Config {
            path: path.to_path_buf(),
            cluster,
            nodes,
        })
    }

    /// The node with this id and its node index.
    pub fn node(&self, id: &str) -> Result<(usize, &NodeConfig), ConfigError> {
        self.nodes
            .iter()
            .enumerate()
            .find(|(_, n)| n.id == id)
            .ok_or_else(|| {
                let known = self.node_ids().join(", ");
                error(
                    &self.path,
                    "node",
                    format!("no node with id {id:?}; known ids: {known}"),
                )
            })
    }

    /// The node ids in node-index order (what [`crate::ring::Ring::new`] takes).
    pub fn node_ids(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.id.clone()).collect()
    }

    /// This config as TOML. Paths under the directory of `self.path` are
    /// written relative to it, so loading the text from `self.path` gives
    /// this config back.
    ///
    /// # Panics
    ///
    /// If a number exceeds `i64::MAX`, which TOML cannot represent (a
    /// loaded config never has one).
    pub fn to_toml(&self) -> String {
        let base = self.path.parent().unwrap_or(Path::new(""));
        // Lossy, because TOML strings are UTF-8 and a PathBuf need not be.
        let as_given = |p: &Path| {
            PathBuf::from(
                p.strip_prefix(base)
                    .unwrap_or(p)
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let mut raw = RawConfig {
            cluster: self.cluster.clone(),
            node: self.nodes.clone(),
        };
        raw.cluster.certs_dir = as_given(&raw.cluster.certs_dir);
        for n in &mut raw.node {
            n.data_dir = as_given(&n.data_dir);
        }
        toml::to_string(&raw).expect("strings, tables and numbers up to i64::MAX serialize")
    }
}

fn error(file: &Path, field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        file: file.to_path_buf(),
        field: field.into(),
        reason: reason.into(),
    }
}

/// Applies the rules of the module docs to a syntactically valid file.
fn validate(raw: &RawConfig, path: &Path) -> Result<(), ConfigError> {
    let fail = |field: &str, reason: String| Err(error(path, field, reason));
    if raw.cluster.name.trim().is_empty() {
        return fail("cluster.name", "must not be empty".into());
    }
    validate_nodes(raw, path)?;
    validate_cluster(raw, path)
}

/// The `[[node]]` tables: ids, addresses and data directories, each
/// distinct.
fn validate_nodes(raw: &RawConfig, path: &Path) -> Result<(), ConfigError> {
    let fail = |field: &str, reason: String| Err(error(path, field, reason));
    if raw.node.is_empty() {
        return fail("node", "at least one [[node]] table is required".into());
    }
    let mut ids = HashMap::new();
    let mut addrs = HashMap::new();
    let mut dirs = HashMap::new();
    for (i, n) in raw.node.iter().enumerate() {
        let field = |name: &str| format!("node[{i}].{name}");
        if n.id.is_empty() {
            return fail(&field("id"), "must not be empty".into());
        }
        if let Some(bad) =
            n.id.chars()
                .find(|ch| !(ch.is_ascii_alphanumeric() || "_-".contains(*ch)))
        {
            return fail(
                &field("id"),
                format!("{:?} contains {bad:?}; use only [A-Za-z0-9_-]", n.id),
            );
        }
        // Ids are the DNS names of node certificates, which compare
        // without case: `n1` and `N1` would be one certificate's.
        if let Some(first) = ids.insert(n.id.to_ascii_lowercase(), i) {
            return fail(
                &field("id"),
                format!(
                    "duplicate id {:?} (ids compare without case), already node[{first}].id",
                    n.id
                ),
            );
        }
        let bind = n.peer_bind.map(|b| ("peer_bind", b));
        let metrics = n.metrics.map(|m| ("metrics", m));
        let cql = n.cql.map(|c| ("cql", c));
        for (name, addr) in [("peer", n.peer), ("client", n.client), ("resp", n.resp)]
            .into_iter()
            .chain(bind)
            .chain(metrics)
            .chain(cql)
        {
            if let Some(first) = addrs.insert(addr, field(name)) {
                return fail(
                    &field(name),
                    format!("address {addr} is already used by {first}"),
                );
            }
        }
        if n.data_dir.as_os_str().is_empty() {
            return fail(&field("data_dir"), "must not be empty".into());
        }
        if let Some(first) = dirs.insert(&n.data_dir, i) {
            let dir = n.data_dir.display();
            return fail(
                &field("data_dir"),
                format!("{dir} is already node[{first}].data_dir"),
            );
        }
    }
    Ok(())
}

/// The `[cluster]` table and its sub-tables.
fn validate_cluster(raw: &RawConfig, path: &Path) -> Result<(), ConfigError> {
    let fail = |field: &str, reason: String| Err(error(path, field, reason));
    let c = &raw.cluster;
    let nodes = raw.node.iter().filter(|n| !n.join).count();
    if nodes == 0 {
        return fail(
            "node",
            "every node has join = true; the first ring needs at least one member".into(),
        );
    }
    if !(1..=nodes).contains(&c.replication_factor) {
        let rf = c.replication_factor;
        return fail(
            "cluster.replication_factor",
            format!("{rf} is not between 1 and the {nodes} nodes"),
        );
    }
    if !(1..=MAX_VNODES).contains(&c.vnodes) {
        return fail(
            "cluster.vnodes",
            format!("{} is not between 1 and {MAX_VNODES}", c.vnodes),
        );
    }
    for (name, ms) in [
        ("sync_interval_ms", c.sync_interval_ms),
        ("write_timeout_ms", c.write_timeout_ms),
        ("read_timeout_ms", c.read_timeout_ms),
        ("heartbeat_interval_ms", c.heartbeat_interval_ms),
        ("failure_timeout_ms", c.failure_timeout_ms),
    ] {
        if ms == 0 {
            return fail(&format!("cluster.{name}"), "must be > 0".into());
        }
    }
    if c.failure_timeout_ms <= c.heartbeat_interval_ms {
        let (f, h) = (c.failure_timeout_ms, c.heartbeat_interval_ms);
        return fail(
            "cluster.failure_timeout_ms",
            format!("{f} must exceed heartbeat_interval_ms ({h})"),
        );
    }
    if c.certs_dir.as_os_str().is_empty() {
        return fail("cluster.certs_dir", "must not be empty".into());
    }
    if let Err((name, reason)) = c.limits.validate() {
        return fail(&format!("cluster.limits.{name}"), reason);
    }
    if let Err((name, reason)) = c.ids.validate() {
        return fail(&format!("cluster.ids.{name}"), reason);
    }
    if let Err((name, reason)) = c.hints.validate() {
        return fail(&format!("cluster.hints.{name}"), reason);
    }
    for (i, u) in c.auth.user.iter().enumerate() {
        if let Err(reason) = auth::check_entry(u) {
            return fail(&format!("cluster.auth.user[{i}]"), reason);
        }
    }
    if let Some(Err((name, reason))) = c.client_tls.as_ref().map(|t| t.validate()) {
        return fail(&format!("cluster.client_tls.{name}"), reason);
    }
    if c.group_commit_window_us > 10_000 {
        return fail(
            "cluster.group_commit_window_us",
            format!("{} is over 10000 (10 ms)", c.group_commit_window_us),
        );
    }
    Ok(())
}

/// Turns a toml error into a [`ConfigError`], recovering the field from the
/// span (toml keeps its key path private) and putting the position first.
fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim();
    // "unknown field `x`, ..." and "missing field `x`" name the key; the
    // span then points at the key or at the table that lacks it.
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix)?.split('`').next())
        .map(str::to_owned);
    let Some(span) = e.span() else {
        return error(path, named.unwrap_or_else(|| "-".into()), message);
    };
    let before = &text.as_bytes()[..span.start.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |nl| nl + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;

    let mut table: Option<String> = None;
    let mut node_tables = 0usize;
    let mut key_on_line = None;
    let mut header_on_line = None;
    for (n, raw_line) in text.lines().take(line).enumerate() {
        let l = raw_line.trim();
        let header = match l.strip_prefix("[[") {
            Some(h) => Some((h.split("]]").next().unwrap_or("").trim(), true)),
            None => l
                .strip_prefix('[')
                .map(|h| (h.split(']').next().unwrap_or("").trim(), false)),
        };
        match header {
            Some((name, is_array)) => {
                table = Some(if is_array && name == "node" {
                    node_tables += 1;
                    format!("node[{}]", node_tables - 1)
                } else {
                    name.to_owned()
                });
                if n + 1 == line {
                    header_on_line = Some(name.to_owned());
                }
            }
            None if n + 1 == line => {
                key_on_line = l
                    .split_once('=')
                    .map(|(k, _)| k.trim().trim_matches('"').to_owned());
            }
            None => {}
        }
    }
    let field = match (
        header_on_line,
        message.starts_with("unknown field"),
        table,
        named.or(key_on_line),
    ) {
        // An unknown table: the header itself is the offending field.
        (Some(header), true, _, _) => header,
        (_, _, Some(t), Some(k)) => format!("{t}.{k}"),
        (_, _, Some(t), None) => t,
        (_, _, None, Some(k)) => k,
        (_, _, None, None) => "-".into(),
    };
    error(
        path,
        field,
        format!("line {line}, column {column}: {message}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/etc/tally/cluster.toml";
    const GOOD: &str = r#"
[cluster]
name = "test"
replication_factor = 2
sync = "periodic"
write_timeout_ms = 100
read_timeout_ms = 100

[[node]]
id = "a"
peer = "127.0.0.1:1"
client = "127.0.0.1:2"
resp = "127.0.0.1:3"
data_dir = "data/a"

[[node]]
id = "b-2_X"
peer = "127.0.0.1:4"
client = "127.0.0.1:5"
resp = "127.0.0.1:6"
data_dir = "/abs/b"
"#;

    fn good() -> Config {
        Config::parse(GOOD, Path::new(FILE)).expect("GOOD parses")
    }

    /// Parses GOOD with `from` replaced by `to` and expects an error on `field`.
    fn bad(from: &str, to: &str, field: &str) -> ConfigError {
        assert!(GOOD.contains(from), "GOOD has no {from:?}");
        let text = GOOD.replacen(from, to, 1);
        let e = Config::parse(&text, Path::new(FILE)).expect_err("must be rejected");
        let shown = e.to_string();
        assert_eq!(e.field, field, "{shown}");
        assert!(shown.starts_with(&format!("{FILE}: {field}: ")), "{shown}");
        e
    }

    #[test]
    fn good_config_with_defaults_and_resolved_paths() {
        let c = good();
        assert_eq!(c.node_ids(), ["a", "b-2_X"]);
        assert_eq!((c.cluster.replication_factor, c.cluster.vnodes), (2, 16));
        assert_eq!(c.cluster.sync, SyncKind::Periodic);
        assert_eq!(
            (c.cluster.sync_interval_ms, c.cluster.heartbeat_interval_ms),
            (10, 200)
        );
        assert_eq!(c.cluster.failure_timeout_ms, 1000);
        assert_eq!(c.cluster.certs_dir, Path::new("/etc/tally/data/certs"));
        assert_eq!(c.nodes[0].data_dir, Path::new("/etc/tally/data/a"));
        assert_eq!(
            c.nodes[1].data_dir,
            Path::new("/abs/b"),
            "absolute paths stay"
        );
        assert_eq!(
            c.nodes[1].client,
            "127.0.0.1:5".parse().expect("literal address")
        );
        assert_eq!(c.node("b-2_X").expect("known").0, 1);
    }

    #[test]
    fn checked_in_cluster_toml_loads() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../cluster.toml"));
        let c = Config::load(path).expect("cluster.toml is valid");
        assert_eq!((c.nodes.len(), c.cluster.replication_factor), (3, 3));
        assert_eq!(c.cluster.sync, SyncKind::Batch);
        let root = path.parent().expect("has a directory");
        assert_eq!(c.nodes[2].data_dir, root.join("data/n3"));
        assert_eq!(c.nodes[0].resp.port(), 7301);
    }

    #[test]
    fn load_resolves_against_the_file_and_reports_io_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        tally_world::fs::write(&path, GOOD).expect("write config");
        let c = Config::load(&path).expect("loads");
        assert_eq!(c.nodes[0].data_dir, dir.path().join("data/a"));

        let missing = dir.path().join("nope.toml");
        let e = Config::load(&missing).expect_err("no such file");
        assert_eq!(e.field, "-");
        assert!(
            e.to_string().contains("nope.toml") && e.reason.contains("No such file"),
            "{e}"
        );
    }

    #[test]
    fn to_toml_round_trips() {
        let c = good();
        assert_eq!(Config::parse(&c.to_toml(), &c.path).expect("reparses"), c);
    }

    #[test]
    fn syntax_and_type_errors_name_field_and_line() {
        let e = bad(
            "replication_factor = 2",
            "replication_factor = \"two\"",
            "cluster.replication_factor",
        );
        assert!(e.reason.starts_with("line 4, column"), "{e}");
        let e = bad(
            "peer = \"127.0.0.1:4\"",
            "peer = \"nowhere\"",
            "node[1].peer",
        );
        assert!(e.reason.starts_with("line 18, column 8:"), "{e}");
        let e = bad("name = \"test\"", "name = \"test", "cluster.name");
        assert!(e.reason.starts_with("line 3,"), "{e}");
        bad(
            "sync = \"periodic\"",
            "sync = \"sometimes\"",
            "cluster.sync",
        );
        bad("sync = ", "vnodes = -1\nsync = ", "cluster.vnodes");
    }

    #[test]
    fn unknown_and_missing_fields() {
        bad(
            "sync = ",
            "replicaton_factor = 3\nsync = ",
            "cluster.replicaton_factor",
        );
        bad(
            "data_dir = \"data/a\"",
            "data_dir = \"data/a\"\nport = 1",
            "node[0].port",
        );
        bad("\n[cluster]", "bogus = 1\n[cluster]", "bogus");
        bad("\n[[node]]", "\n[extra]\nx = 1\n[[node]]", "extra");
        bad("\n[[node]]", "\n[cluster.sub]\n[[node]]", "cluster.sub");
        bad("\n[[node]]", "\n[[nodes]]\n[[node]]", "nodes");
        bad("read_timeout_ms = 100\n", "", "cluster.read_timeout_ms");
        bad("resp = \"127.0.0.1:6\"\n", "", "node[1].resp");
    }

    #[test]
    fn node_rules() {
        let no_nodes = GOOD.split("[[node]]").next().expect("has a head");
        let e = Config::parse(no_nodes, Path::new(FILE)).expect_err("no nodes");
        assert_eq!(e.field, "node");
        bad("id = \"a\"", "id = \"\"", "node[0].id");
        bad("id = \"a\"", "id = \"a b\"", "node[0].id");
        bad("id = \"b-2_X\"", "id = \"a\"", "node[1].id");
        // Ids are certificate names, which compare without case.
        let e = bad("id = \"b-2_X\"", "id = \"A\"", "node[1].id");
        assert!(e.reason.contains("without case"), "{e}");
        let e = bad(
            "peer = \"127.0.0.1:4\"",
            "peer = \"127.0.0.1:2\"",
            "node[1].peer",
        );
        assert!(e.reason.contains("node[0].client"), "{e}");
        bad(
            "resp = \"127.0.0.1:6\"",
            "resp = \"127.0.0.1:5\"",
            "node[1].resp",
        );
        bad(
            "resp = \"127.0.0.1:6\"",
            "resp = \"127.0.0.1:6\"\nmetrics = \"127.0.0.1:3\"",
            "node[1].metrics",
        );
        bad(
            "data_dir = \"/abs/b\"",
            "data_dir = \"data/a\"",
            "node[1].data_dir",
        );
        let e = good().node("zz").expect_err("unknown id");
        assert!(e.to_string().contains("known ids: a, b-2_X"), "{e}");
    }

    #[test]
    fn cluster_rules() {
        bad("name = \"test\"", "name = \"\"", "cluster.name");
        bad(
            "replication_factor = 2",
            "replication_factor = 0",
            "cluster.replication_factor",
        );
        bad(
            "replication_factor = 2",
            "replication_factor = 3",
            "cluster.replication_factor",
        );
        bad("sync = ", "vnodes = 0\nsync = ", "cluster.vnodes");
        bad("sync = ", "vnodes = 4097\nsync = ", "cluster.vnodes");
        bad(
            "write_timeout_ms = 100",
            "write_timeout_ms = 0",
            "cluster.write_timeout_ms",
        );
        bad(
            "read_timeout_ms = 100",
            "read_timeout_ms = 0",
            "cluster.read_timeout_ms",
        );
        bad(
            "sync = ",
            "sync_interval_ms = 0\nsync = ",
            "cluster.sync_interval_ms",
        );
        bad(
            "sync = ",
            "heartbeat_interval_ms = 0\nsync = ",
            "cluster.heartbeat_interval_ms",
        );
        bad(
            "sync = ",
            "failure_timeout_ms = 200\nsync = ",
            "cluster.failure_timeout_ms",
        );
        bad("sync = ", "certs_dir = \"\"\nsync = ", "cluster.certs_dir");
        bad(
            "sync = ",
            "group_commit_window_us = 10001\nsync = ",
            "cluster.group_commit_window_us",
        );
        bad(
            "\n[[node]]",
            "\n[cluster.limits]\nclients_max = 0\n[[node]]",
            "cluster.limits.clients_max",
        );
        bad(
            "\n[[node]]",
            "\n[cluster.limits]\nmaxclients = 5\n[[node]]",
            "cluster.limits.maxclients",
        );
        bad(
            "\n[[node]]",
            "\n[cluster.hints]\nwindow_ms = 0\n[[node]]",
            "cluster.hints.window_ms",
        );
        bad(
            "\n[[node]]",
            "\n[cluster.hints]\nbytes_max = 10\n[[node]]",
            "cluster.hints.bytes_max",
        );
    }

    #[test]
    fn hint_limits_have_defaults_and_can_be_set() {
        assert_eq!(good().cluster.hints, hints::HintLimits::default());
        let text = GOOD.replacen(
            "\n[[node]]",
            "\n[cluster.hints]\nwindow_ms = 60000\n[[node]]",
            1,
        );
        let c = Config::parse(&text, Path::new(FILE)).expect("hints parse");
        assert_eq!(c.cluster.hints.window_ms, 60_000);
        assert_eq!(c.cluster.hints.bytes_max, hints::BYTES_MAX_DEFAULT);
    }

    #[test]
    fn limits_have_defaults_and_can_be_set() {
        assert_eq!(
            good().cluster.limits,
            crate::config::limits::Limits::default()
        );
        let text = GOOD.replacen(
            "\n[[node]]",
            "\n[cluster.limits]\nclients_max = 5\nidle_timeout_ms = 300000\n[[node]]",
            1,
        );
        let c = Config::parse(&text, Path::new(FILE)).expect("limits parse");
        assert_eq!(
            (
                c.cluster.limits.clients_max,
                c.cluster.limits.idle_timeout_ms
            ),
            (5, 300_000)
        );
        assert_eq!(
            c.cluster.limits.fd_reserve, 64,
            "the others keep their defaults"
        );
        assert_eq!(Config::parse(&c.to_toml(), &c.path).expect("reparses"), c);
    }
}
