//! Shallow boundaries (object selection layer): which commits become the client's new shallow
//! commits for `deepen <n>`, `deepen-since`, `deepen-not` and `deepen-relative`, which of the
//! client's shallow commits it may now unshallow, and what that means for the walk that follows
//! (grafts: commits walked as if they had no parents; extra wants: the parents of unshallowed
//! commits; extra edges: the unshallowed commits themselves). The results are git's
//! (`get_shallow_commits`, `get_shallow_commits_by_rev_list` and upload-pack's `deepen`), so a
//! client's `.git/shallow` comes out the same as from `git upload-pack`.

use std::collections::{HashMap, HashSet, VecDeque};

use gix_hash::ObjectId;

use crate::error::ProtocolError;
use crate::graph::GraphError;

/// `deepen 2147483647`: what `git fetch --unshallow` sends.
pub const INFINITE_DEPTH: u32 = 0x7fff_ffff;

/// The shallow part of a request, as parsed (deepen-not already resolved to visible refs).
#[derive(Debug, Default, Clone)]
pub struct Deepen {
    pub depth: Option<u32>,
    pub since: Option<i64>,
    pub not: Vec<ObjectId>,
    pub relative: bool,
    /// The client's `shallow` lines naming commits it may read (others are ignored, as git
    /// ignores those it does not have).
    pub client_shallows: Vec<ObjectId>,
}

impl Deepen {
    /// A deepen request (git's `send_shallow_list` returns 1): the reply carries a shallow list.
    pub fn deepens(&self) -> bool {
        self.depth.is_some() || self.since.is_some() || !self.not.is_empty()
    }

    /// Anything shallow about this request at all.
    pub fn is_active(&self) -> bool {
        self.deepens() || !self.client_shallows.is_empty()
    }

    /// `deepen` with `deepen-since`/`deepen-not` is refused, as git does.
    pub fn check(&self) -> Result<(), ProtocolError> {
        if self.depth.is_some() && (self.since.is_some() || !self.not.is_empty()) {
            return Err(ProtocolError::Shallow(
                "deepen and deepen-since (or deepen-not) cannot be used together".into(),
            ));
        }
        Ok(())
    }
}

/// Cutting history failed: a commit missing or unreadable, or a cut the client asked for that
/// selects nothing.
#[derive(Debug, thiserror::Error)]
pub enum ShallowError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// Parse `deepen <n>`: a positive number.
pub fn parse_depth(value: &str) -> Result<u32, ProtocolError> {
    match value.parse::<i64>() {
        Ok(n) if n > 0 && n <= i64::from(INFINITE_DEPTH) => Ok(n as u32),
        _ => Err(ProtocolError::Shallow(format!("invalid deepen: {}", crate::error::quoted(value, 40)))),
    }
}

/// Parse `deepen-since <seconds>`.
pub fn parse_since(value: &str) -> Result<i64, ProtocolError> {
    match value.parse::<i64>() {
        Ok(n) if n != -1 => Ok(n),
        _ => Err(ProtocolError::Shallow(format!("invalid deepen-since: {}", crate::error::quoted(value, 40)))),
    }
}

/// What a shallow request changes, for the reply and for the walk.
#[derive(Debug, Default)]
pub struct Boundary {
    /// `shallow <id>` lines: the client's new shallow commits.
    pub shallow: Vec<ObjectId>,
    /// `unshallow <id>` lines: client shallow commits whose parents now come along.
    pub unshallow: Vec<ObjectId>,
    /// Walked as parentless: every client shallow commit and every new one.
    pub grafts: HashSet<ObjectId>,
    /// Parents of unshallowed commits: wanted in addition to the client's wants.
    pub extra_wants: Vec<ObjectId>,
    /// Unshallowed commits: the client has them, so they bound the walk like common commits.
    pub extra_edges: Vec<ObjectId>,
}

struct Commits<'r> {
    repo: &'r gix::Repository,
    cache: HashMap<ObjectId, (i64, Vec<ObjectId>)>,
}

impl Commits<'_> {
    fn get(&mut self, id: ObjectId) -> Result<&(i64, Vec<ObjectId>), ShallowError> {
        if !self.cache.contains_key(&id) {
            let commit = self.repo.find_commit(id).map_err(|_| GraphError::Missing(id))?;
            let time = commit.time().map_err(|_| GraphError::Missing(id))?.seconds;
            let parents = commit.parent_ids().map(|p| p.detach()).collect();
            self.cache.insert(id, (time, parents));
        }
        Ok(&self.cache[&id])
    }

    fn parents(&mut self, id: ObjectId) -> Result<Vec<ObjectId>, ShallowError> {
        Ok(self.get(id)?.1.clone())
    }
}

