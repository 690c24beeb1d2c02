//! The ledger: every client's applied adds within the window, in memory,
//! striped by client, and what is not in a file yet.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use foldhash::fast::RandomState;
use parking_lot::Mutex;

use super::pending::Encoded;
use super::record::{Applied, Check, ClientLog};
use super::{ClientId, Entry, OpId, Retention};

/// Number of stripes (a power of two).
const STRIPES: usize = 256;

#[derive(Default)]
struct Stripe {
    clients: HashMap<ClientId, ClientLog, RandomState>,
    /// Entries recorded since the last file, in record order.
    pending: Encoded,
    /// Adds remembered in `clients`.
    ops: usize,
}

/// The in-memory ledger. Its stripe locks are leaves: taken under a cell
/// lock, nothing is taken under them.
pub(crate) struct Ledger {
    stripes: Box<[Mutex<Stripe>]>,
    /// Picks a client's stripe; the maps inside hash with seeds of their own.
    spread: RandomState,
    retention: Retention,
    /// Clients remembered, over every stripe (each stripe's map is exact;
    /// this is their sum, for the budget).
    clients: AtomicUsize,
    /// The next stripe a refused client sweeps besides its own.
    sweep_next: AtomicUsize,
}

impl Ledger {
    pub(crate) fn new(retention: Retention) -> Ledger {
        Ledger {
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            spread: RandomState::default(),
            retention,
            clients: AtomicUsize::new(0),
            sweep_next: AtomicUsize::new(0),
        }
    }

    pub(crate) fn retention(&self) -> Retention {
        self.retention
    }

    fn stripe_of(&self, client: &[u8]) -> usize {
        let h = self.spread.hash_one(client);
        (h >> 32) as usize & (STRIPES - 1)
    }

    fn stripe(&self, client: &[u8]) -> &Mutex<Stripe> {
        &self.stripes[self.stripe_of(client)]
    }

    /// Keeps the count of clients: a stripe went from `before` to `after`.
    fn counted(&self, before: usize, after: usize) {
        if after > before {
            self.clients.fetch_add(after - before, Relaxed);
        } else if before > after {
            self.clients.fetch_sub(before - after, Relaxed);
        }
    }

    /// Clients remembered now.
    pub(crate) fn clients(&self) -> usize {
        self.clients.load(Relaxed)
    }

    /// Forgets a stripe's clients past the window and idle (see
    /// [`ClientLog::idle`]).
    fn forget_idle(&self, s: &mut Stripe, now_ms: u64) {
        let expired_before = now_ms.saturating_sub(self.retention.window_ms);
        let before = s.clients.len();
        let mut ops_left = 0;
        s.clients.retain(|_, log| {
            log.prune(expired_before);
            ops_left += log.ops.len();
            !log.idle(now_ms, &self.retention)
        });
        s.ops = ops_left;
        self.counted(before, s.clients.len());
    }

    /// A client not known, at `now_ms`: [`Check::New`] if the budget has
    /// room, after forgetting the idle clients of its stripe and of the
    /// next stripe in turn if it had none (so that the retries of refused
    /// clients sweep every stripe); else [`Check::Full`].
    fn new_client(&self, stripe: usize, now_ms: u64) -> Check {
        if self.retention.admits_new_client(self.clients()) {
            return Check::New;
        }
        let next = self.sweep_next.fetch_add(1, Relaxed) % STRIPES;
        for i in [stripe, next] {
            self.forget_idle(&mut self.stripes[i].lock(), now_ms);
        }
        if self.retention.admits_new_client(self.clients()) {
            Check::New
        } else {
            Check::Full
        }
    }

