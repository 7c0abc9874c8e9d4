//! The object graph, at the bottom of every walk: the objects one object refers to, and what an
//! annotated tag peels to. Selection, the bitmap reach, push connectivity and maintenance all
//! walk with these.

use gix_hash::ObjectId;
use gix_object::Kind;

pub mod unchanged;

/// What a walk over the object graph meets: an object missing (or not the object it is said to
/// be), or the object database failing. Every layer above reports it as its own error's
/// "missing object" or "repository access" case ([`From`] below).
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("object {0} is missing from the repository")]
    Missing(ObjectId),
    #[error("repository access failed: {0}")]
    Git(#[from] gix::Error),
}

/// The commits reachable from `tips` and not from `hidden`, newest first by commit time (git's
/// `rev-list` order), each with its parents — and the root tree of every commit the
/// walk decoded, noted as it decoded it: a selection then reads each commit once (gix's walk
/// gives parents only, and the trees cost a second decode of every commit, a fifth of a tokio
/// clone's CPU without a commit-graph). Without a commit-graph and in a repository that is not
/// shallow only (gix's walk rewrites a shallow repository's commits); `None` otherwise.
/// With the trees, each commit's committer time (seconds), as a commit-graph holds it.
#[allow(clippy::type_complexity, reason = "the walk's commits and the trees met, as the caller keeps them")]
pub fn walk_noting_trees(
    repo: &gix::Repository,
    tips: Vec<ObjectId>,
    hidden: &[ObjectId],
) -> Result<Option<(Vec<(ObjectId, Vec<ObjectId>)>, gix::hashtable::HashMap<ObjectId, (ObjectId, u64)>)>, GraphError> {
    use gix::traverse::commit::{Parents, Simple, simple::Sorting};
    if repo.shallow_commits()?.is_some() {
        return Ok(None);
    }
    /// The object database, noting the tree of each commit read through it. gix's walk reads a
    /// commit when it queues it (for its time) and again when it takes it (for its parents); git
    /// decodes each once. The second read comes from a cache of the commits read last (a clone of
    /// git.git without a commit-graph inflated 170 000 commits for its 85 000).
    struct Noting<'a> {
        repo: &'a gix::Repository,
        decoded: std::cell::RefCell<gix_pack::cache::object::MemoryCappedHashmap>,
        trees: std::cell::RefCell<gix::hashtable::HashMap<ObjectId, (ObjectId, u64)>>,
    }
    impl gix_object::Find for Noting<'_> {
        fn try_find<'a>(
            &self,
            id: &gix_hash::oid,
            buffer: &'a mut Vec<u8>,
        ) -> gix_error::Result<Option<gix_object::Data<'a>>> {
            use gix_pack::cache::Object;
            if let Some(kind) = self.decoded.borrow_mut().get(&id.to_owned(), buffer) {
                return Ok(Some(gix_object::Data::new(buffer, kind, id.kind())));
            }
            let data = self.repo.objects.try_find(id, buffer)?;
            if let Some(data) = &data
                && data.kind == Kind::Commit
            {
                #[cfg(feature = "test-hooks")]
                COMMITS_DECODED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.decoded.borrow_mut().put(id.to_owned(), data.kind, data.data);
                // One pass over the header: the tree first, then on to the committer.
                let mut header = gix_object::CommitRefIter::from_bytes(data.data, id.kind());
                if let Ok(tree) = header.tree_id() {
                    let time = header
                        .committer()
                        .ok()
                        .and_then(|c| c.time().ok())
                        .map_or(0, |t| u64::try_from(t.seconds).unwrap_or(0));
                    self.trees.borrow_mut().insert(id.to_owned(), (tree, time));
                }
            }
            Ok(data)
        }
    }
    let decoded = gix_pack::cache::object::MemoryCappedHashmap::new(COMMIT_WALK_CACHE).into();
    let objects = Noting { repo, decoded, trees: Default::default() };
    let sorting = Sorting::ByCommitTime(gix::traverse::commit::simple::CommitTimeOrder::NewestFirst);
    let mut commits = Vec::new();
    let walk = Simple::new(tips, &objects)
        .sorting(sorting)?
        .parents(Parents::All)
        .commit_graph(None)
        .hide(hidden.iter().copied())?;
    for info in walk {
        let info = info?;
        commits.push((info.id, info.parent_ids.iter().copied().collect::<Vec<_>>()));
    }
    Ok(Some((commits, objects.trees.into_inner())))
}

