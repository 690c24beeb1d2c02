//! Running a connection's statements against what a node holds, without
//! I/O: the system tables (generated from the node's view of the cluster,
//! [`super::system`]), `USE`, and prepared statements by their id.
//!
//! What needs the cluster is handed back for the connection to do: a
//! schema change ([`Outcome::Schema`], agreed with the cluster;
//! `schema::apply` is its rule), and statements on a counter table's rows
//! ([`Outcome::Rows`], run by `exec`; `rows` is their rule). A node may
//! run statements on rows with the schema it read a moment ago; what
//! must see the schema as the cluster has it now (the system tables, a
//! table this node does not know yet) asks for it ([`Outcome::Refresh`]).

use super::ast::{
    Assignment, Condition, Op, Relation, Select, Statement, TableName, Term, TokenBound,
};
use super::frame::Opcode;
use super::parse::parse;
use super::prepared::{Prepared, PreparedCache, statement_id};
use super::request::{Params, Request};
use super::response::{self, CqlError};
use super::result::{self, Column, CqlType, Metadata};
use super::rows::{self, Target};
use super::schema::{Kind, TableDef};
use super::select::evaluate;
use super::system::{Cluster, Table};
use super::tables::{SYSTEM_KEYSPACES, no_keyspace, system_table, user_table, write_refused};
use super::work::{Answer, Outcome, Part, RowWork, Session};

/// Runs a statement request (QUERY, PREPARE, EXECUTE, BATCH; the
/// connection answers REGISTER itself).
pub(crate) fn run(
    cluster: &Cluster,
    session: &mut Session,
    prepared: &PreparedCache,
    request: &Request,
) -> Result<Outcome, CqlError> {
    match request {
        Request::Query(text, params) => {
            let (statement, markers) = parse(text).map_err(|e| CqlError::Syntax(e.0))?;
            check_values(markers, params)?;
            let keyspace = session.keyspace.clone();
            if super::schema::changes_schema(&statement) {
                return Ok(Outcome::Schema {
                    statement: Box::new(statement),
                    keyspace,
                });
            }
            execute(cluster, session, statement, keyspace.as_deref(), params)
        }
        Request::Prepare(text) => prepare(cluster, session, prepared, text),
        Request::Execute(id, params) => {
            let p = prepared.lookup(id)?;
            check_values(p.markers, params)?;
            let keyspace = p.keyspace.as_deref();
            execute(cluster, session, p.statement, keyspace, params)
        }
        Request::Batch {
            kind,
            statements,
            params,
        } => {
            let keyspace = session.keyspace.as_deref();
            super::batch::batch(cluster, keyspace, prepared, *kind, statements, params)
        }
        other => Err(CqlError::Protocol(format!("{other:?} is not a statement"))),
    }
}

fn check_values(markers: usize, params: &Params) -> Result<(), CqlError> {
    match params.values.len() == markers {
        true => Ok(()),
        false => Err(CqlError::Invalid(format!(
            "There were {markers} markers(?) in CQL but {} bound variables",
            params.values.len()
        ))),
    }
}

