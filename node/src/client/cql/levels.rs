//! The rules between CQL and Tally's write and read paths, without I/O:
//! which of Tally's consistency levels a CQL level is, the operation id a
//! request's custom payload carries, and a node's error as CQL says it.
//!
//! Errors are chosen for a driver's retry policy: an add whose outcome is
//! unknown answers `WriteTimeout` with write type `COUNTER` (drivers
//! never replay those), one certainly not applied `Unavailable` or
//! `WriteFailure` with no replica received (drivers may send it to the
//! next host).

use tally_net::once::OpId;
use tally_net::wire::{Consistency, ErrorKind, Outcome, WireError};

use super::response::CqlError;

/// The custom payload key of an add's operation id.
pub(crate) const OP_ID_KEY: &str = "tally-op-id";
/// Bytes of the sequence number that ends an operation id's value.
const SEQ_BYTES: usize = 8;

pub(crate) const ANY: u16 = 0x0000;
pub(crate) const ONE: u16 = 0x0001;
pub(crate) const TWO: u16 = 0x0002;
pub(crate) const THREE: u16 = 0x0003;
pub(crate) const QUORUM: u16 = 0x0004;
pub(crate) const ALL: u16 = 0x0005;
pub(crate) const LOCAL_QUORUM: u16 = 0x0006;
pub(crate) const EACH_QUORUM: u16 = 0x0007;
pub(crate) const SERIAL: u16 = 0x0008;
pub(crate) const LOCAL_SERIAL: u16 = 0x0009;
pub(crate) const LOCAL_ONE: u16 = 0x000A;

/// The name of a consistency level's code, as Cassandra writes it.
pub(crate) fn name(code: u16) -> String {
    match code {
        ANY => "ANY".into(),
        ONE => "ONE".into(),
        TWO => "TWO".into(),
        THREE => "THREE".into(),
        QUORUM => "QUORUM".into(),
        ALL => "ALL".into(),
        LOCAL_QUORUM => "LOCAL_QUORUM".into(),
        EACH_QUORUM => "EACH_QUORUM".into(),
        SERIAL => "SERIAL".into(),
        LOCAL_SERIAL => "LOCAL_SERIAL".into(),
        LOCAL_ONE => "LOCAL_ONE".into(),
        other => format!("{other:#06x}"),
    }
}

/// Tally's level for a statement on counter table `table` at CQL level
/// `code`; `write` for an UPDATE or DELETE. Tally has one data center,
/// so the `LOCAL_` levels are the plain ones; `TWO` and `THREE` are the
/// level that needs as many replicas of `rf`, when one does.
pub(crate) fn level(
    code: u16,
    write: bool,
    rf: usize,
    table: impl Fn() -> String,
) -> Result<Consistency, CqlError> {
    let counted = |n: usize| {
        [Consistency::One, Consistency::Quorum, Consistency::All]
            .into_iter()
            .find(|c| c.required(rf) == n)
            .ok_or_else(|| {
                CqlError::Invalid(format!(
                    "consistency level {} needs {n} of {rf} replicas, which is no level of \
                     Tally's (ONE, QUORUM, ALL)",
                    name(code)
                ))
            })
    };
    match code {
        ONE | LOCAL_ONE => Ok(Consistency::One),
        QUORUM | LOCAL_QUORUM | EACH_QUORUM => Ok(Consistency::Quorum),
        ALL => Ok(Consistency::All),
        TWO => counted(2),
        THREE => counted(3),
        ANY if write => Err(CqlError::Invalid(format!(
            "Consistency level ANY is not yet supported for counter table {}",
            table()
        ))),
        SERIAL | LOCAL_SERIAL if write => Err(CqlError::Invalid(
            "You must use conditional updates for serializable writes".into(),
        )),
        ANY => Err(CqlError::Invalid(
            "ANY ConsistencyLevel is only supported for writes".into(),
        )),
        SERIAL | LOCAL_SERIAL => Err(CqlError::Invalid(format!(
            "{} reads of counter table {} are not served: counters need no agreement; \
             read at QUORUM or ALL",
            name(code),
            table()
        ))),
        other => Err(CqlError::Protocol(format!(
            "unknown consistency level {other:#06x}"
        ))),
    }
}

/// The operation id of a request's custom payload: `tally-op-id` is the
/// client's id (1 to 64 bytes) followed by the add's sequence number
/// (8 bytes, big-endian).
pub(crate) fn op_id(payload: &[(String, Vec<u8>)]) -> Result<Option<OpId>, CqlError> {
    let Some((_, v)) = payload.iter().find(|(k, _)| k == OP_ID_KEY) else {
        return Ok(None);
    };
    let bad = |why: String| {
        CqlError::Invalid(format!(
            "{OP_ID_KEY}: {why}; its value is a client id of 1 to 64 bytes, then the \
             operation's number as 8 bytes big-endian"
        ))
    };
    let split = v
        .len()
        .checked_sub(SEQ_BYTES)
        .ok_or_else(|| bad(format!("{} bytes", v.len())))?;
    let (client, seq) = v.split_at(split);
    let seq = u64::from_be_bytes(seq.try_into().map_err(|_| bad("no number".into()))?);
    OpId::new(client, seq).map(Some).map_err(|e| bad(e.message))
}

