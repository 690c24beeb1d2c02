//! Length-prefixed frames for the client protocol over TCP.
//!
//! ```text
//! frame = len: u32 LE | body: len bytes (one bincode message, see `wire`)
//! ```
//!
//! The length is checked against the reader's limit before a byte of the
//! body is read or allocated, and the buffer grows as the body arrives. A clean end of stream between frames is not an
//! error; one inside a frame is.

use bincode::Encode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed.
    #[error("read frame: {0}")]
    Io(#[from] std::io::Error),
    /// The length prefix is over the limit.
    #[error("frame of {len} bytes is over the {max}-byte limit")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// Limit for this direction.
        max: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({got} of {want} bytes)")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes announced (with the prefix).
        want: usize,
    },
}

/// Writes every buffer `rx` yields to `wr`, coalescing whatever is queued
/// into one write; shuts the writer down when the channel closes. Stops at
/// the first write error (the reader side notices the dead connection).
pub async fn write_coalesced<W: AsyncWrite + Unpin>(mut wr: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut out = Vec::new();
    while let Some(frame) = rx.recv().await {
        // Let the tasks that are ready run first: answers released by one
        // fsync (or requests by one batch of answers) then go out in one
        // `send` instead of one each.
        tokio::task::yield_now().await;
        out.clear();
        out.extend_from_slice(&frame);
        while let Ok(more) = rx.try_recv() {
            out.extend_from_slice(&more);
        }
        // The flush matters under TLS: records may wait in the session.
        if wr.write_all(&out).await.is_err() || wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

/// Bytes reserved ahead of encoding a frame.
const FRAME_BYTES_TYPICAL: usize = 64;

/// Appends one framed message to `out`.
pub fn put_frame<T: Encode>(out: &mut Vec<u8>, msg: &T) {
    // Room for a typical request or answer up front: the encoder writes
    // field by field and would otherwise grow a new buffer several times.
    out.reserve(FRAME_BYTES_TYPICAL);
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    crate::wire::encode_into(msg, out);
    let len = u32::try_from(out.len() - start - 4).expect("messages are far below 4 GiB");
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Reads one frame's body into `buf`. Returns `Ok(false)` at a clean end of
/// stream (no byte of a new frame read). It reads the prefix and the body
/// separately: give it a buffered reader (`tokio::io::BufReader`) on a
/// socket, or every frame costs two system calls.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<bool, FrameError> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut prefix[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(FrameError::Truncated { got, want: 4 });
        }
        got += n;
    }
    let len = u32::from_le_bytes(prefix) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    // The buffer grows as the body arrives, not to the announced length at
    // once: a prefix announcing the limit, then nothing, costs one chunk.
    const GROW_BYTES: usize = 64 << 10;
    buf.clear();
    let mut got = 0;
    while got < len {
        if buf.len() == got {
            buf.resize(len.min(got + GROW_BYTES), 0);
        }
        let n = r.read(&mut buf[got..]).await?;
        if n == 0 {
            return Err(FrameError::Truncated {
                got: got + 4,
                want: len + 4,
            });
        }
        got += n;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_limits_hold() {
        let mut out = Vec::new();
        put_frame(&mut out, &7u64);
        put_frame(&mut out, &String::from("hello"));
        let mut r = &out[..];
        let mut buf = Vec::new();
        assert!(read_frame(&mut r, &mut buf, 64).await.unwrap());
        assert_eq!(crate::wire::decode::<u64>(&buf).unwrap(), 7);
        assert!(read_frame(&mut r, &mut buf, 64).await.unwrap());
        assert_eq!(crate::wire::decode::<String>(&buf).unwrap(), "hello");
        assert!(!read_frame(&mut r, &mut buf, 64).await.unwrap());

        let mut r = &out[..3];
        assert!(matches!(
            read_frame(&mut r, &mut buf, 64).await,
            Err(FrameError::Truncated { .. })
        ));
        // The second frame, cut inside its body.
        let mut r = &out[5..out.len() - 1];
        assert!(matches!(
            read_frame(&mut r, &mut buf, 64).await,
            Err(FrameError::Truncated { .. })
        ));
        let big = u32::MAX.to_le_bytes();
        let mut r = &big[..];
        assert!(matches!(
            read_frame(&mut r, &mut buf, 64).await,
            Err(FrameError::TooLarge { .. })
        ));
    }
}
