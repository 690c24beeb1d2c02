//! The system tables drivers read to learn the cluster: `system.local`,
//! `system.peers` and the nine `system_schema` tables, generated from what
//! a node knows (its ring, its peers, the schema), as rows of cells.
//!
//! Each node is a host to drivers: its CQL address (each node its own
//! IP, port 9042, as Cassandra's nodes are: `system.peers` has no port
//! column in 3.0, so a local cluster uses 127.0.0.1, .2, .3 as ccm does),
//! a `host_id` UUID made from its node id, data center `datacenter1` and
//! rack `rack1`, and its ring tokens as `set<text>`, with the partitioner
//! drivers route by: Tally's ring is Cassandra's Murmur3 ring, so
//! token-aware drivers send each statement to a replica of its partition.
//! `release_version` 3.0.8 keeps drivers on `system_schema` and off the
//! virtual tables (`research/cql-drivers.md` §0).

use std::net::IpAddr;

use super::response::{CQL_VERSION, RELEASE_VERSION};
use super::result::{Cell, Column, CqlType, Metadata, cell};
use super::schema::{DATA_CENTER, Keyspace, Kind};

/// The partitioner drivers build their token map with.
pub(crate) const PARTITIONER: &str = "org.apache.cassandra.dht.Murmur3Partitioner";
/// The one rack.
pub(crate) const RACK: &str = "rack1";

/// A node as drivers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Host {
    pub(crate) host_id: [u8; 16],
    /// Its CQL listener's address.
    pub(crate) address: IpAddr,
    /// Its ring tokens.
    pub(crate) tokens: Vec<i64>,
}

/// What the system tables are made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cluster {
    pub(crate) name: String,
    /// The node answering.
    pub(crate) local: Host,
    /// The other members.
    pub(crate) peers: Vec<Host>,
    /// The schema's version, the same on every node that holds it.
    pub(crate) schema_version: [u8; 16],
    /// The keyspaces of the schema (the system ones are not among them).
    pub(crate) catalog: Vec<Keyspace>,
    /// The cluster's replication factor, every keyspace's.
    pub(crate) replication_factor: usize,
    /// The catalog was read from the cluster for this request (else it
    /// is the node's copy of a moment ago).
    pub(crate) fresh: bool,
}

/// The version of `catalog`: a hash of its keyspaces, in name order, so
/// every node holding the same catalog reports the same version.
pub(crate) fn schema_version(catalog: &[Keyspace]) -> [u8; 16] {
    let mut sorted: Vec<&Keyspace> = catalog.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut bytes = b"tally-schema".to_vec();
    for ks in sorted {
        bytes.extend_from_slice(ks.name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&ks.encode());
    }
    let mut id = hash_id(&bytes, 0x5c4e);
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

/// A table's columns and rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    pub(crate) meta: Metadata,
    pub(crate) rows: Vec<Vec<Cell>>,
}

impl Table {
    fn new(keyspace: &str, table: &str, columns: &[(&str, CqlType)]) -> Table {
        Table {
            meta: Metadata {
                keyspace: keyspace.into(),
                table: table.into(),
                columns: columns
                    .iter()
                    .map(|(name, ty)| Column {
                        name: (*name).into(),
                        ty: ty.clone(),
                    })
                    .collect(),
            },
            rows: Vec::new(),
        }
    }

    /// The cell of column `name` in `row`, if the table has the column.
    #[cfg(test)]
    pub(crate) fn cell<'a>(&self, row: &'a [Cell], name: &str) -> Option<&'a Cell> {
        let i = self.meta.columns.iter().position(|c| c.name == name)?;
        row.get(i)
    }
}

/// A host id made of a node id: the same on every node, and a UUID of
/// version 4's form (drivers only compare them).
pub(crate) fn host_id(node_id: &str) -> [u8; 16] {
    let mut id = hash_id(node_id.as_bytes(), 0x7a11);
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

/// 16 bytes of Cassandra's Murmur3 (x64, 128 bits) of `bytes`: the same on
/// every node (host ids, schema versions, prepared statements' ids).
pub(crate) fn hash_id(bytes: &[u8], seed: u64) -> [u8; 16] {
    let (h1, h2) = tally_net::ring::murmur3_x64_128_cassandra(bytes, seed);
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&h1.to_be_bytes());
    id[8..].copy_from_slice(&h2.to_be_bytes());
    id
}

fn tokens(host: &Host) -> Cell {
    let texts: Vec<String> = host.tokens.iter().map(i64::to_string).collect();
    cell::texts(&texts.iter().map(String::as_str).collect::<Vec<_>>())
}

