//! Making repositories on a gixd server, both ways: `gixd repo create` (SHA-1 and SHA-256,
//! files or reftable refs, public or private), then clone and push with stock git; `gixd repo list`; and push-to-create,
//! off by default: a push to a missing path creates the repository for a token made with
//! `--create` whose glob matches it, and for no one else (anonymous, a write token without
//! `--create`, a path outside its glob, a path outside the base); a second creator racing the first
//! is refused; a push killed while creating leaves nothing, and the next start removes what it left.

mod common;
use common::{Server, git, git_ok};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gixd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gixd")).args(args).output().unwrap()
}

fn gixd_ok(args: &[&str]) -> String {
    let out = gixd(args);
    assert!(out.status.success(), "gixd {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn serve(base: &Path, tokens: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gixd"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--base-path", base.to_str().unwrap()])
        .args(["--token-file", tokens.to_str().unwrap()])
        .args(extra)
        .envs(env.iter().copied());
    common::start_serve(command)
}

fn token(tokens: &Path, glob: &str, flags: &[&str]) -> String {
    let store = format!("--token-file={}", tokens.display());
    gixd_ok(&[&["token", "add", "--user", "alice", "--repo", glob, &store][..], flags].concat())
}

/// A work repository with one commit on main, in the object format given.
fn work(tmp: &Path, name: &str, format: &str) -> PathBuf {
    let work = tmp.join(name);
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main", &format!("--object-format={format}")]);
    std::fs::write(work.join("a"), format!("{name}\n")).unwrap();
    git_ok(&work, &["add", "a"]);
    git_ok(&work, &["commit", "-q", "-m", "one"]);
    work
}

/// Everything below `dir` whose name says a creation is in progress or was left.
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".gixd-new-") || name.ends_with(".gixd-create") {
                found.push(entry.path());
            } else if entry.path().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found
}

#[test]
fn repo_create_makes_sha1_and_sha256_repositories_stock_git_clones_and_pushes_and_repo_list_shows_them() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let base_arg = format!("--base-path={}", base.display());
    let made = gixd_ok(&["repo", "create", "team/one", "--public", "--description", "the first", &base_arg]);
    assert_eq!(PathBuf::from(&made), base.canonicalize().unwrap().join("team/one.git"));
    gixd_ok(&["repo", "create", "team/two.git", "--object-format", "sha256", &base_arg]);
    gixd_ok(&["repo", "create", "team/three", "--ref-format", "reftable", &base_arg]);
    let three = base.join("team/three.git");
    assert_eq!(git_ok(&three, &["rev-parse", "--show-ref-format"]), "reftable");
    assert_eq!(
        git_ok(&three, &["symbolic-ref", "HEAD"]),
        git_ok(&base.join("team/one.git"), &["symbolic-ref", "HEAD"]),
        "HEAD names the branch a files repository's does"
    );
    git_ok(&three, &["refs", "verify", "--strict"]);
    let again = gixd(&["repo", "create", "team/one", &base_arg]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("exists already"));
    for bad in ["../escape", "team/one.git/inner", ".hidden"] {
        let out = gixd(&["repo", "create", bad, &base_arg]);
        assert!(!out.status.success(), "{bad} is refused");
        assert!(!base.parent().unwrap().join("escape.git").exists());
    }
    assert_eq!(std::fs::read_to_string(base.join("team/one.git/description")).unwrap(), "the first\n");
    assert_eq!(git_ok(&base.join("team/two.git"), &["rev-parse", "--show-object-format"]), "sha256");
    assert_eq!(git_ok(&base.join("team/one.git"), &["config", "receive.fsckObjects"]), "true");
    assert_eq!(std::fs::read_dir(base.join("team/one.git/hooks")).unwrap().count(), 0, "no hook");

    let list = gixd_ok(&["repo", "list", &base_arg]);
    let row =
        |name: &str| list.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {list}")).to_owned();
    assert!(row("team/one.git").contains("sha1") && row("team/one.git").contains("public"), "{list}");
    assert!(row("team/two.git").contains("sha256") && row("team/two.git").contains("private"), "{list}");

    let tokens = tmp.path().join("tokens.toml");
    let secret = token(&tokens, "team/*", &["--write"]);
    let server = serve(&base, &tokens, &[], &[]);
    for (name, format) in [("one", "sha1"), ("two", "sha256"), ("three", "sha1")] {
        let work = work(tmp.path(), name, format);
        let url = format!("http://alice:{secret}@{}/team/{name}.git", server.addr);
        git_ok(&work, &["push", "-q", &url, "main"]);
        let clone = tmp.path().join(format!("clone-{name}"));
        git_ok(tmp.path(), &["-c", "http.proactiveAuth=basic", "clone", "-q", &url, clone.to_str().unwrap()]);
        assert_eq!(git_ok(&clone, &["rev-parse", "HEAD"]), git_ok(&work, &["rev-parse", "HEAD"]), "{name}");
        assert_eq!(git_ok(&clone, &["rev-parse", "--show-object-format"]), format);
    }
    git_ok(&three, &["refs", "verify", "--strict"]);
    let fsck = git(&three, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
    let list = gixd_ok(&["repo", "list", &base_arg]);
    assert!(!list.contains(" 0\n") && !list.trim_end().ends_with(" 0"), "sizes grew with the pushes: {list}");
}