/// A node's error for a statement at CQL level `code`, needing
/// `block_for` replicas; `write` for an UPDATE or DELETE.
pub(crate) fn error(
    e: &WireError,
    code: u16,
    block_for: usize,
    write: Option<&'static str>,
) -> CqlError {
    let block_for = i32::try_from(block_for).unwrap_or(i32::MAX);
    let message = e.message.clone();
    match (e.kind, e.outcome, write) {
        (ErrorKind::Unavailable, Outcome::NotApplied, _) => {
            let (required, alive) = shortfall(&message).unwrap_or((block_for, block_for - 1));
            CqlError::Unavailable {
                message,
                consistency: code,
                required,
                alive,
            }
        }
        (
            ErrorKind::Invalid
            | ErrorKind::Overflow
            | ErrorKind::IdConflict
            | ErrorKind::IdExpired
            | ErrorKind::WrongType,
            _,
            _,
        ) => CqlError::Invalid(message),
        (ErrorKind::NoAuth | ErrorKind::Denied, _, _) => CqlError::Unauthorized(message),
        (_, Outcome::Unknown, Some(write_type)) => CqlError::WriteTimeout {
            message,
            consistency: code,
            received: 0,
            block_for,
            write_type,
        },
        (_, Outcome::NotApplied, Some(write_type)) => CqlError::WriteFailure {
            message,
            consistency: code,
            received: 0,
            block_for,
            failures: 1,
            write_type,
        },
        (ErrorKind::Timeout, _, None) => CqlError::ReadTimeout {
            message,
            consistency: code,
            received: 0,
            block_for,
            data_present: false,
        },
        (_, _, None) => CqlError::Server(message),
    }
}

/// The replicas an unavailable error says were needed and alive: it
/// reads "... needs R of N replicas, A live ...".
fn shortfall(message: &str) -> Option<(i32, i32)> {
    let rest = &message[message.find("needs ")? + "needs ".len()..];
    let mut words = rest.split([' ', ',']).filter(|w| !w.is_empty());
    let required = words.next()?.parse().ok()?;
    let _of = words.next()?;
    let _n = words.next()?;
    let _replicas = words.next()?;
    let alive = words.next()?.parse().ok()?;
    Some((required, alive))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cql_levels_are_tallys() {
        let l = |code, write| level(code, write, 3, || "ks.cf".into());
        assert_eq!(l(LOCAL_ONE, true), Ok(Consistency::One));
        assert_eq!(l(LOCAL_QUORUM, false), Ok(Consistency::Quorum));
        assert_eq!(l(ALL, true), Ok(Consistency::All));
        assert_eq!(l(TWO, true), Ok(Consistency::Quorum));
        assert_eq!(l(THREE, true), Ok(Consistency::All));
        assert!(
            level(TWO, true, 5, || "t".into()).is_err(),
            "2 of 5 is no level"
        );
        let e = l(ANY, true).unwrap_err();
        assert_eq!(
            e,
            CqlError::Invalid(
                "Consistency level ANY is not yet supported for counter table ks.cf".into()
            )
        );
        assert_eq!(l(SERIAL, true).unwrap_err().code(), 0x2200);
        assert_eq!(l(0x99, true).unwrap_err().code(), 0x000A);
    }

    #[test]
    fn an_op_id_is_a_client_then_a_number() {
        let mut v = b"client-1".to_vec();
        v.extend_from_slice(&7u64.to_be_bytes());
        let payload = vec![(OP_ID_KEY.to_string(), v)];
        assert_eq!(
            op_id(&payload),
            Ok(Some(OpId::new(*b"client-1", 7).unwrap()))
        );
        assert_eq!(op_id(&[]), Ok(None));
        for bad in [
            vec![1; 8],
            vec![1; 7],
            [vec![1], 0u64.to_be_bytes().to_vec()].concat(),
        ] {
            let e = op_id(&[(OP_ID_KEY.to_string(), bad.clone())]).unwrap_err();
            assert_eq!(e.code(), 0x2200, "{bad:?}");
        }
    }

    #[test]
    fn errors_tell_a_driver_whether_to_retry() {
        let unknown = WireError::unknown(ErrorKind::Timeout, "lost");
        let e = error(&unknown, QUORUM, 2, Some("COUNTER"));
        assert!(
            matches!(
                e,
                CqlError::WriteTimeout {
                    write_type: "COUNTER",
                    ..
                }
            ),
            "{e:?}"
        );
        let down = WireError::new(
            ErrorKind::Unavailable,
            "add at QUORUM needs 2 of 3 replicas, 1 live (n2, n3 down); nothing was applied",
        );
        let e = error(&down, QUORUM, 2, Some("COUNTER"));
        assert!(
            matches!(
                e,
                CqlError::Unavailable {
                    required: 2,
                    alive: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        let refused = WireError::not_applied(ErrorKind::Storage, "disk full");
        let e = error(&refused, ONE, 1, Some("COUNTER"));
        assert!(
            matches!(e, CqlError::WriteFailure { received: 0, .. }),
            "{e:?}"
        );
        let e = error(
            &WireError::unknown(ErrorKind::Timeout, "slow"),
            ONE,
            1,
            None,
        );
        assert!(matches!(e, CqlError::ReadTimeout { .. }), "{e:?}");
        let e = error(
            &WireError::new(ErrorKind::Overflow, "big"),
            ONE,
            1,
            Some("COUNTER"),
        );
        assert_eq!(e.code(), 0x2200);
    }
}
