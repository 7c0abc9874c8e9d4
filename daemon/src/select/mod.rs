//! Object selection: everything reachable from the wants and not from the common commits, as git
//! does it — the commit walk hides what the common commits reach, the trees of the boundary
//! ("edge") commits are marked as held by the client, annotated tags are peeled and sent, gitlinks
//! are not followed; or, when the pack has a bitmap, the same set by bitmap operations
//! ([`crate::bitmap`]). A shallow request walks with its [`Boundary`]'s grafts on both sides (the
//! client's history ends where its shallow commits say); a [`Filter`] leaves blobs and trees out,
//! never an object the client named. The order is deterministic: same repository and request,
//! same list.

use std::collections::{HashMap, HashSet};

use gix_hash::ObjectId;
use gix_object::{Find, Kind};

use crate::bitmap::PackBitmap;
use crate::filter::Filter;
use crate::graph::GraphError;
use crate::graph::TreePath;
use crate::repo::RefSnapshot;
use crate::shallow::Boundary;

mod by_bitmap;
mod met;
mod readable;
mod tags;

pub use by_bitmap::Positions;
use by_bitmap::select_with_bitmap;

#[cfg(feature = "test-hooks")]
pub use readable::{CACHED_REACH_DISAGREED, READABLE_SETS_COMPUTED};
pub use readable::{Caches, Readable, View, reachable_from};

/// What one request sends.
#[derive(Debug, Default)]
pub struct Selection {
    /// Objects to send, in selection order — after the first [`Self::unlisted`] ones.
    pub objects: Vec<ObjectId>,
    /// The first this many objects sent are the bitmapped pack's entries at the first positions
    /// of [`Self::in_pack`], not listed in `objects`: a selection of a whole pack (a clone) needs
    /// only their count to be written, and listing them cost 32 bytes an object per request
    /// (11 MiB for a 336 000-object repository, held by each of the slots generating at once).
    /// [`Self::ids`] lists them.
    pub unlisted: usize,
    /// Objects the client has for sure: the edge and common commits and everything in their trees.
    /// Only these may serve as thin-pack bases.
    pub client_has: gix::hashtable::HashSet<ObjectId>,
    pub commits: usize,
    pub trees: usize,
    pub blobs: usize,
    pub tags: usize,
    /// Selected with the pack bitmap (not by walking).
    pub by_bitmap: bool,
    /// The selection is every object of this pack (a bitmap said so), plus `extra` (objects
    /// outside it): the pack file's entries are the answer's, as they are.
    pub whole_pack: Option<std::sync::Arc<PackBitmap>>,
    /// With `whole_pack`: the selected objects that are not in that pack.
    pub extra: Vec<ObjectId>,
    /// By bitmap: what the client has, as bits (not turned into a set of ids).
    pub held: Option<(std::sync::Arc<PackBitmap>, crate::bitmap::Reach)>,
    /// By bitmap: the pack positions of the first objects (those in the bitmapped pack), so the
    /// pack writer knows where each entry is and how long it is without looking it up.
    pub in_pack: Option<(std::sync::Arc<PackBitmap>, Positions)>,
    /// Everything the client is known to have ([`Self::client_has`]) is readable by this client:
    /// walking, it came from edge commits of the selection only; by bitmap, every common commit
    /// was found reachable from a visible ref. A thin base from it needs no further check.
    pub held_is_readable: bool,
    /// Walking: for a tree or blob being sent, the object the client holds at the same path (in
    /// an edge commit's tree), if it is another one — the base a delta of it would most likely
    /// be small against (git's preferred bases, matched by path rather than by name hash).
    pub same_path_held: gix::hashtable::HashMap<ObjectId, ObjectId>,
    /// By bitmap: for a tree or blob going out whole, an object this answer sends from the
    /// bitmapped pack under the same name hash (met in the trees of commits whose bitmaps the
    /// walk took) — a base its delta may name, the client receiving it too.
    pub same_path_sent: gix::hashtable::HashMap<ObjectId, ObjectId>,
    /// Walking: git's name hash ([`gix_pack::data::delta::search::name_hash`]) of the path each
    /// tree and blob being sent was met at, for the delta search's order.
    pub name_hash: gix::hashtable::HashMap<ObjectId, u32>,
    /// Every commit selected, as a commit-graph describes it, when the walk decoded each one and
    /// was asked to keep them (a repack's: [`everything_reachable`]); its commit-graph is then
    /// written without decoding them again.
    pub history: Option<Vec<crate::graph::Commit>>,
    /// By bitmap: everything the wants reach, before what the client has was taken out. The
    /// wants are readable (checked before selection), so all of it is: a delta base found here
    /// may be sent or referred to thin without computing what every visible ref reaches.
    pub wants_reach: Option<crate::bitmap::Bits>,
}

