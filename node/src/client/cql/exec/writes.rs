//! Writes of regular tables' rows: the cells `regular` works out for an
//! `INSERT`, `UPDATE` or `DELETE`, stamped with the client's timestamp
//! (or this node's clock), written partition by partition through the
//! node as whole last-write-wins cells.

use tally_engine::{Key, now_ms};

use super::super::ast::Statement;
use super::super::regular::{self, Writes};
use super::super::response::CqlError;
use super::super::work::Part;
use super::{Level, count_route};
use crate::client::join::join_all;
use crate::node::Node;

/// Runs `part` (an INSERT, UPDATE or DELETE of a regular table) at `lv`;
/// `timestamp` the client's, if it gave one.
pub(super) async fn write(
    node: &Node,
    part: &Part,
    timestamp: Option<i64>,
    lv: Level,
) -> Result<(), CqlError> {
    if !node.serves_cql_regular_tables() {
        return Err(CqlError::Server(
            "regular tables are not enabled yet: every member of the cluster must be up on a \
             build that has them, and have enabled feature cql-regular-tables"
                .into(),
        ));
    }
    let (t, values) = (part.target(), &part.values);
    let now = now_ms();
    let clock = (timestamp.unwrap_or_else(now_us), now);
    let writes = match &part.statement {
        Statement::Insert(i) => {
            let at = regular::stamp(t, (i.ttl.as_ref(), i.timestamp.as_ref()), values, clock)?;
            regular::insert(t, i, values, at)?
        }
        Statement::Update(u) => {
            let at = regular::stamp(t, (u.ttl.as_ref(), u.timestamp.as_ref()), values, clock)?;
            regular::update(t, u, values, at)?
        }
        Statement::Delete(d) => {
            let at = regular::stamp(t, (None, d.timestamp.as_ref()), values, clock)?;
            regular::delete(t, d, values, at)?
        }
        other => return Err(CqlError::Server(format!("not a write of rows: {other:?}"))),
    };
    count_route(node, writes.iter().map(|(p, _)| p.as_slice()));
    put(node, writes, lv).await
}

/// The coordinator's clock in µs, as a write's timestamp.
fn now_us() -> i64 {
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    i64::try_from(us).unwrap_or(i64::MAX)
}

/// Writes each partition's cells (in writes of at most `CELLS_MAX`), all
/// partitions at once.
async fn put(node: &Node, writes: Writes, lv: Level) -> Result<(), CqlError> {
    let puts = writes.into_iter().map(|(partition, cells)| async move {
        let mut keyed = Vec::with_capacity(cells.len());
        for (column, cell) in cells {
            let key =
                Key::new(&partition, &column).map_err(|e| CqlError::Invalid(e.to_string()))?;
            keyed.push((key, cell));
        }
        while !keyed.is_empty() {
            let rest = keyed.split_off(keyed.len().min(tally_net::wire::LEADER_CELLS_MAX));
            node.put_cells(std::mem::replace(&mut keyed, rest), lv.cl)
                .await
                .map_err(|e| lv.error(&e))?;
        }
        Ok::<(), CqlError>(())
    });
    for done in join_all(puts).await {
        done?;
    }
    Ok(())
}
