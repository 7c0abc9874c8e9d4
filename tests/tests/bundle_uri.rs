//! Bundles for bundle-uri, written by `gixd maintenance` where `gixd.bundles = true` and served
//! by gixd at `<repo>/gixd-bundles/`: stock git verifies them and clones with `--bundle-uri`
//! (the same refs and objects as a plain clone), a hidden ref and what only it reaches never go
//! into a bundle, new history becomes an incremental bundle with a higher creation token that a
//! later `git fetch` downloads alone, and a private repository's bundles need its credentials.

use std::path::{Path, PathBuf};

use gixd::config::Exports;
use gixd_tests::server::{git_client, http, serve_with};
use gixd_tests::{commit_files, git, git_out};

fn bundle_files(repo: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.join("gixd-bundles"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".bundle"))
        .collect();
    names.sort();
    names
}

fn bundle_requests(log: &Path) -> usize {
    std::fs::read_to_string(log).unwrap_or_default().lines().filter(|l| l.contains("\"service\":\"bundle\"")).count()
}

#[test]
fn maintenance_writes_bundles_git_verifies_and_clones_with_and_fetches_only_the_newer_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, work) = (tmp.path().join("base"), tmp.path().join("work"));
    std::fs::create_dir_all(&base).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    commit_files(&work, &[("a.txt", b"first\n")], "one");
    git(&work, &["tag", "-a", "-m", "release", "v1"]);
    commit_files(&work, &[("b.txt", b"second\n")], "two");
    git(&work, &["checkout", "-q", "-b", "secret"]);
    commit_files(&work, &[("secret.txt", b"only a hidden ref reaches this\n")], "secret");
    let secret_blob = git_out(&work, &["rev-parse", "HEAD:secret.txt"]);
    git(&work, &["update-ref", "refs/hidden/secret", "secret"]);
    git(&work, &["checkout", "-q", "main"]);
    git(&work, &["branch", "-D", "secret"]);
    let repo = base.join("repo.git");
    git(tmp.path(), &["clone", "-q", "--mirror", work.to_str().unwrap(), repo.to_str().unwrap()]);
    git(&repo, &["config", "uploadpack.hideRefs", "refs/hidden"]);

    // Off unless asked for.
    assert!(gixd::maintenance::run(&repo).unwrap().bundle.is_none());
    assert!(!repo.join("gixd-bundles").exists());
    git(&repo, &["config", "gixd.bundles", "true"]);
    let report = gixd::maintenance::run(&repo).unwrap();
    assert!(report.bundle.is_some_and(|bytes| bytes > 0));
    let first = bundle_files(&repo);
    assert_eq!(first.len(), 1);
    let bundle = repo.join("gixd-bundles").join(&first[0]);
    let empty = tmp.path().join("empty");
    git(tmp.path(), &["init", "-q", empty.to_str().unwrap()]);
    git(&empty, &["bundle", "verify", "-q", bundle.to_str().unwrap()]);
    let heads = git_out(&empty, &["bundle", "list-heads", bundle.to_str().unwrap()]);
    assert!(heads.contains("refs/heads/main") && heads.contains("refs/tags/v1"), "{heads}");
    assert!(!heads.contains("hidden"), "a hidden ref is never in a bundle: {heads}");
    let unbundled = tmp.path().join("unbundled");
    git(tmp.path(), &["clone", "-q", "--mirror", bundle.to_str().unwrap(), unbundled.to_str().unwrap()]);
    let has = git_client(&unbundled, &["cat-file", "-e", &secret_blob]);
    assert!(!has.status.success(), "what only the hidden ref reaches is not in the bundle");

    let log = tmp.path().join("access.log");
    let server = serve_with(&base, |c| {
        c.exports = Exports::All;
        c.access_log = Some(log.clone());
    });
    let url = format!("http://{}/repo.git", server.addr);
    let list = format!("{url}/gixd-bundles/list");
    let clone = tmp.path().join("clone");
    let out = git_client(
        tmp.path(),
        &["clone", "-q", "--bare", &format!("--bundle-uri={list}"), &url, clone.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!git_out(&clone, &["for-each-ref", "refs/bundles/"]).is_empty(), "the clone unbundled the bundle");
    assert_eq!(bundle_requests(&log), 2, "the list and the one bundle");
    let plain = tmp.path().join("plain");
    git(tmp.path(), &["clone", "-q", "--bare", &url, plain.to_str().unwrap()]);
    for what in ["refs/heads/", "refs/tags/"] {
        assert_eq!(git_out(&clone, &["for-each-ref", what]), git_out(&plain, &["for-each-ref", what]));
    }
    git(&clone, &["fsck", "--no-progress"]);
    assert!(!git_out(&clone, &["config", "fetch.bundleURI"]).is_empty(), "git remembers the list");

    // New history: an incremental bundle with a higher token; a fetch takes only it.
    commit_files(&work, &[("c.txt", b"third\n")], "three");
    git(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
    std::thread::sleep(std::time::Duration::from_millis(10));
    let report = gixd::maintenance::run(&repo).unwrap();
    assert!(report.bundle.is_some());
    let second = bundle_files(&repo);
    assert_eq!(second.len(), 2, "{second:?}");
    let newer = repo.join("gixd-bundles").join(&second[1]);
    let verify = git_client(&empty, &["bundle", "verify", newer.to_str().unwrap()]);
    assert!(!verify.status.success(), "an incremental bundle needs its prerequisites");
    git(&clone, &["bundle", "verify", "-q", newer.to_str().unwrap()]);
    assert!(gixd::maintenance::run(&repo).unwrap().bundle.is_none(), "nothing new: no bundle");

    let before = bundle_requests(&log);
    let out = git_client(&clone, &["fetch", "-q", &url, "+refs/heads/*:refs/heads/*"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(git_out(&clone, &["rev-parse", "main"]), git_out(&work, &["rev-parse", "main"]));
    assert_eq!(bundle_requests(&log) - before, 2, "the list and the newer bundle only");
    let token = git_out(&clone, &["config", "fetch.bundleCreationToken"]);
    assert_eq!(format!("{token}.bundle"), second[1], "the client took the newer bundle's token");
}

/// `base/<name>` (bare) cloned from a one-commit work repository in `format`, with
/// `gixd.bundles` on and one maintenance run done: (base, work, repository).
fn bundled_repository(tmp: &Path, name: &str, format: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (base, work) = (tmp.join("base"), tmp.join("work"));
    std::fs::create_dir_all(&base).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main", &format!("--object-format={format}")]);
    commit_files(&work, &[("a.txt", b"first\n")], "one");
    let repo = base.join(name);
    git(tmp, &["clone", "-q", "--bare", work.to_str().unwrap(), repo.to_str().unwrap()]);
    git(&repo, &["config", "gixd.bundles", "true"]);
    gixd::maintenance::run(&repo).unwrap();
    (base, work, repo)
}

#[test]
fn a_private_repository_s_bundles_need_its_credentials() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, _work, repo) = bundled_repository(tmp.path(), "private.git", "sha1");
    let bundle = bundle_files(&repo).remove(0);
    let token_file = tmp.path().join("tokens.toml");
    let mut store = gixd::auth::TokenStore::load(&token_file).unwrap();
    let (_, secret) = store.add("alice", "*", false).unwrap();
    store.save().unwrap();
    let server = serve_with(&base, |c| {
        c.exports = Exports::DaemonExportOk;
        c.token_file = Some(token_file.clone());
    });
    for file in ["list", bundle.as_str()] {
        let path = format!("/private.git/gixd-bundles/{file}");
        let anonymous = http(server.addr, "GET", &path, &[], b"");
        assert!(matches!(anonymous.status, 401 | 404), "{file}: {}", anonymous.status);
        let authorized = http(server.addr, "GET", &path, &[("Authorization", &format!("Bearer {secret}"))], b"");
        assert_eq!(authorized.status, 200, "{file}");
        assert_eq!(authorized.body, std::fs::read(repo.join("gixd-bundles").join(file)).unwrap(), "{file}");
    }
    let unlisted = http(server.addr, "GET", "/private.git/gixd-bundles/1.bundle", &[], b"");
    assert_eq!(unlisted.status, 404);
}

/// With `uploadpack.advertiseBundleURIs`, the v2 `bundle-uri` command hands git the list: a clone
/// with `transfer.bundleURI` downloads the bundle from gixd, and the command's answer is
/// byte-identical to git upload-pack's given the same `bundle.*` settings.
#[test]
fn the_bundle_uri_command_lists_the_bundles_and_git_clones_from_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, _work, repo) = bundled_repository(tmp.path(), "repo.git", "sha1");
    let log = tmp.path().join("access.log");
    let server = serve_with(&base, |c| {
        c.exports = Exports::All;
        c.access_log = Some(log.clone());
    });
    let url = format!("http://{}/repo.git", server.addr);
    let request = [gixd_tests::server::pkt("command=bundle-uri\n"), b"0000".to_vec()].concat();
    let ask = || {
        http(
            server.addr,
            "POST",
            "/repo.git/git-upload-pack",
            &[("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")],
            &request,
        )
        .body
    };
    assert!(String::from_utf8_lossy(&ask()).contains("ERR"), "off by default, as in git");

    git(&repo, &["config", "uploadpack.advertiseBundleURIs", "true"]);
    let ours = ask();
    // git upload-pack with the same bundle.* settings in its config answers the same bytes.
    let twin = tmp.path().join("twin.git");
    git(tmp.path(), &["clone", "-q", "--bare", repo.to_str().unwrap(), twin.to_str().unwrap()]);
    git(&twin, &["config", "uploadpack.advertiseBundleURIs", "true"]);
    for line in gixd_tests::server::pkt_lines(&ours).into_iter().flatten() {
        let text = String::from_utf8(line).unwrap();
        let (key, value) = text.split_once('=').unwrap();
        git(&twin, &["config", "--add", key, value]);
    }
    let theirs = gixd_tests::git_upload_pack(&twin, &["--stateless-rpc"], true, &request);
    assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&theirs));

    let clone = tmp.path().join("clone");
    let out = git_client(
        tmp.path(),
        &["-c", "transfer.bundleURI=true", "clone", "-q", "--bare", &url, clone.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let downloaded = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"service\":\"bundle\"") && l.contains("\"http_status\":200"))
        .count();
    assert_eq!(downloaded, 1, "the advertised bundle was downloaded from gixd");
    assert!(
        !git_out(&clone, &["for-each-ref", "refs/bundles/"]).is_empty(),
        "the clone unbundled the advertised bundle"
    );
    git(&clone, &["fsck", "--no-progress"]);
}

