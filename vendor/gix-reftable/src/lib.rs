#![deny(unsafe_code)]
//! git's reftable format (`Documentation/technical/reftable.adoc` in git): the tables that hold a
//! repository's refs and reflogs when `extensions.refStorage = reftable`, and the stack of them
//! that `reftable/tables.list` names.
//!
//! - [`Table`] reads one table: its header and footer (magic, version, CRC-32), its ref blocks
//!   and log blocks (prefix-compressed records, restart points; log blocks deflated). Every
//!   length and offset is checked against the bytes it points into: a damaged table is an
//!   [`Error`], never a panic or a read past the end.
//! - [`write_table`] writes one: ref blocks aligned to the block size, a multi-level ref index
//!   from four blocks on, log blocks and their index, the footer. Format version 1 for SHA-1,
//!   version 2 (with the hash id) for SHA-256, as git writes them.
//! - [`Stack`] is `tables.list` and the tables it names, merged newest first (a deletion record
//!   hides older values). [`Stack::lock`] takes `tables.list.lock` for a transaction that appends
//!   one table (compare-and-swap against what the stack holds is the caller's, under the lock),
//!   and [`Stack::auto_compact`] restores git's geometric sequence of table sizes.
//!
//! Object blocks (the object-id → ref index) are read past, not written or used: they only speed
//! up "which refs point at this object", and the format lets writers leave them out.

mod block;
mod record;
mod stack;
mod table;
mod varint;
mod writer;

pub use record::{LogRecord, LogUpdate, RefRecord, RefValue};
pub use stack::{Lock, Stack, suggest_compaction_segment};
pub use table::Table;
pub use writer::{Options, write_table};

/// What can be wrong with a table or a stack.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reftable I/O on {path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error("not a reftable: {0}")]
    Format(String),
    #[error("reftable {name}: {problem}")]
    Table { name: String, problem: String },
    #[error("{0} is locked by another writer")]
    Locked(std::path::PathBuf),
    #[error("tables.list changed while it was read ({0} tries)")]
    Unstable(usize),
}

impl Error {
    pub(crate) fn io(path: impl Into<std::path::PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

pub(crate) fn corrupt(what: impl Into<String>) -> Error {
    Error::Format(what.into())
}

/// The 4-byte hash id of format version 2 (`sha1`, `s256`).
pub(crate) fn hash_id(kind: gix_hash::Kind) -> u32 {
    match kind {
        gix_hash::Kind::Sha1 => u32::from_be_bytes(*b"sha1"),
        gix_hash::Kind::Sha256 => u32::from_be_bytes(*b"s256"),
        _ => unreachable!("gix-hash has no other kind enabled"),
    }
}
