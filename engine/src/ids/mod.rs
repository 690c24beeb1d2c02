//! Operation ids: exactly-once adds.
//!
//! An add may carry an id, `(client_id, seq)`. The node that applies it
//! (one fixed replica per client and partition, chosen above the engine)
//! asks the ledger (`ledger`) under the cell lock whether that id was
//! applied: a new one is applied and remembered with the value it produced;
//! a retry answers that value again and applies nothing; the same id with
//! another delta is refused; an id older than the retention window is
//! refused as "outcome unknown", never guessed at.
//!
//! # What is remembered, and for how long
//!
//! Per client ([`ClientLog`](record::ClientLog)), whatever the counters:
//! every add of the window (`seq`, the counter's key fingerprint, `delta,
//! value, epoch, at_ms`: 48 bytes in memory), and a *forgotten mark*:
//! every seq of the client up to it is forgotten, and a retry of one is
//! expired, on any counter. Seqs are a client's: it numbers its adds
//! upwards across its counters (the thin client does), so its adds reach
//! an applier nearly in order, a new one is pushed at the back of one
//! queue, and adds are forgotten from its front, oldest seq first, once
//! `window_ms` has passed (10 minutes by default), the mark rising with
//! them. The same seq on two counters is two adds while both are in the
//! window. The mark is kept `forget_ms` (24 hours by default) after the
//! client's last add here; after that, the client is unknown and an old
//! id would read as new. Clients retry within seconds; the thin client
//! stops at its deadline, well inside the window.
//!
//! The whole ledger of the window is in memory: the applier never reads the
//! disk under the cell lock. That costs 48 bytes per add of the last
//! `window_ms` and a few dozen per client, which is the price of answering
//! any retry in the window.
//!
//! # A budget of clients
//!
//! A node remembers at most `clients_max` clients ([`Retention`]): an add
//! of a client it does not know, past that, is refused before anything
//! changes ([`Check::Full`](record::Check::Full), `Error::IdsFull`), so
//! retrying it is safe. A refusal first forgets the idle clients of its
//! stripe and of the next stripe in turn, so retries find room as soon as
//! clients go. A client that made one add only (a one-off id, the most
//! numerous kind) is idle after `one_add_forget_ms` (an hour by default)
//! instead of `forget_ms`: after that a retry of its add would read as
//! new, which no client does an hour on. The budget is checked before an
//! add and counted when it is recorded, so adds racing it may pass it by
//! a batch. The engine knows ids only; whose they are (a user's) is
//! decided above it.
//!
//! # Durability
//!
//! An applied add's entry is in the same commit log record as the shard
//! it moved (see `commitlog`): one checksum covers both, so a crash keeps
//! both or neither. Until that record is durable the entry also travels
//! with every copy of the shard that leaves the node, and the replicas
//! keep it ([`tail`]): a crash that loses the record here is learned back
//! from them. Before a flush lets log segments go, the
//! entries recorded since the last file are written to a new ids file
//! ([`file`]); when there are many files, one snapshot of the ledger
//! replaces them all, leaving out what is past the retention. Open loads
//! every file, then the log. Entries are facts (an add applied, a mark
//! raised), so reading one twice or in any order changes nothing.
//!
//! # Resets
//!
//! Ids survive resets: a retry of an add that a reset later discarded
//! answers its original value and is not applied again (the reset won).
//! The one exception is the leader's own catch-up: when the replicas tell
//! it that the add it just made landed in an epoch they have left (a reset
//! it had not seen), it makes the add again in the new epoch
//! (`reapply_stale`), before anyone saw the first one acknowledged.

pub(crate) mod file;
pub(crate) mod ledger;
pub(crate) mod pending;
pub mod record;
pub(crate) mod store;
pub mod tail;

use smallvec::SmallVec;

use crate::codec::{self, Cursor, DecodeError};
use crate::error::{Error, Result};
use crate::key::Key;
pub use crate::options::Retention;
use record::Applied;

/// Longest client id, in bytes.
pub const CLIENT_ID_BYTES_MAX: usize = 64;

/// A client id: any bytes, 1 to [`CLIENT_ID_BYTES_MAX`]; inline up to 16.
pub type ClientId = SmallVec<[u8; 16]>;

/// An add's operation id.
///
/// # Invariants
/// - `client` is 1 to [`CLIENT_ID_BYTES_MAX`] bytes; `seq` is neither 0 nor `u64::MAX`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpId {
    /// The client instance.
    pub client: ClientId,
    /// The add's number within the client.
    pub seq: u64,
}

