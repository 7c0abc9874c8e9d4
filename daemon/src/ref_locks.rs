//! Ref lock files a process notes while it holds them (repository access layer). git's lock
//! files (`<ref>.lock`, `packed-refs.lock`) outlive a process killed while it holds them, and
//! every later update of that ref fails until someone deletes them by hand. A push and a
//! maintenance run note theirs in a directory of their own ([`note`]), each with its device,
//! inode and change time. The owner of that directory knows when its process is gone (a push's
//! quarantine by pid and host, a maintenance scratch by the maintenance `flock`) and then calls
//! [`remove_noted`], which removes the files that are still the ones it took and leaves any lock
//! another writer made since.
//! gix-ref writes (and syncs) each lock's content while it prepares, milliseconds before the
//! note can be written: the paths are noted as intended first ([`intend`]), and a lock made at
//! one of them shortly after is this transaction's. Not covered: a power loss (the notes are not
//! synced); it leaves the locks as git would.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// In the noting process's directory, while it holds ref locks: one line per lock file,
/// `dev ino ctime ctime_nsec path`.
const NOTE: &str = "ref-locks";
const NOTE_TMP: &str = "ref-locks.tmp";
/// In the noting process's directory, from just before it takes ref locks: a path per line.
const INTENT: &str = "ref-locks-intended";
const INTENT_TMP: &str = "ref-locks-intended.tmp";

/// Seconds after its intent was noted within which a lock made at an intended path is taken for
/// the transaction's own (gix-ref's prepare follows the intent at once).
const WRITTEN_WITHIN: i64 = 10;

/// The lock files a prepared gix-ref transaction over `names` holds: `<ref>.lock` for each, and
/// `packed-refs.lock` when it packs refs (`packing`: gix-ref locks it to create or rewrite
/// packed-refs) or when there is a `packed-refs` (locked to compare and to delete).
pub fn held_for(
    repo: &gix::Repository,
    names: impl IntoIterator<Item = impl AsRef<str>>,
    packing: bool,
) -> Vec<PathBuf> {
    let per_worktree =
        |name: &str| ["refs/worktree/", "refs/bisect/", "refs/rewritten/"].iter().any(|p| name.starts_with(p));
    let mut paths: Vec<_> = names
        .into_iter()
        .map(|name| {
            let name = name.as_ref();
            let base = if per_worktree(name) { repo.git_dir() } else { repo.common_dir() };
            base.join(format!("{name}.lock"))
        })
        .collect();
    if packing || repo.common_dir().join("packed-refs").is_file() {
        paths.push(repo.common_dir().join("packed-refs.lock"));
    }
    paths
}

/// Before a transaction takes its locks: note in `dir` the lock files it is about to take. gix-ref
/// writes (and syncs) each lock's content while it prepares, so a kill can land after a lock
/// exists and before [`note`] says whose it is; [`remove_noted`] then takes a lock at an intended
/// path that was made within [`WRITTEN_WITHIN`] of this intent for this transaction's.
pub fn intend(dir: &Path, paths: &[PathBuf]) {
    let text: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
    let (tmp, intent) = (dir.join(INTENT_TMP), dir.join(INTENT));
    if let Err(err) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &intent)) {
        tracing::warn!(dir = %dir.display(), %err, "could not note the ref locks about to be taken");
    }
}

/// Note in `dir` the lock files in `paths` that exist (the caller holds them). Best effort: an
/// update whose note could not be written goes on (a kill then leaves its locks, as git's would).
pub fn note(dir: &Path, paths: &[PathBuf]) {
    let mut text = String::new();
    for path in paths {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            text.push_str(&format!(
                "{} {} {} {} {}\n",
                meta.dev(),
                meta.ino(),
                meta.ctime(),
                meta.ctime_nsec(),
                path.display()
            ));
        }
    }
    let (tmp, noted) = (dir.join(NOTE_TMP), dir.join(NOTE));
    if let Err(err) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &noted)) {
        tracing::warn!(dir = %dir.display(), %err, "could not note the ref locks held");
    }
}

/// The transaction is over (committed or rolled back): its locks are gone, and so is the note.
pub fn forget(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(NOTE));
    let _ = std::fs::remove_file(dir.join(INTENT));
}

