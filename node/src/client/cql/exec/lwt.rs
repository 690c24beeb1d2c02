//! Lightweight transactions and `SERIAL` reads of regular tables, run
//! against the cluster: the row's cells read at QUORUM, then one agreed
//! round on its partition (`Node::agree`) whose change `lwt` works out,
//! then the decided cells written at the statement's level. Nothing here
//! decides: the rules are `lwt`'s and `regular`'s.

use tally_net::wire::{Consistency, WireError};

use super::super::ast::{Select, Selection, Statement, TableName};
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

/// What a round decided: the `[applied]` answer, and the cells to write.
struct Decided {
    judged: lwt::Judged,
    writes: Vec<(Vec<u8>, tally_engine::Cell)>,
}

/// Runs a conditional INSERT, UPDATE or DELETE, or a conditional batch
/// of `parts` (`batch`: one partition of one table) at `lv` (the level
/// the decided cells are written at); answers `[applied]`.
pub(super) async fn conditional(
    node: &Node,
    parts: &[Part],
    batch: bool,
    lv: Level,
) -> Result<Answer, CqlError> {
    writes::enabled(node)?;
    let Some(first) = parts.first() else {
        return Err(CqlError::Server("no statement to run".into()));
    };
    if first.table.is_counter() {
        return Err(CqlError::Invalid(
            "Conditional updates are not supported on counter tables".into(),
        ));
    }
    let statements: Vec<_> = parts
        .iter()
        .map(|p| (&p.statement, p.values.as_slice()))
        .collect();
    let plan = lwt::plan(first.target(), &statements, batch)?;
    let partition = plan.partition.clone();
    count_route(node, std::iter::once(partition.as_slice()));
    let read = node
        .get_wide_row_cells(&partition, Consistency::Quorum)
        .await
        .map_err(|e| lv.error(&e))?;
    let round = Round {
        keyspace: first.keyspace.clone(),
        table: first.table.clone(),
        statements: parts
            .iter()
            .map(|p| (p.statement.clone(), p.values.clone()))
            .collect(),
        plan,
        batch,
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
    if decided.judged.applied {
        let writes: Writes = vec![(partition, decided.writes)];
        writes::put(node, writes, lv).await?;
    }
    let (meta, rows) = lwt::applied_rows(first.target(), decided.judged);
    Ok((Opcode::Result, result::rows(&meta, &rows, None, false)))
}

/// One transaction's round, owned, for the agreed change to run.
struct Round {
    keyspace: String,
    table: TableDef,
    /// Its statements, each with its values.
    statements: Vec<(Statement, Vec<super::super::body::Value>)>,
    plan: lwt::Plan,
    batch: bool,
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
        let meta = regular::all_columns(t);
        let found: Vec<Option<Vec<Cell>>> = (self.plan.rows.iter())
            .map(|(clustering, _)| self.row(&state, clustering, now_ms))
            .collect();
        let checked: Vec<_> = (self.plan.rows.iter().zip(&found))
            .map(|((_, check), row)| (check, row.as_ref()))
            .collect();
        let judged = lwt::judge(t, &meta, &checked, self.batch)?;
        if !judged.applied {
            let d = Decided {
                judged,
                writes: Vec::new(),
            };
            return Ok((registers.clone(), d));
        }
        let ts = lwt::later_than(&state, now_ms);
        let mut cells = Vec::new();
        for (statement, values) in &self.statements {
            let made = regular::write_at(t, statement, values, (ts, now_ms))?;
            cells.extend(made.into_iter().flat_map(|(_, c)| c));
        }
        let next = lwt::after(registers, &cells, now_ms)?;
        let mut writes = lwt::unwritten(registers, &self.read);
        writes.extend(cells);
        Ok((next, Decided { judged, writes }))
    }

    /// The row of `clustering` in `state`, every column, if it exists.
    fn row(&self, state: &Partition, clustering: &[Vec<u8>], now_ms: u64) -> Option<Vec<Cell>> {
        let q = Query {
            rows: Rows {
                partitions: vec![(self.plan.key.clone(), self.plan.partition.clone())],
                clustering: Clustering {
                    fixed: clustering.iter().map(|v| vec![v.clone()]).collect(),
                    range: None,
                },
            },
            reversed: false,
            scan: false,
            per_partition: None,
            tokens: None,
        };
        let all = whole_table(&self.table);
        let rows =
            regular::table_rows(self.target(), &all, &q, std::slice::from_ref(state), now_ms);
        rows.into_iter().next()
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
        tokens: Vec::new(),
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
        let cells = node.get_wide_row_cells(p, lv.cl);
        let (cells, registers) = tokio::join!(cells, node.read_registers(p));
        let err = |e: WireError| lv.error(&e);
        out.push(lwt::merged(cells.map_err(err)?, &registers.map_err(err)?));
    }
    Ok(out)
}
