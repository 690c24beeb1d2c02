//! Statements on counter tables' rows, run against the cluster: the
//! cells `rows` works out, added to, set, reset and read through the
//! node as every other client's counters are. Nothing here decides: the
//! statements' rules are `rows`, the levels and errors `levels`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use tally_engine::now_ms;
use tally_net::once::OpId;
use tally_net::wire::{Change, Consistency, Presence, Ttl, When, WireError, WireKey};

use super::ast::{BatchKind, Select, Statement};
use super::frame::Opcode;
use super::levels::{self, level};
use super::paging;
use super::regular;
use super::response::{self, CqlError};
use super::result::{self, Cell};
use super::rows::{self, CellOp, CellWrite, Query, Resets, Rows, Target};
use super::work::{Answer, Part, RowWork};
use crate::base::convert;
use crate::base::join::join_all;
use crate::node::Node;

/// Most cells changed at once: a statement's writes go out in waves.
const CELLS_AT_ONCE: usize = 64;
mod lwt;
mod pages;
mod scan;
mod writes;

/// One partition's cells, as read.
type Partition = BTreeMap<Vec<u8>, tally_engine::Cell>;

/// A statement's level and the replicas it needs, for its errors.
#[derive(Clone, Copy)]
struct Level {
    code: u16,
    cl: Consistency,
    block_for: usize,
    /// A write's type, as a `WriteTimeout` names it.
    write: Option<&'static str>,
    /// A read at SERIAL (of a regular table).
    serial: bool,
}

impl Level {
    fn error(self, e: &WireError) -> CqlError {
        levels::error(e, self.code, self.block_for, self.write)
    }
}

/// Runs `work` (a statement or a counter batch); `id` is the request's
/// operation id, applied to each of its adds.
pub(crate) async fn run(node: &Node, work: RowWork, id: Option<OpId>) -> Result<Answer, CqlError> {
    if !node.serves_cql_tables() {
        return Err(CqlError::Server(
            "counter tables are not enabled yet: every member of the cluster must be up on a \
             build that has them, and have enabled feature cql-tables (see `tally status`)"
                .into(),
        ));
    }
    let rf = node.config().cluster.replication_factor;
    if let Some(part) = work
        .parts
        .iter()
        .find(|p| p.statement.condition().is_some())
    {
        let lv = level_of(part, work.consistency, rf)?;
        return lwt::conditional(node, &work.parts, work.batch.is_some(), lv).await;
    }
    let mut answer = None;
    for part in &work.parts {
        let lv = level_of(part, work.consistency, rf)?;
        let write = !matches!(part.statement, Statement::Select(_));
        if write && !part.table.is_counter() {
            // A batch's writes of regular tables go together.
            let logged = work.batch == Some(BatchKind::Logged);
            writes::write(node, &work.parts, (work.timestamp, logged), lv).await?;
            return Ok((Opcode::Result, response::void()));
        }
        answer = Some(statement(node, part, &work, lv, id.as_ref()).await?);
    }
    answer.ok_or_else(|| CqlError::Invalid("no statement to run".into()))
}

/// The level `part` runs at (`code` the request's), and the replicas it
/// needs: a SERIAL read of a regular table reads at QUORUM, its agreed
/// state merged in.
fn level_of(part: &Part, code: u16, rf: usize) -> Result<Level, CqlError> {
    let write = !matches!(part.statement, Statement::Select(_));
    let counter = part.table.is_counter();
    let serial = !write && !counter && matches!(code, levels::SERIAL | levels::LOCAL_SERIAL);
    let table = || format!("{}.{}", part.keyspace, part.table.name);
    let cl = match serial {
        true => Consistency::Quorum,
        false => level(code, write, rf, table)?,
    };
    Ok(Level {
        code,
        cl,
        serial,
        block_for: cl.required(rf),
        write: match (write, counter) {
            (false, _) => None,
            (true, true) => Some("COUNTER"),
            (true, false) => Some("SIMPLE"),
        },
    })
}

/// Runs one statement of `work` (a counter table's write, or a SELECT)
/// at `lv`; `id` the request's operation id.
async fn statement(
    node: &Node,
    part: &Part,
    work: &RowWork,
    lv: Level,
    id: Option<&OpId>,
) -> Result<Answer, CqlError> {
    let void = || (Opcode::Result, response::void());
    match &part.statement {
        Statement::Insert(_) => Err(CqlError::Invalid(
            "INSERT statements are not allowed on counter tables, use UPDATE instead".into(),
        )),
        Statement::Update(u) => {
            let writes = rows::update(part.target(), u, &part.values)?;
            count_route(node, writes.cells.iter().map(|c| c.partition.as_slice()));
            apply(node, &writes.cells, writes.ttl_s, id, lv).await?;
            Ok(void())
        }
        Statement::Delete(d) => {
            let resets = rows::delete(part.target(), d, &part.values)?;
            match &resets {
                Resets::Cells(cells) => count_route(node, cells.iter().map(|(p, _)| &p[..])),
                Resets::Read { rows, .. } => {
                    count_route(node, rows.partitions.iter().map(|(_, p)| &p[..]));
                }
            }
            reset(node, part, resets, lv).await?;
            Ok(void())
        }
        Statement::Select(s) => select(node, part, s, work, lv).await,
        other => Err(CqlError::Server(format!(
            "not a statement on rows: {other:?}"
        ))),
    }
}