fn set_of_text() -> CqlType {
    CqlType::Set(Box::new(CqlType::Varchar))
}

/// `system.local`: one row, `key` 'local'.
pub(crate) fn local(c: &Cluster) -> Table {
    use CqlType::*;
    let mut t = Table::new(
        "system",
        "local",
        &[
            ("key", Varchar),
            ("bootstrapped", Varchar),
            ("broadcast_address", Inet),
            ("cluster_name", Varchar),
            ("cql_version", Varchar),
            ("data_center", Varchar),
            ("host_id", Uuid),
            ("listen_address", Inet),
            ("native_protocol_version", Varchar),
            ("partitioner", Varchar),
            ("rack", Varchar),
            ("release_version", Varchar),
            ("rpc_address", Inet),
            ("schema_version", Uuid),
            ("tokens", set_of_text()),
        ],
    );
    let address = cell::inet(c.local.address);
    t.rows.push(vec![
        cell::text("local"),
        cell::text("COMPLETED"),
        address.clone(),
        cell::text(&c.name),
        cell::text(CQL_VERSION),
        cell::text(DATA_CENTER),
        cell::uuid(c.local.host_id),
        address.clone(),
        cell::text("4"),
        cell::text(PARTITIONER),
        cell::text(RACK),
        cell::text(RELEASE_VERSION),
        address,
        cell::uuid(c.schema_version),
        tokens(&c.local),
    ]);
    t
}

/// `system.peers`: a row per other member.
pub(crate) fn peers(c: &Cluster) -> Table {
    use CqlType::*;
    let mut t = Table::new(
        "system",
        "peers",
        &[
            ("peer", Inet),
            ("data_center", Varchar),
            ("host_id", Uuid),
            ("preferred_ip", Inet),
            ("rack", Varchar),
            ("release_version", Varchar),
            ("rpc_address", Inet),
            ("schema_version", Uuid),
            ("tokens", set_of_text()),
        ],
    );
    for p in &c.peers {
        let address = cell::inet(p.address);
        t.rows.push(vec![
            address.clone(),
            cell::text(DATA_CENTER),
            cell::uuid(p.host_id),
            address.clone(),
            cell::text(RACK),
            cell::text(RELEASE_VERSION),
            address,
            cell::uuid(c.schema_version),
            tokens(p),
        ]);
    }
    t
}

/// The `system_schema` tables' columns, as Cassandra 3.0 has them (the
/// ones drivers read; `research/cql-drivers.md` §1.2).
pub(crate) fn schema_table(name: &str) -> Option<Table> {
    use CqlType::*;
    let text = || Varchar;
    let texts = || List(Box::new(Varchar));
    let text_map = || Map(Box::new(Varchar), Box::new(Varchar));
    let columns: Vec<(&str, CqlType)> = match name {
        "keyspaces" => vec![
            ("keyspace_name", text()),
            ("durable_writes", Boolean),
            ("replication", text_map()),
        ],
        "tables" => vec![
            ("keyspace_name", text()),
            ("table_name", text()),
            ("comment", text()),
            ("default_time_to_live", Int),
            ("flags", Set(Box::new(Varchar))),
            ("gc_grace_seconds", Int),
            ("id", Uuid),
        ],
        "columns" => vec![
            ("keyspace_name", text()),
            ("table_name", text()),
            ("column_name", text()),
            ("clustering_order", text()),
            ("column_name_bytes", Blob),
            ("kind", text()),
            ("position", Int),
            ("type", text()),
        ],
        "types" => vec![
            ("keyspace_name", text()),
            ("type_name", text()),
            ("field_names", texts()),
            ("field_types", texts()),
        ],
        "functions" => vec![
            ("keyspace_name", text()),
            ("function_name", text()),
            ("argument_types", texts()),
            ("argument_names", texts()),
            ("body", text()),
            ("called_on_null_input", Boolean),
            ("language", text()),
            ("return_type", text()),
        ],
        "aggregates" => vec![
            ("keyspace_name", text()),
            ("aggregate_name", text()),
            ("argument_types", texts()),
            ("final_func", text()),
            ("initcond", text()),
            ("return_type", text()),
            ("state_func", text()),
            ("state_type", text()),
        ],
        "triggers" => vec![
            ("keyspace_name", text()),
            ("table_name", text()),
            ("trigger_name", text()),
            ("options", text_map()),
        ],
        "indexes" => vec![
            ("keyspace_name", text()),
            ("table_name", text()),
            ("index_name", text()),
            ("kind", text()),
            ("options", text_map()),
        ],
        "views" => vec![
            ("keyspace_name", text()),
            ("view_name", text()),
            ("base_table_id", Uuid),
            ("base_table_name", text()),
            ("include_all_columns", Boolean),
            ("where_clause", text()),
        ],
        _ => return None,
    };
    Some(Table::new("system_schema", name, &columns))
}

