//! The delta search for objects that would go out whole (git's `pack-objects --window=10
//! --depth=50`), driven over the patch queue's gix-pack `data::delta::{encode, search}`.

use std::collections::HashMap;
use std::io::Read;

use gix_hash::ObjectId;
use gix_pack::data::output;

use super::*;
use crate::select::Selection;

/// Deltas computed while the pack is written (with gix-pack's delta encoder, patch 0003): an
/// object about to go out whole whose path the client holds another version of becomes a thin
/// delta against that version — the client has it (an edge commit's tree) and may read it.
/// Bounded: objects of at most [`DeltaSearch::MAX_OBJECT`] bytes, and [`DeltaSearch::BUDGET`]
/// bytes of objects and bases looked at per pack; past that, objects go out as before.
pub(super) struct DeltaSearch<'a> {
    pub(super) repo: &'a gix::Repository,
    pub(super) selection: &'a Selection,
    pub(super) enabled: bool,
    /// Thin deltas (against what the client has) are allowed.
    pub(super) thin_allowed: bool,
    /// A repack's search ([`Options::deltify`]): every object stored whole, in batches.
    pub(super) deltify: bool,
    pub(super) budget: usize,
    pub(super) found: usize,
    pub(super) base: Vec<u8>,
    /// Every object this search deflates goes through this one stream.
    zlib: Deflater,
}

impl<'a> DeltaSearch<'a> {
    const MAX_OBJECT: usize = 16 << 20;
    const BUDGET: usize = 1 << 30;
    /// Smaller objects gain nothing worth a delta's header and instructions.
    const MIN_OBJECT: usize = 64;

    /// At most this many entries are kept back for a windowed search; a larger pack streams.
    const MAX_SEARCHED_ENTRIES: usize = 500_000;
    /// Objects inflated for the search, in bytes at most (the rest are not searched).
    const MAX_SEARCHED_BYTES: usize = 512 << 20;
    /// A repack's batch: objects inflated at once, at least [`Self::REPACK_BATCH_OBJECTS`]. git's
    /// window holds ten objects; a batch loses a window's worth of pairs at each boundary (cargo
    /// after 40 pushes: 48.21, 48.20, 48.20 MB at 8, 16, 32 MiB) and its inflated objects and
    /// their delta indexes are the search's memory (peak 284, 289, 314 MB).
    const REPACK_BATCH_BYTES: usize = 4 << 20;
    /// A batch holds at least a window of objects, however large they are.
    const REPACK_BATCH_OBJECTS: usize = 10;

    pub(super) fn new(repo: &'a gix::Repository, selection: &'a Selection, options: &Options) -> Self {
        // A fetch by walking: the client holds something to delta against, and what is sent
        // whole is new (a clone's whole objects are its pack's delta bases already).
        let enabled = !selection.by_bitmap
            && (options.deltify || !selection.client_has.is_empty())
            && selection.objects.len() <= max_searched_entries();
        DeltaSearch {
            repo,
            selection,
            enabled,
            thin_allowed: options.thin_pack,
            deltify: options.deltify,
            budget: Self::BUDGET,
            found: 0,
            base: Vec::new(),
            zlib: Deflater::default(),
        }
    }

    /// A search over what a bitmapped answer sends through gix-pack, `objects` of them: objects
    /// outside the bitmapped pack (pushed since its repack, loose) and deltas whose base goes
    /// nowhere — git's pack-objects searches whatever it does not reuse, bitmap or not. Their
    /// name hashes come from the bitmap's walk ([`crate::bitmap::Reach::names`]); nothing the
    /// client holds is known by path, so nothing is thin.
    pub(super) fn outside_the_bitmap(
        repo: &'a gix::Repository,
        selection: &'a Selection,
        options: &Options,
        objects: usize,
    ) -> Self {
        let mut search = DeltaSearch::new(repo, selection, options);
        search.enabled = (2..=Self::MAX_SEARCHED_ENTRIES).contains(&objects);
        search
    }

