pub(crate) mod function {
    use gix_error::Result;
    use std::{cmp::Ordering, sync::Arc};

    use gix_error::{OptionExt, ResultExt, message, not_found};
    use gix_parallel as parallel;
    use gix_parallel::SequenceId;
    use gix_utils::progress::{
        Progress,
        prodash::{Count, DynNestedProgress},
    };

    use super::{DeltaBase, Mode, Options, Outcome, ProgressId, reduce, util};
    use crate::data::output;

    /// Given a known list of object `counts`, calculate entries ready to be put into a data pack.
    ///
    /// This allows objects to be written quite soon without having to wait for the entire pack to be built in memory.
    /// A chunk of objects is held in memory and compressed using DEFLATE, and serve the output of this iterator.
    /// That way slow writers will naturally apply back pressure, and communicate to the implementation that more time can be
    /// spent compressing objects.
    ///
    /// * `counts`
    ///   * A list of previously counted objects to add to the pack. Duplication checks are not performed, no object is expected to be duplicated.
    /// * `progress`
    ///   * a way to obtain progress information
    /// * `options`
    ///   * more configuration
    ///
    /// Returns an iterator over entry chunks, or an error if resolving pack locations fails before iteration.
    ///
    /// ## Discussion
    ///
    /// ### Advantages
    ///
    /// * Begins writing immediately and supports back-pressure.
    /// * Abstract over object databases and how input is provided.
    ///
    /// ### Disadvantages
    ///
    /// * ~~currently there is no way to easily write the pack index, even though the state here is uniquely positioned to do
    ///   so with minimal overhead (especially compared to `gix index-from-pack`)~~ Probably works now by chaining Iterators
    ///   or keeping enough state to write a pack and then generate an index with recorded data.
    ///
    pub fn iter_from_counts<Find>(
        counts: Vec<output::Count>,
        db: Find,
        progress: Box<dyn DynNestedProgress + 'static>,
        options: Options,
    ) -> Result<
        impl Iterator<Item = Result<(SequenceId, Vec<output::Entry>)>>
        + parallel::Finalize<Reduce = reduce::Statistics<gix_error::Error>>,
    >
    where
        Find: crate::Find + Send + Clone + 'static,
    {
        iter_from_counts_with_delta_bases(counts, db, progress, options, None::<fn(&gix_hash::oid) -> DeltaBase>)
            .map(|(_num_entries, entries)| entries)
    }

