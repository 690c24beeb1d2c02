//! The frames in what a connection has read: bytes go in as they come
//! (a read may end anywhere), whole frames come out, each header judged
//! before its body is waited for. Without I/O.

use tally_world::Instant;

use bytes::{Buf, BytesMut};

use super::frame::{HEADER_BYTES, Header, Refused};

/// What the bytes read so far hold next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// A whole frame: its header and body.
    Frame(Header, Vec<u8>),
    /// A header refused (its version, its length): the connection ends.
    Refused(Header, Refused),
    /// Not a whole frame yet.
    More,
}

/// The bytes read and not yet taken as frames.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    buf: BytesMut,
    /// When the first byte of the frame not yet whole came.
    begun: Option<Instant>,
}

impl Inbox {
    /// The buffer to read into.
    pub(crate) fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Notes that bytes came at `now` (a frame begun, if none was).
    pub(crate) fn read_at(&mut self, now: Instant) {
        if !self.buf.is_empty() {
            self.begun.get_or_insert(now);
        }
    }

    /// When the frame being read began, if one is.
    pub(crate) fn begun(&self) -> Option<Instant> {
        self.begun
    }

    /// The next frame, if the bytes hold it whole; a body may be at most
    /// `body_max` bytes.
    pub(crate) fn next(&mut self, body_max: usize) -> Next {
        let Some(head) = self.buf.get(..HEADER_BYTES) else {
            return Next::More;
        };
        let header = Header::parse(head.try_into().expect("a header's bytes"));
        if let Err(r) = header.check(body_max) {
            return Next::Refused(header, r);
        }
        let whole = HEADER_BYTES + header.length as usize;
        if self.buf.len() < whole {
            self.buf.reserve(whole - self.buf.len());
            return Next::More;
        }
        self.buf.advance(HEADER_BYTES);
        let body = self.buf.split_to(header.length as usize).to_vec();
        self.begun = None;
        Next::Frame(header, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stream: i16, body: &[u8]) -> Vec<u8> {
        let mut f = vec![0x04, 0, 0, 0, 0x07];
        f[2..4].copy_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(&(body.len() as u32).to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn frames_come_out_whole_however_the_bytes_came() {
        let mut bytes = frame(1, b"abc");
        bytes.extend(frame(2, b""));
        bytes.extend(frame(3, b"xy"));
        for cut in 0..bytes.len() {
            let mut inbox = Inbox::default();
            let mut out = Vec::new();
            for part in [&bytes[..cut], &bytes[cut..]] {
                inbox.buffer().extend_from_slice(part);
                while let Next::Frame(h, body) = inbox.next(1024) {
                    out.push((h.stream, body));
                }
            }
            let want = vec![(1, b"abc".to_vec()), (2, vec![]), (3, b"xy".to_vec())];
            assert_eq!(out, want, "cut at {cut}");
            assert!(inbox.begun().is_none());
        }
    }

    #[test]
    fn a_header_is_judged_before_its_body_comes() {
        let mut inbox = Inbox::default();
        let f = frame(5, &[0; 100]);
        inbox.buffer().extend_from_slice(&f[..HEADER_BYTES]);
        assert!(matches!(inbox.next(99), Next::Refused(h, _) if h.stream == 5));
        let mut inbox = Inbox::default();
        let mut v3 = frame(1, b"");
        v3[0] = 0x03;
        inbox.buffer().extend_from_slice(&v3);
        assert!(matches!(inbox.next(99), Next::Refused(..)));
    }

    #[test]
    fn a_frame_begun_is_timed_from_its_first_byte() {
        let mut inbox = Inbox::default();
        let t = Instant::now();
        inbox.read_at(t);
        assert_eq!(inbox.begun(), None, "nothing read");
        inbox.buffer().extend_from_slice(&frame(1, b"abc")[..4]);
        inbox.read_at(t);
        inbox.read_at(t + std::time::Duration::from_secs(1));
        assert_eq!(inbox.begun(), Some(t));
    }
}
