//! The pack's trailer: every byte written is hashed as it goes, the checksum appended at the end.

use std::io::Write;

use super::*;
use crate::error::ServeError;

/// An answer being written and counted; every byte hashed for a new trailer, unless the answer
/// is a pack file as it is (with its own trailer).
pub(super) struct Hashed<'w, W> {
    pub(super) out: &'w mut W,
    pub(super) hasher: Option<TrailerHasher>,
    pub(super) written: u64,
}

impl<'w, W: Write> Hashed<'w, W> {
    pub(super) fn new(out: &'w mut W, hash: gix_hash::Kind) -> Self {
        Hashed { out, hasher: Some(TrailerHasher::new(hash)), written: 0 }
    }

    pub(super) fn unhashed(out: &'w mut W) -> Self {
        Hashed { out, hasher: None, written: 0 }
    }

    pub(super) fn emit(&mut self, data: &[u8]) -> Result<(), ServeError> {
        if let Some(hasher) = self.hasher.as_mut() {
            hasher.update(data);
        }
        self.written += data.len() as u64;
        self.out.write_all(data).map_err(gone)
    }

    /// The trailer, when hashing: every byte written, it included.
    pub(super) fn finish(self) -> Result<u64, ServeError> {
        let Some(hasher) = self.hasher else {
            return Ok(self.written);
        };
        let digest = hasher.finalize()?;
        self.out.write_all(&digest).map_err(gone)?;
        Ok(self.written + digest.len() as u64)
    }
}

/// The hash of a pack's trailer. For SHA-1, plain SHA-1 (with the CPU's SHA instructions where
/// it has them): the trailer is a checksum of bytes gixd writes itself, which the client verifies
/// with its own SHA-1, so detecting manufactured collisions — which gix-hash's SHA-1 always does,
/// and which makes it slower — guards nothing here. The digest is the same either way; SHA-256
/// repositories use gix-hash's.
pub(super) enum TrailerHasher {
    Sha1(sha1::Sha1),
    Other(gix_hash::Hasher),
}

impl TrailerHasher {
    pub(super) fn new(hash: gix_hash::Kind) -> Self {
        match hash {
            gix_hash::Kind::Sha1 => TrailerHasher::Sha1(sha1::Digest::new()),
            other => TrailerHasher::Other(gix_hash::hasher(other)),
        }
    }

    pub(super) fn update(&mut self, data: &[u8]) {
        match self {
            TrailerHasher::Sha1(h) => sha1::Digest::update(h, data),
            TrailerHasher::Other(h) => h.update(data),
        }
    }

    pub(super) fn finalize(self) -> Result<Vec<u8>, ServeError> {
        Ok(match self {
            TrailerHasher::Sha1(h) => sha1::Digest::finalize(h).to_vec(),
            TrailerHasher::Other(h) => h.try_finalize().map_err(ServeError::pack)?.as_bytes().to_vec(),
        })
    }
}