/// Compute the boundary for `wants` (peeled to commits; others play no part). The client's
/// shallow commits must already be narrowed to those it may read: `deepen-relative` walks from
/// them and unshallowing sends their parents.
pub fn compute(repo: &gix::Repository, wants: &[ObjectId], deepen: &Deepen) -> Result<Boundary, ShallowError> {
    let mut commits = Commits { repo, cache: HashMap::new() };
    let client: HashSet<ObjectId> = deepen.client_shallows.iter().copied().collect();
    let mut out = Boundary::default();
    // (result in git's order, the commits that are not shallow)
    let (result, not_shallow): (Vec<ObjectId>, HashSet<ObjectId>) = if let Some(depth) = deepen.depth {
        if depth == INFINITE_DEPTH {
            (Vec::new(), client.clone())
        } else if deepen.relative {
            by_depth(&mut commits, &deepen.client_shallows, depth.saturating_add(1))?
        } else {
            by_depth(&mut commits, wants, depth)?
        }
    } else if deepen.since.is_some() || !deepen.not.is_empty() {
        by_rev_list(&mut commits, wants, deepen.since, &deepen.not)?
    } else {
        // Only the client's shallow lines: the walk must respect them, nothing is sent.
        out.grafts = client;
        return Ok(out);
    };
    for id in result {
        if !client.contains(&id) && !not_shallow.contains(&id) {
            out.shallow.push(id);
            out.grafts.insert(id);
        }
    }
    for id in &deepen.client_shallows {
        if not_shallow.contains(id) {
            out.unshallow.push(*id);
            out.extra_wants.extend(commits.parents(*id)?);
            out.extra_edges.push(*id);
        }
        out.grafts.insert(*id);
    }
    Ok(out)
}

/// git's `get_shallow_commits`: depth-first from each head, a commit at `depth` (the head is at
/// 1) is shallow unless it is also reached by a shorter path.
fn by_depth(
    commits: &mut Commits<'_>,
    heads: &[ObjectId],
    depth: u32,
) -> Result<(Vec<ObjectId>, HashSet<ObjectId>), ShallowError> {
    let mut depths: HashMap<ObjectId, u32> = HashMap::new();
    let mut result = Vec::new();
    let mut not_shallow = HashSet::new();
    let mut stack: Vec<ObjectId> = Vec::new();
    let mut heads = heads.iter();
    let mut current: Option<(ObjectId, u32)> = None;
    loop {
        let (commit, mut cur_depth) = match current.take() {
            Some(c) => c,
            None => {
                if let Some(head) = heads.next() {
                    let Some(commit) = crate::graph::peel_to_commit(commits.repo, *head)? else { continue };
                    depths.insert(commit, 0);
                    (commit, 0)
                } else if let Some(commit) = stack.pop() {
                    (commit, depths[&commit])
                } else {
                    break;
                }
            }
        };
        cur_depth += 1;
        if cur_depth >= depth {
            result.push(commit);
            continue;
        }
        not_shallow.insert(commit);
        let parents = commits.parents(commit)?;
        let last = parents.len().saturating_sub(1);
        for (i, parent) in parents.into_iter().enumerate() {
            match depths.get(&parent) {
                Some(d) if *d <= cur_depth => continue,
                _ => {
                    depths.insert(parent, cur_depth);
                }
            }
            if i < last {
                stack.push(parent);
            } else {
                current = Some((parent, cur_depth));
            }
        }
    }
    result.reverse(); // git prepends each to its list
    Ok((result, not_shallow))
}