    /// git's window search over the entries going out whole (trees and blobs) and, as preferred
    /// bases, what the client holds at their paths (thin only where the client may read it and
    /// thin packs are allowed): entries that gain become deltas (`DeltaOid`, an entry's id or a
    /// held object's; [`EntryOffsets::emit_in_base_order`] orders and encodes them). What the
    /// window leaves whole may still pay as a thin delta against the client's version at its
    /// path, by a looser limit ([`Self::same_path_delta`]); an entry too large for the search's
    /// memory is tried for that alone ([`Self::try_thin_delta`]). `tell` hears how many it has
    /// searched, of how many, as it goes. Returns how many entries it searched.
    pub(super) fn window(&mut self, entries: &mut [output::Entry], tell: &mut dyn FnMut(usize, usize)) -> usize {
        use gix_pack::data::delta::search;
        /// An object the search looks at: an entry (by index) or a held object, inflated.
        struct Candidate {
            entry: Option<usize>,
            id: ObjectId,
            kind: gix_object::Kind,
            name_hash: u32,
            data: Vec<u8>,
        }
        let mut candidates: Vec<Candidate> = Vec::new();
        // Entry candidate → the candidate of the client's version at its path.
        let mut same_path: Vec<(usize, usize)> = Vec::new();
        let mut held_at: HashMap<ObjectId, usize> = HashMap::new();
        let mut left_out: Vec<usize> = Vec::new();
        let mut bytes = 0usize;
        // A base at the same path that is itself one of these entries is searched as the entry:
        // offered a second time, as a base apart, the two could each become the other's delta.
        // Only a base this answer sends can be one (the client's held ones never are): without
        // those, no table.
        let searched: std::collections::HashSet<ObjectId> = match self.selection.same_path_sent.is_empty() {
            true => Default::default(),
            false => entries.iter().map(|e| e.id).collect(),
        };
        for (i, entry) in entries.iter().enumerate() {
            let output::entry::Kind::Base(kind @ (gix_object::Kind::Blob | gix_object::Kind::Tree)) = entry.kind else {
                continue;
            };
            let size = entry.decompressed_size;
            if !(Self::MIN_OBJECT..=Self::MAX_OBJECT).contains(&size) {
                continue;
            }
            if bytes + size > Self::MAX_SEARCHED_BYTES {
                left_out.push(i);
                continue;
            }
            let Some(target) = inflated(entry) else { continue };
            bytes += size;
            let name_hash = self.selection.name_hash.get(&entry.id).copied().unwrap_or(0);
            candidates.push(Candidate { entry: Some(i), id: entry.id, kind, name_hash, data: target });
            let this = candidates.len() - 1;
            let Some(held) = self
                .selection
                .same_path_held
                .get(&entry.id)
                .filter(|held| self.thin_allowed && self.selection.client_has_readably(held))
                .or_else(|| self.selection.same_path_sent.get(&entry.id))
                .filter(|base| !searched.contains(*base))
            else {
                continue;
            };
            let at = match held_at.get(held) {
                Some(at) => *at,
                None => {
                    let Ok(Some(base)) = gix_object::Find::try_find(&self.repo.objects, held, &mut self.base) else {
                        continue;
                    };
                    if base.kind != kind || base.data.len() > Self::MAX_OBJECT {
                        continue;
                    }
                    bytes += base.data.len();
                    candidates.push(Candidate { entry: None, id: *held, kind, name_hash, data: base.data.to_vec() });
                    held_at.insert(*held, candidates.len() - 1);
                    candidates.len() - 1
                }
            };
            same_path.push((this, at));
        }
        let objects: Vec<search::Object<'_>> = candidates
            .iter()
            .map(|c| search::Object {
                kind: c.kind,
                name_hash: c.name_hash,
                data: &c.data,
                preferred_base: c.entry.is_none(),
                stored_whole_in: None,
            })
            .collect();
        let options = search::Options {
            budget: self.budget,
            max_size: Self::MAX_OBJECT,
            min_size: Self::MIN_OBJECT,
            ..Default::default()
        };
        let (deltas, _stats) = search::find_with_progress(&objects, options, tell);
        let mut has_delta = vec![false; candidates.len()];
        for delta in deltas {
            let Some(target) = candidates[delta.target].entry else { continue };
            has_delta[delta.target] =
                self.replace_with_delta(&mut entries[target], candidates[delta.base].id, &delta.data);
        }
        for (target, held) in same_path {
            if has_delta[target] {
                continue;
            }
            let (t, h) = (&candidates[target], &candidates[held]);
            let entry = &mut entries[t.entry.expect("a target is an entry")];
            if let Some(delta) = self.same_path_delta(&t.data, &h.data) {
                self.replace_with_delta(entry, h.id, &delta);
            }
        }
        for i in left_out {
            self.try_thin_delta(&mut entries[i]);
        }
        // What stays whole and was stored for the search is deflated now: from the data at hand
        // for the candidates, inflated again for the rest (once each: a candidate that does
        // not deflate smaller is not tried again).
        let mut deflated = vec![false; entries.len()];
        for c in &candidates {
            if let Some(i) = c.entry {
                deflate_stored(&mut entries[i], Some(&c.data), &mut self.zlib);
                deflated[i] = true;
            }
        }
        for (entry, _) in entries.iter_mut().zip(deflated).filter(|(_, done)| !done) {
            deflate_stored(entry, None, &mut self.zlib);
        }
        candidates.iter().filter(|c| c.entry.is_some()).count()
    }

