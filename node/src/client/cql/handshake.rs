//! A connection's handshake, as a state machine: which request may come
//! when, and what answers it. The connection task feeds it each decoded
//! request and does what it says; checking a password is the task's (it
//! waits on `security::auth`), and so is running a statement.
//!
//! ```text
//! Startup ──STARTUP──▶ Ready                      (no users configured)
//!         ──STARTUP──▶ Authenticating ──AUTH_RESPONSE ok──▶ Ready
//!                                     ──AUTH_RESPONSE bad─▶ Authenticating (BadCredentials)
//! OPTIONS is answered in every stage (drivers send it first, and later
//! as their heartbeat); REGISTER and statements only once Ready.
//! ```

use super::request::Request;
use super::response::{self, CqlError};

/// Where a connection is in its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Before STARTUP.
    Startup,
    /// After STARTUP, before a password was accepted.
    Authenticating,
    /// Statements may run.
    Ready,
}

/// What the connection does with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Answer SUPPORTED with this body.
    Supported(Vec<u8>),
    /// Answer READY.
    Ready,
    /// Answer AUTHENTICATE with this body.
    Authenticate(Vec<u8>),
    /// Check this user's password; then [`Handshake::logged_in`] or
    /// answer `BadCredentials`.
    CheckPassword { user: Vec<u8>, password: Vec<u8> },
    /// Run the request (a statement, or a REGISTER).
    Run,
    /// Answer this error; the connection stays open.
    Refuse(CqlError),
}

/// A connection's handshake.
#[derive(Clone, Debug)]
pub(crate) struct Handshake {
    stage: Stage,
    /// Whether STARTUP asks for a password (users are configured).
    passwords: bool,
    /// STARTUP asked for LZ4 (`compress`).
    lz4: bool,
}

impl Handshake {
    /// A connection's first state; `passwords` when users are configured.
    pub(crate) fn new(passwords: bool) -> Handshake {
        Handshake {
            stage: Stage::Startup,
            passwords,
            lz4: false,
        }
    }

    #[cfg(test)]
    pub(crate) fn stage(&self) -> Stage {
        self.stage
    }

    /// What to do with `request`.
    pub(crate) fn step(&mut self, request: &Request) -> Step {
        match (self.stage, request) {
            (_, Request::Options) => Step::Supported(response::supported()),
            (Stage::Startup, Request::Startup(options)) => self.startup(options),
            (Stage::Startup, _) => Step::Refuse(CqlError::Protocol(
                "Unexpected message, expecting STARTUP or OPTIONS".into(),
            )),
            (Stage::Authenticating, Request::AuthResponse(token)) => {
                match plain(token.as_deref().unwrap_or_default()) {
                    Some((user, password)) => Step::CheckPassword { user, password },
                    None => Step::Refuse(CqlError::BadCredentials(
                        "Authentication failed: a SASL PLAIN token holds a user and a password"
                            .into(),
                    )),
                }
            }
            (Stage::Authenticating, _) => Step::Refuse(CqlError::Protocol(
                "Unexpected message, expecting SASL response".into(),
            )),
            (Stage::Ready, Request::Startup(_)) => Step::Refuse(CqlError::Protocol(
                "Unexpected message STARTUP, the connection is already initialized".into(),
            )),
            (Stage::Ready, Request::AuthResponse(_)) => Step::Refuse(CqlError::Protocol(
                "Unexpected message AUTH_RESPONSE, the connection is already authenticated".into(),
            )),
            (Stage::Ready, _) => Step::Run,
        }
    }

    fn startup(&mut self, options: &[(String, String)]) -> Step {
        // ScyllaDB takes any version a driver names (its Rust driver says
        // 4.0.0): the statements decide what is served. Only one that is
        // not a version is refused.
        let version = options.iter().find(|(k, _)| k == "CQL_VERSION");
        if let Some((_, v)) = version
            && !is_version(v)
        {
            return Step::Refuse(CqlError::Protocol(format!(
                "Invalid or unsupported CQL version {v}; this node speaks {}",
                response::CQL_VERSION
            )));
        }
        let compression = options.iter().find(|(k, _)| k == "COMPRESSION");
        match compression {
            Some((_, c)) if c.eq_ignore_ascii_case(super::compress::LZ4) => self.lz4 = true,
            Some((_, c)) => {
                return Step::Refuse(CqlError::Protocol(format!(
                    "Unknown compression algorithm: {c}"
                )));
            }
            None => {}
        }
        match self.passwords {
            true => {
                self.stage = Stage::Authenticating;
                Step::Authenticate(response::authenticate())
            }
            false => {
                self.stage = Stage::Ready;
                Step::Ready
            }
        }
    }