/// git's `get_shallow_commits_by_rev_list` for `rev-list [--max-age=<since>] --not <refs> --not
/// <wants>`: the commits listed are not shallow; those with a parent outside the list are.
fn by_rev_list(
    commits: &mut Commits<'_>,
    wants: &[ObjectId],
    since: Option<i64>,
    not: &[ObjectId],
) -> Result<(Vec<ObjectId>, HashSet<ObjectId>), ShallowError> {
    let mut excluded = HashSet::new();
    let mut stack: Vec<ObjectId> = Vec::new();
    for id in not {
        if let Some(c) = crate::graph::peel_to_commit(commits.repo, *id)? {
            stack.push(c);
        }
    }
    while let Some(id) = stack.pop() {
        if excluded.insert(id) {
            stack.extend(commits.parents(id)?);
        }
    }
    let mut listed = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::new();
    for id in wants {
        if let Some(c) = crate::graph::peel_to_commit(commits.repo, *id)? {
            queue.push_back(c);
        }
    }
    while let Some(id) = queue.pop_front() {
        if excluded.contains(&id) || !seen.insert(id) {
            continue;
        }
        let (time, parents) = commits.get(id)?.clone();
        if since.is_some_and(|since| time < since) {
            continue; // older than asked: neither listed nor walked past
        }
        listed.push(id);
        queue.extend(parents);
    }
    if listed.is_empty() {
        return Err(ProtocolError::Shallow("no commits selected for shallow requests".into()).into());
    }
    let listed_set: HashSet<ObjectId> = listed.iter().copied().collect();
    let mut result = Vec::new();
    for id in &listed {
        if commits.parents(*id)?.iter().any(|p| !listed_set.contains(p)) {
            result.push(*id);
        }
    }
    let border: HashSet<ObjectId> = result.iter().copied().collect();
    let not_shallow = listed_set.difference(&border).copied().collect();
    Ok((result, not_shallow))
}

/// `deepen-not <name>`: the one visible ref the name means under git's rev-parse rules.
pub fn resolve_deepen_not(refs: &crate::repo::RefSnapshot, name: &str) -> Result<ObjectId, ProtocolError> {
    match refs.dwim(name).as_slice() {
        [(_, id)] => Ok(*id),
        [] => Err(ProtocolError::Shallow(format!("deepen-not is not a ref: {}", crate::error::quoted(name, 100)))),
        _ => Err(ProtocolError::Shallow(format!("ambiguous deepen-not: {}", crate::error::quoted(name, 100)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::fixture;

    #[test]
    fn depths_are_positive_and_at_most_infinite_and_since_is_a_number() {
        assert_eq!(parse_depth("1").unwrap(), 1);
        assert_eq!(parse_depth("2147483647").unwrap(), INFINITE_DEPTH);
        for bad in ["0", "-3", "2147483648", "x", ""] {
            assert!(parse_depth(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_since("1700000000").unwrap(), 1_700_000_000);
        assert!(parse_since("-1").is_err());
        assert!(parse_since("yesterday").is_err());
    }

    #[test]
    fn deepen_with_since_or_not_is_refused() {
        let by_depth = Deepen { depth: Some(1), ..Deepen::default() };
        assert!(by_depth.check().is_ok() && by_depth.deepens());
        assert!(Deepen { since: Some(5), ..by_depth.clone() }.check().is_err());
        assert!(Deepen { not: vec![ObjectId::null(gix_hash::Kind::Sha1)], ..by_depth }.check().is_err());
        let client_only = Deepen { client_shallows: vec![ObjectId::null(gix_hash::Kind::Sha1)], ..Deepen::default() };
        assert!(!client_only.deepens() && client_only.is_active());
    }

    #[test]
    fn deepen_not_names_exactly_one_visible_ref() {
        let refs = crate::repo::fixture_refs();
        assert_eq!(resolve_deepen_not(&refs, "main").unwrap(), refs.refs[0].id);
        assert_eq!(resolve_deepen_not(&refs, "v1").unwrap(), refs.refs[1].id);
        assert!(resolve_deepen_not(&refs, "nope").is_err());
    }

    #[test]
    fn depth_cuts_history_that_many_commits_below_the_wants() {
        // 0 - 1 - 2 - 3 - 4 (the want)
        let (_dir, repo, c) = fixture::history(&[&[], &[0], &[1], &[2], &[3]]);
        let boundary = compute(&repo, &[c[4]], &Deepen { depth: Some(2), ..Deepen::default() }).unwrap();
        assert_eq!(boundary.shallow, vec![c[3]]);
        let whole = compute(&repo, &[c[4]], &Deepen { depth: Some(INFINITE_DEPTH), ..Deepen::default() }).unwrap();
        assert!(whole.shallow.is_empty(), "{:?}", whole.shallow);
    }

    #[test]
    fn since_cuts_at_the_commits_whose_parents_are_older() {
        // Commit i is made at 1000 + 10 i: since 1020 keeps 2, 3, 4; 2 is the border.
        let (_dir, repo, c) = fixture::history(&[&[], &[0], &[1], &[2], &[3]]);
        let boundary = compute(&repo, &[c[4]], &Deepen { since: Some(1020), ..Deepen::default() }).unwrap();
        assert_eq!(boundary.shallow, vec![c[2]]);
    }
}
