//! The object graph, at the bottom of every walk: the objects one object refers to, and what an
//! annotated tag peels to. Selection, the bitmap reach, push connectivity and maintenance all
//! walk with these.

use gix_hash::ObjectId;
use gix_object::Kind;

use crate::error::ServeError;

/// Push the objects `data` (the object `id`, of `kind`) refers to: a commit's tree and parents, a
/// tree's entries (gitlinks left out: a submodule's commit lives in another repository), a tag's
/// target. Walks over object data (bitmaps, connectivity, maintenance) share it.
pub fn push_children(id: ObjectId, kind: Kind, data: &[u8], out: &mut Vec<ObjectId>) -> Result<(), ServeError> {
    let unparsable = |_| ServeError::MissingObject(id);
    match kind {
        Kind::Commit => {
            let commit = gix_object::CommitRefIter::from_bytes(data, id.kind());
            out.push(commit.clone().tree_id().map_err(unparsable)?);
            out.extend(commit.parent_ids());
        }
        Kind::Tree => {
            for entry in gix_object::TreeRefIter::from_bytes(data, id.kind()) {
                let entry = entry.map_err(unparsable)?;
                if !entry.mode.is_commit() {
                    out.push(entry.oid.to_owned());
                }
            }
        }
        Kind::Tag => out.push(gix_object::TagRefIter::from_bytes(data, id.kind()).target_id().map_err(unparsable)?),
        Kind::Blob => {}
    }
    Ok(())
}

/// `id`, or what the tag(s) it names peel to, if that is a commit.
pub fn peel_to_commit(repo: &gix::Repository, id: ObjectId) -> Result<Option<ObjectId>, ServeError> {
    let target = peel_tag(repo, id)?.unwrap_or(id);
    let kind = repo.find_header(target).map_err(|_| ServeError::MissingObject(target))?.kind();
    Ok((kind == gix_object::Kind::Commit).then_some(target))
}

/// For an annotated tag, the non-tag object it finally points at; `None` for any other object.
pub fn peel_tag(repo: &gix::Repository, id: ObjectId) -> Result<Option<ObjectId>, ServeError> {
    let mut current = id;
    let mut peeled = None;
    for _ in 0..64 {
        let header = match repo.find_header(current) {
            Ok(h) => h,
            Err(_) => return Ok(peeled),
        };
        if header.kind() != gix_object::Kind::Tag {
            return Ok(peeled);
        }
        let tag = repo.find_object(current)?.try_into_tag().map_err(|_| ServeError::MissingObject(current))?;
        current = tag.target_id().map_err(|_| ServeError::MissingObject(current))?.detach();
        peeled = Some(current);
    }
    Ok(peeled)
}

/// Small repositories built in a temporary directory, for the unit tests of the walks.
#[cfg(test)]
pub(crate) mod fixture {
    use gix_hash::ObjectId;

    /// A bare repository with one commit per entry of `parents` (commit `i`'s parents are the
    /// commits at those indices, all earlier; commit `i` was made at `1000 + 10 i`), every commit
    /// with the empty tree.
    pub fn history(parents: &[&[usize]]) -> (tempfile::TempDir, gix::Repository, Vec<ObjectId>) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let repo = gix::init_bare(dir.path()).expect("a new repository");
        let tree = gix_object::Write::write_buf(&repo.objects, gix_object::Kind::Tree, b"").expect("the empty tree");
        let mut ids: Vec<ObjectId> = Vec::new();
        for (i, of) in parents.iter().enumerate() {
            let mut text = format!("tree {tree}\n");
            for p in *of {
                text.push_str(&format!("parent {}\n", ids[*p]));
            }
            let time = 1000 + 10 * i;
            text.push_str(&format!("author A <a@example.com> {time} +0000\ncommitter A <a@example.com> {time} +0000\n\ncommit {i}\n"));
            ids.push(gix_object::Write::write_buf(&repo.objects, gix_object::Kind::Commit, text.as_bytes()).expect("a commit"));
        }
        (dir, repo, ids)
    }

    /// An annotated tag of `target` (a commit), written to the repository.
    pub fn tag(repo: &gix::Repository, target: ObjectId, name: &str) -> ObjectId {
        let text = format!("object {target}\ntype commit\ntag {name}\ntagger A <a@example.com> 2000 +0000\n\n{name}\n");
        gix_object::Write::write_buf(&repo.objects, gix_object::Kind::Tag, text.as_bytes()).expect("a tag")
    }
}
