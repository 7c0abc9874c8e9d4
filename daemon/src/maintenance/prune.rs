//! Unreachable objects, as git's cruft packs and `gc.pruneExpire` keep and expire them: a full
//! run writes what no ref reaches into a pack of its own with a `.mtimes` file (each object's
//! age, git's format: `git repack --cruft` and `git gc` read it), leaves out what is older than
//! the expiry (default two weeks) unless a younger unreachable object, an in-flight push (its
//! quarantine, a pack that landed during the run) or a ref that moved during the run reaches it,
//! and notes the packs it replaced as rolled with *drops*. Those go [`super::geometric::GRACE`]
//! later, and only after [`rescue`] found nothing live that needs what they alone hold: a push
//! whose client read the refs before a branch was deleted may build on objects the run left out,
//! and such a pack is then kept (un-rolled) for the next run to sort out.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use gix_hash::ObjectId;

use super::MaintenanceError;
use super::geometric::{self, PackInfo};

/// git's default for `gc.pruneExpire`.
pub const DEFAULT_EXPIRE: &str = "2.weeks.ago";

/// Up to when an unreachable object counts as expired: `None` never (`gc.pruneExpire=never`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry(pub Option<u64>);

impl Expiry {
    /// The repository's `gc.pruneExpire` ([`DEFAULT_EXPIRE`] when unset), as git reads it:
    /// `never`, `now`, or a date (`2.weeks.ago`, `2026-11-01`, …). An unreadable value fails the
    /// run, as it fails `git gc`: a typo must not prune what the operator meant to keep.
    pub fn of(repo: &gix::Repository) -> Result<Expiry, MaintenanceError> {
        let config = repo.config_snapshot();
        let value = config.string("gc.pruneExpire").map(|v| v.to_string());
        Expiry::parse(value.as_deref().unwrap_or(DEFAULT_EXPIRE), SystemTime::now())
    }

    /// `value` read at `now`.
    pub fn parse(value: &str, now: SystemTime) -> Result<Expiry, MaintenanceError> {
        let now_secs = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
        match value.trim() {
            "never" | "false" => Ok(Expiry(None)),
            "now" => Ok(Expiry(Some(now_secs))),
            date => match gix::date::parse(date, Some(zoned(now))) {
                Ok(time) => Ok(Expiry(Some(u64::try_from(time.seconds).unwrap_or(0)))),
                Err(err) => Err(MaintenanceError::Config(format!("gc.pruneExpire = {date:?}: {err}"))),
            },
        }
    }

    /// Whether an object last written at `mtime` (epoch seconds) is expired (git prunes what is
    /// not newer than the date).
    fn expired(&self, mtime: u32) -> bool {
        self.0.is_some_and(|cutoff| u64::from(mtime) <= cutoff)
    }
}

/// What a full run may replace, listed before its walk: what lands later is an in-flight
/// push's and is not touched.
pub struct Before {
    /// Packs neither kept nor rolled.
    pub packs: Vec<PackInfo>,
    /// Loose objects with their files' modification times.
    pub loose: Vec<(ObjectId, u32)>,
}

impl Before {
    pub fn list(objects_dir: &Path) -> Before {
        let packs = geometric::packs(&objects_dir.join("pack")).into_iter().filter(|p| !p.kept).collect();
        let loose = super::loose_objects(objects_dir)
            .into_iter()
            .filter_map(|id| {
                let meta = std::fs::metadata(super::loose_path(objects_dir, &id)).ok()?;
                Some((id, epoch(meta.modified().ok()?)))
            })
            .collect();
        Before { packs, loose }
    }
}

/// `now` for gix-date's relative dates (`2.weeks.ago` counts back from it).
fn zoned(now: SystemTime) -> gix::date::ZonedDateTime {
    gix::date::ZonedDateTime::try_from(now).unwrap_or_else(|_| gix::date::ZonedDateTime::now())
}

fn epoch(time: SystemTime) -> u32 {
    u32::try_from(time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs()).unwrap_or(u32::MAX)
}

/// The unreachable objects of a full run, and what becomes of them.
#[derive(Debug, Default)]
pub struct Unreachable {
    /// Kept: into the cruft pack, in the order met (pack by pack, by offset), with their mtimes.
    pub kept: Vec<(ObjectId, u32)>,
    /// Left out: expired and reached by nothing live.
    pub expired: usize,
}

