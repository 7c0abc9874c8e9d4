//! The quarantine: a directory inside the repository's `objects/` that no reader looks at, where
//! an incoming pack is indexed while it streams in. Its objects become visible only when
//! [`Quarantine::migrate`] moves the pack (then its index: readers find packs by their index)
//! into `objects/pack/`; dropping a quarantine removes it, and a quarantine left by a killed
//! process is removed by [`clean_stale`], with the ref lock files that push noted while it held
//! them ([`Quarantine::record_ref_locks`]).

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// Quarantine directories are named `gixd-quarantine-<pid>-<unique>`.
pub const PREFIX: &str = "gixd-quarantine-";
/// In a quarantine, while its push holds ref locks: `host <name>` (a process id says whether
/// the push is alive only on its own host; replicas may share the base path over a network
/// filesystem), then one line per lock file, `dev ino ctime ctime_nsec path`.
const REF_LOCKS: &str = "ref-locks";
const REF_LOCKS_TMP: &str = "ref-locks.tmp";

pub struct Quarantine {
    /// `objects/gixd-quarantine-…`: an object directory of its own (with `pack/` inside).
    pub dir: PathBuf,
    /// The received pack and its index, once [`Quarantine::receive`] succeeded with objects.
    pack: Option<(PathBuf, PathBuf)>,
    pub objects: u32,
}

impl Quarantine {
    pub fn create(objects_dir: &Path) -> std::io::Result<Quarantine> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = objects_dir.join(format!("{PREFIX}{}-{nanos}-{n}", std::process::id()));
        std::fs::create_dir_all(dir.join("pack"))?;
        Ok(Quarantine { dir, pack: None, objects: 0 })
    }

    /// Index `pack` as it streams in (one thread, verifying its checksum), completing a thin
    /// pack with bases from `main`. The error is for the client's `unpack` line.
    pub fn receive(
        &mut self,
        pack: &mut dyn BufRead,
        main: &gix::OdbHandle,
        hash: gix_hash::Kind,
        alloc_limit: usize,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        // gix-pack reads no further than the header of a pack of no objects: its trailer is
        // checked here (git's index-pack refuses an empty pack whose checksum is wrong).
        let mut header = Vec::with_capacity(12);
        (&mut *pack).take(12).read_to_end(&mut header)?;
        if header.len() == 12 && header.starts_with(b"PACK") && matches!(header[4..8], [0, 0, 0, 2 | 3]) && header[8..12] == [0, 0, 0, 0] {
            let mut trailer = vec![0; hash.len_in_bytes()];
            pack.read_exact(&mut trailer).map_err(|_| "the empty pack ends before its checksum")?;
            let mut hasher = gix_hash::hasher(hash);
            hasher.update(&header);
            if hasher.try_finalize()?.as_bytes() != trailer.as_slice() {
                return Err("pack checksum mismatch: the empty pack's trailer is not the hash of its header".into());
            }
            self.objects = 0;
            return Ok(());
        }
        let mut pack = std::io::Cursor::new(header).chain(pack);
        let outcome = gix_pack::Bundle::write_to_directory(
            &mut pack,
            Some(&self.dir.join("pack")),
            &mut gix_utils::progress::Discard,
            &AtomicBool::new(false),
            Some(main.clone()),
            hash,
            gix_pack::bundle::write::Options {
                thread_limit: Some(1),
                alloc_limit_bytes: Some(alloc_limit),
                ..Default::default()
            },
        )
        .map_err(|err| -> Box<dyn std::error::Error + Send + Sync> { Box::new(err) })?;
        self.objects = outcome.index.num_objects;
        if let Some(keep) = &outcome.keep_path {
            let _ = std::fs::remove_file(keep);
        }
        if let (Some(data), Some(index)) = (outcome.data_path, outcome.index_path) {
            self.pack = Some((data, index));
        }
        Ok(())
    }

    /// The quarantine's objects alone.
    pub fn odb(&self, hash: gix_hash::Kind) -> std::io::Result<gix_odb::Handle> {
        gix_odb::at(&self.dir, hash)
    }

    /// Note the ref lock files this push holds, each with its device, inode and change time, so
    /// that [`clean_stale`] can tell them from a lock another process took later. Best effort:
    /// a push whose note could not be written goes on (and a kill would leave its locks, as
    /// git's receive-pack leaves them).
    pub fn record_ref_locks(&self, paths: &[PathBuf]) {
        use std::os::unix::fs::MetadataExt;
        let mut text = format!("host {}\n", host_name());
        for path in paths {
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                text.push_str(&format!("{} {} {} {} {}\n", meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec(), path.display()));
            }
        }
        let (tmp, record) = (self.dir.join(REF_LOCKS_TMP), self.dir.join(REF_LOCKS));
        if let Err(err) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &record)) {
            tracing::warn!(dir = %self.dir.display(), %err, "could not note the push's ref locks");
        }
    }

    /// The ref transaction is over (committed or rolled back): its locks are gone, and so is the
    /// note of them.
    pub fn forget_ref_locks(&self) {
        let _ = std::fs::remove_file(self.dir.join(REF_LOCKS));
    }

    /// Make the objects visible: pack first, then index, into `objects/pack/` (a pack that is
    /// already there, from an earlier push of the same objects, stays as it is).
    pub fn migrate(&self, objects_dir: &Path) -> std::io::Result<()> {
        let Some((data, index)) = &self.pack else { return Ok(()) };
        let target = objects_dir.join("pack");
        for file in [data, index] {
            let dest = target.join(file.file_name().expect("a file name"));
            if !dest.exists() {
                std::fs::rename(file, &dest)?;
            }
        }
        Ok(())
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        if let Err(err) = std::fs::remove_dir_all(&self.dir)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), %err, "could not remove a quarantine");
        }
    }
}

