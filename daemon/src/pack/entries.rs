//! gix-pack's entries for a selection, on the calling thread, and a pack written through
//! gix-pack's own writer.

use std::io::Write;

use gix_hash::ObjectId;
use gix_pack::data::output;
use gix_pack::data::output::entry::iter_from_counts::DeltaBase;

use super::PackError;
use super::*;

/// What a [`crate::packs::Locating`] is given besides the object database: the packs to locate
/// entries in, and where it notes copies or leaves entries hollow.
#[derive(Default)]
pub(crate) struct Sources {
    pub(crate) packs: Option<std::sync::Arc<crate::packs::Packs>>,
    pub(crate) copies: Option<std::sync::Arc<crate::packs::Copies>>,
    pub(crate) hollow: Option<std::sync::Arc<crate::packs::Hollow>>,
}

/// gix-pack's pack entries for `ids`: looked up one by one in `repo`'s object database (its packs
/// kept mapped), their stored entries located in `packs` when given (without inflating each,
/// [`crate::packs`]), on the calling thread; a delta whose base is outside `ids` is what
/// `decide` says; with `hollow` (a repack's), the entries hold no data, only where to read it
/// ([`crate::packs::Hollow`]). Every pack gixd writes through gix-pack starts here.
#[allow(clippy::type_complexity, reason = "gix-pack's own iterator type, spelled where it is returned")]
pub(crate) fn gix_entries<I: Iterator<Item = ObjectId>, D: FnMut(&gix_hash::oid) -> DeltaBase>(
    repo: &gix::Repository,
    ids: I,
    allow_thin_pack: bool,
    compression: gix::zlib::Compression,
    sources: Sources,
    decide: D,
) -> Result<
    (
        usize,
        impl Iterator<Item = gix_error::Result<(gix_parallel::SequenceId, Vec<output::Entry>)>>
        + gix_parallel::Finalize<Reduce = output::entry::iter_from_counts::reduce::Statistics<gix_error::Error>>
        + use<I, D>,
    ),
    PackError,
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
        crate::packs::Locating { odb, packs: sources.packs, copies: sources.copies, hollow: sources.hollow },
        progress,
        options,
        Some(decide),
    )
    .map_err(PackError::gix)
}

/// Give `entry` its [`crate::packs::Hollow::LOOSE`] mark and its size, if gix-pack made it of
/// nothing for a repack (its size 0 until then).
pub(super) fn mark_loose(entry: &mut output::Entry, hollow: &crate::packs::Hollow) {
    if entry.decompressed_size == 0
        && let Some(size) = hollow.take_loose(&entry.id)
    {
        entry.decompressed_size = size;
        entry.compressed_data = vec![crate::packs::Hollow::LOOSE];
    }
}

/// Whether an object is in a pack the bitmap covers.
pub(super) type InBitmap<'a> = dyn Fn(&gix_hash::oid) -> bool + 'a;