/// The objects of `before` that the run's pack (`main`) does not hold: each with its newest
/// mtime (a cruft pack's `.mtimes`, else its pack's or loose file's time), split by `expiry`
/// and [`rescue`].
pub fn sort_out(
    repo: &gix::Repository,
    objects_dir: &Path,
    before: &Before,
    main: &gix_pack::index::File,
    main_path: &Path,
    expiry: Expiry,
) -> Result<Unreachable, MaintenanceError> {
    let hash = repo.object_hash();
    let mut order: Vec<ObjectId> = Vec::new();
    let mut mtimes: gix::hashtable::HashMap<ObjectId, u32> = Default::default();
    let mut note = |id: ObjectId, mtime: u32, order: &mut Vec<ObjectId>| match mtimes.get_mut(&id) {
        Some(newest) => *newest = (*newest).max(mtime),
        None => {
            mtimes.insert(id, mtime);
            order.push(id);
        }
    };
    for pack in &before.packs {
        let index = gix_pack::index::File::at(&pack.index, hash).map_err(MaintenanceError::pack)?;
        let per_object = read_mtimes(&pack.index.with_extension("mtimes"), &index);
        let pack_mtime = epoch(pack.mtime);
        let mut entries: Vec<(u64, u32, ObjectId)> = index
            .iter()
            .enumerate()
            .filter(|(_, e)| main.lookup(e.oid).is_none())
            .map(|(i, e)| (e.pack_offset, per_object.as_ref().map_or(pack_mtime, |m| m[i]), e.oid))
            .collect();
        entries.sort_unstable();
        for (_, mtime, id) in entries {
            note(id, mtime, &mut order);
        }
    }
    for (id, mtime) in &before.loose {
        if main.lookup(id).is_none() {
            note(*id, *mtime, &mut order);
        }
    }
    if order.is_empty() {
        return Ok(Unreachable::default());
    }
    // Kept for their age, and what they reach; kept because something live reaches them.
    let young: Vec<ObjectId> = order.iter().copied().filter(|id| !expiry.expired(mtimes[id])).collect();
    let mut needed: gix::hashtable::HashSet<ObjectId> = young.iter().copied().collect();
    let candidates = |id: &ObjectId| mtimes.contains_key(id);
    let closed = [main_path.to_owned()];
    let mut roots = live_roots(repo, objects_dir, before, &closed)?;
    roots.ids.extend(young);
    reach(repo, roots, &closed_indexes(&closed, hash), &mut |id| {
        if candidates(&id) {
            needed.insert(id);
        }
    })?;
    let kept: Vec<(ObjectId, u32)> =
        order.iter().filter(|id| needed.contains(*id)).map(|id| (*id, mtimes[id])).collect();
    Ok(Unreachable { expired: order.len() - kept.len(), kept })
}

/// What may still need an object the run left out: every ref (as it is now, after the run's
/// walk), the objects of push quarantines (gixd's and git's), and the objects of packs and loose
/// files the run did not list (landed during it), but those of `closed` packs (everything they
/// reach is in them) and of cruft packs. Quarantines are listed first: a push moves its pack from
/// there into the pack directory, and then moves its ref.
fn live_roots(
    repo: &gix::Repository,
    objects_dir: &Path,
    before: &Before,
    closed: &[PathBuf],
) -> Result<Roots, MaintenanceError> {
    let hash = repo.object_hash();
    let mut roots = Vec::new();
    let mut quarantines = Vec::new();
    for entry in std::fs::read_dir(objects_dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(crate::push::quarantine::PREFIX) || name.starts_with("tmp_objdir-incoming-") {
            let dir = entry.path();
            if let Ok(odb) = gix_odb::at(&dir, hash) {
                quarantines.push(odb);
            }
            roots.extend(super::loose_objects(&dir));
            for pack in std::fs::read_dir(dir.join("pack")).into_iter().flatten().flatten() {
                if pack.path().extension().is_some_and(|e| e == "idx")
                    && let Ok(index) = gix_pack::index::File::at(pack.path(), hash)
                {
                    roots.extend(index.iter().map(|e| e.oid));
                }
            }
        }
    }
    for pack in std::fs::read_dir(objects_dir.join("pack"))?.flatten() {
        let path = pack.path();
        let listed = before.packs.iter().any(|p| p.index == path);
        if path.extension().is_none_or(|e| e != "idx")
            || listed
            || closed.contains(&path)
            || path.with_extension("mtimes").exists()
            || geometric::is_rolled(&path)
            || crate::packs::is_temporary(&path)
        {
            continue;
        }
        if let Ok(index) = gix_pack::index::File::at(&path, hash) {
            roots.extend(index.iter().map(|e| e.oid));
        }
    }
    let listed: gix::hashtable::HashSet<ObjectId> = before.loose.iter().map(|(id, _)| *id).collect();
    roots.extend(super::loose_objects(objects_dir).into_iter().filter(|id| !listed.contains(id)));
    let refs = crate::repo::RefSnapshot::load_hiding_nothing(repo)?;
    roots.extend(refs.tips());
    roots.extend(reflog_values(&repo.git_dir().join("logs")));
    roots.extend(crate::repo::ref_store::RefStore::of(repo).reftable_log_values()?);
    Ok(Roots { ids: roots, quarantines })
}

