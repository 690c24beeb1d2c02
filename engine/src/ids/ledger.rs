//! The ledger: every client's applied adds within the window, in memory,
//! striped by key like the cell locks, and what is not in a file yet.

use std::collections::HashMap;

use parking_lot::Mutex;
use smallvec::SmallVec;

use super::pending::Encoded;
use super::record::{Applied, Check, ClientOps};
use super::{ClientId, Entry, OpId};
use crate::key::{Key, KeyHashBuilder};

/// Number of stripes (a power of two).
const STRIPES: usize = 256;

/// The clients that added to one counter with ids; inline for the usual one.
type Clients = SmallVec<[(ClientId, ClientOps); 1]>;

#[derive(Default)]
struct Stripe {
    keys: HashMap<Key, Clients, KeyHashBuilder>,
    /// Entries recorded since the last file, in record order.
    pending: Encoded,
    /// Adds remembered in `keys`.
    ops: usize,
}

/// Retention: how long ids are remembered.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// An applied add is answered for this long (ms), then expired.
    pub window_ms: u64,
    /// A client's forgotten mark is kept this long (ms) after its last add
    /// to the counter; after that its old ids read as new.
    pub forget_ms: u64,
}

impl Default for Retention {
    /// Ten minutes to answer a retry; a client's mark kept for a day.
    fn default() -> Self {
        Retention {
            window_ms: 10 * 60 * 1000,
            forget_ms: 24 * 60 * 60 * 1000,
        }
    }
}

/// The in-memory ledger. Its stripe locks are leaves: taken under a cell
/// lock, nothing is taken under them.
pub(crate) struct Ledger {
    stripes: Box<[Mutex<Stripe>]>,
    retention: Retention,
}

impl Ledger {
    pub(crate) fn new(retention: Retention) -> Ledger {
        Ledger {
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            retention,
        }
    }

    pub(crate) fn retention(&self) -> Retention {
        self.retention
    }

    /// The stripe of `key`, picked by middle bits of its hash: the map
    /// inside indexes by the low bits (and tags by the top ones), which
    /// would otherwise be the same for every key of a stripe, and every
    /// lookup would walk one long probe sequence.
    fn stripe(&self, key: &Key) -> &Mutex<Stripe> {
        &self.stripes[((key.hash_u64() >> 32) as usize) & (STRIPES - 1)]
    }

    /// What an add with `id` and `delta` to `key` is at `now_ms`.
    pub(crate) fn check(
        &self,
        key: &Key,
        id: &OpId,
        delta: i64,
        reapply_below: u64,
        now_ms: u64,
    ) -> Check {
        let mut s = self.stripe(key).lock();
        let expired_before = now_ms.saturating_sub(self.retention.window_ms);
        let Some(clients) = s.keys.get_mut(key) else {
            return Check::New;
        };
        let Some((_, ops)) = clients.iter_mut().find(|(c, _)| *c == id.client) else {
            return Check::New;
        };
        let before = ops.ops.len();
        ops.prune(expired_before, 0);
        let pruned = before - ops.ops.len();
        let check = ops.check(id.seq, delta, reapply_below);
        s.ops -= pruned;
        check
    }

    /// Remembers an applied add (and keeps it for the next file).
    pub(crate) fn record(&self, key: &Key, client: &ClientId, op: Applied) {
        let mut s = self.stripe(key).lock();
        s.pending.push_op(key, client, &op);
        let s = &mut *s;
        // One lookup for a known counter, two for a new one.
        let added = match s.keys.get_mut(key) {
            Some(clients) => record_in(clients, client, op),
            None => {
                let mut clients = Clients::new();
                let added = record_in(&mut clients, client, op);
                s.keys.insert(key.clone(), clients);
                added
            }
        };
        s.ops += added;
    }

    /// Takes in an entry read back (a file, or the log when `pending`: its
    /// segments go once flushed, so its entries must reach a file).
    /// Entries already out of the window only raise the forgotten mark.
    pub(crate) fn load(&self, entry: Entry, now_ms: u64, pending: bool) {
        let expired_before = now_ms.saturating_sub(self.retention.window_ms);
        let idle_before = now_ms.saturating_sub(self.retention.forget_ms);
        let mut s = self.stripe(entry.key()).lock();
        let s = &mut *s;
        let (key, client) = (entry.key().clone(), entry.client().clone());
        let ops = client_ops(&mut s.keys, &key, &client);
        let before = ops.ops.len();
        match &entry {
            Entry::Op { op, .. } if op.at_ms < expired_before => {
                ops.forget_through(op.seq, op.at_ms);
            }
            Entry::Op { op, .. } => ops.record(*op),
            Entry::Forgotten {
                through,
                last_at_ms,
                ..
            } => ops.forget_through(*through, *last_at_ms),
        }
        let idle = ops.ops.is_empty() && ops.last_at_ms < idle_before;
        s.ops = s.ops + ops.ops.len() - before;
        if idle {
            remove_client(&mut s.keys, &key, &client);
        }
        if pending {
            s.pending.push(&entry);
        }
    }

    /// The entries recorded since the last call, to be written to a file.
    pub(crate) fn take_pending(&self) -> Encoded {
        let mut all = Encoded::default();
        for s in self.stripes.iter() {
            let taken = s.lock().pending.take();
            all.append(taken);
        }
        all
    }

    /// Puts entries back that could not be written.
    pub(crate) fn return_pending(&self, entries: Encoded) {
        self.stripes[0].lock().pending.append(entries);
    }

