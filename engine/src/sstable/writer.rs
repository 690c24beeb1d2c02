//! Writes one SSTable from cells given in key order.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use tally_world::fs::File;

use super::bloom::Bloom;
use super::{CRC_BYTES, FOOTER_BYTES, MAGIC, VERSION, table_path};
use crate::cell::Cell;
use crate::codec::{self, put_varint};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::key::Key;

/// Builds a table in a temporary file; [`TableWriter::finish`] makes it durable
/// and visible under its final name. A writer dropped before that (a write
/// failed: the disk is full) removes its temporary file at once, so that
/// retries do not pile them up on a disk an operator is freeing.
///
/// # Invariants
/// - Keys are added in strictly increasing order.
/// - The dictionary holds the counter ids of the cells added, each once,
///   in the order they first appear (so it never names an id the table
///   does not hold, such as a retired one folded away).
pub(crate) struct TableWriter {
    tmp_path: PathBuf,
    /// Removes the temporary file unless the table was finished.
    tmp: Temporary,
    path: PathBuf,
    dir: PathBuf,
    out: BufWriter<File>,
    offset: u64,
    block: Vec<u8>,
    block_first: Option<Key>,
    block_bytes: usize,
    index: Vec<u8>,
    blocks: u64,
    dict: HashMap<u64, u64>,
    dict_ids: Vec<u64>,
    hashes: Vec<u64>,
    last: Option<Key>,
}

impl TableWriter {
    /// Starts table `id` in `dir`.
    pub(crate) fn create(dir: &Path, id: u64, block_bytes: usize) -> Result<Self> {
        let path = table_path(dir, id);
        let tmp_path = path.with_extension("sst.tmp");
        let file = File::create(&tmp_path).map_err(|e| Error::io("create table", &tmp_path, e))?;
        let tmp = Temporary(Some(tmp_path.clone()));
        Ok(TableWriter {
            tmp_path,
            tmp,
            path,
            dir: dir.to_path_buf(),
            out: BufWriter::with_capacity(256 * 1024, file),
            offset: 0,
            block: Vec::with_capacity(block_bytes + 1024),
            block_first: None,
            block_bytes,
            index: Vec::new(),
            blocks: 0,
            dict: HashMap::new(),
            dict_ids: Vec::new(),
            hashes: Vec::new(),
            last: None,
        })
    }

    /// Appends a cell; keys must come in increasing order.
    pub(crate) fn add(&mut self, key: &Key, cell: &Cell) -> Result<()> {
        if let Some(last) = &self.last {
            assert!(
                key > last,
                "table keys out of order: {key:?} after {last:?}"
            );
        }
        if self.block_first.is_none() {
            self.block_first = Some(key.clone());
        }
        codec::put_key(&mut self.block, key);
        let (dict, dict_ids) = (&mut self.dict, &mut self.dict_ids);
        codec::put_cell(&mut self.block, cell, |b, id| {
            let i = *dict.entry(id).or_insert_with(|| {
                dict_ids.push(id);
                dict_ids.len() as u64 - 1
            });
            put_varint(b, i);
        });
        self.hashes.push(Bloom::hash(key.partition(), key.column()));
        self.last = Some(key.clone());
        if self.block.len() >= self.block_bytes {
            self.finish_block()?;
        }
        Ok(())
    }

    fn finish_block(&mut self) -> Result<()> {
        let Some(first) = self.block_first.take() else {
            return Ok(());
        };
        let crc = crc32fast::hash(&self.block);
        self.block.extend_from_slice(&crc.to_le_bytes());
        put_varint(&mut self.index, self.offset);
        put_varint(&mut self.index, self.block.len() as u64);
        codec::put_key(&mut self.index, &first);
        self.blocks += 1;
        let block = std::mem::take(&mut self.block);
        self.write(&block)?;
        self.block = block;
        self.block.clear();
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io("write table", &self.tmp_path, e))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Writes a checksummed section; returns its (offset, length).
    fn write_section(&mut self, mut body: Vec<u8>) -> Result<(u64, u32)> {
        let crc = crc32fast::hash(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        let at = self.offset;
        self.write(&body)?;
        let len = u32::try_from(body.len()).map_err(|_| {
            Error::io(
                "write table",
                &self.tmp_path,
                std::io::Error::other("section over 4 GiB"),
            )
        })?;
        Ok((at, len))
    }

    /// Writes the tail sections, fsyncs, renames into place and fsyncs the
    /// directory. Returns the final path and the number of entries.
    pub(crate) fn finish(mut self) -> Result<(PathBuf, u64)> {
        self.finish_block()?;
        let entries = self.hashes.len() as u64;

        let mut dict = Vec::with_capacity(self.dict_ids.len() * 8 + 2);
        put_varint(&mut dict, self.dict_ids.len() as u64);
        for id in &self.dict_ids {
            dict.extend_from_slice(&id.to_le_bytes());
        }
        let (dict_off, dict_len) = self.write_section(dict)?;

        let mut index = Vec::with_capacity(self.index.len() + 10);
        put_varint(&mut index, self.blocks);
        index.extend_from_slice(&self.index);
        let (index_off, index_len) = self.write_section(index)?;

        let mut bloom = Bloom::with_keys(self.hashes.len());
        for h in &self.hashes {
            bloom.insert(*h);
        }
        let (bloom_off, bloom_len) = self.write_section(bloom.as_bytes().to_vec())?;

        let mut footer = Vec::with_capacity(FOOTER_BYTES);
        footer.extend_from_slice(MAGIC);
        footer.extend_from_slice(&VERSION.to_le_bytes());
        footer.extend_from_slice(&entries.to_le_bytes());
        footer.extend_from_slice(&dict_off.to_le_bytes());
        footer.extend_from_slice(&dict_len.to_le_bytes());
        footer.extend_from_slice(&index_off.to_le_bytes());
        footer.extend_from_slice(&index_len.to_le_bytes());
        footer.extend_from_slice(&bloom_off.to_le_bytes());
        footer.extend_from_slice(&bloom_len.to_le_bytes());
        let crc = crc32fast::hash(&footer);
        footer.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(footer.len(), FOOTER_BYTES);
        debug_assert_eq!(CRC_BYTES, 4);
        self.write(&footer)?;

        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io("write table", &self.tmp_path, e.into_error()))?;
        file.sync_all()
            .map_err(|e| Error::io("fsync table", &self.tmp_path, e))?;
        drop(file);
        tally_world::fs::rename(&self.tmp_path, &self.path)
            .map_err(|e| Error::io("rename table", &self.path, e))?;
        self.tmp.0 = None;
        fsutil::sync_dir(&self.dir)?;
        Ok((self.path, entries))
    }
}

/// A temporary file, removed when this is dropped unless it was taken
/// (`None`).
struct Temporary(Option<PathBuf>);

impl Drop for Temporary {
    fn drop(&mut self) {
        if let Some(path) = self.0.take()
            && let Err(e) = tally_world::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a failed table");
        }
    }
}