/// Objects gix-pack writes after the entries already in `answer`, looked up one by one; a delta
/// base outside them is what `decide` says (`Thin`: named by id, as it is in the answer or the
/// client has it; else re-deflated). `count` sees every entry written, for the statistics.
/// With `search` (enabled), what would go out whole among them is searched for deltas against
/// the rest first, all of them held ([`DeltaSearch::window`]); its third part says whether an
/// object is in a pack the bitmap covers.
#[allow(clippy::too_many_arguments, reason = "the one writer of both bitmapped paths' remainder")]
pub(super) fn write_through_gix_pack<W: Sink>(
    repo: &gix::Repository,
    ids: impl Iterator<Item = ObjectId>,
    decide: impl FnMut(&gix_hash::oid) -> DeltaBase,
    packs: Option<std::sync::Arc<crate::packs::Packs>>,
    answer: &mut Hashed<'_, W>,
    earlier: Earlier<'_>,
    search: Option<(&mut super::deltas::DeltaSearch<'_>, std::time::Duration, &InBitmap<'_>)>,
    mut count: impl FnMut(&output::Entry),
) -> Result<(), PackError> {
    let copies = std::sync::Arc::new(crate::packs::Copies::default());
    let search = search.filter(|(search, ..)| search.enabled);
    // What is searched is stored (level 0) until the search says it stays whole.
    let compression = if search.is_some() { gix::zlib::Compression::NONE } else { gix::zlib::Compression::DEFAULT };
    let (_, chunks) = gix_entries(
        repo,
        ids,
        true,
        compression,
        Sources { packs, copies: Some(copies.clone()), hollow: None },
        decide,
    )?;
    let whole = |id: &ObjectId| whole_entry(repo, id);
    let mut out = BaseFirst {
        earlier,
        at_by_id: Default::default(),
        at: Vec::new(),
        ids: Vec::new(),
        head: Vec::new(),
        copies,
        whole: &whole,
    };
    if let Some((search, every, in_bitmap)) = search {
        let mut entries = Vec::new();
        for chunk in chunks {
            entries.extend(chunk.map_err(PackError::gix)?.1);
        }
        if let Some(missing) = entries.iter().find(|e| e.is_invalid()) {
            return Err(PackError::MissingObject(missing.id));
        }
        // What gix-pack made anew (loose objects, deltas re-deflated whole) is searched, and what
        // it copied whole from a pack outside the bitmap (a push's); not what it copied whole from
        // a pack the bitmap covers (a multi-pack-index's roll-up): those are bases their pack's
        // writer chose, as a clone's are, and searching a roll-up's thousands of them cost 5x
        // git's CPU for a fetch.
        let fresh: Vec<usize> = (0..entries.len())
            .filter(|&i| {
                matches!(entries[i].kind, output::entry::Kind::Base(_))
                    && (super::deltas::is_stored(&entries[i]) || !in_bitmap(&entries[i].id))
            })
            .collect();
        let mut batch: Vec<output::Entry> =
            fresh.iter().map(|&i| std::mem::replace(&mut entries[i], output::Entry::invalid())).collect();
        progress::compressing(answer, every, |tell| Ok(((), search.window(&mut batch, tell))))?;
        for (i, entry) in fresh.into_iter().zip(batch) {
            entries[i] = entry;
        }
        for entry in &entries {
            out.at.push(u64::MAX);
            out.ids.push(entry.id);
        }
        return out.write_base_first(0, &entries, answer, &mut count);
    }
    // Entries are held (up to a budget) so that a delta goes after its base: gix-pack gives them
    // in stored order, and a thin pack completed by `index-pack --fix-thin` stores its bases after
    // the deltas naming them, which would have to name them by id.
    let mut held: Vec<output::Entry> = Vec::new();
    let mut held_bytes = 0usize;
    let mut streaming = false;
    for chunk in chunks {
        let (_, entries) = chunk.map_err(PackError::gix)?;
        for entry in entries {
            if entry.is_invalid() {
                return Err(PackError::MissingObject(entry.id));
            }
            out.at.push(u64::MAX);
            out.ids.push(entry.id);
            if streaming {
                out.write(out.at.len() - 1, &entry, answer)?;
                count(&entry);
                continue;
            }
            held_bytes += entry.compressed_data.len();
            held.push(entry);
            if held_bytes > BASE_FIRST_BUDGET {
                out.write_base_first(out.at.len() - held.len(), &held, answer, &mut count)?;
                held.clear();
                streaming = true;
            }
        }
    }
    out.write_base_first(out.at.len() - held.len(), &held, answer, &mut count)
}

