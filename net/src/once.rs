//! Exactly-once adds: the operation id an add may carry, and which replica
//! applies an add that carries one.
//!
//! An id is `(client_id, seq)`: a client instance picks a random client id
//! and numbers its adds. A retry of the same id, through any node, is
//! applied at most once and answers the original value.
//!
//! # Who applies it
//!
//! Every add with an id for one `(client_id, partition)` is applied by one
//! fixed replica, [`applier`]: two leaders can then never both apply the
//! same op, so no one ever has to compensate after the fact (which cannot
//! be made safe: a replica that applied a duplicate and then lost its disk
//! could never subtract it). The price is availability: while that replica
//! is down, adds with that client's ids to that partition fail fast as
//! unavailable (not applied this time: retry the same id), where adds
//! without an id would go to any replica. Clients spread their adds over
//! every node anyway, since the applier depends on the partition's
//! replicas.
//!
//! Both nodes and token-aware clients compute [`applier`], so a client
//! sends an add straight to the node that applies it.

use bincode::{Decode, Encode};

use crate::error::{ErrorKind, WireError};
use crate::ring::murmur3_x64_128_cassandra;

/// Longest client id, in bytes.
pub const CLIENT_ID_BYTES_MAX: usize = 64;

/// An add's operation id.
///
/// # Invariants (checked by [`OpId::check`] wherever one is received)
/// - `client` is 1 to [`CLIENT_ID_BYTES_MAX`] bytes, any bytes.
/// - `seq` is neither 0 nor `u64::MAX` (kept free for "none" and "all").
#[derive(Debug, Clone, PartialEq, Eq, Hash, Encode, Decode)]
pub struct OpId {
    /// The client instance (random per instance, or chosen by a script).
    pub client: Vec<u8>,
    /// The add's number within the client.
    pub seq: u64,
}

impl OpId {
    /// An id, checked.
    pub fn new(client: impl Into<Vec<u8>>, seq: u64) -> Result<OpId, WireError> {
        let id = OpId {
            client: client.into(),
            seq,
        };
        id.check()?;
        Ok(id)
    }

    /// Refuses an id outside the bounds above, as not applied.
    pub fn check(&self) -> Result<(), WireError> {
        let invalid = |m: String| Err(WireError::new(ErrorKind::Invalid, m));
        if self.client.is_empty() {
            return invalid("an operation id needs a client id of at least one byte".into());
        }
        if self.client.len() > CLIENT_ID_BYTES_MAX {
            return invalid(format!(
                "client id of {} bytes, over the limit of {CLIENT_ID_BYTES_MAX}",
                self.client.len()
            ));
        }
        if self.seq == 0 || self.seq == u64::MAX {
            return invalid(format!(
                "operation sequence number {} is out of range (1 to {})",
                self.seq,
                u64::MAX - 1
            ));
        }
        Ok(())
    }

    /// A fresh random client id (16 bytes) with sequence number 1: a
    /// one-off add's id.
    pub fn random_first() -> OpId {
        OpId {
            client: {
                let mut id = vec![0; 16];
                tally_world::fill_random(&mut id);
                id
            },
            seq: 1,
        }
    }

    /// Parses `CLIENT:SEQ` (the last colon splits; the client part is taken
    /// as bytes).
    pub fn parse(text: &str) -> Result<OpId, WireError> {
        let Some((client, seq)) = text.rsplit_once(':') else {
            return Err(WireError::new(
                ErrorKind::Invalid,
                format!("operation id {text:?} is not CLIENT:SEQ"),
            ));
        };
        let seq = seq.parse::<u64>().map_err(|_| {
            WireError::new(
                ErrorKind::Invalid,
                format!("operation sequence number {seq:?} is not a positive integer"),
            )
        })?;
        OpId::new(client.as_bytes(), seq)
    }
}

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", String::from_utf8_lossy(&self.client), self.seq)
    }
}

/// The replica (one of `replicas`, a partition's replicas in ring order)
/// that applies adds carrying `client`'s ids to that partition.
///
/// # Panics
/// If `replicas` is empty (a ring always has at least one).
pub fn applier(replicas: &[usize], client: &[u8]) -> usize {
    assert!(!replicas.is_empty(), "a partition has at least one replica");
    let (h, _) = murmur3_x64_128_cassandra(client, 0x07a1_11d5);
    replicas[(h as u64 % replicas.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn ids_out_of_bounds_are_refused() {
        assert!(OpId::new(b"c".to_vec(), 1).is_ok());
        assert!(OpId::new(vec![0xff; CLIENT_ID_BYTES_MAX], u64::MAX - 1).is_ok());
        for (client, seq) in [
            (vec![], 1),
            (vec![1; CLIENT_ID_BYTES_MAX + 1], 1),
            (b"c".to_vec(), 0),
            (b"c".to_vec(), u64::MAX),
        ] {
            let e = OpId::new(client, seq).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
        }
    }

    #[test]
    fn ids_parse_from_text() {
        let id = OpId::parse("web-7:42").unwrap();
        assert_eq!((id.client.as_slice(), id.seq), (&b"web-7"[..], 42));
        // The last colon splits: a client id may hold colons.
        assert_eq!(OpId::parse("a:b:3").unwrap().client, b"a:b");
        for bad in [
            "",
            "x",
            "x:",
            ":3",
            "x:-1",
            "x:0",
            "x:1.5",
            "x:18446744073709551615",
        ] {
            assert!(OpId::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_applier_is_one_replica_fixed_per_client() {
        let replicas = [4, 0, 2];
        let mut seen = std::collections::HashSet::new();
        for i in 0..300u32 {
            let client = i.to_le_bytes();
            let a = applier(&replicas, &client);
            assert!(replicas.contains(&a));
            assert_eq!(a, applier(&replicas, &client), "deterministic");
            seen.insert(a);
        }
        assert_eq!(seen.len(), 3, "clients spread over every replica");
        assert_eq!(applier(&[9], b"any"), 9);
    }
}
