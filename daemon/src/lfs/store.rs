//! Git LFS objects of one repository, as files in git-lfs's own layout
//! (`<git dir>/lfs/objects/aa/bb/<oid>`) or, on a server configured with a bucket, as objects
//! of an S3-compatible server ([`super::s3`]) below `<prefix><repository>/lfs/objects/`. An
//! object is written once and checked before anyone can see it: to a file, streamed into a
//! temporary file of `lfs/incomplete/`, its size and sha256 checked, made durable, then renamed
//! into place; to a bucket, sent in parts of a multipart upload ([`PART_BYTES`] held at a time)
//! that is completed only once the size and hash are right, and aborted otherwise. A partial,
//! wrong or interrupted upload leaves nothing a reader can see, and memory stays bounded whatever
//! the object's size. A file in place is never written again, so it may be mapped and sent as
//! ranges of the file.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::s3::{self, Bucket, S3Error};

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

/// Bytes of an upload to a bucket held before they go up as one part (S3 wants parts of at
/// least 5 MiB but the last; at most 10 000 of them: 80 GB an object).
pub const PART_BYTES: usize = 8 << 20;

/// Where a server keeps LFS objects: in each repository's `lfs/`, or in one bucket.
#[derive(Debug, Clone)]
pub enum Backend {
    Files,
    /// Keys name the repository by its git directory below `base`.
    S3 {
        bucket: Arc<Bucket>,
        base: PathBuf,
    },
}

impl Backend {
    /// The backend `lfs` configures, for repositories below `base`.
    pub fn new(lfs: &crate::config::Lfs, base: &Path) -> Result<Backend, S3Error> {
        match lfs.s3.bucket {
            None => Ok(Backend::Files),
            Some(_) => Ok(Backend::S3 { bucket: Arc::new(Bucket::new(&lfs.s3)?), base: base.to_owned() }),
        }
    }

