//! A counter table's row by name, for Tally's other front doors: RESP's
//! `HGETALL` (and `HKEYS`, `HVALS`, `HLEN`, `HGET`, `HMGET`, `HEXISTS`)
//! and the native protocol's `GetRow` (`tally row --table`) read the very
//! cells CQL writes.
//!
//! ```text
//! name  := 0xFF "cql:" keyspace "." table ":" key       "\xffcql:ks.cf:0"
//! key   := literal ("," literal)*     the partition key's values, in order
//! field := [literal ("," literal)* ":"] counter           "'alice',5:hits"
//!          the row's clustering values (none without them), the counter
//! ```
//!
//! Names and literals are written as CQL writes them (`'text'`, `0x0a`, a
//! uuid, `true`, `'2026-11-30'`, `"Quoted"`), and a row's fields are
//! printed so. A name begins with 0xFF, which no client key may, so it
//! names nothing else. These rows are read here and written through CQL.

use tally_engine::now_ms;
use tally_net::Consistency;
use tally_net::wire::{ErrorKind, WireError, WireKey};

use super::ast::Literal;
use super::cells;
use super::lex::{Token, lex};
use super::result::CqlType;
use super::schema::{Kind, TableDef};
use super::select::{encode, literals};
use crate::base::convert::live_value;
use crate::node::Node;

/// What every row's name begins with.
pub(crate) const PREFIX: &[u8] = b"\xffcql:";

/// How a name is written, for errors.
const NAME_FORM: &str = "a CQL row is named 0xFF \"cql:keyspace.table:key\", the key its \
                         partition key's values as CQL writes them (\"\\xffcql:ks.cf:0\")";

/// Whether `key` names a CQL row.
pub(crate) fn is_name(key: &[u8]) -> bool {
    key.starts_with(PREFIX)
}

/// A row's name as written, not yet checked against the schema.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Name {
    pub(crate) keyspace: String,
    pub(crate) table: String,
    pub(crate) key: Vec<Literal>,
}

/// A named row of a table that exists: its table and stored partition.
#[derive(Clone, Debug)]
pub(crate) struct Named {
    pub(crate) table: TableDef,
    pub(crate) partition: Vec<u8>,
}

/// The name `key` spells, or why it spells none.
pub(crate) fn parse_name(key: &[u8]) -> Result<Name, String> {
    let text = key
        .strip_prefix(PREFIX)
        .and_then(|t| std::str::from_utf8(t).ok())
        .ok_or(NAME_FORM)?;
    let tokens = lex(text).map_err(|e| format!("{}: {NAME_FORM}", e.0))?;
    match tokens.as_slice() {
        [ks, Token::Symbol("."), table, Token::Symbol(":"), key @ ..] => Ok(Name {
            keyspace: identifier(ks).ok_or(NAME_FORM)?,
            table: identifier(table).ok_or(NAME_FORM)?,
            key: literal_list(key).ok_or(NAME_FORM)?,
        }),
        _ => Err(NAME_FORM.into()),
    }
}

/// The stored partition of `key` (the partition key's values) in `table`.
pub(crate) fn partition(table: &TableDef, key: &[Literal]) -> Result<Vec<u8>, String> {
    let columns: Vec<_> = of_kind(table, Kind::PartitionKey).collect();
    if columns.len() != key.len() {
        let names: Vec<&str> = columns.iter().map(|c| c.0).collect();
        return Err(format!(
            "{}'s partition key is {} value(s): {}",
            table.name,
            columns.len(),
            names.join(", ")
        ));
    }
    let mut values = Vec::with_capacity(key.len());
    for ((name, ty), lit) in columns.into_iter().zip(key) {
        match encode(lit, ty).map_err(|e| e.message().to_string())? {
            Some(v) => values.push(v),
            None => return Err(format!("Invalid null value for partition key part {name}")),
        }
    }
    cells::partition(table, &values).map_err(|e| e.message().to_string())
}

