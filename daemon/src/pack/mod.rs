//! Pack writing: a selection becomes a pack through gix-pack (`iter_from_counts_with_delta_bases`,
//! `PackCopyAndBaseObjects`, one thread: the caller's), written to any `io::Write` (the protocol
//! layer frames it). Unselected delta bases are added, and thin-pack bases used, only where the
//! caller's `may_send` allows (the client may read them); thin ones only when the client has them.
//!
//! Here: the entry point ([`write`]) and its options; `progress` (git's phase lines), `reuse`
//! (verbatim packs, stored entries), `entries` (gix-pack's entries and writer), `deltas` (the
//! delta search), `trailer` (the checksum).

use std::collections::HashMap;
use std::io::{self, Write};

use gix_hash::ObjectId;
use gix_pack::data::output;
use gix_pack::data::output::entry::iter_from_counts::DeltaBase;

use crate::select::Selection;

mod deltas;
#[cfg(feature = "test-hooks")]
pub use deltas::{REPACK_BATCH_BYTES, REPACK_BYTES_HELD, SEARCHED_ENTRIES_MOST};
mod entries;
pub mod index;
mod progress;
mod reuse;
mod trailer;

use deltas::DeltaSearch;
pub(crate) use entries::gix_entries;
use entries::{Earlier, write_through_gix_pack};
use progress::Phase;
pub(crate) use progress::Throttle;
use reuse::{EntryOffsets, write_reused, write_verbatim};
use trailer::Hashed;

/// Where a pack goes: its bytes, and git's progress lines for a client waiting for them
/// (`Counting objects:  45% (450/1000)\r` while a phase runs, `…100% (1000/1000), done.\n` at its
/// end). A file or a buffer takes no progress.
pub trait Sink: Write {
    fn progress(&mut self, _line: &str) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for Vec<u8> {}
impl<S: Sink + ?Sized> Sink for &mut S {
    fn progress(&mut self, line: &str) -> io::Result<()> {
        (**self).progress(line)
    }
}
impl<W: Write> Sink for io::BufWriter<W> {}

/// Writing a pack (to a client or a file) or its companions (index, reverse index, bitmap)
/// failed: the client went away, an object to write is missing or unreadable, a gitoxide error
/// kept with its chain, or what gixd found wrong with the files.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The client went away (or stopped reading); nothing can be reported to it.
    #[error("client disconnected")]
    Disconnected,
    #[error("object {0} is missing from the repository")]
    MissingObject(ObjectId),
    #[error("repository access failed: {0}")]
    Git(#[from] gix::Error),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Gix(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Corrupt(String),
    #[error("more than 2^32 objects")]
    TooManyObjects,
}

impl PackError {
    /// A gitoxide error while writing a pack, an archive, an index or a bitmap.
    pub fn gix(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        PackError::Gix(Box::new(err))
    }

    /// What gixd found wrong with the pack files (or the pack it wrote).
    pub fn corrupt(message: impl Into<String>) -> Self {
        PackError::Corrupt(message.into())
    }
}

impl From<crate::graph::GraphError> for PackError {
    fn from(err: crate::graph::GraphError) -> Self {
        match err {
            crate::graph::GraphError::Missing(id) => PackError::MissingObject(id),
            crate::graph::GraphError::Git(err) => PackError::Git(err),
        }
    }
}

/// A failed write to the client: a disconnect, or an I/O error.
fn gone(err: std::io::Error) -> PackError {
    if is_disconnect(&err) { PackError::Disconnected } else { PackError::Io(err) }
}

/// What a pack request asks for beyond the objects.
pub struct Options<'a> {
    pub thin_pack: bool,
    pub ofs_delta: bool,
    /// Add a selected delta's unselected base (one the client may read) to the pack instead of
    /// re-deflating the delta. Right for a clone, where the client has nothing; for a fetch the
    /// client most likely holds the base already, and a deep delta chain can add many objects it
    /// holds (measured: 22 added for 3 deltas on the corpus's linear fetch), so there the delta is
    /// re-deflated unless it can refer to a base the client is known to have (thin).
    pub include_unselected_bases: bool,
    /// The repository's pack files ([`crate::packs::of`]): stored entries are located there,
    /// not inflated one by one to find their ends. `None`: gix-odb locates them. Asked for only
    /// when gix-pack generates entries — a pack sent as the bitmapped pack's bytes needs none.
    pub packs: &'a dyn Fn() -> Option<std::sync::Arc<crate::packs::Packs>>,
    /// Search deltas among the objects going out whole even when the client holds nothing
    /// (a repack: [`crate::maintenance`]). Without it the search runs only for fetches answered
    /// by walking — a clone's whole objects are its stored pack's delta bases already.
    pub deltify: bool,
    /// Reuse no stored delta: every object is decoded and searched anew with these limits
    /// (git's `repack -f`; [`crate::maintenance::Bases::Anew`]). Implies `deltify`.
    pub search_anew: Option<gix_pack::data::delta::search::Options>,
    /// The pace of running progress lines ([`Throttle`]).
    pub progress_every: std::time::Duration,
}