impl OpId {
    /// An id, checked.
    pub fn new(client: &[u8], seq: u64) -> Result<OpId> {
        if client.is_empty() || client.len() > CLIENT_ID_BYTES_MAX {
            return Err(Error::BadOpId(format!(
                "client id of {} bytes (1 to {CLIENT_ID_BYTES_MAX})",
                client.len()
            )));
        }
        if seq == 0 || seq == u64::MAX {
            return Err(Error::BadOpId(format!(
                "sequence number {seq} out of range"
            )));
        }
        Ok(OpId {
            client: ClientId::from_slice(client),
            seq,
        })
    }
}

/// The stable fingerprint of a counter's key that the ledger and ids files
/// know it by (see [`codec::hash64`]): a client's adds are told apart by
/// seq first, so two counters' fingerprints matter only if one client
/// gave them both the same seq within the window.
pub(crate) fn fingerprint(key: &Key) -> u64 {
    codec::hash64(&[key.partition(), key.column()])
}

/// One fact of the ledger, as files and log records hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// An applied add to the counter with key fingerprint `key`.
    Op {
        key: u64,
        client: ClientId,
        op: Applied,
    },
    /// Every seq of `client` up to `through` is forgotten.
    Forgotten {
        client: ClientId,
        through: u64,
        last_at_ms: u64,
    },
}

/// Entry kinds in ids files: 0 and 1 are version 1 and 2 files' (an add
/// and a mark with the whole key), read still; 2 and 3 are the tails'.
const KIND_OP_KEYED: u8 = 0;
const KIND_FORGOTTEN_KEYED: u8 = 1;
const KIND_OP: u8 = 4;
const KIND_FORGOTTEN: u8 = 5;

impl Entry {
    pub(crate) fn client(&self) -> &ClientId {
        match self {
            Entry::Op { client, .. } | Entry::Forgotten { client, .. } => client,
        }
    }

    /// Appends an `Op` entry of these parts.
    pub(crate) fn encode_op(buf: &mut Vec<u8>, key: u64, client: &[u8], op: &Applied) {
        buf.push(KIND_OP);
        buf.extend_from_slice(&key.to_le_bytes());
        put_client(buf, client);
        put_applied(buf, op, true);
    }