    /// What an add with `id` and `delta` to the counter with key
    /// fingerprint `key` is at `now_ms`.
    pub(crate) fn check(
        &self,
        key: u64,
        id: &OpId,
        delta: i64,
        reapply_unless: Option<u64>,
        now_ms: u64,
    ) -> Check {
        let stripe = self.stripe_of(&id.client);
        let mut guard = self.stripes[stripe].lock();
        let s = &mut *guard;
        let Some(log) = s.clients.get_mut(id.client.as_slice()) else {
            drop(guard);
            return self.new_client(stripe, now_ms);
        };
        s.ops -= log.prune(now_ms.saturating_sub(self.retention.window_ms));
        log.check(key, id.seq, delta, reapply_unless)
    }

    /// Remembers an applied add (and keeps it for the next file).
    pub(crate) fn record(&self, key: u64, client: &ClientId, op: Applied) {
        let mut s = self.stripe(client).lock();
        let s = &mut *s;
        s.pending.push_op(key, client, &op);
        // One lookup for a known client, two for a new one.
        let added = match s.clients.get_mut(client.as_slice()) {
            Some(log) => log.record(key, op),
            None => {
                let mut log = ClientLog::default();
                let added = log.record(key, op);
                s.clients.insert(client.clone(), log);
                self.clients.fetch_add(1, Relaxed);
                added
            }
        };
        s.ops += usize::from(added);
    }

    /// Takes in an entry read back (a file, or the log when `pending`: its
    /// segments go once flushed, so its entries must reach a file).
    /// Entries already out of the window only raise the forgotten mark.
    pub(crate) fn load(&self, entry: Entry, now_ms: u64, pending: bool) {
        let expired_before = now_ms.saturating_sub(self.retention.window_ms);
        let mut s = self.stripe(entry.client()).lock();
        let s = &mut *s;
        if pending {
            s.pending.push(&entry);
        }
        let client = entry.client();
        let before = s.clients.len();
        if !s.clients.contains_key(client.as_slice()) {
            s.clients.insert(client.clone(), ClientLog::default());
        }
        let log = s
            .clients
            .get_mut(client.as_slice())
            .expect("inserted above");
        match &entry {
            Entry::Op { op, .. } if op.at_ms < expired_before => s.ops -= log.load_expired(op),
            Entry::Op { key, op, .. } => s.ops += usize::from(log.record(*key, *op)),
            Entry::Forgotten {
                through,
                last_at_ms,
                ..
            } => s.ops -= log.load_mark(*through, *last_at_ms),
        }
        if log.idle(now_ms, &self.retention) {
            s.clients.remove(client.as_slice());
        }
        self.counted(before, s.clients.len());
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
        let mut all = Vec::new();
        for s in self.stripes.iter() {
            let mut s = s.lock();
            let s = &mut *s;
            self.forget_idle(s, now_ms);
            for (client, log) in &s.clients {
                if log.forgotten_through > 0 {
                    all.push(Entry::Forgotten {
                        client: client.clone(),
                        through: log.forgotten_through,
                        last_at_ms: log.last_at_ms,
                    });
                }
                all.extend(log.ops.iter().map(|l| Entry::Op {
                    key: l.key,
                    client: client.clone(),
                    op: l.op,
                }));
            }
        }
        all
    }