    /// A repack's search: every whole tree and blob, in git's search order (kind, name hash,
    /// largest first), searched in consecutive batches of at most [`Self::REPACK_BATCH_BYTES`]
    /// inflated, so a repository of any size is searched whole with bounded memory (a window
    /// spans a batch, not the boundary between two) and no byte budget. Nothing is thin. Two
    /// objects stored whole in one of `packs` are not tried against each other (its writer did). `tell`
    /// hears how many it has searched, of how many, as it goes. Returns how many it searched.
    pub(super) fn repack_window(
        &mut self,
        entries: &mut [output::Entry],
        packs: Option<&crate::packs::Packs>,
        tell: &mut dyn FnMut(usize, usize),
    ) -> usize {
        use gix_pack::data::delta::search;
        let name_hash = |e: &output::Entry| self.selection.name_hash.get(&e.id).copied().unwrap_or(0);
        let stored_whole_in = |id: &ObjectId| packs.and_then(|packs| packs.stored_whole_in(id));
        let order = self.search_order(entries, |kind, e| {
            matches!(kind, gix_object::Kind::Blob | gix_object::Kind::Tree)
                && (Self::MIN_OBJECT..=Self::MAX_OBJECT).contains(&e.decompressed_size)
        });
        let mut searched = 0;
        let mut deflated = vec![false; entries.len()];
        let mut rest = &order[..];
        while !rest.is_empty() {
            let len = batch_len(rest.iter().map(|(.., i)| entries[*i].decompressed_size));
            let (batch, next) = rest.split_at(len);
            rest = next;
            // A stored entry's data is taken out as it is inflated (the batch holds it once); it
            // is deflated, or made a delta, from the batch's copy below.
            // A hollow entry's object is read here, from its pack map or the object database
            // ([`crate::packs::Hollow`]); one kept in the database is taken too.
            let repo = self.repo;
            let inflated: Vec<(usize, Vec<u8>)> = batch
                .iter()
                .filter_map(|(.., i)| {
                    let entry = &mut entries[*i];
                    let data = hollow_object(entry, packs, repo).unwrap_or_else(|| inflated(entry))?;
                    if is_stored(entry) || is_loose(entry) {
                        entry.compressed_data = Vec::new();
                    }
                    Some((*i, data))
                })
                .collect();
            #[cfg(feature = "test-hooks")]
            {
                let held = entries.iter().map(|e| e.compressed_data.len()).sum::<usize>()
                    + inflated.iter().map(|(_, data)| data.len()).sum::<usize>();
                REPACK_BYTES_HELD.fetch_max(held, std::sync::atomic::Ordering::Relaxed);
            }
            let objects: Vec<search::Object<'_>> = inflated
                .iter()
                .map(|(i, data)| {
                    let gix_pack::data::output::entry::Kind::Base(kind) = entries[*i].kind else {
                        unreachable!("whole entries only")
                    };
                    let (name_hash, stored_whole_in) = (name_hash(&entries[*i]), stored_whole_in(&entries[*i].id));
                    search::Object { kind, name_hash, data, preferred_base: false, stored_whole_in }
                })
                .collect();
            let options = search::Options {
                budget: usize::MAX,
                max_size: Self::MAX_OBJECT,
                min_size: Self::MIN_OBJECT,
                ..Default::default()
            };
            let (deltas, _stats) =
                search::find_with_progress(&objects, options, &mut |done, _| tell(searched + done, order.len()));
            for delta in deltas {
                let (target, base) = (inflated[delta.target].0, inflated[delta.base].0);
                let base_id = entries[base].id;
                self.replace_with_delta(&mut entries[target], base_id, &delta.data);
            }
            for (i, data) in &inflated {
                deflate_stored(&mut entries[*i], Some(data), &mut self.zlib);
                deflated[*i] = true;
            }
            searched += inflated.len();
        }
        // What stays stored (level 0) and was not searched is deflated now (once: a searched
        // entry that does not deflate smaller is not tried again); what the object database
        // keeps is read and deflated.
        for (entry, _) in entries.iter_mut().zip(deflated).filter(|(_, done)| !done) {
            if is_loose(entry) {
                // One that cannot be read keeps its mark: the writer refuses it.
                if let Some(Some(data)) = hollow_object(entry, packs, self.repo) {
                    entry.compressed_data = Vec::new();
                    deflate_stored(entry, Some(&data), &mut self.zlib);
                }
            } else {
                deflate_stored(entry, None, &mut self.zlib);
            }
        }
        searched
    }

