//! Running a connection's statements against what a node holds, without
//! I/O: the system tables (generated from the node's view of the cluster,
//! [`super::system`]), `USE`, and prepared statements by their id.
//!
//! A schema change is not run here: it is handed back
//! ([`Outcome::Schema`]) for the connection to agree on with the cluster
//! (`schema::apply` is its rule). Counter tables can be created, and read
//! in `system_schema`; statements on their rows come next (issue 40):
//! until then they answer that they are not served yet.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::ast::{Op, Select, Statement, TableName, Term};
use super::frame::Opcode;
use super::parse::parse;
use super::request::{Params, Request};
use super::response::{self, CqlError};
use super::result::{self, Column, CqlType, Metadata};
use super::select::evaluate;
use super::system::{self, Cluster, Table};

/// The keyspaces every node has.
const SYSTEM_KEYSPACES: [&str; 2] = ["system", "system_schema"];
/// Most statements a node keeps prepared; past it, the oldest half goes
/// (a driver prepares again on `Unprepared`).
const PREPARED_MAX: usize = 10_000;

/// A statement prepared on this node, by its id.
#[derive(Clone, Debug)]
struct Prepared {
    statement: Statement,
    markers: usize,
    /// The keyspace it was prepared under (`USE`), for unqualified tables.
    keyspace: Option<String>,
}

/// The statements prepared on this node, shared by its connections.
#[derive(Debug, Default)]
pub(crate) struct PreparedCache {
    by_id: Mutex<HashMap<Vec<u8>, (u64, Prepared)>>,
    next: Mutex<u64>,
}

/// A connection's own state.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// The keyspace of `USE`.
    pub(crate) keyspace: Option<String>,
}

/// The response to a statement: its opcode and body.
pub(crate) type Answer = (Opcode, Vec<u8>);

/// What a statement comes to.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Its answer.
    Answer(Answer),
    /// A schema change, to agree on; `keyspace` the session's.
    Schema {
        statement: Statement,
        keyspace: Option<String>,
    },
}

/// Runs a statement request (QUERY, PREPARE, EXECUTE, BATCH; the
/// connection answers REGISTER itself).
pub(crate) fn run(
    cluster: &Cluster,
    session: &mut Session,
    prepared: &PreparedCache,
    request: Request,
) -> Result<Outcome, CqlError> {
    match request {
        Request::Query(text, params) => {
            let (statement, markers) = parse(&text).map_err(|e| CqlError::Syntax(e.0))?;
            check_values(markers, &params)?;
            let keyspace = session.keyspace.clone();
            if super::schema::changes_schema(&statement) {
                return Ok(Outcome::Schema {
                    statement,
                    keyspace,
                });
            }
            execute(cluster, session, &statement, keyspace.as_deref(), &params).map(Outcome::Answer)
        }
        Request::Prepare(text) => prepare(cluster, session, prepared, &text).map(Outcome::Answer),
        Request::Execute(id, params) => {
            let p = prepared.get(&id).ok_or_else(|| CqlError::Unprepared {
                message: format!("Prepared query with ID {} not found", hex(&id)),
                id: id.clone(),
            })?;
            check_values(p.markers, &params)?;
            let keyspace = p.keyspace.as_deref();
            execute(cluster, session, &p.statement, keyspace, &params).map(Outcome::Answer)
        }
        Request::Batch { .. } => Err(CqlError::Invalid(
            "BATCH: no table of a batch's kind exists on this node yet".into(),
        )),
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
    statement: &Statement,
    keyspace: Option<&str>,
    params: &Params,
) -> Result<Answer, CqlError> {
    match statement {
        Statement::Use(ks) => {
            let user = cluster.catalog.iter().any(|k| k.name == *ks);
            if !SYSTEM_KEYSPACES.contains(&ks.as_str()) && !user {
                return Err(no_keyspace(ks));
            }
            session.keyspace = Some(ks.clone());
            Ok((Opcode::Result, response::set_keyspace(ks)))
        }
        Statement::Select(s) => {
            let table = system_table(cluster, &s.table, keyspace)?;
            let (meta, rows) = evaluate(&table, s, &params.values)?;
            let body = result::rows(&meta, &rows, None, params.skip_metadata);
            Ok((Opcode::Result, body))
        }
        Statement::Update(u) => Err(write_refused(cluster, &u.table, keyspace)),
        Statement::Delete(d) => Err(write_refused(cluster, &d.table, keyspace)),
        Statement::Truncate(t) => Err(write_refused(cluster, t, keyspace)),
        Statement::Batch(..) => Err(CqlError::Invalid(
            "BATCH: no table of a batch's kind exists on this node yet".into(),
        )),
        Statement::CreateKeyspace { .. }
        | Statement::CreateTable(_)
        | Statement::DropKeyspace { .. }
        | Statement::DropTable { .. } => Err(CqlError::Server(
            "a schema change reached the statement runner".into(),
        )),
    }
}

fn no_keyspace(ks: &str) -> CqlError {
    CqlError::Invalid(format!("Keyspace '{ks}' does not exist"))
}

/// The keyspace of `table`: its own, else the session's.
fn keyspace_of<'a>(table: &'a TableName, session: Option<&'a str>) -> Result<&'a str, CqlError> {
    table.keyspace.as_deref().or(session).ok_or_else(|| {
        CqlError::Invalid(
            "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename"
                .into(),
        )
    })
}

/// What a statement on a table's rows answers, until counter tables'
/// rows are served.
fn write_refused(cluster: &Cluster, table: &TableName, session: Option<&str>) -> CqlError {
    let ks = match keyspace_of(table, session) {
        Ok(ks) => ks,
        Err(e) => return e,
    };
    if SYSTEM_KEYSPACES.contains(&ks) {
        return CqlError::Unauthorized(format!("{ks} keyspace is not user-modifiable."));
    }
    let Some(keyspace) = cluster.catalog.iter().find(|k| k.name == ks) else {
        return no_keyspace(ks);
    };
    match keyspace.table(&table.name) {
        None => CqlError::Invalid(format!("unconfigured table {}", table.name)),
        Some(_) => CqlError::Invalid(format!(
            "the rows of counter table {ks}.{} are not served by this node yet",
            table.name
        )),
    }
}

/// The system table `name` names, generated now.
fn system_table(
    cluster: &Cluster,
    name: &TableName,
    session: Option<&str>,
) -> Result<Table, CqlError> {
    let ks = keyspace_of(name, session)?;
    let table = match (ks, name.name.as_str()) {
        ("system", "local") => Some(system::local(cluster)),
        ("system", "peers") => Some(system::peers(cluster)),
        ("system_schema", t) => system::schema_rows(cluster, t),
        (ks, _) if SYSTEM_KEYSPACES.contains(&ks) => None,
        (ks, _) if cluster.catalog.iter().any(|k| k.name == ks) => {
            return Err(write_refused(cluster, name, session));
        }
        (ks, _) => return Err(no_keyspace(ks)),
    };
    table.ok_or_else(|| CqlError::Invalid(format!("unconfigured table {}", name.name)))
}

fn prepare(
    cluster: &Cluster,
    session: &Session,
    cache: &PreparedCache,
    text: &str,
) -> Result<Answer, CqlError> {
    let (statement, markers) = parse(text).map_err(|e| CqlError::Syntax(e.0))?;
    let keyspace = session.keyspace.clone();
    let (bind, result) = match &statement {
        Statement::Select(s) => {
            let table = system_table(cluster, &s.table, keyspace.as_deref())?;
            (bind_meta(&table, s, markers)?, select_meta(&table, s)?)
        }
        Statement::Use(_) => (empty(), empty()),
        Statement::Update(u) => return Err(write_refused(cluster, &u.table, keyspace.as_deref())),
        Statement::Delete(d) => return Err(write_refused(cluster, &d.table, keyspace.as_deref())),
        _ => {
            return Err(CqlError::Invalid(
                "this statement cannot be prepared on this node yet".into(),
            ));
        }
    };
    let id = statement_id(text, keyspace.as_deref());
    cache.put(
        id.clone(),
        Prepared {
            statement,
            markers,
            keyspace,
        },
    );
    Ok((Opcode::Result, result::prepared(&id, &bind, &[], &result)))
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
        ..s.clone()
    };
    Ok(evaluate(table, &unfiltered, &[])?.0)
}

