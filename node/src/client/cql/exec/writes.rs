//! Writes of regular tables' rows: the cells `regular` works out for an
//! `INSERT`, `UPDATE` or `DELETE`, stamped with the client's timestamp
//! (or this node's clock), written partition by partition through the
//! node as whole last-write-wins cells.

use std::collections::BTreeMap;

use tally_engine::now_ms;
use tally_net::wire::{Consistency, LEADER_CELLS_MAX};

use super::super::lww;
use super::super::regular::{self, Writes};
use super::super::response::CqlError;
use super::super::work::Part;
use super::{Level, count_route};
use crate::cluster::batchlog::Failed;
use crate::node::Node;

/// Runs `parts` (INSERTs, UPDATEs and DELETEs of regular tables: one, or
/// a batch's) at `lv`, each partition's cells as one write; `timestamp`
/// the client's, if it gave one; a `logged` batch that needs more than
/// one write goes through the batch log, so all of it applies or none.
pub(super) async fn write(
    node: &Node,
    parts: &[Part],
    (timestamp, logged): (Option<i64>, bool),
    lv: Level,
) -> Result<(), CqlError> {
    enabled(node)?;
    let clock = (timestamp.unwrap_or_else(lww::now_us), now_ms());
    let mut by_partition: BTreeMap<Vec<u8>, Vec<_>> = BTreeMap::new();
    for part in parts {
        let writes = regular::write_at(part.target(), &part.statement, &part.values, clock)?;
        for (partition, cells) in writes {
            by_partition.entry(partition).or_default().extend(cells);
        }
    }
    let writes: Writes = by_partition.into_iter().collect();
    count_route(node, writes.iter().map(|(p, _)| p.as_slice()));
    let several = writes.len() > 1 || writes.iter().any(|(_, c)| c.len() > LEADER_CELLS_MAX);
    match logged && several && node.serves_batch_log() {
        true => put_logged(node, writes, lv).await,
        false => put(node, writes, lv).await,
    }
}

/// Writes a batch's partitions through the batch log. Its errors are
/// Cassandra's: a `BATCH_LOG` write timeout when the log's entry was not
/// written at QUORUM, a `BATCH` one when a partition's write was not (the
/// log applies it later).
async fn put_logged(node: &Node, writes: Writes, lv: Level) -> Result<(), CqlError> {
    let rf = node.config().cluster.replication_factor;
    match node.put_cells_logged(writes, lv.cl).await {
        Ok(()) => Ok(()),
        Err(Failed::Log(e)) => Err(Level {
            write: Some("BATCH_LOG"),
            block_for: Consistency::Quorum.required(rf),
            ..lv
        }
        .error(&e)),
        Err(Failed::Apply(e)) => Err(Level {
            write: Some("BATCH"),
            ..lv
        }
        .error(&e)),
    }
}

/// Refuses writes of regular tables until the cluster has the feature.
pub(super) fn enabled(node: &Node) -> Result<(), CqlError> {
    match node.serves_cql_regular_tables() {
        true => Ok(()),
        false => Err(CqlError::Server(
            "regular tables are not enabled yet: every member of the cluster must be up on a \
             build that has them, and have enabled feature cql-regular-tables"
                .into(),
        )),
    }
}

/// Writes each partition's cells, all partitions at once.
pub(super) async fn put(node: &Node, writes: Writes, lv: Level) -> Result<(), CqlError> {
    node.put_partitions(writes, lv.cl)
        .await
        .map_err(|e| lv.error(&e))
}
