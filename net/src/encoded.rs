//! Requests encoded once, for any number of peers.
//!
//! A coordinator replicating a batch sends the same shards to every other
//! replica: encoded once ([`Encoded::new`]), the bytes are shared by each
//! peer's call (cloning them is a reference count), and a peer's sender
//! joins the calls it batches onto one stream by writing their count and
//! then their bytes ([`join`]), which is exactly the encoding of the
//! `Vec<PeerRequest>` of all of them that the peer decodes.

use bytes::Bytes;

use crate::wire::{self, PeerRequest};

/// Requests in their wire encoding, back to back.
#[derive(Clone, Debug)]
pub struct Encoded {
    bytes: Bytes,
    count: usize,
    kind: Kind,
    idempotent: bool,
    since: u16,
}

/// What a call's first request is: the sender keeps heartbeats, leader
/// requests and row reads on streams of their own (see `peer::sender`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A heartbeat.
    Ping,
    /// A request to lead a write (an add, a reset, an admission, a change
    /// or a list change), answered after its replication: kept off the
    /// streams that carry the replication it waits for.
    Lead,
    /// A row read, whose answer may be large, or an agreement message,
    /// which carries a partition's registers (up to megabytes) or answers
    /// them.
    Row,
    /// Anything else.
    Plain,
}

impl Kind {
    fn of(req: &PeerRequest) -> Kind {
        match req {
            PeerRequest::Ping { .. } | PeerRequest::Hello { .. } => Kind::Ping,
            PeerRequest::LeaderAdd { .. }
            | PeerRequest::LeaderAddOnce { .. }
            | PeerRequest::LeaderAdmit { .. }
            | PeerRequest::LeaderReset { .. }
            | PeerRequest::LeaderChange { .. }
            | PeerRequest::LeaderList { .. }
            | PeerRequest::LeaderListAt { .. }
            | PeerRequest::LeaderExpireRow { .. }
            | PeerRequest::LeaderCells { .. } => Kind::Lead,
            PeerRequest::ReadRow { .. }
            | PeerRequest::ReadSlice { .. }
            | PeerRequest::Prepare { .. }
            | PeerRequest::Propose { .. }
            | PeerRequest::Commit { .. }
            | PeerRequest::ReadAgreed { .. } => Kind::Row,
            _ => Kind::Plain,
        }
    }
}

/// Whether a request may be sent again after its connection failed: it
/// changes nothing a second time.
pub fn idempotent(req: &PeerRequest) -> bool {
    matches!(
        req,
        PeerRequest::Ping { .. }
            | PeerRequest::Hello { .. }
            | PeerRequest::Leaving
            | PeerRequest::Apply { .. }
            | PeerRequest::Read { .. }
            | PeerRequest::ReadRow { .. }
            | PeerRequest::ReadSlice { .. }
            | PeerRequest::Prepare { .. }
            | PeerRequest::Propose { .. }
            | PeerRequest::Commit { .. }
            | PeerRequest::ReadAgreed { .. }
    )
}

impl Encoded {
    /// `reqs`, encoded.
    pub fn new(reqs: &[PeerRequest]) -> Encoded {
        let mut buf = Vec::new();
        for req in reqs {
            wire::encode_into(req, &mut buf);
        }
        Encoded {
            bytes: buf.into(),
            count: reqs.len(),
            kind: reqs.first().map_or(Kind::Plain, Kind::of),
            idempotent: reqs.iter().all(idempotent),
            since: reqs.iter().map(PeerRequest::since).max().unwrap_or(0),
        }
    }

    /// How many requests.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// What the first request is.
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// The first peer protocol that knows every request.
    pub(crate) fn since(&self) -> u16 {
        self.since
    }

    /// Whether every request may be sent twice.
    pub(crate) fn idempotent(&self) -> bool {
        self.idempotent
    }
}

/// The message of all of `parts`' requests, in order: the encoding of
/// the `Vec<PeerRequest>` of them.
pub(crate) fn join<'a>(parts: impl Iterator<Item = &'a Encoded> + Clone) -> Vec<u8> {
    let count: usize = parts.clone().map(Encoded::len).sum();
    let bytes: usize = parts.clone().map(|p| p.bytes.len()).sum();
    let mut buf = Vec::with_capacity(bytes + 10);
    wire::encode_into(&(count as u64), &mut buf);
    for part in parts {
        buf.extend_from_slice(&part.bytes);
    }
    buf
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::wire::{Consistency, WireKey};

    fn read(i: u8) -> PeerRequest {
        PeerRequest::Read {
            key: WireKey::new(&[i; 3], b"c"),
        }
    }

    /// Joined calls are the batch the peer decodes, whatever their sizes
    /// (the count's varint grows past 250).
    #[test]
    fn joined_calls_are_the_encoding_of_all_their_requests() {
        for sizes in [vec![1], vec![2, 3], vec![0, 251, 1], vec![300]] {
            let calls: Vec<Vec<PeerRequest>> = sizes
                .iter()
                .map(|&n| (0..n).map(|i| read(i as u8)).collect())
                .collect();
            let parts: Vec<Encoded> = calls.iter().map(|c| Encoded::new(c)).collect();
            let all: Vec<PeerRequest> = calls.concat();
            assert_eq!(join(parts.iter()), wire::encode(&all), "{sizes:?}");
            let back: Vec<PeerRequest> = wire::decode(&join(parts.iter())).unwrap();
            assert_eq!(back.len(), all.len());
        }
    }

    #[test]
    fn a_call_knows_its_kind_and_whether_it_may_be_sent_twice() {
        let lead = PeerRequest::LeaderAdd {
            key: WireKey::new(b"k", b""),
            delta: 1,
            cl: Consistency::One,
        };
        let e = Encoded::new(&[read(1), lead]);
        assert_eq!((e.kind(), e.idempotent(), e.len()), (Kind::Plain, false, 2));
        let e = Encoded::new(&[PeerRequest::LeaderReset {
            key: WireKey::new(b"k", b""),
            cl: Consistency::One,
        }]);
        assert_eq!(e.kind(), Kind::Lead);
        let e = Encoded::new(&[PeerRequest::LeaderChange {
            key: WireKey::new(b"k", b""),
            change: crate::wire::Change::Delete,
            reads: false,
            cl: Consistency::One,
        }]);
        assert_eq!((e.kind(), e.idempotent()), (Kind::Lead, false));
        let expire = PeerRequest::LeaderExpireRow {
            partition: b"h".to_vec(),
            at_ms: 1_700_000_000_000,
            only: crate::wire::When::Later,
            cl: Consistency::Quorum,
        };
        let e = Encoded::new(std::slice::from_ref(&expire));
        assert_eq!((e.kind(), e.idempotent()), (Kind::Lead, false));
        // Appended last: every older variant keeps its index on the wire.
        let list = crate::wire::encode(&PeerRequest::LeaderList {
            key: WireKey::new(b"k", b""),
            change: crate::list::ListChange::Pop {
                end: crate::list::End::Left,
                count: 1,
            },
            cl: Consistency::One,
        });
        let bytes = crate::wire::encode(&expire);
        assert_eq!(bytes[0], list[0] + 1, "the index after LeaderList's");
        assert_eq!(crate::wire::decode::<PeerRequest>(&bytes).unwrap(), expire);
        let e = Encoded::new(&[PeerRequest::Ping {
            cluster: "c".into(),
        }]);
        assert_eq!((e.kind(), e.idempotent()), (Kind::Ping, true));
    }
}
