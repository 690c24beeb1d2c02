//! How large what travels may be: messages, frames, rows, members,
//! batches (`wire` re-exports these).

/// Largest encoded message, either protocol. A row answer is the biggest
/// thing on the wire.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;
/// Largest client request frame: a key is at most 1 KiB + 256 B.
pub const REQUEST_FRAME_BYTES_MAX: usize = 64 << 10;
/// Most columns one row read returns: with 256-byte column names and a few
/// shards each this stays far below [`MESSAGE_BYTES_MAX`].
pub const ROW_COLUMNS_MAX: usize = 10_000;
/// Longest member of a unique counter, in bytes.
pub const MEMBER_BYTES_MAX: usize = 256;
/// Most members one request may carry: an admission's writes (the count
/// and each member) fit one peer batch.
pub const MEMBERS_MAX: usize = 500;
/// Largest number of messages one peer batch may hold.
pub const BATCH_MESSAGES_MAX: usize = 512;

const _: () = assert!(MEMBERS_MAX < BATCH_MESSAGES_MAX);
