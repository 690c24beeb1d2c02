//! Requests as clients send them: a frame's body decoded by its opcode.
//!
//! ```text
//! STARTUP       [string map] (CQL_VERSION, COMPRESSION, DRIVER_NAME ...)
//! AUTH_RESPONSE [bytes] token (SASL PLAIN: authzid \0 user \0 password)
//! OPTIONS       (empty)
//! QUERY         [long string] query, parameters
//! PREPARE       [long string] query
//! EXECUTE       [short bytes] id, parameters
//! BATCH         type u8, [short] n, n × (kind u8, query or id, [short] k, k [value]),
//!               [consistency], flags u8, [serial consistency], [timestamp]
//! REGISTER      [string list] event types
//! parameters:   [consistency] [byte] flags, then by flag: 0x01 values
//!               (0x40: each named), 0x04 page size, 0x08 paging state,
//!               0x10 serial consistency, 0x20 timestamp
//! ```
//!
//! A body whose custom-payload flag is set starts with a [bytes map]
//! (Tally reads `tally-op-id` from it), taken off before the request.

use super::body::{Malformed, Read, Reader, Value};
use super::frame::{FLAG_CUSTOM_PAYLOAD, Opcode};

/// A query's parameters (of QUERY and EXECUTE).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Params {
    /// The consistency level's code (0x0001 ONE ... 0x000A LOCAL_ONE).
    pub(crate) consistency: u16,
    /// Bound values, in marker order.
    pub(crate) values: Vec<Value>,
    /// Their names, when bound by name (flag 0x40).
    pub(crate) names: Option<Vec<String>>,
    /// The client already has the result's metadata (flag 0x02).
    pub(crate) skip_metadata: bool,
    pub(crate) page_size: Option<i32>,
    pub(crate) paging_state: Option<Vec<u8>>,
    pub(crate) serial_consistency: Option<u16>,
    /// The client's write timestamp, in microseconds.
    pub(crate) timestamp: Option<i64>,
}

/// One statement of a batch: a query's text or a prepared id, and its
/// values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BatchStatement {
    Query(String, Vec<Value>),
    Prepared(Vec<u8>, Vec<Value>),
}

/// A decoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Startup(Vec<(String, String)>),
    AuthResponse(Option<Vec<u8>>),
    Options,
    Query(String, Params),
    Prepare(String),
    Execute(Vec<u8>, Params),
    Batch {
        /// 0 logged, 1 unlogged, 2 counter.
        kind: u8,
        statements: Vec<BatchStatement>,
        params: Params,
    },
    Register(Vec<String>),
}

/// A request and its custom payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub(crate) request: Request,
    pub(crate) payload: Vec<(String, Vec<u8>)>,
}

/// Decodes the body of a request frame with `opcode` and `flags`. An
/// opcode a client may not send (a response's) is malformed; so is a
/// body with bytes left over.
pub(crate) fn decode(opcode: Opcode, flags: u8, body: &[u8]) -> Read<Decoded> {
    let mut r = Reader::new(body);
    let payload = match flags & FLAG_CUSTOM_PAYLOAD != 0 {
        true => r.bytes_map()?,
        false => Vec::new(),
    };
    let request = match opcode {
        Opcode::Startup => Request::Startup(r.string_map()?),
        Opcode::AuthResponse => Request::AuthResponse(r.bytes()?),
        Opcode::Options => Request::Options,
        Opcode::Query => Request::Query(r.long_string()?, params(&mut r)?),
        Opcode::Prepare => Request::Prepare(r.long_string()?),
        Opcode::Execute => Request::Execute(r.short_bytes()?, params(&mut r)?),
        Opcode::Batch => batch(&mut r)?,
        Opcode::Register => Request::Register(r.string_list()?),
        other => return Err(Malformed(format!("{other:?} is not a request"))),
    };
    if r.remaining() > 0 {
        return Err(Malformed(format!(
            "{} bytes left after the {opcode:?} request",
            r.remaining()
        )));
    }
    Ok(Decoded { request, payload })
}

/// Query parameter flags.
const VALUES: u8 = 0x01;
const SKIP_METADATA: u8 = 0x02;
const PAGE_SIZE: u8 = 0x04;
const PAGING_STATE: u8 = 0x08;
const SERIAL: u8 = 0x10;
const TIMESTAMP: u8 = 0x20;
const NAMES: u8 = 0x40;

fn params(r: &mut Reader<'_>) -> Read<Params> {
    let consistency = r.short()?;
    let flags = r.byte()?;
    let mut p = Params {
        consistency,
        skip_metadata: flags & SKIP_METADATA != 0,
        ..Params::default()
    };
    if flags & VALUES != 0 {
        // At most 65535 (a [short]), as Cassandra's limit; each read is
        // bounded by the body.
        let n = r.short()?;
        let named = flags & NAMES != 0;
        let mut names = Vec::new();
        for _ in 0..n {
            if named {
                names.push(r.string()?);
            }
            p.values.push(r.value()?);
        }
        p.names = named.then_some(names);
    }
    if flags & PAGE_SIZE != 0 {
        p.page_size = Some(r.int()?);
    }
    if flags & PAGING_STATE != 0 {
        p.paging_state = r.bytes()?;
    }
    if flags & SERIAL != 0 {
        p.serial_consistency = Some(r.short()?);
    }
    if flags & TIMESTAMP != 0 {
        p.timestamp = Some(r.long()?);
    }
    Ok(p)
}

