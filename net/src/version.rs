//! Protocol versions, and how two sides agree on one.
//!
//! **Peers.** Each version of the peer protocol is a TLS ALPN id,
//! `tally-peer/N`. A node offers every version it speaks, newest first,
//! both when it dials and when it accepts; TLS picks the first of the
//! server's list that the client offers, so two nodes speak the highest
//! version both know, and a node of the previous build is still understood
//! (its handshake offers only its own version). A request kind is sent only
//! on a connection whose version knows it (`PeerRequest::since`): the peer transport
//! fails a call it cannot send with "unreachable", never sending it. An
//! answer's new form is sent only to a peer whose version knows it (a
//! scan's sorted sets, version 6, are left out of an older peer's page).
//!
//! | version | what it adds |
//! |---|---|
//! | 2 | the protocol of the builds before versions were negotiated |
//! | 3 | `Hello` heartbeats that announce a node's build and cluster features, `Leaving` |
//! | 4 | agreement: `Prepare`, `Propose`, `Commit`, `ReadAgreed` |
//! | 5 | agreed state moved with its ranges: `AgreedIn`, `MergeAgreed` |
//! | 6 | sorted sets in scans' answers (`WireKind::SortedSet`) |
//! | 7 | pages of a CQL table's partitions: `ScanTable` |
//! | 8 | writes of whole last-write-wins cells (CQL regular tables): `LeaderCells` |
//! | 9 | CQL tables stored in token order, placed by the token they carry (`ring::TOKEN_TABLE_MARK`) |
//! | 10 | reads of a range of a partition's columns: `ReadSlice` |
//! | 11 | list changes carry when their coordinator was asked: `LeaderListAt` |
//!
//! **Clients.** The native protocol's first request may be `Hello`, naming
//! the versions the client speaks; the node answers the highest both speak
//! ([`client_version`]), or refuses the connection saying which versions
//! each side speaks. A client that sends no `Hello` speaks version 1, the
//! protocol of the builds before. A node of such a build refuses `Hello`
//! as a malformed request, which tells a newer client to speak version 1.
//!
//! | version | what it adds |
//! |---|---|
//! | 1 | the protocol of the builds before versions were negotiated |
//! | 2 | `Hello`, `Versions` (each node's build and the cluster's features) |
//! | 3 | strings: `GetString`, `SetString` (compare-and-set, leases) |
//! | 4 | `Serial`: a request at SERIAL (`crate::serial`); sorted sets in `Scan`'s answers |

/// The newest peer protocol this build speaks.
pub const PEER_NEWEST: u16 = 11;
/// The oldest peer protocol this build speaks: the previous build's.
pub const PEER_OLDEST: u16 = 2;
/// The newest client protocol this build speaks.
pub const CLIENT_NEWEST: u16 = 4;
/// The oldest client protocol this build speaks.
pub const CLIENT_OLDEST: u16 = 1;

/// Most cluster features one build may announce.
pub const FEATURES_MAX: usize = 64;
/// Longest name of a cluster feature, and of a build.
pub const NAME_BYTES_MAX: usize = 64;

/// The ALPN id of peer protocol `version`.
pub fn peer_alpn(version: u16) -> Vec<u8> {
    format!("tally-peer/{version}").into_bytes()
}

/// Every peer protocol this build speaks, as ALPN ids, newest first.
pub fn peer_alpns() -> Vec<Vec<u8>> {
    (PEER_OLDEST..=PEER_NEWEST).rev().map(peer_alpn).collect()
}

/// The peer protocol a handshake agreed on, from its ALPN id; `None`
/// for none or one this build does not speak.
pub fn peer_version(alpn: Option<&[u8]>) -> Option<u16> {
    let v: u16 = std::str::from_utf8(alpn?.strip_prefix(b"tally-peer/")?)
        .ok()?
        .parse()
        .ok()?;
    (PEER_OLDEST..=PEER_NEWEST).contains(&v).then_some(v)
}

/// The client protocol a node speaks with a client that speaks `theirs`:
/// the highest both do, or why there is none.
pub fn client_version(theirs: &[u16]) -> Result<u16, String> {
    theirs
        .iter()
        .copied()
        .filter(|v| (CLIENT_OLDEST..=CLIENT_NEWEST).contains(v))
        .max()
        .ok_or_else(|| {
            let mut listed: Vec<String> = theirs.iter().take(8).map(u16::to_string).collect();
            if theirs.len() > 8 {
                listed.push("...".into());
            }
            format!(
                "no client protocol version in common: this node speaks {CLIENT_OLDEST} to \
                 {CLIENT_NEWEST}, the client [{}]",
                listed.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn peers_offer_every_version_newest_first_and_read_the_agreed_one() {
        assert_eq!(
            peer_alpns(),
            vec![
                b"tally-peer/11".to_vec(),
                b"tally-peer/10".to_vec(),
                b"tally-peer/9".to_vec(),
                b"tally-peer/8".to_vec(),
                b"tally-peer/7".to_vec(),
                b"tally-peer/6".to_vec(),
                b"tally-peer/5".to_vec(),
                b"tally-peer/4".to_vec(),
                b"tally-peer/3".to_vec(),
                b"tally-peer/2".to_vec()
            ]
        );
        // The builds before negotiation offered exactly this id.
        assert_eq!(peer_alpn(2), b"tally-peer/2");
        assert_eq!(peer_version(Some(b"tally-peer/2")), Some(2));
        assert_eq!(peer_version(Some(b"tally-peer/3")), Some(3));
        assert_eq!(peer_version(Some(b"tally-peer/4")), Some(4));
        assert_eq!(peer_version(Some(b"tally-peer/5")), Some(5));
        assert_eq!(peer_version(Some(b"tally-peer/6")), Some(6));
        assert_eq!(peer_version(Some(b"tally-peer/7")), Some(7));
        assert_eq!(peer_version(Some(b"tally-peer/8")), Some(8));
        assert_eq!(peer_version(Some(b"tally-peer/9")), Some(9));
        assert_eq!(peer_version(Some(b"tally-peer/10")), Some(10));
        assert_eq!(peer_version(Some(b"tally-peer/11")), Some(11));
        for bad in [
            &b"tally-peer/1"[..],
            b"tally-peer/12",
            b"tally-peer/",
            b"h3",
            b"tally-peer/x",
        ] {
            assert_eq!(peer_version(Some(bad)), None, "{bad:?}");
        }
        assert_eq!(peer_version(None), None);
    }

    #[test]
    fn a_client_gets_the_highest_version_both_speak_or_a_reason() {
        assert_eq!(client_version(&[1]), Ok(1));
        assert_eq!(client_version(&[1, 2]), Ok(2));
        assert_eq!(client_version(&[2, 1, 7]), Ok(2));
        assert_eq!(client_version(&[2, 1, 3, 7]), Ok(3));
        assert_eq!(client_version(&[4, 3, 9]), Ok(4));
        let e = client_version(&[5, 6]).unwrap_err();
        assert!(
            e.contains("this node speaks 1 to 4, the client [5, 6]"),
            "{e}"
        );
        let e = client_version(&[]).unwrap_err();
        assert!(e.contains("the client []"), "{e}");
        let many: Vec<u16> = (10..30).collect();
        assert!(client_version(&many).unwrap_err().ends_with("17, ...]"));
    }
}
