//! Git LFS objects of one repository as files, in git-lfs's own layout
//! (`<git dir>/lfs/objects/aa/bb/<oid>`). An object is written once: streamed into a temporary
//! file of `lfs/incomplete/`, its size and sha256 checked against what it claims to be, made
//! durable, then renamed into place — a partial, wrong or interrupted upload leaves nothing a
//! reader can see, and memory stays one buffer whatever the object's size. A file in place is
//! never written again, so it may be mapped and sent as ranges of the file.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// An LFS object id: a sha256, 64 lowercase hex digits (nothing else reaches a path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Oid([u8; 64]);

impl Oid {
    /// `text` as an oid, if it is one.
    pub fn parse(text: &str) -> Option<Oid> {
        let bytes: [u8; 64] = text.as_bytes().try_into().ok()?;
        bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')).then_some(Oid(bytes))
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits")
    }
}

impl std::fmt::Display for Oid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an upload was not stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("the object is {got} bytes, not the {declared} declared")]
    Size { declared: u64, got: u64 },
    #[error("the object's sha256 is {got}, not its oid")]
    Hash { got: String },
    #[error("the object is larger than the {limit} bytes allowed")]
    TooLarge { limit: u64 },
    #[error("could not store the object: {0}")]
    Io(#[from] io::Error),
}

/// The LFS objects of the repository at a git directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    pub fn of(git_dir: &Path) -> Store {
        Store { root: git_dir.join("lfs") }
    }

    /// Where the object `oid` lies (or would).
    pub fn path(&self, oid: &Oid) -> PathBuf {
        let s = oid.as_str();
        self.root.join("objects").join(&s[0..2]).join(&s[2..4]).join(s)
    }

    /// The size of the object `oid`, if it is stored.
    pub fn size(&self, oid: &Oid) -> Option<u64> {
        std::fs::metadata(self.path(oid)).ok().filter(|m| m.is_file()).map(|m| m.len())
    }

    /// Bytes of every object stored (a walk of the object directories).
    pub fn total_bytes(&self) -> u64 {
        self.objects().map(|(_, size)| size).sum()
    }

    /// Every object stored, with its size (files whose name is not an oid are not objects).
    pub fn objects(&self) -> impl Iterator<Item = (Oid, u64)> + use<> {
        let dir = |p: &Path| std::fs::read_dir(p).into_iter().flatten().flatten();
        let objects = self.root.join("objects");
        dir(&objects)
            .flat_map(move |a| dir(&a.path()).collect::<Vec<_>>())
            .flat_map(move |b| dir(&b.path()).collect::<Vec<_>>())
            .filter_map(|f| {
                let oid = Oid::parse(f.file_name().to_str()?)?;
                let meta = f.metadata().ok().filter(|m| m.is_file())?;
                Some((oid, meta.len()))
            })
    }

    /// Start storing an object of `declared` bytes, at most `limit`.
    pub fn begin(&self, oid: Oid, declared: u64, limit: u64) -> Result<Upload, UploadError> {
        if declared > limit {
            return Err(UploadError::TooLarge { limit });
        }
        let dir = self.root.join("incomplete");
        std::fs::create_dir_all(&dir)?;
        let file = tempfile_in(&dir, oid.as_str())?;
        Ok(Upload {
            store: self.clone(),
            oid,
            declared,
            written: 0,
            hasher: gix_hash::hasher(gix_hash::Kind::Sha256),
            file: Some(file),
        })
    }
}

/// A new file of `dir` named after `stem` and a unique suffix, opened for writing (never an
/// existing one: two uploads of one object each write their own).
fn tempfile_in(dir: &Path, stem: &str) -> io::Result<(std::fs::File, PathBuf)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{stem}.{}.{n}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((file, path)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
}

/// An object being stored: written and hashed as it comes, checked at [`Upload::finish`]. Dropped
/// unfinished, its temporary file is removed.
pub struct Upload {
    store: Store,
    oid: Oid,
    declared: u64,
    written: u64,
    hasher: gix_hash::Hasher,
    file: Option<(std::fs::File, PathBuf)>,
}

