//! A repository gixd cannot read is refused with the reason, never served as empty: a ref storage
//! backend gixd does not know (`extensions.refStorage`; files and reftable are read), an extension
//! gixd does not know, and
//! `core.repositoryformatversion = 2`. Clone, fetch, ls-remote and push over HTTP and git://,
//! and archive over git://, each fail with a message naming the reason; maintenance leaves the
//! repository untouched. Stock git's own answer on the same directory is shown beside each.

use std::path::{Path, PathBuf};

use gixd::config::Exports;
use gixd_tests::server::{git_client, serve_with};
use gixd_tests::{commit_files, git, git_command};

/// One repository of each kind below `base`, each with a commit on `main`: (name, what the
/// refusal must say).
fn repositories(base: &Path) -> Vec<(&'static str, &'static str)> {
    let kinds = [
        ("unknown-ref-storage", "refs in lmdb"),
        ("unknown-extension", "extensions.frobnicate"),
        ("format-version-2", "repositoryformatversion is 2"),
    ];
    for (name, _) in kinds {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q"]);
        commit_files(&dir, &[("README", b"history\n")], "first");
        let config = dir.join(".git/config");
        let config = config.to_str().unwrap();
        match name {
            "unknown-extension" => {
                git(&dir, &["config", "--file", config, "core.repositoryformatversion", "1"]);
                git(&dir, &["config", "--file", config, "extensions.frobnicate", "true"]);
            }
            "unknown-ref-storage" => {
                git(&dir, &["config", "--file", config, "core.repositoryformatversion", "1"]);
                git(&dir, &["config", "--file", config, "extensions.refStorage", "lmdb"]);
            }
            "format-version-2" => {
                git(&dir, &["config", "--file", config, "core.repositoryformatversion", "2"]);
            }
            _ => {}
        }
    }
    kinds.to_vec()
}

/// Stock git's answer on the directory itself: `git ls-remote <dir>`.
fn stock_git(dir: &Path) -> (bool, String) {
    let out = git_command(dir).args(["ls-remote", "."]).output().unwrap();
    let text = if out.status.success() { out.stdout } else { out.stderr };
    (out.status.success(), String::from_utf8_lossy(&text).trim().to_owned())
}

fn failing(dir: &Path, args: &[&str]) -> String {
    let out = git_client(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "git {args:?} must fail, it succeeded:\n{stderr}");
    stderr
}

fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                out.push((entry.path(), meta.len()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn repositories_gixd_cannot_read_are_refused_with_the_reason_on_every_service_and_never_served_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let kinds = repositories(&base);
    let token_file = tmp.path().join("tokens.toml");
    let mut store = gixd::auth::TokenStore::load(&token_file).unwrap();
    let (_, secret) = store.add("alice", "*", true).unwrap();
    store.save().unwrap();
    let server = serve_with(&base, |c| {
        c.exports = Exports::All;
        c.token_file = Some(token_file.clone());
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
        c.services.upload_archive = true;
    });
    let git_addr = server.git_addr.unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q"]);
    commit_files(&work, &[("new", b"new\n")], "to push");

    for (name, reason) in kinds {
        let (git_ok, git_says) = stock_git(&base.join(name));
        println!("{name}: stock git ls-remote {}: {git_says}", if git_ok { "lists" } else { "refuses" });
        assert!(!git_ok, "stock git refuses {name} too: {git_says}");
        let http = format!("http://{}/{name}", server.addr);
        let http_push = format!("http://alice:{secret}@{}/{name}", server.addr);
        let git_url = format!("git://{git_addr}/{name}");
        for (transport, url, push_url) in [("http", &http, &http_push), ("git://", &git_url, &git_url)] {
            for version in ["0", "2"] {
                let proto = format!("protocol.version={version}");
                let dest = tmp.path().join(format!("clone-{name}-{}-{version}", transport.trim_end_matches("://")));
                let cases: [(&str, Vec<&str>); 3] = [
                    ("clone", vec!["-c", &proto, "clone", url, dest.to_str().unwrap()]),
                    ("ls-remote", vec!["-c", &proto, "ls-remote", url]),
                    ("fetch", vec!["-c", &proto, "fetch", url, "main"]),
                ];
                for (what, args) in cases {
                    let said = failing(&work, &args);
                    assert!(said.contains(reason), "{what} of {name} over {transport} v{version}: {said}");
                    assert!(!dest.join(".git/refs").exists() || what != "clone", "no empty clone is left");
                }
            }
            let said = failing(&work, &["push", push_url, "HEAD:refs/heads/pushed"]);
            assert!(said.contains(reason), "push to {name} over {transport}: {said}");
        }
        let said = failing(&work, &["archive", &format!("--remote={git_url}"), "main"]);
        assert!(said.contains(reason), "archive of {name} over git://: {said}");

        let git_dir = base.join(name).join(".git");
        let before = listing(&git_dir);
        let refused = gixd::maintenance::run(&git_dir).expect_err("maintenance refuses it");
        assert!(refused.to_string().contains(reason), "maintenance of {name}: {refused}");
        assert_eq!(listing(&git_dir), before, "maintenance left {name} untouched");
    }
}

#[test]
fn a_private_repository_gixd_cannot_read_is_not_found_to_those_who_may_not_read_it() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    repositories(&base);
    let server = serve_with(&base, |c| {
        c.exports = Exports::DaemonExportOk;
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let said = failing(tmp.path(), &["ls-remote", &format!("http://{}/unknown-ref-storage", server.addr)]);
    assert!(!said.contains("lmdb"), "{said}");
    assert!(said.contains("not found"), "{said}");
    let said = failing(tmp.path(), &["ls-remote", &format!("git://{}/unknown-ref-storage", server.git_addr.unwrap())]);
    assert!(!said.contains("refs in lmdb"), "{said}");
}