/// The bind markers of a SELECT, in order: each named as its column (or
/// `[limit]`), typed as it (a list of it for `IN ?`).
fn bind_meta(table: &Table, s: &Select, markers: usize) -> Result<Metadata, CqlError> {
    let mut columns: Vec<(usize, Column)> = Vec::new();
    for r in &s.relations {
        let Some(c) = table.meta.columns.iter().find(|c| c.name == r.column) else {
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
    if let Some(Term::Marker(i) | Term::Named(i, _)) = &s.limit {
        columns.push((
            *i,
            Column {
                name: "[limit]".into(),
                ty: CqlType::Int,
            },
        ));
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
        ..table.meta.clone()
    })
}

/// A prepared statement's id: a hash of its text and keyspace, the same on
/// every node (drivers prepare on all of them and execute anywhere).
fn statement_id(text: &str, keyspace: Option<&str>) -> Vec<u8> {
    let key = format!("{}\0{text}", keyspace.unwrap_or(""));
    system::hash_id(key.as_bytes(), 0x5eed).to_vec()
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

impl PreparedCache {
    fn get(&self, id: &[u8]) -> Option<Prepared> {
        self.by_id.lock().get(id).map(|(_, p)| p.clone())
    }

    fn put(&self, id: Vec<u8>, p: Prepared) {
        let mut next = self.next.lock();
        *next += 1;
        let mut by_id = self.by_id.lock();
        if by_id.len() >= PREPARED_MAX {
            let mut ages: Vec<u64> = by_id.values().map(|(age, _)| *age).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            by_id.retain(|_, (age, _)| *age > cut);
        }
        by_id.insert(id, (*next, p));
    }
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
        }
    }

    /// `run`'s answer, for statements that are not schema changes.
    fn run(
        c: &Cluster,
        s: &mut Session,
        p: &PreparedCache,
        r: Request,
    ) -> Result<Answer, CqlError> {
        match super::run(c, s, p, r)? {
            Outcome::Answer(a) => Ok(a),
            Outcome::Schema { statement, .. } => panic!("a schema change: {statement:?}"),
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

    #[test]
    fn the_cache_keeps_the_newest_past_its_size() {
        let p = PreparedCache::default();
        let statement = parse("USE system").unwrap().0;
        for i in 0..PREPARED_MAX + 1 {
            let prepared = Prepared {
                statement: statement.clone(),
                markers: 0,
                keyspace: None,
            };
            p.put(i.to_be_bytes().to_vec(), prepared);
        }
        assert!(p.by_id.lock().len() <= PREPARED_MAX);
        assert!(
            p.get(&PREPARED_MAX.to_be_bytes()).is_some(),
            "the newest stays"
        );
        assert!(p.get(&0usize.to_be_bytes()).is_none(), "the oldest went");
    }
}