/// `id` as a whole entry, deflated anew: how a member of a cycle of deltas goes out ([`base_first`]).
pub(super) fn whole_entry(repo: &gix::Repository, id: &ObjectId) -> Result<output::Entry, PackError> {
    let mut buf = Vec::new();
    let data = gix_object::Find::try_find(&repo.objects, id, &mut buf)?.ok_or(PackError::MissingObject(*id))?;
    let count = output::Count { id: *id, entry_pack_location: output::count::PackLocation::NotLookedUp };
    output::Entry::from_data(&count, &data, gix::zlib::Compression::DEFAULT).map_err(PackError::gix)
}

/// Entries `0..n` in the order they go out so that each delta follows its base among them, told
/// to `emit` one by one: `base_of(i)` is the entry that entry `i` is a delta of, if it is one of
/// them. In the given order, an entry whose base is not out yet waits for it and follows it at
/// once. What still waits at the end is a cycle, each delta's base waiting on the next (an object
/// two packs hold as deltas of each other, met once as a stored delta of the other and once
/// named by id from the other pack — seen while git gc rewrote the packs under a fetch): its
/// first member by index goes out whole (`emit(i, true)`), the rest follow it. Every pack gixd
/// writes with deltas among its entries is ordered here.
pub(super) fn base_first<E>(
    n: usize,
    base_of: impl Fn(usize) -> Option<usize>,
    mut emit: impl FnMut(usize, bool) -> Result<(), E>,
) -> Result<(), E> {
    type Waiting = std::collections::HashMap<usize, Vec<usize>>;
    /// Emit `first` (whole when asked), then every delta that waited on it, and theirs, each once.
    fn release<E>(
        first: usize,
        whole: bool,
        waiting: &mut Waiting,
        done: &mut [bool],
        emit: &mut impl FnMut(usize, bool) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut ready = vec![first];
        while let Some(i) = ready.pop() {
            if done[i] {
                continue;
            }
            emit(i, whole && i == first)?;
            done[i] = true;
            if let Some(mut next) = waiting.remove(&i) {
                next.reverse();
                ready.extend(next);
            }
        }
        Ok(())
    }
    let mut waiting = Waiting::new();
    let mut done = vec![false; n];
    for first in 0..n {
        if let Some(base) = base_of(first).filter(|base| *base < n && !done[*base]) {
            waiting.entry(base).or_default().push(first);
            continue;
        }
        release(first, false, &mut waiting, &mut done, &mut emit)?;
    }
    while let Some(&stuck) = waiting.keys().min() {
        release(stuck, true, &mut waiting, &mut done, &mut emit)?;
    }
    Ok(())
}

/// Compressed bytes of entries held to put bases before their deltas; past it, the rest go out
/// as they come (a delta before its base names it by id).
const BASE_FIRST_BUDGET: usize = 64 << 20;

/// Where each entry written went, by id and by its index in gix-pack's order, for deltas
/// written after their base: an ofs-delta where the client takes them (an id's 20 or 32 bytes
/// become a distance's one to three), else the base's id.
struct BaseFirst<'a> {
    earlier: Earlier<'a>,
    at_by_id: gix::hashtable::HashMap<ObjectId, u64>,
    /// By index in gix-pack's order: where it went (`u64::MAX`: not yet), and its id.
    at: Vec<u64>,
    ids: Vec<ObjectId>,
    head: Vec<u8>,
    /// Where gix-pack's entries were copied from, to send those stored bytes instead.
    copies: std::sync::Arc<crate::packs::Copies>,
    /// An object as a whole entry, deflated anew: a member of a cycle of deltas goes out so.
    whole: &'a dyn Fn(&ObjectId) -> Result<output::Entry, PackError>,
}