/// The keyspaces Tally always has: its own system ones, held by each node.
pub(crate) fn system_keyspaces(t: &mut Table) {
    for ks in ["system", "system_schema"] {
        t.rows.push(vec![
            cell::text(ks),
            cell::boolean(true),
            cell::text_map(&[("class", "org.apache.cassandra.locator.LocalStrategy")]),
        ]);
    }
}

/// The `system_schema` table `name`, with the system keyspaces and the
/// catalog's rows in it.
pub(crate) fn schema_rows(c: &Cluster, name: &str) -> Option<Table> {
    let mut t = schema_table(name)?;
    let rf = c.replication_factor.to_string();
    match name {
        "keyspaces" => {
            system_keyspaces(&mut t);
            for ks in &c.catalog {
                t.rows.push(vec![
                    cell::text(&ks.name),
                    cell::boolean(ks.durable_writes),
                    cell::text_map(&[
                        ("class", "org.apache.cassandra.locator.SimpleStrategy"),
                        ("replication_factor", &rf),
                    ]),
                ]);
            }
        }
        "tables" => table_rows(c, &mut t),
        "columns" => column_rows(c, &mut t),
        _ => {}
    }
    Some(t)
}

/// `system_schema.tables`: a row per table.
fn table_rows(c: &Cluster, t: &mut Table) {
    for ks in &c.catalog {
        for table in &ks.tables {
            t.rows.push(vec![
                cell::text(&ks.name),
                cell::text(&table.name),
                cell::text(&table.comment),
                cell::int(table.default_ttl_s),
                match table.is_counter() {
                    true => cell::texts(&["compound", "counter"]),
                    false => cell::texts(&["compound"]),
                },
                cell::int(table.gc_grace_s),
                cell::uuid(table.id),
            ]);
        }
    }
}

/// `system_schema.columns`: a row per column of each table.
fn column_rows(c: &Cluster, t: &mut Table) {
    for ks in &c.catalog {
        for table in &ks.tables {
            let (mut pk, mut ck) = (0, 0);
            for col in &table.columns {
                let (kind, position, order) = match col.kind {
                    Kind::PartitionKey => ("partition_key", post_inc(&mut pk), "none"),
                    Kind::Clustering if col.descending => ("clustering", post_inc(&mut ck), "desc"),
                    Kind::Clustering => ("clustering", post_inc(&mut ck), "asc"),
                    Kind::Regular => ("regular", -1, "none"),
                    Kind::Static => ("static", -1, "none"),
                };
                t.rows.push(vec![
                    cell::text(&ks.name),
                    cell::text(&table.name),
                    cell::text(&col.name),
                    cell::text(order),
                    Some(col.name.as_bytes().to_vec()),
                    cell::text(kind),
                    cell::int(position),
                    cell::text(&col.ty.name()),
                ]);
            }
        }
    }
}

fn post_inc(n: &mut i32) -> i32 {
    *n += 1;
    *n - 1
}

#[cfg(test)]
mod tests {
    use super::super::body::Reader;
    use super::*;

    fn cluster() -> Cluster {
        let host = |id: &str, ip: [u8; 4], tokens: Vec<i64>| Host {
            host_id: host_id(id),
            address: IpAddr::from(ip),
            tokens,
        };
        Cluster {
            name: "tally".into(),
            local: host("n1", [127, 0, 0, 1], vec![-9, 7]),
            peers: vec![
                host("n2", [127, 0, 0, 2], vec![3]),
                host("n3", [127, 0, 0, 3], vec![5]),
            ],
            schema_version: [1; 16],
            catalog: Vec::new(),
            replication_factor: 3,
            fresh: true,
        }
    }

    #[test]
    fn local_has_one_row_with_what_drivers_require() {
        let c = cluster();
        let t = local(&c);
        assert_eq!(t.rows.len(), 1);
        let row = &t.rows[0];
        for (column, want) in [
            ("key", cell::text("local")),
            ("cluster_name", cell::text("tally")),
            ("partitioner", cell::text(PARTITIONER)),
            ("release_version", cell::text("3.0.8")),
            ("rpc_address", Some(vec![127, 0, 0, 1])),
        ] {
            assert_eq!(t.cell(row, column), Some(&want), "{column}");
        }
        let tokens = t.cell(row, "tokens").unwrap().clone().unwrap();
        let mut r = Reader::new(&tokens);
        assert_eq!(r.int(), Ok(2));
        assert_eq!(r.bytes(), Ok(Some(b"-9".to_vec())));
        assert_eq!(r.bytes(), Ok(Some(b"7".to_vec())));
    }