/// Remove quarantines in `objects_dir` whose process is gone (killed mid-push).
pub fn clean_stale(objects_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(objects_dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
        let pid: Option<i32> = rest.split('-').next().and_then(|p| p.parse().ok());
        let alive = match pid {
            // SAFETY: kill with signal 0 only checks that the process exists.
            Some(pid) if pid as u32 != std::process::id() => unsafe { libc::kill(pid, 0) == 0 },
            Some(_) => true, // ours: in use by a push of this process
            None => false,
        };
        if alive {
            continue;
        }
        remove_recorded_locks(&entry.path());
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            tracing::warn!(dir = %entry.path().display(), "removed the quarantine of an interrupted push");
            removed += 1;
        }
    }
    removed
}

/// The ref locks a killed push noted in its quarantine `dir`, removed where the file is still the
/// one it took (same device, inode and change time): a lock another process took since is left.
fn remove_recorded_locks(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(text) = std::fs::read_to_string(dir.join(REF_LOCKS)) else { return };
    let mut lines = text.lines();
    if lines.next().and_then(|l| l.strip_prefix("host ")) != Some(host_name().as_str()) {
        tracing::warn!(dir = %dir.display(), "left the ref locks of a push from another host");
        return;
    }
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
            tracing::warn!(lock = %path.display(), "removed a ref lock of an interrupted push");
        }
    }
}

/// This machine's name (its UTS namespace's: each container has its own).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; the name is cut to it.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// At startup: every repository below `base` (a bounded walk) loses the quarantines of pushes
/// that a killed gixd left behind.
pub fn clean_below(base: &Path, max_depth: usize) -> usize {
    repositories_below(base, max_depth).iter().map(|dir| clean_stale(&dir.join("objects"))).sum()
}

/// The git directories below `base`, at most `max_depth` directories down.
pub fn repositories_below(base: &Path, max_depth: usize) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![(base.to_owned(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if dir.join("objects").is_dir() && dir.join("HEAD").is_file() {
            found.push(dir);
            continue;
        }
        if depth >= max_depth {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quarantine left by a process that is gone, holding `lock` as noted by its push, its
    /// note's host line replaced by `host` when given.
    fn killed_push_holding(objects: &Path, lock: &Path, host: Option<&str>) -> PathBuf {
        std::fs::write(lock, "").unwrap();
        let quarantine = Quarantine::create(objects).unwrap();
        quarantine.record_ref_locks(&[lock.to_owned()]);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let left = objects.join(format!("{PREFIX}{dead}-0-0"));
        std::fs::rename(&quarantine.dir, &left).unwrap();
        if let Some(host) = host {
            let record = left.join(REF_LOCKS);
            let text = std::fs::read_to_string(&record).unwrap();
            let rest = text.split_once('\n').unwrap().1;
            std::fs::write(&record, format!("host {host}\n{rest}")).unwrap();
        }
        left
    }

    #[test]
    fn a_killed_push_s_ref_lock_is_removed_only_on_the_host_that_took_it() {
        let tmp = tempfile::tempdir().unwrap();
        let objects = tmp.path().join("objects");
        std::fs::create_dir_all(&objects).unwrap();
        let lock = tmp.path().join("main.lock");

        let left = killed_push_holding(&objects, &lock, Some("another-host"));
        assert_eq!(clean_stale(&objects), 1);
        assert!(!left.exists(), "the quarantine goes");
        assert!(lock.is_file(), "a lock noted on another host stays: its push may be alive there");

        std::fs::remove_file(&lock).unwrap();
        let left = killed_push_holding(&objects, &lock, None);
        assert_eq!(clean_stale(&objects), 1);
        assert!(!left.exists() && !lock.exists(), "noted on this host, by a process that is gone: removed");
    }
}
