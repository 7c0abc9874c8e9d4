//! Negotiation shared by v0 and v2: which haves are common, and when the server may say "ready"
//! (git's `ok_to_give_up`: every want reaches a common commit, walking no older than the oldest
//! common commit).

use std::collections::HashSet;

use gix_hash::ObjectId;
use gix_object::Kind;

use crate::protocol::upload::Have;
use crate::serve_error::ServeError;

/// What a have we hold stands for.
enum Held {
    Commit,
    /// An annotated tag, and the commit it peels to (if it peels to one).
    Tag(Option<ObjectId>),
    /// A tree or a blob.
    Other,
}

/// Classify one have; `None` when we do not hold it. An object of the bitmapped pack is held
/// and its type is in the bitmap's type bits: no object header read (a stateless fetch names
/// hundreds of haves per round, most of them in that pack).
fn check_have(
    repo: &gix::Repository,
    bitmap: Option<&crate::bitmap::PackBitmap>,
    id: ObjectId,
) -> Result<Option<Held>, ServeError> {
    let kind = match bitmap.and_then(|b| b.kind_of(&id)) {
        Some(kind) => kind,
        None => match repo.find_header(id) {
            Err(_) => return Ok(None),
            Ok(header) => header.kind(),
        },
    };
    Ok(Some(match kind {
        Kind::Commit => Held::Commit,
        Kind::Tag => Held::Tag(crate::graph::peel_to_commit(repo, id)?),
        _ => Held::Other,
    }))
}

/// The negotiation state of one request (stateless: rebuilt from each request's lines).
#[derive(Default)]
pub struct Common {
    /// Common commits named as haves, in the order the client named them, without repeats: what
    /// readiness walks to (git's `THEY_HAVE`, set by commit haves only).
    pub commits: Vec<ObjectId>,
    /// Commits that annotated tags named as haves peel to: hidden from selection like
    /// `commits` (git passes every have to pack-objects as `^<id>`), not used for readiness.
    pub peeled: Vec<ObjectId>,
    /// Every have we hold, in the order named, without repeats: what is acknowledged.
    pub acked: Vec<ObjectId>,
    set: HashSet<ObjectId>,
    commit_set: HashSet<ObjectId>,
    /// The repository's pack bitmap, if it has one: the types of the objects it covers.
    kinds: Option<std::sync::Arc<crate::bitmap::PackBitmap>>,
}

impl Common {
    /// Negotiation that takes the types of haves in the bitmapped pack from `bitmap`.
    pub fn with_kinds(bitmap: Option<std::sync::Arc<crate::bitmap::PackBitmap>>) -> Self {
        Common { kinds: bitmap, ..Common::default() }
    }

    /// Record a have; returns what it is.
    pub fn have(&mut self, repo: &gix::Repository, id: ObjectId) -> Result<Have, ServeError> {
        if self.set.contains(&id) {
            return Ok(Have::Common);
        }
        let Some(held) = check_have(repo, self.kinds.as_deref(), id)? else {
            return Ok(Have::Unknown);
        };
        self.set.insert(id);
        self.acked.push(id);
        match held {
            Held::Commit => {
                self.commit_set.insert(id);
                self.commits.push(id);
            }
            Held::Tag(Some(commit)) if !self.peeled.contains(&commit) => self.peeled.push(commit),
            Held::Tag(_) | Held::Other => {}
        }
        Ok(Have::Common)
    }

    /// The commits selection hides: common commits, then tag haves' commits not among them.
    pub fn into_hidden(mut self) -> Vec<ObjectId> {
        for commit in std::mem::take(&mut self.peeled) {
            if !self.commit_set.contains(&commit) {
                self.commits.push(commit);
            }
        }
        self.commits
    }

    /// Nothing acknowledged yet (git: no `have_obj`).
    pub fn is_empty(&self) -> bool {
        self.acked.is_empty()
    }