impl Upload {
    /// Take the next bytes of the object. More than declared is refused at once.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), UploadError> {
        self.written += bytes.len() as u64;
        if self.written > self.declared {
            return Err(UploadError::Size { declared: self.declared, got: self.written });
        }
        self.hasher.update(bytes);
        let (file, _) = self.file.as_mut().expect("open until finished");
        file.write_all(bytes)?;
        Ok(())
    }

    /// Bytes taken so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Check the object and put it in place (durable before it is visible).
    pub fn finish(mut self) -> Result<(), UploadError> {
        if self.written != self.declared {
            return Err(UploadError::Size { declared: self.declared, got: self.written });
        }
        let hasher = std::mem::replace(&mut self.hasher, gix_hash::hasher(gix_hash::Kind::Sha256));
        let got = hasher.try_finalize().expect("no collision detection for sha256").to_hex().to_string();
        if got != self.oid.as_str() {
            return Err(UploadError::Hash { got });
        }
        let (file, temp) = self.file.take().expect("open until finished");
        file.sync_all()?;
        drop(file);
        let target = self.store.path(&self.oid);
        let dir = target.parent().expect("objects/aa/bb");
        let placed = std::fs::create_dir_all(dir).and_then(|()| std::fs::rename(&temp, &target));
        if let Err(err) = placed {
            let _ = std::fs::remove_file(&temp);
            return Err(err.into());
        }
        // The rename is durable with its directory.
        std::fs::File::open(dir).and_then(|d| d.sync_all())?;
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some((_, temp)) = self.file.take() {
            let _ = std::fs::remove_file(temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256(data: &[u8]) -> Oid {
        let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha256);
        hasher.update(data);
        Oid::parse(&hasher.try_finalize().unwrap().to_hex().to_string()).unwrap()
    }

    #[test]
    fn oids_are_64_lowercase_hex_digits_and_nothing_else() {
        let good = "a".repeat(64);
        assert!(Oid::parse(&good).is_some());
        for bad in ["", &"a".repeat(63), &"a".repeat(65), &"A".repeat(64), &format!("../{}", "a".repeat(61))] {
            assert!(Oid::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn an_object_is_visible_only_once_whole_and_right() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::of(dir.path());
        let data = b"hello lfs".repeat(1000);
        let oid = sha256(&data);

        // Cut short: nothing stored, nothing left behind.
        let mut up = store.begin(oid, data.len() as u64, u64::MAX).unwrap();
        up.write(&data[..100]).unwrap();
        assert!(matches!(up.finish(), Err(UploadError::Size { .. })));
        assert_eq!(store.size(&oid), None);
        // Wrong bytes of the right size.
        let mut up = store.begin(oid, data.len() as u64, u64::MAX).unwrap();
        up.write(&vec![0; data.len()]).unwrap();
        assert!(matches!(up.finish(), Err(UploadError::Hash { .. })));
        // More than declared is refused as it comes.
        let mut up = store.begin(oid, 10, u64::MAX).unwrap();
        assert!(matches!(up.write(&data), Err(UploadError::Size { .. })));
        drop(up);
        // Over the limit before a byte is written.
        assert!(matches!(store.begin(oid, 11, 10), Err(UploadError::TooLarge { limit: 10 })));
        assert_eq!(std::fs::read_dir(dir.path().join("lfs/incomplete")).unwrap().count(), 0, "no temporary file stays");

        let mut up = store.begin(oid, data.len() as u64, u64::MAX).unwrap();
        for chunk in data.chunks(777) {
            up.write(chunk).unwrap();
        }
        up.finish().unwrap();
        assert_eq!(store.size(&oid), Some(data.len() as u64));
        assert_eq!(std::fs::read(store.path(&oid)).unwrap(), data);
        assert!(store.path(&oid).ends_with(format!("{}/{}/{oid}", &oid.as_str()[..2], &oid.as_str()[2..4])));
        assert_eq!(store.objects().collect::<Vec<_>>(), [(oid, data.len() as u64)]);
    }
}
