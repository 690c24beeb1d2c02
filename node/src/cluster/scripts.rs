//! The node's cache of Lua scripts by sha1 (see `resp::script`), its own
//! ([`Scripts`], held by `Ctx`), shared by every RESP connection, and filled from the other nodes on a miss: a
//! script loaded through one node runs by its sha through any other, so a
//! client may send `SCRIPT LOAD` and `EVALSHA` through different nodes. A
//! script a peer answers is kept only if its sha1 is the one asked for
//! (`script_peers`: the cache is a leaf, which `Ctx` holds).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use tally_net::wire::{PeerRequest, PeerResponse};

/// Most scripts `SCRIPT LOAD` keeps on a node (until `SCRIPT FLUSH`).
pub(crate) const SCRIPTS_MAX: usize = 10_000;
/// Most bytes of scripts `SCRIPT LOAD` keeps on a node.
pub(crate) const LOADED_BYTES_MAX: usize = 64 << 20;
/// Most scripts of `EVAL` a node keeps (the ones used longest ago go
/// first, as Redis keeps 500).
pub(crate) const EVALS_MAX: usize = 500;
/// Most bytes of scripts of `EVAL` a node keeps.
pub(crate) const EVAL_BYTES_MAX: usize = 32 << 20;
/// Longest script a node caches (or runs), in bytes.
pub(crate) const SCRIPT_BYTES_MAX: usize = 4 << 20;

/// Scripts kept while they are used: past `count` scripts or `bytes`
/// bytes, the one used longest ago goes.
#[derive(Debug)]
struct Lru {
    scripts: HashMap<String, (Arc<[u8]>, u64)>,
    by_use: BTreeMap<u64, String>,
    bytes: usize,
    clock: u64,
    count_max: usize,
    bytes_max: usize,
}

impl Lru {
    fn new(count_max: usize, bytes_max: usize) -> Lru {
        Lru {
            scripts: HashMap::new(),
            by_use: BTreeMap::new(),
            bytes: 0,
            clock: 0,
            count_max,
            bytes_max,
        }
    }

    /// The script of `sha`, now the one used last.
    fn get(&mut self, sha: &str) -> Option<Arc<[u8]>> {
        self.clock += 1;
        let (body, used) = self.scripts.get_mut(sha)?;
        let was = std::mem::replace(used, self.clock);
        self.by_use.remove(&was);
        self.by_use.insert(self.clock, sha.to_string());
        Some(body.clone())
    }

    /// Keeps `body` under `sha`, making room for it.
    fn insert(&mut self, sha: &str, body: Arc<[u8]>) {
        if self.get(sha).is_some() {
            return;
        }
        while !self.scripts.is_empty()
            && (self.scripts.len() >= self.count_max || self.bytes + body.len() > self.bytes_max)
        {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((gone, _)) = self.scripts.remove(&oldest) {
                self.bytes -= gone.len();
            }
        }
        self.bytes += body.len();
        self.by_use.insert(self.clock, sha.to_string());
        self.scripts.insert(sha.to_string(), (body, self.clock));
    }
}

/// The scripts, and how many times the cache was flushed.
#[derive(Debug)]
struct Cache {
    /// `SCRIPT LOAD`'s, kept until flushed.
    loaded: HashMap<String, Arc<[u8]>>,
    loaded_bytes: usize,
    /// `EVAL`'s (and those found at peers), kept while used.
    evals: Lru,
    generation: u64,
}

/// The lowercase hex sha1 of `body`, as Redis names scripts.
pub(crate) fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// A node's cache of scripts (one per node: see the module doc).
#[derive(Debug)]
pub(crate) struct Scripts(Mutex<Cache>);

impl Default for Scripts {
    fn default() -> Scripts {
        Scripts(Mutex::new(Cache {
            loaded: HashMap::new(),
            loaded_bytes: 0,
            evals: Lru::new(EVALS_MAX, EVAL_BYTES_MAX),
            generation: 0,
        }))
    }
}

