//! Geometric maintenance (git's `repack --geometric=2`): the packs pushes leave are rolled up so
//! that, by object count, each pack holds at least twice what all smaller ones hold together; the
//! big pack (and its bitmap) is left untouched, so a run costs what the small packs hold, not the
//! repository. And [`due`]: what maintenance a repository needs now, read from its pack
//! directory (counts in the `.idx` headers, no object read).

use std::path::{Path, PathBuf};

use gix_hash::ObjectId;

use super::MaintenanceError;
use super::Report;

/// The factor of the progression (git's default, `--geometric=2`).
pub const FACTOR: u64 = 2;

/// Loose objects enough for a roll-up by themselves (git's `gc.auto` counts in thousands; a
/// served repository seldom has any: pushes are kept as packs).
pub const LOOSE_MIN_OBJECTS: u64 = 100;

/// Below this many objects outside a bitmap, no full repack is scheduled for it: a clone walks
/// them, which costs about what a search of them would.
pub const FULL_MIN_OBJECTS: u64 = 10_000;

/// One pack of the pack directory, as maintenance sees it.
#[derive(Debug, Clone)]
pub struct PackInfo {
    pub index: PathBuf,
    pub objects: u64,
    pub bitmap: bool,
    /// A `.keep` file: never rolled up or removed.
    pub kept: bool,
    /// A cruft pack (a `.mtimes` file: unreachable objects with their ages, [`super::prune`]):
    /// outside the geometry; only a full run replaces it.
    pub cruft: bool,
    pub mtime: std::time::SystemTime,
}

/// The packs in `pack_dir`, smallest first (git's geometry order).
pub fn packs(pack_dir: &Path) -> Vec<PackInfo> {
    let mut packs: Vec<PackInfo> = std::fs::read_dir(pack_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("pack-"))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx") && p.with_extension("pack").is_file())
        .filter(|p| !rolled_marker(p).exists())
        .filter_map(|index| {
            let objects = index_object_count(&index)?;
            let mtime = std::fs::metadata(index.with_extension("pack")).and_then(|m| m.modified()).ok()?;
            Some(PackInfo {
                bitmap: index.with_extension("bitmap").is_file(),
                kept: index.with_extension("keep").exists(),
                cruft: index.with_extension("mtimes").exists(),
                objects,
                mtime,
                index,
            })
        })
        .collect();
    packs.sort_by_key(|p| (p.objects, p.mtime));
    packs
}

/// How long a rolled-up pack stays after its roll-up: a request that started before it (here or
/// in another replica) may still look objects up in it through a snapshot of the pack list.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Where the roll-up of the pack indexed by `index` is noted: `objects/gixd-rolled/<pack name>`,
/// its modification time the roll-up's. Outside the pack directory, where git would count an
/// unknown file as garbage.
fn rolled_marker(index: &Path) -> PathBuf {
    let objects_dir = index.parent().and_then(Path::parent).unwrap_or(Path::new("."));
    objects_dir.join("gixd-rolled").join(index.file_name().unwrap_or_default())
}

/// Note that the pack indexed by `index` went into another (its roll-up, or a full run's pack):
/// it leaves the geometry now and goes [`GRACE`] later ([`expire_rolled`]). Its bitmap goes at
/// once, so that no new request picks it over the new pack's (one that read it holds it).
/// `drops`: the full run that replaced it left some of its objects out (expired, unreachable);
/// its pack (the index named) holds everything it reached.
pub(super) fn mark_rolled(index: &Path, drops: Option<&Path>) -> std::io::Result<()> {
    let marker = rolled_marker(index);
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let note = match drops.and_then(Path::file_name) {
        Some(main) => format!("drops {}\n", main.to_string_lossy()),
        None => String::new(),
    };
    std::fs::write(&marker, note)?;
    let _ = std::fs::remove_file(index.with_extension("bitmap"));
    Ok(())
}

/// Whether the pack indexed by `index` is noted as rolled up.
pub(super) fn is_rolled(index: &Path) -> bool {
    rolled_marker(index).exists()
}

/// The pack indexed by `index` is a pack of the repository again ([`super::prune::rescue`]).
pub(super) fn unroll(index: &Path) {
    let _ = std::fs::remove_file(rolled_marker(index));
}