impl BaseFirst<'_> {
    /// Write `entry`, the `index`-th of gix-pack's order.
    fn write<W: Write>(
        &mut self,
        index: usize,
        entry: &output::Entry,
        answer: &mut Hashed<'_, W>,
    ) -> Result<(), PackError> {
        use gix_pack::data::entry::Header;
        let here = answer.written;
        let ofs_or_ref = |base_at: Option<u64>, base_id: ObjectId| match base_at.filter(|_| self.earlier.ofs_delta) {
            Some(at) => Header::OfsDelta { base_distance: here - at },
            None => Header::RefDelta { base_id },
        };
        let header = match entry.kind {
            output::entry::Kind::Base(_) => entry.to_entry_header(gix_pack::data::Version::V2, |_| 0),
            output::entry::Kind::DeltaOid { id } => {
                let at = self.at_by_id.get(&id).copied().or_else(|| self.earlier.before.and_then(|b| b(&id)));
                ofs_or_ref(at, id)
            }
            output::entry::Kind::DeltaRef { object_index } => {
                let at = self.at.get(object_index).copied().filter(|at| *at != u64::MAX);
                let at = at.ok_or_else(|| PackError::corrupt("a delta's base was never written"))?;
                ofs_or_ref(Some(at), self.ids[object_index])
            }
        };
        self.head.clear();
        header.write_to(entry.decompressed_size as u64, &mut self.head)?;
        answer.emit_entry(&self.head, &entry.compressed_data, self.copies.take(&entry.compressed_data))?;
        self.at_by_id.insert(entry.id, here);
        self.at[index] = here;
        Ok(())
    }

    /// Write `entries` (gix-pack's from index `start` on), each delta whose base is among them
    /// after that base ([`base_first`]).
    fn write_base_first<W: Write>(
        &mut self,
        start: usize,
        entries: &[output::Entry],
        answer: &mut Hashed<'_, W>,
        count: &mut impl FnMut(&output::Entry),
    ) -> Result<(), PackError> {
        let by_id: gix::hashtable::HashMap<ObjectId, usize> =
            entries.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
        let base_of = |i: usize| match entries[i].kind {
            output::entry::Kind::DeltaOid { id } => by_id.get(&id).copied(),
            output::entry::Kind::DeltaRef { object_index } => object_index.checked_sub(start),
            output::entry::Kind::Base(_) => None,
        };
        base_first(entries.len(), base_of, |i, whole| {
            let whole = if whole { Some((self.whole)(&entries[i].id)?) } else { None };
            let entry = whole.as_ref().unwrap_or(&entries[i]);
            self.write(start + i, entry, answer)?;
            count(entry);
            Ok(())
        })
    }
}

/// Where objects written before a gix-pack stream went in the same answer (`before`: by id), and
/// whether the client takes ofs-deltas: a delta naming such an object by id is then an ofs-delta.
/// Where an object went in the answer, if it did.
pub(super) type OffsetOf<'a> = dyn Fn(&gix_hash::oid) -> Option<u64> + 'a;