    #[test]
    fn every_peer_has_the_columns_without_which_drivers_skip_it() {
        let c = cluster();
        let t = peers(&c);
        assert_eq!(t.rows.len(), 2);
        for row in &t.rows {
            for column in ["rpc_address", "host_id", "data_center", "rack", "tokens"] {
                assert!(t.cell(row, column).is_some_and(Option::is_some), "{column}");
            }
        }
        assert_eq!(t.cell(&t.rows[1], "peer"), Some(&Some(vec![127, 0, 0, 3])));
    }

    #[test]
    fn the_catalog_shows_in_system_schema_and_moves_the_version() {
        use super::super::parse::parse;
        use super::super::schema::{Change, apply};
        let mut c = cluster();
        let before = schema_version(&c.catalog);
        for q in [
            "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}",
            "CREATE TABLE ks.t (a int, b text, n counter, PRIMARY KEY (a, b)) WITH CLUSTERING ORDER BY (b DESC)",
        ] {
            let (statement, _) = parse(q).unwrap();
            let Ok(Change::Put(ks, _)) = apply(&statement, &c.catalog, None, 3, [9; 16].into())
            else {
                panic!("{q}")
            };
            c.catalog.retain(|k| k.name != ks.name);
            c.catalog.push(ks);
        }
        assert_ne!(schema_version(&c.catalog), before);
        assert_eq!(
            schema_version(&c.catalog),
            schema_version(&c.catalog.clone())
        );
        let keyspaces = schema_rows(&c, "keyspaces").unwrap();
        assert_eq!(keyspaces.rows.len(), 3);
        let rf = keyspaces
            .cell(&keyspaces.rows[2], "replication")
            .unwrap()
            .clone()
            .unwrap();
        assert!(
            rf.windows(b"SimpleStrategy".len())
                .any(|w| w == b"SimpleStrategy")
        );
        let columns = schema_rows(&c, "columns").unwrap();
        let described: Vec<(String, String, i32)> = columns
            .rows
            .iter()
            .map(|r| {
                let text = |name| {
                    String::from_utf8(columns.cell(r, name).unwrap().clone().unwrap()).unwrap()
                };
                let position = columns.cell(r, "position").unwrap().clone().unwrap();
                (
                    text("kind"),
                    text("clustering_order"),
                    i32::from_be_bytes(position.try_into().unwrap()),
                )
            })
            .collect();
        let want = [
            ("partition_key", "none", 0),
            ("clustering", "desc", 0),
            ("regular", "none", -1),
        ];
        let want: Vec<(String, String, i32)> = want
            .iter()
            .map(|(k, o, p)| (k.to_string(), o.to_string(), *p))
            .collect();
        assert_eq!(described, want);
        let tables = schema_rows(&c, "tables").unwrap();
        assert_eq!(
            tables.cell(&tables.rows[0], "flags"),
            Some(&cell::texts(&["compound", "counter"]))
        );
    }

    #[test]
    fn host_ids_are_stable_distinct_uuids() {
        let (a, b) = (host_id("n1"), host_id("n2"));
        assert_ne!(a, b);
        assert_eq!(a, host_id("n1"));
        assert_eq!(a[6] >> 4, 4, "version 4");
        assert_eq!(a[8] >> 6, 0b10, "RFC 4122 variant");
    }

    #[test]
    fn all_nine_schema_tables_exist_and_no_other() {
        for name in [
            "keyspaces",
            "tables",
            "columns",
            "types",
            "functions",
            "aggregates",
            "triggers",
            "indexes",
            "views",
        ] {
            let t = schema_table(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(t.meta.keyspace, "system_schema");
            assert_eq!(t.meta.columns[0].name, "keyspace_name");
        }
        assert!(schema_table("peers_v2").is_none());
        let columns = schema_table("columns").unwrap();
        assert!(
            columns
                .meta
                .columns
                .iter()
                .any(|c| c.name == "clustering_order")
        );
        let mut keyspaces = schema_table("keyspaces").unwrap();
        system_keyspaces(&mut keyspaces);
        assert_eq!(keyspaces.rows.len(), 2);
    }
}
