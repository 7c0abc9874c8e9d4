//! Maintenance (repository access layer): repack everything reachable from the refs into one
//! pack, in-process, and write its reverse index (`.rev`) and bitmap (`.bitmap`) the way git
//! reads them — so a repository that only ever received pushes gets bitmaps without an external
//! git; then move loose refs into packed-refs, as `git pack-refs --all --prune` (git gc) does.
//! Nothing is lost: an old pack is deleted only when every one of its objects is in the new
//! pack or the cruft pack beside it, a loose object only when it is; what no ref reaches is kept
//! there until `gc.pruneExpire` (two weeks) has passed over it, and longer while anything live
//! reaches it; a loose ref is removed only after packed-refs holds its value, under its lock.
//!
//! `geometric`: the roll-up of small packs that runs after pushes, and what a repository is due.
//! `prune`: unreachable objects, their cruft pack and their expiry.

use std::io::Write;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;

use crate::bitmap::write::{pack_order, write_bitmap, write_rev};
use crate::error::{PackError, RepoError, ServeError};

pub mod bundles;
pub mod commit_graph;
pub mod geometric;
pub mod midx;
pub mod prune;
mod refs;
mod rerun;
use refs::pack_refs;

/// Why a maintenance run did not finish. It serves no request: the service counts it
/// (`skipped` for [`MaintenanceError::Busy`] and [`MaintenanceError::Repo`], else `failed`), the
/// command line prints it.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// Another run holds the repository's maintenance lock (a second replica, `gixd maintenance`
    /// by hand): it does the work.
    #[error("another maintenance of this repository is running")]
    Busy,
    /// A repository gixd does not maintain (a format it cannot read whole, precious objects).
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    #[error("repository access failed: {0}")]
    Git(#[from] gix::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The repository's configuration says something maintenance cannot act on.
    #[error("configuration: {0}")]
    Config(String),
    /// The pack, index or bitmap writer it shares with serving failed.
    #[error(transparent)]
    Write(#[from] ServeError),
}

impl MaintenanceError {
    /// A gitoxide error while reading or writing packs.
    fn pack(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        MaintenanceError::Pack(PackError::Gix(Box::new(err)))
    }

    /// What gixd found wrong with the packs it wrote.
    fn corrupt(message: impl Into<String>) -> Self {
        MaintenanceError::Pack(PackError::Corrupt(message.into()))
    }
}

/// What a maintenance run did.
#[derive(Debug, Default)]
pub struct Report {
    pub objects: usize,
    pub pack: PathBuf,
    pub bitmaps: usize,
    pub packs_removed: usize,
    pub loose_removed: usize,
    /// What earlier runs, killed before they finished, left behind and this one removed.
    pub leftovers_removed: usize,
    /// Objects stored whole before that the new pack holds as deltas the search found.
    pub deltas_computed: usize,
    /// Loose refs moved into packed-refs.
    pub refs_packed: usize,
    /// Unreachable objects kept in the cruft pack (younger than `gc.pruneExpire`, or reached by
    /// such an object or by something live).
    pub unreachable_kept: usize,
    /// Unreachable objects left out: expired, and reached by nothing kept.
    pub pruned: usize,
    /// Commits in the commit-graph it wrote (none when the history cannot have one).
    pub commit_graph: Option<usize>,
    /// The bytes of the bundle it wrote for bundle-uri ([`bundles`]; none unless the repository
    /// asks for bundles and has new tips).
    pub bundle: Option<u64>,
}

/// Repack `git_dir` into one pack with a `.rev` and a `.bitmap`, with a delta search among the
/// objects stored whole.
pub fn run(git_dir: &Path) -> Result<Report, MaintenanceError> {
    let mut report = full(git_dir, Bases::Search)?;
    report.bundle = bundles::write(git_dir)?;
    Ok(report)
}

/// [`run`] with every delta searched anew, as `git gc --aggressive` / `git repack -adf` do: a
/// smaller pack for the CPU of decoding and searching every object (stored deltas are kept by
/// [`run`]).
pub fn aggressive(git_dir: &Path) -> Result<Report, MaintenanceError> {
    let mut report = full(git_dir, Bases::Anew)?;
    report.bundle = bundles::write(git_dir)?;
    Ok(report)
}

/// Repack `git_dir` into one pack with a `.rev` and a `.bitmap`; `bases` says whether objects
/// stored whole are searched for deltas (a run by hand or on the clock) or kept as they are (the
/// automatic run after pushes: memory bounded by the entries, not by the objects' data).
pub fn full(git_dir: &Path, bases: Bases) -> Result<Report, MaintenanceError> {
    rerun::while_packs_change(&git_dir.join("objects/pack"), || full_once(git_dir, bases))
}

fn full_once(git_dir: &Path, bases: Bases) -> Result<Report, MaintenanceError> {
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
fn bitmap_in_place(
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
        Err(ServeError::MissingObject(_)) => {
            let _ = std::fs::remove_file(&bitmap_path);
            Ok(None)
        }
        Err(err) => Err(err.into()),
    }
}

/// The commit-graph of everything reachable from `tips` ([`commit_graph::write`]); a failure is
/// logged and leaves the repository without one (walks decode commits then), not the run failed.
fn graph(
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
const WALK_PAGES_EVERY: usize = 16 << 10;

/// Give the heap a phase freed back to the system (glibc keeps it otherwise, and the next phase's
/// peak stacks on it): maintenance runs its phases one after the other, each sized by the
/// repository.
fn release_freed_memory() {
    // SAFETY: malloc_trim only returns free heap pages; no pointer is invalidated.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `git_dir` opened for maintenance, if gixd can read it whole: a repository gixd cannot read is
/// left as it is (repacked by what gixd sees of it, its refs or objects elsewhere would be lost),
/// and so is one whose objects are precious.
fn open(git_dir: &Path) -> Result<gix::Repository, MaintenanceError> {
    let unsupported = |reason| RepoError::Unsupported { path: git_dir.display().to_string(), exported: true, reason };
    match crate::repo::format::check(git_dir) {
        Ok(format) if format.precious_objects => {
            return Err(unsupported(crate::repo::format::Unsupported::PreciousObjects).into());
        }
        Ok(_) => {}
        Err(reason) => return Err(unsupported(reason).into()),
    }
    gix::open_opts(git_dir, crate::repo::open_options(&crate::repo::midx::check(git_dir)))
        .map_err(MaintenanceError::pack)
}

/// Where the loose object `id` of `objects_dir` is (or would be).
fn loose_path(objects_dir: &Path, id: &gix_hash::oid) -> PathBuf {
    let hex = id.to_hex().to_string();
    objects_dir.join(&hex[..2]).join(&hex[2..])
}

/// The loose objects of `objects_dir`, by their file names.
fn loose_objects(objects_dir: &Path) -> Vec<ObjectId> {
    let mut ids = Vec::new();
    for fanout in std::fs::read_dir(objects_dir).into_iter().flatten().flatten() {
        let name = fanout.file_name();
        let Some(prefix) = name.to_str().filter(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit())) else {
            continue;
        };
        for loose in std::fs::read_dir(fanout.path()).into_iter().flatten().flatten() {
            let hex = format!("{prefix}{}", loose.file_name().to_string_lossy());
            if let Ok(id) = ObjectId::from_hex(hex.as_bytes()) {
                ids.push(id);
            }
        }
    }
    ids
}

/// The packs of `pack_dir` whose every object is in `index` (the new pack, at `index_path`) are
/// noted as rolled into it: they go [`geometric::GRACE`] later, when transfers that started
/// before this run (here or in another replica) are done with them.
fn retire_contained(
    pack_dir: &Path,
    index: &gix_pack::index::File,
    index_path: &Path,
    report: &mut Report,
) -> Result<(), MaintenanceError> {
    for entry in std::fs::read_dir(pack_dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "idx")
            || path == index_path
            || crate::packs::is_temporary(&path)
            || geometric::is_rolled(&path)
        {
            continue;
        }
        let Ok(old) = gix_pack::index::File::at(&path, index.object_hash()) else { continue };
        if old.iter().all(|e| index.lookup(e.oid).is_some()) {
            geometric::mark_rolled(&path, None)?;
            report.packs_removed += 1;
        }
    }
    Ok(())
}

/// Remove the loose objects `gone` says the run has put elsewhere (or left out).
fn remove_loose(
    objects_dir: &Path,
    gone: impl Fn(&ObjectId) -> bool,
    report: &mut Report,
) -> Result<(), MaintenanceError> {
    for id in loose_objects(objects_dir).iter().filter(|id| gone(id)) {
        if std::fs::remove_file(loose_path(objects_dir, id)).is_ok() {
            report.loose_removed += 1;
        }
    }
    // An emptied fan-out directory stays: a push writing a loose object beside this run creates
    // it and then renames its object file in, and removing it in between failed that push
    // ("unable to write file ./objects/5c/…: No such file or directory", 1 run of the soak in 4).
    Ok(())
}

/// One maintenance of a repository at a time: an advisory lock (`flock`) on
/// `objects/gixd-maintenance.lock`. The kernel releases it when its holder exits, however it
/// exits, so a run killed at any point leaves no lock behind.
struct Lock(#[allow(dead_code)] std::fs::File);

impl Lock {
    fn take(objects_dir: &Path) -> Result<Lock, MaintenanceError> {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(objects_dir.join("gixd-maintenance.lock"))?;
        // SAFETY: flock on a descriptor this function owns; the lock goes with the descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(MaintenanceError::Busy);
        }
        Ok(Lock(file))
    }
}

/// Remove the packs a roll-up left more than `grace` ago ([`geometric::GRACE`]), if no other run
/// holds the repository's maintenance lock (a run that does removes them itself).
pub fn expire(git_dir: &Path, grace: std::time::Duration) -> usize {
    let objects_dir = git_dir.join("objects");
    if !objects_dir.join("gixd-rolled").is_dir() {
        return 0;
    }
    let Ok(_lock) = Lock::take(&objects_dir) else { return 0 };
    expire_rolled(&objects_dir, grace)
}

/// [`geometric::expire_rolled`] with the prune rule's last look ([`prune::rescue`]).
fn expire_rolled(objects_dir: &Path, grace: std::time::Duration) -> usize {
    geometric::expire_rolled(objects_dir, grace, &prune::rescue)
}

/// Remove what runs killed before they finished left: their scratch directories
/// (`objects/gixd-maintenance-<pid>`) and the ref locks noted there, the temporary files of
/// their pack and index (gix-tempfile's `.tmpXXXXXX` in the pack directory; git's repack writes
/// `.tmp-<pid>-pack-…`, left alone) and of their `.rev` and `.bitmap` (`pack-*.tmp`). Only
/// maintenance writes these names there (a push indexes inside its quarantine), and holding the
/// lock means no other run is alive. Returns how many were removed.
fn remove_leftovers(objects_dir: &Path, pack_dir: &Path) -> usize {
    let mut removed = 0;
    for entry in std::fs::read_dir(objects_dir).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("gixd-maintenance-") && entry.path().is_dir() {
            removed += crate::ref_locks::remove_noted(&entry.path());
            if std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    for entry in std::fs::read_dir(pack_dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // gix-tempfile's `.tmpXXXXXX`, never git's `.tmp-<pid>-pack-…` (a `git repack` at work).
        let temporary = (name.starts_with(".tmp") && !name.starts_with(".tmp-"))
            || (name.starts_with("pack-") && name.ends_with(".tmp"));
        if temporary && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(removed, dir = %objects_dir.display(), "maintenance removed what a killed run left");
    }
    removed
}

/// At a start: if no maintenance of `git_dir` is running (its lock is free), remove what killed
/// runs left, their ref locks first (until then every push to a ref they held fails). Returns how
/// many files and directories were removed.
pub fn clean_after_kill(git_dir: &Path) -> usize {
    let objects_dir = git_dir.join("objects");
    let scratch_left = std::fs::read_dir(&objects_dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("gixd-maintenance-") && e.path().is_dir());
    if !scratch_left {
        return 0; // nothing to do, and no lock file made in a repository maintenance never ran in
    }
    let Ok(_lock) = Lock::take(&objects_dir) else { return 0 };
    remove_leftovers(&objects_dir, &objects_dir.join("pack"))
}

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

fn write_pack(
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
fn search_limits(repo: &gix::Repository) -> gix_pack::data::delta::search::Options {
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
fn index_as_written(
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
fn index_by_decoding(
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
fn write_cruft(
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

#[cfg(test)]
mod lock_tests {
    use super::*;

    #[test]
    fn one_maintenance_of_a_repository_at_a_time_and_the_lock_goes_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = Lock::take(dir.path()).unwrap();
        let refused = Lock::take(dir.path()).err().expect("a second run is refused while the first holds the lock");
        assert!(matches!(&refused, MaintenanceError::Busy), "{refused:?}");
        drop(first);
        assert!(Lock::take(dir.path()).is_ok(), "the lock is free once its holder is gone");
    }
}
