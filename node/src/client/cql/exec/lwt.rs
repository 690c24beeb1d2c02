//! Lightweight transactions and `SERIAL` reads of regular tables, run
//! against the cluster: the row's cells read at QUORUM, then one agreed
//! round on its partition (`Node::agree`) whose change `lwt` works out,
//! then the decided cells written at the statement's level. Nothing here
//! decides: the rules are `lwt`'s and `regular`'s.

use tally_net::wire::{Consistency, WireError};

use super::super::ast::{Condition, Select, Selection, Statement, TableName};
use super::super::frame::Opcode;
use super::super::lwt::{self, Partition};
use super::super::regular::{self, Writes};
use super::super::response::CqlError;
use super::super::result::{self, Cell};
use super::super::rows::{Clustering, Query, Rows, Target};
use super::super::schema::TableDef;
use super::super::work::{Answer, Part};
use super::{Level, count_route, writes};
use crate::node::Node;

/// What a round decided: whether the condition held, the columns and
/// values the answer carries, and the cells to write.
struct Decided {
    applied: bool,
    answer: (Vec<super::super::result::Column>, Vec<Cell>),
    writes: Vec<(Vec<u8>, tally_engine::Cell)>,
}

/// Runs a conditional INSERT, UPDATE or DELETE (`part`) at `lv` (its
/// level is the write's of the decided cells); answers `[applied]`.
pub(super) async fn conditional(node: &Node, part: &Part, lv: Level) -> Result<Answer, CqlError> {
    writes::enabled(node)?;
    let Some(condition) = part.statement.condition() else {
        return Err(CqlError::Server("not a conditional write".into()));
    };
    let (key, partition, clustering) =
        regular::named_row(part.target(), &part.statement, &part.values)?;
    count_route(node, std::iter::once(partition.as_slice()));
    let read = node
        .get_row_cells(&partition, Consistency::Quorum)
        .await
        .map_err(|e| lv.error(&e))?;
    let round = Round {
        keyspace: part.keyspace.clone(),
        table: part.table.clone(),
        statement: part.statement.clone(),
        values: part.values.clone(),
        condition,
        row: (key, partition.clone(), clustering),
        read,
        skip_agreed: node.cql_lwt_skips_agreed_read(),
    };
    let decided = node
        .agree(&partition, move |registers, now| {
            Ok(match round.decide(registers, now) {
                Ok((next, d)) => (next, Ok(d)),
                Err(e) => (registers.clone(), Err(e)),
            })
        })
        .await
        .map_err(|e| super::super::shared::from_wire(&e))??;
    if decided.applied {
        let writes: Writes = vec![(partition, decided.writes)];
        writes::put(node, writes, lv).await?;
    }
    let t = part.target();
    let (meta, row) = lwt::applied_row(t, decided.applied, decided.answer);
    Ok((Opcode::Result, result::rows(&meta, &[row], None, false)))
}

/// One transaction's round, owned, for the agreed change to run.
struct Round {
    keyspace: String,
    table: TableDef,
    statement: Statement,
    values: Vec<super::super::body::Value>,
    condition: Condition,
    /// The row.
    row: regular::OneRow,
    /// Its partition's cells, read before the round.
    read: Partition,
    /// FAULT INJECTION: judge on `read` alone, not on the agreed state.
    skip_agreed: bool,
}

impl Round {
    fn target(&self) -> Target<'_> {
        Target {
            keyspace: &self.keyspace,
            table: &self.table,
        }
    }

    /// The next registers and what was decided, given the agreed
    /// `registers` at `now_ms`.
    fn decide(
        &self,
        registers: &tally_net::wire::Registers,
        now_ms: u64,
    ) -> Result<(tally_net::wire::Registers, Decided), CqlError> {
        let t = self.target();
        let state = match self.skip_agreed {
            true => self.read.clone(),
            false => lwt::merged(self.read.clone(), registers),
        };
        let (key, partition, clustering) = &self.row;
        let q = Query {
            rows: Rows {
                partitions: vec![(key.clone(), partition.clone())],
                clustering: Clustering {
                    fixed: clustering.iter().map(|v| vec![v.clone()]).collect(),
                    range: None,
                },
            },
            reversed: false,
            scan: false,
            per_partition: None,
        };
        let all = whole_table(&self.table);
        let row = regular::table_rows(t, &all, &q, std::slice::from_ref(&state), now_ms)
            .into_iter()
            .next();
        let meta = regular::all_columns(t);
        let values = &self.values;
        let (applied, columns, cells) =
            lwt::judge(t, &self.condition, (&meta, row.as_ref()), values)?;
        if !applied {
            let d = Decided {
                applied,
                answer: (columns, cells),
                writes: Vec::new(),
            };
            return Ok((registers.clone(), d));
        }
        let ts = lwt::later_than(&state, now_ms);
        let made = regular::write_at(t, &self.statement, values, (ts, now_ms))?;
        let cells: Vec<_> = made.into_iter().flat_map(|(_, c)| c).collect();
        let next = lwt::after(registers, &cells, now_ms)?;
        let mut writes = lwt::unwritten(registers, &self.read);
        writes.extend(cells);
        let d = Decided {
            applied,
            answer: (Vec::new(), Vec::new()),
            writes,
        };
        Ok((next, d))
    }
}

/// `SELECT *` of `table`, to read a row whole.
fn whole_table(table: &TableDef) -> Select {
    Select {
        table: TableName {
            keyspace: None,
            name: table.name.clone(),
        },
        selection: Selection::All,
        relations: Vec::new(),
        group_by: Vec::new(),
        order_by: Vec::new(),
        limit: None,
        allow_filtering: false,
        distinct: false,
        per_partition_limit: None,
    }
}

/// Each named partition's cells with its agreed registers merged in: a
/// `SERIAL` read, which sees every transaction decided before it began.
pub(super) async fn read_serial(
    node: &Node,
    named: &Rows,
    lv: Level,
) -> Result<Vec<Partition>, CqlError> {
    let mut out = Vec::with_capacity(named.partitions.len());
    for (_, p) in &named.partitions {
        let (cells, registers) = tokio::join!(node.get_row_cells(p, lv.cl), node.read_registers(p));
        let err = |e: WireError| lv.error(&e);
        out.push(lwt::merged(cells.map_err(err)?, &registers.map_err(err)?));
    }
    Ok(out)
}
