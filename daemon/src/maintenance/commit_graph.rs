//! git's commit-graph written by a full run (`objects/info/commit-graph`, one file, format
//! version 1 of `gitformat-commit-graph`): OIDF, OIDL, CDAT (root tree, parents, topological
//! level and commit time) and EDGE (octopus parents), then the checksum. gix reads commit-graphs
//! but writes none; this is gixd's own writer (small, and its input is what the run walked), and
//! `git commit-graph verify` is its test. It leaves out what git writes optionally: generation
//! numbers v2 (`GDA2`; readers then use the topological levels) and Bloom filters.

use std::path::Path;

use gix_hash::ObjectId;

use super::MaintenanceError;

/// A parent position meaning "none".
const NO_PARENT: u32 = 0x7000_0000;
/// The parent-2 bit that points into the EDGE chunk, and the EDGE entry bit that ends a list.
const EDGE_BIT: u32 = 0x8000_0000;
/// The largest topological level the 30 bits hold.
const LEVEL_MAX: u32 = 0x3FFF_FFFF;

use crate::graph::Commit;

/// Write the commit-graph of every commit reachable from `tips` into `objects_dir/info`,
/// replacing what was there (a split chain too). Returns how many commits it holds; `None` when
/// the repository's history cannot be described by one (shallow, grafts or replace refs, as git
/// declines, or a parent missing), and then any old graph is removed rather than left stale.
/// `walked`, when given, is every commit reachable from `tips` as a walk decoded them
/// ([`crate::select::Selection::history`]): they are not decoded again.
pub fn write(
    repo: &gix::Repository,
    objects_dir: &Path,
    tips: &[ObjectId],
    walked: Option<Vec<Commit>>,
) -> Result<Option<usize>, MaintenanceError> {
    let info = objects_dir.join("info");
    let git_dir = repo.git_dir();
    let declined = git_dir.join("shallow").exists()
        || info.join("grafts").exists()
        || match crate::repo::ref_store::RefStore::of(repo).reftable_has_prefix("refs/replace/")? {
            Some(has) => has,
            None => repo.refs.iter()?.prefixed(b"refs/replace/".try_into().expect("valid"))?.next().is_some(),
        };
    let commits = match (declined, walked) {
        (true, _) => None,
        (false, Some(walked)) => Some(walked),
        (false, None) => commits(repo, tips)?,
    };
    let Some(mut commits) = commits else {
        remove(&info);
        return Ok(None);
    };
    commits.sort_unstable_by_key(|a| a.id);
    let data = encode(&commits, repo.object_hash())?;
    std::fs::create_dir_all(&info)?;
    let tmp = info.join(format!("commit-graph.gixd-{}.tmp", std::process::id()));
    std::fs::write(&tmp, &data)?;
    std::fs::rename(&tmp, info.join("commit-graph"))?;
    // The single file is what readers take first; a chain beside it would only go stale.
    let _ = std::fs::remove_dir_all(info.join("commit-graphs"));
    Ok(Some(commits.len()))
}

fn remove(info: &Path) {
    let _ = std::fs::remove_file(info.join("commit-graph"));
    let _ = std::fs::remove_dir_all(info.join("commit-graphs"));
}

/// Objects the commit-graph writer decoded itself, its walk's commits and tags (test builds only).
#[cfg(feature = "test-hooks")]
pub static OBJECTS_DECODED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Every commit reachable from `tips` (tags peeled), each decoded once; `None` if a parent is
/// missing.
fn commits(repo: &gix::Repository, tips: &[ObjectId]) -> Result<Option<Vec<Commit>>, MaintenanceError> {
    use gix_object::{Find, Kind};
    let hash = repo.object_hash();
    let mut seen: gix::hashtable::HashSet<ObjectId> = Default::default();
    let mut stack: Vec<ObjectId> = tips.to_vec();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        #[cfg(feature = "test-hooks")]
        OBJECTS_DECODED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(object) = repo.objects.try_find(&id, &mut buf).map_err(MaintenanceError::pack)? else {
            return Ok(None);
        };
        match object.kind {
            Kind::Tag => {
                if let Ok(target) = gix_object::TagRefIter::from_bytes(object.data, hash).target_id() {
                    stack.push(target);
                }
            }
            Kind::Commit => {
                let commit = gix_object::CommitRef::from_bytes(object.data, hash)
                    .map_err(|err| MaintenanceError::corrupt(format!("commit {id}: {err}")))?;
                let time = commit.committer().ok().and_then(|c| c.time().ok()).map_or(0, |t| t.seconds);
                let parents: Vec<ObjectId> = commit.parents().collect();
                stack.extend(parents.iter().copied());
                out.push(Commit { id, tree: commit.tree(), parents, time: u64::try_from(time).unwrap_or(0) });
            }
            Kind::Tree | Kind::Blob => {}
        }
    }
    Ok(Some(out))
}

