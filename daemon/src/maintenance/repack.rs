//! The full repack: everything reachable from the refs into one pack (the delta search as
//! [`Bases`] says), its `.rev`, `.bitmap` and the commit-graph; what no ref reaches into the
//! cruft pack beside it. A repository already in one pack gets its `.rev` and `.bitmap` in place.

use super::*;

pub(super) fn full_once(git_dir: &Path, bases: Bases) -> Result<Report, MaintenanceError> {
    let repo = open(git_dir)?;
    let hash = repo.object_hash();
    let objects_dir = repo.objects.store_ref().path().to_owned();
    let pack_dir = objects_dir.join("pack");
    std::fs::create_dir_all(&pack_dir)?;
    let _lock = Lock::take(&objects_dir)?;
    let scratch = objects_dir.join(format!("gixd-maintenance-{}", std::process::id()));
    let leftovers_removed = remove_leftovers(&objects_dir, &pack_dir);
    expire_rolled(&objects_dir, geometric::GRACE);

    // 1. Everything reachable from every ref and HEAD (hidden refs too: this is the repository,
    //    not a client's view of it), in walk order with each path's name hash.
    let expiry = prune::Expiry::of(&repo)?;
    let before = prune::Before::list(&objects_dir);
    let refs = crate::repo::RefSnapshot::load_hiding_nothing(&repo)?;
    let tips = refs.tips();
    // A repository of one pack and nothing loose needs no repack for its bitmap: the pack gets
    // one as it is — after pushes (a whole history pushed at once) whatever it holds; by hand or
    // on the clock when all it holds is reachable (nothing to prune) and no cruft pack waits to
    // expire, where a repack would write the same objects (the search tries none: objects
    // stored whole in one pack are not tried against each other). Not when every delta is to be
    // searched anew.
    if bases != Bases::Anew
        && let Some(mut report) = bitmap_in_place(&repo, &objects_dir, &tips, bases)?
    {
        report.leftovers_removed = leftovers_removed;
        std::fs::create_dir_all(&scratch)?;
        let packed = pack_refs(&repo, &scratch);
        let _ = std::fs::remove_dir_all(&scratch);
        report.refs_packed = packed?;
        return Ok(report);
    }
    // Through a handle of its own: its packs' maps and caches go with it, before the pack writer
    // maps them again (each map's resident pages count against the run's peak).
    // The walk reads every commit and tree, all over the packs: what it has read is let go as it
    // goes, as the pack writer's reads are ([`crate::packs::Packs::letting_pages_go`]).
    let mut selection = {
        let walk = open(git_dir)?;
        // As the kernel names the files it maps.
        let mapped_dir = pack_dir.canonicalize().unwrap_or_else(|_| pack_dir.clone());
        let let_go = |selected: usize| {
            if selected.is_multiple_of(WALK_PAGES_EVERY) {
                crate::packs::let_mapped_pages_go(&mapped_dir);
            }
        };
        crate::select::everything_reachable(&walk, &tips, Some(&let_go))?
    };
    // The commits the walk decoded, for the commit-graph (not decoded again there).
    let history = selection.history.take();
    release_freed_memory();

    // 2. A pack of them, indexed into place: stored deltas kept (their bases are in it too),
    //    and a delta search among the objects stored whole (loose, or pushed as a thin pack's
    //    completed bases), so versions of a file pushed apart become deltas of each other.
    std::fs::create_dir_all(&scratch)?;
    let result = write_pack(&repo, &selection, &scratch, &pack_dir, &pack_dir, hash, bases);
    let _ = std::fs::remove_dir_all(&scratch);
    let (index_path, data_path, deltas_computed) = result?;
    release_freed_memory();

    // 3. The reverse index and the bitmap.
    let index = gix_pack::index::File::at(&index_path, hash).map_err(MaintenanceError::pack)?;
    let order = pack_order(&index);
    write_rev(&index_path.with_extension("rev"), &index, &order, hash)?;
    // The closures the replaced packs' bitmap holds are carried over, not walked again.
    let old_bitmap = crate::bitmap::any_in(&pack_dir, hash);
    let bitmap_path = index_path.with_extension("bitmap");
    let bitmaps = write_bitmap(&repo, &index, &order, &tips, old_bitmap.as_ref(), &bitmap_path, hash)?.commits;
    drop(old_bitmap);
    let commit_graph = graph(&repo, &objects_dir, &tips, history);

    // 4. What no ref reached: kept in a cruft pack while young or needed, else left out.
    let unreachable = prune::sort_out(&repo, &objects_dir, &before, &index, &index_path, expiry)?;
    std::fs::create_dir_all(&scratch)?;
    let cruft = write_cruft(&repo, &unreachable, &scratch, &pack_dir, hash);
    let _ = std::fs::remove_dir_all(&scratch);
    let cruft = cruft?;

    // 5. The packs and loose objects listed before the walk: every object of theirs is in the new
    //    pack, in the cruft pack or expired. Packs go after the grace (and after a last look for
    //    pushes that built on what was left out); loose objects now.
    let mut report = Report {
        objects: selection.objects.len(),
        pack: data_path.clone(),
        bitmaps,
        leftovers_removed,
        deltas_computed,
        unreachable_kept: unreachable.kept.len(),
        pruned: unreachable.expired,
        commit_graph,
        bundle: None,
        ..Report::default()
    };
    // A multi-pack-index (git's, or a geometric run's) would name packs about to go: the one
    // pack and its bitmap serve now.
    midx::remove(&pack_dir, None);
    let drops = (unreachable.expired > 0).then_some(index_path.as_path());
    for pack in &before.packs {
        if pack.index != index_path && Some(&pack.index) != cruft.as_ref() {
            geometric::mark_rolled(&pack.index, drops)?;
            report.packs_removed += 1;
        }
    }
    retire_contained(&pack_dir, &index, &index_path, &mut report)?;
    let listed: gix::hashtable::HashSet<ObjectId> = before.loose.iter().map(|(id, _)| *id).collect();
    remove_loose(&objects_dir, |id| listed.contains(id) || index.lookup(id).is_some(), &mut report)?;

    // 6. Loose refs into packed-refs (their locks noted in the scratch directory meanwhile).
    std::fs::create_dir_all(&scratch)?;
    let packed = pack_refs(&repo, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    report.refs_packed = packed?;
    Ok(report)
}

/// When `objects_dir` holds one pack (not kept) and no loose object: its `.rev` and `.bitmap`
/// written beside it, if every object reachable from `tips` is in it (else `None`, and a repack
/// follows). After pushes ([`Bases::Keep`]) only a pack without a bitmap; else ([`Bases::Search`])
/// only when every object in it is reachable and there is no cruft pack. Costs a walk of the
/// history, not a rewrite of the pack.
pub(super) fn bitmap_in_place(
    repo: &gix::Repository,
    objects_dir: &Path,
    tips: &[ObjectId],
    bases: Bases,
) -> Result<Option<Report>, MaintenanceError> {
    let after_pushes = bases == Bases::Keep;
    let all = geometric::packs(&objects_dir.join("pack"));
    if !after_pushes && all.iter().any(|p| p.cruft) {
        return Ok(None);
    }
    let packs: Vec<_> = all.into_iter().filter(|p| !p.cruft).collect();
    let [pack] = packs.as_slice() else { return Ok(None) };
    if (after_pushes && pack.bitmap) || pack.kept || !loose_objects(objects_dir).is_empty() {
        return Ok(None);
    }
    let hash = repo.object_hash();
    let index = gix_pack::index::File::at(&pack.index, hash).map_err(MaintenanceError::pack)?;
    let order = pack_order(&index);
    let bitmap_path = pack.index.with_extension("bitmap");
    // The reverse index first: the bitmap's presence is what readers go by.
    write_rev(&pack.index.with_extension("rev"), &index, &order, hash)?;
    match write_bitmap(repo, &index, &order, tips, None, &bitmap_path, hash) {
        // Something in it is unreachable: the repack leaves it out (or keeps it as cruft).
        Ok(written) if !after_pushes && written.reachable < index.num_objects() as usize => {
            let _ = std::fs::remove_file(&bitmap_path);
            Ok(None)
        }
        Ok(written) => Ok(Some(Report {
            objects: index.num_objects() as usize,
            pack: pack.index.with_extension("pack"),
            bitmaps: written.commits,
            commit_graph: graph(repo, objects_dir, tips, None),
            bundle: None,
            ..Report::default()
        })),
        // Something reachable is not in it: the repack puts it in.
        Err(crate::bitmap::write::WriteError::MissingObject(_)) => {
            let _ = std::fs::remove_file(&bitmap_path);
            Ok(None)
        }
        Err(err) => Err(err.into()),
    }
}

/// The commit-graph of everything reachable from `tips` ([`commit_graph::write`]); a failure is
/// logged and leaves the repository without one (walks decode commits then), not the run failed.
pub(super) fn graph(
    repo: &gix::Repository,
    objects_dir: &Path,
    tips: &[ObjectId],
    walked: Option<Vec<crate::graph::Commit>>,
) -> Option<usize> {
    match commit_graph::write(repo, objects_dir, tips, walked) {
        Ok(commits) => commits,
        Err(err) => {
            tracing::warn!(repo = %repo.git_dir().display(), %err, "no commit-graph written");
            let _ = std::fs::remove_file(objects_dir.join("info/commit-graph"));
            None
        }
    }
}

/// How many objects the walk selects between two releases of the packs' resident pages.
pub(super) const WALK_PAGES_EVERY: usize = 16 << 10;

/// What a repack does with objects stored whole, and with a delta whose base it does not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bases {
    /// Every base is written (everything goes in) and whole objects are searched for deltas.
    Search,
    /// Every base is written; whole objects stay whole (no search: memory bounded by the entries).
    Keep,
    /// Only the selection is written: a delta whose base is not in it is stored whole, and the
    /// whole objects are searched among themselves (a roll-up of some packs).
    StoreWhole,
    /// Every base is written and no stored delta is reused: every object is searched anew (git's
    /// `repack -adf`), with the repository's `pack.window` and `pack.depth` (git's 10 and 50).
    Anew,
}