    /// Whether frames may be compressed with LZ4 (STARTUP asked for it).
    pub(crate) fn lz4(&self) -> bool {
        self.lz4
    }

    /// The password was right: statements may run.
    pub(crate) fn logged_in(&mut self) {
        assert_eq!(self.stage, Stage::Authenticating, "a login without asking");
        self.stage = Stage::Ready;
    }
}

/// Whether `v` is a CQL version: `major.minor[.patch]`, numbers.
fn is_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The user and password of a SASL PLAIN token, `authzid \0 user \0
/// password` (the authorization id is ignored, as Cassandra does).
fn plain(token: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut parts = token.split(|&b| b == 0);
    let (_authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || user.is_empty() {
        return None;
    }
    Some((user.to_vec(), password.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup() -> Request {
        Request::Startup(vec![("CQL_VERSION".into(), "3.0.0".into())])
    }

    #[test]
    fn without_users_startup_makes_the_connection_ready() {
        let mut h = Handshake::new(false);
        assert!(matches!(h.step(&Request::Options), Step::Supported(_)));
        let early = h.step(&Request::Prepare("SELECT * FROM system.local".into()));
        assert!(
            matches!(early, Step::Refuse(CqlError::Protocol(_))),
            "{early:?}"
        );
        assert_eq!(h.step(&startup()), Step::Ready);
        assert_eq!(h.stage(), Stage::Ready);
        assert_eq!(h.step(&Request::Register(vec![])), Step::Run);
        assert!(
            matches!(h.step(&Request::Options), Step::Supported(_)),
            "a heartbeat"
        );
        assert!(matches!(h.step(&startup()), Step::Refuse(_)), "twice");
    }

    #[test]
    fn with_users_a_plain_token_is_checked_before_any_statement() {
        let mut h = Handshake::new(true);
        assert!(matches!(h.step(&startup()), Step::Authenticate(_)));
        let early = h.step(&Request::Query("SELECT 1".into(), Default::default()));
        assert!(
            matches!(early, Step::Refuse(CqlError::Protocol(_))),
            "{early:?}"
        );
        let token = Request::AuthResponse(Some(b"\0alice\0s3cret".to_vec()));
        assert_eq!(
            h.step(&token),
            Step::CheckPassword {
                user: b"alice".to_vec(),
                password: b"s3cret".to_vec()
            }
        );
        // A wrong password leaves it waiting for another.
        assert_eq!(h.stage(), Stage::Authenticating);
        h.logged_in();
        assert_eq!(h.step(&Request::Register(vec![])), Step::Run);
    }

    #[test]
    fn a_token_that_is_not_plain_is_bad_credentials() {
        for token in [&b""[..], b"alice", b"\0\0pw", b"a\0b\0c\0d"] {
            assert_eq!(plain(token), None, "{token:?}");
        }
        assert_eq!(
            plain(b"admin\0bob\0pw"),
            Some((b"bob".to_vec(), b"pw".to_vec()))
        );
        let mut h = Handshake::new(true);
        h.step(&startup());
        let bad = h.step(&Request::AuthResponse(None));
        assert!(
            matches!(bad, Step::Refuse(CqlError::BadCredentials(_))),
            "{bad:?}"
        );
    }

    #[test]
    fn a_cql_version_or_compression_not_spoken_is_refused() {
        let mut h = Handshake::new(false);
        let bad = Request::Startup(vec![("CQL_VERSION".into(), "four".into())]);
        assert!(matches!(h.step(&bad), Step::Refuse(CqlError::Protocol(_))));
        let snappy = Request::Startup(vec![("COMPRESSION".into(), "snappy".into())]);
        assert!(matches!(
            h.step(&snappy),
            Step::Refuse(CqlError::Protocol(_))
        ));
        assert!(!h.lz4());
        assert_eq!(h.stage(), Stage::Startup);
        // The Rust driver's 4.0.0 is taken, as ScyllaDB takes it.
        let v4 = Request::Startup(vec![
            ("CQL_VERSION".into(), "4.0.0".into()),
            ("COMPRESSION".into(), "lz4".into()),
        ]);
        assert!(matches!(h.step(&v4), Step::Ready));
        assert!(h.lz4(), "LZ4 asked for, and spoken");
    }
}