    /// git's `repack -f` (no delta reused): every object of the selection is decoded and searched
    /// anew, in git's search order (kind, name hash, largest first) and in consecutive batches of
    /// at most [`Self::REPACK_BATCH_BYTES`] decoded, as [`Self::repack_window`] searches the
    /// whole ones; `search` gives the window and depth. Every object becomes an entry of its own
    /// (a delta against another entry, or whole, deflated), in selection order; returned with how
    /// many were searched. `tell` hears how many it has searched, of how many.
    pub(super) fn anew(
        &mut self,
        search: gix_pack::data::delta::search::Options,
        tell: &mut dyn FnMut(usize, usize),
    ) -> Result<(Vec<output::Entry>, usize), PackError> {
        use gix_pack::data::delta::search as find;
        let ids = &self.selection.objects;
        // Decoded without a delta cache: in search order the versions of a path come largest
        // first, not chain order, and the repository's 96 MiB cache held its fill for no CPU
        // saved (tokio: peak 200 → 81 MB, 2.20 → 2.33 s; cargo 12.1 → 12.5 s).
        let mut odb = self.repo.objects.clone();
        odb.unset_pack_cache();
        let mut entries = Vec::with_capacity(ids.len());
        for id in ids {
            let header = self.repo.find_header(*id).map_err(|_| PackError::MissingObject(*id))?;
            entries.push(output::Entry {
                id: *id,
                kind: output::entry::Kind::Base(header.kind()),
                decompressed_size: header.size() as usize,
                compressed_data: Vec::new(),
            });
        }
        let name_hash = |id: &ObjectId| self.selection.name_hash.get(id).copied().unwrap_or(0);
        let searchable = |e: &output::Entry| (search.min_size..=search.max_size).contains(&e.decompressed_size);
        let order = self.search_order(&entries, |_, e| searchable(e));
        // Too small to be worth a delta, or too large to search: whole (decided before the
        // search, which gives its deltas their own sizes).
        let unsearched: Vec<usize> = (0..entries.len()).filter(|i| !searchable(&entries[*i])).collect();
        let mut searched = 0;
        let mut rest = &order[..];
        while !rest.is_empty() {
            let len = batch_len(rest.iter().map(|(.., i)| entries[*i].decompressed_size));
            let (batch, next) = rest.split_at(len);
            rest = next;
            let mut decoded = Vec::with_capacity(batch.len());
            for (.., i) in batch {
                decoded.push(decode(&odb, &mut entries[*i], &mut self.base)?);
            }
            let objects: Vec<find::Object<'_>> = batch
                .iter()
                .zip(&decoded)
                .map(|((.., i), data)| {
                    let output::entry::Kind::Base(kind) = entries[*i].kind else { unreachable!("whole so far") };
                    let name_hash = name_hash(&entries[*i].id);
                    find::Object { kind, name_hash, data, preferred_base: false, stored_whole_in: None }
                })
                .collect();
            let (deltas, _stats) =
                find::find_with_progress(&objects, search, &mut |done, _| tell(searched + done, order.len()));
            let mut whole = vec![true; batch.len()];
            for delta in deltas {
                let (target, base) = (batch[delta.target].3, batch[delta.base].3);
                let entry = &mut entries[target];
                entry.kind = output::entry::Kind::DeltaOid { id: ids[base] };
                entry.decompressed_size = delta.data.len();
                entry.compressed_data = self.zlib.deflate(&delta.data)?;
                whole[delta.target] = false;
                self.found += 1;
            }
            for (((.., i), data), whole) in batch.iter().zip(&decoded).zip(whole) {
                if whole {
                    entries[*i].compressed_data = self.zlib.deflate(data)?;
                }
            }
            searched += batch.len();
        }
        for i in unsearched {
            let data = decode(&odb, &mut entries[i], &mut self.base)?;
            entries[i].compressed_data = self.zlib.deflate(&data)?;
        }
        Ok((entries, searched))
    }