fn execute(
    cluster: &Cluster,
    session: &mut Session,
    statement: Statement,
    keyspace: Option<&str>,
    params: &Params,
) -> Result<Outcome, CqlError> {
    let answer = |a: Answer| Ok(Outcome::Answer(a));
    let table = match &statement {
        Statement::Use(ks) => {
            let user = cluster.catalog.iter().any(|k| k.name == *ks);
            if !SYSTEM_KEYSPACES.contains(&ks.as_str()) && !user {
                return match cluster.fresh {
                    true => Err(no_keyspace(ks)),
                    false => Ok(Outcome::Refresh),
                };
            }
            session.keyspace = Some(ks.clone());
            return answer((Opcode::Result, response::set_keyspace(ks)));
        }
        Statement::Select(s) => &s.table,
        Statement::Update(u) => &u.table,
        Statement::Insert(i) => &i.table,
        Statement::Delete(d) => &d.table,
        Statement::Batch(kind, statements) => {
            return super::batch::inline(cluster, *kind, statements, keyspace, params);
        }
        other => {
            return Err(CqlError::Server(format!(
                "a schema change reached the statement runner: {other:?}"
            )));
        }
    };
    let Some(found) = user_table(cluster, table, keyspace)? else {
        return match (&statement, cluster.fresh) {
            (_, false) => Ok(Outcome::Refresh),
            (Statement::Select(s), true) => {
                let table = system_table(cluster, &s.table, keyspace)?;
                let (meta, rows) = evaluate(&table, s, &params.values)?;
                answer((
                    Opcode::Result,
                    result::rows(&meta, &rows, None, params.skip_metadata),
                ))
            }
            (_, true) => Err(write_refused(cluster, table, keyspace)),
        };
    };
    let (keyspace, table) = found;
    Ok(Outcome::Rows(RowWork {
        parts: vec![Part {
            keyspace,
            table,
            statement,
            values: params.values.clone(),
        }],
        consistency: params.consistency,
        skip_metadata: params.skip_metadata,
        page_size: params.page_size,
        paging_state: params.paging_state.clone(),
        batch: None,
        timestamp: params.timestamp,
    }))
}

fn prepare(
    cluster: &Cluster,
    session: &Session,
    cache: &PreparedCache,
    text: &str,
) -> Result<Outcome, CqlError> {
    let (statement, markers) = parse(text).map_err(|e| CqlError::Syntax(e.0))?;
    let keyspace = session.keyspace.clone();
    let ks = keyspace.as_deref();
    let (bind, pk_indexes, result) = match &statement {
        Statement::Use(_) => (empty(), Vec::new(), empty()),
        Statement::Select(s) => match user_table(cluster, &s.table, ks)? {
            Some((ks, t)) => {
                let target = Target {
                    keyspace: &ks,
                    table: &t,
                };
                let all = Table {
                    meta: every_column(target),
                    rows: Vec::new(),
                };
                let bind = bind_meta(
                    &all.meta,
                    &s.relations,
                    select_markers(&all.meta, s),
                    markers,
                )?;
                let result = match t.is_counter() {
                    true => select_meta(&rows::with_token(&t, s, all.clone())?, s)?,
                    false => super::regular::project(target, s, Vec::new(), &[])?.0,
                };
                (bind, pk_indexes(&t, &s.relations), result)
            }
            None if !cluster.fresh => return Ok(Outcome::Refresh),
            None => {
                let table = system_table(cluster, &s.table, ks)?;
                let bind = bind_meta(
                    &table.meta,
                    &s.relations,
                    select_markers(&table.meta, s),
                    markers,
                )?;
                (bind, Vec::new(), select_meta(&table, s)?)
            }
        },
        Statement::Update(_) | Statement::Delete(_) | Statement::Insert(_) => {
            let name = written_table(&statement);
            match user_table(cluster, name, ks)? {
                Some((ks, t)) => {
                    let all = every_column(Target {
                        keyspace: &ks,
                        table: &t,
                    });
                    let (relations, extra) = write_markers(&statement, &all);
                    let bind = bind_meta(&all, &relations, extra, markers)?;
                    (bind, pk_indexes(&t, &relations), empty())
                }
                None if !cluster.fresh => return Ok(Outcome::Refresh),
                None => return Err(write_refused(cluster, name, ks)),
            }
        }
        _ => {
            return Err(CqlError::Invalid(
                "Tally prepares SELECT, INSERT, UPDATE, DELETE and USE statements".into(),
            ));
        }
    };
    let id = statement_id(text, ks);
    cache.put(
        id.clone(),
        Prepared {
            statement,
            markers,
            keyspace,
        },
    );
    let body = result::prepared(&id, &bind, &pk_indexes, &result);
    Ok(Outcome::Answer((Opcode::Result, body)))
}

