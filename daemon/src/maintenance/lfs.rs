//! Git LFS objects no pointer names: what `gixd maintenance` reports (and never deletes) — an
//! object uploaded for a push that was then refused or rewritten away stays stored until an
//! operator decides. Every blob small enough to be a pointer is read once.

use super::*;
use crate::lfs::Store;
use crate::lfs::pointer::{MOST_POINTER_BYTES, parse};

/// The LFS objects of `git_dir` that no pointer among its objects names, and their bytes; `None`
/// when it stores no LFS object.
pub fn unreferenced(git_dir: &Path) -> Result<Option<(usize, u64)>, MaintenanceError> {
    use gix_object::{Find, FindHeader};
    let store = Store::of(git_dir);
    let mut stored: std::collections::HashMap<_, _> = store.objects().into_iter().collect();
    if stored.is_empty() {
        return Ok(None);
    }
    let repo = gix::open(git_dir).map_err(MaintenanceError::Git)?;
    let mut buf = Vec::new();
    for id in repo.objects.iter().map_err(MaintenanceError::pack)? {
        let Ok(id) = id else { continue };
        let Ok(Some(header)) = repo.objects.try_header(&id) else { continue };
        if header.kind != gix_object::Kind::Blob || header.size > MOST_POINTER_BYTES {
            continue;
        }
        if let Ok(Some(data)) = repo.objects.try_find(&id, &mut buf)
            && let Some((oid, _)) = parse(data.data)
        {
            stored.remove(&oid);
        }
    }
    Ok(Some((stored.len(), stored.values().sum())))
}
