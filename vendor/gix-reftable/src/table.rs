//! One reftable file, read whole: header, footer, ref blocks and log blocks.

use std::path::Path;

use crate::{
    Error, LogRecord, RefRecord,
    block::{self, Records, u24},
    corrupt, record,
};

/// A table in memory, its header and footer checked.
#[derive(Debug, Clone)]
pub struct Table {
    data: Vec<u8>,
    block_size: usize,
    min_update_index: u64,
    max_update_index: u64,
    hash: gix_hash::Kind,
    header_len: usize,
    /// Where the footer starts: every section ends before it.
    footer_at: usize,
    log_at: usize,
}

pub(crate) fn header_len(version: u8) -> usize {
    if version == 1 { 24 } else { 28 }
}

pub(crate) fn footer_len(version: u8) -> usize {
    header_len(version) + 5 * 8 + 4
}

impl Table {
    /// Read the table at `path`.
    pub fn open(path: &Path) -> Result<Table, Error> {
        let data = std::fs::read(path).map_err(|err| Error::io(path, err))?;
        Table::from_bytes(data).map_err(|err| match err {
            Error::Format(problem) => {
                Error::Table { name: path.file_name().unwrap_or_default().to_string_lossy().into_owned(), problem }
            }
            other => other,
        })
    }

    /// Check a table's header and footer (magic, version, hash id, the footer's CRC-32).
    pub fn from_bytes(data: Vec<u8>) -> Result<Table, Error> {
        if data.len() < 5 || &data[..4] != b"REFT" {
            return Err(corrupt("no REFT magic"));
        }
        let version = data[4];
        if version != 1 && version != 2 {
            return Err(corrupt(format!("format version {version} is not 1 or 2")));
        }
        let (header_len, footer_len) = (header_len(version), footer_len(version));
        if data.len() < header_len + footer_len {
            return Err(corrupt("shorter than a header and a footer"));
        }
        let footer_at = data.len() - footer_len;
        let footer = &data[footer_at..];
        let crc_at = footer_len - 4;
        let crc = u32::from_be_bytes(footer[crc_at..].try_into().expect("4 bytes"));
        if crc32fast::hash(&footer[..crc_at]) != crc {
            return Err(corrupt("footer CRC-32 does not match"));
        }
        if footer[..header_len] != data[..header_len] {
            return Err(corrupt("footer does not repeat the header"));
        }
        let hash = if version == 1 {
            gix_hash::Kind::Sha1
        } else {
            match &data[24..28] {
                b"sha1" => gix_hash::Kind::Sha1,
                b"s256" => gix_hash::Kind::Sha256,
                other => return Err(corrupt(format!("hash id {other:?} is unknown"))),
            }
        };
        let u64_at = |at: usize| u64::from_be_bytes(footer[at..at + 8].try_into().expect("8 bytes"));
        let log_at = u64_at(header_len + 24);
        let log_at = usize::try_from(log_at)
            .ok()
            .filter(|at| *at == 0 || (*at >= header_len && *at < footer_at))
            .ok_or_else(|| corrupt("log position outside the table"))?;
        Ok(Table {
            block_size: u24(&data[5..8]),
            min_update_index: u64::from_be_bytes(data[8..16].try_into().expect("8 bytes")),
            max_update_index: u64::from_be_bytes(data[16..24].try_into().expect("8 bytes")),
            hash,
            header_len,
            footer_at,
            log_at,
            data,
        })
    }

    pub fn min_update_index(&self) -> u64 {
        self.min_update_index
    }

    pub fn max_update_index(&self) -> u64 {
        self.max_update_index
    }

    pub fn object_hash(&self) -> gix_hash::Kind {
        self.hash
    }

    /// The table's size in bytes.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.len() == self.header_len + footer_len(self.data[4])
    }

    /// Every ref record, sorted by name, deletions included.
    pub fn refs(&self) -> Result<Vec<RefRecord>, Error> {
        let mut out = Vec::new();
        let mut at = self.header_len;
        let mut first = true;
        while at < self.footer_at && self.data[at] == block::REF {
            let start = if first { 0 } else { at };
            let len = u24(self.data.get(at + 1..at + 4).ok_or_else(|| corrupt("block header past the end"))?);
            let end = start
                .checked_add(len)
                .filter(|e| *e <= self.footer_at && *e > at)
                .ok_or_else(|| corrupt("ref block past the end of its table"))?;
            let mut records = Records::new(&self.data[start..end], at - start)?;
            while let Some(next) = records.next() {
                let (kind, mut cursor) = next?;
                let update_index = self
                    .min_update_index
                    .checked_add(cursor.varint()?)
                    .ok_or_else(|| corrupt("update index overflows"))?;
                let value = record::ref_value(&mut cursor, kind, self.hash)?;
                records.consumed(&cursor);
                let name = records.key();
                if out.last().is_some_and(|last: &RefRecord| last.name.as_slice() >= name) {
                    return Err(corrupt("ref records out of order"));
                }
                out.push(RefRecord { name: name.into(), update_index, value });
            }
            at = self.next_block(end);
            first = false;
        }
        Ok(out)
    }

    /// Where the block after one ending at `end` starts: right there, or past the padding to
    /// the next multiple of the block size (padding is NUL; no block type is).
    fn next_block(&self, end: usize) -> usize {
        if end < self.footer_at && self.data[end] == 0 && self.block_size > 0 {
            end.div_ceil(self.block_size) * self.block_size
        } else {
            end
        }
    }

    /// Every log record, in key order (by name, newest first), deletions included.
    pub fn logs(&self) -> Result<Vec<LogRecord>, Error> {
        let mut out = Vec::new();
        if self.log_at == 0 {
            return Ok(out);
        }
        let mut at = self.log_at;
        while at < self.footer_at && self.data[at] == block::LOG {
            let inflated_len =
                u24(self.data.get(at + 1..at + 4).ok_or_else(|| corrupt("block header past the end"))?);
            if inflated_len < 4 + 2 {
                return Err(corrupt("log block shorter than its header"));
            }
            let mut block = Vec::with_capacity(inflated_len);
            block.extend_from_slice(&self.data[at..at + 4]);
            block.resize(inflated_len, 0);
            let mut inflate = flate2::Decompress::new(true);
            let status = inflate
                .decompress(&self.data[at + 4..self.footer_at], &mut block[4..], flate2::FlushDecompress::Finish)
                .map_err(|err| corrupt(format!("log block does not inflate: {err}")))?;
            if status != flate2::Status::StreamEnd || inflate.total_out() as usize != inflated_len - 4 {
                return Err(corrupt("log block inflates to another length than its header says"));
            }
            let mut records = Records::new(&block, 0)?;
            while let Some(next) = records.next() {
                let (kind, mut cursor) = next?;
                let key = records.key().to_vec();
                let log = record::log_record(&key, kind, &mut cursor, self.hash)?;
                records.consumed(&cursor);
                out.push(log);
            }
            at += 4 + inflate.total_in() as usize;
        }
        Ok(out)
    }
}