    /// git's search order (kind, name hash, largest first; ties in selection order) of the whole
    /// entries `searched` takes: each one's sort key and its index, the index last.
    fn search_order(
        &self,
        entries: &[output::Entry],
        searched: impl Fn(gix_object::Kind, &output::Entry) -> bool,
    ) -> Vec<(u8, u32, std::cmp::Reverse<usize>, usize)> {
        let name_hash = |id: &ObjectId| self.selection.name_hash.get(id).copied().unwrap_or(0);
        let mut order: Vec<_> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.kind {
                output::entry::Kind::Base(kind) if searched(kind, e) => {
                    Some((kind as u8, name_hash(&e.id), std::cmp::Reverse(e.decompressed_size), i))
                }
                _ => None,
            })
            .collect();
        order.sort();
        order
    }

    /// A thin delta of `target` against the client's version at its path, within the budget:
    /// worth it only well below the whole object (git asks a first delta for under half).
    pub(super) fn same_path_delta(&mut self, target: &[u8], held: &[u8]) -> Option<Vec<u8>> {
        if target.len() > self.budget {
            return None;
        }
        self.budget = self.budget.saturating_sub(target.len() + held.len());
        gix_pack::data::delta::encode::Index::new(held).encode(target, target.len() / 2)
    }

    /// Make `entry` the delta `delta` against `base` if, compressed, it is smaller than the
    /// entry is now; true if it was. An entry stored for the search (not deflated yet) takes the
    /// delta as git takes what its search found: the delta is under half the object already.
    pub(super) fn replace_with_delta(&mut self, entry: &mut output::Entry, base: ObjectId, delta: &[u8]) -> bool {
        let Ok(compressed) = self.zlib.deflate(delta) else { return false };
        if !is_stored(entry) && !is_taken(entry) && compressed.len() >= held_len(entry) {
            return false;
        }
        entry.kind = output::entry::Kind::DeltaOid { id: base };
        entry.decompressed_size = delta.len();
        entry.compressed_data = compressed;
        self.found += 1;
        true
    }

    /// [`Self::same_path_delta`] for an entry the search did not keep in memory.
    pub(super) fn try_thin_delta(&mut self, entry: &mut output::Entry) {
        if !self.thin_allowed || entry.decompressed_size > self.budget {
            return;
        }
        let Some(base_id) = self.selection.same_path_held.get(&entry.id).copied() else { return };
        if !self.selection.client_has_readably(&base_id) {
            return;
        }
        let Ok(Some(base)) = gix_object::Find::try_find(&self.repo.objects, &base_id, &mut self.base) else { return };
        if base.data.len() > Self::MAX_OBJECT {
            return;
        }
        let held = base.data.to_vec();
        let Some(target) = inflated(entry) else { return };
        if let Some(delta) = self.same_path_delta(&target, &held) {
            self.replace_with_delta(entry, base_id, &delta);
        }
    }
}