/// Rolled packs a full run replaced with drops: each one's index, and the run's pack (its index)
/// that holds everything the run reached.
pub type Dropping = [(PathBuf, Option<PathBuf>)];

/// Remove the packs rolled up more than `grace` ago ([`GRACE`]; the index first: readers find
/// packs by it), and the notes of packs gone otherwise (a full repack, git's gc). Packs a full run
/// replaced with drops go only after `rescue` (the prune rule's, [`super::expire_rolled`]) kept
/// those whose objects something live needs again. Run under the maintenance lock. Returns how
/// many packs went.
pub fn expire_rolled(
    objects_dir: &Path,
    grace: std::time::Duration,
    rescue: &dyn Fn(&Path, &Dropping) -> usize,
) -> usize {
    let dir = objects_dir.join("gixd-rolled");
    let mut due = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let index = objects_dir.join("pack").join(entry.file_name());
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if !index.exists() {
            let _ = std::fs::remove_file(entry.path());
        } else if age.is_some_and(|age| age >= grace) {
            let note = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let drops = note.trim().strip_prefix("drops ").map(|main| objects_dir.join("pack").join(main));
            due.push((index, drops));
        }
    }
    let dropping: Vec<(PathBuf, Option<PathBuf>)> = due.iter().filter(|(_, drops)| drops.is_some()).cloned().collect();
    if !dropping.is_empty() {
        rescue(objects_dir, &dropping);
    }
    let mut removed = 0;
    for (index, _) in due {
        if !is_rolled(&index) {
            continue; // rescued
        }
        for ext in ["idx", "pack", "rev", "bitmap", "keep", "mtimes"] {
            let _ = std::fs::remove_file(index.with_extension(ext));
        }
        let _ = std::fs::remove_file(rolled_marker(&index));
        removed += 1;
    }
    let _ = std::fs::remove_dir(&dir); // only if empty
    removed
}

/// The object count of a version-2 pack index, from its fan-out table's last entry (an index
/// that does not read so is left out: maintenance does not touch what it cannot read).
fn index_object_count(index: &Path) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(index).ok()?;
    let mut header = [0u8; 8];
    file.read_exact(&mut header).ok()?;
    if header != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
        return None;
    }
    file.seek(SeekFrom::Start(8 + 255 * 4)).ok()?;
    let mut last = [0u8; 4];
    file.read_exact(&mut last).ok()?;
    Some(u64::from(u32::from_be_bytes(last)))
}

/// How many of `sizes` (ascending) git's geometric repack rolls into one pack, `extra` (loose
/// objects) counted in: the smallest ones that break the progression by `FACTOR`, then as many
/// larger ones as the new pack would break it with. 0 or 1 and no loose objects: nothing to do.
pub fn split(sizes: &[u64], extra: u64) -> usize {
    // From the top: the first pair (going down) that is not in progression marks the split.
    let mut i = sizes.len().saturating_sub(1);
    while i > 0 {
        if sizes[i] < FACTOR.saturating_mul(sizes[i - 1]) {
            break;
        }
        i -= 1;
    }
    let mut split = if i > 0 { i + 1 } else { 0 };
    // The rolled-up pack may be too big for the packs above it: they join it.
    let mut total: u64 = sizes[..split].iter().sum::<u64>() + extra;
    while split < sizes.len() && sizes[split] < FACTOR.saturating_mul(total) {
        total += sizes[split];
        split += 1;
    }
    split
}

/// What a repository needs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    Nothing,
    /// Small packs (and loose objects) to roll up.
    Geometric,
    /// Objects a bitmap does not cover, enough to write one again: everything into one pack.
    Full,
}