    /// Like [`iter_from_counts()`], but `delta_base(id)` decides what happens to each base of a selected
    /// delta that lies in the same pack but is not among the `counts` (in mode
    /// [`PackCopyAndBaseObjects`][Mode::PackCopyAndBaseObjects]); each such base is asked about once:
    ///
    /// * [`DeltaBase::Include`] adds the base to the pack, so delta and base are both copied as they are
    ///   (a base that is itself a delta is considered in turn);
    /// * [`DeltaBase::Thin`] refers to the base by id, which the receiver has, if `allow_thin_pack` is set;
    /// * [`DeltaBase::Recompress`] (and `Thin` without `allow_thin_pack`) decodes the delta and deflates it
    ///   as a whole object, which is what [`iter_from_counts()`] always does.
    ///
    /// With a `delta_base` function, thin-pack deltas are made only against bases it answered `Thin` for,
    /// never against other objects of the pack. Bases are added in a deterministic order, and the number
    /// added is reported in [`Outcome::delta_bases_included`].
    ///
    /// Returns the number of entries the iterator will produce, which a pack header needs up front,
    /// along with the iterator.
    pub fn iter_from_counts_with_delta_bases<Find>(
        mut counts: Vec<output::Count>,
        db: Find,
        mut progress: Box<dyn DynNestedProgress + 'static>,
        Options {
            version,
            mode,
            allow_thin_pack,
            thread_limit,
            chunk_size,
            compression,
        }: Options,
        delta_base: Option<impl FnMut(&gix_hash::oid) -> DeltaBase>,
    ) -> Result<(
        usize,
        impl Iterator<Item = Result<(SequenceId, Vec<output::Entry>)>>
        + parallel::Finalize<Reduce = reduce::Statistics<gix_error::Error>>,
    )>
    where
        Find: crate::Find + Send + Clone + 'static,
    {
        let (chunk_size, thread_limit, _) =
            parallel::optimize_chunk_size_and_thread_limit(chunk_size, Some(counts.len()), thread_limit, None);
        {
            let progress = Arc::new(parking_lot::Mutex::new(
                progress.add_child_with_id("resolving".into(), ProgressId::ResolveCounts.into()),
            ));
            progress.lock().init(None, gix_utils::progress::count("counts"));
            let enough_counts_present = counts.len() > 4_000;
            let start = std::time::Instant::now();
            parallel::in_parallel_if(
                || enough_counts_present,
                counts.chunks_mut(chunk_size),
                thread_limit,
                |_n| Vec::<u8>::new(),
                {
                    let progress = Arc::clone(&progress);
                    let db = db.clone();
                    move |chunk, buf| {
                        let chunk_size = chunk.len();
                        for count in chunk {
                            use crate::data::output::count::PackLocation::*;
                            match count.entry_pack_location {
                                LookedUp(_) => continue,
                                NotLookedUp => {
                                    count.entry_pack_location = LookedUp(db.location_by_oid(&count.id, buf)?);
                                }
                            }
                        }
                        progress.lock().inc_by(chunk_size);
                        Ok::<_, gix_error::Error>(())
                    }
                },
                parallel::IdentityWithResult::<(), gix_error::Error>::default(),
            )?;
            progress.lock().show_throughput(start);
        }
        let (delta_bases_included, thin_bases) = match (mode, delta_base) {
            (Mode::PackCopyAndBaseObjects, Some(mut decide)) => {
                let (included, thin, looping, ref_bases) =
                    super::bases::include(&mut counts, &db, &mut decide, allow_thin_pack)?;
                (included, Some((thin, looping, ref_bases)))
            }
            (_, None) => (0, None),
        };
        let thin_bases = Arc::new(thin_bases);
        let counts_range_by_pack_id = match mode {
            Mode::PackCopyAndBaseObjects => {
                let mut progress = progress.add_child_with_id("sorting".into(), ProgressId::SortEntries.into());
                progress.init(Some(counts.len()), gix_utils::progress::count("counts"));
                let start = std::time::Instant::now();

                use crate::data::output::count::PackLocation::*;
                counts.sort_by(|lhs, rhs| match (&lhs.entry_pack_location, &rhs.entry_pack_location) {
                    (LookedUp(None), LookedUp(None)) => Ordering::Equal,
                    (LookedUp(Some(_)), LookedUp(None)) => Ordering::Greater,
                    (LookedUp(None), LookedUp(Some(_))) => Ordering::Less,
                    (LookedUp(Some(lhs)), LookedUp(Some(rhs))) => lhs
                        .pack_id
                        .cmp(&rhs.pack_id)
                        .then(lhs.pack_offset.cmp(&rhs.pack_offset)),
                    (_, _) => unreachable!("counts were resolved beforehand"),
                });

                let mut index: Vec<(u32, std::ops::Range<usize>)> = Vec::new();
                let mut chunks_pack_start = counts.partition_point(|e| e.entry_pack_location.is_none());
                let mut slice = &counts[chunks_pack_start..];
                while !slice.is_empty() {
                    let current_pack_id = slice[0].entry_pack_location.as_ref().expect("packed object").pack_id;
                    let pack_end = slice.partition_point(|e| {
                        e.entry_pack_location.as_ref().expect("packed object").pack_id == current_pack_id
                    });
                    index.push((current_pack_id, chunks_pack_start..chunks_pack_start + pack_end));
                    slice = &slice[pack_end..];
                    chunks_pack_start += pack_end;
                }

                progress.set(counts.len());
                progress.show_throughput(start);

                index
            }
        };

        let counts = Arc::new(counts);
        let progress = Arc::new(parking_lot::Mutex::new(progress));
        let chunks = util::ChunkRanges::new(chunk_size, counts.len());

        Ok((counts.len(), parallel::Stepwise::new(
            chunks.enumerate(),
            thread_limit,
            {
                let progress = Arc::clone(&progress);
                move |n| {
                    (
                        Vec::new(), // object data buffer
                        progress
                            .lock()
                            .add_child_with_id(format!("thread {n}"), gix_utils::progress::UNKNOWN),
                        None, // the zlib stream, set up when the first object is deflated
                    )
                }
            },
            {
                let counts = Arc::clone(&counts);
                let thin_bases = Arc::clone(&thin_bases);
                move |(chunk_id, chunk_range): (SequenceId, std::ops::Range<usize>), (buf, progress, deflate)| {
                    let mut out = Vec::new();
                    let chunk = &counts[chunk_range];
                    let mut stats = Outcome::default();
                    let mut pack_offsets_to_id = None;
                    progress.init(Some(chunk.len()), gix_utils::progress::count("objects"));

                    for count in chunk.iter() {
                        out.push(match count
                            .entry_pack_location
                            .as_ref()
                            .and_then(|l| db.entry_by_location(l).map(|pe| (l, pe)))
                        {
                            Some((location, pack_entry)) => {
                                if let Some((cached_pack_id, _)) = &pack_offsets_to_id
                                    && *cached_pack_id != location.pack_id
                                {
                                    pack_offsets_to_id = None;
                                }
                                let pack_range = counts_range_by_pack_id[counts_range_by_pack_id
                                    .binary_search_by_key(&location.pack_id, |e| e.0)
                                    .expect("pack-id always present")]
                                .1
                                .clone();
                                let base_index_offset = pack_range.start;
                                let counts_in_pack = &counts[pack_range];
                                let kept_ref_base = thin_bases
                                    .as_ref()
                                    .as_ref()
                                    .and_then(|(_, _, ref_bases)| ref_bases.get(&count.id).copied());
                                let entry = if let Some(base_id) = kept_ref_base {
                                    output::Entry::from_ref_delta_entry(pack_entry, count, base_id, version)
                                } else { output::Entry::from_pack_entry(
                                    pack_entry,
                                    count,
                                    counts_in_pack,
                                    base_index_offset,
                                    (allow_thin_pack || thin_bases.as_ref().as_ref().is_some_and(|(b, _, _)| !b.is_empty())).then_some({
                                        |pack_id, base_offset| {
                                            if let Some((thin_bases, looping, _)) = thin_bases.as_ref() {
                                                if looping.contains(&count.id) {
                                                    return Ok(None);
                                                }
                                                let base = thin_bases.get(&(pack_id, base_offset)).copied();
                                                stats.ref_delta_objects += usize::from(base.is_some());
                                                return Ok(base);
                                            }
                                            if pack_offsets_to_id.is_none() {
                                                let mut offsets =
                                                    db.pack_offsets_and_oid(pack_id)?.ok_or_raise(|| {
                                                        not_found("Pack used for counts is no longer available")
                                                    })?;
                                                offsets.sort_by_key(|e| e.0);
                                                pack_offsets_to_id = Some((pack_id, offsets));
                                            }
                                            let (cached_pack_id, cache) =
                                                pack_offsets_to_id.as_ref().expect("just set");
                                            debug_assert_eq!(*cached_pack_id, pack_id);
                                            stats.ref_delta_objects += 1;
                                            Ok(cache
                                                .binary_search_by_key(&base_offset, |e| e.0)
                                                .ok()
                                                .map(|idx| cache[idx].1))
                                        }
                                    }),
                                    version,
                                ) };
                                match entry {
                                    Some(entry) => {
                                        stats.objects_copied_from_pack += 1;
                                        entry
                                    }
                                    None => {
                                        match db
                                            .try_find(&count.id, buf)
                                            .or_raise(|| message("Could not find object while generating pack"))?
                                        {
                                            Some((obj, _location)) => {
                                                stats.decoded_and_recompressed_objects += 1;
                                                output::Entry::from_data_with(
                                                    count,
                                                    &obj,
                                                    deflate.get_or_insert_with(|| output::entry::Deflate::new(compression)),
                                                )
                                            }
                                            None => {
                                                stats.missing_objects += 1;
                                                Ok(output::Entry::invalid())
                                            }
                                        }
                                    }
                                }
                            }
                            None => match db
                                .try_find(&count.id, buf)
                                .or_raise(|| message("Could not find object while generating pack"))?
                            {
                                Some((obj, _location)) => {
                                    stats.decoded_and_recompressed_objects += 1;
                                    output::Entry::from_data_with(
                                                    count,
                                                    &obj,
                                                    deflate.get_or_insert_with(|| output::entry::Deflate::new(compression)),
                                                )
                                }
                                None => {
                                    stats.missing_objects += 1;
                                    Ok(output::Entry::invalid())
                                }
                            },
                        }?);
                        progress.inc();
                    }
                    Ok((chunk_id, out, stats))
                }
            },
            reduce::Statistics::with_delta_bases_included(delta_bases_included),
        )))
    }
}

