//! Deciding what a client may read costs what the request needs, not a walk of every object:
//! without a bitmap, a fetch with thin deltas, a want of an inner commit, a shallow line and a
//! clone of every ref are answered without computing the readable set of all objects (counted by
//! `gixd::select::READABLE_SETS_COMPUTED`; one test per process, so the count is this test's).
//! Tags on old commits sent as haves (as go-git does) do not change that. And a bitmap reach over
//! the packs pushes left inflates no blob (`gixd::bitmap::BLOBS_INFLATED_BY_REACH`), and names
//! (hashes the path of) only what the client lacks, each entry once
//! (`gixd::bitmap::ENTRIES_NAMED_BY_REACH`); an entry unchanged from the version of its tree the
//! reach walked before is not tested again (`gixd::bitmap::ENTRIES_TESTED_BY_REACH`).

use std::sync::atomic::Ordering;

use gixd_tests::server::{clone, git_ok, serve};
use gixd_tests::{commit_files, git, git_out};

/// A repository of `commits` commits growing one file, an annotated tag every fifth; the
/// temporary directory, the repository and the file's last text.
fn tagged_history(commits: usize) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let mut text: String = (0..300).map(|n| format!("line {n}\n")).collect();
    for n in 0..commits {
        text.push_str(&format!("change {n}\n"));
        commit_files(&repo, &[("file.txt", text.as_bytes())], &format!("c{n}"));
        if n % 5 == 0 {
            git(&repo, &["tag", "-a", "-m", "release", &format!("v{n}"), "HEAD"]);
        }
    }
    (tmp, repo, text)
}

/// [`tagged_history`] of one commit, then a commit of sixty files in the directory `many/`.
fn sixty_files_in_many() -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, repo, _) = tagged_history(1);
    let files: Vec<(String, String)> = (0..60).map(|f| (format!("many/f{f}.txt"), format!("file {f}\n"))).collect();
    let files: Vec<(&str, &[u8])> = files.iter().map(|(p, t)| (p.as_str(), t.as_bytes())).collect();
    commit_files(&repo, &files, "many");
    (tmp, repo)
}