/// How field `column` (a stored column of `table`) is printed; `None` if
/// it is not one of the table's.
pub(crate) fn field(table: &TableDef, column: &[u8]) -> Option<Vec<u8>> {
    let types: Vec<&CqlType> = of_kind(table, Kind::Clustering).map(|c| c.1).collect();
    let (values, name) = cells::Layout::of(table).split(column)?;
    let mut out = values
        .iter()
        .zip(types)
        .map(|(v, ty)| literal_text(ty, v))
        .collect::<Option<Vec<_>>>()?
        .join(",");
    if !out.is_empty() {
        out.push(':');
    }
    out.push_str(&identifier_text(name));
    Some(out.into_bytes())
}

/// The stored column a printed `field` of `table` names.
pub(crate) fn column(table: &TableDef, field: &[u8]) -> Result<Vec<u8>, String> {
    let form = || {
        format!(
            "a field of {} is its clustering values, ':', then a counter (\"'alice',5:hits\"), \
             or the counter alone without clustering columns",
            table.name
        )
    };
    let text = std::str::from_utf8(field).map_err(|_| form())?;
    let tokens = lex(text).map_err(|e| format!("{}: {}", e.0, form()))?;
    let (values, counter) = match tokens.as_slice() {
        [counter] => (&[][..], counter),
        [values @ .., Token::Symbol(":"), counter] => (values, counter),
        _ => return Err(form()),
    };
    let counter = identifier(counter).ok_or_else(form)?;
    let literals = match values {
        [] => Vec::new(),
        values => literal_list(values).ok_or_else(form)?,
    };
    let types: Vec<&CqlType> = of_kind(table, Kind::Clustering).map(|c| c.1).collect();
    if literals.len() != types.len() {
        return Err(form());
    }
    let mut clustering = Vec::with_capacity(types.len());
    for (lit, ty) in literals.iter().zip(types) {
        let v = encode(lit, ty).map_err(|e| e.message().to_string())?;
        clustering.push(v.ok_or_else(form)?);
    }
    cells::Layout::of(table)
        .column(&clustering, &counter)
        .map_err(|e| e.message().to_string())
}

/// The named row's table and partition, from the cluster's schema as it
/// is now.
pub(crate) async fn resolve(node: &Node, key: &[u8]) -> Result<Named, WireError> {
    let invalid = |m: String| WireError::not_applied(ErrorKind::Invalid, m);
    let name = parse_name(key).map_err(invalid)?;
    let catalog = super::shared::read_catalog(node).await?;
    let table = catalog
        .iter()
        .find(|ks| ks.name == name.keyspace)
        .and_then(|ks| ks.table(&name.table))
        .ok_or_else(|| invalid(format!("no table {}.{}", name.keyspace, name.table)))?;
    if !table.is_counter() {
        return Err(invalid(format!(
            "{}.{} is a regular table: read its rows through CQL (a name reads a counter \
             table's)",
            name.keyspace, name.table
        )));
    }
    let partition = partition(table, &name.key).map_err(invalid)?;
    Ok(Named {
        table: table.clone(),
        partition,
    })
}

/// The live counters of the row `key` names at `cl`, each by its field.
pub(crate) async fn row(
    node: &Node,
    cl: Consistency,
    key: &[u8],
) -> Result<Vec<(Vec<u8>, i64)>, WireError> {
    let named = resolve(node, key).await?;
    let cells = node.get_row(&named.partition, cl).await?;
    Ok(cells
        .into_iter()
        .filter_map(|(c, v)| Some((field(&named.table, &c)?, v)))
        .collect())
}

/// The live value of `fields` of the row `key` names, at `cl`.
pub(crate) async fn values(
    node: &Node,
    cl: Consistency,
    key: &[u8],
    fields: &[Vec<u8>],
) -> Result<Vec<Option<i64>>, WireError> {
    let named = resolve(node, key).await?;
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let column =
            column(&named.table, f).map_err(|m| WireError::not_applied(ErrorKind::Invalid, m))?;
        let cell = node
            .get_cell(&WireKey::new(&named.partition, &column), cl)
            .await?;
        out.push(live_value(&cell, now_ms())?);
    }
    Ok(out)
}