/// What `git_dir` needs: a full repack (with its bitmap) when at least [`FULL_MIN_OBJECTS`] objects,
/// and as many as half of what the bitmap covers, are outside the bitmapped pack; else a geometric
/// roll-up when there are at least two packs (or loose objects with a pack) out of progression.
pub fn due(git_dir: &Path) -> Due {
    let objects_dir = git_dir.join("objects");
    let packs: Vec<PackInfo> = packs(&objects_dir.join("pack")).into_iter().filter(|p| !p.kept && !p.cruft).collect();
    let loose = super::loose_objects(&objects_dir).len() as u64;
    // A multi-pack-index naming a pack another repacker deleted: rewritten (or removed) by a run.
    if crate::repo::midx::names_a_missing_pack(git_dir) {
        return Due::Geometric;
    }
    let bitmapped: u64 = packs.iter().filter(|p| p.bitmap).map(|p| p.objects).sum();
    let outside: u64 = packs.iter().filter(|p| !p.bitmap).map(|p| p.objects).sum::<u64>() + loose;
    if outside >= FULL_MIN_OBJECTS && outside >= bitmapped / 2 {
        return Due::Full;
    }
    let sizes: Vec<u64> = packs.iter().map(|p| p.objects).collect();
    let rolled = split(&sizes, loose);
    if rolled + usize::from(loose > 0) >= 2 || loose >= LOOSE_MIN_OBJECTS { Due::Geometric } else { Due::Nothing }
}

/// Roll the small packs of `git_dir` (and its loose objects) into one pack, git's
/// `repack --geometric=2 -d`: every object of the rolled packs goes in, reachable or not (nothing
/// is lost); stored deltas are kept where their base goes in too, and the rest searched among the
/// rolled objects; a delta whose base stays in a pack not rolled is stored whole (a pack on disk
/// is never thin). The rolled packs are noted once the new one is in place and removed by a run
/// [`GRACE`] later ([`expire_rolled`]). `None`: nothing to roll.
pub fn run(git_dir: &Path) -> Result<Option<Report>, MaintenanceError> {
    super::rerun::while_packs_change(&git_dir.join("objects/pack"), || run_once(git_dir))
}

