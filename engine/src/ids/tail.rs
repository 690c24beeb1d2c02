//! Tails: the adds with ids a replica holds before their applier made them
//! durable.
//!
//! An applier sends its new shard to the replicas while its own fsync
//! runs, and the ids the shard applied travel with it ([`TailIds`]). If the
//! applier then crashes before its fsync, it comes back under a new counter
//! id without those ids, while a replica may hold the shard that counted
//! them: a retry would count the add a second time. So a replica keeps the
//! ids it was sent, per applier incarnation (its counter id), until the
//! applier says they are durable there (`durable`, the applier's last
//! durable group commit, rides on every message). What it keeps is the
//! *tail*: the ids an applier could still lose.
//!
//! An applier that restarts uncleanly asks every replica it shares ranges
//! with for the tails of its lost incarnations ([`Tails::fence`]), learns
//! them, and applies no id before it has heard from all of them. Asking
//! also fences the incarnation: a message of it still in flight is refused,
//! so nothing can join a tail after it was read. Once the new incarnation
//! has made what it learned durable, it tells the replicas to forget
//! ([`Tails::forget`]).
//!
//! A tail is written with its shard in one log record (see `commitlog`),
//! so the replica keeps the ids exactly as long as it keeps the shard; and
//! into every ids file, so it outlives the log segments. Reading a tail
//! back may bring back entries already pruned: that only keeps them until
//! the next message of their applier, or until it forgets them.
//!
//! # Invariants
//! - A source's entries all have `batch > durable` once pruned (entries
//!   read back may be older until the next prune).
//! - A fenced or forgotten source takes no new entries.

use std::collections::{HashMap, HashSet};

use parking_lot::Mutex;

use super::record::Applied;
use super::{ClientId, client, put_applied, put_client};
use crate::codec::{self, Cursor, DecodeError};
use crate::key::Key;

/// Largest number of ids one message may carry with a shard.
pub const TAIL_OPS_MAX: usize = 4096;

/// One add with an id, as its applier sealed it into group commit `batch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailOp {
    /// The applier's group commit that holds the add's record.
    pub batch: u64,
    /// The add's client.
    pub client: ClientId,
    /// The add.
    pub op: Applied,
}

/// The ids that travel with a shard of applier incarnation `counter_id`:
/// every add with an id to the cell that the applier may not have made
/// durable yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TailIds {
    /// The applier incarnation whose shard holds the adds.
    pub counter_id: u64,
    /// The applier's last durable group commit when it sent them.
    pub durable: u64,
    /// The adds, at most [`TAIL_OPS_MAX`].
    pub ops: Vec<TailOp>,
}

/// A tail's fact on disk (ids files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TailEntry {
    /// An add of `source`'s tail to `key`.
    Op { source: u64, key: Key, op: TailOp },
    /// `source` was forgotten: its entries are dropped wherever read.
    Forgotten { source: u64 },
}

/// The kinds of ids-file entries a tail writes (the ledger's are 0 and 1).
pub(crate) const KIND_OP: u8 = 2;
pub(crate) const KIND_FORGOTTEN: u8 = 3;

impl TailEntry {
    /// Appends the entry: `kind u8 | fields`.
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        match self {
            TailEntry::Op { source, key, op } => {
                buf.push(KIND_OP);
                codec::put_varint(buf, *source);
                codec::put_key(buf, key);
                put_tail_op(buf, op);
            }
            TailEntry::Forgotten { source } => {
                buf.push(KIND_FORGOTTEN);
                codec::put_varint(buf, *source);
            }
        }
    }

    /// Decodes an entry whose kind byte was read.
    pub(crate) fn decode(kind: u8, cur: &mut Cursor<'_>) -> Result<TailEntry, DecodeError> {
        let source = cur.varint()?;
        match kind {
            KIND_OP => Ok(TailEntry::Op {
                source,
                key: cur.key()?,
                op: tail_op(cur)?,
            }),
            KIND_FORGOTTEN => Ok(TailEntry::Forgotten { source }),
            _ => Err(DecodeError("unknown tail entry kind")),
        }
    }
}

/// Appends a tail section: `counter_id varint | durable varint | varint n |
/// (batch varint | client | applied)*` (see `ids` for `applied`).
pub(crate) fn put_tail(buf: &mut Vec<u8>, ids: &TailIds) {
    codec::put_varint(buf, ids.counter_id);
    codec::put_varint(buf, ids.durable);
    codec::put_varint(buf, ids.ops.len() as u64);
    for op in &ids.ops {
        put_tail_op(buf, op);
    }
}