/// A SHA-256 repository's bundles are format v3 with `@object-format=sha256`, and git takes them.
#[test]
fn sha256_bundles_are_format_v3_and_git_clones_with_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, work, repo) = bundled_repository(tmp.path(), "repo.git", "sha256");
    let bundle = repo.join("gixd-bundles").join(bundle_files(&repo).remove(0));
    let data = std::fs::read(&bundle).unwrap();
    assert!(
        data.starts_with(b"# v3 git bundle\n@object-format=sha256\n"),
        "{:?}",
        String::from_utf8_lossy(&data[..40])
    );
    let empty = tmp.path().join("empty");
    git(tmp.path(), &["init", "-q", "--object-format=sha256", empty.to_str().unwrap()]);
    git(&empty, &["bundle", "verify", "-q", bundle.to_str().unwrap()]);
    let server = serve_with(&base, |c| c.exports = Exports::All);
    let url = format!("http://{}/repo.git", server.addr);
    let clone = tmp.path().join("clone");
    let list = format!("--bundle-uri={url}/gixd-bundles/list");
    let out = git_client(tmp.path(), &["clone", "-q", "--bare", &list, &url, clone.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!git_out(&clone, &["for-each-ref", "refs/bundles/"]).is_empty());
    assert_eq!(git_out(&clone, &["rev-parse", "main"]), git_out(&work, &["rev-parse", "main"]));
}
