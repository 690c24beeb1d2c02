//! The events a driver registers for (`REGISTER`), worked out without
//! I/O by comparing two views of the cluster: a node that became a member
//! or stopped being one (`TOPOLOGY_CHANGE`), one that went down or came
//! back (`STATUS_CHANGE`), a keyspace or table created, changed or
//! dropped (`SCHEMA_CHANGE`). A node's watcher (`shared::watch`) takes a
//! view every moment and sends each connection that registered the
//! events between it and the last; they go out on stream -1.

use std::net::SocketAddr;

use super::body::{put_int, put_string};
use super::frame::{self, Opcode};
use super::result::SchemaChange;
use super::schema::Keyspace;

/// The stream events go out on.
const EVENT_STREAM: i16 = -1;

/// What the watcher sees of the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Seen {
    /// Each member's CQL address, and whether this node sees it up.
    pub(crate) members: Vec<(SocketAddr, bool)>,
    /// The schema.
    pub(crate) catalog: Vec<Keyspace>,
}

/// One event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Topology(&'static str, SocketAddr),
    Status(&'static str, SocketAddr),
    Schema(SchemaChange),
}

impl Event {
    /// The event type a driver registers for.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Event::Topology(..) => "TOPOLOGY_CHANGE",
            Event::Status(..) => "STATUS_CHANGE",
            Event::Schema(_) => "SCHEMA_CHANGE",
        }
    }

    /// The event as an EVENT frame.
    pub(crate) fn frame(&self) -> Vec<u8> {
        let mut body = Vec::new();
        put_string(&mut body, self.kind());
        match self {
            Event::Topology(change, addr) | Event::Status(change, addr) => {
                put_string(&mut body, change);
                put_inet(&mut body, *addr);
            }
            Event::Schema(change) => change.put(&mut body),
        }
        frame::response(EVENT_STREAM, Opcode::Event, 0, &body)
    }
}

/// An `[inet]`: the address's length and bytes, then the port.
fn put_inet(out: &mut Vec<u8>, addr: SocketAddr) {
    match addr.ip() {
        std::net::IpAddr::V4(v4) => {
            out.push(4);
            out.extend_from_slice(&v4.octets());
        }
        std::net::IpAddr::V6(v6) => {
            out.push(16);
            out.extend_from_slice(&v6.octets());
        }
    }
    put_int(out, i32::from(addr.port()));
}

/// The events from `before` to `after`.
pub(crate) fn between(before: &Seen, after: &Seen) -> Vec<Event> {
    let mut events = Vec::new();
    let was = |a: &SocketAddr| {
        before
            .members
            .iter()
            .find(|(m, _)| m == a)
            .map(|(_, up)| *up)
    };
    for (addr, up) in &after.members {
        match was(addr) {
            None => events.push(Event::Topology("NEW_NODE", *addr)),
            Some(was_up) if was_up != *up => {
                events.push(Event::Status(if *up { "UP" } else { "DOWN" }, *addr));
            }
            Some(_) => {}
        }
    }
    for (addr, _) in &before.members {
        if !after.members.iter().any(|(m, _)| m == addr) {
            events.push(Event::Topology("REMOVED_NODE", *addr));
        }
    }
    events.extend(
        schema(&before.catalog, &after.catalog)
            .into_iter()
            .map(Event::Schema),
    );
    events
}

