//! A declared length is checked against the bytes that are there, not only
//! against the 16 MiB message limit: an 11-byte client frame that claims a
//! 16 MiB key is refused without allocating anything near that.
//!
//! The allocator of this test binary remembers the largest allocation each
//! thread made, so the test can see what decoding one frame allocated.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use tally_net::frame::read_frame;
use tally_net::wire::{self, ClientRequest, MESSAGE_BYTES_MAX, REQUEST_FRAME_BYTES_MAX};

/// Forwards to the system allocator and records the largest request.
struct Largest;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(bytes: usize) {
    // `try_with`: the slot is gone while the thread exits.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(bytes)));
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; recording a size touches a const-initialised
// thread-local `Cell`, which never allocates.
#[allow(unsafe_code, reason = "a counting allocator, for this test only")]
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's layout is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` came from this allocator, that is from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Largest = Largest;

/// Most a frame of a few bytes may make the decoder allocate at once.
const SMALL_FRAME_ALLOC_BYTES_MAX: usize = 64 << 10;

/// A frame: request id 0, then `op` (variant index and fields), then a
/// varint length of a byte string just under the message limit, and
/// nothing of the string itself.
fn frame_claiming_a_huge_string(variant: u8) -> Vec<u8> {
    let declared = u32::try_from(MESSAGE_BYTES_MAX - 64).unwrap();
    let mut body = vec![0u8, variant, 252];
    body.extend_from_slice(&declared.to_le_bytes());
    let mut frame = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Reads and decodes one frame on a fresh allocation record; answers
/// whether it decoded and the largest allocation made meanwhile.
fn decode_frame(frame: &[u8]) -> (bool, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut buf = Vec::new();
    LARGEST.with(|l| l.set(0));
    let mut r = frame;
    let read = rt.block_on(read_frame(&mut r, &mut buf, REQUEST_FRAME_BYTES_MAX));
    assert!(read.unwrap(), "a whole frame is there");
    let decoded = wire::decode::<ClientRequest>(&buf).is_ok();
    (decoded, LARGEST.with(Cell::get))
}

#[test]
fn an_11_byte_frame_claiming_a_16_mib_key_allocates_no_16_mib() {
    // `ClientOp::Add`'s key partition and `ClientOp::GetRow`'s partition.
    for (what, variant) in [("Add key", 1u8), ("GetRow partition", 3)] {
        let frame = frame_claiming_a_huge_string(variant);
        assert_eq!(frame.len(), 11, "{what}");
        let (decoded, largest) = decode_frame(&frame);
        assert!(!decoded, "{what}: 7 bytes cannot hold a 16 MiB string");
        assert!(
            largest <= SMALL_FRAME_ALLOC_BYTES_MAX,
            "{what}: decoding an 11-byte frame allocated {largest} bytes at once"
        );
    }
}

#[test]
fn a_frame_prefix_claiming_the_limit_allocates_as_bytes_arrive() {
    // A client reading answers: a prefix announcing the largest message,
    // then 3 bytes of it.
    let mut frame = u32::try_from(MESSAGE_BYTES_MAX)
        .unwrap()
        .to_le_bytes()
        .to_vec();
    frame.extend_from_slice(&[0, 0, 0]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut buf = Vec::new();
    LARGEST.with(|l| l.set(0));
    let mut r = &frame[..];
    assert!(
        rt.block_on(read_frame(&mut r, &mut buf, MESSAGE_BYTES_MAX))
            .is_err()
    );
    let largest = LARGEST.with(Cell::get);
    assert!(
        largest <= SMALL_FRAME_ALLOC_BYTES_MAX,
        "a 7-byte truncated frame allocated {largest} bytes at once"
    );
}

#[test]
fn real_requests_still_decode() {
    let req = ClientRequest {
        id: 7,
        op: wire::ClientOp::GetRow {
            partition: vec![b'p'; 1024],
            cl: wire::Consistency::All,
        },
    };
    let mut frame = Vec::new();
    tally_net::frame::put_frame(&mut frame, &req);
    let (decoded, _) = decode_frame(&frame);
    assert!(decoded);
}
