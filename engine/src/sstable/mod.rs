//! SSTables: immutable, sorted, checksummed files of cells.
//!
//! # Format (version 3)
//!
//! ```text
//! file   = block* dict index bloom footer
//! block  = entry* | crc32(entries) u32 LE                about `block_bytes` each
//! entry  = key cell                                      (see `codec`; shard id = varint
//!                                                          index into `dict`)
//! dict   = varint n | (counter_id u64 LE)* | crc32 u32 LE
//! index  = varint nblocks | (varint offset | varint len | key)* | crc32 u32 LE
//!                                                        (key = first key of the block)
//! bloom  = bits | crc32 u32 LE                           (10 bits per key, 7 probes)
//! footer = magic "TALLYSST" | version u32 | entries u64 | dict_off u64 | dict_len u32
//!        | index_off u64 | index_len u32 | bloom_off u64 | bloom_len u32
//!        | crc32(all preceding footer bytes) u32         (60 bytes, all LE)
//! ```
//!
//! Every byte of the file is covered by a checksum, so a flipped byte is
//! always reported as [`crate::Error::Corruption`] naming the file and the
//! offset of the damaged block or section, never read as a wrong value. The
//! footer, dictionary, index and bloom filter are verified when the table is
//! opened; a data block each time it is read.
//!
//! Counter ids repeat across cells (a cluster has a handful of incarnations),
//! so each table stores them once, in `dict`, and entries refer to them by a
//! one-byte index. Clocks and values are varints. That keeps a counter with a
//! 16-byte key and three shards near 40 bytes on disk.
//!
//! # Crash story
//!
//! A table is written to `NNNNNN.sst.tmp`, fsync'd, renamed to `NNNNNN.sst`,
//! and the directory fsync'd. Leftover `.tmp` files are deleted on open. A
//! crash between installing a compaction's output and deleting its inputs
//! leaves the same cells twice, which merge makes harmless.

mod bloom;
mod reader;
mod writer;

pub use reader::Table;
pub(crate) use reader::TableIter;
pub(crate) use writer::TableWriter;

/// Table file magic.
pub(crate) const MAGIC: &[u8; 8] = b"TALLYSST";
/// Version of the format above: 2 may hold cells with an epoch header, 3
/// list cells too (see `codec`); tables of 1 and 2 read the same way.
pub(crate) const VERSION: u32 = 3;
/// Size of the footer.
pub(crate) const FOOTER_BYTES: usize = 60;
/// Size of a section checksum.
pub(crate) const CRC_BYTES: usize = 4;

/// Path of table `id` in `dir`.
pub(crate) fn table_path(dir: &std::path::Path, id: u64) -> std::path::PathBuf {
    dir.join(format!("{id:06}.sst"))
}