mod bases {
    use std::collections::{HashMap, HashSet, hash_map};

    use gix_error::{OptionExt, Result, not_found};
    use gix_hash::ObjectId;

    use super::DeltaBase;
    use crate::data::{self, output};

    /// Enough bytes for any entry header: a type-and-size varint and an ofs-delta distance varint
    /// (at most 10 bytes each), or a ref-delta base id (at most 32 bytes).
    const MAX_ENTRY_HEADER_LEN: usize = 64;

    /// Thin-pack bases by `(pack_id, pack_offset)`.
    pub type ThinBases = HashMap<(u32, data::Offset), ObjectId, BuildLocationHasher>;

    /// Stored ref-deltas kept as deltas: delta id to base id.
    pub type RefBases = gix_hashtable::HashMap<ObjectId, ObjectId>;

    /// Entries by `(pack_id, pack_offset)`.
    type LocationSet = HashSet<(u32, data::Offset), BuildLocationHasher>;

    /// Hashes `(pack_id, pack_offset)` keys by multiplying, as ids are hashed by their first bytes
    /// (`gix_hashtable`): SipHash of every count's id and location was a tenth of the entries'
    /// generation for a clone.
    #[derive(Default, Clone, Copy)]
    pub struct BuildLocationHasher;

    impl std::hash::BuildHasher for BuildLocationHasher {
        type Hasher = LocationHasher;
        fn build_hasher(&self) -> LocationHasher {
            LocationHasher(0)
        }
    }

