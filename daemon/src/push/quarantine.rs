//! The quarantine: a directory inside the repository's `objects/` that no reader looks at, where
//! an incoming pack is indexed while it streams in. Its objects become visible only when
//! [`Quarantine::migrate`] moves the pack (then its index: readers find packs by their index)
//! into `objects/pack/`; dropping a quarantine removes it, and a quarantine left by a killed
//! process is removed by [`clean_stale`], with the ref lock files that push noted while it held
//! them ([`Quarantine::note_ref_locks`]).

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// Quarantine directories are named `gixd-quarantine-<pid>-<unique>`.
pub const PREFIX: &str = "gixd-quarantine-";
/// In a quarantine: the name of the host whose process the pid is (replicas may share a base
/// path over a network filesystem, and a pid says nothing about another host's processes).
const HOST: &str = "host";

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
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = objects_dir.join(format!("{PREFIX}{}-{nanos}-{n}", std::process::id()));
        if let Err(err) = std::fs::create_dir_all(dir.join("pack")) {
            let _ = std::fs::remove_dir_all(&dir); // the outer one may have been made
            return Err(err);
        }
        // Written whole or not at all (a kill between creating and writing would leave an
        // empty name, taken for another host's). Best effort (a full disk has room for a
        // directory, not always for a file): without it, a start judges the quarantine by its
        // pid alone, as before it had one.
        let tmp = dir.join(format!("{HOST}.tmp"));
        let _ = std::fs::write(&tmp, crate::repo::host_name()).and_then(|()| std::fs::rename(&tmp, dir.join(HOST)));
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
        if header.len() == 12
            && header.starts_with(b"PACK")
            && matches!(header[4..8], [0, 0, 0, 2 | 3])
            && header[8..12] == [0, 0, 0, 0]
        {
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

    /// The index of the pack received, if one was (not for a push of deletions only).
    pub fn index(&self) -> Option<&Path> {
        self.pack.as_ref().map(|(_, index)| index.as_path())
    }

    /// The quarantine's objects alone.
    /// Read through a delta cache that keeps every base a chain reconstructs: the objects of one
    /// push are read in pack order by the object check and walked by the connectivity check.
    pub fn odb(&self, hash: gix_hash::Kind) -> std::io::Result<gix_odb::Handle> {
        let mut odb = gix_odb::at(&self.dir, hash)?;
        odb.set_pack_cache(|| Box::new(gix_pack::cache::lru::MemoryCappedHashmap::new(16 << 20)));
        Ok(odb)
    }

    /// Note the ref lock files this push is about to take ([`crate::ref_locks::intend`]).
    pub fn intend_ref_locks(&self, paths: &[PathBuf]) {
        crate::ref_locks::intend(&self.dir, paths);
    }

    /// Note the ref lock files this push holds ([`crate::ref_locks::note`]), so that a start
    /// after this process was killed removes them with the quarantine.
    pub fn note_ref_locks(&self, paths: &[PathBuf]) {
        crate::ref_locks::note(&self.dir, paths);
    }

    /// The ref transaction is over: its locks are gone.
    pub fn forget_ref_locks(&self) {
        crate::ref_locks::forget(&self.dir);
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

/// Remove quarantines in `objects_dir` whose process is gone (killed mid-push), those made on
/// this host only.
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
        // An empty name says nothing (a gixd of 5c06bee killed while it wrote it).
        if std::fs::read_to_string(entry.path().join(HOST))
            .is_ok_and(|host| !host.is_empty() && host != crate::repo::host_name())
        {
            continue; // another host's push: whether it is alive cannot be told from here
        }
        crate::ref_locks::remove_noted(&entry.path());
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            tracing::warn!(dir = %entry.path().display(), "removed the quarantine of an interrupted push");
            removed += 1;
        }
    }
    removed
}

impl crate::repo::ref_store::LockNotes for Quarantine {
    fn intend(&self, paths: &[PathBuf]) {
        self.intend_ref_locks(paths);
    }

    fn note(&self, paths: &[PathBuf]) {
        self.note_ref_locks(paths);
    }

    fn forget(&self) {
        self.forget_ref_locks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quarantine of this process, renamed to look like one a process that is gone left,
    /// its host file saying `host`.
    fn left_by_a_dead_process(objects: &Path, host: &str) -> PathBuf {
        let quarantine = Quarantine::create(objects).unwrap();
        let lock = objects.join(format!("main-{host}.lock"));
        std::fs::write(&lock, "").unwrap();
        quarantine.note_ref_locks(&[lock]);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let left = objects.join(format!("{PREFIX}{dead}-0-{host}"));
        std::fs::rename(&quarantine.dir, &left).unwrap();
        std::fs::write(left.join(HOST), host).unwrap();
        left
    }

    #[test]
    fn a_dead_push_s_quarantine_is_removed_only_on_the_host_it_was_made_on() {
        let tmp = tempfile::tempdir().unwrap();
        let objects = tmp.path().join("objects");
        std::fs::create_dir_all(&objects).unwrap();
        let theirs = left_by_a_dead_process(&objects, "another-host");
        let ours = left_by_a_dead_process(&objects, &crate::repo::host_name());
        // Killed between making the file and writing the name (the fifty-kills test met it).
        let unnamed = left_by_a_dead_process(&objects, "");
        assert_eq!(clean_stale(&objects), 2);
        assert!(theirs.is_dir(), "another host's push may be alive there: its quarantine stays");
        assert!(objects.join("main-another-host.lock").is_file(), "and so does the ref lock it noted");
        assert!(!ours.exists(), "this host's, whose process is gone, is removed");
        assert!(
            !objects.join(format!("main-{}.lock", crate::repo::host_name())).exists(),
            "with the ref lock it noted"
        );
        assert!(!unnamed.exists(), "one whose host file is empty is judged by its pid");
    }
}