    /// Forgets what is past the retention at `now_ms`, and answers every
    /// entry still remembered: adds in the window and forgotten marks.
    pub(crate) fn snapshot(&self, now_ms: u64) -> Vec<Entry> {
        let expired_before = now_ms.saturating_sub(self.retention.window_ms);
        let idle_before = now_ms.saturating_sub(self.retention.forget_ms);
        let mut all = Vec::new();
        for s in self.stripes.iter() {
            let mut s = s.lock();
            let s = &mut *s;
            let mut ops_left = 0;
            s.keys.retain(|key, clients| {
                clients.retain(|(client, ops)| {
                    if ops.prune(expired_before, idle_before) {
                        return false;
                    }
                    ops_left += ops.ops.len();
                    if ops.forgotten_through > 0 {
                        all.push(Entry::Forgotten {
                            key: key.clone(),
                            client: client.clone(),
                            through: ops.forgotten_through,
                            last_at_ms: ops.last_at_ms,
                        });
                    }
                    all.extend(ops.ops.iter().map(|op| Entry::Op {
                        key: key.clone(),
                        client: client.clone(),
                        op: *op,
                    }));
                    true
                });
                !clients.is_empty()
            });
            s.ops = ops_left;
        }
        all
    }

    /// Adds remembered now.
    pub(crate) fn len(&self) -> usize {
        self.stripes.iter().map(|s| s.lock().ops).sum()
    }
}

fn client_ops<'c>(
    keys: &'c mut HashMap<Key, Clients, KeyHashBuilder>,
    key: &Key,
    client: &ClientId,
) -> &'c mut ClientOps {
    // Found without cloning the key: most adds are to a counter known here.
    if !keys.contains_key(key) {
        keys.insert(key.clone(), Clients::new());
    }
    let clients = keys.get_mut(key).expect("inserted above");
    let i = match clients.iter().position(|(c, _)| c == client) {
        Some(i) => i,
        None => {
            clients.push((client.clone(), ClientOps::default()));
            clients.len() - 1
        }
    };
    &mut clients[i].1
}

/// Records `op` in `client`'s ops among `clients`; answers how many ops
/// it added (0 when it replaced one, or was forgotten already).
fn record_in(clients: &mut Clients, client: &ClientId, op: Applied) -> usize {
    let ops = match clients.iter().position(|(c, _)| c == client) {
        Some(i) => &mut clients[i].1,
        None => {
            clients.push((client.clone(), ClientOps::default()));
            &mut clients.last_mut().expect("pushed above").1
        }
    };
    let before = ops.ops.len();
    ops.record(op);
    ops.ops.len() - before
}

fn remove_client(keys: &mut HashMap<Key, Clients, KeyHashBuilder>, key: &Key, client: &ClientId) {
    if let Some(clients) = keys.get_mut(key) {
        clients.retain(|(c, _)| c != client);
        if clients.is_empty() {
            keys.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn ledger() -> Ledger {
        Ledger::new(Retention {
            window_ms: 1_000,
            forget_ms: 10_000,
        })
    }

    fn id(client: &[u8], seq: u64) -> OpId {
        OpId::new(client, seq).unwrap()
    }

    fn applied(seq: u64, at_ms: u64) -> Applied {
        Applied {
            seq,
            delta: 1,
            value: 7,
            epoch: 0,
            at_ms,
        }
    }

    #[test]
    fn records_checks_and_expires() {
        let l = ledger();
        let k = Key::new(b"p", b"c").unwrap();
        let a = id(b"a", 1);
        assert_eq!(l.check(&k, &a, 1, 0, 100), Check::New);
        l.record(&k, &a.client, applied(1, 100));
        assert_eq!(
            l.check(&k, &a, 1, 0, 200),
            Check::Duplicate(applied(1, 100))
        );
        // Another client's seq 1 is its own.
        assert_eq!(l.check(&k, &id(b"b", 1), 1, 0, 200), Check::New);
        assert_eq!(l.len(), 1);
        assert_eq!(l.check(&k, &a, 1, 0, 1_200), Check::Expired);
        assert_eq!(l.len(), 0);
        assert_eq!(l.take_pending().count, 1);
        assert!(l.take_pending().is_empty());
    }

    #[test]
    fn a_snapshot_read_back_answers_the_same() {
        let l = ledger();
        let k = Key::new(b"p", b"c").unwrap();
        let a = id(b"a", 1);
        l.record(&k, &a.client, applied(1, 100));
        l.record(&k, &a.client, applied(2, 900));
        let snap = l.snapshot(1_500); // seq 1 expired, 2 not
        let back = ledger();
        for e in snap {
            back.load(e, 1_500, false);
        }
        for seq in [1, 2, 3] {
            assert_eq!(
                back.check(&k, &id(b"a", seq), 1, 0, 1_500),
                l.check(&k, &id(b"a", seq), 1, 0, 1_500),
                "seq {seq}"
            );
        }
        assert_eq!(back.check(&k, &id(b"a", 1), 1, 0, 1_500), Check::Expired);
        // Idle past `forget_ms`: the record goes, old ids read as new.
        assert!(back.snapshot(20_000).is_empty());
        assert_eq!(back.check(&k, &id(b"a", 1), 1, 0, 20_000), Check::New);
    }

    #[test]
    fn loading_an_expired_add_only_raises_the_mark() {
        let l = ledger();
        let k = Key::new(b"p", b"c").unwrap();
        let client = ClientId::from_slice(b"a");
        let e = Entry::Op {
            key: k.clone(),
            client,
            op: applied(5, 100),
        };
        l.load(e, 5_000, true);
        assert_eq!(l.check(&k, &id(b"a", 5), 1, 0, 5_000), Check::Expired);
        assert_eq!(l.check(&k, &id(b"a", 4), 1, 0, 5_000), Check::Expired);
        assert_eq!(l.check(&k, &id(b"a", 6), 1, 0, 5_000), Check::New);
        assert_eq!(l.take_pending().count, 1, "log entries wait for a file");
    }
}