/// Bytes of commits [`walk_noting_trees`] keeps decoded for gix's second read of each: enough for
/// the commits queued and not yet taken in a history with many branches open at once.
const COMMIT_WALK_CACHE: usize = 4 << 20;

/// Commits [`walk_noting_trees`] decoded (not taken from its cache): in this process, for tests to
/// count. A test hook (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub static COMMITS_DECODED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One commit as a commit-graph describes it: its tree, parents and committer time (seconds).
#[derive(Debug, Clone)]
pub struct Commit {
    pub id: ObjectId,
    pub tree: ObjectId,
    pub parents: Vec<ObjectId>,
    pub time: u64,
}

/// Push the objects `data` (the object `id`, of `kind`) refers to, each with the type the referrer
/// gives it: a commit's tree and parents, a tree's entries (gitlinks left out: a submodule's commit
/// lives in another repository; a blob or symlink entry is a blob, a directory a tree), a tag's
/// target (its `type` header). Walks over object data (bitmaps, connectivity, maintenance) share
/// it; with the type at hand a walk need not read a blob to learn it is one, as git's traversal
/// never reads blobs.
pub fn push_children(id: ObjectId, kind: Kind, data: &[u8], out: &mut Vec<(ObjectId, Kind)>) -> Result<(), GraphError> {
    let unparsable = |_| GraphError::Missing(id);
    match kind {
        Kind::Commit => {
            let commit = gix_object::CommitRefIter::from_bytes(data, id.kind());
            out.push((commit.clone().tree_id().map_err(unparsable)?, Kind::Tree));
            out.extend(commit.parent_ids().map(|parent| (parent, Kind::Commit)));
        }
        Kind::Tree => {
            for entry in gix_object::TreeRefIter::from_bytes(data, id.kind()) {
                let entry = entry.map_err(unparsable)?;
                if !entry.mode.is_commit() {
                    let kind = if entry.mode.is_tree() { Kind::Tree } else { Kind::Blob };
                    out.push((entry.oid.to_owned(), kind));
                }
            }
        }
        Kind::Tag => {
            let tag = gix_object::TagRef::from_bytes(data, id.kind()).map_err(|_| GraphError::Missing(id))?;
            out.push((tag.target(), tag.target_kind));
        }
        Kind::Blob => {}
    }
    Ok(())
}

/// Where a tree or blob was met: its path's hash (unique per path, for the client's version at
/// the same path) and git's name hash of it (for the delta search's order; many paths share
/// one: it weighs a path's last sixteen characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreePath {
    pub full: u64,
    pub name: u32,
}

impl TreePath {
    /// A root tree's path (and a tip's: git names neither).
    pub const ROOT: TreePath = TreePath { full: 0xcbf2_9ce4_8422_2325, name: 0 };

    /// The path of the entry `name` of the tree at this path.
    pub fn child(self, name: &[u8]) -> TreePath {
        let parent = (self != TreePath::ROOT).then_some(self.name);
        TreePath { full: path_hash(self.full, name), name: child_name_hash(parent, name) }
    }
}

/// The hash of `parent`'s path extended by `name` (`/`-joined, as git names paths): FNV-1a.
fn path_hash(parent: u64, name: &[u8]) -> u64 {
    let mut h = parent ^ 0x2f;
    for b in name {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.wrapping_mul(0x0000_0100_0000_01b3)
}

/// git's name hash of the entry `name` of a tree whose own path hashes to `parent` (`None`: the
/// root tree): git names `a/b` for an entry below `a`, and `a` for one of the root tree.
pub fn child_name_hash(parent: Option<u32>, name: &[u8]) -> u32 {
    use gix_pack::data::delta::search::name_hash_step;
    let start = parent.map_or(0, |parent| name_hash_step(parent, b'/'));
    name.iter().fold(start, |h, c| name_hash_step(h, *c))
}

/// `id`, or what the tag(s) it names peel to, if that is a commit.
pub fn peel_to_commit(repo: &gix::Repository, id: ObjectId) -> Result<Option<ObjectId>, GraphError> {
    let target = peel_tag(repo, id)?.unwrap_or(id);
    let kind = repo.find_header(target).map_err(|_| GraphError::Missing(target))?.kind();
    Ok((kind == gix_object::Kind::Commit).then_some(target))
}

/// For an annotated tag, the non-tag object it finally points at; `None` for any other object.
pub fn peel_tag(repo: &gix::Repository, id: ObjectId) -> Result<Option<ObjectId>, GraphError> {
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
        let tag = repo.find_object(current)?.try_into_tag().map_err(|_| GraphError::Missing(current))?;
        current = tag.target_id().map_err(|_| GraphError::Missing(current))?.detach();
        peeled = Some(current);
    }
    Ok(peeled)
}