/// What went into a pack; counts, so they can be compared and snapshot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub entries: usize,
    pub copied: usize,
    pub re_deflated: usize,
    pub bases_included: usize,
    pub thin_deltas: usize,
    /// Entries sent as the bitmapped pack's bytes (partial reuse: nothing decoded).
    pub reused: usize,
    pub bytes: u64,
    /// The pack file was sent as it is (verbatim reuse).
    pub verbatim: bool,
    /// Objects that would have gone out whole, sent instead as a delta computed against the
    /// client's version at the same path (thin).
    pub deltas_computed: usize,
}

/// Write the pack of `selection` to `out`. `may_send` answers whether the client may be sent an
/// object that it did not ask for (it is reachable from a ref the client may read); it is asked
/// only about delta bases outside the selection, which are then added or referred to thin.
pub fn write<W: Sink>(
    repo: &gix::Repository,
    selection: &Selection,
    options: Options,
    may_send: impl FnMut(&gix_hash::oid) -> bool,
    out: &mut W,
) -> Result<Stats, PackError> {
    Ok(write_noting(repo, selection, options, may_send, out, false)?.0)
}

/// One entry of a pack as its index holds it: the object, where its entry starts, the CRC-32 of
/// the entry's bytes (header and compressed data).
pub type IndexEntry = (ObjectId, u64, u32);

/// [`write`] for a pack that goes to disk (maintenance): also every entry as its index needs it,
/// noted as it is written, so the index is written from what the writer knows instead of by
/// decoding and hashing every object again. `None` where the pack went out some other way (a
/// verbatim or reused pack: never for maintenance's selections).
pub fn write_indexed<W: Sink>(
    repo: &gix::Repository,
    selection: &Selection,
    options: Options,
    may_send: impl FnMut(&gix_hash::oid) -> bool,
    out: &mut W,
) -> Result<(Stats, Option<Vec<IndexEntry>>), PackError> {
    write_noting(repo, selection, options, may_send, out, true)
}