/// Remove the lock files a process that is gone (the caller knows) noted in `dir`, where each
/// is still the file it took (same device, inode and change time). Returns how many were removed.
pub fn remove_noted(dir: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(dir.join(NOTE)) else { return remove_intended(dir) };
    let mut removed = 0;
    for line in text.lines() {
        let mut fields = line.splitn(5, ' ');
        let mut number = || fields.next().and_then(|f| f.parse::<i64>().ok());
        let (Some(dev), Some(ino), Some(ctime), Some(nsec)) = (number(), number(), number(), number()) else {
            continue;
        };
        let Some(path) = fields.next().map(Path::new) else { continue };
        if !path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".lock")) {
            continue;
        }
        // The file it took: same device, inode and change time (gix-ref writes a lock's content
        // while it prepares, before the note; a lock made since at the same path may reuse the
        // inode number, not the change time).
        let same = std::fs::symlink_metadata(path).is_ok_and(|m| {
            m.dev() as i64 == dev && m.ino() as i64 == ino && m.ctime() == ctime && m.ctime_nsec() == nsec
        });
        if same && std::fs::remove_file(path).is_ok() {
            tracing::warn!(lock = %path.display(), "removed a ref lock a killed process held");
            removed += 1;
        }
    }
    removed
}

/// Killed while it took its locks, before it noted them: remove the intended lock files made
/// within [`WRITTEN_WITHIN`] after the intent was written (this transaction's; another writer's
/// lock there would have kept it from taking the lock, and git holds one for milliseconds).
fn remove_intended(dir: &Path) -> usize {
    let intent = dir.join(INTENT);
    let (Ok(text), Ok(meta)) = (std::fs::read_to_string(&intent), std::fs::metadata(&intent)) else { return 0 };
    let (since, since_nsec) = (meta.mtime(), meta.mtime_nsec());
    let mut removed = 0;
    for path in text.lines().map(Path::new) {
        if !path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".lock")) {
            continue;
        }
        let made_then = std::fs::symlink_metadata(path)
            .is_ok_and(|m| (m.ctime(), m.ctime_nsec()) >= (since, since_nsec) && m.ctime() <= since + WRITTEN_WITHIN);
        if made_then && std::fs::remove_file(path).is_ok() {
            tracing::warn!(lock = %path.display(), "removed a ref lock a process killed while taking it held");
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lock` taken and noted in a new directory in `tmp`.
    fn noted(tmp: &Path, lock: &Path) -> PathBuf {
        let dir = tempfile::tempdir_in(tmp).unwrap().keep();
        std::fs::write(lock, "").unwrap();
        note(&dir, &[lock.to_owned(), tmp.join("not-taken.lock")]);
        dir
    }

    #[test]
    fn a_noted_lock_is_removed_only_if_it_is_still_the_same_file() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = tmp.path().join("main.lock");

        let dir = noted(tmp.path(), &lock);
        std::fs::remove_file(&lock).unwrap();
        std::fs::write(&lock, "").unwrap();
        assert_eq!(remove_noted(&dir), 0);
        assert!(lock.is_file(), "a lock made since at the same path is someone else's: left");

        let dir = noted(tmp.path(), &lock);
        forget(&dir);
        assert_eq!(remove_noted(&dir), 0, "forgotten: the transaction ended");
        let dir = noted(tmp.path(), &lock);
        assert_eq!(remove_noted(&dir), 1);
        assert!(!lock.exists(), "the same file: removed");
    }

    #[test]
    fn a_lock_taken_after_its_intent_was_noted_and_before_the_note_is_removed_and_an_older_one_is_left() {
        let tmp = tempfile::tempdir().unwrap();
        let (ours, older) = (tmp.path().join("main.lock"), tmp.path().join("other.lock"));
        std::fs::write(&older, "").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let dir = tempfile::tempdir_in(tmp.path()).unwrap().keep();
        intend(&dir, &[ours.clone(), older.clone()]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&ours, "1111111111111111111111111111111111111111\n").unwrap();
        assert_eq!(remove_noted(&dir), 1, "killed inside prepare: the lock it was taking goes");
        assert!(!ours.exists());
        assert!(older.exists(), "a lock there before the intent is someone else's");
        intend(&dir, std::slice::from_ref(&ours));
        forget(&dir);
        std::fs::write(&ours, "").unwrap();
        assert_eq!(remove_noted(&dir), 0, "forgotten: the transaction ended");
    }
}
