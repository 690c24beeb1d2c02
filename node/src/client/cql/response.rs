//! Responses as drivers read them: each one's body, and the errors with
//! Cassandra's codes and the fields each code carries.
//!
//! ```text
//! ERROR         [int] code, [string] message, then by code:
//!               Unavailable   [consistency] cl, [int] required, [int] alive
//!               WriteTimeout  [consistency] cl, [int] received, [int] blockfor, [string] write type
//!               ReadTimeout   [consistency] cl, [int] received, [int] blockfor, u8 data present
//!               WriteFailure  [consistency] cl, [int] received, [int] blockfor, [int] failures, [string] write type
//!               AlreadyExists [string] keyspace, [string] table
//!               Unprepared    [short bytes] id
//! READY         (empty)
//! AUTHENTICATE  [string] authenticator class
//! SUPPORTED     [string multimap]
//! AUTH_SUCCESS  [bytes] token (null)
//! RESULT        [int] kind: 1 Void, 3 Set_keyspace [string] ...
//! ```
//!
//! What a driver does with an error decides whether an increment is
//! counted twice: the Python driver sends the request again to the next
//! host on `ServerError`, `Overloaded` or `IsBootstrapping` whatever the
//! statement, and never replays a `WriteTimeout` of type `COUNTER`. So an
//! add whose outcome is unknown is a `WriteTimeout`, and only one that was
//! certainly not applied may be anything else (`research/cql-drivers.md`).

use super::body::{
    put_bytes, put_int, put_short, put_short_bytes, put_string, put_string_multimap,
};
use super::frame::{self, Opcode};

/// The software version Tally reports, ScyllaDB's: drivers then read the
/// `system_schema` tables only (no virtual tables, no `peers_v2`).
pub(crate) const RELEASE_VERSION: &str = "3.0.8";
/// The CQL version Tally reports (ScyllaDB's).
pub(crate) const CQL_VERSION: &str = "3.3.1";
/// The authenticator drivers expect for a user and a password.
pub(crate) const AUTHENTICATOR: &str = "org.apache.cassandra.auth.PasswordAuthenticator";

/// An error, with the fields its code carries.
#[allow(
    dead_code,
    reason = "counter writes, the next step of issue 40, answer the rest"
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CqlError {
    /// 0x0000: the server failed; the request was not applied.
    Server(String),
    /// 0x000A.
    Protocol(String),
    /// 0x0100.
    BadCredentials(String),
    /// 0x1000: too few replicas alive to try; not applied.
    Unavailable {
        message: String,
        consistency: u16,
        required: i32,
        alive: i32,
    },
    /// 0x1001: not applied.
    Overloaded(String),
    /// 0x1100: the outcome is unknown.
    WriteTimeout {
        message: String,
        consistency: u16,
        received: i32,
        block_for: i32,
        write_type: &'static str,
    },
    /// 0x1200.
    ReadTimeout {
        message: String,
        consistency: u16,
        received: i32,
        block_for: i32,
        data_present: bool,
    },
    /// 0x1500: `received` 0 says no replica applied it.
    WriteFailure {
        message: String,
        consistency: u16,
        received: i32,
        block_for: i32,
        failures: i32,
        write_type: &'static str,
    },
    /// 0x2000.
    Syntax(String),
    /// 0x2100.
    Unauthorized(String),
    /// 0x2200.
    Invalid(String),
    /// 0x2300.
    Config(String),
    /// 0x2400.
    AlreadyExists {
        message: String,
        keyspace: String,
        table: String,
    },
    /// 0x2500: the prepared id is not known here; the driver prepares
    /// the statement again.
    Unprepared { message: String, id: Vec<u8> },
}

impl CqlError {
    /// The error's code.
    pub(crate) fn code(&self) -> i32 {
        match self {
            CqlError::Server(_) => 0x0000,
            CqlError::Protocol(_) => 0x000A,
            CqlError::BadCredentials(_) => 0x0100,
            CqlError::Unavailable { .. } => 0x1000,
            CqlError::Overloaded(_) => 0x1001,
            CqlError::WriteTimeout { .. } => 0x1100,
            CqlError::ReadTimeout { .. } => 0x1200,
            CqlError::WriteFailure { .. } => 0x1500,
            CqlError::Syntax(_) => 0x2000,
            CqlError::Unauthorized(_) => 0x2100,
            CqlError::Invalid(_) => 0x2200,
            CqlError::Config(_) => 0x2300,
            CqlError::AlreadyExists { .. } => 0x2400,
            CqlError::Unprepared { .. } => 0x2500,
        }
    }

    /// The error's message.
    pub(crate) fn message(&self) -> &str {
        match self {
            CqlError::Server(m)
            | CqlError::Protocol(m)
            | CqlError::BadCredentials(m)
            | CqlError::Overloaded(m)
            | CqlError::Syntax(m)
            | CqlError::Unauthorized(m)
            | CqlError::Invalid(m)
            | CqlError::Config(m)
            | CqlError::Unavailable { message: m, .. }
            | CqlError::WriteTimeout { message: m, .. }
            | CqlError::ReadTimeout { message: m, .. }
            | CqlError::WriteFailure { message: m, .. }
            | CqlError::AlreadyExists { message: m, .. }
            | CqlError::Unprepared { message: m, .. } => m,
        }
    }

