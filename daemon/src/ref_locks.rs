//! Ref lock files a process notes while it holds them (repository access layer). git's lock
//! files (`<ref>.lock`, `packed-refs.lock`) outlive a process killed while it holds them, and
//! every later update of that ref fails until someone deletes them by hand. A push and a
//! maintenance run note theirs in a directory of their own ([`note`]), each with its device,
//! inode and change time. The owner of that directory knows when its process is gone (a push's
//! quarantine by pid and host, a maintenance scratch by the maintenance `flock`) and then calls
//! [`remove_noted`], which removes the files that are still the ones it took and leaves any lock
//! another writer made since.
//! Not covered: a kill inside gix-ref's prepare itself, before the note is written
//! (microseconds), and a power loss (the note is not synced); both leave the locks as git would.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// In the noting process's directory, while it holds ref locks: one line per lock file,
/// `dev ino ctime ctime_nsec path`.
const NOTE: &str = "ref-locks";
const NOTE_TMP: &str = "ref-locks.tmp";

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
}

/// Remove the lock files a process that is gone (the caller knows) noted in `dir`, where each
/// is still the file it took (same device, inode and change time). Returns how many were removed.
pub fn remove_noted(dir: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(dir.join(NOTE)) else { return 0 };
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
}
