//! gixd serves clone and fetch over smart HTTP to stock git, in protocol v2 and v0: refs equal the
//! server's, `git fsck --full` is clean, and what a fetch receives is everything it needs and
//! nothing it may not see.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gixd_tests::server::{
    all_objects, assert_fsck_clean, clone, git_client, git_ok, pack_ids, packs, refs, rev_list_objects, serve,
};
use gixd_tests::{commit_files, git, git_out};

/// A work repository under `base/name` with a few commits on `main`.
fn work_repo(base: &Path, name: &str, object_format: &str) -> PathBuf {
    let repo = base.join(name);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", &format!("--object-format={object_format}")]);
    for n in 0..4 {
        commit_files(
            &repo,
            &[
                ("README.md", format!("readme version {n}\n").repeat(20).as_bytes()),
                (&format!("src/file{n}.txt"), format!("content {n}\n").repeat(40).as_bytes()),
            ],
            &format!("commit {n}"),
        );
    }
    repo
}

/// A bare copy of `work` at `base/<name>.git`, fully packed.
fn bare_copy(work: &Path, base: &Path, name: &str) -> PathBuf {
    let bare = base.join(format!("{name}.git"));
    git(base, &["clone", "-q", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()]);
    bare
}

/// The client's copy of the server's branches and tags equals the server's.
fn assert_same_refs(server: &Path, client: &Path) {
    let heads: BTreeSet<(String, String)> =
        refs(server, "refs/heads").into_iter().map(|(k, v)| (k.replacen("refs/heads/", "", 1), v)).collect();
    let tracking: BTreeSet<(String, String)> = refs(client, "refs/remotes/origin")
        .into_iter()
        .filter(|(k, _)| k != "refs/remotes/origin/HEAD")
        .map(|(k, v)| (k.replacen("refs/remotes/origin/", "", 1), v))
        .collect();
    assert_eq!(tracking, heads, "branches");
    assert_eq!(refs(client, "refs/tags"), refs(server, "refs/tags"), "tags");
}

fn clone_and_check(version: u8, object_format: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path(), "work", object_format);
    git(&work, &["branch", "feature", "HEAD~2"]);
    git(&work, &["tag", "light", "HEAD~1"]);
    git(&work, &["tag", "-a", "-m", "annotated", "v1.0", "HEAD~3"]);
    git(&work, &["tag", "-a", "-m", "tag of a tag", "v1.0-signed", "v1.0"]);
    let bare = bare_copy(&work, tmp.path(), "server");
    let server = serve(tmp.path());
    let dest = tmp.path().join("client");
    clone(&server.url("server.git"), &dest, version, &[]);
    assert_same_refs(&bare, &dest);
    assert_eq!(git_out(&dest, &["rev-parse", "HEAD"]), git_out(&bare, &["rev-parse", "HEAD"]));
    assert_fsck_clean(&dest);
    // Every object reachable from the server's refs arrived.
    let want = rev_list_objects(&bare, &["--all"]);
    assert!(all_objects(&dest).is_superset(&want));
}

#[test]
fn clone_over_v2_gets_every_branch_and_tag_and_a_clean_repository() {
    clone_and_check(2, "sha1");
}

#[test]
fn clone_over_v0_gets_every_branch_and_tag_and_a_clean_repository() {
    clone_and_check(0, "sha1");
}

#[test]
fn clone_over_v1_gets_every_branch_and_tag_and_a_clean_repository() {
    clone_and_check(1, "sha1");
}

#[test]
fn a_sha256_repository_clones_over_v2_and_v0() {
    clone_and_check(2, "sha256");
    clone_and_check(0, "sha256");
}