pub(super) fn write_pack(
    repo: &gix::Repository,
    selection: &crate::select::Selection,
    scratch: &Path,
    pack_dir: &Path,
    out: &Path,
    hash: gix_hash::Kind,
    bases: Bases,
) -> Result<(PathBuf, PathBuf, usize), MaintenanceError> {
    // Every object is in: a base outside the selection is never met. Stored entries are located
    // in the pack files as read now (not inflated to find their ends); one that does not read
    // leaves it to gix-odb.
    let packs = match crate::packs::Packs::open(pack_dir, hash).map(crate::packs::Packs::letting_pages_go) {
        Ok(packs) => Some(std::sync::Arc::new(packs)),
        Err(err) => {
            tracing::warn!(%err, "maintenance locates entries through the object database");
            None
        }
    };
    let tmp_pack = scratch.join("all.pack");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&tmp_pack)?);
    let options = crate::pack::Options {
        thin_pack: false,
        ofs_delta: true,
        include_unselected_bases: bases != Bases::StoreWhole,
        packs: &|| packs.clone(),
        deltify: bases != Bases::Keep,
        search_anew: (bases == Bases::Anew).then(|| search_limits(repo)),
        progress_every: std::time::Duration::from_secs(1),
    };
    let (stats, noted) = crate::pack::write_indexed(repo, selection, options, |_| true, &mut file)?;
    file.flush()?;
    drop(file);
    // The old packs' maps and the entries are done with before the new pack is indexed.
    drop(packs);
    release_freed_memory();
    let (index, data) = match noted {
        Some(entries) => index_as_written(&tmp_pack, entries, out, hash)?,
        None => index_by_decoding(&tmp_pack, out, hash)?,
    };
    Ok((index, data, stats.deltas_computed))
}

