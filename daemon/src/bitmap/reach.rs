//! The reach walk: what tips reach, from the bitmaps of covered commits and a walk of the rest —
//! the commits no bitmap covers, newest first, then their trees, each object's bit tested before
//! it is decoded or descended into, and a tree's entries unchanged from the version walked last
//! at its path not looked at again ([`crate::graph::unchanged`]).

use gix_hash::ObjectId;
use gix_object::{Find, Kind};

use super::{Bits, Depth, PackBitmap, Reach};
use crate::graph::TreePath;
use crate::graph::unchanged::{LastAtPath, changed_entries};

impl PackBitmap {
    pub(super) fn walk(
        &self,
        repo: &gix::Repository,
        tips: &[ObjectId],
        seen: Option<&Reach>,
        depth: Depth,
    ) -> Result<Reach, crate::graph::GraphError> {
        use crate::graph::GraphError;
        use std::collections::BinaryHeap;
        let mut reach = Reach {
            bits: Bits::new(self.len()),
            extra: std::collections::HashMap::new(),
            extra_order: Vec::new(),
            met: Vec::new(),
            names: Default::default(),
            covered: Vec::new(),
        };
        let in_seen = |pos: Option<usize>, id: &gix_hash::oid| seen.is_some_and(|seen| seen.has_at(pos, id));
        let mut buf = Vec::new();
        // Tips: tags are peeled (each tag object is reached), commits go to the commit walk,
        // trees and blobs to the object walk.
        let mut objects: Vec<(ObjectId, Kind)> = Vec::new();
        let mut queue: BinaryHeap<(i64, ObjectId)> = BinaryHeap::new();
        let mut queued = std::collections::HashSet::new();
        // Each commit is decoded once, when it is queued: its parents wait here.
        let mut parents_of: std::collections::HashMap<ObjectId, Vec<ObjectId>> = std::collections::HashMap::new();
        let commit_time = |id: ObjectId, _: &mut Vec<u8>| -> Result<(i64, Vec<ObjectId>), GraphError> {
            let info = self.commits.get(repo, id)?;
            Ok((info.time, info.parents.clone()))
        };
        for tip in tips {
            let mut id = *tip;
            loop {
                let kind = match self.pos(&id) {
                    Some(pos) => self.kind_at(pos),
                    None => repo.find_header(id).map_err(|_| GraphError::Missing(id))?.kind(),
                };
                match kind {
                    Kind::Tag => {
                        self.mark(&mut reach, id, Kind::Tag, depth == Depth::Named);
                        let data = repo.objects.try_find(&id, &mut buf)?.ok_or(GraphError::Missing(id))?;
                        id = gix_object::TagRefIter::from_bytes(data.data, id.kind())
                            .target_id()
                            .map_err(|_| GraphError::Missing(id))?;
                    }
                    Kind::Commit => {
                        if queued.insert(id) {
                            let (time, parents) = commit_time(id, &mut buf)?;
                            parents_of.insert(id, parents);
                            queue.push((time, id));
                        }
                        break;
                    }
                    kind => {
                        objects.push((id, kind));
                        break;
                    }
                }
            }
        }
        // Commits, newest first.
        let mut uncovered = Vec::new();
        while let Some((_, id)) = queue.pop() {
            let pos = self.pos(&id);
            if in_seen(pos, &id) {
                reach.met.push(id);
                continue;
            }
            if let Some(pos) = pos {
                if reach.bits.get(pos) {
                    continue;
                }
                if let Some(closure) = self.closure(&id) {
                    reach.bits.or(&closure);
                    reach.covered.push(id);
                    continue;
                }
            } else if reach.extra.contains_key(&id) {
                continue;
            }
            self.mark(&mut reach, id, Kind::Commit, depth == Depth::Named);
            for parent in parents_of.remove(&id).unwrap_or_default() {
                let pos = self.pos(&parent);
                let done = reach.has_at(pos, &parent);
                if !done && in_seen(pos, &parent) {
                    if queued.insert(parent) {
                        reach.met.push(parent);
                    }
                    continue;
                }
                if !done && queued.insert(parent) {
                    let (time, grandparents) = commit_time(parent, &mut buf)?;
                    parents_of.insert(parent, grandparents);
                    queue.push((time, parent));
                }
            }
            uncovered.push(id);
        }
        if depth == Depth::Commits {
            tracing::debug!(
                tips = tips.len(),
                commits = queued.len(),
                uncovered = uncovered.len(),
                met = reach.met.len(),
                "bitmap reach of commits"
            );
            return Ok(reach);
        }
        // The trees of uncovered commits, and tips that are trees or blobs; each with git's name
        // hash of its path (`None`: a root).
        for commit in &uncovered {
            objects.push((self.commits.get(repo, *commit)?.tree, Kind::Tree));
        }
        // A stack: what is pushed last is walked first, so roots and a tree's entries go in
        // reversed, and the walk meets them as git's rev-list does (the newest commit's tree
        // first, each tree's entries in order, depth first).
        let mut stack: Vec<(ObjectId, Kind, TreePath)> =
            objects.into_iter().rev().map(|(id, k)| (id, k, TreePath::ROOT)).collect();
        let mut children: Vec<(ObjectId, Kind, TreePath)> = Vec::new();
        let named = depth == Depth::Named;
        let mut decoded = 0usize;
        // What this walk met already (git's SEEN flag): a hash test, where looking the id up in
        // the pack again would be a search — a changed tree's unchanged entries come up once
        // per uncovered commit, and are tested as the tree is read: neither stacked nor named
        // again. An entry stacked twice before it is met is tested as it comes off the stack.
        let mut seen: gix::hashtable::HashSet<ObjectId> = gix::hashtable::HashSet::default();
        let mut last_at_path = LastAtPath::default();
        while let Some((id, kind, path)) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let pos = self.pos(&id);
            if in_seen(pos, &id) || reach.has_at(pos, &id) {
                continue;
            }
            // A blob needs no decoding: its bit (or its entry outside the pack) is all there is to
            // it, and the tree naming it said it is one. The pack writer finds it, or fails.
            if kind == Kind::Blob || pos.is_some_and(|pos| self.kind_at(pos) == Kind::Blob) {
                match pos {
                    Some(pos) => reach.bits.set(pos),
                    None => {
                        reach.add_extra(id, Kind::Blob, named);
                        if named {
                            reach.names.insert(id, path);
                        }
                    }
                }
                continue;
            }
            decoded += 1;
            let data = repo.objects.try_find(&id, &mut buf)?.ok_or(GraphError::Missing(id))?;
            #[cfg(feature = "test-hooks")]
            if data.kind == Kind::Blob {
                super::BLOBS_INFLATED_BY_REACH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            match pos {
                Some(pos) => reach.bits.set(pos),
                None => {
                    reach.add_extra(id, data.kind, named);
                    if named && data.kind == Kind::Tree {
                        reach.names.insert(id, path);
                    }
                }
            }
            if data.kind == Kind::Tree {
                let walked = last_at_path.take(path.full);
                for entry in changed_entries(data.data, &walked, id.kind()) {
                    let entry = entry.map_err(|_| GraphError::Missing(id))?;
                    #[cfg(feature = "test-hooks")]
                    super::ENTRIES_TESTED_BY_REACH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if entry.mode.is_commit() || seen.contains(entry.oid) {
                        continue;
                    }
                    let kind = if entry.mode.is_tree() { Kind::Tree } else { Kind::Blob };
                    // Trees by their path (the next version at it compares with this one), and
                    // with names, every entry.
                    let path = if named {
                        #[cfg(feature = "test-hooks")]
                        super::ENTRIES_NAMED_BY_REACH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        path.child(entry.filename)
                    } else if kind == Kind::Tree {
                        path.child(entry.filename)
                    } else {
                        TreePath::ROOT
                    };
                    children.push((entry.oid.to_owned(), kind, path));
                }
                stack.extend(children.drain(..).rev());
                last_at_path.keep(path.full, std::mem::replace(&mut buf, walked));
            } else if data.kind == Kind::Tag {
                let mut targets = Vec::new();
                crate::graph::push_children(id, data.kind, data.data, &mut targets)?;
                stack.extend(targets.into_iter().map(|(id, kind)| (id, kind, TreePath::ROOT)));
            }
        }
        tracing::debug!(
            tips = tips.len(),
            commits = queued.len(),
            uncovered = uncovered.len(),
            met = reach.met.len(),
            decoded,
            "bitmap reach"
        );
        Ok(reach)
    }
}
