//! Writing one table: header, ref blocks (aligned to the block size), the ref index from four
//! ref blocks on (as many levels as keep each index block within the block size), log blocks
//! (deflated, unaligned) with their index from two on, and the footer.

use std::io::Write;

use crate::{
    Error, LogRecord, RefRecord,
    block::{self, Builder},
    corrupt, hash_id, record,
    table::header_len,
    varint,
};

/// How a table is written.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// git's default, 4096.
    pub block_size: usize,
    pub object_hash: gix_hash::Kind,
}

impl Options {
    pub fn new(object_hash: gix_hash::Kind) -> Self {
        Options { block_size: 4096, object_hash }
    }
}

/// A table of `refs` (sorted by name, one record per name) and `logs` (any order; sorted here by
/// key), spanning update indices `min..=max`.
pub fn write_table(
    options: Options,
    min_update_index: u64,
    max_update_index: u64,
    refs: &[RefRecord],
    logs: &[LogRecord],
) -> Result<Vec<u8>, Error> {
    let version: u8 = if options.object_hash == gix_hash::Kind::Sha1 { 1 } else { 2 };
    if options.block_size == 0 || options.block_size > 0xff_ffff {
        return Err(corrupt("block size must be within 1..16 MiB"));
    }
    let mut header = Vec::with_capacity(header_len(version));
    header.extend_from_slice(b"REFT");
    header.push(version);
    header.extend_from_slice(&(options.block_size as u32).to_be_bytes()[1..]);
    header.extend_from_slice(&min_update_index.to_be_bytes());
    header.extend_from_slice(&max_update_index.to_be_bytes());
    if version == 2 {
        header.extend_from_slice(&hash_id(options.object_hash).to_be_bytes());
    }

    let mut out = Vec::new();
    let mut ref_index_at = 0u64;
    if refs.is_empty() {
        out.extend_from_slice(&header);
    } else {
        let mut entries = Vec::with_capacity(refs.len());
        for (i, r) in refs.iter().enumerate() {
            if i > 0 && refs[i - 1].name >= r.name {
                return Err(corrupt("refs to write are not sorted by name or repeat one"));
            }
            if r.update_index < min_update_index || r.update_index > max_update_index {
                return Err(corrupt("a ref's update index is outside the table's range"));
            }
            let mut value = Vec::new();
            varint::encode(r.update_index - min_update_index, &mut value);
            let kind = record::encode_ref_value(&r.value, &mut value);
            entries.push((r.name.to_vec(), kind, value));
        }
        let blocks = write_blocks(&mut out, block::REF, entries, options.block_size, Some(&header), true)?;
        if blocks.len() >= 4 {
            ref_index_at = write_index(&mut out, blocks, options.block_size, true)?;
        }
    }

    let (mut log_at, mut log_index_at) = (0u64, 0u64);
    if !logs.is_empty() {
        let mut sorted: Vec<(Vec<u8>, &LogRecord)> = logs.iter().map(|l| (l.key(), l)).collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        if sorted.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(corrupt("two log records with one name and update index"));
        }
        log_at = out.len() as u64;
        let mut builder = Builder::new(block::LOG, &[]);
        let mut positions = Vec::new();
        for (key, log) in sorted {
            let mut value = Vec::new();
            let kind = record::encode_log_value(&log.update, &mut value);
            let record = builder.encode(&key, kind, &value);
            if !builder.is_empty() && builder.len_with(record.0.len()) > options.block_size {
                positions.push(flush_log_block(&mut out, builder)?);
                builder = Builder::new(block::LOG, &[]);
                let record = builder.encode(&key, kind, &value);
                builder.push(&key, record);
            } else {
                builder.push(&key, record);
            }
        }
        positions.push(flush_log_block(&mut out, builder)?);
        if positions.len() >= 2 {
            log_index_at = write_index(&mut out, positions, options.block_size, false)?;
        }
    }

    let footer_at = out.len();
    out.extend_from_slice(&header);
    for position in [ref_index_at, 0, 0, log_at, log_index_at] {
        out.extend_from_slice(&position.to_be_bytes());
    }
    let crc = crc32fast::hash(&out[footer_at..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Write `entries` (key, type field, value bytes) as blocks of `block_type`, the first one after
/// `first_prefix` (the file header) when given; with `pad`, each block that another follows is
/// padded to the block size. Each block's (last key, position).
fn write_blocks(
    out: &mut Vec<u8>,
    block_type: u8,
    entries: Vec<(Vec<u8>, u8, Vec<u8>)>,
    block_size: usize,
    first_prefix: Option<&[u8]>,
    pad: bool,
) -> Result<Vec<(Vec<u8>, u64)>, Error> {
    let mut blocks = Vec::new();
    let mut prefix = first_prefix;
    let mut builder = Builder::new(block_type, prefix.unwrap_or_default());
    let mut start = out.len();
    for (key, kind, value) in entries {
        let record = builder.encode(&key, kind, &value);
        if builder.len_with(record.0.len()) > block_size {
            if builder.is_empty() {
                return Err(corrupt("a record does not fit into one block"));
            }
            blocks.push((builder.last_key().to_vec(), start as u64));
            out.extend_from_slice(&builder.finish());
            if pad {
                out.resize(out.len().div_ceil(block_size) * block_size, 0);
            }
            start = out.len();
            prefix = None;
            builder = Builder::new(block_type, &[]);
            let record = builder.encode(&key, kind, &value);
            if builder.len_with(record.0.len()) > block_size {
                return Err(corrupt("a record does not fit into one block"));
            }
            builder.push(&key, record);
        } else {
            builder.push(&key, record);
        }
    }
    let _ = prefix;
    blocks.push((builder.last_key().to_vec(), start as u64));
    out.extend_from_slice(&builder.finish());
    Ok(blocks)
}

/// An index over `blocks` (their last keys and positions), in as many levels as it takes for the
/// top one to be one block; the top block's position.
fn write_index(out: &mut Vec<u8>, mut blocks: Vec<(Vec<u8>, u64)>, block_size: usize, pad: bool) -> Result<u64, Error> {
    loop {
        if pad {
            out.resize(out.len().div_ceil(block_size) * block_size, 0);
        }
        let entries = blocks
            .into_iter()
            .map(|(key, position)| {
                let mut value = Vec::new();
                varint::encode(position, &mut value);
                (key, 0u8, value)
            })
            .collect();
        blocks = write_blocks(out, block::INDEX, entries, block_size, None, pad)?;
        if blocks.len() == 1 {
            return Ok(blocks[0].1);
        }
    }
}

/// A log block: its header with the inflated length, then the deflated records and restart
/// table. Its (last key, position).
fn flush_log_block(out: &mut Vec<u8>, builder: Builder) -> Result<(Vec<u8>, u64), Error> {
    let key = builder.last_key().to_vec();
    let position = out.len() as u64;
    let block = builder.finish();
    out.extend_from_slice(&block[..4]);
    let mut deflate = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    deflate
        .write_all(&block[4..])
        .and_then(|_| deflate.finish())
        .map(|z| out.extend_from_slice(&z))
        .map_err(|err| Error::io("log block", err))?;
    Ok((key, position))
}
