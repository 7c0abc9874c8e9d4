//! One block: `type uint24(block_len) record+ uint24(restart_offset)+ uint16(restart_count)`,
//! records prefix-compressed against the one before, restart points storing their whole key.

use crate::{Error, corrupt, record::Cursor, varint};

pub const REF: u8 = b'r';
pub const INDEX: u8 = b'i';
pub const LOG: u8 = b'g';

/// Records between restart points, as git writes them.
pub const RESTART_INTERVAL: usize = 16;

/// The records of one block, in order: each one's full key, its 3-bit type field and the bytes
/// after its key (up to the restart table; a record's value is read by the caller).
pub struct Records<'a> {
    /// The block from its type byte; for the file's first block, from the file's start (offsets
    /// count the header there).
    block: &'a [u8],
    at: usize,
    end: usize,
    key: Vec<u8>,
}

impl<'a> Records<'a> {
    /// `block` starts at the block's type byte (or, with `header_len` > 0, at the file header
    /// before it) and ends at its `block_len`.
    pub fn new(block: &'a [u8], header_len: usize) -> Result<Self, Error> {
        if block.len() < header_len + 4 + 2 {
            return Err(corrupt("block shorter than its header and restart count"));
        }
        let count = u16::from_be_bytes([block[block.len() - 2], block[block.len() - 1]]) as usize;
        if count == 0 {
            return Err(corrupt("block without restart points"));
        }
        let table = count * 3 + 2;
        let end = block
            .len()
            .checked_sub(table)
            .filter(|e| *e >= header_len + 4)
            .ok_or_else(|| corrupt("restart table larger than its block"))?;
        for i in 0..count {
            let at = end + i * 3;
            let offset = u32::from_be_bytes([0, block[at], block[at + 1], block[at + 2]]) as usize;
            if offset < header_len + 4 || offset >= end {
                return Err(corrupt(format!("restart offset {offset} outside its block")));
            }
        }
        Ok(Records { block, at: header_len + 4, end, key: Vec::new() })
    }

    /// The next record: its 3-bit type field and the bytes after its key (up to the restart
    /// table); its key is [`Records::key`]. The caller reports how many of those bytes the value
    /// took with [`Records::consumed`].
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<(u8, Cursor<'a>), Error>> {
        if self.at >= self.end {
            return None;
        }
        Some(self.read_key())
    }

    /// The key of the record last returned.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    fn read_key(&mut self) -> Result<(u8, Cursor<'a>), Error> {
        let mut cursor = Cursor { buf: &self.block[self.at..self.end] };
        let prefix = cursor.varint()?;
        let suffix_and_type = cursor.varint()?;
        let suffix = cursor.bytes(suffix_and_type >> 3)?;
        let prefix = usize::try_from(prefix)
            .ok()
            .filter(|p| *p <= self.key.len())
            .ok_or_else(|| corrupt("key prefix longer than the key before it"))?;
        self.key.truncate(prefix);
        self.key.extend_from_slice(suffix);
        self.at = self.end - cursor.buf.len();
        Ok(((suffix_and_type & 7) as u8, cursor))
    }

    /// The value of the record last returned ended where `rest` begins.
    pub fn consumed(&mut self, rest: &Cursor<'a>) {
        self.at = self.end - rest.buf.len();
    }
}

/// Builds one block's records and restart table.
pub struct Builder {
    /// The block's bytes from its type byte (or from the file header, for the first block).
    pub buf: Vec<u8>,
    /// Where the block's type byte is in `buf`.
    header_len: usize,
    restarts: Vec<u32>,
    last_key: Vec<u8>,
    entries: usize,
}

impl Builder {
    pub fn new(block_type: u8, prefix: &[u8]) -> Self {
        let mut buf = prefix.to_vec();
        buf.extend_from_slice(&[block_type, 0, 0, 0]);
        Builder { header_len: prefix.len(), buf, restarts: Vec::new(), last_key: Vec::new(), entries: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// The block's length if it ended now, with one more record of `record_len` bytes that may
    /// be a restart point.
    pub fn len_with(&self, record_len: usize) -> usize {
        self.buf.len() + record_len + (self.restarts.len() + 1) * 3 + 2
    }

    /// Encode a record of `key` (prefix-compressed unless it is a restart point) with the type
    /// field `kind` and the value bytes `value`; its bytes, not yet added.
    pub fn encode(&self, key: &[u8], kind: u8, value: &[u8]) -> (Vec<u8>, bool) {
        let restart = self.entries % RESTART_INTERVAL == 0;
        let prefix = if restart { 0 } else { common_prefix(&self.last_key, key) };
        let mut out = Vec::with_capacity(key.len() - prefix + value.len() + 8);
        varint::encode(prefix as u64, &mut out);
        varint::encode((((key.len() - prefix) as u64) << 3) | u64::from(kind), &mut out);
        out.extend_from_slice(&key[prefix..]);
        out.extend_from_slice(value);
        (out, restart)
    }

    pub fn push(&mut self, key: &[u8], record: (Vec<u8>, bool)) {
        if record.1 {
            self.restarts.push(self.buf.len() as u32);
        }
        self.buf.extend_from_slice(&record.0);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.entries += 1;
    }

    /// The finished block: restart table appended, `block_len` set.
    pub fn finish(mut self) -> Vec<u8> {
        for offset in &self.restarts {
            self.buf.extend_from_slice(&offset.to_be_bytes()[1..]);
        }
        self.buf.extend_from_slice(&(self.restarts.len() as u16).to_be_bytes());
        let len = (self.buf.len() as u32).to_be_bytes();
        self.buf[self.header_len + 1..self.header_len + 4].copy_from_slice(&len[1..]);
        self.buf
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Read a big-endian uint24.
pub fn u24(b: &[u8]) -> usize {
    u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize
}