#[test]
fn fetches_clones_and_wants_by_id_compute_no_readable_set_of_all_objects() {
    let (tmp, repo, text) = tagged_history(40);
    git(&repo, &["repack", "-adq"]);
    let server = serve(tmp.path());
    let before = gixd::select::READABLE_SETS_COMPUTED.load(Ordering::Relaxed);

    // A clone of every ref, over v2 and v0.
    for version in [2, 0] {
        clone(&server.url("repo"), &tmp.path().join(format!("clone{version}")), version, &[]);
    }
    // A client 10 commits behind (with every old tag) fetches: thin deltas against its edge.
    let behind = tmp.path().join("behind");
    clone(&server.url("repo"), &behind, 2, &[]);
    git_ok(&behind, &["reset", "-q", "--hard", "HEAD~10"]);
    git_ok(&behind, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
    git_ok(&behind, &["repack", "-adq"]);
    for n in 0..10 {
        commit_files(&repo, &[("file.txt", format!("{text}more {n}\n").as_bytes())], &format!("more{n}"));
    }
    for version in ["2", "0"] {
        git_ok(&behind, &["-c", &format!("protocol.version={version}"), "fetch", "-q", "origin"]);
    }
    assert_eq!(git_out(&behind, &["rev-parse", "origin/main"]), git_out(&repo, &["rev-parse", "main"]));
    // A want of an inner commit by id (v2), and a shallow clone deepened.
    let inner = git_out(&repo, &["rev-parse", "main~25"]);
    let by_id = tmp.path().join("by-id");
    git_ok(tmp.path(), &["init", "-q", by_id.to_str().unwrap()]);
    git_ok(&by_id, &["-c", "protocol.version=2", "fetch", "-q", &server.url("repo"), &inner]);
    let shallow = tmp.path().join("shallow");
    clone(&server.url("repo"), &shallow, 2, &["--depth", "2"]);
    git_ok(&shallow, &["fetch", "-q", "--deepen=3"]);

    let computed = gixd::select::READABLE_SETS_COMPUTED.load(Ordering::Relaxed) - before;
    assert_eq!(computed, 0, "a readable set of all objects was computed {computed} times");
}

#[test]
fn a_bitmap_fetch_answers_its_thin_bases_from_its_own_reach_not_a_reach_of_every_ref() {
    let (tmp, repo, text) = tagged_history(30);
    let server_dir = tmp.path().join("served");
    std::fs::create_dir_all(&server_dir).unwrap();
    let behind = tmp.path().join("behind");
    git_ok(tmp.path(), &["clone", "-q", repo.to_str().unwrap(), behind.to_str().unwrap()]);
    // Newer versions are smaller, so git's repack stores them as deltas against the older (bigger)
    // ones the client has: the fetch has thin deltas to send.
    for n in 0..10 {
        let shorter: String = text.lines().skip(n + 1).map(|l| format!("{l}\n")).collect();
        commit_files(&repo, &[("file.txt", shorter.as_bytes())], &format!("less{n}"));
    }
    let bare = server_dir.join("repo");
    git_ok(tmp.path(), &["clone", "-q", "--bare", repo.to_str().unwrap(), bare.to_str().unwrap()]);
    git(&bare, &["repack", "-adbq"]);
    let recorder = std::sync::Arc::new(gixd::tap::Recorder::default());
    let tap = recorder.clone();
    let server = gixd_tests::server::serve_tapped(&server_dir, Some(tap), |_| {});
    let before = gixd::select::READABLE_SETS_COMPUTED.load(Ordering::Relaxed);
    git_ok(
        &behind,
        &["-c", "protocol.version=2", "fetch", "-q", &server.url("repo"), "+refs/heads/main:refs/remotes/origin/main"],
    );
    let stats = recorder.take().into_iter().find_map(|e| e.pack).expect("a pack was sent");
    assert!(stats.thin_deltas > 0, "the fetch sends thin deltas against what the client has: {stats:?}");
    let computed = gixd::select::READABLE_SETS_COMPUTED.load(Ordering::Relaxed) - before;
    assert_eq!(computed, 0, "a readable set of every ref was computed {computed} times");
}

#[test]
fn a_bitmap_reach_over_pushed_packs_inflates_no_blob() {
    // A bitmapped pack, then twenty commits of new files each in packs of their own, as pushes
    // leave them: the reach walks the new commits' trees, and their blobs are known as blobs from
    // the trees naming them.
    let (tmp, repo, _) = tagged_history(5);
    let behind = tmp.path().join("behind");
    git_ok(tmp.path(), &["clone", "-q", repo.to_str().unwrap(), behind.to_str().unwrap()]);
    let server_dir = tmp.path().join("served");
    let bare = server_dir.join("repo");
    git_ok(tmp.path(), &["clone", "-q", "--bare", repo.to_str().unwrap(), bare.to_str().unwrap()]);
    git(&bare, &["repack", "-adbq"]);
    for n in 0..20 {
        let files: Vec<(String, String)> =
            (0..4).map(|f| (format!("dir{n}/new{f}.txt"), format!("file {f} of push {n}\n"))).collect();
        let files: Vec<(&str, &[u8])> = files.iter().map(|(p, t)| (p.as_str(), t.as_bytes())).collect();
        commit_files(&repo, &files, &format!("push{n}"));
        git_ok(&repo, &["push", "-q", bare.to_str().unwrap(), "main"]);
        git(&bare, &["repack", "-dq"]);
    }
    let packs = std::fs::read_dir(bare.join("objects/pack")).unwrap().filter_map(Result::ok);
    assert!(packs.filter(|e| e.path().extension().is_some_and(|x| x == "pack")).count() > 10, "one pack per push");
    let server = serve(&server_dir);
    let before = gixd::bitmap::BLOBS_INFLATED_BY_REACH.load(Ordering::Relaxed);
    git_ok(
        &behind,
        &["-c", "protocol.version=2", "fetch", "-q", &server.url("repo"), "+refs/heads/main:refs/remotes/origin/main"],
    );
    assert_eq!(git_out(&behind, &["rev-parse", "origin/main"]), git_out(&repo, &["rev-parse", "main"]));
    git_ok(&behind, &["fsck", "--connectivity-only"]);
    let inflated = gixd::bitmap::BLOBS_INFLATED_BY_REACH.load(Ordering::Relaxed) - before;
    assert_eq!(inflated, 0, "the bitmap reach inflated {inflated} blobs");
}

#[test]
fn a_bitmap_fetch_names_each_new_entry_once_and_nothing_the_client_holds() {
    // Sixty files in one directory, bitmapped; then two rounds of ten commits changing one file
    // each, a pack per push. The client fetched the first round: the fetch of the second walks
    // ten root trees of sixty entries on each side (what the client holds, what it wants).
    let (tmp, repo) = sixty_files_in_many();
    let server_dir = tmp.path().join("served");
    let bare = server_dir.join("repo");
    git_ok(tmp.path(), &["clone", "-q", "--bare", repo.to_str().unwrap(), bare.to_str().unwrap()]);
    git(&bare, &["repack", "-adbq"]);
    let behind = tmp.path().join("behind");
    git_ok(tmp.path(), &["clone", "-q", repo.to_str().unwrap(), behind.to_str().unwrap()]);
    let push_round = |round: usize| {
        for n in 0..10 {
            let path = format!("many/f{n}.txt");
            commit_files(&repo, &[(path.as_str(), format!("round {round} change {n}\n").as_bytes())], "change");
            git_ok(&repo, &["push", "-q", bare.to_str().unwrap(), "main"]);
            git(&bare, &["repack", "-dq"]);
        }
    };
    let server = serve(&server_dir);
    let fetch = || {
        git_ok(
            &behind,
            &[
                "-c",
                "protocol.version=2",
                "fetch",
                "-q",
                &server.url("repo"),
                "+refs/heads/main:refs/remotes/origin/main",
            ],
        );
        assert_eq!(git_out(&behind, &["rev-parse", "origin/main"]), git_out(&repo, &["rev-parse", "main"]));
    };
    push_round(0);
    fetch();
    push_round(1);
    let before = gixd::bitmap::ENTRIES_NAMED_BY_REACH.load(Ordering::Relaxed);
    fetch();
    git_ok(&behind, &["fsck", "--connectivity-only"]);
    let named = gixd::bitmap::ENTRIES_NAMED_BY_REACH.load(Ordering::Relaxed) - before;
    // The newest commit's trees once (root and `many/`: 62 entries), then each older commit's
    // changed file and tree; every entry of every tree on both sides would be 20 x 62.
    assert!(named <= 62 + 10 * 2, "the reach named {named} entries");
}

#[test]
fn a_bitmap_reach_tests_only_the_tree_entries_changed_since_the_version_walked_before() {
    // Sixty files in one directory, bitmapped; then twenty commits changing one file each, left
    // loose: the reach of the tip walks twenty root trees and twenty versions of `many/`.
    let (_tmp, repo) = sixty_files_in_many();
    git(&repo, &["repack", "-adbq"]);
    for n in 0..20 {
        let path = format!("many/f{}.txt", n * 3);
        commit_files(&repo, &[(path.as_str(), format!("change {n}\n").as_bytes())], "change");
    }
    let gix_repo = gix::open(&repo).unwrap();
    let idx = std::fs::read_dir(repo.join(".git/objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "idx"))
        .unwrap();
    let bitmap = gixd::bitmap::PackBitmap::open(&idx, gix_repo.object_hash()).unwrap().expect("a bitmap");
    let tip = gix_repo.head_id().unwrap().detach();
    let before = gixd::bitmap::ENTRIES_TESTED_BY_REACH.load(Ordering::Relaxed);
    let reach = bitmap.reachable_unnamed(&gix_repo, &[tip]).unwrap();
    let tested = gixd::bitmap::ENTRIES_TESTED_BY_REACH.load(Ordering::Relaxed) - before;
    let all = gixd_tests::server::rev_list_objects(&repo, &["HEAD"]);
    let reached = all.iter().filter(|id| reach.has(&bitmap, &id.parse::<gix_hash::ObjectId>().unwrap())).count();
    assert_eq!(reached, all.len(), "the reach has every object the tip reaches");
    // The newest root (file.txt, many/) and many/'s sixty entries once; then per older commit
    // the root's changed `many/` and many/'s changed file. Every entry of every version: 20 x 62.
    assert!(tested <= 62 + 19 * 2, "the reach tested {tested} entries");
}
