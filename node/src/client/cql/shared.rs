//! What a node's CQL connections share, and what they ask of the
//! cluster beyond rows: the statements prepared on the node, its view of
//! the cluster (the schema read a moment ago, and the members and their
//! tokens), and schema changes agreed with the cluster.

use std::sync::Arc;
use std::time::Duration;
use tally_world::Instant;

use parking_lot::Mutex;
use tally_net::{Outcome as WireOutcome, WireError};
use tokio::sync::broadcast;

use super::ast::Statement;
use super::events::{Event, Seen, between};
use super::frame::Opcode;
use super::prepared::PreparedCache;
use super::response::{self, CqlError};
use super::schema::{self, Change, Keyspace};
use super::system::{Cluster, Host, host_id, schema_version};
use crate::cluster::agree::history;
use crate::node::Node;

/// The reserved partition whose registers are the schema's keyspaces.
const SCHEMA_PARTITION: &[u8] = b"\xff\xffcql-schema";
/// SERIAL, the consistency a schema change is agreed at.
const CONSISTENCY_SERIAL: u16 = 0x0008;

/// How long a node runs statements on rows with the schema it read
/// (counted from when the read began), before it reads it again. A
/// change that empties a table (`TRUNCATE`, `DROP`) is answered this long
/// after it is agreed, so no statement that comes after it, through any
/// node, writes to or reads the table as it was: every node has read the
/// schema again by then.
const SCHEMA_FRESH_FOR: Duration = Duration::from_secs(1);

/// How often the watcher looks for events, while connections listen.
const WATCH_EVERY: Duration = Duration::from_millis(500);
/// Events a connection may fall behind by before it misses some.
const EVENTS_BEHIND_MAX: usize = 1024;

/// What a node's connections share: the statements prepared on it, its
/// view of the cluster as it last read it, and the events they registered
/// for.
pub(crate) struct Shared {
    pub(crate) prepared: PreparedCache,
    cluster: Mutex<Option<(Instant, Arc<Cluster>)>>,
    pub(crate) events: broadcast::Sender<Event>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            prepared: PreparedCache::default(),
            cluster: Mutex::new(None),
            events: broadcast::channel(EVENTS_BEHIND_MAX).0,
        }
    }
}

impl Shared {
    /// Forgets the view kept: the next statement reads the schema again.
    pub(crate) fn forget(&self) {
        *self.cluster.lock() = None;
    }
}

/// Sends the connections that listen the events of the cluster as this
/// node sees it, every [`WATCH_EVERY`] (`events::between`); reads nothing
/// while none listens.
pub(crate) async fn watch(node: Arc<Node>, shared: Arc<Shared>) {
    let mut last: Option<Seen> = None;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if shared.events.receiver_count() == 0 {
            last = None;
            continue;
        }
        let Ok(cluster) = view(&node, &shared, false).await else {
            continue;
        };
        let seen = seen(&node, &cluster);
        if let Some(before) = &last {
            for e in between(before, &seen) {
                let _ = shared.events.send(e);
            }
        }
        last = Some(seen);
    }
}

/// The members (each CQL address and whether it is up) and the schema,
/// as `cluster` (this node's view) holds them: the view `system.peers`
/// answers from, so a driver told of a new node by an event reads it
/// there when it asks.
fn seen(node: &Node, cluster: &Cluster) -> Seen {
    let (config, me) = (node.config(), node.me());
    let in_view = |n: usize| {
        let id = host_id(&config.nodes[n].id);
        n == me || cluster.peers.iter().any(|h| h.host_id == id)
    };
    let members = (0..config.nodes.len())
        .filter(|&n| in_view(n))
        .filter_map(|n| Some((config.nodes[n].cql?, n == me || node.is_up(n))))
        .collect();
    Seen {
        members,
        catalog: cluster.catalog.clone(),
    }
}

/// This node's view of the cluster: read now if `fresh`, else as read
/// less than [`SCHEMA_FRESH_FOR`] ago.
pub(crate) async fn view(
    node: &Node,
    shared: &Shared,
    fresh: bool,
) -> Result<Arc<Cluster>, CqlError> {
    if !fresh {
        let kept = shared.cluster.lock().clone();
        if let Some((_, cluster)) = kept.filter(|(at, _)| at.elapsed() < SCHEMA_FRESH_FOR) {
            return Ok(cluster);
        }
    }
    // Kept from when the read began: it holds the schema of some moment
    // after that (see `SCHEMA_FRESH_FOR`).
    let began = Instant::now();
    let read = Arc::new(cluster(node).await?);
    let kept = Cluster {
        fresh: false,
        ..(*read).clone()
    };
    *shared.cluster.lock() = Some((began, Arc::new(kept)));
    Ok(read)
}