impl Selection {
    /// How many objects are sent.
    pub fn len(&self) -> usize {
        self.unlisted + self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every object sent, in selection order, the unlisted ones too.
    pub fn ids(&self) -> Vec<ObjectId> {
        let unlisted = match &self.in_pack {
            Some((bitmap, positions)) => {
                positions.iter().take(self.unlisted).map(|pos| bitmap.oid_at(pos as usize)).collect()
            }
            None => Vec::new(),
        };
        [unlisted, self.objects.clone()].concat()
    }

    /// Is `id` reachable from the wants (so readable by this client), by the bitmap's reach?
    /// `false` means "not known from the selection", not "unreadable".
    pub fn wants_reach_has(&self, id: &gix_hash::oid) -> bool {
        match (&self.wants_reach, &self.in_pack) {
            (Some(bits), Some((bitmap, _))) => bitmap.pos(id).is_some_and(|pos| bits.get(pos)),
            _ => false,
        }
    }

    /// Does the client have `id`, and may it read it ([`Self::held_is_readable`])? Then it is a
    /// thin base that needs no further check.
    pub fn client_has_readably(&self, id: &gix_hash::oid) -> bool {
        self.held_is_readable && self.client_has(id)
    }

    /// Does the client have `id` for sure (a thin-pack base it may be given)?
    pub fn client_has(&self, id: &gix_hash::oid) -> bool {
        self.client_has.contains(id) || self.held.as_ref().is_some_and(|(bitmap, reach)| reach.has(bitmap, id))
    }
}

/// A selection request.
pub struct Request<'a> {
    pub wants: &'a [ObjectId],
    /// Commits both sides have (the negotiated common set).
    pub common: &'a [ObjectId],
    /// `include-tag`: also send annotated tags of the refs whose object is being sent.
    pub include_tag: bool,
    pub refs: &'a RefSnapshot,
    pub filter: Filter,
    /// A shallow request's boundary (its grafts, extra wants and edges).
    pub boundary: Option<&'a Boundary>,
    /// Told how many objects a walk has selected so far, every [`Walker::TELL_EVERY`] objects
    /// (git's `Enumerating objects: N`); a bitmap selection is not told (it has no running count).
    pub progress: Option<&'a dyn Fn(usize)>,
    /// The repository's commit-graph, if it has a good one: a walk takes each commit's root tree
    /// from it instead of inflating the commit ([`crate::repo::Repos::commit_graph`]).
    pub commit_graph: Option<&'a gix_commitgraph::Graph>,
}

struct Walker<'r> {
    repo: &'r gix::Repository,
    progress: Option<&'r dyn Fn(usize)>,
    commit_graph: Option<&'r gix_commitgraph::Graph>,
    buf: Vec<u8>,
    /// Everything met so far: positions in `out.objects` by id ([`met`]).
    met: met::Met,
    out: Selection,
    filter: Filter,
    /// With `tree:<depth>`: the shallowest depth each tree was entered at (a tree met again
    /// higher up must be walked again, its children may now be in range).
    tree_depths: gix::hashtable::HashMap<ObjectId, u64>,
    /// What the client holds, by the hash of its path in an edge commit's tree (the first edge's
    /// object where edges differ).
    held_by_path: HashMap<u64, ObjectId>,
    /// The root tree of each commit the walk decoded ([`crate::graph::walk_noting_trees`]).
    commit_trees: gix::hashtable::HashMap<ObjectId, (ObjectId, u64)>,
    /// Whether the selection keeps every commit the walk decoded ([`Selection::history`]).
    keep_history: bool,
    /// The tree walked last at each path ([`crate::graph::unchanged`]).
    last_at_path: crate::graph::unchanged::LastAtPath,
    /// `include-tag`: the refs whose annotated tags are added when their targets are sent.
    include_tags_of: Option<&'r RefSnapshot>,
    /// Note every tree's and blob's name hash ([`Selection::name_hash`]), not only where the
    /// client holds something: a repack searches them all.
    name_hashes: bool,
}