/// A commit's committer time and parents, as walks by date need them.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    pub time: i64,
    pub parents: Vec<ObjectId>,
    /// The root tree: a walk that goes on into the commit's trees need not decode it again.
    pub tree: ObjectId,
}

/// Decoded commits of one repository, kept across requests: a commit's id fixes its content,
/// so nothing here goes stale. Stateless negotiation asks "ready?" once per round, each round a
/// request of its own, and every round walked (and inflated) the same commits again. Bounded:
/// past [`CommitCache::LIMIT`] commits, new ones are decoded and not kept.
#[derive(Debug, Default)]
pub struct CommitCache {
    map: std::sync::Mutex<std::collections::HashMap<ObjectId, std::sync::Arc<CommitInfo>>>,
}

impl CommitCache {
    pub const LIMIT: usize = 250_000;

    /// The commit `id` of `repo`: from the cache, or decoded (and kept).
    pub fn get(&self, repo: &gix::Repository, id: ObjectId) -> Result<std::sync::Arc<CommitInfo>, GraphError> {
        if let Some(info) = self.map.lock().expect("not poisoned").get(&id) {
            return Ok(info.clone());
        }
        let commit = repo.find_commit(id).map_err(|_| GraphError::Missing(id))?;
        // An unreadable committer date counts as the oldest (git's parse_commit date 0).
        let time = commit.time().map_or(0, |t| t.seconds);
        let tree = commit.tree_id().map_err(|_| GraphError::Missing(id))?.detach();
        let info =
            std::sync::Arc::new(CommitInfo { time, parents: commit.parent_ids().map(|p| p.detach()).collect(), tree });
        let mut map = self.map.lock().expect("not poisoned");
        if map.len() < Self::LIMIT {
            map.insert(id, info.clone());
        }
        Ok(info)
    }

    pub fn len(&self) -> usize {
        self.map.lock().expect("not poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
            text.push_str(&format!(
                "author A <a@example.com> {time} +0000\ncommitter A <a@example.com> {time} +0000\n\ncommit {i}\n"
            ));
            ids.push(
                gix_object::Write::write_buf(&repo.objects, gix_object::Kind::Commit, text.as_bytes())
                    .expect("a commit"),
            );
        }
        (dir, repo, ids)
    }

    /// An annotated tag of `target` (a commit), written to the repository.
    pub fn tag(repo: &gix::Repository, target: ObjectId, name: &str) -> ObjectId {
        let text = format!("object {target}\ntype commit\ntag {name}\ntagger A <a@example.com> 2000 +0000\n\n{name}\n");
        gix_object::Write::write_buf(&repo.objects, gix_object::Kind::Tag, text.as_bytes()).expect("a tag")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_is_decoded_once_and_then_answered_from_the_cache() {
        let (dir, repo, c) = fixture::history(&[&[], &[0]]);
        let cache = CommitCache::default();
        let first = cache.get(&repo, c[1]).unwrap();
        assert_eq!((first.time, first.parents.clone()), (1010, vec![c[0]]));
        // The object gone from the repository, the cache still knows it; a new cache does not.
        let hex = c[1].to_string();
        std::fs::remove_file(dir.path().join("objects").join(&hex[..2]).join(&hex[2..])).unwrap();
        let repo = gix::open(dir.path()).unwrap();
        assert_eq!(cache.get(&repo, c[1]).unwrap().parents, vec![c[0]]);
        assert!(CommitCache::default().get(&repo, c[1]).is_err());
        assert_eq!(cache.len(), 1);
    }
}
