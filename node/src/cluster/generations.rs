//! The generation fence: a replica serves a database's keys only in the
//! generation its own ring says the database is at (see
//! `topology::flush`).
//!
//! A flush moves a database to a new generation on every member, one
//! member after another; one whose commit failed part way (a member's
//! disk was full, a member was cut off) leaves members at different
//! generations until the last one learns the ring from its peers. A
//! coordinator behind the flush reads and writes the old generation, one
//! ahead the new one, and a replica that took both would serve each its
//! own database: a reset at ALL in the new generation, then a read at ALL
//! in the old one that still sees what the reset removed. So a replica
//! refuses a request for a generation other than its own, either way
//! (not applied, unavailable): a coordinator behind learns the flush from
//! the refusal's heartbeats a moment later, a replica behind from its own.
//! Until then its requests fail where they need the others, and one at
//! `ONE` is served alone, as through a node cut off from a reset. A hint
//! of a flushed generation is dropped, not delivered: nothing reads it.

use tally_net::wire::{ErrorKind, PeerRequest, WireError};

use crate::base::keyspace::Keyspace;

/// The stored partition a request reads or writes, if it is one that
/// serves a database's keys (repairs, scans and ring changes move every
/// generation alike, and are not fenced).
pub(crate) fn addressed(req: &PeerRequest) -> Option<&[u8]> {
    match req {
        PeerRequest::Apply { key, .. }
        | PeerRequest::ApplyTail { key, .. }
        | PeerRequest::Read { key }
        | PeerRequest::LeaderAdd { key, .. }
        | PeerRequest::LeaderAddOnce { key, .. }
        | PeerRequest::LeaderReset { key, .. }
        | PeerRequest::LeaderChange { key, .. }
        | PeerRequest::LeaderList { key, .. }
        | PeerRequest::LeaderListAt { key, .. } => Some(key.partition()),
        PeerRequest::ReadRow { partition }
        | PeerRequest::ReadSlice { partition, .. }
        | PeerRequest::LeaderAdmit { partition, .. }
        | PeerRequest::LeaderExpireRow { partition, .. }
        | PeerRequest::LeaderCells { partition, .. }
        | PeerRequest::Prepare { partition, .. }
        | PeerRequest::Propose { partition, .. }
        | PeerRequest::Commit { partition, .. }
        | PeerRequest::ReadAgreed { partition } => Some(partition),
        _ => None,
    }
}

/// The refusal of a request for `stored`, a partition of the keyspace
/// `theirs`, by a replica whose database is at generation `mine`; `None`
/// when the generations agree (or `stored` is of no database).
pub(crate) fn fence(stored: &[u8], mine: impl Fn(u8) -> Keyspace) -> Option<WireError> {
    let theirs = Keyspace::of(stored)?;
    let here = mine(theirs.db);
    if theirs.generation == here.generation {
        return None;
    }
    let (behind, ahead) = match theirs.generation < here.generation {
        true => ("the coordinator", "this replica"),
        false => ("this replica", "the coordinator"),
    };
    Some(WireError::not_applied(
        ErrorKind::Unavailable,
        format!(
            "database {} is at generation {} here and {} there: {behind} has not learned a flush {ahead} has; retry once the ring is learned",
            theirs.db, here.generation, theirs.generation
        ),
    ))
}

/// Whether `stored` is of a generation its database has left here (a
/// flushed one, which nothing reads).
pub(crate) fn left(stored: &[u8], mine: impl Fn(u8) -> Keyspace) -> bool {
    Keyspace::of(stored).is_some_and(|theirs| theirs.generation < mine(theirs.db).generation)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use tally_net::wire::{Consistency, WireKey};

    fn at(generation: u32) -> impl Fn(u8) -> Keyspace {
        move |db| Keyspace { db, generation }
    }

    #[test]
    fn a_replica_serves_only_its_own_generation_of_a_database() {
        let db0 = b"likes".to_vec();
        let flushed = Keyspace {
            db: 0,
            generation: 1,
        }
        .stored(b"likes")
        .unwrap();
        // Agreeing generations pass, as does a partition of no database.
        assert!(fence(&db0, at(0)).is_none());
        assert!(fence(&flushed, at(1)).is_none());
        assert!(fence(&[0xFF, 0xC0, 1], at(3)).is_none(), "a CQL table's");
        assert!(left(&db0, at(1)) && !left(&db0, at(0)) && !left(&flushed, at(0)));
        // Behind or ahead, refused, and nothing applied.
        for (stored, mine, behind) in [(&db0, 1, "the coordinator"), (&flushed, 0, "this replica")]
        {
            let e = fence(stored, at(mine)).unwrap();
            assert_eq!(e.outcome, tally_net::Outcome::NotApplied);
            assert_eq!(e.kind, ErrorKind::Unavailable);
            assert!(
                e.message
                    .starts_with(&format!("database 0 is at generation {mine}"))
            );
            assert!(
                e.message.contains(&format!("{behind} has not learned")),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn the_requests_that_serve_a_databases_keys_are_fenced() {
        let key = WireKey::new(b"k", b"");
        let cl = Consistency::Quorum;
        let fenced = [
            PeerRequest::Read { key: key.clone() },
            PeerRequest::LeaderAdd {
                key: key.clone(),
                delta: 1,
                cl,
            },
            PeerRequest::ReadRow {
                partition: b"k".to_vec(),
            },
            PeerRequest::ReadAgreed {
                partition: b"k".to_vec(),
            },
        ];
        for req in &fenced {
            assert_eq!(addressed(req), Some(&b"k"[..]), "{req:?}");
        }
        for req in [
            PeerRequest::GetTopology,
            PeerRequest::Fold,
            PeerRequest::Leaving,
        ] {
            assert_eq!(addressed(&req), None, "{req:?}");
        }
    }
}
