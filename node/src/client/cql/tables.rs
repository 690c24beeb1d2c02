//! The tables a statement names: the system ones, generated from the
//! node's view of the cluster, and the counter tables of the catalog.

use super::ast::TableName;
use super::response::CqlError;
use super::schema::TableDef;
use super::system::{self, Cluster, Table};

/// The keyspaces every node has.
pub(crate) const SYSTEM_KEYSPACES: [&str; 2] = ["system", "system_schema"];

/// The counter table `name` names (its keyspace's name and its
/// definition), if the catalog has it.
pub(crate) fn user_table(
    cluster: &Cluster,
    name: &TableName,
    session: Option<&str>,
) -> Result<Option<(String, TableDef)>, CqlError> {
    let ks = keyspace_of(name, session)?;
    Ok(cluster
        .catalog
        .iter()
        .find(|k| k.name == ks)
        .and_then(|k| k.table(&name.name))
        .map(|t| (ks.to_string(), t.clone())))
}

pub(crate) fn no_keyspace(ks: &str) -> CqlError {
    CqlError::Invalid(format!("Keyspace '{ks}' does not exist"))
}

/// The keyspace of `table`: its own, else the session's.
pub(crate) fn keyspace_of<'a>(
    table: &'a TableName,
    session: Option<&'a str>,
) -> Result<&'a str, CqlError> {
    table.keyspace.as_deref().or(session).ok_or_else(|| {
        CqlError::Invalid(
            "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename"
                .into(),
        )
    })
}

/// What a statement on rows of a table the catalog lacks answers.
pub(crate) fn write_refused(
    cluster: &Cluster,
    table: &TableName,
    session: Option<&str>,
) -> CqlError {
    let ks = match keyspace_of(table, session) {
        Ok(ks) => ks,
        Err(e) => return e,
    };
    if SYSTEM_KEYSPACES.contains(&ks) {
        return CqlError::Unauthorized(format!("{ks} keyspace is not user-modifiable."));
    }
    if !cluster.catalog.iter().any(|k| k.name == ks) {
        return no_keyspace(ks);
    }
    CqlError::Invalid(format!("unconfigured table {}", table.name))
}

/// The system table `name` names, generated now.
pub(crate) fn system_table(
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
        _ => return Err(write_refused(cluster, name, session)),
    };
    table.ok_or_else(|| CqlError::Invalid(format!("unconfigured table {}", name.name)))
}