fn write_noting<W: Sink>(
    repo: &gix::Repository,
    selection: &Selection,
    options: Options,
    mut may_send: impl FnMut(&gix_hash::oid) -> bool,
    out: &mut W,
    note_index: bool,
) -> Result<(Stats, Option<Vec<IndexEntry>>), PackError> {
    if let Some(bitmap) = &selection.whole_pack
        && options.ofs_delta
    {
        return write_verbatim(repo, bitmap, selection, &options, out).map(|stats| (stats, None));
    }
    // By a multi-pack-index's bitmap with nothing to copy as stored, too: the selection is in
    // pseudo-pack order, where a push's deltas precede the thin bases `index-pack --fix-thin`
    // appended, and this path puts bases first.
    if let Some((bitmap, positions)) = &selection.in_pack {
        return write_reused(repo, selection, bitmap, positions, &options, &mut may_send, out)
            .map(|stats| (stats, None));
    }
    let decide = move |id: &gix_hash::oid| {
        if options.thin_pack && selection.client_has_readably(id) {
            return DeltaBase::Thin;
        }
        // What this base would be, were the client allowed it; `may_send` (costly the first
        // time) is consulted only when that is more than re-deflating.
        let wanted = if options.thin_pack && selection.client_has(id) {
            DeltaBase::Thin
        } else if options.include_unselected_bases {
            DeltaBase::Include
        } else {
            return DeltaBase::Recompress;
        };
        if may_send(id) { wanted } else { DeltaBase::Recompress }
    };
    let mut search = DeltaSearch::new(repo, selection, &options);
    if let Some(limits) = options.search_anew {
        return write_searched_anew(&mut search, limits, &options, out, note_index);
    }
    // An object gix-pack re-deflates whole is, when a search follows, inflated again at once and
    // often made a delta: it is stored (level 0) for now, and deflated for the wire only if it
    // stays whole ([`deflate_stored`]).
    let compression = if search.enabled { gix::zlib::Compression::NONE } else { gix::zlib::Compression::DEFAULT };
    let packs = (options.packs)();
    // Entries sent as gix-pack gives them are sent as their stored bytes where it copied them
    // (a run of them one range of the pack file); the search's are rewritten, and held.
    let copies = (!search.enabled).then(|| std::sync::Arc::new(crate::packs::Copies::default()));
    // A repack holds no entry's data, as git's pack-objects holds none: its search reads the
    // whole objects batch by batch, and the writer reads what is kept from the pack maps. Only
    // where the search runs (not past its entry limit): what it leaves is written in base order,
    // where the marks are read.
    let hollow = packs
        .as_ref()
        .filter(|_| search.enabled && search.deltify)
        .map(|_| std::sync::Arc::new(crate::packs::Hollow::default()));
    let (num_entries, chunks) = gix_entries(
        repo,
        selection.objects.iter().copied(),
        options.thin_pack,
        compression,
        entries::Sources { packs: packs.clone(), copies: copies.clone(), hollow: hollow.clone() },
        decide,
    )?;
    let num_entries_u32 = u32::try_from(num_entries).map_err(|_| PackError::TooManyObjects)?;

    // Without ofs-delta, a delta refers to its base by id; keep the ids written so far for that.
    let mut ids: Vec<ObjectId> = Vec::new();
    let mut missing = None;
    let mut answer = Hashed::new(out, repo.object_hash());
    answer.emit(&gix_pack::data::header::encode(gix_pack::data::Version::V2, num_entries_u32))?;
    let mut written = EntryOffsets { index: note_index.then(Vec::new), copies, ..EntryOffsets::default() };
    // git's counting is its look-up of each object's stored entry, as gix-pack's here.
    let mut counting = Some(Phase::new("Counting objects", num_entries, options.progress_every));
    let mut chunks = Some(chunks);
    let mut outcome = None;
    if let Some(mut drained) = chunks.take_if(|_| search.enabled) {
        let mut entries = Vec::with_capacity(num_entries);
        let mut counting = counting.take().expect("not finished yet");
        for chunk in drained.by_ref() {
            let mut chunk = chunk.map_err(PackError::gix)?.1;
            if let Some(hollow) = &hollow {
                chunk.iter_mut().for_each(|entry| entries::mark_loose(entry, hollow));
            }
            entries.extend(chunk);
            counting.advance(entries.len() - counting.done, &mut answer)?;
        }
        // gix-pack's counts go with its iterator, drained (a tenth of a repack's peak).
        outcome = Some(gix_parallel::Finalize::finalize(drained).map_err(PackError::gix)?);
        counting.finish(&mut answer)?;
        if entries.iter().any(|e| e.is_invalid()) {
            return Err(PackError::corrupt("an object to send is missing from the repository"));
        }
        progress::compressing(&mut answer, options.progress_every, |tell| {
            let searched = if search.deltify {
                search.repack_window(&mut entries, packs.as_deref(), tell)
            } else {
                search.window(&mut entries, tell)
            };
            Ok(((), searched))
        })?;
        let whole = |id: &ObjectId| entries::whole_entry(repo, id);
        written.hollow_in = hollow.and(packs.clone());
        written.emit_in_base_order(&entries, options.ofs_delta, &whole, &mut answer)?;
    }
    for chunk in chunks.iter_mut().flatten() {
        let (_seq, mut entries) = chunk.map_err(PackError::gix)?;
        if let Some(counting) = counting.as_mut() {
            counting.advance(entries.len(), &mut answer)?;
        }
        for entry in &mut entries {
            if entry.is_invalid() {
                missing.get_or_insert(entry.id);
            }
            if !options.ofs_delta {
                if let output::entry::Kind::DeltaRef { object_index } = entry.kind {
                    entry.kind = output::entry::Kind::DeltaOid { id: ids[object_index] };
                }
                ids.push(entry.id);
            }
            written.emit(entry, &mut answer)?;
        }
    }
    if missing.is_some() {
        return Err(PackError::corrupt("an object to send is missing from the repository"));
    }
    if let Some(counting) = counting {
        counting.finish(&mut answer)?;
    }
    if written.offsets.len() != num_entries {
        return Err(PackError::corrupt(format!(
            "wrote {} entries of the {num_entries} announced",
            written.offsets.len()
        )));
    }
    let bytes = answer.finish()?;
    let outcome = match (outcome, chunks) {
        (Some(outcome), _) => outcome,
        (None, Some(chunks)) => gix_parallel::Finalize::finalize(chunks).map_err(PackError::gix)?,
        (None, None) => unreachable!("finalized where it was drained"),
    };
    let stats = Stats {
        entries: num_entries,
        copied: outcome.objects_copied_from_pack,
        re_deflated: outcome.decoded_and_recompressed_objects,
        bases_included: outcome.delta_bases_included,
        thin_deltas: outcome.ref_delta_objects,
        reused: 0,
        bytes,
        verbatim: false,
        deltas_computed: search.found,
    };
    Ok((stats, written.index))
}