fn empty() -> Metadata {
    Metadata {
        keyspace: String::new(),
        table: String::new(),
        columns: Vec::new(),
    }
}

/// The columns a SELECT answers, whatever its filters.
fn select_meta(table: &Table, s: &Select) -> Result<Metadata, CqlError> {
    let unfiltered = Select {
        relations: Vec::new(),
        limit: None,
        order_by: Vec::new(),
        ..s.clone()
    };
    Ok(evaluate(table, &unfiltered, &[])?.0)
}

/// A marker bound to a value that is no column's, and its spec.
type Extra = Vec<(Term, Column)>;

fn extra(name: &str, ty: CqlType, term: Option<&Term>) -> Extra {
    term.map(|t| {
        (
            t.clone(),
            Column {
                name: name.into(),
                ty,
            },
        )
    })
    .into_iter()
    .collect()
}

/// The markers of a SELECT (of a table of columns `meta`) that bind no
/// column of its relations: its LIMIT's, and its `TOKEN()` relations' (a
/// token, or the partition key values a token is taken of), as
/// Cassandra names them.
fn select_markers(meta: &Metadata, s: &Select) -> Extra {
    let mut markers = extra("[limit]", CqlType::Int, s.limit.as_ref());
    for r in &s.tokens {
        match &r.bound {
            TokenBound::Value(term) => {
                markers.extend(extra("partition key token", CqlType::Bigint, Some(term)));
            }
            TokenBound::Of(terms) => {
                let column = |name: &String| meta.columns.iter().find(|c| c.name == *name);
                let of = terms.iter().zip(&r.columns);
                markers.extend(of.filter_map(|(t, c)| Some((t.clone(), column(c)?.clone()))));
            }
        }
    }
    markers
}

/// Every column of a table's rows, as its kind reads them.
fn every_column(t: Target) -> Metadata {
    match t.table.is_counter() {
        true => rows::all_columns(t),
        false => super::regular::all_columns(t),
    }
}

/// The table an INSERT, UPDATE or DELETE writes.
fn written_table(statement: &Statement) -> &TableName {
    match statement {
        Statement::Update(u) => &u.table,
        Statement::Insert(i) => &i.table,
        Statement::Delete(d) => &d.table,
        _ => unreachable!("written_table of an INSERT, an UPDATE or a DELETE"),
    }
}

/// A write's relations (an INSERT's key columns as `=`, its others as
/// values), and its other markers: the values assigned, typed as their
/// columns of `all`, `USING TTL` and `USING TIMESTAMP`.
fn write_markers(statement: &Statement, all: &Metadata) -> (Vec<Relation>, Extra) {
    let type_of = |name: &str| {
        all.columns
            .iter()
            .find(|c| c.name == name)
            .map_or(CqlType::Blob, |c| c.ty.clone())
    };
    let using = |ttl: Option<&Term>, ts: Option<&Term>| {
        let mut extras = extra("[ttl]", CqlType::Int, ttl);
        extras.extend(extra("[timestamp]", CqlType::Bigint, ts));
        extras
    };
    match statement {
        Statement::Update(u) => {
            let mut extras = using(u.ttl.as_ref(), u.timestamp.as_ref());
            for a in &u.assignments {
                let (Assignment::Add(name, t)
                | Assignment::Sub(name, t)
                | Assignment::Set(name, t)) = a;
                extras.extend(extra(name, type_of(name), Some(t)));
            }
            (with_condition(&u.relations, u.condition.as_ref()), extras)
        }
        Statement::Insert(i) => {
            let relations = i
                .columns
                .iter()
                .zip(&i.values)
                .map(|(column, term)| Relation {
                    column: column.clone(),
                    op: Op::Eq,
                    terms: vec![term.clone()],
                })
                .collect();
            (relations, using(i.ttl.as_ref(), i.timestamp.as_ref()))
        }
        Statement::Delete(d) => (
            with_condition(&d.relations, d.condition.as_ref()),
            using(None, d.timestamp.as_ref()),
        ),
        _ => (Vec::new(), Vec::new()),
    }
}

