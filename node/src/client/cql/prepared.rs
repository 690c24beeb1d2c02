//! Prepared statements: a node's cache of them, by an id that is the
//! same on every node (a driver prepares a statement on each node and
//! executes it anywhere).

use std::collections::HashMap;

use parking_lot::Mutex;

use super::ast::Statement;
use super::response::CqlError;
use super::system;

/// Most statements a node keeps prepared; past it, the oldest half goes
/// (a driver prepares again on `Unprepared`).
const PREPARED_MAX: usize = 10_000;

/// A statement prepared on this node, by its id.
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    pub(crate) statement: Statement,
    pub(crate) markers: usize,
    /// The keyspace it was prepared under (`USE`), for unqualified tables.
    pub(crate) keyspace: Option<String>,
}

/// The statements prepared on this node, shared by its connections.
#[derive(Debug, Default)]
pub(crate) struct PreparedCache {
    by_id: Mutex<HashMap<Vec<u8>, (u64, Prepared)>>,
    next: Mutex<u64>,
}

/// A prepared statement's id: a hash of its text and keyspace, the same on
/// every node (drivers prepare on all of them and execute anywhere).
pub(crate) fn statement_id(text: &str, keyspace: Option<&str>) -> Vec<u8> {
    let key = format!("{}\0{text}", keyspace.unwrap_or(""));
    system::hash_id(key.as_bytes(), 0x5eed).to_vec()
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

impl PreparedCache {
    pub(crate) fn get(&self, id: &[u8]) -> Option<Prepared> {
        self.by_id.lock().get(id).map(|(_, p)| p.clone())
    }

    /// The statement prepared as `id`, or the error that has the driver
    /// prepare it again.
    pub(crate) fn lookup(&self, id: &[u8]) -> Result<Prepared, CqlError> {
        self.get(id).ok_or_else(|| CqlError::Unprepared {
            message: format!("Prepared query with ID {} not found", hex(id)),
            id: id.to_vec(),
        })
    }

    pub(crate) fn put(&self, id: Vec<u8>, p: Prepared) {
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
    use super::super::parse::parse;
    use super::*;

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