/// Where a walk for what is still needed starts, and the object databases of the quarantines
/// (their objects are not the repository's yet).
struct Roots {
    ids: Vec<ObjectId>,
    quarantines: Vec<gix_odb::Handle>,
}

/// Every value the reflogs under `logs` name, old and new: git's prune counts them reachable
/// (until `gc.reflogExpire` drops the lines), and so does this.
fn reflog_values(logs: &Path) -> Vec<ObjectId> {
    let mut values = Vec::new();
    let mut dirs = vec![logs.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(data) = std::fs::read(&path) {
                for line in gix::refs::file::log::iter::forward(&data).flatten() {
                    values.extend([line.previous_oid(), line.new_oid()].into_iter().filter(|id| !id.is_null()));
                }
            }
        }
    }
    values
}

fn closed_indexes(closed: &[PathBuf], hash: gix_hash::Kind) -> Vec<gix_pack::index::File> {
    closed.iter().filter_map(|p| gix_pack::index::File::at(p, hash).ok()).collect()
}

/// Walk from `roots` through parents, trees, tree entries and tag targets, calling `met` for
/// each object met once; an object of a `closed` pack is not entered (what it reaches is there
/// too), nor one the object database does not have.
fn reach(
    repo: &gix::Repository,
    roots: Roots,
    closed: &[gix_pack::index::File],
    met: &mut dyn FnMut(ObjectId),
) -> Result<(), MaintenanceError> {
    use gix_object::{Exists, Find, Kind};
    let hash = repo.object_hash();
    let mut seen: gix::hashtable::HashSet<ObjectId> = Default::default();
    let Roots { ids: mut stack, quarantines } = roots;
    let mut buf = Vec::new();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) || closed.iter().any(|index| index.lookup(id).is_some()) {
            continue;
        }
        met(id);
        if repo.find_header(id).is_ok_and(|header| header.kind() == Kind::Blob) {
            continue;
        }
        let object = match repo.objects.try_find(&id, &mut buf) {
            Ok(Some(object)) => object,
            _ => match quarantines.iter().find(|odb| odb.exists(&id)) {
                Some(odb) => match odb.try_find(&id, &mut buf) {
                    Ok(Some(object)) => object,
                    _ => continue,
                },
                None => continue,
            },
        };
        match object.kind {
            Kind::Commit => {
                let mut iter = gix_object::CommitRefIter::from_bytes(object.data, hash);
                if let Ok(tree) = iter.tree_id() {
                    stack.push(tree);
                }
                stack.extend(iter.parent_ids());
            }
            Kind::Tree => {
                for entry in gix_object::TreeRefIter::from_bytes(object.data, hash).flatten() {
                    if !entry.mode.is_commit() {
                        stack.push(entry.oid.to_owned());
                    }
                }
            }
            Kind::Tag => {
                if let Ok(target) = gix_object::TagRefIter::from_bytes(object.data, hash).target_id() {
                    stack.push(target);
                }
            }
            Kind::Blob => {}
        }
    }
    Ok(())
}