pub(super) struct Earlier<'a> {
    pub(super) ofs_delta: bool,
    pub(super) before: Option<&'a OffsetOf<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zlib stream of `data`.
    fn deflated(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    fn blob_id(data: &[u8]) -> ObjectId {
        gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, data).unwrap()
    }

    /// `target` as a delta entry against `base`, of `kind`.
    fn delta_entry(target: &[u8], base: &[u8], kind: output::entry::Kind) -> output::Entry {
        let delta = gix_pack::data::delta::encode::Index::new(base).encode(target, target.len()).unwrap();
        output::Entry { id: blob_id(target), kind, decompressed_size: delta.len(), compressed_data: deflated(&delta) }
    }

    /// x a delta of y (named by index), y one of x (named by id), and their whole entries.
    #[allow(clippy::type_complexity, reason = "a test's pair")]
    fn a_cycle() -> (Vec<output::Entry>, Vec<(ObjectId, Vec<u8>)>) {
        let x: Vec<u8> = (0..200).flat_map(|n| format!("line {n} of the pair\n").into_bytes()).collect();
        let mut y = x.clone();
        y.extend_from_slice(b"one more line\n");
        let entries = vec![
            delta_entry(&x, &y, output::entry::Kind::DeltaRef { object_index: 1 }),
            delta_entry(&y, &x, output::entry::Kind::DeltaOid { id: blob_id(&x) }),
        ];
        (entries, vec![(blob_id(&x), x), (blob_id(&y), y)])
    }

    fn whole_of(objects: &[(ObjectId, Vec<u8>)], id: &ObjectId) -> Result<output::Entry, PackError> {
        let data = &objects.iter().find(|(i, _)| i == id).expect("one of the pair").1;
        Ok(output::Entry {
            id: *id,
            kind: output::entry::Kind::Base(gix_object::Kind::Blob),
            decompressed_size: data.len(),
            compressed_data: deflated(data),
        })
    }

    fn git_indexes(bytes: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let git =
            |args: &[&str]| std::process::Command::new("git").current_dir(dir.path()).args(args).output().unwrap();
        assert!(git(&["init", "-q"]).status.success());
        std::fs::write(dir.path().join("cycle.pack"), bytes).unwrap();
        let indexed = git(&["index-pack", "cycle.pack"]);
        assert!(indexed.status.success(), "git indexes it: {}", String::from_utf8_lossy(&indexed.stderr));
    }

    #[test]
    fn base_first_puts_each_delta_after_its_base_and_breaks_a_cycle_at_its_first_member() {
        // 0 ← 2 (2 a delta of 0, after it already); 3 → 4 (3 waits for 4); 5 ↔ 6 a cycle.
        let bases = [None, None, Some(0), Some(4), None, Some(6), Some(5)];
        let mut order = Vec::new();
        base_first::<()>(
            bases.len(),
            |i| bases[i],
            |i, whole| {
                order.push((i, whole));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(order, [(0, false), (1, false), (2, false), (4, false), (3, false), (5, true), (6, false)]);
    }

    /// The search's entries (a fetch without bitmap, a repack) go out through the same ordering
    /// as gix-pack's: a cycle among them no longer fails the answer. Red before: "a delta's base
    /// was never written".
    #[test]
    fn a_cycle_among_searched_entries_goes_out_with_one_member_whole_and_git_indexes_the_pack() {
        let (entries, objects) = a_cycle();
        let mut bytes = Vec::new();
        let mut answer = Hashed::new(&mut bytes, gix_hash::Kind::Sha1);
        answer.emit(b"PACK\0\0\0\x02\0\0\0\x02").unwrap();
        let mut written = EntryOffsets::default();
        written.emit_in_base_order(&entries, true, &|id| whole_of(&objects, id), &mut answer).unwrap();
        answer.finish().unwrap();
        assert_eq!(written.offsets.len(), 2, "both go out");
        git_indexes(&bytes);
    }

    #[test]
    fn a_cycle_of_deltas_goes_out_with_one_member_whole_and_git_indexes_the_pack() {
        // As gix-pack gave them for an object two packs hold as deltas of each other while git
        // gc rewrote them.
        let (entries, objects) = a_cycle();
        let whole = |id: &ObjectId| whole_of(&objects, id);
        let mut bytes = Vec::new();
        let mut answer = Hashed::new(&mut bytes, gix_hash::Kind::Sha1);
        answer.emit(b"PACK\0\0\0\x02\0\0\0\x02").unwrap();
        let mut out = BaseFirst {
            earlier: Earlier { ofs_delta: true, before: None },
            at_by_id: Default::default(),
            at: vec![u64::MAX; 2],
            ids: entries.iter().map(|e| e.id).collect(),
            head: Vec::new(),
            copies: Default::default(),
            whole: &whole,
        };
        let mut written = Vec::new();
        out.write_base_first(0, &entries, &mut answer, &mut |e: &output::Entry| written.push(e.kind)).unwrap();
        answer.finish().unwrap();
        assert_eq!(written.len(), 2, "both go out: {written:?}");
        assert!(matches!(written[0], output::entry::Kind::Base(_)), "one member whole, first: {written:?}");
        git_indexes(&bytes);
    }
}