    /// The LFS objects of the repository at `git_dir`.
    pub fn store(&self, git_dir: &Path) -> Store {
        match self {
            Backend::Files => Store::of(git_dir),
            Backend::S3 { bucket, base } => {
                let name = match git_dir.strip_prefix(base) {
                    Ok(below) if !below.as_os_str().is_empty() => below.to_string_lossy().into_owned(),
                    _ => git_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                };
                let keys = format!("{}{}/lfs/objects/", bucket.prefix, name.trim_matches('/'));
                Store::S3 { bucket: bucket.clone(), keys }
            }
        }
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
    #[error("could not store the object: {0}")]
    S3(#[from] S3Error),
}

/// The LFS objects of one repository.
#[derive(Debug, Clone)]
pub enum Store {
    /// Files below this directory (`<git dir>/lfs`).
    Files { root: PathBuf },
    /// Objects of `bucket` whose keys are `keys` and the oid's path (`…/lfs/objects/aa/bb/<oid>`).
    S3 { bucket: Arc<Bucket>, keys: String },
}

/// Where an object's bytes are read from.
pub enum Located {
    File(PathBuf),
    Remote { bucket: Arc<Bucket>, key: String },
}

/// `oid`'s path below an objects directory: `aa/bb/<oid>`.
fn fanned(oid: &Oid) -> String {
    let s = oid.as_str();
    format!("{}/{}/{s}", &s[0..2], &s[2..4])
}

impl Store {
    /// The objects of the repository at `git_dir`, as files of its `lfs/`.
    pub fn of(git_dir: &Path) -> Store {
        Store::Files { root: git_dir.join("lfs") }
    }

    /// Where the object `oid` lies (or would).
    pub fn locate(&self, oid: &Oid) -> Located {
        match self {
            Store::Files { root } => Located::File(root.join("objects").join(fanned(oid))),
            Store::S3 { bucket, keys } => {
                Located::Remote { bucket: bucket.clone(), key: format!("{keys}{}", fanned(oid)) }
            }
        }
    }

    /// The size of the object `oid`, if it is stored (a bucket that cannot be asked: logged,
    /// and taken as not stored).
    pub fn size(&self, oid: &Oid) -> Option<u64> {
        match self.locate(oid) {
            Located::File(path) => std::fs::metadata(path).ok().filter(|m| m.is_file()).map(|m| m.len()),
            Located::Remote { bucket, key } => s3::block_on(bucket.head(&key)).unwrap_or_else(|err| {
                tracing::warn!(%err, key, "LFS object storage");
                None
            }),
        }
    }

    /// Bytes of every object stored (a walk of the object directories, or a listing).
    pub fn total_bytes(&self) -> u64 {
        self.objects().into_iter().map(|(_, size)| size).sum()
    }

    /// Every object stored, with its size (files whose name is not an oid are not objects; a
    /// bucket that cannot be listed: logged, and nothing).
    pub fn objects(&self) -> Vec<(Oid, u64)> {
        match self {
            Store::Files { root } => {
                let dir = |p: &Path| std::fs::read_dir(p).into_iter().flatten().flatten();
                dir(&root.join("objects"))
                    .flat_map(|a| dir(&a.path()).collect::<Vec<_>>())
                    .flat_map(|b| dir(&b.path()).collect::<Vec<_>>())
                    .filter_map(|f| {
                        let oid = Oid::parse(f.file_name().to_str()?)?;
                        let meta = f.metadata().ok().filter(|m| m.is_file())?;
                        Some((oid, meta.len()))
                    })
                    .collect()
            }
            Store::S3 { bucket, keys } => match s3::block_on(bucket.list(keys)) {
                Ok(listed) => listed
                    .into_iter()
                    .filter_map(|(key, size)| Some((Oid::parse(key.rsplit('/').next()?)?, size)))
                    .collect(),
                Err(err) => {
                    tracing::warn!(%err, keys, "LFS object storage");
                    Vec::new()
                }
            },
        }
    }

    /// Start storing an object of `declared` bytes, at most `limit`.
    pub fn begin(&self, oid: Oid, declared: u64, limit: u64) -> Result<Upload, UploadError> {
        if declared > limit {
            return Err(UploadError::TooLarge { limit });
        }
        let sink = match self {
            Store::Files { root } => {
                let dir = root.join("incomplete");
                std::fs::create_dir_all(&dir)?;
                Sink::File(Some(tempfile_in(&dir, oid.as_str())?))
            }
            Store::S3 { bucket, keys } => Sink::S3(Parts {
                bucket: bucket.clone(),
                key: format!("{keys}{}", fanned(&oid)),
                buf: Vec::new(),
                id: None,
                etags: Vec::new(),
            }),
        };
        Ok(Upload {
            store: self.clone(),
            oid,
            declared,
            written: 0,
            hasher: gix_hash::hasher(gix_hash::Kind::Sha256),
            sink,
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

/// Where an upload's bytes go while it is checked.
enum Sink {
    /// The temporary file and its path (taken when it is put in place).
    File(Option<(std::fs::File, PathBuf)>),
    S3(Parts),
}

/// A multipart upload to a bucket, started at its first full part.
struct Parts {
    bucket: Arc<Bucket>,
    key: String,
    /// Bytes not sent yet (less than a part, but for a moment).
    buf: Vec<u8>,
    /// The upload's id, once started; taken when it is completed or aborted.
    id: Option<String>,
    etags: Vec<String>,
}

impl Parts {
    /// Send what is held as the next part (starting the upload at the first).
    fn send_part(&mut self) -> Result<(), S3Error> {
        let id = match &self.id {
            Some(id) => id.clone(),
            None => {
                let id = s3::block_on(self.bucket.create_multipart(&self.key))?;
                self.id = Some(id.clone());
                id
            }
        };
        let part = bytes::Bytes::from(std::mem::take(&mut self.buf));
        let number = u16::try_from(self.etags.len() + 1).map_err(|_| S3Error::Settings("over 65 535 parts".into()))?;
        let etag = s3::block_on(self.bucket.upload_part(&self.key, &id, number, part))?;
        self.etags.push(etag);
        Ok(())
    }

    /// Make the object visible: one request for an object of less than a part, else the last
    /// part and the completion.
    fn finish(&mut self) -> Result<(), S3Error> {
        if self.id.is_none() {
            return s3::block_on(self.bucket.put(&self.key, std::mem::take(&mut self.buf).into()));
        }
        if !self.buf.is_empty() {
            self.send_part()?;
        }
        let id = self.id.take().expect("started");
        match s3::block_on(self.bucket.complete(&self.key, &id, &self.etags)) {
            Ok(()) => Ok(()),
            Err(err) => {
                self.id = Some(id);
                Err(err)
            }
        }
    }
}

impl Drop for Parts {
    /// An upload not completed is aborted: its parts are dropped (and no longer paid for).
    fn drop(&mut self) {
        if let Some(id) = self.id.take()
            && let Err(err) = s3::block_on(self.bucket.abort(&self.key, &id))
        {
            tracing::warn!(%err, key = self.key, "an abandoned LFS upload's parts stay in the bucket");
        }
    }
}

/// An object being stored: written and hashed as it comes, checked at [`Upload::finish`]. Dropped
/// unfinished, its temporary file is removed (its multipart upload aborted).
pub struct Upload {
    store: Store,
    oid: Oid,
    declared: u64,
    written: u64,
    hasher: gix_hash::Hasher,
    sink: Sink,
}

impl Upload {
    /// Take the next bytes of the object. More than declared is refused at once.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), UploadError> {
        self.written += bytes.len() as u64;
        if self.written > self.declared {
            return Err(UploadError::Size { declared: self.declared, got: self.written });
        }
        self.hasher.update(bytes);
        match &mut self.sink {
            Sink::File(file) => file.as_mut().expect("open until finished").0.write_all(bytes)?,
            Sink::S3(parts) => {
                parts.buf.extend_from_slice(bytes);
                if parts.buf.len() >= PART_BYTES {
                    parts.send_part()?;
                }
            }
        }
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
        let target = match (&mut self.sink, self.store.locate(&self.oid)) {
            (Sink::S3(parts), _) => return parts.finish().map_err(UploadError::from),
            (Sink::File(file), Located::File(target)) => (file.take().expect("open until finished"), target),
            (Sink::File(_), Located::Remote { .. }) => unreachable!("a file store's upload is to a file"),
        };
        let ((file, temp), target) = target;
        file.sync_all()?;
        drop(file);
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
        if let Sink::File(file) = &mut self.sink
            && let Some((_, temp)) = file.take()
        {
            let _ = std::fs::remove_file(temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Store {
        fn file(&self, oid: &Oid) -> PathBuf {
            match self.locate(oid) {
                Located::File(path) => path,
                Located::Remote { .. } => unreachable!(),
            }
        }
    }

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
        assert_eq!(std::fs::read(store.file(&oid)).unwrap(), data);
        assert!(store.file(&oid).ends_with(format!("{}/{}/{oid}", &oid.as_str()[..2], &oid.as_str()[2..4])));
        assert_eq!(store.objects(), [(oid, data.len() as u64)]);
    }
}