/// `table`'s columns of `kind`, by name and type, in key order.
fn of_kind(table: &TableDef, kind: Kind) -> impl Iterator<Item = (&str, &CqlType)> {
    table
        .columns
        .iter()
        .filter(move |c| c.kind == kind)
        .map(|c| (c.name.as_str(), &c.ty))
}

/// A keyspace's, table's or counter's name, as CQL reads it.
fn identifier(t: &Token) -> Option<String> {
    match t {
        Token::Word(w) | Token::Quoted(w) => Some(w.clone()),
        _ => None,
    }
}

/// `name` as CQL writes it: quoted unless it reads back the same unquoted.
fn identifier_text(name: &str) -> String {
    let mut chars = name.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match plain {
        true => name.to_string(),
        false => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

/// Literals separated by commas (at least one).
fn literal_list(tokens: &[Token]) -> Option<Vec<Literal>> {
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match (i % 2, t) {
            (1, Token::Symbol(",")) => {}
            (0, t) => out.push(literal(t)?),
            _ => return None,
        }
    }
    (!out.is_empty() && tokens.len() % 2 == 1).then_some(out)
}

fn literal(t: &Token) -> Option<Literal> {
    Some(match t {
        Token::Str(s) => Literal::Str(s.clone()),
        Token::Int(i) => Literal::Int(*i),
        Token::Float(x) => Literal::Float(*x),
        Token::Uuid(u) => Literal::Uuid(*u),
        Token::Blob(b) => Literal::Blob(b.clone()),
        Token::Word(w) if w == "true" || w == "false" => Literal::Bool(w == "true"),
        _ => return None,
    })
}

/// A key column's value of `ty` as a CQL literal; `None` for a value no
/// key of `ty` holds.
fn literal_text(ty: &CqlType, v: &[u8]) -> Option<String> {
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
    Some(match ty {
        CqlType::Varchar | CqlType::Ascii => quoted(std::str::from_utf8(v).ok()?),
        CqlType::Bigint | CqlType::Counter => i64::from_be_bytes(v.try_into().ok()?).to_string(),
        CqlType::Int => i32::from_be_bytes(v.try_into().ok()?).to_string(),
        CqlType::Smallint => i16::from_be_bytes(v.try_into().ok()?).to_string(),
        CqlType::Tinyint => i8::from_be_bytes(v.try_into().ok()?).to_string(),
        CqlType::Timestamp => quoted(&literals::timestamp_text(i64::from_be_bytes(
            v.try_into().ok()?,
        ))),
        CqlType::Date => quoted(&literals::date_text(u32::from_be_bytes(v.try_into().ok()?))),
        CqlType::Double => {
            let x = f64::from_be_bytes(v.try_into().ok()?);
            x.is_finite().then(|| format!("{x:?}"))?
        }
        CqlType::Float => {
            let x = f32::from_be_bytes(v.try_into().ok()?);
            x.is_finite().then(|| format!("{x:?}"))?
        }
        CqlType::Varint => literals::varint_text(v)?,
        CqlType::Time => quoted(&literals::time_text(i64::from_be_bytes(v.try_into().ok()?))),
        CqlType::Boolean => (v.first()? != &0).to_string(),
        CqlType::Uuid | CqlType::Timeuuid => uuid_text(v.try_into().ok()?),
        CqlType::Blob => format!("0x{}", hex(v)),
        CqlType::Inet => quoted(&match v.len() {
            4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(v).ok()?).to_string(),
            16 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?).to_string(),
            _ => return None,
        }),
        CqlType::List(_) | CqlType::Map(..) | CqlType::Set(_) => return None,
    })
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// `8-4-4-4-12` hex.
fn uuid_text(u: [u8; 16]) -> String {
    let h = hex(&u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests;