/// The schema changes from `before` to `after`: keyspaces, then tables.
fn schema(before: &[Keyspace], after: &[Keyspace]) -> Vec<SchemaChange> {
    let change = |change, keyspace: &str, table: Option<&str>| SchemaChange {
        change,
        keyspace: keyspace.into(),
        table: table.map(str::to_string),
    };
    let mut out = Vec::new();
    for ks in after {
        let Some(old) = before.iter().find(|k| k.name == ks.name) else {
            out.push(change("CREATED", &ks.name, None));
            out.extend(
                ks.tables
                    .iter()
                    .map(|t| change("CREATED", &ks.name, Some(&t.name))),
            );
            continue;
        };
        if old.durable_writes != ks.durable_writes {
            out.push(change("UPDATED", &ks.name, None));
        }
        for t in &ks.tables {
            match old.table(&t.name) {
                None => out.push(change("CREATED", &ks.name, Some(&t.name))),
                Some(o) if o != t => out.push(change("UPDATED", &ks.name, Some(&t.name))),
                Some(_) => {}
            }
        }
        for t in &old.tables {
            if ks.table(&t.name).is_none() {
                out.push(change("DROPPED", &ks.name, Some(&t.name)));
            }
        }
    }
    for ks in before {
        if !after.iter().any(|k| k.name == ks.name) {
            out.push(change("DROPPED", &ks.name, None));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::body::Reader;
    use super::super::schema::TableDef;
    use super::*;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, i], 9042))
    }

    fn keyspace(name: &str, tables: &[(&str, u32)]) -> Keyspace {
        Keyspace {
            name: name.into(),
            durable_writes: true,
            tables: tables
                .iter()
                .map(|(t, truncations)| TableDef {
                    name: (*t).into(),
                    id: [1; 16],
                    default_ttl_s: 0,
                    gc_grace_s: crate::client::cql::schema::GC_GRACE_S,
                    comment: String::new(),
                    truncations: *truncations,
                    columns: Vec::new(),
                    dropped: Vec::new(),
                    token_order: true,
                    sorted_rows: true,
                })
                .collect(),
        }
    }

    #[test]
    fn members_that_come_go_and_change_state_are_events() {
        let before = Seen {
            members: vec![(addr(1), true), (addr(2), true), (addr(3), true)],
            catalog: Vec::new(),
        };
        let after = Seen {
            members: vec![(addr(1), true), (addr(2), false), (addr(4), true)],
            catalog: Vec::new(),
        };
        assert_eq!(
            between(&before, &after),
            [
                Event::Status("DOWN", addr(2)),
                Event::Topology("NEW_NODE", addr(4)),
                Event::Topology("REMOVED_NODE", addr(3)),
            ]
        );
        assert!(between(&after, &after).is_empty());
    }

    #[test]
    fn schema_changes_are_events_keyspaces_and_tables() {
        let seen = |catalog| Seen {
            members: Vec::new(),
            catalog,
        };
        let before = seen(vec![
            keyspace("a", &[("t", 0), ("u", 0)]),
            keyspace("gone", &[]),
        ]);
        let after = seen(vec![
            keyspace("a", &[("t", 1), ("v", 0)]),
            keyspace("new", &[("w", 0)]),
        ]);
        let names: Vec<String> = between(&before, &after)
            .iter()
            .map(|e| match e {
                Event::Schema(c) => format!("{} {} {:?}", c.change, c.keyspace, c.table),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "UPDATED a Some(\"t\")",
                "CREATED a Some(\"v\")",
                "DROPPED a Some(\"u\")",
                "CREATED new None",
                "CREATED new Some(\"w\")",
                "DROPPED gone None",
            ]
        );
    }

    #[test]
    fn an_event_goes_out_on_stream_minus_one() {
        let f = Event::Topology("NEW_NODE", addr(4)).frame();
        assert_eq!(i16::from_be_bytes([f[2], f[3]]), -1);
        assert_eq!(f[4], 0x0C);
        let mut r = Reader::new(&f[9..]);
        assert_eq!(r.string().unwrap(), "TOPOLOGY_CHANGE");
        assert_eq!(r.string().unwrap(), "NEW_NODE");
        assert_eq!(r.byte().unwrap(), 4);
        assert_eq!(
            [r.byte(), r.byte(), r.byte(), r.byte()].map(Result::unwrap),
            [127, 0, 0, 4]
        );
        assert_eq!(r.int().unwrap(), 9042);
    }
}