/// Fetch after the server moved on: the pack holds everything the client lacks and nothing that
/// the wants do not reach.
fn negotiated_fetch(version: u8, object_format: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path(), "work", object_format);
    let server = serve(tmp.path());
    let dest = tmp.path().join("client");
    clone(&server.url("work"), &dest, version, &[]);
    let old_tip = git_out(&work, &["rev-parse", "HEAD"]);
    for n in 10..13 {
        commit_files(
            &work,
            &[(&format!("new/file{n}.txt"), format!("new {n}\n").repeat(30).as_bytes())],
            &format!("new {n}"),
        );
    }
    let new_tip = git_out(&work, &["rev-parse", "HEAD"]);
    let before = packs(&dest);
    let v = format!("protocol.version={version}");
    git_ok(&dest, &["-c", &v, "-c", "transfer.unpackLimit=1", "fetch", "-q", "origin"]);
    assert_eq!(git_out(&dest, &["rev-parse", "refs/remotes/origin/main"]), new_tip);
    assert_fsck_clean(&dest);
    let new_packs: Vec<PathBuf> = packs(&dest).difference(&before).cloned().collect();
    assert_eq!(new_packs.len(), 1, "one pack received");
    let received = pack_ids(&dest, &new_packs[0], object_format);
    let required = rev_list_objects(&work, &[&new_tip, "--not", &old_tip]);
    let reachable = rev_list_objects(&work, &[&new_tip]);
    assert!(received.is_superset(&required), "missing: {:?}", required.difference(&received).collect::<Vec<_>>());
    assert!(
        received.is_subset(&reachable),
        "not reachable from the wants: {:?}",
        received.difference(&reachable).collect::<Vec<_>>()
    );
    // Negotiation worked: not the whole history again.
    assert!(received.len() < reachable.len());
}

#[test]
fn fetch_after_new_commits_over_v2_sends_what_is_new() {
    negotiated_fetch(2, "sha1");
}

#[test]
fn fetch_after_new_commits_over_v0_sends_what_is_new() {
    negotiated_fetch(0, "sha1");
}

#[test]
fn fetch_in_a_sha256_repository_sends_what_is_new() {
    negotiated_fetch(2, "sha256");
}

#[test]
fn fetch_with_nothing_new_succeeds_and_changes_nothing() {
    for version in [2, 0] {
        let tmp = tempfile::tempdir().unwrap();
        work_repo(tmp.path(), "work", "sha1");
        let server = serve(tmp.path());
        let dest = tmp.path().join("client");
        clone(&server.url("work"), &dest, version, &[]);
        let before = all_objects(&dest);
        let refs_before = refs(&dest, "refs");
        let v = format!("protocol.version={version}");
        git_ok(&dest, &["-c", &v, "fetch", "origin"]);
        assert_eq!(all_objects(&dest), before);
        assert_eq!(refs(&dest, "refs"), refs_before);
    }
}

#[test]
fn a_long_negotiation_with_many_client_only_commits_finds_the_common_base() {
    // The client has many commits the server does not: several stateless rounds of haves.
    for version in [2, 0] {
        let tmp = tempfile::tempdir().unwrap();
        let work = work_repo(tmp.path(), "work", "sha1");
        let server = serve(tmp.path());
        let dest = tmp.path().join("client");
        clone(&server.url("work"), &dest, version, &[]);
        git(&dest, &["checkout", "-q", "-b", "local"]);
        for n in 0..80 {
            commit_files(&dest, &[("local.txt", format!("local {n}\n").as_bytes())], &format!("local {n}"));
        }
        commit_files(&work, &[("server.txt", b"server side\n")], "server moves");
        let v = format!("protocol.version={version}");
        git_ok(&dest, &["-c", &v, "fetch", "-q", "origin"]);
        assert_eq!(git_out(&dest, &["rev-parse", "refs/remotes/origin/main"]), git_out(&work, &["rev-parse", "HEAD"]));
        assert_fsck_clean(&dest);
    }
}

#[test]
fn head_on_a_non_default_branch_is_what_a_clone_checks_out() {
    for version in [2, 0] {
        let tmp = tempfile::tempdir().unwrap();
        let work = work_repo(tmp.path(), "work", "sha1");
        git(&work, &["checkout", "-q", "-b", "develop"]);
        commit_files(&work, &[("develop.txt", b"develop\n")], "develop");
        let server = serve(tmp.path());
        let dest = tmp.path().join("client");
        clone(&server.url("work"), &dest, version, &[]);
        assert_eq!(git_out(&dest, &["symbolic-ref", "HEAD"]), "refs/heads/develop");
        assert_eq!(git_out(&dest, &["rev-parse", "HEAD"]), git_out(&work, &["rev-parse", "develop"]));
    }
}