    /// Appends the entry: `kind u8 | fields`, an add's `key u64 LE |
    /// client | applied`, a mark's `client | through | last_at_ms`.
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        match self {
            Entry::Op { key, client, op } => Entry::encode_op(buf, *key, client, op),
            Entry::Forgotten {
                client,
                through,
                last_at_ms,
            } => {
                buf.push(KIND_FORGOTTEN);
                put_client(buf, client);
                codec::put_varint(buf, *through);
                codec::put_varint(buf, *last_at_ms);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn decode(cur: &mut Cursor<'_>) -> std::result::Result<Entry, DecodeError> {
        let kind = cur.bytes(1)?[0];
        Entry::decode_kind(kind, cur)
    }

    /// Decodes an entry whose kind byte was read; the keyed kinds of older
    /// files give their key's fingerprint.
    pub(crate) fn decode_kind(
        kind: u8,
        cur: &mut Cursor<'_>,
    ) -> std::result::Result<Entry, DecodeError> {
        let key = match kind {
            KIND_OP => cur.u64()?,
            KIND_OP_KEYED | KIND_FORGOTTEN_KEYED => fingerprint(&cur.key()?),
            KIND_FORGOTTEN => 0,
            _ => return Err(DecodeError("unknown ids entry kind")),
        };
        let client = client(cur)?;
        match kind {
            KIND_OP | KIND_OP_KEYED => Ok(Entry::Op {
                key,
                client,
                op: applied(cur, None)?,
            }),
            _ => Ok(Entry::Forgotten {
                client,
                through: cur.varint()?,
                last_at_ms: cur.varint()?,
            }),
        }
    }
}

/// Appends the ops section of a commit log record: `varint n | op*`, each
/// `client | seq | zigzag delta | zigzag value | at_ms` (the key and the
/// epoch are the record's).
pub(crate) fn put_record_ops(buf: &mut Vec<u8>, ops: &[(ClientId, Applied)]) {
    codec::put_varint(buf, ops.len() as u64);
    for (client, op) in ops {
        put_client(buf, client);
        put_applied(buf, op, false);
    }
}

/// Decodes a record's ops section (see [`put_record_ops`]).
pub(crate) fn record_ops(
    cur: &mut Cursor<'_>,
    epoch: u64,
    out: &mut Vec<(ClientId, Applied)>,
) -> std::result::Result<(), DecodeError> {
    let n = cur.varint()?;
    // Each op takes at least 6 bytes: a bound before anything is reserved.
    if n > (cur.remaining() / 6) as u64 {
        return Err(DecodeError("more ids than the record holds"));
    }
    for _ in 0..n {
        let client = client(cur)?;
        out.push((client, applied(cur, Some(epoch))?));
    }
    Ok(())
}

pub(crate) fn put_client(buf: &mut Vec<u8>, client: &[u8]) {
    codec::put_varint(buf, client.len() as u64);
    buf.extend_from_slice(client);
}

pub(crate) fn client(cur: &mut Cursor<'_>) -> std::result::Result<ClientId, DecodeError> {
    let len = cur.varint_max(CLIENT_ID_BYTES_MAX, "client id too long")?;
    if len == 0 {
        return Err(DecodeError("empty client id"));
    }
    Ok(ClientId::from_slice(cur.bytes(len)?))
}

pub(crate) fn put_applied(buf: &mut Vec<u8>, op: &Applied, with_epoch: bool) {
    codec::put_varint(buf, op.seq);
    codec::put_zigzag(buf, op.delta);
    codec::put_zigzag(buf, op.value);
    if with_epoch {
        codec::put_varint(buf, op.epoch);
    }
    codec::put_varint(buf, op.at_ms);
}

/// Decodes an applied add; `epoch` is the record's, or read when `None`.
pub(crate) fn applied(
    cur: &mut Cursor<'_>,
    epoch: Option<u64>,
) -> std::result::Result<Applied, DecodeError> {
    let seq = cur.varint()?;
    if seq == 0 || seq == u64::MAX {
        return Err(DecodeError("ids entry with seq out of range"));
    }
    let delta = cur.zigzag()?;
    let value = cur.zigzag()?;
    let epoch = match epoch {
        Some(e) => e,
        None => cur.varint()?,
    };
    Ok(Applied {
        seq,
        delta,
        value,
        epoch,
        at_ms: cur.varint()?,
    })
}

/// Wall-clock time in ms since the Unix epoch (0 before it).
pub(crate) fn now_ms() -> u64 {
    tally_world::wall_ms()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn entries_and_record_ops_round_trip() {
        let key = Key::new(b"p", b"c").unwrap();
        let client = ClientId::from_slice(&[0xff; CLIENT_ID_BYTES_MAX]);
        let op = Applied {
            seq: u64::MAX - 1,
            delta: i64::MIN,
            value: -3,
            epoch: 9,
            at_ms: 1_700_000_000_000,
        };
        let entries = [
            Entry::Op {
                key: fingerprint(&key),
                client: client.clone(),
                op,
            },
            Entry::Forgotten {
                client: client.clone(),
                through: 77,
                last_at_ms: 5,
            },
        ];
        let mut buf = Vec::new();
        entries.iter().for_each(|e| e.encode(&mut buf));
        let mut cur = Cursor::new(&buf);
        for e in &entries {
            assert_eq!(&Entry::decode(&mut cur).unwrap(), e);
        }
        assert_eq!(cur.remaining(), 0);
        // Version 1 and 2 files name the whole key: read as its fingerprint.
        let mut keyed = vec![KIND_OP_KEYED];
        codec::put_key(&mut keyed, &key);
        put_client(&mut keyed, &client);
        put_applied(&mut keyed, &op, true);
        keyed.push(KIND_FORGOTTEN_KEYED);
        codec::put_key(&mut keyed, &key);
        put_client(&mut keyed, &client);
        codec::put_varint(&mut keyed, 77);
        codec::put_varint(&mut keyed, 5);
        let mut cur = Cursor::new(&keyed);
        for e in &entries {
            assert_eq!(&Entry::decode(&mut cur).unwrap(), e);
        }
        assert_eq!(cur.remaining(), 0);

        let mut buf = Vec::new();
        put_record_ops(&mut buf, &[(client.clone(), op)]);
        let mut out = Vec::new();
        record_ops(&mut Cursor::new(&buf), 9, &mut out).unwrap();
        assert_eq!(out, [(client, op)]);
    }

    #[test]
    fn hostile_bytes_are_errors() {
        assert!(OpId::new(b"", 1).is_err());
        assert!(OpId::new(&[1; CLIENT_ID_BYTES_MAX + 1], 1).is_err());
        assert!(OpId::new(b"a", 0).is_err());
        assert!(OpId::new(b"a", u64::MAX).is_err());
        // A count far past the bytes, an empty client, a huge client length.
        for bad in [&[0xff, 0xff, 0x03][..], &[1, 0], &[1, 0xff, 0x7f]] {
            let mut out = Vec::new();
            assert!(record_ops(&mut Cursor::new(bad), 0, &mut out).is_err());
        }
    }
}
