//! The native protocol's frame: a 9-byte header, then the body.
//!
//! ```text
//! version u8 | flags u8 | stream i16 | opcode u8 | length u32   (big-endian)
//! version: 0x04 a request, 0x84 a response (the top bit is the direction)
//! flags:   0x01 compressed, 0x02 tracing, 0x04 custom payload, 0x08 warning
//! ```
//!
//! The header is read and judged before anything is allocated for the
//! body: its length against the connection's limit, its version against
//! the one spoken here. A client that starts at a version Tally does not
//! speak (the Python driver starts at 0x42, Node at 0x42, both step down
//! on the answer) gets a protocol error in a v4 header that echoes its
//! stream, with Cassandra's words, which every driver parses; then the
//! connection closes (`research/cql-drivers.md` §1.1).

/// The protocol version spoken here (ScyllaDB's latest too).
pub(crate) const VERSION: u8 = 4;
/// The direction bit of a response's version byte.
const RESPONSE: u8 = 0x80;
/// Bytes of a header.
pub(crate) const HEADER_BYTES: usize = 9;

/// A header flag: the body is compressed.
pub(crate) const FLAG_COMPRESSED: u8 = 0x01;
/// A header flag: the body starts with a custom payload (a bytes map).
pub(crate) const FLAG_CUSTOM_PAYLOAD: u8 = 0x04;

/// The operations of v4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opcode {
    Error = 0x00,
    Startup = 0x01,
    Ready = 0x02,
    Authenticate = 0x03,
    Options = 0x05,
    Supported = 0x06,
    Query = 0x07,
    Result = 0x08,
    Prepare = 0x09,
    Execute = 0x0A,
    Register = 0x0B,
    Event = 0x0C,
    Batch = 0x0D,
    AuthChallenge = 0x0E,
    AuthResponse = 0x0F,
    AuthSuccess = 0x10,
}

impl Opcode {
    /// The opcode of `byte`, if v4 has one.
    pub(crate) fn of(byte: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match byte {
            0x00 => Error,
            0x01 => Startup,
            0x02 => Ready,
            0x03 => Authenticate,
            0x05 => Options,
            0x06 => Supported,
            0x07 => Query,
            0x08 => Result,
            0x09 => Prepare,
            0x0A => Execute,
            0x0B => Register,
            0x0C => Event,
            0x0D => Batch,
            0x0E => AuthChallenge,
            0x0F => AuthResponse,
            0x10 => AuthSuccess,
            _ => return None,
        })
    }
}

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// The version byte, direction bit included.
    pub(crate) version: u8,
    pub(crate) flags: u8,
    /// The request's stream, echoed by its response; -1 for events.
    pub(crate) stream: i16,
    /// The opcode byte (not yet judged: an unknown one is answered with a
    /// protocol error on its stream).
    pub(crate) opcode: u8,
    /// Bytes of the body.
    pub(crate) length: u32,
}

/// Why a request's header is refused. Each is a protocol error; the
/// connection closes after answering it (its framing can no longer be
/// trusted, or the client must reconnect at another version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A version not spoken here (or a response's direction bit).
    Version(u8),
    /// A body longer than the connection's limit.
    TooLong { length: u32, max: usize },
}

impl Refused {
    /// The error's message, in Cassandra's words.
    pub(crate) fn message(&self) -> String {
        match self {
            Refused::Version(v) => format!(
                "Invalid or unsupported protocol version ({v}); supported versions are (4/v4)"
            ),
            Refused::TooLong { length, max } => {
                format!("Request is too big: length {length} exceeds maximum allowed length {max}.")
            }
        }
    }
}

impl Header {
    /// Reads a header from its 9 bytes.
    pub(crate) fn parse(bytes: &[u8; HEADER_BYTES]) -> Header {
        Header {
            version: bytes[0],
            flags: bytes[1],
            stream: i16::from_be_bytes([bytes[2], bytes[3]]),
            opcode: bytes[4],
            length: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]),
        }
    }

    /// Judges a request's header: its version, then its length against
    /// `body_bytes_max`.
    pub(crate) fn check(&self, body_bytes_max: usize) -> Result<(), Refused> {
        if self.version != VERSION {
            return Err(Refused::Version(self.version & !RESPONSE));
        }
        if self.length as usize > body_bytes_max {
            return Err(Refused::TooLong {
                length: self.length,
                max: body_bytes_max,
            });
        }
        Ok(())
    }

    /// The header of a response on `stream` with `body_len` bytes.
    pub(crate) fn response(stream: i16, opcode: Opcode, flags: u8, body_len: usize) -> Header {
        Header {
            version: VERSION | RESPONSE,
            flags,
            stream,
            opcode: opcode as u8,
            length: u32::try_from(body_len).expect("a response body under 4 GiB"),
        }
    }

    /// Appends the header's 9 bytes to `out`.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.push(self.version);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.opcode);
        out.extend_from_slice(&self.length.to_be_bytes());
    }
}

/// A whole response frame: `body` behind its header.
pub(crate) fn response(stream: i16, opcode: Opcode, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    Header::response(stream, opcode, flags, body.len()).write(&mut out);
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: u8, length: u32) -> Header {
        let mut bytes = [0u8; HEADER_BYTES];
        bytes[0] = version;
        bytes[2..4].copy_from_slice(&7i16.to_be_bytes());
        bytes[4] = Opcode::Options as u8;
        bytes[5..].copy_from_slice(&length.to_be_bytes());
        Header::parse(&bytes)
    }

    #[test]
    fn a_header_reads_back_as_written() {
        let h = Header::response(-1, Opcode::Event, FLAG_CUSTOM_PAYLOAD, 300);
        let mut out = Vec::new();
        h.write(&mut out);
        let bytes: [u8; HEADER_BYTES] = out.try_into().unwrap();
        assert_eq!(Header::parse(&bytes), h);
        assert_eq!(bytes[0], 0x84, "a response's version has the direction bit");
        assert_eq!(&bytes[2..4], &[0xff, 0xff], "stream -1");
    }

    #[test]
    fn only_v4_requests_within_the_limit_pass() {
        assert_eq!(header(4, 100).check(100), Ok(()));
        for v in [3, 5, 0x42, 0x41, 0x84] {
            assert_eq!(header(v, 0).check(100), Err(Refused::Version(v & 0x7f)));
        }
        assert_eq!(
            header(4, 101).check(100),
            Err(Refused::TooLong {
                length: 101,
                max: 100
            })
        );
    }

    #[test]
    fn a_refused_version_is_worded_as_drivers_parse_it() {
        let m = Refused::Version(0x42).message();
        // Python looks for this substring; Node for the capitalised one.
        assert!(
            m.to_lowercase().contains("unsupported protocol version"),
            "{m}"
        );
        assert!(
            m.starts_with("Invalid or unsupported protocol version (66)"),
            "{m}"
        );
    }

    #[test]
    fn every_v4_opcode_and_no_other_is_known() {
        let known: Vec<u8> = (0..=255u8).filter(|&b| Opcode::of(b).is_some()).collect();
        assert_eq!(
            known,
            [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
        );
        for b in known {
            assert_eq!(Opcode::of(b).unwrap() as u8, b);
        }
    }
}
