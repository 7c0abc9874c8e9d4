//! A push's Git LFS pointers: a blob of the received pack that is an LFS pointer (git-lfs's
//! spec v1: `version`, `oid sha256:…`, `size …`, at most 1 KiB) names an object the repository
//! must hold, or the push would publish a commit nobody can check out. Such a push is refused
//! (as GitLab refuses it), naming the first missing object; a repository turns the check off
//! with `gixd.lfsPointerCheck=false`, a server with LFS off does not check.

use std::path::Path;

use crate::lfs::pointer::{MOST_POINTER_BYTES, parse as pointer};
use crate::lfs::{Oid, Store};

/// The first LFS object a pointer among the pack's blobs (indexed at `index`, read through
/// `received`) names that the repository's LFS `store` lacks (or holds at another size).
pub fn first_missing(
    index: &Path,
    received: &gix_odb::Handle,
    store: &Store,
    hash: gix_hash::Kind,
) -> Result<Option<(Oid, u64)>, std::io::Error> {
    use gix_object::{Find, FindHeader};
    let index = gix_pack::index::File::at(index, hash).map_err(std::io::Error::other)?;
    let mut buf = Vec::new();
    for entry in index.iter() {
        let Ok(Some(header)) = received.try_header(&entry.oid) else { continue };
        if header.kind != gix_object::Kind::Blob || header.size > MOST_POINTER_BYTES {
            continue;
        }
        let Ok(Some(data)) = received.try_find(&entry.oid, &mut buf) else { continue };
        if let Some((oid, size)) = pointer(data.data)
            && store.size(&oid) != Some(size)
        {
            return Ok(Some((oid, size)));
        }
    }
    Ok(None)
}
