//! Which objects a client may be sent: those reachable from the refs it may read — the readable
//! set (cached per ref state; from the pack bitmap where there is one) and, at commit level, which
//! of some commits the visible refs reach.

use std::collections::HashSet;

use gix_hash::ObjectId;

use super::*;
use crate::graph::GraphError;
use crate::repo::RefSnapshot;

/// Every object reachable from `tips`: what a client that may read those refs may be sent.
pub fn reachable_from(repo: &gix::Repository, tips: &[ObjectId]) -> Result<HashSet<ObjectId>, GraphError> {
    Ok(everything_reachable(repo, tips, None)?.objects.into_iter().collect())
}

/// What selection keeps per repository, each in its own typed cell: the pack bitmap, the pack
/// files and the readable set. Owned by the server's state (one per process, as [`crate::repo::Repos`])
/// and passed down to what computes them.
#[derive(Default)]
pub struct Caches {
    pub bitmaps: crate::bitmap::Cache,
    pub packs: crate::packs::Cache,
    /// Per ref state ([`RefSnapshot::fingerprint`]).
    pub readable: crate::repo::cache::PerRepository<Readable>,
}

impl Caches {
    /// Drop what no request used since `cutoff` ([`crate::repo::cache::PerRepository::forget_unused`]);
    /// say how many values went and stay.
    pub fn forget_unused(&self, cutoff: std::time::Instant) -> crate::repo::cache::Swept {
        self.bitmaps.forget_unused(cutoff) + self.packs.forget_unused(cutoff) + self.readable.forget_unused(cutoff)
    }
}

/// The objects a client may be sent: those reachable from the refs it may read.
pub enum Readable {
    /// From a walk.
    Set(HashSet<ObjectId>),
    /// From the pack bitmap: a bit test per question.
    Bitmap { bitmap: std::sync::Arc<PackBitmap>, reach: crate::bitmap::Reach },
}

impl Readable {
    pub fn contains(&self, id: &gix_hash::oid) -> bool {
        match self {
            Readable::Set(set) => set.contains(id),
            Readable::Bitmap { bitmap, reach } => reach.has(bitmap, id),
        }
    }
}

/// How many readable sets [`readable_objects`] computed (not taken from the cache) in this
/// process: each is a walk of every object the refs reach (or a bitmap reach), the cost a fetch
/// must not pay for what it does not need (tests count it).
/// A test hook (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub static READABLE_SETS_COMPUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One request's view of its repository: the served repository and its handle, the refs the
/// request is served from, and what the server caches for it ([`crate::repo::Repos`], the
/// selection's [`Caches`]). Made once per request by the service; selection, bitmaps and
/// readability take it as one value.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub caches: &'a Caches,
    pub repos: &'a crate::repo::Repos,
    pub served: &'a crate::repo::Served,
    pub repo: &'a gix::Repository,
    pub refs: &'a RefSnapshot,
}

impl View<'_> {
    /// The repository's pack or multi-pack bitmap, if it has one gixd can use
    /// ([`crate::bitmap::of`], cached per pack state).
    pub fn bitmap(&self) -> Option<std::sync::Arc<PackBitmap>> {
        crate::bitmap::of(&self.caches.bitmaps, self.repos, self.served, self.repo)
    }

    /// The objects reachable from the refs (all of which this client may read), cached per ref
    /// state: from the pack bitmap when there is one (bits, and a walk only of what the
    /// bitmapped pack lacks), else from a walk of everything.
    pub fn readable_objects(&self) -> Result<std::sync::Arc<Readable>, GraphError> {
        let (repo, refs) = (self.repo, self.refs);
        self.caches.readable.get_or_compute(self.served, refs.fingerprint(), || {
            #[cfg(feature = "test-hooks")]
            READABLE_SETS_COMPUTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(match self.bitmap() {
                Some(bitmap) => {
                    let reach = bitmap.reachable_unnamed(repo, &refs.tips())?;
                    Readable::Bitmap { bitmap, reach }
                }
                None => Readable::Set(reachable_from(repo, &refs.tips())?),
            })
        })
    }

    /// The readable set if it costs nothing now: cached for this ref state, or cheap to compute
    /// (from a pack bitmap). `None` when only a walk of every object could tell — a caller
    /// asking only to save work (a delta base it could include instead of re-deflating) then
    /// goes without.
    pub fn readable_objects_if_cheap(&self) -> Option<std::sync::Arc<Readable>> {
        if let Some(set) = self.caches.readable.get(self.served, self.refs.fingerprint()) {
            return Some(set);
        }
        self.bitmap()?;
        match self.readable_objects() {
            Ok(set) => Some(set),
            Err(err) => {
                tracing::warn!(repo = %self.served.name, %err, "could not tell which objects are readable; deltas against bases outside the selection are re-deflated");
                None
            }
        }
    }

    /// Which of `commits` are reachable from the refs (a client that may read those refs may
    /// read them, their trees and blobs): decided at commit level — with the pack bitmap, by
    /// bits of the cached readable reach; without one, by a walk of commits only from the
    /// visible tips that stops once every candidate is found (commit-graph where present), never
    /// a walk of every object.
    pub fn readable_commits(&self, commits: &[ObjectId]) -> Result<HashSet<ObjectId>, GraphError> {
        let (repo, refs) = (self.repo, self.refs);
        if commits.is_empty() {
            return Ok(HashSet::new());
        }
        if self.bitmap().is_some() {
            let readable = self.readable_objects()?;
            let found: HashSet<ObjectId> = commits.iter().filter(|c| readable.contains(c)).copied().collect();
            if found.len() == commits.len() {
                return Ok(found);
            }
            // The cached reach refused some: a refusal is rare (a racing or hostile client) and
            // final, so those are walked once more at commit level through the repository opened
            // anew, past every cache. A disagreement is a bug in the cached answer: said loudly.
            let refused: Vec<ObjectId> = commits.iter().filter(|c| !found.contains(*c)).copied().collect();
            let again = commits_reached(&crate::repo::reopened(repo), refs, &refused)?;
            if !again.is_empty() {
                #[cfg(feature = "test-hooks")]
                CACHED_REACH_DISAGREED.fetch_add(again.len(), std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(repo = %self.served.name, commits = ?again, "the cached readable set refused commits a walk of the refs reaches");
            }
            return Ok(found.into_iter().chain(again).collect());
        }
        commits_reached(repo, refs, commits)
    }
}

/// Commits the cached readable set refused that a fresh walk reached ([`View::readable_commits`]):
/// in this process, for the soak to count. A test hook (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub static CACHED_REACH_DISAGREED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Which of `commits` the tips of `refs` reach: a walk of commits only (commit-graph where
/// present) that stops once every one is found.
fn commits_reached(
    repo: &gix::Repository,
    refs: &RefSnapshot,
    commits: &[ObjectId],
) -> Result<HashSet<ObjectId>, GraphError> {
    let mut left: HashSet<ObjectId> = commits.iter().copied().collect();
    let mut found = HashSet::new();
    let mut tips = Vec::new();
    for tip in refs.tips() {
        if let Some(commit) = crate::graph::peel_to_commit(repo, tip)? {
            tips.push(commit);
        }
    }
    for commit in &tips {
        if left.remove(commit) {
            found.insert(*commit);
        }
    }
    if left.is_empty() || tips.is_empty() {
        return Ok(found);
    }
    for info in repo.rev_walk(tips).all()? {
        let id = info?.id;
        if left.remove(&id) {
            found.insert(id);
            if left.is_empty() {
                break;
            }
        }
    }
    Ok(found)
}
