//! Ref lock files a process notes while it holds them (repository access layer). git's lock
//! files (`<ref>.lock`, `packed-refs.lock`) outlive a process killed while it holds them, and
//! every later update of that ref fails until someone deletes them by hand. A push and a
//! maintenance run note theirs in a directory of their own ([`note`]), each with its device,
//! inode and change time; once that process is known to be gone, [`remove_noted`] removes the
//! files that are still the ones it took, and leaves any lock another writer made since.
//! Not covered: a kill inside gix-ref's prepare itself, before the note is written
//! (microseconds), and a power loss (the note is not synced); both leave the locks as git would.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// In the noting process's directory, while it holds ref locks: `host <name>`, then one line
/// per lock file, `dev ino ctime ctime_nsec path`.
const NOTE: &str = "ref-locks";
const NOTE_TMP: &str = "ref-locks.tmp";

/// The lock files a prepared gix-ref transaction over `names` holds: `<ref>.lock` for each, and
/// `packed-refs.lock` when it packs refs (`packing`: gix-ref locks it to create or rewrite
/// packed-refs) or when there is a `packed-refs` (locked to compare and to delete).
pub fn held_for(repo: &gix::Repository, names: impl IntoIterator<Item = impl AsRef<str>>, packing: bool) -> Vec<PathBuf> {
    let per_worktree = |name: &str| ["refs/worktree/", "refs/bisect/", "refs/rewritten/"].iter().any(|p| name.starts_with(p));
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
    let mut text = format!("host {}\n", host_name());
    for path in paths {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            text.push_str(&format!("{} {} {} {} {}\n", meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec(), path.display()));
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

/// How a caller knows the noting process is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// By its process id, which says so only on the host that noted (replicas may share the
    /// base path over a network filesystem): a note from another host is left.
    OnThisHost,
    /// By a lock that only a live process holds (maintenance's `flock`): wherever it ran.
    Anywhere,
}

/// Remove the lock files a process that is gone noted in `dir`, where each is still the file it
/// took (same device, inode and change time). Returns how many were removed.
pub fn remove_noted(dir: &Path, gone: Gone) -> usize {
    let Ok(text) = std::fs::read_to_string(dir.join(NOTE)) else { return 0 };
    let mut lines = text.lines();
    let same_host = lines.next().and_then(|l| l.strip_prefix("host ")) == Some(host_name().as_str());
    if gone == Gone::OnThisHost && !same_host {
        tracing::warn!(dir = %dir.display(), "left the ref locks noted on another host");
        return 0;
    }
    let mut removed = 0;
    for line in lines {
        let mut fields = line.splitn(5, ' ');
        let mut number = || fields.next().and_then(|f| f.parse::<i64>().ok());
        let (Some(dev), Some(ino), Some(ctime), Some(nsec)) = (number(), number(), number(), number()) else { continue };
        let Some(path) = fields.next().map(Path::new) else { continue };
        if !path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".lock")) {
            continue;
        }
        let same = std::fs::symlink_metadata(path)
            .is_ok_and(|m| m.dev() as i64 == dev && m.ino() as i64 == ino && m.ctime() == ctime && m.ctime_nsec() == nsec);
        if same && std::fs::remove_file(path).is_ok() {
            tracing::warn!(lock = %path.display(), "removed a ref lock a killed process held");
            removed += 1;
        }
    }
    removed
}

/// This machine's name (its UTS namespace's: each container has its own).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; the name is cut to it.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lock` taken and noted in a new directory in `tmp`, the note's host line replaced by
    /// `host` when given.
    fn noted(tmp: &Path, lock: &Path, host: Option<&str>) -> PathBuf {
        let dir = tempfile::tempdir_in(tmp).unwrap().keep();
        std::fs::write(lock, "").unwrap();
        note(&dir, &[lock.to_owned(), tmp.join("not-taken.lock")]);
        if let Some(host) = host {
            let text = std::fs::read_to_string(dir.join(NOTE)).unwrap();
            let rest = text.split_once('\n').unwrap().1;
            std::fs::write(dir.join(NOTE), format!("host {host}\n{rest}")).unwrap();
        }
        dir
    }

    #[test]
    fn a_noted_lock_is_removed_only_where_its_holder_is_known_gone_and_only_if_it_is_the_same_file() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = tmp.path().join("main.lock");

        let dir = noted(tmp.path(), &lock, Some("another-host"));
        assert_eq!(remove_noted(&dir, Gone::OnThisHost), 0);
        assert!(lock.is_file(), "noted on another host, whose process ids say nothing here: left");
        assert_eq!(remove_noted(&dir, Gone::Anywhere), 1, "known gone by other means: removed");
        assert!(!lock.exists());

        let dir = noted(tmp.path(), &lock, None);
        std::fs::remove_file(&lock).unwrap();
        std::fs::write(&lock, "").unwrap();
        assert_eq!(remove_noted(&dir, Gone::OnThisHost), 0);
        assert!(lock.is_file(), "a lock made since at the same path is someone else's: left");

        let dir = noted(tmp.path(), &lock, None);
        forget(&dir);
        assert_eq!(remove_noted(&dir, Gone::OnThisHost), 0, "forgotten: the transaction ended");
        let dir = noted(tmp.path(), &lock, None);
        assert_eq!(remove_noted(&dir, Gone::OnThisHost), 1);
        assert!(!lock.exists(), "noted on this host, the same file: removed");
    }
}