/// The object of a whole `entry`, decoded from `odb` (through `buf`); its size is set from it.
fn decode(odb: &impl gix_object::Find, entry: &mut output::Entry, buf: &mut Vec<u8>) -> Result<Vec<u8>, PackError> {
    let object = odb.try_find(&entry.id, buf).map_err(PackError::gix)?.ok_or(PackError::MissingObject(entry.id))?;
    entry.decompressed_size = object.data.len();
    Ok(object.data.to_vec())
}

/// How many of the objects of these sizes (in search order) a repack's batch takes: at most
/// [`DeltaSearch::REPACK_BATCH_BYTES`] of them, and at least [`DeltaSearch::REPACK_BATCH_OBJECTS`]
/// (a window's worth, however large they are).
fn batch_len(sizes: impl Iterator<Item = usize>) -> usize {
    let mut bytes = 0;
    #[cfg(feature = "test-hooks")]
    let most = set_or(&REPACK_BATCH_BYTES, DeltaSearch::REPACK_BATCH_BYTES);
    #[cfg(not(feature = "test-hooks"))]
    let most = DeltaSearch::REPACK_BATCH_BYTES;
    let take = sizes.enumerate().take_while(|(k, size)| {
        bytes += size;
        bytes <= most || *k < DeltaSearch::REPACK_BATCH_OBJECTS
    });
    take.count().max(1)
}

/// One zlib stream at the default level (git's `core.compression` default), reset for each
/// object: a stream's state is some 270 KiB, and allocating it per object was most of a small
/// object's deflate time and, freed between objects kept, grew the heap (a repack of tokio's
/// 24 000 trees: 100 MB of resident memory for 50 MB in use).
pub(super) struct Deflater(flate2::Compress);

impl Default for Deflater {
    fn default() -> Self {
        Deflater(flate2::Compress::new(flate2::Compression::default(), true))
    }
}

impl Deflater {
    /// `data` deflated, held in no more memory than it needs (entries are kept until the pack is
    /// written).
    pub(super) fn deflate(&mut self, data: &[u8]) -> Result<Vec<u8>, PackError> {
        self.0.reset();
        let mut out = Vec::with_capacity(data.len() + data.len() / 64 + 64);
        loop {
            let consumed = self.0.total_in() as usize;
            let status = self.0.compress_vec(&data[consumed..], &mut out, flate2::FlushCompress::Finish);
            match status.map_err(std::io::Error::other)? {
                flate2::Status::StreamEnd => break,
                flate2::Status::Ok | flate2::Status::BufError => out.reserve(out.capacity().max(64)),
            }
        }
        out.shrink_to_fit();
        Ok(out)
    }
}

/// Deflate a whole entry whose data is stored rather than compressed (gix-pack re-deflated it at
/// level 0 for a search: a stored stream is longer than its content), from `data` (the object)
/// or by inflating it; kept as it is unless the deflated form is smaller. An entry whose data the
/// search took ([`is_taken`]) is deflated from `data`, whatever its size.
pub(super) fn deflate_stored(entry: &mut output::Entry, data: Option<&[u8]>, zlib: &mut Deflater) {
    if !matches!(entry.kind, output::entry::Kind::Base(_)) {
        return;
    }
    if is_taken(entry) {
        let data = data.expect("a taken entry's data is at hand");
        entry.compressed_data = zlib.deflate(data).unwrap_or_else(|_| stored_stream(data));
        return;
    }
    if !is_stored(entry) {
        return;
    }
    let inflated_here;
    let data = match data {
        Some(data) => data,
        None => match inflated(entry) {
            Some(data) => {
                inflated_here = data;
                &inflated_here
            }
            None => return,
        },
    };
    if let Ok(compressed) = zlib.deflate(data)
        && compressed.len() < entry.compressed_data.len()
    {
        entry.compressed_data = compressed;
    }
}

