//! gix-pack's entries for a selection, on the calling thread, and a pack written through
//! gix-pack's own writer.

use std::io::Write;

use gix_hash::ObjectId;
use gix_pack::data::output;
use gix_pack::data::output::entry::iter_from_counts::DeltaBase;

use super::*;
use crate::error::ServeError;

/// gix-pack's pack entries for `ids`: looked up one by one in `repo`'s object database (its packs
/// kept mapped), their stored entries located in `packs` when given (without inflating each,
/// [`crate::packs`]), on the calling thread; a delta whose base is outside `ids` is what
/// `decide` says. Every pack gixd writes through gix-pack starts here.
#[allow(clippy::type_complexity, reason = "gix-pack's own iterator type, spelled where it is returned")]
pub(crate) fn gix_entries<I: Iterator<Item = ObjectId>, D: FnMut(&gix_hash::oid) -> DeltaBase>(
    repo: &gix::Repository,
    ids: I,
    allow_thin_pack: bool,
    compression: gix::zlib::Compression,
    packs: Option<std::sync::Arc<crate::packs::Packs>>,
    decide: D,
) -> Result<
    (
        usize,
        impl Iterator<Item = gix_error::Result<(gix_parallel::SequenceId, Vec<output::Entry>)>>
        + gix_parallel::Finalize<Reduce = output::entry::iter_from_counts::reduce::Statistics<gix_error::Error>>
        + use<I, D>,
    ),
    ServeError,
> {
    let counts: Vec<output::Count> =
        ids.map(|id| output::Count { id, entry_pack_location: output::count::PackLocation::NotLookedUp }).collect();
    // Deleted packs kept readable from here on, and the snapshot taken after that (a clone
    // collects its own): one taken before could pair a pack's index with whatever pack gix-odb
    // loads into its slot once a repack has freed it.
    let odb = {
        let mut odb = repo.objects.clone().into_inner();
        odb.prevent_pack_unload();
        odb.clone()
    };
    let options = output::entry::iter_from_counts::Options {
        thread_limit: Some(1),
        allow_thin_pack,
        compression,
        ..Default::default()
    };
    let progress = Box::new(gix_utils::progress::Discard);
    output::entry::iter_from_counts_with_delta_bases(
        counts,
        crate::packs::Locating { odb, packs },
        progress,
        options,
        Some(decide),
    )
    .map_err(ServeError::pack)
}

/// Objects gix-pack writes after the entries already in `answer`, looked up one by one; a delta
/// base outside them is what `decide` says (`Thin`: named by id, as it is in the answer or the
/// client has it; else re-deflated). `count` sees every entry written, for the statistics.
pub(super) fn write_through_gix_pack<W: Write>(
    repo: &gix::Repository,
    ids: impl Iterator<Item = ObjectId>,
    decide: impl FnMut(&gix_hash::oid) -> DeltaBase,
    packs: Option<std::sync::Arc<crate::packs::Packs>>,
    answer: &mut Hashed<'_, W>,
    mut count: impl FnMut(&output::Entry),
) -> Result<(), ServeError> {
    let (_, chunks) = gix_entries(repo, ids, true, gix::zlib::Compression::DEFAULT, packs, decide)?;
    let mut written = EntryOffsets::default();
    for chunk in chunks {
        let (_, entries) = chunk.map_err(ServeError::pack)?;
        for entry in entries {
            if entry.is_invalid() {
                return Err(ServeError::MissingObject(entry.id));
            }
            written.emit(&entry, answer)?;
            count(&entry);
        }
    }
    Ok(())
}