/// The delta search's window and depth from the repository's `pack.window` and `pack.depth`, as
/// git's `pack-objects` reads them (10 and 50 when unset; a depth past git's 4095 is cut to it).
pub(super) fn search_limits(repo: &gix::Repository) -> gix_pack::data::delta::search::Options {
    let config = repo.config_snapshot();
    let mut limits = gix_pack::data::delta::search::Options { budget: usize::MAX, ..Default::default() };
    let positive = |key: &str| config.integer(key).and_then(|v| usize::try_from(v).ok());
    if let Some(window) = positive("pack.window") {
        limits.window = window;
    }
    if let Some(depth) = positive("pack.depth") {
        limits.max_depth = depth.min(4095);
    }
    limits
}

/// Move the pack at `tmp_pack` into `out` under its name (its checksum) and write its index from
/// the entries the writer noted: no object is decoded again. The index must then describe the
/// pack file (its checksum, its count), or the run fails before anything is replaced.
pub(super) fn index_as_written(
    tmp_pack: &Path,
    entries: Vec<crate::pack::IndexEntry>,
    out: &Path,
    hash: gix_hash::Kind,
) -> Result<(PathBuf, PathBuf), MaintenanceError> {
    use std::io::{Read, Seek, SeekFrom};
    let count = entries.len();
    let mut file = std::fs::File::open(tmp_pack)?;
    let mut trailer = vec![0; hash.len_in_bytes()];
    file.seek(SeekFrom::End(-(trailer.len() as i64)))?;
    file.read_exact(&mut trailer)?;
    drop(file);
    let checksum = ObjectId::try_from(&trailer[..]).map_err(|_| MaintenanceError::corrupt("a pack trailer"))?;
    let name = format!("pack-{}", checksum.to_hex());
    let (data_path, index_path) = (out.join(format!("{name}.pack")), out.join(format!("{name}.idx")));
    std::fs::rename(tmp_pack, &data_path)?;
    crate::pack::index::write(&index_path, entries, &checksum, hash)?;
    let index = gix_pack::index::File::at(&index_path, hash).map_err(MaintenanceError::pack)?;
    let data = gix_pack::data::File::at(&data_path, hash).map_err(MaintenanceError::pack)?;
    if index.pack_checksum() != data.checksum()
        || index.num_objects() as usize != count
        || data.num_objects() as usize != count
    {
        let _ = std::fs::remove_file(&index_path);
        return Err(MaintenanceError::corrupt("the index written is not of the pack written"));
    }
    Ok((index_path, data_path))
}