    /// The ERROR body.
    pub(crate) fn body(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put_int(&mut b, self.code());
        put_string(&mut b, self.message());
        match self {
            CqlError::Unavailable {
                consistency,
                required,
                alive,
                ..
            } => {
                put_short(&mut b, *consistency);
                put_int(&mut b, *required);
                put_int(&mut b, *alive);
            }
            CqlError::WriteTimeout {
                consistency,
                received,
                block_for,
                write_type,
                ..
            } => {
                put_short(&mut b, *consistency);
                put_int(&mut b, *received);
                put_int(&mut b, *block_for);
                put_string(&mut b, write_type);
            }
            CqlError::ReadTimeout {
                consistency,
                received,
                block_for,
                data_present,
                ..
            } => {
                put_short(&mut b, *consistency);
                put_int(&mut b, *received);
                put_int(&mut b, *block_for);
                b.push(u8::from(*data_present));
            }
            CqlError::WriteFailure {
                consistency,
                received,
                block_for,
                failures,
                write_type,
                ..
            } => {
                put_short(&mut b, *consistency);
                put_int(&mut b, *received);
                put_int(&mut b, *block_for);
                put_int(&mut b, *failures);
                put_string(&mut b, write_type);
            }
            CqlError::AlreadyExists {
                keyspace, table, ..
            } => {
                put_string(&mut b, keyspace);
                put_string(&mut b, table);
            }
            CqlError::Unprepared { id, .. } => put_short_bytes(&mut b, id),
            _ => {}
        }
        b
    }

    /// The whole ERROR frame on `stream`.
    pub(crate) fn frame(&self, stream: i16) -> Vec<u8> {
        frame::response(stream, Opcode::Error, 0, &self.body())
    }
}

/// SUPPORTED's body: the CQL version, and `COMPRESSION` (LZ4; the key
/// must be there: the Python driver indexes it); no ScyllaDB shard keys
/// (the scylla driver would then add `USING TIMEOUT` to its schema
/// queries).
pub(crate) fn supported() -> Vec<u8> {
    let mut b = Vec::new();
    put_string_multimap(
        &mut b,
        &[("CQL_VERSION", &[CQL_VERSION]), ("COMPRESSION", &["lz4"])],
    );
    b
}

/// AUTHENTICATE's body.
pub(crate) fn authenticate() -> Vec<u8> {
    let mut b = Vec::new();
    put_string(&mut b, AUTHENTICATOR);
    b
}

/// AUTH_SUCCESS's body: no token.
pub(crate) fn auth_success() -> Vec<u8> {
    let mut b = Vec::new();
    put_bytes(&mut b, None);
    b
}

/// RESULT kinds.
const VOID: i32 = 0x0001;
const SET_KEYSPACE: i32 = 0x0003;

/// A RESULT that carries nothing (a write's).
pub(crate) fn void() -> Vec<u8> {
    let mut b = Vec::new();
    put_int(&mut b, VOID);
    b
}

/// The RESULT of `USE keyspace`.
pub(crate) fn set_keyspace(keyspace: &str) -> Vec<u8> {
    let mut b = Vec::new();
    put_int(&mut b, SET_KEYSPACE);
    put_string(&mut b, keyspace);
    b
}

#[cfg(test)]
mod tests {
    use super::super::body::Reader;
    use super::*;

    #[test]
    fn a_counter_write_timeout_carries_its_fields_in_order() {
        let e = CqlError::WriteTimeout {
            message: "Operation timed out - received only 1 responses.".into(),
            consistency: 0x0004,
            received: 1,
            block_for: 2,
            write_type: "COUNTER",
        };
        let body = e.body();
        let mut r = Reader::new(&body);
        assert_eq!(r.int(), Ok(0x1100));
        assert_eq!(
            r.string().unwrap(),
            "Operation timed out - received only 1 responses."
        );
        assert_eq!((r.short(), r.int(), r.int()), (Ok(4), Ok(1), Ok(2)));
        assert_eq!(r.string().unwrap(), "COUNTER");
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn each_error_has_cassandras_code() {
        let codes = [
            (CqlError::Server(String::new()), 0x0000),
            (CqlError::Protocol(String::new()), 0x000A),
            (CqlError::BadCredentials(String::new()), 0x0100),
            (CqlError::Overloaded(String::new()), 0x1001),
            (CqlError::Syntax(String::new()), 0x2000),
            (CqlError::Unauthorized(String::new()), 0x2100),
            (CqlError::Invalid(String::new()), 0x2200),
            (CqlError::Config(String::new()), 0x2300),
        ];
        for (e, code) in codes {
            assert_eq!(e.code(), code, "{e:?}");
            let body = e.body();
            assert_eq!(Reader::new(&body).int(), Ok(code));
        }
        let unprepared = CqlError::Unprepared {
            message: "unknown".into(),
            id: b"abc".to_vec(),
        };
        let body = unprepared.body();
        let mut r = Reader::new(&body);
        assert_eq!(
            (r.int(), r.string().unwrap()),
            (Ok(0x2500), "unknown".into())
        );
        assert_eq!(r.short_bytes(), Ok(b"abc".to_vec()));
    }

    #[test]
    fn supported_always_names_compression() {
        let body = supported();
        let mut r = Reader::new(&body);
        assert_eq!(r.short(), Ok(2));
        assert_eq!(r.string().unwrap(), "CQL_VERSION");
        assert_eq!(r.string_list().unwrap(), ["3.3.1"]);
        assert_eq!(r.string().unwrap(), "COMPRESSION");
        assert_eq!(r.string_list().unwrap(), ["lz4"]);
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn an_error_frame_echoes_the_stream_in_a_v4_response_header() {
        let f = CqlError::Protocol("bad".into()).frame(300);
        assert_eq!(f[0], 0x84);
        assert_eq!(i16::from_be_bytes([f[2], f[3]]), 300);
        assert_eq!(f[4], Opcode::Error as u8);
        let len = u32::from_be_bytes([f[5], f[6], f[7], f[8]]) as usize;
        assert_eq!(len, f.len() - frame::HEADER_BYTES);
    }
}