    /// git's `ok_to_give_up`: true when every want reaches a common commit, walking no older
    /// than the oldest common commit. As git's `can_all_from_reach_with_flag`: one depth-first
    /// walk per want, first parents first, over marks shared by all wants — a commit is
    /// looked at once per call however many wants lead to it, and is counted as reaching only
    /// when a walk through it met a common commit.
    pub fn ready(
        &self,
        repo: &gix::Repository,
        commits: &crate::graph::CommitCache,
        wants: &[ObjectId],
    ) -> Result<bool, ServeError> {
        if self.commits.is_empty() {
            return Ok(false);
        }
        let mut cutoff = i64::MAX;
        for id in &self.commits {
            cutoff = cutoff.min(commits.get(repo, *id)?.time);
        }
        // git's RESULT (and the common commits, its THEY_HAVE): known to reach a common commit.
        let mut reaches: gix::hashtable::HashSet<ObjectId> = self.commit_set.iter().copied().collect();
        // With a bitmap, a commit that has one reaches a common commit exactly when its closure
        // holds one: one bit test instead of the walk below it, which went down to the oldest
        // common commit's date and decoded every commit on the way (hundreds per round on a
        // real repository; with dates that do not go back in time, the same answer).
        let common_bits = self.kinds.as_deref().map(|bitmap| {
            let mut bits = crate::bitmap::Bits::new(bitmap.len());
            for id in &self.commits {
                if let Some(pos) = bitmap.pos(id) {
                    bits.set(pos);
                }
            }
            (bitmap, bits)
        });
        let covered = |id: &ObjectId| common_bits.as_ref().and_then(|(bitmap, bits)| bitmap.closure_meets(id, bits));
        // git's assign flag: met by some walk of this call.
        let mut visited: gix::hashtable::HashSet<ObjectId> = gix::hashtable::HashSet::default();
        let mut stack: Vec<ObjectId> = Vec::new();
        for want in wants {
            let Some(start) = crate::graph::peel_to_commit(repo, *want)? else {
                continue; // a tree or blob want needs no common commit
            };
            if reaches.contains(&start) {
                continue;
            }
            if !visited.insert(start) {
                return Ok(false); // an earlier walk went through it and met no common commit
            }
            stack.push(start);
            while let Some(&top) = stack.last() {
                if reaches.contains(&top) {
                    stack.pop();
                    if let Some(&child) = stack.last() {
                        reaches.insert(child);
                    }
                    continue;
                }
                if let Some(meets) = covered(&top) {
                    stack.pop();
                    if meets {
                        reaches.insert(top);
                        if let Some(&child) = stack.last() {
                            reaches.insert(child);
                        }
                    }
                    continue;
                }
                let info = commits.get(repo, top)?;
                let mut descended = false;
                for &parent in &info.parents {
                    if reaches.contains(&parent) {
                        reaches.insert(top);
                        break;
                    }
                    if visited.insert(parent) {
                        // A parent with a bitmap is answered by it, its date unread.
                        let has_bitmap = common_bits.as_ref().is_some_and(|(bitmap, _)| bitmap.has_closure(&parent));
                        if !has_bitmap && commits.get(repo, parent)?.time < cutoff {
                            continue;
                        }
                        stack.push(parent);
                        descended = true;
                        break;
                    }
                }
                if !descended {
                    stack.pop();
                    if reaches.contains(&top)
                        && let Some(&child) = stack.last()
                    {
                        reaches.insert(child);
                    }
                }
            }
            if !reaches.contains(&start) {
                tracing::debug!(wants = wants.len(), visited = visited.len(), ready = false, "ready walk");
                return Ok(false);
            }
        }
        tracing::debug!(wants = wants.len(), visited = visited.len(), ready = true, "ready walk");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::fixture;

    #[test]
    fn commits_tags_and_trees_we_hold_are_common_and_unknown_ids_are_not() {
        let (_dir, repo, c) = fixture::history(&[&[], &[0], &[1]]);
        let tag = fixture::tag(&repo, c[0], "v0");
        let tree = repo.empty_tree().id;
        let mut common = Common::default();
        let unknown = ObjectId::from_hex(b"1234567890123456789012345678901234567890").unwrap();
        assert_eq!(common.have(&repo, unknown).unwrap(), Have::Unknown);
        assert_eq!(common.have(&repo, c[1]).unwrap(), Have::Common);
        assert_eq!(common.have(&repo, tag).unwrap(), Have::Common);
        assert_eq!(common.have(&repo, tree).unwrap(), Have::Common);
        assert_eq!(common.have(&repo, c[1]).unwrap(), Have::Common, "a repeat");
        assert_eq!(common.acked, vec![c[1], tag, tree], "acknowledged once each, in order");
        assert_eq!(common.commits, vec![c[1]], "only commit haves count for readiness");
        assert_eq!(common.into_hidden(), vec![c[1], c[0]], "the tag's commit is hidden too");
    }

    #[test]
    fn ready_when_every_want_reaches_a_common_commit() {
        // 0 - 1 - 2 (want a)   and   0 - 3 (want b), a side branch from the root.
        let (_dir, repo, c) = fixture::history(&[&[], &[0], &[1], &[0]]);
        let cache = crate::graph::CommitCache::default();
        let mut common = Common::default();
        assert!(!common.ready(&repo, &cache, &[c[2]]).unwrap(), "nothing common yet");
        common.have(&repo, c[1]).unwrap();
        assert!(common.ready(&repo, &cache, &[c[2]]).unwrap());
        assert!(!common.ready(&repo, &cache, &[c[2], c[3]]).unwrap(), "the side branch does not reach 1");
        common.have(&repo, c[0]).unwrap();
        assert!(common.ready(&repo, &cache, &[c[2], c[3]]).unwrap());
    }

    #[test]
    fn a_commit_that_a_ready_walk_only_passed_by_does_not_count_as_reaching_a_common_commit() {
        // 0 (common) and 1 (a second root) merged in 2 (want a); 3 (want b) on top of 1 alone.
        // The walk from 2 meets 1 on its way; 1 reaches no common commit, so neither does 3.
        let (_dir, repo, c) = fixture::history(&[&[], &[], &[0, 1], &[1]]);
        let cache = crate::graph::CommitCache::default();
        let mut common = Common::default();
        common.have(&repo, c[0]).unwrap();
        assert!(common.ready(&repo, &cache, &[c[2]]).unwrap());
        assert!(!common.ready(&repo, &cache, &[c[2], c[3]]).unwrap(), "3 reaches only the second root");
        assert!(!common.ready(&repo, &cache, &[c[3], c[2]]).unwrap(), "in either order");
    }

    #[test]
    fn with_a_bitmap_readiness_is_what_the_walk_says() {
        // 0..59 a line; 60..79 a branch off 30; 80 merges 59 and 79; 81..99 on top.
        let mut parents: Vec<Vec<usize>> = vec![vec![]];
        parents.extend((1..60).map(|i| vec![i - 1]));
        parents.push(vec![30]);
        parents.extend((61..80).map(|i| vec![i - 1]));
        parents.push(vec![59, 79]);
        parents.extend((81..100).map(|i| vec![i - 1]));
        let (dir, repo, c) = fixture::history(&parents.iter().map(Vec::as_slice).collect::<Vec<_>>());
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git").arg("-C").arg(dir.path()).args(args).output().unwrap();
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        };
        for (name, at) in
            [("refs/heads/main", 99), ("refs/heads/side", 79), ("refs/heads/old", 10), ("refs/heads/mid", 45)]
        {
            git(&["update-ref", name, &c[at].to_string()]);
        }
        git(&["repack", "-adbq"]);
        let idx = git(&["rev-parse", "--git-path", "objects/pack"]);
        let pack_dir = dir.path().join(idx.trim());
        let idx = std::fs::read_dir(&pack_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .unwrap();
        let bitmap = std::sync::Arc::new(
            crate::bitmap::PackBitmap::open(&idx, repo.object_hash()).unwrap().expect("git wrote a bitmap"),
        );
        assert!(bitmap.has_closure(&c[99]) && bitmap.has_closure(&c[79]));
        let repo = gix::open(dir.path()).unwrap();
        let (mut ready, mut not_ready) = (0, 0);
        for haves in [&[][..], &[0], &[10], &[50], &[70], &[79], &[95], &[45, 70], &[59]] {
            for wants in [&[99][..], &[79], &[99, 79], &[40], &[45], &[10, 99]] {
                let wants: Vec<ObjectId> = wants.iter().map(|i| c[*i]).collect();
                let (mut plain, mut fast) = (Common::default(), Common::with_kinds(Some(bitmap.clone())));
                for have in haves {
                    plain.have(&repo, c[*have]).unwrap();
                    fast.have(&repo, c[*have]).unwrap();
                }
                let walked = plain.ready(&repo, &crate::graph::CommitCache::default(), &wants).unwrap();
                let by_bitmap = fast.ready(&repo, &crate::graph::CommitCache::default(), &wants).unwrap();
                assert_eq!(by_bitmap, walked, "haves {haves:?}, wants {wants:?}");
                if walked { ready += 1 } else { not_ready += 1 }
            }
        }
        assert!(ready > 10 && not_ready > 10, "{ready} ready, {not_ready} not");
    }
}