/// Commits a selection read for their root tree (not walked, or walked without noting it): in
/// this process, for tests to count. A test hook (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub static COMMITS_READ_FOR_THEIR_TREE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Tree entries a walk looked up among the objects met (not skipped as unchanged from the version
/// walked before at their path): in this process, for tests to count. A test hook (feature
/// `test-hooks`).
#[cfg(feature = "test-hooks")]
pub static ENTRIES_LOOKED_UP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `id`'s kind and data, read into `buf`.
fn find_into<'b>(repo: &gix::Repository, id: &ObjectId, buf: &'b mut Vec<u8>) -> Result<(Kind, &'b [u8]), GraphError> {
    match repo.objects.try_find(id, buf)? {
        Some(data) => Ok((data.kind, data.data)),
        None => Err(GraphError::Missing(*id)),
    }
}

impl<'r> Walker<'r> {
    const TELL_EVERY: usize = 4096;

    fn new(repo: &'r gix::Repository) -> Self {
        Walker {
            repo,
            progress: None,
            commit_graph: None,
            buf: Vec::new(),
            met: Default::default(),
            out: Selection::default(),
            filter: Filter::default(),
            tree_depths: Default::default(),
            held_by_path: HashMap::new(),
            commit_trees: Default::default(),
            keep_history: false,
            last_at_path: Default::default(),
            include_tags_of: None,
            name_hashes: false,
        }
    }

    fn find(&mut self, id: &ObjectId) -> Result<(Kind, &[u8]), GraphError> {
        find_into(self.repo, id, &mut self.buf)
    }

    /// The entries of a tree, gitlinks left out (a submodule's commit lives in another
    /// repository), each with the hash of its path below `path` (the tree's own path hash).
    fn tree_entries(&mut self, tree: &ObjectId, path: TreePath) -> Result<Vec<(ObjectId, bool, TreePath)>, GraphError> {
        let hash_kind = tree.kind();
        let (_, data) = self.find(tree)?;
        let mut out = Vec::new();
        for entry in gix_object::TreeRefIter::from_bytes(data, hash_kind) {
            let entry = entry.map_err(|_| GraphError::Missing(*tree))?;
            if !entry.mode.is_commit() {
                out.push((entry.oid.to_owned(), entry.mode.is_tree(), path.child(entry.filename)));
            }
        }
        Ok(out)
    }

    /// `id` is being sent at `path`: remember its name hash (for a delta search: a repack's, or
    /// a fetch's, which runs only when the client holds something — a clone's table would be
    /// 21 MB for 336 000 objects, unread), and what the client holds there.
    fn note_same_path(&mut self, id: ObjectId, path: TreePath) {
        if self.name_hashes || !self.out.client_has.is_empty() {
            self.out.name_hash.insert(id, path.name);
        }
        let path = path.full;
        if let Some(held) = self.held_by_path.get(&path)
            && *held != id
        {
            self.out.same_path_held.insert(id, *held);
        }
    }

    fn kind_of(&self, id: &ObjectId) -> Result<Kind, GraphError> {
        Ok(self.repo.find_header(*id).map_err(|_| GraphError::Missing(*id))?.kind())
    }

    /// Add `id` to the output unless it was seen or the client has it; true if added.
    fn add(&mut self, id: ObjectId, kind: Kind) -> bool {
        if self.out.client_has.contains(&id) || !self.met.insert(&mut self.out.objects, id) {
            return false;
        }
        if let Some(progress) = self.progress
            && self.out.objects.len().is_multiple_of(Self::TELL_EVERY)
        {
            progress(self.out.objects.len());
        }
        match kind {
            Kind::Commit => self.out.commits += 1,
            Kind::Tree => self.out.trees += 1,
            Kind::Blob => self.out.blobs += 1,
            Kind::Tag => self.out.tags += 1,
        }
        true
    }

