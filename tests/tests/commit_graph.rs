//! git's commit-graph in walks: a walk that takes commits' root trees from the graph selects
//! exactly what a walk that inflates every commit selects, on every corpus repository and both
//! object formats; a damaged graph (one flipped byte) is refused when it is read, so a walk never
//! trusts it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;
use gixd::repo::RefSnapshot;
use gixd::select::{self, Request};
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::git_ok;

/// A copy of a corpus repository with a commit-graph of everything its refs reach (`split`: a
/// chain of two graph files, else one file).
fn with_graph(tmp: &Path, name: &str, hash: Hash, split: bool) -> PathBuf {
    let src = corpus::ensure(name, hash);
    let dest = tmp.join(format!("{name}-{}-{split}.git", hash.name()));
    git_ok(tmp, &["clone", "-q", "--bare", "--no-local", src.to_str().unwrap(), dest.to_str().unwrap()]);
    git_ok(&dest, &["fetch", "-q", src.to_str().unwrap(), "+refs/*:refs/*"]);
    let listed = gixd_tests::server::git_client(&dest, &["rev-list", "--all", "--reverse"]);
    let commits = String::from_utf8_lossy(&listed.stdout).lines().map(str::to_owned).collect::<Vec<_>>();
    if split && commits.len() >= 2 {
        // The first half of history in one file, the rest in a second: a chain.
        let half = &commits[commits.len() / 2];
        let mut cmd = gixd_tests::git_command(&dest);
        cmd.args(["commit-graph", "write", "--split=no-merge", "--stdin-commits"]);
        gixd_tests::output_with_input(cmd, format!("{half}\n").as_bytes());
        git_ok(&dest, &["commit-graph", "write", "--split=no-merge", "--reachable"]);
    } else {
        git_ok(&dest, &["commit-graph", "write", "--reachable"]);
    }
    dest
}

/// A mirror of the corpus's `merges` repository (no commit-graph), opened, with its refs.
fn merges_mirror(tmp: &Path, hash: Hash) -> (PathBuf, gix::Repository, RefSnapshot) {
    let src = corpus::ensure("merges", hash);
    let path = tmp.join(format!("merges-{}.git", hash.name()));
    git_ok(tmp, &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), path.to_str().unwrap()]);
    let repo = gix::open(&path).unwrap();
    let refs = RefSnapshot::load(&repo).unwrap();
    (path, repo, refs)
}

fn ids(selection: &select::Selection) -> BTreeSet<ObjectId> {
    selection.objects.iter().copied().collect()
}

#[test]
fn a_walk_with_the_commit_graph_selects_what_a_walk_without_it_selects() {
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for spec in corpus::REPOS {
        for hash in Hash::ALL {
            for split in [false, true] {
                let path = with_graph(tmp.path(), spec.name, hash, split);
                let repo = gix::open(&path).unwrap();
                let refs = RefSnapshot::load(&repo).unwrap();
                let wants = refs.tips();
                if wants.is_empty() {
                    continue;
                }
                let graph = gixd::repo::commit_graph::load(&path.join("objects"), repo.object_hash())
                    .unwrap()
                    .expect("git wrote a commit-graph");
                let request = |commit_graph| Request { commit_graph, ..gixd_tests::select_request(&wants, &[], &refs) };
                let with = select::select_by_walking(&repo, &request(Some(&graph))).unwrap();
                let without = select::select_by_walking(&repo, &request(None)).unwrap();
                assert_eq!(ids(&with), ids(&without), "{} {} split {split}", spec.name, hash.name());
                assert_eq!(with.objects, without.objects, "the same order too");
                compared += 1;
            }
        }
    }
    assert!(compared >= 8, "{compared} repositories compared");
}

