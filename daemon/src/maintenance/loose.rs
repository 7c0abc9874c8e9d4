//! Loose objects: where each is, which there are, and their removal once a pack holds them (a
//! loose object goes only when the pack that holds it is in place).

use super::*;

/// Where the loose object `id` of `objects_dir` is (or would be).
pub(super) fn loose_path(objects_dir: &Path, id: &gix_hash::oid) -> PathBuf {
    let hex = id.to_hex().to_string();
    objects_dir.join(&hex[..2]).join(&hex[2..])
}

/// The loose objects of `objects_dir`, by their file names.
pub(super) fn loose_objects(objects_dir: &Path) -> Vec<ObjectId> {
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
pub(super) fn retire_contained(
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
pub(super) fn remove_loose(
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