    /// Send `root` and everything below it that is neither seen nor held by the client nor left
    /// out by the filter. A tree the client named (`named`) is sent whatever the filter says.
    fn add_tree(&mut self, root: ObjectId, named: bool) -> Result<(), GraphError> {
        if !named && self.filter.tree_depth == Some(0) {
            return Ok(());
        }
        if !self.enter_tree(root, 0) {
            return Ok(());
        }
        self.note_same_path(root, TreePath::ROOT);
        let mut stack = vec![(root, 0u64, TreePath::ROOT)];
        // The tree being read (its own buffer: its entries are walked while `self` changes) and
        // its subtrees.
        let mut data = Vec::new();
        let mut subtrees = Vec::new();
        while let Some((tree, depth, path)) = stack.pop() {
            let below = depth + 1;
            if self.filter.tree_depth.is_some_and(|limit| below >= limit) {
                continue; // everything below is left out: no need to read the tree
            }
            find_into(self.repo, &tree, &mut data)?;
            // Most entries of a tree are objects an earlier version of it already had: those are
            // skipped before their path is hashed (a clone of git.git meets 68 million entries
            // for 330 000 trees and blobs), most without a look-up ([`crate::graph::unchanged`]).
            let skip_seen = self.filter.tree_depth.is_none();
            let walked = if skip_seen { self.last_at_path.take(path.full) } else { Vec::new() };
            for entry in crate::graph::unchanged::changed_entries(&data, &walked, tree.kind()) {
                let entry = entry.map_err(|_| GraphError::Missing(tree))?;
                if entry.mode.is_commit() {
                    continue; // a gitlink: the commit lives in another repository
                }
                let id = entry.oid;
                if skip_seen {
                    #[cfg(feature = "test-hooks")]
                    ENTRIES_LOOKED_UP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if self.met.contains(&self.out.objects, id) || self.out.client_has.contains(id) {
                        continue;
                    }
                }
                if entry.mode.is_tree() {
                    subtrees.push((id.to_owned(), path.child(entry.filename)));
                } else if self.blob_passes(id)? && self.add(id.to_owned(), Kind::Blob) {
                    self.note_same_path(id.to_owned(), path.child(entry.filename));
                }
            }
            if skip_seen {
                // This version is walked: the next at its path compares with it. Its old buffer
                // is the next tree's to read into.
                self.last_at_path.keep(path.full, std::mem::replace(&mut data, walked));
            }
            // Depth-first in entry order: push in reverse so the first entry is walked first.
            for (sub, sub_path) in subtrees.drain(..).rev() {
                if self.enter_tree(sub, below) {
                    self.note_same_path(sub, sub_path);
                    stack.push((sub, below, sub_path));
                }
            }
        }
        Ok(())
    }

    /// Add a tree met at `depth`; true if its entries are to be walked.
    fn enter_tree(&mut self, id: ObjectId, depth: u64) -> bool {
        if self.filter.tree_depth.is_none() {
            return self.add(id, Kind::Tree);
        }
        if self.out.client_has.contains(&id) || self.tree_depths.get(&id).is_some_and(|d| *d <= depth) {
            return false;
        }
        self.tree_depths.insert(id, depth);
        self.add(id, Kind::Tree);
        true
    }

    /// Whether the filter lets a blob through (one not yet sent or held).
    fn blob_passes(&mut self, id: &gix_hash::oid) -> Result<bool, GraphError> {
        if self.filter.no_blobs {
            return Ok(false);
        }
        let Some(limit) = self.filter.blob_limit else { return Ok(true) };
        if self.met.contains(&self.out.objects, id) || self.out.client_has.contains(id) {
            return Ok(false);
        }
        let size = self.repo.find_header(id.to_owned()).map_err(|_| GraphError::Missing(id.to_owned()))?.size();
        Ok(size < limit)
    }

    /// Record `root` and everything below it as held by the client.
    /// Also where each object is (by path hash), for [`Selection::same_path_held`].
    fn mark_tree_held(&mut self, root: ObjectId) -> Result<(), GraphError> {
        self.held_by_path.entry(TreePath::ROOT.full).or_insert(root);
        if !self.out.client_has.insert(root) {
            return Ok(());
        }
        let mut stack = vec![(root, TreePath::ROOT)];
        while let Some((tree, path)) = stack.pop() {
            for (id, is_tree, entry_path) in self.tree_entries(&tree, path)? {
                self.held_by_path.entry(entry_path.full).or_insert(id);
                if self.out.client_has.insert(id) && is_tree {
                    stack.push((id, entry_path));
                }
            }
        }
        Ok(())
    }

    fn tree_of_commit(&mut self, commit: &ObjectId) -> Result<ObjectId, GraphError> {
        if let Some(tree) = self.commit_graph.and_then(|graph| crate::repo::commit_graph::root_tree(graph, commit)) {
            return Ok(tree);
        }
        if let Some((tree, _)) = self.commit_trees.get(commit) {
            return Ok(*tree);
        }
        #[cfg(feature = "test-hooks")]
        COMMITS_READ_FOR_THEIR_TREE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (kind, data) = self.find(commit)?;
        if kind != Kind::Commit {
            return Err(GraphError::Missing(*commit));
        }
        gix_object::CommitRefIter::from_bytes(data, commit.kind()).tree_id().map_err(|_| GraphError::Missing(*commit))
    }