#[test]
fn an_empty_repository_clones_as_empty() {
    for version in [2, 0] {
        let tmp = tempfile::tempdir().unwrap();
        let empty = tmp.path().join("empty.git");
        std::fs::create_dir_all(&empty).unwrap();
        git(&empty, &["init", "-q", "--bare"]);
        let server = serve(tmp.path());
        let dest = tmp.path().join("client");
        let stderr = clone(&server.url("empty.git"), &dest, version, &[]);
        assert!(stderr.contains("empty repository"), "{stderr}");
        assert!(refs(&dest, "refs").is_empty());
        if version == 2 {
            // The unborn HEAD's branch name comes across (ls-refs unborn).
            assert_eq!(git_out(&dest, &["symbolic-ref", "HEAD"]), "refs/heads/main");
        }
    }
}

#[test]
fn loose_objects_beside_several_packs_are_all_served() {
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path(), "work", "sha1");
    git(&work, &["repack", "-dq"]);
    commit_files(&work, &[("second.txt", b"second pack\n")], "second");
    git(&work, &["repack", "-dq"]);
    commit_files(&work, &[("loose.txt", b"loose object\n")], "loose");
    assert!(packs(&work).len() >= 2, "several packs");
    let server = serve(tmp.path());
    for version in [2, 0] {
        let dest = tmp.path().join(format!("client{version}"));
        clone(&server.url("work"), &dest, version, &[]);
        assert_same_refs(&work, &dest);
        assert_fsck_clean(&dest);
    }
}

#[test]
fn a_secret_that_is_only_an_unreachable_delta_base_is_never_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path(), "work", "sha1");
    let public: Vec<u8> = (0..200).map(|n| format!("public line {n}\n")).collect::<String>().into_bytes();
    commit_files(&work, &[("data.txt", &public)], "public data");
    git(&work, &["checkout", "-q", "-b", "secret"]);
    let mut secret = public.clone();
    secret.extend(b"password=hunter2\n".repeat(30));
    commit_files(&work, &[("data.txt", &secret)], "secret data");
    let secret_blob = git_out(&work, &["rev-parse", "secret:data.txt"]);
    git(&work, &["checkout", "-q", "main"]);
    git(&work, &["repack", "-adfq", "--window=10", "--depth=10"]);
    let public_blob = git_out(&work, &["rev-parse", "main:data.txt"]);
    let verify = git_out(&work, &["verify-pack", "-v", packs(&work).iter().next().unwrap().to_str().unwrap()]);
    assert!(
        verify.lines().any(|l| l.starts_with(&public_blob) && l.ends_with(&secret_blob)),
        "precondition: the public blob is a delta against the secret one"
    );
    // The secret branch is force-deleted; the pack still holds its blob.
    git(&work, &["branch", "-q", "-D", "secret"]);
    git(&work, &["reflog", "expire", "--expire=now", "--all"]);
    let server = serve(tmp.path());
    for version in [2, 0] {
        let dest = tmp.path().join(format!("client{version}"));
        clone(&server.url("work"), &dest, version, &["-c", "transfer.unpackLimit=1"]);
        let received: BTreeSet<String> = packs(&dest).iter().flat_map(|p| pack_ids(&dest, p, "sha1")).collect();
        assert!(received.contains(&public_blob));
        assert!(!received.contains(&secret_blob), "the secret was sent over v{version}");
        assert!(!all_objects(&dest).contains(&secret_blob));
        assert_fsck_clean(&dest);
    }
}

#[test]
fn a_worktree_repository_and_a_bare_one_are_both_found_with_and_without_dot_git() {
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path(), "work", "sha1");
    bare_copy(&work, tmp.path(), "bare");
    let server = serve(tmp.path());
    for (i, path) in ["work", "bare", "bare.git"].iter().enumerate() {
        let dest = tmp.path().join(format!("c{i}"));
        clone(&server.url(path), &dest, 2, &[]);
        assert_eq!(git_out(&dest, &["rev-parse", "HEAD"]), git_out(&work, &["rev-parse", "HEAD"]));
    }
}

#[test]
fn an_unknown_repository_is_a_not_found_error_git_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path());
    let out = git_client(tmp.path(), &["clone", &server.url("nope.git"), tmp.path().join("x").to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not found"), "{stderr}");
}