/// Decodes a tail section (see [`put_tail`]).
pub(crate) fn tail(cur: &mut Cursor<'_>) -> Result<TailIds, DecodeError> {
    let counter_id = cur.varint()?;
    let durable = cur.varint()?;
    let n = cur.varint_max(TAIL_OPS_MAX, "tail of too many ids")?;
    let ops = (0..n).map(|_| tail_op(cur)).collect::<Result<_, _>>()?;
    Ok(TailIds {
        counter_id,
        durable,
        ops,
    })
}

fn put_tail_op(buf: &mut Vec<u8>, op: &TailOp) {
    codec::put_varint(buf, op.batch);
    put_client(buf, &op.client);
    put_applied(buf, &op.op, true);
}

fn tail_op(cur: &mut Cursor<'_>) -> Result<TailOp, DecodeError> {
    Ok(TailOp {
        batch: cur.varint()?,
        client: client(cur)?,
        op: super::applied(cur, None)?,
    })
}

/// A message of an incarnation whose tail was read or forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fenced(pub u64);

/// One applier incarnation's tail.
#[derive(Default)]
struct Source {
    durable: u64,
    ops: Vec<(Key, TailOp)>,
    /// The ops held, by `(client, seq, batch)`: every message of a cell
    /// carries all of its ids not durable yet, so one op comes many times
    /// (a stalled applier's hot counter: once per message), and is kept
    /// once.
    held: HashSet<(ClientId, u64, u64)>,
}

impl Source {
    /// Keeps `op` of `key` unless it is held already.
    fn add(&mut self, key: &Key, op: &TailOp) {
        if self.held.insert((op.client.clone(), op.op.seq, op.batch)) {
            self.ops.push((key.clone(), op.clone()));
        }
    }

    /// Drops what group commit `durable` covers.
    fn prune(&mut self, durable: u64) {
        self.durable = durable;
        self.ops.retain(|(_, op)| op.batch > durable);
        self.held.retain(|&(_, _, batch)| batch > durable);
    }
}

#[derive(Default)]
struct Inner {
    sources: HashMap<u64, Source>,
    fenced: HashSet<u64>,
    forgotten: HashSet<u64>,
}

/// Every applier's tail held here.
#[derive(Default)]
pub(crate) struct Tails {
    inner: Mutex<Inner>,
}

impl Tails {
    /// Takes the ids sent with a shard of `key`; refused for a fenced or
    /// forgotten incarnation.
    pub(crate) fn take(&self, key: &Key, ids: &TailIds) -> Result<(), Fenced> {
        let mut inner = self.inner.lock();
        let source = ids.counter_id;
        if inner.fenced.contains(&source) || inner.forgotten.contains(&source) {
            return Err(Fenced(source));
        }
        let s = inner.sources.entry(source).or_default();
        if ids.durable > s.durable {
            s.prune(ids.durable);
        }
        let durable = s.durable;
        for op in ids.ops.iter().filter(|op| op.batch > durable) {
            s.add(key, op);
        }
        if s.ops.is_empty() {
            inner.sources.remove(&source);
        }
        Ok(())
    }

    /// Takes an entry read back from an ids file (log records go through
    /// [`Tails::take`], with their watermark).
    pub(crate) fn load(&self, entry: TailEntry) {
        let mut inner = self.inner.lock();
        match entry {
            TailEntry::Op { source, key, op } => {
                if !inner.forgotten.contains(&source) {
                    inner.sources.entry(source).or_default().add(&key, &op);
                }
            }
            TailEntry::Forgotten { source } => {
                inner.sources.remove(&source);
                inner.forgotten.insert(source);
            }
        }
    }

    /// Fences the incarnations `sources` (nothing more is taken from them)
    /// and answers their tails, each in batch order.
    pub(crate) fn fence(&self, sources: &[u64]) -> Vec<(Key, TailOp)> {
        let mut inner = self.inner.lock();
        let mut out = Vec::new();
        for source in sources {
            inner.fenced.insert(*source);
            if let Some(s) = inner.sources.get(source) {
                out.extend(s.ops.iter().cloned());
            }
        }
        out.sort_by_key(|(_, op)| op.batch);
        out
    }

    /// Forgets the tails of `sources` for good: a later incarnation learned them.
    pub(crate) fn forget(&self, sources: &[u64]) {
        let mut inner = self.inner.lock();
        for source in sources {
            inner.sources.remove(source);
            inner.forgotten.insert(*source);
        }
    }