/// [`DeltaSearch::MAX_SEARCHED_ENTRIES`], or what a test set instead ([`SEARCHED_ENTRIES_MOST`]).
fn max_searched_entries() -> usize {
    #[cfg(feature = "test-hooks")]
    return set_or(&SEARCHED_ENTRIES_MOST, DeltaSearch::MAX_SEARCHED_ENTRIES);
    #[cfg(not(feature = "test-hooks"))]
    DeltaSearch::MAX_SEARCHED_ENTRIES
}

/// What a test set in `hook`, or `default` where it set nothing (0).
#[cfg(feature = "test-hooks")]
fn set_or(hook: &std::sync::atomic::AtomicUsize, default: usize) -> usize {
    match hook.load(std::sync::atomic::Ordering::Relaxed) {
        0 => default,
        set => set,
    }
}

/// The most entries a search takes instead of [`DeltaSearch::MAX_SEARCHED_ENTRIES`], when not 0
/// (test builds only: a repository past half a million objects is too large to build in a test).
#[cfg(feature = "test-hooks")]
pub static SEARCHED_ENTRIES_MOST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A repack's batch in bytes instead of [`DeltaSearch::REPACK_BATCH_BYTES`], when not 0 (test
/// builds only: a test repository small enough to build needs several batches).
#[cfg(feature = "test-hooks")]
pub static REPACK_BATCH_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The most bytes of object data a repack's search held at once (test builds only): its
/// entries' data and the batch it inflated, when the batch is full.
#[cfg(feature = "test-hooks")]
pub static REPACK_BYTES_HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The entry's data was taken out for a repack's search ([`DeltaSearch::repack_window`]), which
/// holds it and gives the entry a delta or its deflated data.
fn is_taken(entry: &output::Entry) -> bool {
    entry.compressed_data.is_empty()
}

/// `data` as a zlib stream of stored blocks (the form gix-pack gives an entry it is asked not to
/// compress).
fn stored_stream(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::none());
    encoder.write_all(data).and_then(|()| encoder.finish()).expect("writing to memory does not fail")
}

/// The entry's data is stored rather than compressed: a stored zlib stream is longer than what
/// it holds (a deflated one of incompressible data can be too; it is only tried again).
pub(super) fn is_stored(entry: &output::Entry) -> bool {
    entry.compressed_data.len() > entry.decompressed_size && !crate::packs::Hollow::is_mark(&entry.compressed_data)
}

/// The length of an entry's deflated data, also where a hollow entry's lies in its pack.
fn held_len(entry: &output::Entry) -> usize {
    match crate::packs::Hollow::packed_at(&entry.compressed_data) {
        Some((_, _, len)) => len as usize,
        None => entry.compressed_data.len(),
    }
}

/// A repack's entry whose object is read from the object database ([`crate::packs::Hollow::LOOSE`]).
fn is_loose(entry: &output::Entry) -> bool {
    crate::packs::Hollow::is_loose(&entry.compressed_data)
}

/// The object of a hollow entry ([`crate::packs::Hollow`]): inflated from its pack map, or read
/// from the object database (`Some(None)` if it is not there, or does not inflate to its size);
/// `None` for an entry that holds its data.
fn hollow_object(
    entry: &output::Entry,
    packs: Option<&crate::packs::Packs>,
    repo: &gix::Repository,
) -> Option<Option<Vec<u8>>> {
    if is_loose(entry) {
        let mut buf = Vec::new();
        let found = gix_object::Find::try_find(&repo.objects, &entry.id, &mut buf).ok().flatten();
        return Some(found.filter(|o| o.data.len() == entry.decompressed_size).map(|o| o.data.to_vec()));
    }
    let stored = packs?.hollow_data(&entry.compressed_data)?;
    let mut out = Vec::with_capacity(entry.decompressed_size);
    let ok =
        flate2::read::ZlibDecoder::new(stored).read_to_end(&mut out).is_ok() && out.len() == entry.decompressed_size;
    Some(ok.then_some(out))
}

/// A whole entry's object, inflated (`None` if its data does not inflate to its size).
pub(super) fn inflated(entry: &output::Entry) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(entry.decompressed_size);
    flate2::read::ZlibDecoder::new(&entry.compressed_data[..]).read_to_end(&mut out).ok()?;
    (out.len() == entry.decompressed_size).then_some(out)
}