    /// See [`BuildLocationHasher`].
    pub struct LocationHasher(u64);

    impl std::hash::Hasher for LocationHasher {
        fn finish(&self) -> u64 {
            let h = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^ (h >> 29)
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.write_u64(u64::from(*b));
            }
        }
        fn write_u32(&mut self, n: u32) {
            self.write_u64(u64::from(n));
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = (self.0.rotate_left(23) ^ n).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The selected objects by id, each with its index in the counts; built the first time it
    /// is asked, kept up to date by [`Selected::push`] and [`Selected::pop`] from then on.
    #[derive(Default)]
    struct Selected(Option<gix_hashtable::HashMap<ObjectId, usize>>);

    impl Selected {
        fn by_id(&mut self, counts: &[output::Count]) -> &gix_hashtable::HashMap<ObjectId, usize> {
            self.0.get_or_insert_with(|| {
                let mut by_id = gix_hashtable::HashMap::default();
                by_id.reserve(counts.len() + counts.len() / 8);
                for (index, count) in counts.iter().enumerate() {
                    by_id.entry(count.id).or_insert(index);
                }
                by_id
            })
        }

        fn contains(&mut self, counts: &[output::Count], id: &ObjectId) -> bool {
            self.by_id(counts).contains_key(id)
        }

        /// Where the selected `id` is stored, if it was asked for before ([`Self::contains`]).
        fn location<'c>(&self, counts: &'c [output::Count], id: &ObjectId) -> Option<&'c data::entry::Location> {
            let index = *self.0.as_ref()?.get(id)?;
            counts[index].entry_pack_location.as_ref()
        }

        /// Select `count` (an id not selected yet).
        fn push(&mut self, counts: &mut Vec<output::Count>, count: output::Count) {
            self.by_id(counts);
            if let Some(by_id) = &mut self.0 {
                by_id.insert(count.id, counts.len());
            }
            counts.push(count);
        }

