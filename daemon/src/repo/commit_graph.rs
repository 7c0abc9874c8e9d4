//! git's commit-graph (`objects/info/commit-graph`, or a chain in `objects/info/commit-graphs/`),
//! read for walks: a commit's root tree (and parents, date) without inflating the commit. Read
//! once per state of its files, each file's checksum verified the first time it is read: a damaged graph is refused
//! (logged once by the caller) and walks decode commits as without one. A graph older than the
//! repository's newest commits is no harm: what it lacks is decoded, what it holds is fixed by the
//! commit's id.

use std::hash::{Hash, Hasher};
use std::path::Path;

/// A fingerprint of the commit-graph files of `objects_dir` (names, sizes, modification times).
pub fn state(objects_dir: &Path) -> u64 {
    let info = objects_dir.join("info");
    let mut files = Vec::new();
    let mut note = |path: &Path| {
        if let Ok(meta) = std::fs::metadata(path) {
            files.push((path.to_owned(), meta.len(), meta.modified().ok()));
        }
    };
    note(&info.join("commit-graph"));
    if let Ok(entries) = std::fs::read_dir(info.join("commit-graphs")) {
        for entry in entries.flatten() {
            note(&entry.path());
        }
    }
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    h.finish()
}

/// The commit-graph of `objects_dir`, every file's checksum verified; `Ok(None)` without one.
pub fn load(objects_dir: &Path, hash: gix_hash::Kind) -> Result<Option<gix_commitgraph::Graph>, String> {
    let info = objects_dir.join("info");
    let single = info.join("commit-graph");
    let paths = if single.is_file() {
        vec![single]
    } else {
        let chain = info.join("commit-graphs/commit-graph-chain");
        let Ok(text) = std::fs::read_to_string(&chain) else { return Ok(None) };
        text.lines().filter(|l| !l.is_empty()).map(|id| info.join(format!("commit-graphs/graph-{id}.graph"))).collect()
    };
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        // Opened for its identity just before gix maps it: a checksum found right is not
        // computed again for the same file ([`super::checked`]).
        let opened = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = gix_commitgraph::File::at(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if file.object_hash() != hash {
            return Err(format!("{}: object format {} in a {hash} repository", path.display(), file.object_hash()));
        }
        let mut failed = None;
        let right = super::checked::found_right(&opened, || {
            file.verify_checksum().map_err(|e| failed = Some(e.to_string())).is_ok()
        });
        if !right {
            return Err(format!("{}: {}", path.display(), failed.unwrap_or_default()));
        }
        files.push(file);
    }
    if files.is_empty() {
        return Ok(None);
    }
    gix_commitgraph::Graph::new(files).map(Some).map_err(|e| e.to_string())
}

/// The root tree of `commit` as the graph records it.
pub fn root_tree(graph: &gix_commitgraph::Graph, commit: &gix_hash::oid) -> Option<gix_hash::ObjectId> {
    graph.commit_by_id(commit).map(|c| c.root_tree_id().to_owned())
}