/// Before the packs a full run replaced with drops go: the objects only they hold (in no live
/// pack, no loose file) that something live reaches ([`live_roots`]) — a push that built on a
/// deleted branch while the run or its grace went on. Each pack holding one is un-rolled (kept
/// as a pack of the repository; the next full run sorts it out). Returns how many were kept.
pub fn rescue(objects_dir: &Path, dropping: &geometric::Dropping) -> usize {
    let Some(git_dir) = objects_dir.parent() else { return 0 };
    let Ok(repo) = super::open(git_dir) else { return 0 };
    let hash = repo.object_hash();
    let rolled: Vec<(PathBuf, gix_pack::index::File)> = dropping
        .iter()
        .filter_map(|(index, _)| Some((index.clone(), gix_pack::index::File::at(index, hash).ok()?)))
        .collect();
    let live: Vec<gix_pack::index::File> = geometric::packs(&objects_dir.join("pack"))
        .into_iter()
        .filter_map(|p| gix_pack::index::File::at(&p.index, hash).ok())
        .collect();
    let only_there = |id: &ObjectId| {
        !live.iter().any(|index| index.lookup(id).is_some()) && !super::loose_path(objects_dir, id).exists()
    };
    let mut dropped: gix::hashtable::HashSet<ObjectId> = Default::default();
    for (_, index) in &rolled {
        dropped.extend(index.iter().map(|e| e.oid).filter(|id| only_there(id)));
    }
    if dropped.is_empty() {
        return 0;
    }
    // The run's pack, if it is still live, holds what it reaches; else everything is walked.
    let closed: Vec<PathBuf> = dropping
        .iter()
        .filter_map(|(_, main)| main.clone())
        .filter(|main| main.exists() && !geometric::is_rolled(main))
        .collect();
    let before = Before { packs: Vec::new(), loose: Vec::new() };
    let Ok(roots) = live_roots(&repo, objects_dir, &before, &closed) else { return 0 };
    let mut needed: Vec<ObjectId> = Vec::new();
    if reach(&repo, roots, &closed_indexes(&closed, hash), &mut |id| {
        if dropped.contains(&id) {
            needed.push(id);
        }
    })
    .is_err()
    {
        return 0;
    }
    let mut kept = 0;
    for (index_path, index) in &rolled {
        if needed.iter().any(|id| index.lookup(id).is_some()) {
            tracing::warn!(pack = %index_path.display(), "a pack maintenance replaced holds objects a ref or a push reaches again: kept");
            geometric::unroll(index_path);
            kept += 1;
        }
    }
    kept
}

/// The per-object mtimes of a cruft pack (`.mtimes` beside its index), in index order; `None`
/// if there is none or it does not read as git's format for `index`.
fn read_mtimes(path: &Path, index: &gix_pack::index::File) -> Option<Vec<u32>> {
    let data = std::fs::read(path).ok()?;
    let hash_len = index.object_hash().len_in_bytes();
    let count = index.num_objects() as usize;
    if data.len() != 12 + 4 * count + 2 * hash_len || &data[..4] != b"MTME" || data[4..8] != 1u32.to_be_bytes() {
        return None;
    }
    if data[12 + 4 * count..12 + 4 * count + hash_len] != *index.pack_checksum().as_bytes() {
        return None;
    }
    Some(data[12..12 + 4 * count].chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Write git's `.mtimes` for the pack indexed by `index`: `mtime_of` each object, in index order.
pub fn write_mtimes(
    path: &Path,
    index: &gix_pack::index::File,
    mtime_of: impl Fn(&ObjectId) -> u32,
) -> Result<(), MaintenanceError> {
    let hash = index.object_hash();
    let mut data = Vec::with_capacity(12 + 4 * index.num_objects() as usize + 2 * hash.len_in_bytes());
    data.extend_from_slice(b"MTME");
    data.extend_from_slice(&1u32.to_be_bytes());
    data.extend_from_slice(&(if hash == gix_hash::Kind::Sha1 { 1u32 } else { 2u32 }).to_be_bytes());
    for entry in index.iter() {
        data.extend_from_slice(&mtime_of(&entry.oid).to_be_bytes());
    }
    data.extend_from_slice(index.pack_checksum().as_bytes());
    let mut hasher = gix_hash::hasher(hash);
    hasher.update(&data);
    let checksum = hasher.try_finalize().map_err(MaintenanceError::pack)?;
    data.extend_from_slice(checksum.as_bytes());
    let tmp = path.with_extension("mtimes.tmp");
    std::fs::write(&tmp, &data)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn prune_expire_reads_as_git_reads_it() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        assert_eq!(Expiry::parse("never", now).unwrap(), Expiry(None));
        assert_eq!(Expiry::parse("now", now).unwrap(), Expiry(Some(2_000_000_000)));
        let weeks = Expiry::parse("2.weeks.ago", SystemTime::now()).unwrap().0.unwrap();
        let expected = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() - 14 * 86_400;
        assert!(weeks.abs_diff(expected) < 120, "{weeks} vs {expected}");
        assert!(Expiry::parse("a fortnight, roughly", now).is_err());
        let expiry = Expiry(Some(100));
        assert!(expiry.expired(100) && expiry.expired(99) && !expiry.expired(101));
        assert!(!Expiry(None).expired(0));
    }
}