/// Agrees on a schema change with the cluster (`schema::apply` worked
/// out from the catalog the round reads); answers its RESULT.
pub(crate) async fn change_schema(
    node: &Node,
    statement: Statement,
    keyspace: Option<String>,
) -> Result<(Opcode, Vec<u8>), CqlError> {
    if schema::makes_regular_table(&statement) && !node.serves_cql_regular_tables() {
        return Err(CqlError::Invalid(
            "regular tables are not enabled yet: every member of the cluster must be up on a \
             build that has them, and have enabled feature cql-regular-tables (see `tally status`)"
                .into(),
        ));
    }
    let rf = node.config().cluster.replication_factor;
    let fresh = schema::Fresh {
        id: fresh_id(),
        token_order: node.serves_cql_token_order(),
        sorted_rows: node.serves_row_slices(),
        now_us: super::lww::now_us(),
    };
    // Every node reads a table's new columns before the answer.
    let altering = matches!(statement, Statement::AlterTable(..));
    let done = node
        .agree(SCHEMA_PARTITION, move |registers, _now| {
            let catalog = match schema::catalog_of(registers, history::COLUMN) {
                Ok(c) => c,
                Err(m) => return Ok((registers.clone(), Err(CqlError::Server(m.0)))),
            };
            Ok(
                match schema::apply(&statement, &catalog, keyspace.as_deref(), rf, fresh) {
                    Ok(change) => (schema::registers_after(registers, &change), Ok(change)),
                    Err(e) => (registers.clone(), Err(e)),
                },
            )
        })
        .await
        .map_err(|e| from_wire(&e))??;
    if schema::empties(&done) || altering {
        // No node runs a statement with the schema from before it once it
        // is answered.
        tokio::time::sleep(SCHEMA_FRESH_FOR).await;
    }
    let body = match done {
        Change::None | Change::Truncate(_) => response::void(),
        Change::Put(_, change) | Change::Drop(_, change) => change.result(),
    };
    Ok((Opcode::Result, body))
}

/// A new table's id: random, so that a table dropped and made again
/// starts empty.
fn fresh_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    tally_world::fill_random(&mut id);
    id
}

/// A node's error as CQL says it: one that certainly left nothing
/// applied is a server error (a driver may send it elsewhere); one whose
/// outcome is unknown is a write timeout (a driver does not replay it).
pub(crate) fn from_wire(e: &WireError) -> CqlError {
    match e.outcome {
        WireOutcome::NotApplied => CqlError::Server(e.message.clone()),
        WireOutcome::Unknown => CqlError::WriteTimeout {
            message: e.message.clone(),
            consistency: CONSISTENCY_SERIAL,
            received: 0,
            block_for: 1,
            write_type: "CAS",
        },
    }
}

/// The catalog of the cluster's schema as it is now, read linearizably.
async fn catalog(node: &Node) -> Result<Vec<Keyspace>, CqlError> {
    read_catalog(node)
        .await
        .map_err(|e| CqlError::Server(format!("the schema could not be read: {}", e.message)))
}

/// [`catalog`], for Tally's other front doors: the read's own error.
pub(crate) async fn read_catalog(node: &Node) -> Result<Vec<Keyspace>, WireError> {
    let registers = node.read_registers(SCHEMA_PARTITION).await?;
    schema::catalog_of(&registers, history::COLUMN)
        .map_err(|m| WireError::new(tally_net::wire::ErrorKind::Internal, m.0))
}

/// This node's view of the cluster, as drivers read it: every member with
/// a CQL listener, its tokens from the ring this node routes by, and the
/// schema.
async fn cluster(node: &Node) -> Result<Cluster, CqlError> {
    let catalog = catalog(node).await?;
    node.set_table_graces(super::cells::graces(&catalog));
    let config = node.config();
    let ring = node.ring();
    let host = |n: usize| {
        let c = &config.nodes[n];
        c.cql.map(|addr| Host {
            host_id: host_id(&c.id),
            address: addr.ip(),
            tokens: ring.tokens_of(n),
        })
    };
    let me = node.me();
    let local = host(me).expect("a node serving CQL has a CQL address");
    // Members only: a node out of the ring has no tokens.
    let peers = (0..config.nodes.len())
        .filter(|&n| n != me)
        .filter_map(host)
        .filter(|h| !h.tokens.is_empty())
        .collect();
    Ok(Cluster {
        name: config.cluster.name.clone(),
        local,
        peers,
        schema_version: schema_version(&catalog),
        catalog,
        replication_factor: config.cluster.replication_factor,
        fresh: true,
    })
}