/// [`write_noting`] with every delta searched anew ([`Options::search_anew`]): the entries come
/// from the search, not from gix-pack, and go out each base before its deltas.
fn write_searched_anew<W: Sink>(
    search: &mut DeltaSearch<'_>,
    limits: gix_pack::data::delta::search::Options,
    options: &Options<'_>,
    out: &mut W,
    note_index: bool,
) -> Result<(Stats, Option<Vec<IndexEntry>>), PackError> {
    let num_entries = search.selection.objects.len();
    let num_entries_u32 = u32::try_from(num_entries).map_err(|_| PackError::TooManyObjects)?;
    let mut answer = Hashed::new(out, search.repo.object_hash());
    answer.emit(&gix_pack::data::header::encode(gix_pack::data::Version::V2, num_entries_u32))?;
    let entries = progress::compressing(&mut answer, options.progress_every, |tell| search.anew(limits, tell))?;
    let mut written = EntryOffsets { index: note_index.then(Vec::new), ..EntryOffsets::default() };
    let whole = |id: &ObjectId| entries::whole_entry(search.repo, id);
    written.emit_in_base_order(&entries, options.ofs_delta, &whole, &mut answer)?;
    drop(entries);
    let bytes = answer.finish()?;
    let stats = Stats {
        entries: num_entries,
        re_deflated: num_entries - search.found,
        bytes,
        deltas_computed: search.found,
        ..Stats::default()
    };
    Ok((stats, written.index))
}

/// The entry of this pack (by index) a delta's base is, once the search may have made deltas of
/// any entry; `None` for a whole object and for a thin delta (its base is the client's).
fn base_in_pack(entry: &output::Entry, by_id: &HashMap<ObjectId, usize>) -> Option<usize> {
    match entry.kind {
        output::entry::Kind::DeltaRef { object_index } => Some(object_index),
        output::entry::Kind::DeltaOid { id } => by_id.get(&id).copied(),
        _ => None,
    }
}

/// True when an error from writing the pack comes from the client going away: the transports
/// say so with `BrokenPipe` (`transport::stream`, a closed socket), a socket also by a reset.
fn is_disconnect(err: &io::Error) -> bool {
    matches!(err.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted)
}

#[cfg(test)]
mod tests {
    use super::trailer::TrailerHasher;
    use super::*;

    #[test]
    fn the_trailer_hash_is_the_object_database_hash_of_the_same_bytes() {
        // Lengths around SHA-1's 64-byte block and its padding, and a large one fed in pieces.
        let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in [0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 4095, 300_000] {
            for kind in [gix_hash::Kind::Sha1, gix_hash::Kind::Sha256] {
                let mut ours = TrailerHasher::new(kind);
                for piece in data[..len].chunks(7_777) {
                    ours.update(piece);
                }
                let mut reference = gix_hash::hasher(kind);
                reference.update(&data[..len]);
                assert_eq!(
                    ours.finalize().unwrap(),
                    reference.try_finalize().unwrap().as_bytes(),
                    "{kind:?}, {len} bytes"
                );
            }
        }
    }

    /// A writer that fails every write with `kind`.
    struct Failing(io::ErrorKind);

    impl Sink for Failing {}

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(self.0, "the write failed"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn one_blob_repo() -> (tempfile::TempDir, gix::Repository, ObjectId) {
        let dir = tempfile::tempdir().unwrap();
        let repo = gix::init_bare(dir.path()).unwrap();
        let id = repo.write_blob(b"some content").unwrap().detach();
        (dir, repo, id)
    }

    fn write_into(out: &mut Failing) -> Result<Stats, PackError> {
        let (_dir, repo, id) = one_blob_repo();
        let selection = Selection { objects: vec![id], blobs: 1, ..Selection::default() };
        let options = Options {
            thin_pack: false,
            ofs_delta: true,
            include_unselected_bases: false,
            packs: &|| None,
            deltify: false,
            search_anew: None,
            progress_every: std::time::Duration::from_secs(1),
        };
        write(&repo, &selection, options, |_| false, out)
    }

    #[test]
    fn a_client_gone_mid_pack_is_a_disconnect_by_its_error_kind_not_its_message() {
        for kind in [io::ErrorKind::BrokenPipe, io::ErrorKind::ConnectionReset] {
            assert!(matches!(write_into(&mut Failing(kind)), Err(PackError::Disconnected)), "{kind:?}");
        }
    }

    #[test]
    fn other_write_failures_stay_failures() {
        let err = write_into(&mut Failing(io::ErrorKind::PermissionDenied)).unwrap_err();
        assert!(matches!(&err, PackError::Io(io) if io.kind() == io::ErrorKind::PermissionDenied), "{err:?}");
    }
}
