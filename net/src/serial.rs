//! SERIAL over the client protocol. [`Consistency::Serial`] is a
//! coordinator's own level: it travels as `Quorum`, so that older nodes
//! read it (see its `Encode`). A native client asks for SERIAL by wrapping
//! its request ([`wrap`]): `ClientOp::Serial` holds the request encoded,
//! and the node reads every level in it as SERIAL ([`unwrap`]). A node of
//! a client protocol before 4 would read a plain request's SERIAL as
//! QUORUM, so a client refuses to send one rather than let it pass as
//! QUORUM unnoticed.
//!
//! The wrapped request is bytes, not a nested `ClientOp`, so decoding
//! never recurses: a wrapper inside a wrapper is refused once, here.

use crate::wire::{self, ClientOp, Consistency};

/// The first client protocol that carries SERIAL.
pub const SINCE: u16 = 4;

/// The level `op` asks for, if it has one.
fn level(op: &mut ClientOp) -> Option<&mut Consistency> {
    match op {
        ClientOp::Add { cl, .. }
        | ClientOp::Get { cl, .. }
        | ClientOp::GetRow { cl, .. }
        | ClientOp::Reset { cl, .. }
        | ClientOp::UniqueAdd { cl, .. }
        | ClientOp::UniqueCount { cl, .. }
        | ClientOp::UniqueContains { cl, .. }
        | ClientOp::AddOnce { cl, .. }
        | ClientOp::Change { cl, .. }
        | ClientOp::GetCell { cl, .. }
        | ClientOp::Scan { cl, .. } => Some(cl),
        _ => None,
    }
}

/// `op` as a client sends it to a node of client protocol `protocol`:
/// wrapped when it asks for SERIAL; an error when that node cannot tell
/// SERIAL from QUORUM.
pub fn wrap(mut op: ClientOp, protocol: u16) -> Result<ClientOp, String> {
    if level(&mut op).is_none_or(|cl| *cl != Consistency::Serial) {
        return Ok(op);
    }
    if protocol < SINCE {
        return Err(format!(
            "the node speaks client protocol {protocol}; SERIAL needs {SINCE} (a newer build)"
        ));
    }
    Ok(ClientOp::Serial {
        op: wire::encode(&op),
    })
}

/// The request a node runs for `op`: a `Serial` one's request, at SERIAL;
/// any other as it is. An error for bytes that are not a request with a
/// level, or a wrapper in a wrapper.
pub fn unwrap(op: ClientOp) -> Result<ClientOp, String> {
    let ClientOp::Serial { op: bytes } = op else {
        return Ok(op);
    };
    let mut inner: ClientOp =
        wire::decode(&bytes).map_err(|e| format!("malformed SERIAL request: {e}"))?;
    match level(&mut inner) {
        Some(cl) => *cl = Consistency::Serial,
        None => return Err("a SERIAL request must be one that has a consistency level".into()),
    }
    Ok(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireKey;

    fn get(cl: Consistency) -> ClientOp {
        ClientOp::Get {
            key: WireKey::new(b"k", b""),
            cl,
        }
    }

    #[test]
    fn serial_travels_wrapped_and_arrives_serial() {
        let sent = wrap(get(Consistency::Serial), SINCE).unwrap();
        assert!(matches!(sent, ClientOp::Serial { .. }));
        // On the wire the wrapped level reads as QUORUM; unwrapped, SERIAL.
        let over: ClientOp = wire::decode(&wire::encode(&sent)).unwrap();
        assert_eq!(unwrap(over), Ok(get(Consistency::Serial)));
        // Other levels, and requests with none, travel as they are.
        for op in [
            get(Consistency::Quorum),
            get(Consistency::One),
            ClientOp::Ping,
        ] {
            assert_eq!(wrap(op.clone(), SINCE), Ok(op.clone()));
            assert_eq!(unwrap(op.clone()), Ok(op));
        }
    }

    #[test]
    fn an_older_node_is_never_sent_serial_as_quorum() {
        let e = wrap(get(Consistency::Serial), SINCE - 1).unwrap_err();
        assert!(e.contains("SERIAL needs 4"), "{e}");
        assert_eq!(wrap(get(Consistency::All), 1), Ok(get(Consistency::All)));
    }

    #[test]
    fn a_bad_wrapper_is_refused() {
        let nested = ClientOp::Serial {
            op: wire::encode(&wrap(get(Consistency::Serial), SINCE).unwrap()),
        };
        assert!(unwrap(nested).is_err(), "a wrapper in a wrapper");
        let ping = ClientOp::Serial {
            op: wire::encode(&ClientOp::Ping),
        };
        assert!(unwrap(ping).is_err(), "no level to make SERIAL");
        let junk = ClientOp::Serial { op: vec![0xff; 9] };
        assert!(unwrap(junk).unwrap_err().starts_with("malformed"));
    }
}
