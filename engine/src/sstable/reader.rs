//! Reads an SSTable through a memory map, verifying every checksum it uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tally_world::fs::File;

use memmap2::Mmap;

use super::bloom::Bloom;
use super::{CRC_BYTES, FOOTER_BYTES, MAGIC, VERSION};
use crate::cell::Cell;
use crate::codec::{Cursor, DecodeError};
use crate::error::{Error, Result};
use crate::key::Key;

/// One block's entry in the sparse index.
struct IndexEntry {
    first: Key,
    offset: u64,
    len: usize,
}

/// An open, immutable SSTable.
///
/// # Invariants
/// - Index entries are sorted by first key and their blocks lie inside the
///   data region (checked on open).
pub struct Table {
    id: u64,
    path: PathBuf,
    map: Mmap,
    entries: u64,
    dict: Vec<u64>,
    index: Vec<IndexEntry>,
    bloom: Bloom,
}

impl Table {
    /// Opens table `id` at `path`, verifying footer, dictionary, index and bloom filter.
    pub fn open(path: &Path, id: u64) -> Result<Table> {
        let file = File::open(path).map_err(|e| Error::io("open table", path, e))?;
        // SAFETY: tables are never modified after they are renamed into place
        // (writers use a temporary name), so the mapped bytes do not change
        // under us; every length read from them is bounds-checked.
        #[expect(unsafe_code, reason = "memory-mapped reads of immutable table files")]
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io("map table", path, e))?;
        let corrupt = |offset: u64, reason: &str| Error::corruption(path, offset, reason);
        if map.len() < FOOTER_BYTES {
            return Err(corrupt(0, "file shorter than a table footer"));
        }
        let footer_at = map.len() - FOOTER_BYTES;
        let footer = &map[footer_at..];
        let stored = u32::from_le_bytes(footer[FOOTER_BYTES - 4..].try_into().expect("4 bytes"));
        let actual = crc32fast::hash(&footer[..FOOTER_BYTES - 4]);
        if stored != actual {
            return Err(corrupt(
                footer_at as u64,
                &format!(
                    "footer checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"
                ),
            ));
        }
        let mut f = Cursor::new(footer);
        let bad_footer = |_: DecodeError| corrupt(footer_at as u64, "short footer");
        if f.bytes(8).map_err(bad_footer)? != MAGIC {
            return Err(corrupt(footer_at as u64, "bad table magic"));
        }
        let version = f.u32().map_err(bad_footer)?;
        if !(1..=VERSION).contains(&version) {
            return Err(corrupt(
                footer_at as u64,
                &format!("unsupported table version {version}"),
            ));
        }
        let entries = f.u64().map_err(bad_footer)?;
        let mut section = |what: &'static str| -> Result<(u64, &[u8])> {
            let off = f.u64().map_err(bad_footer)?;
            let len = f.u32().map_err(bad_footer)? as usize;
            let end = (off as usize)
                .checked_add(len)
                .filter(|e| *e <= footer_at && len >= CRC_BYTES);
            let Some(end) = end else {
                return Err(corrupt(
                    footer_at as u64,
                    &format!("{what} section out of bounds"),
                ));
            };
            let body = checked(path, &map[off as usize..end], off, what)?;
            Ok((off, body))
        };
        let (dict_off, dict_body) = section("dictionary")?;
        let (index_off, index_body) = section("index")?;
        let (_, bloom_body) = section("bloom filter")?;

        let mut c = Cursor::new(dict_body);
        let n = c
            .varint_max(dict_body.len() / 8, "dictionary count too large")
            .map_err(|e| corrupt(dict_off, e.0))?;
        let dict = (0..n)
            .map(|_| c.u64())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| corrupt(dict_off, e.0))?;

        let mut c = Cursor::new(index_body);
        let bad_index = |e: DecodeError| corrupt(index_off, e.0);
        let nblocks = c
            .varint_max(index_body.len(), "block count too large")
            .map_err(bad_index)?;
        let mut index = Vec::with_capacity(nblocks);
        let mut data_end = 0u64;
        for _ in 0..nblocks {
            let offset = c.varint().map_err(bad_index)?;
            let len = c
                .varint_max(dict_off as usize, "block length too large")
                .map_err(bad_index)?;
            let first = c.key().map_err(bad_index)?;
            if offset != data_end || len < CRC_BYTES || offset + len as u64 > dict_off {
                return Err(corrupt(index_off, "index entry out of place"));
            }
            if index.last().is_some_and(|p: &IndexEntry| p.first >= first) {
                return Err(corrupt(index_off, "index keys out of order"));
            }
            data_end = offset + len as u64;
            index.push(IndexEntry { first, offset, len });
        }
        if c.remaining() != 0 || data_end != dict_off {
            return Err(corrupt(index_off, "index does not cover the data region"));
        }
        let bloom = Bloom::from_bytes(bloom_body.to_vec());
        Ok(Table {
            id,
            path: path.to_path_buf(),
            map,
            entries,
            dict,
            index,
            bloom,
        })
    }

    /// The table's id (its file number).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of cells.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// File size in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.map.len() as u64
    }

    /// The counter ids this table's cells use.
    pub(crate) fn counter_ids(&self) -> &[u64] {
        &self.dict
    }

    /// The cell stored for `key`, if any.
    pub fn get(&self, key: &Key) -> Result<Option<Cell>> {
        if !self
            .bloom
            .may_contain(Bloom::hash(key.partition(), key.column()))
        {
            return Ok(None);
        }
        let Some(b) = self.block_for(key) else {
            return Ok(None);
        };
        let entry = &self.index[b];
        let body = checked(&self.path, self.block_bytes(entry), entry.offset, "block")?;
        let mut c = Cursor::new(body);
        let corrupt = |e: DecodeError| Error::corruption(&self.path, entry.offset, e.0);
        while c.remaining() > 0 {
            let (p, col) = c.key_parts().map_err(corrupt)?;
            let ord = p.cmp(key.partition()).then_with(|| col.cmp(key.column()));
            match ord {
                std::cmp::Ordering::Less => c.skip_cell().map_err(corrupt)?,
                std::cmp::Ordering::Equal => {
                    return Ok(Some(self.decode_cell(&mut c).map_err(corrupt)?));
                }
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Index of the block that would hold `key`.
    fn block_for(&self, key: &Key) -> Option<usize> {
        let after = self.index.partition_point(|e| &e.first <= key);
        after.checked_sub(1)
    }

    fn block_bytes(&self, entry: &IndexEntry) -> &[u8] {
        &self.map[entry.offset as usize..entry.offset as usize + entry.len]
    }

    fn decode_cell(&self, c: &mut Cursor<'_>) -> Result<Cell, DecodeError> {
        c.cell(|c| {
            let i = c.varint()?;
            usize::try_from(i)
                .ok()
                .and_then(|i| self.dict.get(i).copied())
                .ok_or(DecodeError("counter id index outside the dictionary"))
        })
    }

    /// Decodes block `b` whole.
    fn read_block(&self, b: usize) -> Result<Vec<(Key, Cell)>> {
        let entry = &self.index[b];
        let body = checked(&self.path, self.block_bytes(entry), entry.offset, "block")?;
        let corrupt = |e: DecodeError| Error::corruption(&self.path, entry.offset, e.0);
        let mut c = Cursor::new(body);
        let mut out = Vec::new();
        while c.remaining() > 0 {
            let key = c.key().map_err(corrupt)?;
            let cell = self.decode_cell(&mut c).map_err(corrupt)?;
            out.push((key, cell));
        }
        Ok(out)
    }

    /// Iterates cells with keys ≥ `from` (all cells when `None`), in key order.
    pub(crate) fn iter_from(self: &Arc<Self>, from: Option<&Key>) -> TableIter {
        let block = from.map_or(0, |k| self.block_for(k).unwrap_or(0));
        TableIter {
            table: self.clone(),
            next_block: block,
            buf: Vec::new().into_iter(),
            from: from.cloned(),
        }
    }
}

/// Verifies a region's trailing crc32 and returns the bytes before it.
fn checked<'a>(path: &Path, region: &'a [u8], offset: u64, what: &str) -> Result<&'a [u8]> {
    let (body, crc) = region.split_at(region.len() - CRC_BYTES);
    let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    let actual = crc32fast::hash(body);
    if stored != actual {
        return Err(Error::corruption(
            path,
            offset,
            format!("{what} checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"),
        ));
    }
    Ok(body)
}

/// Iterator over a table's cells in key order.
pub(crate) struct TableIter {
    table: Arc<Table>,
    next_block: usize,
    buf: std::vec::IntoIter<(Key, Cell)>,
    from: Option<Key>,
}

impl Iterator for TableIter {
    type Item = Result<(Key, Cell)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(kc) = self.buf.next() {
                if self.from.as_ref().is_some_and(|f| &kc.0 < f) {
                    continue;
                }
                return Some(Ok(kc));
            }
            if self.next_block >= self.table.index.len() {
                return None;
            }
            match self.table.read_block(self.next_block) {
                Ok(cells) => {
                    self.next_block += 1;
                    self.buf = cells.into_iter();
                }
                Err(e) => {
                    self.next_block = self.table.index.len();
                    return Some(Err(e));
                }
            }
        }
    }
}