impl Scripts {
    /// The script of `sha`, if this node has it.
    pub(crate) fn get(&self, sha: &str) -> Option<Arc<[u8]>> {
        let mut c = self.0.lock();
        match c.loaded.get(sha) {
            Some(body) => Some(body.clone()),
            None => c.evals.get(sha),
        }
    }

    /// Whether this node has the script of `sha`.
    pub(crate) fn contains(&self, sha: &str) -> bool {
        let c = self.0.lock();
        c.loaded.contains_key(sha) || c.evals.scripts.contains_key(sha)
    }

    /// Keeps the body of an `EVAL` (or one found at a peer) while it is used.
    pub(crate) fn insert_eval(&self, sha: &str, body: Arc<[u8]>) {
        let mut c = self.0.lock();
        if !c.loaded.contains_key(sha) {
            c.evals.insert(sha, body);
        }
    }

    /// Keeps the body of a `SCRIPT LOAD` until the cache is flushed; false
    /// when the node keeps all it may (and not this one already).
    pub(crate) fn insert_loaded(&self, sha: &str, body: Arc<[u8]>) -> bool {
        let mut c = self.0.lock();
        if c.loaded.contains_key(sha) {
            return true;
        }
        if c.loaded.len() >= SCRIPTS_MAX || c.loaded_bytes + body.len() > LOADED_BYTES_MAX {
            return false;
        }
        c.loaded_bytes += body.len();
        c.loaded.insert(sha.to_string(), body);
        true
    }

    /// Empties this node's cache.
    pub(crate) fn flush(&self) {
        let mut c = self.0.lock();
        c.loaded.clear();
        c.loaded_bytes = 0;
        c.evals = Lru::new(EVALS_MAX, EVAL_BYTES_MAX);
        c.generation += 1;
    }

    /// How many times this node's cache was emptied.
    pub(crate) fn generation(&self) -> u64 {
        self.0.lock().generation
    }

    /// A peer's `Script` or `FlushScripts`.
    pub(crate) fn serve(&self, req: PeerRequest) -> PeerResponse {
        match req {
            PeerRequest::Script { sha } => PeerResponse::Script(self.get(&sha).map(|b| b.to_vec())),
            PeerRequest::FlushScripts => {
                self.flush();
                PeerResponse::Applied
            }
            other => PeerResponse::Error(tally_net::wire::WireError::new(
                tally_net::wire::ErrorKind::Internal,
                format!("not a script request: {other:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shas_are_redis_ones() {
        // redis-cli SCRIPT LOAD "return 1"
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }

    #[test]
    fn eval_scripts_are_kept_while_used_within_their_count_and_bytes() {
        let body = |n: usize| -> Arc<[u8]> { vec![b'x'; n].into() };
        let mut lru = Lru::new(3, 100);
        for sha in ["a", "b", "c"] {
            lru.insert(sha, body(10));
        }
        // Using `a` makes `b` the oldest: a fourth script drops it.
        assert!(lru.get("a").is_some());
        lru.insert("d", body(10));
        assert!(lru.get("b").is_none());
        assert!(["a", "c", "d"].iter().all(|s| lru.get(s).is_some()));
        // A large one drops as many as it needs.
        lru.insert("e", body(85));
        assert!(lru.get("d").is_some() && lru.get("e").is_some());
        assert_eq!((lru.scripts.len(), lru.by_use.len(), lru.bytes), (2, 2, 95));
        // Inserting one it has changes nothing.
        lru.insert("e", body(85));
        assert_eq!((lru.scripts.len(), lru.bytes), (2, 95));
    }

    #[test]
    fn each_node_keeps_its_own_scripts() {
        let (one, two) = (Scripts::default(), Scripts::default());
        let body: Arc<[u8]> = b"return 1".to_vec().into();
        assert!(one.insert_loaded("a", body.clone()));
        one.insert_eval("b", body);
        assert!(one.contains("a") && one.contains("b"));
        assert!(!two.contains("a") && !two.contains("b"));
        two.flush();
        assert_eq!((one.generation(), two.generation()), (0, 1));
        assert!(one.get("a").is_some());
    }
}