    /// Peel tags (sending each), returning the first non-tag object and its kind.
    fn peel_sending_tags(&mut self, mut id: ObjectId) -> Result<(ObjectId, Kind), GraphError> {
        for _ in 0..64 {
            let kind = self.kind_of(&id)?;
            if kind != Kind::Tag {
                return Ok((id, kind));
            }
            self.add(id, Kind::Tag);
            let (_, data) = self.find(&id)?;
            id =
                gix_object::TagRefIter::from_bytes(data, id.kind()).target_id().map_err(|_| GraphError::Missing(id))?;
        }
        Err(GraphError::Missing(id))
    }

    fn run(
        mut self,
        wants: &[ObjectId],
        common: &[ObjectId],
        boundary: Option<&Boundary>,
    ) -> Result<Selection, GraphError> {
        let mut commit_tips = Vec::new();
        let mut roots = Vec::new();
        for want in wants {
            let (id, kind) = self.peel_sending_tags(*want)?;
            match kind {
                Kind::Commit => commit_tips.push(id),
                other => roots.push((id, other)),
            }
        }
        let mut hidden: Vec<ObjectId> = common.to_vec();
        let grafts = match boundary {
            Some(b) => {
                commit_tips.extend(b.extra_wants.iter().copied());
                hidden.extend(b.extra_edges.iter().copied());
                &b.grafts
            }
            None => &HashSet::new(),
        };
        // Commits newest first by commit time, as git's `rev-list` walks (not gix's breadth
        // first): their trees are then read in the order a repack made their delta chains in, so
        // a small delta cache holds the bases the next trees need (git.git, clone without bitmap
        // or commit-graph, walk cache 100 MiB: 588 071 bases cached breadth first, 104 147 by
        // commit time; CPU 18.7 s, 9.2 s), and a repack's delta search breaks ties in this order.
        let mut history = None;
        let commits = if grafts.is_empty() {
            let mut commits = Vec::new();
            let noted = match self.commit_graph {
                None if !commit_tips.is_empty() => {
                    crate::graph::walk_noting_trees(self.repo, commit_tips.clone(), &hidden)?
                }
                _ => None,
            };
            if let Some((walked, trees)) = noted {
                self.commit_trees = trees;
                if self.keep_history {
                    history = walked
                        .iter()
                        .map(|(id, parents)| {
                            let (tree, time) = self.commit_trees.get(id).copied()?;
                            Some(crate::graph::Commit { id: *id, tree, parents: parents.clone(), time })
                        })
                        .collect();
                }
                commits = walked;
            } else if !commit_tips.is_empty() {
                // gix reads the commit-graph for the walk's parents only where ours verified.
                let walk = self
                    .repo
                    .rev_walk(commit_tips)
                    .with_hidden(hidden.iter().copied())
                    .use_commit_graph(self.commit_graph.is_some())
                    .sorting(gix::revision::walk::Sorting::ByCommitTime(
                        gix::traverse::commit::simple::CommitTimeOrder::NewestFirst,
                    ))
                    .all()?;
                for info in walk {
                    let info = info?;
                    commits.push((info.id, info.parent_ids.iter().copied().collect::<Vec<_>>()));
                }
            }
            commits
        } else {
            walk_with_grafts(self.repo, &commit_tips, &hidden, grafts)?
        };
        // The client has the boundary ("edge") commits: parents of what we send that we do not
        // send; their trees are held by the client, as git's `mark_edges_uninteresting` marks
        // them. Every edge is a parent of a commit a want reaches, so what it holds is readable
        // (a thin base needs no further check). Other common commits' trees are not walked: with
        // a thousand tag haves that would be most trees of the repository. A shallow request
        // marks every hidden commit's tree (git's aggressive edges), and those need the check.
        let selected: HashSet<ObjectId> = commits.iter().map(|(id, _)| *id).collect();
        let mut held: Vec<ObjectId> = Vec::new();
        let mut held_set = HashSet::new();
        let aggressive: &[ObjectId] = if grafts.is_empty() { &[] } else { &hidden };
        self.out.held_is_readable = grafts.is_empty();
        for id in aggressive.iter().chain(commits.iter().flat_map(|(_, parents)| parents.iter())) {
            if !selected.contains(id) && held_set.insert(*id) {
                held.push(*id);
            }
        }
        for commit in &held {
            if self.repo.find_header(*commit).is_err() {
                continue; // a parent missing from a shallow repository
            }
            self.out.client_has.insert(*commit);
            let tree = self.tree_of_commit(commit)?;
            self.mark_tree_held(tree)?;
        }
        for (id, _) in &commits {
            self.add(*id, Kind::Commit);
        }
        for (id, _) in &commits {
            let tree = self.tree_of_commit(id)?;
            self.add_tree(tree, false)?;
        }
        for (id, kind) in roots {
            match kind {
                Kind::Tree => self.add_tree(id, true)?,
                other => {
                    self.add(id, other);
                }
            }
        }
        if let Some(refs) = self.include_tags_of {
            self.include_tags(refs)?;
        }
        self.out.history = history;
        Ok(self.out)
    }
}

