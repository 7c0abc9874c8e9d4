//! Trailing checksums found right, remembered by file identity: git and gixd write the files
//! that carry one (a multi-pack-index, a `.bitmap`, a commit-graph) once, under a temporary name, and rename them
//! into place, so a file with the same device, inode, length and modification and change times
//! holds the bytes that were hashed. A repository's cache given back when it idles
//! ([`super::cache`]) reopens its MIDX, bitmap and commit-graph on the next request; without
//! this it hashed them again (tens of MiB on a large repository, the largest cost of such a request). A file
//! damaged in place after its first check is not seen until the process restarts; git does not
//! check these checksums when it reads the files at all.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Identities remembered, at most; past it the set starts again (a server sees a few files per
/// repository it serves).
const REMEMBERED: usize = 4096;

/// Times a trailing checksum was computed (for tests).
pub static TRAILERS_HASHED: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(file: &std::fs::File) -> Option<Identity> {
        let meta = file.metadata().ok()?;
        Some(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

static FOUND_RIGHT: Mutex<Option<HashSet<Identity>>> = Mutex::new(None);

/// Whether `data`, the bytes of `file`, end in the `hash` checksum of the bytes before it:
/// computed the first time this file is seen, remembered after for as long as it is the same file.
pub fn trailer_matches(file: &std::fs::File, data: &[u8], hash: gix_hash::Kind) -> bool {
    let Some(split) = data.len().checked_sub(hash.len_in_bytes()) else { return false };
    found_right(file, || {
        let (body, trailer) = data.split_at(split);
        let mut hasher = gix_hash::hasher(hash);
        hasher.update(body);
        hasher.try_finalize().is_ok_and(|digest| digest.as_bytes() == trailer)
    })
}

/// `check` of the file open as `file` (hashing its trailer: [`TRAILERS_HASHED`] counts the
/// calls), or `true` without calling it when it was found right for this same file before.
pub fn found_right(file: &std::fs::File, check: impl FnOnce() -> bool) -> bool {
    let identity = Identity::of(file);
    let remembered = |id: &Identity| FOUND_RIGHT.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(id).copied();
    if identity.as_ref().and_then(remembered).is_some() {
        return true;
    }
    TRAILERS_HASHED.fetch_add(1, Ordering::Relaxed);
    let right = check();
    if right && let Some(id) = identity {
        let mut set = FOUND_RIGHT.lock().unwrap_or_else(|e| e.into_inner());
        let set = set.get_or_insert_with(HashSet::new);
        if set.len() >= REMEMBERED {
            set.clear();
        }
        set.insert(id);
    }
    right
}