fn batch(r: &mut Reader<'_>) -> Read<Request> {
    let kind = r.byte()?;
    if kind > 2 {
        return Err(Malformed(format!("batch type {kind}")));
    }
    let n = r.short()?;
    let mut statements = Vec::new();
    for _ in 0..n {
        let prepared = match r.byte()? {
            0 => false,
            1 => true,
            k => return Err(Malformed(format!("batch statement kind {k}"))),
        };
        let (query, id) = match prepared {
            false => (Some(r.long_string()?), None),
            true => (None, Some(r.short_bytes()?)),
        };
        let values = (0..r.short()?).map(|_| r.value()).collect::<Read<_>>()?;
        statements.push(match (query, id) {
            (Some(q), _) => BatchStatement::Query(q, values),
            (_, Some(id)) => BatchStatement::Prepared(id, values),
            _ => unreachable!("a statement is a query or an id"),
        });
    }
    let consistency = r.short()?;
    let flags = r.byte()?;
    if flags & NAMES != 0 {
        return Err(Malformed("values bound by name in a batch".into()));
    }
    let mut params = Params {
        consistency,
        ..Params::default()
    };
    if flags & SERIAL != 0 {
        params.serial_consistency = Some(r.short()?);
    }
    if flags & TIMESTAMP != 0 {
        params.timestamp = Some(r.long()?);
    }
    Ok(Request::Batch {
        kind,
        statements,
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::super::body::{put_int, put_long, put_long_string, put_short, put_string};
    use super::*;

    /// A QUERY body as the Python driver sends one: ONE, values, page
    /// size, a timestamp.
    fn query_body() -> Vec<u8> {
        let mut b = Vec::new();
        put_long_string(&mut b, "UPDATE t SET c = c + ? WHERE pk = ?");
        put_short(&mut b, 0x0001);
        b.push(VALUES | PAGE_SIZE | TIMESTAMP);
        put_short(&mut b, 2);
        put_int(&mut b, 8);
        put_long(&mut b, 5);
        put_int(&mut b, -1);
        put_int(&mut b, 5000);
        put_long(&mut b, 1_700_000_000_000_000);
        b
    }

    #[test]
    fn a_query_and_its_parameters_decode() {
        let d = decode(Opcode::Query, 0, &query_body()).unwrap();
        let Request::Query(q, p) = d.request else {
            panic!("{d:?}")
        };
        assert_eq!(q, "UPDATE t SET c = c + ? WHERE pk = ?");
        assert_eq!(p.consistency, 1);
        assert_eq!(
            p.values,
            [Value::Bytes(5i64.to_be_bytes().to_vec()), Value::Null]
        );
        assert_eq!(
            (p.page_size, p.timestamp, p.names),
            (Some(5000), Some(1_700_000_000_000_000), None)
        );
        assert!(d.payload.is_empty());
    }

    #[test]
    fn a_custom_payload_comes_first_and_is_taken_off() {
        let mut b = Vec::new();
        put_short(&mut b, 1);
        put_string(&mut b, "tally-op-id");
        put_int(&mut b, 3);
        b.extend_from_slice(b"abc");
        b.extend_from_slice(&query_body());
        let d = decode(Opcode::Query, FLAG_CUSTOM_PAYLOAD, &b).unwrap();
        assert_eq!(d.payload, [("tally-op-id".to_string(), b"abc".to_vec())]);
        assert!(matches!(d.request, Request::Query(..)));
    }

    #[test]
    fn a_counter_batch_of_a_query_and_a_prepared_statement_decodes() {
        let mut b = vec![2];
        put_short(&mut b, 2);
        b.push(0);
        put_long_string(&mut b, "UPDATE t SET c = c + 1 WHERE pk = 0");
        put_short(&mut b, 0);
        b.push(1);
        put_short(&mut b, 2);
        b.extend_from_slice(b"id");
        put_short(&mut b, 1);
        put_int(&mut b, -2);
        put_short(&mut b, 0x0004);
        b.push(TIMESTAMP);
        put_long(&mut b, 42);
        let d = decode(Opcode::Batch, 0, &b).unwrap();
        let Request::Batch {
            kind,
            statements,
            params,
        } = d.request
        else {
            panic!("{d:?}")
        };
        assert_eq!(kind, 2);
        assert_eq!(
            statements,
            [
                BatchStatement::Query("UPDATE t SET c = c + 1 WHERE pk = 0".into(), vec![]),
                BatchStatement::Prepared(b"id".to_vec(), vec![Value::NotSet]),
            ]
        );
        assert_eq!((params.consistency, params.timestamp), (4, Some(42)));
    }

    #[test]
    fn a_truncated_or_padded_body_and_a_response_opcode_are_malformed() {
        let body = query_body();
        for cut in 0..body.len() {
            assert!(
                decode(Opcode::Query, 0, &body[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut padded = body.clone();
        padded.push(0);
        assert!(decode(Opcode::Query, 0, &padded).is_err());
        assert!(decode(Opcode::Result, 0, &[]).is_err());
        assert_eq!(
            decode(Opcode::Options, 0, &[]).unwrap().request,
            Request::Options
        );
    }

    proptest::proptest! {
        /// Whatever bytes a body holds, every opcode decodes them or
        /// answers malformed: never a panic.
        #[test]
        fn any_body_decodes_or_is_malformed(
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            opcode in 0u8..=0x10,
            flags in proptest::num::u8::ANY,
        ) {
            if let Some(op) = Opcode::of(opcode) {
                let _ = decode(op, flags, &body);
            }
        }
    }
}
