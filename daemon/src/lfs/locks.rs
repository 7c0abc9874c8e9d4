//! Git LFS file locks of one repository, one file per locked path in `<git dir>/lfs/locks/`,
//! named by the sha256 of the path: a lock is made by creating its file (`O_EXCL`), so of two
//! processes locking one path at once on one filesystem exactly one wins; an unlock removes it.
//! The file is written aside and linked in, so a reader never sees half a lock.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// One lock, as the locks API shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lock {
    pub id: String,
    pub path: String,
    /// RFC 3339, UTC.
    pub locked_at: String,
    pub owner: Owner,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Owner {
    pub name: String,
}

/// What creating a lock found.
#[derive(Debug)]
pub enum Created {
    Made(Lock),
    /// The path is locked already: by this lock.
    Exists(Lock),
}

/// The locks of the repository at a git directory.
pub struct Locks {
    dir: PathBuf,
}

/// The id of the lock of `path`: its sha256, hex.
fn id_of(path: &str) -> String {
    crate::auth::sha256_hex(path.as_bytes())
}

fn is_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Locks {
    pub fn of(git_dir: &Path) -> Locks {
        Locks { dir: git_dir.join("lfs").join("locks") }
    }

    /// Lock `path` for `owner`, unless it is locked already.
    pub fn create(&self, path: &str, owner: &str, now_secs: i64) -> io::Result<Created> {
        let lock = Lock {
            id: id_of(path),
            path: path.to_owned(),
            locked_at: gix::date::Time::new(now_secs, 0).format_or_unix(gix::date::time::format::ISO8601_STRICT),
            owner: Owner { name: owner.to_owned() },
        };
        std::fs::create_dir_all(&self.dir)?;
        let target = self.dir.join(&lock.id);
        // Written whole under a name of its own, then linked to the lock's name: the link is
        // the O_EXCL step (it fails if the name exists), and no reader sees a partial file.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = self.dir.join(format!(".{}.{}.{n}", lock.id, std::process::id()));
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(&serde_json::to_vec(&lock).expect("a lock serializes"))?;
        file.sync_all()?;
        drop(file);
        let linked = std::fs::hard_link(&temp, &target);
        let _ = std::fs::remove_file(&temp);
        match linked {
            Ok(()) => Ok(Created::Made(lock)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => match self.get(&lock.id)? {
                Some(held) => Ok(Created::Exists(held)),
                // Unlocked between the two steps: as if never there; try again.
                None => self.create(path, owner, now_secs),
            },
            Err(err) => Err(err),
        }
    }

    /// The lock with this id, if there is one.
    pub fn get(&self, id: &str) -> io::Result<Option<Lock>> {
        if !is_id(id) {
            return Ok(None);
        }
        match std::fs::read(self.dir.join(id)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(io::Error::other),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The lock of `path`, if it is locked.
    pub fn of_path(&self, path: &str) -> io::Result<Option<Lock>> {
        self.get(&id_of(path))
    }

    /// Every lock, by path.
    pub fn list(&self) -> io::Result<Vec<Lock>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut out = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            if let Some(lock) = name.to_str().filter(|n| is_id(n)).map(|n| self.get(n)).transpose()?.flatten() {
                out.push(lock);
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Remove the lock with this id; what it was, if it was there.
    pub fn remove(&self, id: &str) -> io::Result<Option<Lock>> {
        let Some(lock) = self.get(id)? else { return Ok(None) };
        match std::fs::remove_file(self.dir.join(id)) {
            Ok(()) => Ok(Some(lock)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_locked_once_and_unlocked_by_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let locks = Locks::of(dir.path());
        let Created::Made(lock) = locks.create("art/big.psd", "ann", 1_700_000_000).unwrap() else { panic!() };
        assert_eq!(lock.locked_at, "2023-11-14T22:13:20+00:00");
        let Created::Exists(held) = locks.create("art/big.psd", "bob", 1_700_000_001).unwrap() else { panic!() };
        assert_eq!(held, lock, "the first lock stands");
        assert_eq!(locks.list().unwrap(), std::slice::from_ref(&lock));
        assert_eq!(locks.of_path("art/big.psd").unwrap(), Some(lock.clone()));
        assert_eq!(locks.get("../../HEAD").unwrap(), None, "an id is a lock's name and nothing else");
        assert_eq!(locks.remove(&lock.id).unwrap(), Some(lock));
        assert!(locks.list().unwrap().is_empty());
    }

    /// Processes racing for one path: exactly one gets it (threads stand in for processes; the
    /// decision is the filesystem's link, which knows no difference).
    #[test]
    fn of_many_lockers_of_one_path_at_once_exactly_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let made: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|i| {
                    let path = dir.path().to_owned();
                    s.spawn(move || {
                        matches!(Locks::of(&path).create("a.bin", &format!("user{i}"), 0).unwrap(), Created::Made(_))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap() as usize).sum()
        });
        assert_eq!(made, 1);
    }
}