    /// Adds remembered now.
    pub(crate) fn len(&self) -> usize {
        self.stripes.iter().map(|s| s.lock().ops).sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    const K: u64 = 42;

    fn ledger() -> Ledger {
        Ledger::new(Retention {
            window_ms: 1_000,
            forget_ms: 10_000,
            ..Retention::default()
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
        let a = id(b"a", 1);
        assert_eq!(l.check(K, &a, 1, None, 100), Check::New);
        l.record(K, &a.client, applied(1, 100));
        assert_eq!(
            l.check(K, &a, 1, None, 200),
            Check::Duplicate(applied(1, 100))
        );
        // Another client's seq 1 is its own, and so is another counter's.
        assert_eq!(l.check(K, &id(b"b", 1), 1, None, 200), Check::New);
        assert_eq!(l.check(K + 1, &a, 1, None, 200), Check::New);
        assert_eq!(l.len(), 1);
        assert_eq!(l.check(K, &a, 1, None, 1_200), Check::Expired);
        assert_eq!(l.len(), 0);
        assert_eq!(l.take_pending().count, 1);
        assert!(l.take_pending().is_empty());
    }

    #[test]
    fn a_snapshot_read_back_answers_the_same() {
        let l = ledger();
        let a = id(b"a", 1);
        l.record(K, &a.client, applied(1, 100));
        l.record(K + 1, &a.client, applied(2, 900));
        let snap = l.snapshot(1_500); // seq 1 expired, 2 not
        let back = ledger();
        for e in snap {
            back.load(e, 1_500, false);
        }
        for (key, seq) in [(K, 1), (K + 1, 2), (K, 2), (K, 3)] {
            assert_eq!(
                back.check(key, &id(b"a", seq), 1, None, 1_500),
                l.check(key, &id(b"a", seq), 1, None, 1_500),
                "seq {seq}"
            );
        }
        assert_eq!(back.check(K, &id(b"a", 1), 1, None, 1_500), Check::Expired);
        assert_eq!(back.len(), 1);
        // Idle past `forget_ms`: the record goes, old ids read as new.
        assert!(back.snapshot(20_000).is_empty());
        assert_eq!(back.check(K, &id(b"a", 1), 1, None, 20_000), Check::New);
        assert_eq!(back.len(), 0);
    }

    #[test]
    fn a_new_client_past_the_budget_is_refused_and_one_add_clients_go_first() {
        let l = Ledger::new(Retention {
            window_ms: 1_000,
            forget_ms: 100_000,
            one_add_forget_ms: 5_000,
            clients_max: 2,
        });
        let client = |c: &[u8]| ClientId::from_slice(c);
        l.record(K, &client(b"many"), applied(1, 100));
        l.record(K, &client(b"many"), applied(2, 100));
        l.record(K, &client(b"once"), applied(1, 100));
        // At the budget: a new client is refused, known ones are answered.
        assert_eq!(l.check(K, &id(b"new", 1), 1, None, 200), Check::Full);
        assert_eq!(l.check(K, &id(b"many", 3), 1, None, 200), Check::New);
        assert!(matches!(
            l.check(K, &id(b"once", 1), 1, None, 200),
            Check::Duplicate(_)
        ));
        // Past the window, both are marks only: still no room.
        assert_eq!(l.check(K, &id(b"new", 1), 1, None, 2_000), Check::Full);
        // Past one_add_forget_ms the one-add client goes (a refused add
        // sweeps its stripe and the next, so retries find the room); the
        // other stays, and its old ids read as expired still.
        let mut tries = 0;
        while l.check(K, &id(b"new", 1), 1, None, 6_000) == Check::Full {
            tries += 1;
            assert!(tries <= STRIPES, "no room made after {tries} tries");
        }
        assert_eq!(l.clients(), 1);
        assert_eq!(l.check(K, &id(b"many", 1), 1, None, 6_000), Check::Expired);
    }

    #[test]
    fn loading_an_expired_add_only_raises_the_mark() {
        let l = ledger();
        let client = ClientId::from_slice(b"a");
        l.load(
            Entry::Op {
                key: K,
                client: client.clone(),
                op: applied(5, 4_500),
            },
            5_000,
            true,
        );
        let e = Entry::Op {
            key: K,
            client,
            op: applied(4, 100),
        };
        l.load(e, 5_000, true);
        assert_eq!(l.check(K, &id(b"a", 4), 1, None, 5_000), Check::Expired);
        assert_eq!(l.check(K + 3, &id(b"a", 3), 1, None, 5_000), Check::Expired);
        assert!(matches!(
            l.check(K, &id(b"a", 5), 1, None, 5_000),
            Check::Duplicate(_)
        ));
        assert_eq!(l.check(K, &id(b"a", 6), 1, None, 5_000), Check::New);
        assert_eq!(l.len(), 1);
        assert_eq!(l.take_pending().count, 2, "log entries wait for a file");
    }
}