        /// Take back the last count [`Self::push`] selected.
        fn pop(&mut self, counts: &mut Vec<output::Count>) {
            if let (Some(count), Some(by_id)) = (counts.pop(), &mut self.0) {
                by_id.remove(&count.id);
            }
        }
    }

    /// Ask `decide` about every ofs-delta base in the pack of a selected delta that is not itself
    /// selected, appending the bases it includes to `counts` (and then their bases, in turn).
    /// Returns how many were added, the bases to refer to by id, the deltas that must not
    /// refer to theirs by id though another delta on the same base does (its chain leads back),
    /// and the stored ref-deltas copied as they are, by delta id with their base's id.
    ///
    /// A stored ref-delta (a thin pack a push brought, completed by `index-pack --fix-thin`:
    /// its deltas name bases appended after them) is kept where its base goes out too (selected,
    /// or included) or the caller allows it thin, and its chain does not lead back to it; else it
    /// is re-deflated, as before.
    pub fn include(
        counts: &mut Vec<output::Count>,
        db: &impl crate::Find,
        decide: &mut impl FnMut(&gix_hash::oid) -> DeltaBase,
        allow_thin_pack: bool,
    ) -> Result<(usize, ThinBases, gix_hashtable::HashSet<ObjectId>, RefBases)> {
        let mut present: LocationSet = counts
            .iter()
            .filter_map(|c| c.entry_pack_location.as_ref())
            .map(|l| (l.pack_id, l.pack_offset))
            .collect();
        // An object can sit in two packs (a completed thin pack repeats its bases): one already
        // selected from elsewhere must not be added again, or the pack would hold it twice.
        // Which ids are selected is asked only about a base outside the selection's locations,
        // which a clone of one pack never meets: the table is built the first time it is asked.
        let mut selected = Selected::default();
        let mut decided = LocationSet::default();
        let mut thin = ThinBases::default();
        let mut looping = gix_hashtable::HashSet::default();
        let mut ref_bases = RefBases::default();
        let mut offsets_by_pack: HashMap<u32, Vec<(data::Offset, ObjectId)>> = HashMap::new();
        let mut buf = Vec::new();
        let mut included = 0;
        let mut next = 0;
        while next < counts.len() {
            let count = &counts[next];
            let count_id = count.id;
            next += 1;
            let Some(location) = count.entry_pack_location.as_ref() else {
                continue;
            };
            let mut header_only = location.clone();
            header_only.entry_size = header_only.entry_size.min(MAX_ENTRY_HEADER_LEN);
            let Some(entry) = db.entry_by_location(&header_only) else {
                continue;
            };
            let Ok(entry) = data::Entry::from_bytes(&entry.data, location.pack_offset, count.id.kind()) else {
                continue; // a corrupt entry is reported when it is copied
            };
            let base_distance = match entry.header {
                data::entry::Header::OfsDelta { base_distance } => base_distance,
                data::entry::Header::RefDelta { base_id } => {
                    if selected.contains(counts, &base_id) {
                        if !leads_to(count_id, base_id, (&selected, counts), &present, &thin, &ref_bases, db, &mut offsets_by_pack)? {
                            ref_bases.insert(count_id, base_id);
                        }
                        continue;
                    }
                    match decide(&base_id) {
                        DeltaBase::Include => {
                            let Some(location) = db.location_by_oid(&base_id, &mut buf)? else {
                                continue;
                            };
                            let key = (location.pack_id, location.pack_offset);
                            selected.push(counts, output::Count::from_data(base_id, Some(location)));
                            present.insert(key);
                            if leads_to(count_id, base_id, (&selected, counts), &present, &thin, &ref_bases, db, &mut offsets_by_pack)? {
                                selected.pop(counts);
                                present.remove(&key);
                                continue;
                            }
                            included += 1;
                            ref_bases.insert(count_id, base_id);
                        }
                        DeltaBase::Thin if allow_thin_pack => {
                            ref_bases.insert(count_id, base_id);
                        }
                        DeltaBase::Thin | DeltaBase::Recompress => {}
                    }
                    continue;
                }
                _ => continue,
            };
            let Some(base_offset) = data::entry::Header::verified_base_pack_offset(location.pack_offset, base_distance)
            else {
                continue;
            };
            let pack_id = location.pack_id;
            let key = (pack_id, base_offset);
            if present.contains(&key) {
                continue;
            }
            if !decided.insert(key) {
                // Decided for another delta on this base: named by id, this delta's own chain
                // must not lead back either (two packs may hold a pair as deltas of each other
                // while a third object is a delta of one of them).
                if let Some(&base_id) = thin.get(&key)
                    && selected.contains(counts, &base_id)
                    && leads_to(count_id, base_id, (&selected, counts), &present, &thin, &ref_bases, db, &mut offsets_by_pack)?
                {
                    looping.insert(count_id);
                }
                continue;
            }
            let offsets = match offsets_by_pack.entry(pack_id) {
                hash_map::Entry::Occupied(e) => e.into_mut(),
                hash_map::Entry::Vacant(e) => {
                    let mut offsets = db
                        .pack_offsets_and_oid(pack_id)?
                        .ok_or_raise(|| not_found("Pack used for counts is no longer available"))?;
                    offsets.sort_by_key(|e| e.0);
                    e.insert(offsets)
                }
            };
            let Ok(idx) = offsets.binary_search_by_key(&base_offset, |e| e.0) else {
                continue;
            };
            let base_id = offsets[idx].1;
            if selected.contains(counts, &base_id) {
                // In the pack already, from another location (a completed thin pack repeats its
                // bases; an object pushed twice sits in two packs): the delta names it by id, a
                // ref-delta within the pack, instead of being re-deflated — unless the base's own
                // chain, as this pack holds it, leads back to this object (two packs may hold a
                // pair as deltas of each other): then it is re-deflated, as before.
                if !leads_to(count_id, base_id, (&selected, counts), &present, &thin, &ref_bases, db, &mut offsets_by_pack)? {
                    thin.insert(key, base_id);
                }
                continue;
            }
            match decide(&base_id) {
                DeltaBase::Include => {
                    let entry_size = match offsets.get(idx + 1) {
                        Some((next_offset, _)) => usize::try_from(next_offset - base_offset).ok(),
                        None => db
                            .location_by_oid(&base_id, &mut buf)?
                            .filter(|l| l.pack_id == pack_id && l.pack_offset == base_offset)
                            .map(|l| l.entry_size),
                    };
                    let Some(entry_size) = entry_size else {
                        continue;
                    };
                    // Added, the base's own chain must not lead back to this delta.
                    let location = data::entry::Location { pack_id, entry_size, pack_offset: base_offset };
                    selected.push(counts, output::Count::from_data(base_id, Some(location)));
                    present.insert(key);
                    if leads_to(count_id, base_id, (&selected, counts), &present, &thin, &ref_bases, db, &mut offsets_by_pack)? {
                        selected.pop(counts);
                        present.remove(&key);
                        continue;
                    }
                    included += 1;
                }
                DeltaBase::Thin if allow_thin_pack => {
                    thin.insert(key, base_id);
                }
                DeltaBase::Thin | DeltaBase::Recompress => {}
            }
        }
        Ok((included, thin, looping, ref_bases))
    }

    /// Whether `base`'s delta chain, as the pack being made holds it, reaches `target`: each
    /// selected object's entry at its chosen location, an ofs-delta followed to its base where
    /// that location is selected or named by id, a ref-delta to its base id. A chain longer
    /// than any pack allows is taken as reaching it.
    fn leads_to(
        target: ObjectId,
        base: ObjectId,
        (selected, counts): (&Selected, &[output::Count]),
        present: &LocationSet,
        thin: &ThinBases,
        ref_bases: &RefBases,
        db: &impl crate::Find,
        offsets_by_pack: &mut HashMap<u32, Vec<(data::Offset, ObjectId)>>,
    ) -> Result<bool> {
        let mut next = base;
        for _ in 0..10_000 {
            if next == target {
                return Ok(true);
            }
            let Some(location) = selected.location(counts, &next) else { return Ok(false) };
            let mut header_only = location.clone();
            header_only.entry_size = header_only.entry_size.min(MAX_ENTRY_HEADER_LEN);
            let Some(entry) = db.entry_by_location(&header_only) else { return Ok(false) };
            let Ok(entry) = data::Entry::from_bytes(&entry.data, location.pack_offset, next.kind()) else {
                return Ok(false);
            };
            next = match entry.header {
                // Kept as a delta only where decided so; re-deflated, the chain ends here.
                data::entry::Header::RefDelta { base_id } => match ref_bases.get(&next) {
                    Some(_) => base_id,
                    None => return Ok(false),
                },
                data::entry::Header::OfsDelta { base_distance } => {
                    let Some(base_offset) =
                        data::entry::Header::verified_base_pack_offset(location.pack_offset, base_distance)
                    else {
                        return Ok(false);
                    };
                    let key = (location.pack_id, base_offset);
                    if let Some(id) = thin.get(&key) {
                        *id
                    } else if present.contains(&key) {
                        let offsets = match offsets_by_pack.entry(location.pack_id) {
                            hash_map::Entry::Occupied(e) => e.into_mut(),
                            hash_map::Entry::Vacant(e) => {
                                let mut offsets = db
                                    .pack_offsets_and_oid(location.pack_id)?
                                    .ok_or_raise(|| not_found("Pack used for counts is no longer available"))?;
                                offsets.sort_by_key(|e| e.0);
                                e.insert(offsets)
                            }
                        };
                        match offsets.binary_search_by_key(&base_offset, |e| e.0) {
                            Ok(i) => offsets[i].1,
                            Err(_) => return Ok(false),
                        }
                    } else {
                        return Ok(false);
                    }
                }
                _ => return Ok(false),
            };
        }
        Ok(true)
    }
}