    /// Everything held, as entries for an ids file.
    pub(crate) fn entries(&self) -> Vec<TailEntry> {
        let inner = self.inner.lock();
        let mut out: Vec<TailEntry> = inner
            .forgotten
            .iter()
            .map(|&source| TailEntry::Forgotten { source })
            .collect();
        for (&source, s) in &inner.sources {
            out.extend(s.ops.iter().map(|(key, op)| TailEntry::Op {
                source,
                key: key.clone(),
                op: op.clone(),
            }));
        }
        out
    }

    /// Adds held, over every source.
    pub(crate) fn len(&self) -> usize {
        self.inner
            .lock()
            .sources
            .values()
            .map(|s| s.ops.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn op(batch: u64, seq: u64) -> TailOp {
        TailOp {
            batch,
            client: ClientId::from_slice(b"c"),
            op: Applied {
                seq,
                delta: 1,
                value: seq as i64,
                epoch: 0,
                at_ms: 5,
            },
        }
    }

    fn ids(counter_id: u64, durable: u64, ops: Vec<TailOp>) -> TailIds {
        TailIds {
            counter_id,
            durable,
            ops,
        }
    }

    fn seqs(tail: &[(Key, TailOp)]) -> Vec<u64> {
        tail.iter().map(|(_, op)| op.op.seq).collect()
    }

    #[test]
    fn a_tail_keeps_what_its_applier_may_lose() {
        let t = Tails::default();
        let k = Key::new(b"p", b"c").unwrap();
        t.take(&k, &ids(7, 0, vec![op(1, 1), op(2, 2)])).unwrap();
        // Batch 1 durable at the applier: only batch 2 and later stay.
        t.take(&k, &ids(7, 1, vec![op(2, 2), op(3, 3)])).unwrap();
        // An op sent again with the cell's next shard is kept once.
        t.take(&k, &ids(7, 1, vec![op(2, 2), op(3, 3)])).unwrap();
        assert_eq!(seqs(&t.fence(&[7])), [2, 3]);
        // A late message with an older watermark prunes nothing more.
        assert_eq!(t.len(), 2);
        // Fenced: nothing more is taken from it; others still are.
        assert_eq!(t.take(&k, &ids(7, 3, vec![op(4, 4)])), Err(Fenced(7)));
        t.take(&k, &ids(8, 0, vec![op(1, 9)])).unwrap();
        t.forget(&[7]);
        assert_eq!(t.fence(&[7]), []);
        assert_eq!(t.len(), 1);
        // Everything durable: the source goes.
        t.take(&k, &ids(8, 5, vec![])).unwrap();
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn entries_read_back_give_the_same_tails() {
        let t = Tails::default();
        let k = Key::new(b"p", b"c").unwrap();
        t.take(&k, &ids(7, 0, vec![op(1, 1), op(2, 2)])).unwrap();
        t.take(&k, &ids(9, 0, vec![op(1, 3)])).unwrap();
        t.forget(&[9]);
        let mut buf = Vec::new();
        let entries = t.entries();
        entries.iter().for_each(|e| e.encode(&mut buf));
        let back = Tails::default();
        let mut cur = Cursor::new(&buf);
        while cur.remaining() > 0 {
            let kind = cur.bytes(1).unwrap()[0];
            back.load(TailEntry::decode(kind, &mut cur).unwrap());
        }
        assert_eq!(seqs(&back.fence(&[7])), [1, 2]);
        // A forgotten source stays forgotten, even when its ops come again.
        back.load(TailEntry::Op {
            source: 9,
            key: k,
            op: op(1, 3),
        });
        assert_eq!(back.fence(&[9]), []);
    }

    #[test]
    fn a_tail_section_round_trips_and_hostile_bytes_are_errors() {
        let t = ids(u64::MAX, 3, vec![op(4, 1), op(u64::MAX, u64::MAX - 1)]);
        let mut buf = Vec::new();
        put_tail(&mut buf, &t);
        assert_eq!(tail(&mut Cursor::new(&buf)).unwrap(), t);
        for cut in 0..buf.len() {
            assert!(tail(&mut Cursor::new(&buf[..cut])).is_err(), "cut at {cut}");
        }
        // A count past the limit.
        let mut big = Vec::new();
        codec::put_varint(&mut big, 1);
        codec::put_varint(&mut big, 0);
        codec::put_varint(&mut big, TAIL_OPS_MAX as u64 + 1);
        assert!(tail(&mut Cursor::new(&big)).is_err());
    }
}