/// The commits reachable from `tips` and not from `hidden`, both sides walked as if each graft
/// had no parents (a shallow client's history ends there), newest first; with their (grafted)
/// parents. Costs a walk of the hidden side down to the client's shallow commits.
fn walk_with_grafts(
    repo: &gix::Repository,
    tips: &[ObjectId],
    hidden: &[ObjectId],
    grafts: &HashSet<ObjectId>,
) -> Result<Vec<(ObjectId, Vec<ObjectId>)>, GraphError> {
    let parents_of = |id: ObjectId| -> Result<(i64, Vec<ObjectId>), GraphError> {
        let commit = repo.find_commit(id).map_err(|_| GraphError::Missing(id))?;
        let time = commit.time().map_err(|_| GraphError::Missing(id))?.seconds;
        let parents = if grafts.contains(&id) { Vec::new() } else { commit.parent_ids().map(|p| p.detach()).collect() };
        Ok((time, parents))
    };
    let mut uninteresting = HashSet::new();
    let mut stack: Vec<ObjectId> = hidden.to_vec();
    while let Some(id) = stack.pop() {
        if uninteresting.insert(id) {
            stack.extend(parents_of(id)?.1);
        }
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue: std::collections::VecDeque<ObjectId> = tips.iter().copied().collect();
    while let Some(id) = queue.pop_front() {
        if uninteresting.contains(&id) || !seen.insert(id) {
            continue;
        }
        let (time, parents) = parents_of(id)?;
        queue.extend(parents.iter().copied());
        out.push((time, id, parents));
    }
    out.sort_by_key(|entry| std::cmp::Reverse(entry.0)); // stable: ties keep the breadth-first order
    Ok(out.into_iter().map(|(_, id, parents)| (id, parents)).collect())
}

/// Select the objects to send for `request`: with the pack's bitmap when there is one and the
/// request is one it can answer (no shallow boundary; no filter but `blob:none`), else by walking.
pub fn select(
    repo: &gix::Repository,
    request: &Request<'_>,
    bitmap: Option<&std::sync::Arc<PackBitmap>>,
) -> Result<Selection, GraphError> {
    let plain_filter = request.filter.is_none() || request.filter == (Filter { no_blobs: true, ..Filter::default() });
    if let Some(bitmap) = bitmap
        && request.boundary.is_none()
        && plain_filter
        && let Some(selection) = select_with_bitmap(repo, request, bitmap)?
    {
        return Ok(selection);
    }
    select_by_walking(repo, request)
}

/// The walk: what [`select`] does without a usable bitmap.
pub fn select_by_walking(repo: &gix::Repository, request: &Request<'_>) -> Result<Selection, GraphError> {
    let walk_repo = crate::repo::with_walk_cache(repo);
    let mut walker = Walker::new(&walk_repo);
    walker.filter = request.filter;
    walker.progress = request.progress;
    walker.commit_graph = request.commit_graph;
    walker.include_tags_of = request.include_tag.then_some(request.refs);
    walker.run(request.wants, request.common, request.boundary)
}

/// Everything reachable from `tips` as a selection for a client that has nothing: in walk order
/// (commits, then trees and blobs as met), with the name hash of each tree's and blob's path —
/// what a repack writes and searches for deltas. Commits newest first by commit time, as git's
/// repack walks them. `tell` hears how many objects are selected, every few thousand.
pub fn everything_reachable(
    repo: &gix::Repository,
    tips: &[ObjectId],
    tell: Option<&dyn Fn(usize)>,
) -> Result<Selection, GraphError> {
    let walk_repo = crate::repo::with_walk_cache(repo);
    let mut walker = Walker::new(&walk_repo);
    walker.name_hashes = true;
    walker.keep_history = true;
    walker.progress = tell;
    walker.run(tips, &[], None)
}