mod util {
    #[derive(Clone)]
    pub struct ChunkRanges {
        cursor: usize,
        size: usize,
        len: usize,
    }

    impl ChunkRanges {
        pub fn new(size: usize, total: usize) -> Self {
            ChunkRanges {
                cursor: 0,
                size,
                len: total,
            }
        }
    }

    impl Iterator for ChunkRanges {
        type Item = std::ops::Range<usize>;

        fn next(&mut self) -> Option<Self::Item> {
            if self.cursor >= self.len {
                None
            } else {
                let upper = (self.cursor + self.size).min(self.len);
                let range = self.cursor..upper;
                self.cursor = upper;
                Some(range)
            }
        }
    }
}

/// Reduction of chunks produced by [`iter_from_counts()`][crate::data::output::entry::iter_from_counts()].
pub mod reduce {
    use std::marker::PhantomData;

    use gix_parallel as parallel;
    use gix_parallel::SequenceId;

    use super::Outcome;
    use crate::data::output;

    /// Accumulate statistics while reducing chunks produced by [`iter_from_counts()`][crate::data::output::entry::iter_from_counts()].
    pub struct Statistics<E> {
        total: Outcome,
        _err: PhantomData<E>,
    }

    impl<E> Default for Statistics<E> {
        fn default() -> Self {
            Statistics {
                total: Default::default(),
                _err: PhantomData,
            }
        }
    }