#[test]
fn a_push_creates_a_missing_repository_only_for_a_token_that_may_create_it() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let tokens = tmp.path().join("tokens.toml");
    let creator = token(&tokens, "team/*", &["--write", "--create"]);
    let writer = token(&tokens, "team/*", &["--write"]);
    let work = work(tmp.path(), "work", "sha1");
    let push = |server: &Server, secret: Option<&str>, path: &str| {
        let auth = secret.map_or(String::new(), |s| format!("alice:{s}@"));
        let out = git(&work, &["push", &format!("http://{auth}{}/{path}", server.addr), "main"]);
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };

    // Off by default: not even the creator's token makes a repository.
    let server = serve(&base, &tokens, &[], &[]);
    let (ok, said) = push(&server, Some(&creator), "team/new.git");
    assert!(!ok && said.contains("not found"), "{said}");
    drop(server);

    let server = serve(&base, &tokens, &["--push-to-create"], &[]);
    for (who, secret, path) in [
        ("anonymous", None, "team/new.git"),
        ("a write token without --create", Some(writer.as_str()), "team/new.git"),
        ("a path outside the glob", Some(creator.as_str()), "other/new.git"),
        ("a path outside the base", Some(creator.as_str()), "team/..%2F..%2Fescape.git"),
        ("a hidden path", Some(creator.as_str()), "team/.new.git"),
    ] {
        let (ok, said) = push(&server, secret, path);
        assert!(!ok, "{who}: refused");
        assert!(said.contains("not found") || said.contains("could not read Username"), "{who}: {said}");
    }
    assert!(!base.join("team").exists() || std::fs::read_dir(base.join("team")).unwrap().next().is_none());
    assert!(!tmp.path().join("escape.git").exists());

    let (ok, said) = push(&server, Some(&creator), "team/new");
    assert!(ok, "{said}");
    let created = base.join("team/new.git");
    assert_eq!(git_ok(&created, &["rev-parse", "main"]), git_ok(&work, &["rev-parse", "main"]));
    assert!(!created.join("git-daemon-export-ok").exists(), "private");
    assert!(leftovers(&base).is_empty(), "{:?}", leftovers(&base));
    let fsck = git(&created, &["fsck", "--full", "--strict"]);
    assert!(fsck.status.success(), "{}", String::from_utf8_lossy(&fsck.stderr));
    // It exists now: the next push is an ordinary one.
    std::fs::write(work.join("b"), "b\n").unwrap();
    git_ok(&work, &["add", "b"]);
    git_ok(&work, &["commit", "-q", "-m", "two"]);
    let (ok, said) = push(&server, Some(&creator), "team/new.git");
    assert!(ok, "{said}");
    assert_eq!(git_ok(&created, &["rev-parse", "main"]), git_ok(&work, &["rev-parse", "main"]));
}

#[test]
fn a_second_creator_racing_the_first_is_refused_and_a_killed_creating_push_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let tokens = tmp.path().join("tokens.toml");
    let creator = token(&tokens, "*", &["--write", "--create"]);
    let work = work(tmp.path(), "work", "sha1");
    let url = |server: &Server| format!("http://alice:{creator}@{}/racing.git", server.addr);

    // A creation in progress (its lock, as a push that is creating holds it): a second creator
    // is told so, and nothing is made.
    let server = serve(&base, &tokens, &["--push-to-create"], &[]);
    let lock = base.join("racing.git.gixd-create");
    std::fs::write(&lock, format!("elsewhere {}\n", std::process::id())).unwrap();
    let out = git(&work, &["push", &url(&server), "main"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("being created by another request"), "{said}");
    assert!(!base.join("racing.git").exists());
    std::fs::remove_file(&lock).unwrap();
    drop(server);

    // Killed inside the push that creates it: no repository, and the next start removes what the
    // creation left.
    let mut server = serve(&base, &tokens, &["--push-to-create"], &[("GIXD_TEST_KILL_AT", "push-refs-locked")]);
    let out = git(&work, &["push", &url(&server), "main"]);
    assert!(!out.status.success(), "the server died inside the push");
    let status = server.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "killed at its kill point: {status:?}");
    assert!(!base.join("racing.git").exists(), "no repository appeared");
    assert_eq!(leftovers(&base).len(), 2, "the hidden repository and its lock: {:?}", leftovers(&base));
    let server = serve(&base, &tokens, &["--push-to-create"], &[]);
    assert!(leftovers(&base).is_empty(), "the start removed them: {:?}", leftovers(&base));
    git_ok(&work, &["push", "-q", &url(&server), "main"]);
    assert_eq!(git_ok(&base.join("racing.git"), &["rev-parse", "main"]), git_ok(&work, &["rev-parse", "main"]));
}
