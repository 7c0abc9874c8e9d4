//! The records of ref and log blocks: their keys and what follows the key.

use bstr::{BString, ByteSlice};
use gix_hash::ObjectId;

use crate::{Error, corrupt, varint};

/// A ref as one table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRecord {
    /// The full name, `HEAD` or `refs/…`.
    pub name: BString,
    /// The transaction that last wrote it.
    pub update_index: u64,
    pub value: RefValue,
}

/// The value types of a ref record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefValue {
    /// `0x0`: the ref was deleted; older tables' values are hidden.
    Deletion,
    /// `0x1`: an object id (not an annotated tag, as git writes it).
    Val1(ObjectId),
    /// `0x2`: an annotated tag's id and the object it peels to.
    Val2 { value: ObjectId, peeled: ObjectId },
    /// `0x3`: a symbolic ref's target name.
    Symref(BString),
}

/// A reflog entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub name: BString,
    pub update_index: u64,
    /// `None` is a deletion record (`log_type 0x0`).
    pub update: Option<LogUpdate>,
}

/// What a reflog entry says (`log_type 0x1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogUpdate {
    pub old_id: ObjectId,
    pub new_id: ObjectId,
    pub name: BString,
    pub email: BString,
    pub time: u64,
    /// Minutes east of UTC.
    pub tz_offset: i16,
    /// As git stores it: ending in a newline (git removes the last byte when it shows one).
    pub message: BString,
}

impl LogRecord {
    /// `name '\0' reverse_int64(update_index)`: newer entries of a ref sort first.
    pub fn key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.name.len() + 9);
        key.extend_from_slice(&self.name);
        key.push(0);
        key.extend_from_slice(&(u64::MAX - self.update_index).to_be_bytes());
        key
    }
}

/// The bytes of a record after its key.
pub(crate) struct Cursor<'a> {
    pub buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub fn varint(&mut self) -> Result<u64, Error> {
        let (value, used) = varint::decode(self.buf)?;
        self.buf = &self.buf[used..];
        Ok(value)
    }

    pub fn bytes(&mut self, n: u64) -> Result<&'a [u8], Error> {
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.buf.len())
            .ok_or_else(|| corrupt("record past the end of its block"))?;
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub fn id(&mut self, hash: gix_hash::Kind) -> Result<ObjectId, Error> {
        let bytes = self.bytes(hash.len_in_bytes() as u64)?;
        Ok(ObjectId::from_bytes_or_panic(bytes))
    }

    pub fn string(&mut self) -> Result<BString, Error> {
        let n = self.varint()?;
        Ok(self.bytes(n)?.as_bstr().to_owned())
    }
}

/// Decode a ref record's value (`value_type` from its key's header).
pub(crate) fn ref_value(cursor: &mut Cursor<'_>, value_type: u8, hash: gix_hash::Kind) -> Result<RefValue, Error> {
    Ok(match value_type {
        0 => RefValue::Deletion,
        1 => RefValue::Val1(cursor.id(hash)?),
        2 => RefValue::Val2 { value: cursor.id(hash)?, peeled: cursor.id(hash)? },
        3 => RefValue::Symref(cursor.string()?),
        other => return Err(corrupt(format!("ref value type {other} is reserved"))),
    })
}

/// Encode a ref record's value; its value type.
pub(crate) fn encode_ref_value(value: &RefValue, out: &mut Vec<u8>) -> u8 {
    match value {
        RefValue::Deletion => 0,
        RefValue::Val1(id) => {
            out.extend_from_slice(id.as_bytes());
            1
        }
        RefValue::Val2 { value, peeled } => {
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(peeled.as_bytes());
            2
        }
        RefValue::Symref(target) => {
            varint::encode(target.len() as u64, out);
            out.extend_from_slice(target);
            3
        }
    }
}

/// Decode a log record from its key and the bytes after it.
pub(crate) fn log_record(
    key: &[u8],
    log_type: u8,
    cursor: &mut Cursor<'_>,
    hash: gix_hash::Kind,
) -> Result<LogRecord, Error> {
    if key.len() < 9 || key[key.len() - 9] != 0 {
        return Err(corrupt("log record key without its update index"));
    }
    let (name, index) = key.split_at(key.len() - 9);
    let update_index = u64::MAX - u64::from_be_bytes(index[1..].try_into().expect("8 bytes"));
    let update = match log_type {
        0 => None,
        1 => {
            let old_id = cursor.id(hash)?;
            let new_id = cursor.id(hash)?;
            let name = cursor.string()?;
            let email = cursor.string()?;
            let time = cursor.varint()?;
            let tz = cursor.bytes(2)?;
            let tz_offset = i16::from_be_bytes([tz[0], tz[1]]);
            let message = cursor.string()?;
            Some(LogUpdate { old_id, new_id, name, email, time, tz_offset, message })
        }
        other => return Err(corrupt(format!("log type {other} is reserved"))),
    };
    Ok(LogRecord { name: name.as_bstr().to_owned(), update_index, update })
}

pub(crate) fn encode_log_value(update: &Option<LogUpdate>, out: &mut Vec<u8>) -> u8 {
    let Some(u) = update else { return 0 };
    out.extend_from_slice(u.old_id.as_bytes());
    out.extend_from_slice(u.new_id.as_bytes());
    for s in [&u.name, &u.email] {
        varint::encode(s.len() as u64, out);
        out.extend_from_slice(s);
    }
    varint::encode(u.time, out);
    out.extend_from_slice(&u.tz_offset.to_be_bytes());
    varint::encode(u.message.len() as u64, out);
    out.extend_from_slice(&u.message);
    1
}
