//! The order a walk meets commits in: newest first by commit time, as git's `rev-list` walks
//! them, with a commit-graph or without. Trees are then read in the order a repack made their
//! delta chains in, so a walk's small delta cache holds the bases the next trees need (gix's
//! breadth-first order, on git.git without a bitmap, put 5.6 times as many bases into the cache
//! at twice the CPU); and a repack's delta search breaks ties in this order.

use gix_hash::ObjectId;
use gixd::repo::RefSnapshot;
use gixd::select::{self, Request};
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::git_ok;

#[test]
fn a_walk_meets_commits_newest_first_by_commit_time_with_a_commit_graph_or_without() {
    let tmp = tempfile::tempdir().unwrap();
    let mut out_of_breadth_first_order = 0;
    for name in ["merges", "real-shapes", "linear"] {
        let src = corpus::ensure(name, Hash::Sha1);
        let path = tmp.path().join(format!("{name}.git"));
        git_ok(tmp.path(), &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), path.to_str().unwrap()]);
        git_ok(&path, &["commit-graph", "write", "--reachable"]);
        let repo = gix::open(&path).unwrap();
        let refs = RefSnapshot::load(&repo).unwrap();
        let wants = refs.tips();
        let graph = gixd::repo::commit_graph::load(&path.join("objects"), repo.object_hash()).unwrap().unwrap();
        let time = |id: &ObjectId| repo.find_commit(*id).unwrap().time().unwrap().seconds;
        for commit_graph in [None, Some(&graph)] {
            let request = Request { commit_graph, ..gixd_tests::select_request(&wants, &[], &refs) };
            let selection = select::select_by_walking(&repo, &request).unwrap();
            let is_commit = |id: &&ObjectId| repo.find_header(**id).unwrap().kind() == gix_object::Kind::Commit;
            let commits: Vec<ObjectId> = selection.objects.iter().filter(is_commit).copied().collect();
            assert!(commits.len() > 10, "{name}: {} commits", commits.len());
            let times: Vec<i64> = commits.iter().map(time).collect();
            let later = times.windows(2).position(|pair| pair[1] > pair[0]);
            assert_eq!(later, None, "{name} (graph: {}): a commit met before a newer one", commit_graph.is_some());
            // The test can tell the orders apart: breadth first meets some commit before a
            // newer one in these repositories.
            let breadth_first: Vec<ObjectId> = repo
                .rev_walk(wants.iter().filter_map(|id| {
                    let commit = repo.find_object(*id).ok()?.peel_to_kind(gix_object::Kind::Commit).ok()?;
                    Some(commit.id)
                }))
                .sorting(gix::revision::walk::Sorting::BreadthFirst)
                .all()
                .unwrap()
                .map(|info| info.unwrap().id)
                .collect();
            let bfs_times: Vec<i64> = breadth_first.iter().map(time).collect();
            out_of_breadth_first_order += usize::from(bfs_times.windows(2).any(|pair| pair[1] > pair[0]));
        }
    }
    assert!(out_of_breadth_first_order > 0, "no repository where breadth first differs: the test cannot fail");
}