/// The pack at `tmp_pack` indexed into `out` by gix-pack's indexer, which decodes and hashes
/// every object: for a pack whose entries the writer did not note.
pub(super) fn index_by_decoding(
    tmp_pack: &Path,
    out: &Path,
    hash: gix_hash::Kind,
) -> Result<(PathBuf, PathBuf), MaintenanceError> {
    let mut reader = std::io::BufReader::new(std::fs::File::open(tmp_pack)?);
    let outcome = gix_pack::Bundle::write_to_directory(
        &mut reader,
        Some(out),
        &mut gix_utils::progress::Discard,
        &std::sync::atomic::AtomicBool::new(false),
        None::<gix_odb::Handle>,
        hash,
        gix_pack::bundle::write::Options { thread_limit: Some(1), ..Default::default() },
    )
    .map_err(MaintenanceError::pack)?;
    if let Some(keep) = &outcome.keep_path {
        let _ = std::fs::remove_file(keep);
    }
    match (outcome.index_path, outcome.data_path) {
        (Some(index), Some(data)) => Ok((index, data)),
        _ => Err(MaintenanceError::corrupt("the new pack was not written")),
    }
}

/// The cruft pack of a full run: the unreachable objects it keeps, whole or as deltas among
/// themselves, with git's `.mtimes` beside them (each object's age). Written in `scratch` and
/// moved into `pack_dir` with its `.mtimes` before its index, so it is never seen without its
/// ages. `None`: nothing unreachable is kept.
pub(super) fn write_cruft(
    repo: &gix::Repository,
    unreachable: &prune::Unreachable,
    scratch: &Path,
    pack_dir: &Path,
    hash: gix_hash::Kind,
) -> Result<Option<PathBuf>, MaintenanceError> {
    if unreachable.kept.is_empty() {
        return Ok(None);
    }
    let selection = crate::select::Selection {
        objects: unreachable.kept.iter().map(|(id, _)| *id).collect(),
        ..Default::default()
    };
    let (index_path, data_path, _) = write_pack(repo, &selection, scratch, pack_dir, scratch, hash, Bases::StoreWhole)?;
    let mtimes: gix::hashtable::HashMap<ObjectId, u32> = unreachable.kept.iter().copied().collect();
    let index = gix_pack::index::File::at(&index_path, hash).map_err(MaintenanceError::pack)?;
    let mtimes_path = index_path.with_extension("mtimes");
    prune::write_mtimes(&mtimes_path, &index, |id| mtimes.get(id).copied().unwrap_or(0))?;
    let target = |path: &Path| pack_dir.join(path.file_name().unwrap_or_default());
    std::fs::rename(&data_path, target(&data_path))?;
    std::fs::rename(&mtimes_path, target(&mtimes_path))?;
    std::fs::rename(&index_path, target(&index_path))?;
    Ok(Some(target(&index_path)))
}