/// A write's relations and its condition's (whose markers bind too).
fn with_condition(relations: &[Relation], condition: Option<&Condition>) -> Vec<Relation> {
    let mut all = relations.to_vec();
    if let Some(Condition::Columns(more)) = condition {
        all.extend(more.iter().cloned());
    }
    all
}

/// The marker of each partition key column, in key order, when every
/// one is bound by `= ?` (a token-aware driver hashes them); else none.
fn pk_indexes(t: &TableDef, relations: &[Relation]) -> Vec<u16> {
    let marker = |name: &str| {
        relations
            .iter()
            .find_map(|r| match (r.column == name, r.op, r.terms.as_slice()) {
                (true, Op::Eq, [Term::Marker(i) | Term::Named(i, _)]) => u16::try_from(*i).ok(),
                _ => None,
            })
    };
    let keys: Vec<Option<u16>> = t
        .columns
        .iter()
        .filter(|c| c.kind == Kind::PartitionKey)
        .map(|c| marker(&c.name))
        .collect();
    keys.into_iter()
        .collect::<Option<Vec<u16>>>()
        .unwrap_or_default()
}

/// The bind markers of a statement, in order: each named as its column
/// (or as `extra` says), typed as it (a list of it for `IN ?`).
fn bind_meta(
    table: &Metadata,
    relations: &[Relation],
    extra: Extra,
    markers: usize,
) -> Result<Metadata, CqlError> {
    let mut columns: Vec<(usize, Column)> = Vec::new();
    for r in relations {
        let Some(c) = table.columns.iter().find(|c| c.name == r.column) else {
            return Err(CqlError::Invalid(format!(
                "Undefined column name {}",
                r.column
            )));
        };
        for t in &r.terms {
            if let Term::Marker(i) | Term::Named(i, _) = t {
                let ty = match (r.op, r.terms.len()) {
                    (Op::In, 1) => CqlType::List(Box::new(c.ty.clone())),
                    _ => c.ty.clone(),
                };
                let name = match t {
                    Term::Named(_, n) => n.clone(),
                    _ => c.name.clone(),
                };
                columns.push((*i, Column { name, ty }));
            }
        }
    }
    for (term, column) in extra {
        if let Term::Marker(i) | Term::Named(i, _) = term {
            columns.push((i, column));
        }
    }
    columns.sort_by_key(|(i, _)| *i);
    if columns.len() != markers {
        return Err(CqlError::Invalid(format!(
            "{markers} bind markers, {} of them where a value is bound",
            columns.len()
        )));
    }
    Ok(Metadata {
        columns: columns.into_iter().map(|(_, c)| c).collect(),
        ..table.clone()
    })
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::super::body::{Reader, Value};
    use super::super::system::{Host, host_id};
    use super::*;

    fn cluster() -> Cluster {
        Cluster {
            name: "tally".into(),
            local: Host {
                host_id: host_id("n1"),
                address: IpAddr::from([127, 0, 0, 1]),
                tokens: vec![1],
            },
            peers: vec![],
            schema_version: [0; 16],
            catalog: Vec::new(),
            replication_factor: 3,
            fresh: true,
        }
    }

    /// `run`'s answer, for statements that are not schema changes.
    fn run(
        c: &Cluster,
        s: &mut Session,
        p: &PreparedCache,
        r: Request,
    ) -> Result<Answer, CqlError> {
        match super::run(c, s, p, &r)? {
            Outcome::Answer(a) => Ok(a),
            other => panic!("not an answer: {other:?}"),
        }
    }

    fn query(q: &str, values: Vec<Value>) -> Request {
        Request::Query(
            q.into(),
            Params {
                values,
                ..Params::default()
            },
        )
    }

    #[test]
    fn a_driver_reads_local_and_keyspaces() {
        let (c, mut s, p) = (cluster(), Session::default(), PreparedCache::default());
        let (op, body) = run(
            &c,
            &mut s,
            &p,
            query("SELECT * FROM system.local WHERE key='local'", vec![]),
        )
        .unwrap();
        assert_eq!(op, Opcode::Result);
        assert_eq!(Reader::new(&body).int(), Ok(2), "rows");
        let e = run(
            &c,
            &mut s,
            &p,
            query("SELECT * FROM system.peers_v2", vec![]),
        )
        .unwrap_err();
        assert_eq!(e, CqlError::Invalid("unconfigured table peers_v2".into()));
        let e = run(
            &c,
            &mut s,
            &p,
            query("SELECT * FROM system_virtual_schema.keyspaces", vec![]),
        )
        .unwrap_err();
        assert_eq!(e.code(), 0x2200);
    }

    #[test]
    fn use_sets_the_keyspace_of_unqualified_tables() {
        let (c, mut s, p) = (cluster(), Session::default(), PreparedCache::default());
        let e = run(&c, &mut s, &p, query("SELECT * FROM local", vec![])).unwrap_err();
        assert!(
            e.message().starts_with("No keyspace has been specified"),
            "{e:?}"
        );
        run(&c, &mut s, &p, query("USE system", vec![])).unwrap();
        assert!(run(&c, &mut s, &p, query("SELECT * FROM local", vec![])).is_ok());
        let e = run(&c, &mut s, &p, query("USE ks", vec![])).unwrap_err();
        assert_eq!(e, CqlError::Invalid("Keyspace 'ks' does not exist".into()));
        let e = run(
            &c,
            &mut s,
            &p,
            query("UPDATE ks.cf SET c = c + 1 WHERE pk = 0", vec![]),
        )
        .unwrap_err();
        assert_eq!(e, CqlError::Invalid("Keyspace 'ks' does not exist".into()));
        let e = run(
            &c,
            &mut s,
            &p,
            query("UPDATE local SET c = c + 1 WHERE k = 0", vec![]),
        )
        .unwrap_err();
        assert_eq!(e.code(), 0x2100, "system is read-only");
    }

    #[test]
    fn a_prepared_select_runs_by_its_id_with_its_markers_typed() {
        let (c, mut s, p) = (cluster(), Session::default(), PreparedCache::default());
        let q = "SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = ?";
        let (_, body) = run(&c, &mut s, &p, Request::Prepare(q.into())).unwrap();
        let mut r = Reader::new(&body);
        assert_eq!(r.int(), Ok(4), "prepared");
        let id = r.short_bytes().unwrap();
        assert_eq!(
            (r.int(), r.int(), r.int()),
            (Ok(1), Ok(1), Ok(0)),
            "one marker, no key"
        );
        let exec = |values| {
            Request::Execute(
                id.clone(),
                Params {
                    values,
                    ..Params::default()
                },
            )
        };
        let (_, body) = run(&c, &mut s, &p, exec(vec![Value::Bytes(b"system".to_vec())])).unwrap();
        assert_eq!(Reader::new(&body).int(), Ok(2));
        let e = run(&c, &mut s, &p, exec(vec![])).unwrap_err();
        assert_eq!(e.code(), 0x2200, "a value missing");
        let e = run(
            &c,
            &mut s,
            &p,
            Request::Execute(b"nope".to_vec(), Params::default()),
        )
        .unwrap_err();
        assert_eq!(e.code(), 0x2500);
        assert_eq!(statement_id(q, None), id, "the same id on every node");
    }

    /// A cluster whose catalog has `ks.cf (pk int PRIMARY KEY, c counter)`.
    fn with_table(fresh: bool) -> Cluster {
        let create = "CREATE TABLE ks.cf (pk int, ck text, c counter, PRIMARY KEY (pk, ck))";
        let ks = super::super::schema::Keyspace {
            name: "ks".into(),
            durable_writes: true,
            tables: Vec::new(),
        };
        let (statement, _) = parse(create).unwrap();
        let Ok(super::super::schema::Change::Put(ks, _)) =
            super::super::schema::apply(&statement, &[ks], None, 3, [1; 16].into())
        else {
            panic!()
        };
        Cluster {
            catalog: vec![ks],
            fresh,
            ..cluster()
        }
    }

    #[test]
    fn a_statement_on_rows_is_handed_back_with_its_table() {
        let (c, mut s, p) = (
            with_table(false),
            Session::default(),
            PreparedCache::default(),
        );
        let q = query(
            "UPDATE ks.cf SET c = c + 1 WHERE pk = 1 AND ck = 'a'",
            vec![],
        );
        let Ok(Outcome::Rows(work)) = super::run(&c, &mut s, &p, &q) else {
            panic!()
        };
        assert_eq!(work.parts.len(), 1);
        assert_eq!(work.parts[0].table.name, "cf");
        // A table this node's copy lacks: read the schema again, then
        // refuse if it is still not there.
        let q = query("SELECT * FROM ks.nope WHERE pk = 1", vec![]);
        assert!(matches!(
            super::run(&c, &mut s, &p, &q),
            Ok(Outcome::Refresh)
        ));
        let fresh = with_table(true);
        let e = run(&fresh, &mut s, &p, q).unwrap_err();
        assert_eq!(e, CqlError::Invalid("unconfigured table nope".into()));
        // So do the system tables.
        let q = query("SELECT * FROM system.local", vec![]);
        assert!(matches!(
            super::run(&c, &mut s, &p, &q),
            Ok(Outcome::Refresh)
        ));
    }

    #[test]
    fn a_prepared_update_names_its_markers_and_partition_key() {
        let (c, mut s, p) = (
            with_table(false),
            Session::default(),
            PreparedCache::default(),
        );
        let q = "UPDATE ks.cf USING TTL ? SET c = c + ? WHERE ck = ? AND pk = ?";
        let (_, body) = run(&c, &mut s, &p, Request::Prepare(q.into())).unwrap();
        let mut r = Reader::new(&body);
        assert_eq!(r.int(), Ok(4), "prepared");
        r.short_bytes().unwrap();
        assert_eq!((r.int(), r.int(), r.int()), (Ok(1), Ok(4), Ok(1)));
        assert_eq!(r.short(), Ok(3), "the partition key is the fourth marker");
        assert_eq!((r.string(), r.string()), (Ok("ks".into()), Ok("cf".into())));
        let names: Vec<String> = (0..4)
            .map(|_| {
                let name = r.string().unwrap();
                super::super::result::CqlType::read(&mut r).unwrap();
                name
            })
            .collect();
        assert_eq!(names, ["[ttl]", "c", "ck", "pk"]);
    }

    #[test]
    fn a_counter_batch_holds_counter_statements_only() {
        let (c, mut s, p) = (
            with_table(false),
            Session::default(),
            PreparedCache::default(),
        );
        let batch = |kind: &str| {
            query(
                &format!(
                    "BEGIN {kind} BATCH UPDATE ks.cf SET c = c + 1 WHERE pk = 1 AND ck = 'a'; \
                     UPDATE ks.cf SET c = c - 1 WHERE pk = 2 AND ck = 'b'; APPLY BATCH"
                ),
                vec![],
            )
        };
        let Ok(Outcome::Rows(work)) = super::run(&c, &mut s, &p, &batch("COUNTER")) else {
            panic!()
        };
        assert_eq!(work.parts.len(), 2);
        let e = super::run(&c, &mut s, &p, &batch("")).unwrap_err();
        assert_eq!(e.code(), 0x2200, "a logged batch of counters");
    }
}