#[test]
fn without_a_commit_graph_a_walk_reads_each_commit_once_its_tree_noted_as_it_is_decoded() {
    use std::sync::atomic::Ordering::Relaxed;
    let read = || select::COMMITS_READ_FOR_THEIR_TREE.load(Relaxed);
    let tmp = tempfile::tempdir().unwrap();
    for hash in Hash::ALL {
        let (path, repo, refs) = merges_mirror(tmp.path(), hash);
        let wants = refs.tips();
        let head = repo.head_id().unwrap().detach();
        let old: ObjectId = gixd_tests::git_out(&path, &["rev-list", "--skip=5", "-1", "HEAD"]).trim().parse().unwrap();
        let request = |common: &'static [ObjectId]| gixd_tests::select_request(&wants, common, &refs);
        // A clone: every commit walked, none read again for its tree.
        let before = read();
        let clone = select::select_by_walking(&repo, &request(&[])).unwrap();
        assert!(clone.commits > 10, "{} commits", clone.commits);
        assert_eq!(read() - before, 0, "{} commits read again for their tree", read() - before);
        // A fetch: the edge commits' trees (parents of what is sent, held by the client) were
        // noted too, as the walk decoded them on the hidden side.
        let common: &'static [ObjectId] = Box::leak(vec![old].into_boxed_slice());
        let before = read();
        let fetch = select::select_by_walking(&repo, &request(common)).unwrap();
        let edges = fetch
            .client_has
            .iter()
            .filter(|id| repo.find_header(**id).unwrap().kind() == gix_object::Kind::Commit)
            .count();
        assert!(fetch.commits > 0 && edges > 0 && fetch.objects.contains(&head));
        assert_eq!(read() - before, 0, "{} commits read again for their tree ({edges} edges)", read() - before);
    }
}

#[test]
fn without_a_commit_graph_a_walk_decodes_each_commit_once() {
    use std::sync::atomic::Ordering::Relaxed;
    let decoded = || gixd::graph::COMMITS_DECODED.load(Relaxed);
    let tmp = tempfile::tempdir().unwrap();
    for hash in Hash::ALL {
        let (_, repo, refs) = merges_mirror(tmp.path(), hash);
        let wants = refs.tips();
        let before = decoded();
        let clone = select::select_by_walking(&repo, &gixd_tests::select_request(&wants, &[], &refs)).unwrap();
        assert!(clone.commits > 10, "{} commits", clone.commits);
        assert_eq!(decoded() - before, clone.commits, "commits decoded for {} commits walked", clone.commits);
    }
}

#[test]
fn a_damaged_commit_graph_is_refused_when_read() {
    let tmp = tempfile::tempdir().unwrap();
    for split in [false, true] {
        let path = with_graph(tmp.path(), "linear", Hash::Sha1, split);
        let objects = path.join("objects");
        assert!(gixd::repo::commit_graph::load(&objects, gix_hash::Kind::Sha1).unwrap().is_some());
        let file = if split {
            std::fs::read_dir(objects.join("info/commit-graphs"))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == "graph"))
                .unwrap()
        } else {
            objects.join("info/commit-graph")
        };
        let mut bytes = std::fs::read(&file).unwrap();
        // A byte inside the commit data (past the header and chunk table, before the trailer).
        let at = bytes.len() * 2 / 3;
        bytes[at] ^= 0x55;
        let mut perms = std::fs::metadata(&file).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&file, perms).unwrap();
        std::fs::write(&file, &bytes).unwrap();
        let loaded = gixd::repo::commit_graph::load(&objects, gix_hash::Kind::Sha1);
        assert!(loaded.is_err(), "split {split}: a flipped byte is refused");
    }
}

/// A commit-graph read again (its repository's cache given back while idle, then a request) is
/// not hashed again while its files are the same files: each file's checksum is computed once.
#[test]
fn a_commit_graph_read_again_is_not_hashed_again_while_its_files_are_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let hashed = || gixd::repo::checked::TRAILERS_HASHED.load(std::sync::atomic::Ordering::Relaxed);
    for split in [false, true] {
        let objects = with_graph(tmp.path(), "linear", Hash::Sha1, split).join("objects");
        let before = hashed();
        assert!(gixd::repo::commit_graph::load(&objects, gix_hash::Kind::Sha1).unwrap().is_some());
        let files = hashed() - before;
        assert_eq!(files, if split { 2 } else { 1 }, "split {split}: each file hashed once");
        for _ in 0..3 {
            assert!(gixd::repo::commit_graph::load(&objects, gix_hash::Kind::Sha1).unwrap().is_some());
        }
        assert_eq!(hashed() - before, files, "split {split}: read again, not hashed again");
    }
}