fn run_once(git_dir: &Path) -> Result<Option<Report>, MaintenanceError> {
    let repo = super::open(git_dir)?;
    let hash = repo.object_hash();
    let objects_dir = repo.objects.store_ref().path().to_owned();
    let pack_dir = objects_dir.join("pack");
    let _lock = super::Lock::take(&objects_dir)?;
    let leftovers_removed = super::remove_leftovers(&objects_dir, &pack_dir);
    super::expire_rolled(&objects_dir, GRACE);
    // What another repacker left stale goes first (a roll below writes a new one).
    if crate::repo::midx::names_a_missing_pack(git_dir) {
        super::midx::remove(&pack_dir, None);
    }

    let present: Vec<PackInfo> = packs(&pack_dir).into_iter().filter(|p| !p.kept && !p.cruft).collect();
    let loose = super::loose_objects(&objects_dir);
    let sizes: Vec<u64> = present.iter().map(|p| p.objects).collect();
    let mut rolled: Vec<&PackInfo> = present[..split(&sizes, loose.len() as u64)].iter().collect();
    if rolled.len() + usize::from(!loose.is_empty()) < 2 && (loose.len() as u64) < LOOSE_MIN_OBJECTS {
        return Ok(None);
    }
    // Newest first: a delta's base came with it or before it, and the newest history is what
    // fetches ask for.
    rolled.sort_by_key(|p| std::cmp::Reverse(p.mtime));
    // What a pack that stays holds is not copied (git's `--stdin-packs` excludes it too): a
    // push's thin bases, stored whole, are in the big pack already. The packs then hold each
    // object once, and a multi-pack-index over them can prefer the big pack.
    let staying: Vec<gix_pack::index::File> = present
        .iter()
        .filter(|p| !rolled.iter().any(|r| r.index == p.index))
        .map(|p| gix_pack::index::File::at(&p.index, hash).map_err(MaintenanceError::pack))
        .collect::<Result<_, _>>()?;
    let stays = |id: &ObjectId| staying.iter().any(|index| index.lookup(id).is_some());
    let mut seen: gix::hashtable::HashSet<ObjectId> = Default::default();
    let mut objects = Vec::new();
    for pack in &rolled {
        let index = gix_pack::index::File::at(&pack.index, hash).map_err(MaintenanceError::pack)?;
        let mut entries: Vec<(u64, ObjectId)> = index.iter().map(|e| (e.pack_offset, e.oid)).collect();
        entries.sort_unstable();
        objects.extend(entries.into_iter().map(|(_, id)| id).filter(|id| !stays(id) && seen.insert(*id)));
    }
    objects.extend(loose.iter().copied().filter(|id| seen.insert(*id)));
    let selection = crate::select::Selection { objects, ..Default::default() };

    let scratch = objects_dir.join(format!("gixd-maintenance-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = super::write_pack(&repo, &selection, &scratch, &pack_dir, &pack_dir, hash, super::Bases::StoreWhole);
    let _ = std::fs::remove_dir_all(&scratch);
    let (index_path, data_path, deltas_computed) = result?;
    let index = gix_pack::index::File::at(&index_path, hash).map_err(MaintenanceError::pack)?;
    let mut report = Report {
        objects: selection.objects.len(),
        pack: data_path,
        leftovers_removed,
        deltas_computed,
        ..Report::default()
    };
    // The rolled packs are noted, not removed: requests that started before (here or in another
    // replica) may still read them; a later run removes them after [`GRACE`]. Their objects are
    // in the new pack, so every lookup finds one copy or the other meanwhile.
    for pack in &rolled {
        let Ok(old) = gix_pack::index::File::at(&pack.index, hash) else { continue };
        if old.iter().all(|e| index.lookup(e.oid).is_some() || stays(&e.oid)) {
            mark_rolled(&pack.index, None)?;
            report.packs_removed += 1;
        }
    }
    super::remove_loose(&objects_dir, |id| index.lookup(id).is_some(), &mut report)?;
    // Rolled into one pack with everything: it can carry the bitmap, as a full run's does (and
    // a MIDX would name packs about to go). Else a MIDX over what stays, with its bitmap.
    let geometry = packs(&pack_dir);
    // A cruft pack beside it changes nothing: no ref reaches what it holds.
    if geometry.iter().filter(|p| !p.cruft).all(|p| p.index == index_path) {
        super::midx::remove(&pack_dir, None);
        let refs = crate::repo::RefSnapshot::load_hiding_nothing(&repo)?;
        let order = crate::bitmap::write::pack_order(&index);
        crate::bitmap::write::write_rev(&index_path.with_extension("rev"), &index, &order, hash)?;
        match crate::bitmap::write::write_bitmap(
            &repo,
            &index,
            &order,
            &refs.tips(),
            None,
            &index_path.with_extension("bitmap"),
            hash,
        ) {
            Ok(written) => report.bitmaps = written.commits,
            // An object reachable from a ref is not in it (written loose meanwhile): no bitmap.
            Err(err) => tracing::info!(repo = %git_dir.display(), %err, "rolled-up pack left without a bitmap"),
        }
    } else if let Some(big) = geometry.iter().max_by_key(|p| p.objects) {
        let refs = crate::repo::RefSnapshot::load_hiding_nothing(&repo)?;
        let indexes = geometry.iter().map(|p| p.index.clone()).collect();
        report.bitmaps = super::midx::write(&repo, &pack_dir, indexes, &big.index, &refs.tips())?;
        // Stock git repacked (or started to) meanwhile: it read the pack directory before this
        // MIDX was in place, and deletes packs it names without removing it (git removes a MIDX
        // only if its own view of it names the pack). Without a MIDX nothing can go stale; the
        // next run writes one.
        if crate::repo::midx::names_a_missing_pack(git_dir) || super::git_repacking(git_dir) {
            super::midx::remove(&pack_dir, None);
            report.bitmaps = 0;
        }
    }
    Ok(Some(report))
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn the_split_rolls_what_breaks_the_progression_and_what_the_new_pack_would_break() {
        // In progression already: nothing.
        assert_eq!(split(&[10, 25, 100], 0), 0);
        // One pack: nothing to roll it with.
        assert_eq!(split(&[100], 0), 0);
        // Two pushes of 50 beside a big pack: the two roll into 100, below half of 1000.
        assert_eq!(split(&[50, 50, 1000], 0), 2);
        // Three pushes: 50+50 breaks, the 100 they make is not half of 120: it joins.
        assert_eq!(split(&[50, 50, 120, 1000], 0), 3);
        // Forty pushes of 50 beside 20 000: all forty roll, the big one stays.
        let mut sizes = vec![50; 40];
        sizes.push(20_000);
        assert_eq!(split(&sizes, 0), 40);
        // Loose objects weigh on the new pack.
        assert_eq!(split(&[30, 100], 60), 2);
        assert_eq!(split(&[30, 1000], 0), 0);
    }
}
