//! The pack's trailer: every byte written is hashed as it goes, the checksum appended at the end.

use std::io::Write;

use super::PackError;
use super::*;
use crate::pack_ranges::Range;

/// An answer being written and counted; every byte hashed for a new trailer, unless the answer
/// is a pack file as it is (with its own trailer). Stored bytes of a pack file written one after
/// another in the file ([`Hashed::emit_stored`]) go down as one slice of its map when something
/// else follows, so that a run of entries sent as stored is one range of the file below (kept
/// and sent as a range, not copied: [`crate::pack_ranges`]).
pub(super) struct Hashed<'w, W> {
    pub(super) out: &'w mut W,
    pub(super) hasher: Option<TrailerHasher>,
    pub(super) written: u64,
    /// Stored bytes written (hashed and counted) but not yet passed down.
    run: Option<Range>,
}

impl<'w, W: Write> Hashed<'w, W> {
    pub(super) fn new(out: &'w mut W, hash: gix_hash::Kind) -> Self {
        Hashed { out, hasher: Some(TrailerHasher::new(hash)), written: 0, run: None }
    }

    pub(super) fn unhashed(out: &'w mut W) -> Self {
        Hashed { out, hasher: None, written: 0, run: None }
    }

    pub(super) fn emit(&mut self, data: &[u8]) -> Result<(), PackError> {
        self.pass_run()?;
        self.count(data);
        self.out.write_all(data).map_err(gone)
    }

    /// Write `stored`, bytes of a pack file as it stores them: after the run before it when it
    /// continues that run in the same file.
    pub(super) fn emit_stored(&mut self, stored: Range) -> Result<(), PackError> {
        self.count(stored.as_ref());
        match &mut self.run {
            Some(run) if run.continued_by(&stored) => run.extend(stored.len()),
            _ => {
                self.pass_run()?;
                self.run = Some(stored);
            }
        }
        Ok(())
    }

    /// Write `bytes` of a mapped pack file: as [`Self::emit_stored`] when the map is one kept as
    /// ranges ([`crate::pack_ranges`]), else copied.
    pub(super) fn emit_mapped(&mut self, bytes: &[u8]) -> Result<(), PackError> {
        match Range::of(bytes) {
            Some(stored) => self.emit_stored(stored),
            None => self.emit(bytes),
        }
    }

    /// Write one pack entry: its header `head` and its compressed `data`. `stored` is the entry
    /// as a pack file stores it (header and data) when `data` was copied from there
    /// ([`crate::packs::Copies`]): if its data is `data` byte for byte, the stored bytes go out
    /// instead of the copy — all of them where the stored header is `head` too.
    pub(super) fn emit_entry(&mut self, head: &[u8], data: &[u8], stored: Option<Range>) -> Result<(), PackError> {
        let split = stored.and_then(|stored| {
            let head_len = stored.len().checked_sub(data.len()).filter(|n| *n > 0)?;
            (&stored.as_ref()[head_len..] == data).then_some((stored, head_len))
        });
        match split {
            Some((stored, head_len)) if &stored.as_ref()[..head_len] == head => self.emit_stored(stored),
            Some((stored, head_len)) => {
                self.emit(head)?;
                self.emit_stored(stored.sub(head_len, data.len()))
            }
            None => {
                self.emit(head)?;
                self.emit(data)
            }
        }
    }

    fn count(&mut self, data: &[u8]) {
        if let Some(hasher) = self.hasher.as_mut() {
            hasher.update(data);
        }
        self.written += data.len() as u64;
    }

    /// Pass the run of stored bytes down (its pages read ahead: it is sent later, from an async
    /// worker that must not wait for the disk).
    fn pass_run(&mut self) -> Result<(), PackError> {
        let Some(run) = self.run.take() else { return Ok(()) };
        crate::pack_ranges::read_ahead(run.as_ref());
        self.out.write_all(run.as_ref()).map_err(gone)
    }

    /// The trailer, when hashing: every byte written, it included.
    pub(super) fn finish(mut self) -> Result<u64, PackError> {
        self.pass_run()?;
        let Some(hasher) = self.hasher.take() else {
            return Ok(self.written);
        };
        let digest = hasher.finalize()?;
        self.out.write_all(&digest).map_err(gone)?;
        Ok(self.written + digest.len() as u64)
    }
}

impl<W: Sink> Hashed<'_, W> {
    /// A progress line, after every byte written before it.
    pub(super) fn progress(&mut self, line: &str) -> Result<(), PackError> {
        self.pass_run()?;
        self.out.progress(line).map_err(gone)
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

    pub(super) fn finalize(self) -> Result<Vec<u8>, PackError> {
        Ok(match self {
            TrailerHasher::Sha1(h) => sha1::Digest::finalize(h).to_vec(),
            TrailerHasher::Other(h) => h.try_finalize().map_err(PackError::gix)?.as_bytes().to_vec(),
        })
    }
}