/// A SELECT's page of rows, read and projected.
async fn select(
    node: &Node,
    part: &Part,
    s: &Select,
    work: &RowWork,
    lv: Level,
) -> Result<Answer, CqlError> {
    let q = rows::query(part.target(), s, &part.values)?;
    let (rows, state) = match q.scan {
        true => scan::scan(node, part, s, &q, work, lv).await?,
        false => {
            count_route(node, q.rows.partitions.iter().map(|(_, p)| &p[..]));
            // One clock for the rows a page reads and those it answers.
            let now = now_ms();
            let read = match pages::read(node, part, (s, &q), (work, now), lv).await? {
                Some(read) => read,
                None => read_cells(node, &q.rows, lv).await?,
            };
            let all = table_rows(part.target(), s, &q, &read, now);
            let (size, state) = (work.page_size, work.paging_state.as_deref());
            paging::page(part.target(), (s, &q), all, size, state)?
        }
    };
    let (meta, rows) = match part.table.is_counter() {
        true => rows::project(part.target(), s, rows, &part.values)?,
        false => regular::project(part.target(), s, rows, &part.values)?,
    };
    let body = result::rows(&meta, &rows, state.as_deref(), work.skip_metadata);
    Ok((Opcode::Result, body))
}

/// Counts a statement on `partitions` as routed to a replica of all of
/// them, or forwarded (`tally_cql_statements_total`).
fn count_route<'p>(node: &Node, mut partitions: impl Iterator<Item = &'p [u8]>) {
    let here = partitions.all(|p| node.replicates(p));
    node.metrics().cql_statements[usize::from(!here)].fetch_add(1, Relaxed);
}

/// Applies an UPDATE's changes; `ttl_s` (if not 0) gives each counter
/// that has no deadline one.
async fn apply<'c>(
    node: &Node,
    cells: &'c [CellWrite],
    ttl_s: u32,
    id: Option<&OpId>,
    lv: Level,
) -> Result<(), CqlError> {
    let deadline = (ttl_s > 0).then(|| now_ms() + u64::from(ttl_s) * 1000);
    let change = |c: &'c CellWrite| async move {
        let key = WireKey::new(&c.partition, &c.column);
        match c.op {
            CellOp::Add(delta) => {
                match id {
                    Some(id) => node.add_once(&key, delta, id, lv.cl).await?,
                    None => node.add(&key, delta, lv.cl).await?,
                };
                if let Some(at_ms) = deadline {
                    let only = When::NoDeadline;
                    node.change(&key, Change::Expire { at_ms, only }, lv.cl)
                        .await?;
                }
            }
            CellOp::Set(value) => {
                let ttl = deadline.map_or(Ttl::Clear, Ttl::At);
                let only = Presence::Any;
                node.change(&key, Change::Set { value, ttl, only }, lv.cl)
                    .await?;
            }
        }
        Ok::<(), WireError>(())
    };
    if let [one] = cells {
        return change(one).await.map_err(|e| lv.error(&e));
    }
    for wave in cells.chunks(CELLS_AT_ONCE) {
        for done in join_all(wave.iter().map(change)).await {
            done.map_err(|e| lv.error(&e))?;
        }
    }
    Ok(())
}

/// Resets the counters a DELETE names: the cells themselves, or the live
/// ones of the rows it names, read first.
async fn reset(node: &Node, part: &Part, resets: Resets, lv: Level) -> Result<(), CqlError> {
    let cells = match resets {
        Resets::Cells(cells) => cells,
        Resets::Read {
            rows: named,
            counters,
        } => {
            let read = read(node, &named, lv).await?;
            let mut cells = Vec::new();
            for ((_, partition), live) in named.partitions.iter().zip(&read) {
                let columns = rows::live_in(part.target(), &named.clustering, &counters, live);
                cells.extend(columns.into_iter().map(|c| (partition.clone(), c)));
            }
            cells
        }
    };
    for wave in cells.chunks(CELLS_AT_ONCE) {
        let done = join_all(
            wave.iter()
                .map(|(p, c)| async move { node.reset(&WireKey::new(p, c), lv.cl).await }),
        )
        .await;
        for d in done {
            d.map_err(|e| lv.error(&e))?;
        }
    }
    Ok(())
}

/// Each named partition's cells, in order.
async fn read_cells(node: &Node, named: &Rows, lv: Level) -> Result<Vec<Partition>, CqlError> {
    if lv.serial {
        return lwt::read_serial(node, named, lv).await;
    }
    let reads = named
        .partitions
        .iter()
        .map(|(_, p)| node.get_wide_row_cells(p, lv.cl));
    let mut out = Vec::with_capacity(named.partitions.len());
    for cells in join_all(reads).await {
        out.push(cells.map_err(|e| lv.error(&e))?);
    }
    Ok(out)
}

/// Each named partition's counters and their live values, in order.
async fn read(
    node: &Node,
    named: &Rows,
    lv: Level,
) -> Result<Vec<BTreeMap<Vec<u8>, Option<i64>>>, CqlError> {
    let read = read_cells(node, named, lv).await?;
    Ok(live(&read, now_ms()))
}

/// Counters' cells as their live values at `now`.
fn live(read: &[Partition], now: u64) -> Vec<BTreeMap<Vec<u8>, Option<i64>>> {
    read.iter()
        .map(|cells| {
            cells
                .iter()
                .map(|(column, cell)| {
                    let value = convert::live_value(cell, now).ok().flatten();
                    (column.clone(), value)
                })
                .collect()
        })
        .collect()
}

/// The rows, with every column, that `read` holds of `q`'s partitions
/// at `now` (ms), read by the rule of the table's kind.
fn table_rows(t: Target, s: &Select, q: &Query, read: &[Partition], now: u64) -> Vec<Vec<Cell>> {
    let rows = match t.table.is_counter() {
        true => rows::table_rows(t, s, q, &live(read, now)),
        false => regular::table_rows(t, s, q, read, now),
    };
    rows::per_partition_rows(t, q, rows)
}
