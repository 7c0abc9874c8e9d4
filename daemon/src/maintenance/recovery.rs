//! What runs leave behind: packs a roll-up replaced, kept for a grace while readers finish
//! ([`expire`]), and what a killed run left half-done (scratch directories, temporary packs),
//! removed at the next run or at start ([`clean_after_kill`]).

use super::*;

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
pub(super) fn expire_rolled(objects_dir: &Path, grace: std::time::Duration) -> usize {
    geometric::expire_rolled(objects_dir, grace, &prune::rescue)
}

/// Remove what runs killed before they finished left: their scratch directories
/// (`objects/gixd-maintenance-<pid>`) and the ref locks noted there, the temporary files of
/// their pack and index (gix-tempfile's `.tmpXXXXXX` in the pack directory; git's repack writes
/// `.tmp-<pid>-pack-…`, left alone) and of their `.rev` and `.bitmap` (`pack-*.tmp`). Only
/// maintenance writes these names there (a push indexes inside its quarantine), and holding the
/// lock means no other run is alive. Returns how many were removed.
pub(super) fn remove_leftovers(objects_dir: &Path, pack_dir: &Path) -> usize {
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