/// The file for `commits` (sorted by id).
fn encode(commits: &[Commit], hash: gix_hash::Kind) -> Result<Vec<u8>, MaintenanceError> {
    let position = |id: &ObjectId| commits.binary_search_by(|c| c.id.cmp(id)).ok().map(|p| p as u32);
    let mut parent_positions: Vec<Vec<u32>> = Vec::with_capacity(commits.len());
    for commit in commits {
        let positions: Option<Vec<u32>> = commit.parents.iter().map(position).collect();
        let Some(positions) = positions else {
            return Err(MaintenanceError::corrupt(format!("commit {}: a parent is not in the graph", commit.id)));
        };
        parent_positions.push(positions);
    }
    let levels = levels(&parent_positions);

    let hash_len = hash.len_in_bytes();
    let mut oidf = Vec::with_capacity(256 * 4);
    let mut count = 0u32;
    for byte in 0..=255u8 {
        count += commits[count as usize..].iter().take_while(|c| c.id.as_bytes()[0] == byte).count() as u32;
        oidf.extend_from_slice(&count.to_be_bytes());
    }
    let mut oidl = Vec::with_capacity(commits.len() * hash_len);
    let mut cdat = Vec::with_capacity(commits.len() * (hash_len + 16));
    let mut edge: Vec<u32> = Vec::new();
    for ((commit, parents), level) in commits.iter().zip(&parent_positions).zip(&levels) {
        oidl.extend_from_slice(commit.id.as_bytes());
        cdat.extend_from_slice(commit.tree.as_bytes());
        let first = parents.first().copied().unwrap_or(NO_PARENT);
        let second = match parents.len() {
            0 | 1 => NO_PARENT,
            2 => parents[1],
            _ => {
                let at = edge.len() as u32;
                edge.extend_from_slice(&parents[1..]);
                if let Some(last) = edge.last_mut() {
                    *last |= EDGE_BIT;
                }
                EDGE_BIT | at
            }
        };
        cdat.extend_from_slice(&first.to_be_bytes());
        cdat.extend_from_slice(&second.to_be_bytes());
        let high = (level << 2) | ((commit.time >> 32) & 3) as u32;
        cdat.extend_from_slice(&high.to_be_bytes());
        cdat.extend_from_slice(&(commit.time as u32).to_be_bytes());
    }
    let edge: Vec<u8> = edge.iter().flat_map(|e| e.to_be_bytes()).collect();

    let mut chunks: Vec<(&[u8; 4], &[u8])> = vec![(b"OIDF", &oidf), (b"OIDL", &oidl), (b"CDAT", &cdat)];
    if !edge.is_empty() {
        chunks.push((b"EDGE", &edge));
    }
    let mut data = Vec::new();
    data.extend_from_slice(b"CGPH");
    data.push(1);
    data.push(if hash == gix_hash::Kind::Sha1 { 1 } else { 2 });
    data.push(chunks.len() as u8);
    data.push(0); // no base graphs
    let mut offset = (8 + 12 * (chunks.len() + 1)) as u64;
    for (id, chunk) in &chunks {
        data.extend_from_slice(*id);
        data.extend_from_slice(&offset.to_be_bytes());
        offset += chunk.len() as u64;
    }
    data.extend_from_slice(&[0; 4]);
    data.extend_from_slice(&offset.to_be_bytes());
    for (_, chunk) in &chunks {
        data.extend_from_slice(chunk);
    }
    let mut hasher = gix_hash::hasher(hash);
    hasher.update(&data);
    data.extend_from_slice(hasher.try_finalize().map_err(MaintenanceError::pack)?.as_bytes());
    Ok(data)
}

/// Each commit's topological level (generation number v1): 1 for a root, else one more than its
/// highest parent's; capped as git caps it. Iterative: histories are deeper than a stack.
fn levels(parents: &[Vec<u32>]) -> Vec<u32> {
    let mut level = vec![0u32; parents.len()];
    for start in 0..parents.len() {
        if level[start] != 0 {
            continue;
        }
        let mut stack = vec![start];
        while let Some(&at) = stack.last() {
            let pending: Vec<usize> = parents[at].iter().map(|&p| p as usize).filter(|&p| level[p] == 0).collect();
            if pending.is_empty() {
                let highest = parents[at].iter().map(|&p| level[p as usize]).max().unwrap_or(0);
                level[at] = (highest + 1).min(LEVEL_MAX);
                stack.pop();
            } else {
                stack.extend(pending);
            }
        }
    }
    level
}

#[cfg(test)]
mod tests {
    use super::levels;

    #[test]
    fn levels_are_one_more_than_the_highest_parent() {
        // 0 <- 1 <- 2, 0 <- 3, merge 4 of 2 and 3.
        let parents = vec![vec![], vec![0], vec![1], vec![0], vec![2, 3]];
        assert_eq!(levels(&parents), vec![1, 2, 3, 2, 4]);
    }
}
