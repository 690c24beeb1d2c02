//! LZ4, the one compression Tally speaks on the CQL port: after a STARTUP
//! that asked for `lz4`, a frame with the compression flag carries its
//! body as the uncompressed length (4 bytes, big-endian) and one LZ4
//! block. Requests may come either way; answers are compressed once
//! they are large enough to gain ([`COMPRESS_MIN`]). Without I/O.

use super::frame::{FLAG_COMPRESSED, HEADER_BYTES};

/// The name drivers ask for.
pub(crate) const LZ4: &str = "lz4";
/// Smallest body worth compressing.
pub(crate) const COMPRESS_MIN: usize = 256;

/// The body a compressed frame carries, uncompressed: at most `max`
/// bytes, or why it is refused.
pub(crate) fn decompress(body: &[u8], max: usize) -> Result<Vec<u8>, String> {
    let (len, block) = body
        .split_first_chunk::<4>()
        .ok_or("a compressed body shorter than its length")?;
    let len = u32::from_be_bytes(*len) as usize;
    if len > max {
        return Err(format!(
            "a compressed body of {len} bytes uncompressed, over the limit of {max}"
        ));
    }
    match lz4_flex::block::decompress(block, len) {
        Ok(out) if out.len() == len => Ok(out),
        Ok(out) => Err(format!(
            "a compressed body of {} bytes, not the {len} it says",
            out.len()
        )),
        Err(e) => Err(format!("a compressed body that is not LZ4: {e}")),
    }
}

/// `frame` (a whole response frame) with its body compressed, when it is
/// large enough to gain; else as it is.
pub(crate) fn squeeze(frame: Vec<u8>) -> Vec<u8> {
    let Some(body) = frame
        .get(HEADER_BYTES..)
        .filter(|b| b.len() >= COMPRESS_MIN)
    else {
        return frame;
    };
    let len = u32::try_from(body.len()).expect("a frame under 4 GiB");
    let block = lz4_flex::block::compress(body);
    let mut out = Vec::with_capacity(HEADER_BYTES + 4 + block.len());
    out.extend_from_slice(&frame[..HEADER_BYTES]);
    out[1] |= FLAG_COMPRESSED;
    let sent = u32::try_from(4 + block.len()).expect("a frame under 4 GiB");
    out[5..9].copy_from_slice(&sent.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&block);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = vec![0x84, 0, 0, 7, 0x08];
        f.extend_from_slice(&(body.len() as u32).to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn a_large_answer_goes_compressed_and_comes_back_whole() {
        let body: Vec<u8> = (0..2000u32).flat_map(|i| (i % 7).to_be_bytes()).collect();
        let f = squeeze(frame(&body));
        assert_eq!(f[1] & FLAG_COMPRESSED, FLAG_COMPRESSED);
        assert_eq!(&f[2..5], &[0, 7, 0x08], "the stream and opcode kept");
        let sent = u32::from_be_bytes([f[5], f[6], f[7], f[8]]) as usize;
        assert_eq!(sent, f.len() - HEADER_BYTES);
        assert!(sent < body.len());
        assert_eq!(decompress(&f[HEADER_BYTES..], 1 << 20), Ok(body));
        let small = frame(b"tiny");
        assert_eq!(squeeze(small.clone()), small);
    }

    #[test]
    fn a_bad_compressed_body_is_an_error() {
        let body = vec![7u8; 5000];
        let good = squeeze(frame(&body))[HEADER_BYTES..].to_vec();
        assert!(decompress(&good, 4999).is_err(), "over the limit");
        assert!(decompress(&good[..3], 1 << 20).is_err());
        let mut lying = good.clone();
        lying[3] = lying[3].wrapping_add(1);
        assert!(decompress(&lying, 1 << 20).is_err(), "a wrong length");
        let mut garbage = good;
        garbage.truncate(10);
        assert!(decompress(&garbage, 1 << 20).is_err());
    }
}
