//! Partial clones (`--filter`), stock git as the client: with `uploadpack.allowFilter` each filter
//! leaves the client, over HTTP and git://, v2 and v0, with the objects a client of stock
//! `git upload-pack` gets; a blob:none clone fetches what a checkout needs lazily (by id, from
//! the promisor remote); without the setting the filter is not advertised and git clones in full;
//! bad filter specs get an error naming the spec, and the server keeps serving.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gixd::server::Running;
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, git_client, git_ok, serve_with, v2_fetch_text};

const TRANSPORTS: [(&str, &str); 4] = [("http", "2"), ("http", "0"), ("git", "2"), ("git", "0")];

/// A copy of a corpus repository below `base`, with `uploadpack.allowFilter` as given (the
/// corpus itself allows filters).
fn copy_of(base: &Path, name: &str, hash: Hash, allow_filter: bool) -> PathBuf {
    let src = corpus::ensure(name, hash);
    let dest = base.join(src.file_name().unwrap());
    let out = std::process::Command::new("cp").arg("-r").arg(&src).arg(&dest).output().unwrap();
    assert!(out.status.success());
    git_ok(&dest, &["config", "uploadpack.allowFilter", if allow_filter { "true" } else { "false" }]);
    dest
}

fn serve(base: &Path) -> Running {
    serve_with(base, |c| c.git_listen = Some("127.0.0.1:0".parse().unwrap()))
}

fn url(server: &Running, transport: &str, repo: &Path) -> String {
    let name = repo.file_name().unwrap().to_str().unwrap();
    match transport {
        "http" => server.url(name),
        _ => format!("git://{}/{name}", server.git_addr.unwrap()),
    }
}

fn filtered_clone(dir: &Path, version: &str, filter: &str, url: &str, dest: &Path) -> BTreeSet<String> {
    let v = format!("protocol.version={version}");
    git_ok(dir, &["-c", &v, "clone", "-q", "--bare", &format!("--filter={filter}"), url, dest.to_str().unwrap()]);
    all_objects(dest)
}

#[test]
fn each_filter_leaves_the_client_the_objects_git_upload_pack_sends() {
    let tmp = tempfile::tempdir().unwrap();
    // A blob limit between the sizes each repository has (wide: 4 and 17 bytes; linear: 2.6 to 8 KiB).
    let repos = [
        (copy_of(tmp.path(), "wide", Hash::Sha1, true), "10"),
        (copy_of(tmp.path(), "linear", Hash::Sha256, true), "6k"),
    ];
    let server = serve(tmp.path());
    for (repo, limit) in &repos {
        let everything = all_objects(repo);
        let (by_size, combined) = (format!("blob:limit={limit}"), format!("combine:blob:limit={limit}+tree:3"));
        for filter in ["blob:none", &by_size, "tree:0", "tree:1", "tree:2", &combined] {
            let theirs = filtered_clone(
                tmp.path(),
                "2",
                filter,
                &format!("file://{}", repo.display()),
                &tmp.path().join("theirs"),
            );
            std::fs::remove_dir_all(tmp.path().join("theirs")).unwrap();
            assert!(theirs.len() < everything.len(), "{filter} left nothing out: a weak case");
            for (transport, version) in TRANSPORTS {
                let dest = tmp.path().join("ours");
                let ours = filtered_clone(tmp.path(), version, filter, &url(&server, transport, repo), &dest);
                std::fs::remove_dir_all(&dest).unwrap();
                let missing: Vec<_> = theirs.difference(&ours).collect();
                let extra: Vec<_> = ours.difference(&theirs).collect();
                assert!(
                    missing.is_empty() && extra.is_empty(),
                    "{} {filter} {transport} v{version}: {} missing {missing:?}, {} extra {extra:?}",
                    repo.display(),
                    missing.len(),
                    extra.len()
                );
            }
        }
    }
}

/// Over v2 the filter setting is enough (the lazy fetch wants objects by id, which a repository
/// serving partial clones allows for objects reachable from visible refs); over v0 git's client
/// asks only a server advertising allow-*-sha1-in-want, so the repository needs that too, as
/// with git.
#[test]
fn a_blob_none_clone_fetches_the_blobs_a_checkout_needs_lazily() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = copy_of(tmp.path(), "linear", Hash::Sha1, true);
    let server = serve(tmp.path());
    for (transport, version) in TRANSPORTS {
        if version == "0" {
            git_ok(&repo, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
        }
        let v = format!("protocol.version={version}");
        let dest = tmp.path().join(format!("work-{transport}-{version}"));
        git_ok(
            tmp.path(),
            &["-c", &v, "clone", "-q", "--filter=blob:none", &url(&server, transport, &repo), dest.to_str().unwrap()],
        );
        let before = all_objects(&dest).len();
        // An old commit's files are not here yet: the checkout fetches them by id.
        let old = git_ok(&dest, &["rev-list", "--max-count=1", "--skip=5", "HEAD"]).trim().to_owned();
        git_ok(&dest, &["-c", &v, "checkout", "-q", &old]);
        assert!(all_objects(&dest).len() > before, "{transport} v{version}: the checkout fetched nothing");
        let expected = git_ok(&repo, &["ls-tree", "-r", &old]);
        assert_eq!(git_ok(&dest, &["ls-tree", "-r", "HEAD"]), expected);
        git_ok(&dest, &["-c", &v, "fsck", "--connectivity-only"]);
        assert!(git_ok(&dest, &["status", "--porcelain"]).is_empty(), "{transport} v{version}: the worktree differs");
    }
}

#[test]
fn without_allow_filter_no_filter_is_advertised_and_git_clones_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = copy_of(tmp.path(), "wide", Hash::Sha1, false);
    let server = serve(tmp.path());
    for (transport, version) in TRANSPORTS {
        let dest = tmp.path().join(format!("c-{transport}-{version}"));
        let ours = filtered_clone(tmp.path(), version, "blob:none", &url(&server, transport, &repo), &dest);
        assert_eq!(ours, all_objects(&repo), "{transport} v{version}");
    }
    // A filter line anyway is refused.
    let head = git_ok(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let text = v2_fetch_text(server.addr, "wide-sha1.git", &head, &["filter blob:none"]);
    assert!(text.contains("ERR filtering capability not negotiated"), "{text}");
}

#[test]
fn malformed_and_unsupported_filters_get_an_error_naming_the_spec_and_the_server_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = copy_of(tmp.path(), "wide", Hash::Sha1, true);
    let server = serve(tmp.path());
    let head = git_ok(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    for (filter, expected) in [
        ("blob:limit=lots", "invalid filter-spec 'blob:limit=lots'"),
        ("tree:-1", "invalid filter-spec 'tree:-1'"),
        ("combine:blob:none+", "invalid filter-spec 'combine:blob:none+'"),
        ("sparse:oid=main:sparse", "filter 'sparse:oid' not supported"),
        ("object:type=blob", "filter 'object:type' not supported"),
    ] {
        let text = v2_fetch_text(server.addr, "wide-sha1.git", &head, &[&format!("filter {filter}")]);
        assert!(text.contains(&format!("ERR {expected}")), "{filter}: {text}");
    }
    // What git itself prints for one of them, and a clone right after.
    let out =
        git_client(tmp.path(), &["clone", "-q", "--filter=sparse:oid=HEAD:x", &server.url("wide-sha1.git"), "bad"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("filter 'sparse:oid' not supported"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    git_ok(tmp.path(), &["clone", "-q", "--filter=blob:none", &server.url("wide-sha1.git"), "good"]);
}