    impl<E> Statistics<E> {
        /// Start the totals with `delta_bases_included`, the bases added to the counts before any chunk was produced.
        pub(crate) fn with_delta_bases_included(delta_bases_included: usize) -> Self {
            Statistics {
                total: Outcome {
                    delta_bases_included,
                    ..Default::default()
                },
                _err: PhantomData,
            }
        }
    }

    impl<Error> parallel::Reduce for Statistics<Error> {
        type Input = Result<(SequenceId, Vec<output::Entry>, Outcome), Error>;
        type FeedProduce = (SequenceId, Vec<output::Entry>);
        type Output = Outcome;
        type Error = Error;

        fn feed(&mut self, item: Self::Input) -> Result<Self::FeedProduce, Self::Error> {
            item.map(|(cid, entries, stats)| {
                self.total.aggregate(stats);
                (cid, entries)
            })
        }

        fn finalize(self) -> Result<Self::Output, Self::Error> {
            Ok(self.total)
        }
    }
}

mod types {
    /// Information gathered during the run of [`iter_from_counts()`][crate::data::output::entry::iter_from_counts()].
    #[derive(Default, PartialEq, Eq, Debug, Hash, Ord, PartialOrd, Clone, Copy)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct Outcome {
        /// The amount of fully decoded objects. These are the most expensive as they are fully decoded.
        pub decoded_and_recompressed_objects: usize,
        /// The amount of objects that could not be located despite them being mentioned during iteration
        pub missing_objects: usize,
        /// The amount of base or delta objects that could be copied directly from the pack. These are cheapest as they
        /// only cost a memory copy for the most part.
        pub objects_copied_from_pack: usize,
        /// The amount of objects that ref to their base as ref-delta, an indication for a thin back being created.
        pub ref_delta_objects: usize,
        /// The amount of delta bases added to the counts because the caller's `delta_base` function answered
        /// [`DeltaBase::Include`] (see [`iter_from_counts_with_delta_bases()`][crate::data::output::entry::iter_from_counts_with_delta_bases()]).
        pub delta_bases_included: usize,
    }

    impl Outcome {
        pub(in crate::data::output::entry) fn aggregate(
            &mut self,
            Outcome {
                decoded_and_recompressed_objects: decoded_objects,
                missing_objects,
                objects_copied_from_pack,
                ref_delta_objects,
                delta_bases_included,
            }: Self,
        ) {
            self.decoded_and_recompressed_objects += decoded_objects;
            self.missing_objects += missing_objects;
            self.objects_copied_from_pack += objects_copied_from_pack;
            self.ref_delta_objects += ref_delta_objects;
            self.delta_bases_included += delta_bases_included;
        }
    }

    /// What to do with the base of a selected delta when that base is in the same pack but not selected,
    /// as answered by the caller of [`iter_from_counts_with_delta_bases()`][crate::data::output::entry::iter_from_counts_with_delta_bases()].
    #[derive(PartialEq, Eq, Debug, Hash, Clone, Copy)]
    pub enum DeltaBase {
        /// Add the base to the pack: both entries are copied as they are, nothing is re-deflated.
        Include,
        /// The receiver has the base: refer to it by id (a thin pack, only with `allow_thin_pack`).
        Thin,
        /// Neither: decode the delta and deflate it as a whole object.
        Recompress,
    }

    /// The way the iterator operates.
    #[derive(PartialEq, Eq, Debug, Hash, Ord, PartialOrd, Clone, Copy)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub enum Mode {
        /// Copy base objects and deltas from packs, while non-packed objects will be treated as base objects
        /// (i.e. without trying to delta compress them). This is a fast way of obtaining a back while benefiting
        /// from existing pack compression and spending the smallest possible time on compressing unpacked objects at
        /// the cost of bandwidth.
        PackCopyAndBaseObjects,
    }

    /// Configuration options for the pack generation functions provided in [`iter_from_counts()`][crate::data::output::entry::iter_from_counts()].
    #[derive(PartialEq, Eq, Debug, Hash, Ord, PartialOrd, Clone, Copy)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct Options {
        /// The amount of threads to use at most when resolving the pack. If `None`, all logical cores are used.
        pub thread_limit: Option<usize>,
        /// The algorithm to produce a pack
        pub mode: Mode,
        /// If set, the resulting back can have deltas that refer to an object which is not in the pack. This can happen
        /// if the initial counted objects do not contain an object that an existing packed delta refers to, for example, because
        /// it wasn't part of the iteration, for instance when the iteration was performed on tree deltas or only a part of the
        /// commit graph. Please note that thin packs are not valid packs at rest, thus they are only valid for packs in transit.
        ///
        /// If set to false, delta objects will be decompressed and recompressed as base objects.
        pub allow_thin_pack: bool,
        /// The amount of objects per chunk or unit of work to be sent to threads for processing
        /// TODO: could this become the window size?
        pub chunk_size: usize,
        /// The pack data version to produce for each entry
        pub version: crate::data::Version,
        /// The compression level to use for objects that are not copied from an existing pack,
        /// but deflated from their object data.
        ///
        /// Defaults to [`Compression::DEFAULT`](gix_zlib::Compression::DEFAULT), which is
        /// also the default that `git` uses when writing packs, unless configured otherwise
        /// with `pack.compression`.
        pub compression: gix_zlib::Compression,
    }

    impl Default for Options {
        fn default() -> Self {
            Options {
                thread_limit: None,
                mode: Mode::PackCopyAndBaseObjects,
                allow_thin_pack: false,
                chunk_size: 10,
                version: Default::default(),
                compression: gix_zlib::Compression::DEFAULT,
            }
        }
    }

    /// The progress ids used in [`write_to_directory()`][crate::Bundle::write_to_directory()].
    ///
    /// Use this information to selectively extract the progress of interest in case the parent application has custom visualization.
    #[derive(Debug, Copy, Clone)]
    pub enum ProgressId {
        /// The amount of [`Count`][crate::data::output::Count] objects which are resolved to their pack location.
        ResolveCounts,
        /// Layout pack entries for placement into a pack (by pack-id and by offset).
        SortEntries,
    }

    impl From<ProgressId> for gix_utils::progress::Id {
        fn from(v: ProgressId) -> Self {
            match v {
                ProgressId::ResolveCounts => *b"ECRC",
                ProgressId::SortEntries => *b"ECSE",
            }
        }
    }
}
pub use types::{DeltaBase, Mode, Options, Outcome, ProgressId};
