//! Negotiation shared by v0 and v2: which haves are common, and when the server may say "ready"
//! (git's `ok_to_give_up`: every want reaches a common commit, walking no older than the oldest
//! common commit).

use std::collections::{HashSet, VecDeque};

use gix_hash::ObjectId;
use gix_object::Kind;

use crate::error::{ProtocolError, ServeError};

/// What we know of one `have`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Have {
    /// We have this commit too.
    Common,
    /// We do not have it (the client is ahead there).
    Unknown,
}

/// Classify one have. A have naming an object we hold that is not a commit is refused.
pub fn check_have(repo: &gix::Repository, id: ObjectId) -> Result<Have, ServeError> {
    match repo.find_header(id) {
        Err(_) => Ok(Have::Unknown),
        Ok(header) if header.kind() == Kind::Commit => Ok(Have::Common),
        Ok(_) => Err(ProtocolError::HaveNotCommit(id).into()),
    }
}

/// The negotiation state of one request (stateless: rebuilt from each request's lines).
#[derive(Debug, Default)]
pub struct Common {
    /// Common commits, in the order the client named them, without repeats.
    pub commits: Vec<ObjectId>,
    set: HashSet<ObjectId>,
}

impl Common {
    /// Record a have; returns what it is.
    pub fn have(&mut self, repo: &gix::Repository, id: ObjectId) -> Result<Have, ServeError> {
        if self.set.contains(&id) {
            return Ok(Have::Common);
        }
        let have = check_have(repo, id)?;
        if have == Have::Common {
            self.set.insert(id);
            self.commits.push(id);
        }
        Ok(have)
    }

    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
    }

    /// git's `ok_to_give_up`: true when every want reaches a common commit.
    pub fn ready(&self, repo: &gix::Repository, wants: &[ObjectId]) -> Result<bool, ServeError> {
        if self.commits.is_empty() {
            return Ok(false);
        }
        let mut cutoff = i64::MAX;
        for id in &self.commits {
            cutoff = cutoff.min(commit_time(repo, *id)?);
        }
        // Commits already known to reach a common commit.
        let mut reaches: HashSet<ObjectId> = self.set.clone();
        for want in wants {
            let Some(start) = crate::repo::peel_to_commit(repo, *want)? else {
                continue; // a tree or blob want needs no common commit
            };
            if !reaches_common(repo, start, cutoff, &mut reaches)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn commit_time(repo: &gix::Repository, id: ObjectId) -> Result<i64, ServeError> {
    let commit = repo.find_commit(id).map_err(|_| ServeError::MissingObject(id))?;
    Ok(commit.time().map_err(|_| ServeError::MissingObject(id))?.seconds)
}

/// Breadth-first from `start` through parents no older than `cutoff`; true once a commit in
/// `reaches` is met. Every commit on a successful walk is added to `reaches`.
fn reaches_common(repo: &gix::Repository, start: ObjectId, cutoff: i64, reaches: &mut HashSet<ObjectId>) -> Result<bool, ServeError> {
    let mut queue = VecDeque::from([start]);
    let mut visited = HashSet::from([start]);
    while let Some(id) = queue.pop_front() {
        if reaches.contains(&id) {
            reaches.extend(visited);
            return Ok(true);
        }
        let commit = repo.find_commit(id).map_err(|_| ServeError::MissingObject(id))?;
        if commit.time().map_err(|_| ServeError::MissingObject(id))?.seconds < cutoff {
            continue;
        }
        for parent in commit.parent_ids() {
            let parent = parent.detach();
            if visited.insert(parent) {
                queue.push_back(parent);
            }
        }
    }
    Ok(false)
}
