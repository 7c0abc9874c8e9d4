//! Pushes into a reftable repository through gixd: each push is one new table (an atomic push of
//! several refs too), annotated tags are stored with their peeled value, the compare-and-swap
//! rules refuse what git refuses with git's words, reflogs are written where git writes them, and
//! afterwards stock git reads, verifies and lists exactly what the client pushed.

use std::path::Path;

use gixd::config::Exports;
use gixd_tests::server::{git_client, serve_with};
use gixd_tests::{commit_files, git, git_out};

fn tables(repo: &Path) -> usize {
    std::fs::read_to_string(repo.join("reftable/tables.list")).unwrap().lines().count()
}

fn push(work: &Path, args: &[&str]) -> (bool, String) {
    let out = git_client(work, &[&["push", "--porcelain"][..], args].concat());
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// gixd serving `base` (every repository exported) with pushes on, and a write token for alice;
/// the server and the push URL of `base/repo.git`.
fn serve_for_pushes(tmp: &Path, base: &Path) -> (gixd::server::Running, String) {
    let token_file = tmp.join("tokens.toml");
    let mut store = gixd::auth::TokenStore::load(&token_file).unwrap();
    let (_, secret) = store.add("alice", "*", true).unwrap();
    store.save().unwrap();
    let server = serve_with(base, |c| {
        c.exports = Exports::All;
        c.token_file = Some(token_file.clone());
        c.services.receive_pack = true;
    });
    let url = format!("http://alice:{secret}@{}/repo.git", server.addr);
    (server, url)
}

#[test]
fn pushes_to_a_reftable_repository_are_one_table_each_and_git_reads_verifies_and_logs_them() {
    for format in ["sha1", "sha256"] {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        let repo = base.join("repo.git");
        std::fs::create_dir_all(&repo).unwrap();
        git(
            &repo,
            &["init", "-q", "--bare", "-b", "main", "--ref-format=reftable", &format!("--object-format={format}")],
        );
        // Tables counted one per transaction: git's auto-compaction off for this repository,
        // reflogs on (a bare repository has none by default).
        git(&repo, &["config", "reftable.autoCompaction", "false"]);
        git(&repo, &["config", "core.logAllRefUpdates", "true"]);
        let (_server, url) = serve_for_pushes(tmp.path(), &base);
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main", &format!("--object-format={format}")]);
        let first = commit_files(&work, &[("a", b"a\n")], "one");

        let start = tables(&repo);
        let (ok, said) = push(&work, &[&url, "main"]);
        assert!(ok, "{format}: first push: {said}");
        assert_eq!(tables(&repo), start + 1, "{format}: one table for the push");
        assert_eq!(git_out(&repo, &["rev-parse", "main"]), first);

        // An atomic push of a branch, an annotated tag and a lightweight tag: one table.
        let second = commit_files(&work, &[("b", b"b\n")], "two");
        git(&work, &["tag", "-a", "-m", "release", "v1"]);
        git(&work, &["tag", "light"]);
        git(&work, &["branch", "topic"]);
        let (ok, said) = push(&work, &["--atomic", &url, "main", "topic", "v1", "light"]);
        assert!(ok, "{format}: atomic push: {said}");
        assert_eq!(tables(&repo), start + 2, "{format}: an atomic push of four refs is one table");
        let peeled = git_out(&repo, &["for-each-ref", "--format=%(*objectname)", "refs/tags/v1"]);
        assert_eq!(peeled, second, "{format}: the annotated tag is stored peeled");

        // Refused as git refuses: a non-fast-forward, and a lease that does not hold.
        git(&work, &["reset", "-q", "--hard", &first]);
        let third = commit_files(&work, &[("c", b"c\n")], "three");
        let (ok, said) = push(&work, &[&url, "main"]);
        assert!(!ok && said.contains("non-fast-forward"), "{format}: {said}");
        let (ok, said) = push(&work, &[&format!("--force-with-lease=main:{first}"), &url, "main"]);
        assert!(!ok && said.contains("stale info"), "{format}: {said}");
        assert_eq!(tables(&repo), start + 2, "{format}: a refused push writes no table");
        let (ok, said) = push(&work, &["--force", &url, "main"]);
        assert!(ok, "{format}: forced: {said}");
        let (ok, said) = push(&work, &[&url, ":topic"]);
        assert!(ok, "{format}: delete: {said}");
        assert_eq!(tables(&repo), start + 4);

        // git sees what the client pushed, verifies the stack, and shows the reflog.
        assert_eq!(git_out(&repo, &["rev-parse", "main"]), third);
        let listed = git_out(&repo, &["for-each-ref", "--format=%(refname)"]);
        assert_eq!(listed, "refs/heads/main\nrefs/tags/light\nrefs/tags/v1", "{format}");
        git(&repo, &["refs", "verify", "--strict"]);
        let fsck = git(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
        assert!(fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
        let reflog = git_out(&repo, &["reflog", "show", "--format=%H %gs", "refs/heads/main"]);
        assert_eq!(reflog, format!("{third} push by alice\n{second} push by alice\n{first} push by alice"), "{format}");
        // ls-remote through gixd equals git's own listing of the directory.
        let ours = String::from_utf8(git_client(&work, &["ls-remote", &url]).stdout).unwrap();
        let theirs = String::from_utf8(git_client(&work, &["ls-remote", repo.to_str().unwrap()]).stdout).unwrap();
        assert_eq!(ours, theirs, "{format}");
    }
}

/// Auto-compaction on (git's default): after many pushes the stack stays short, and git reads it.
#[test]
fn many_pushes_to_a_reftable_repository_keep_its_stack_compacted() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let repo = base.join("repo.git");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "--bare", "-b", "main", "--ref-format=reftable"]);
    let (_server, url) = serve_for_pushes(tmp.path(), &base);
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    for i in 0..24 {
        commit_files(&work, &[("n", format!("{i}\n").as_bytes())], &format!("{i}"));
        let (ok, said) = push(&work, &[&url, &format!("HEAD:refs/heads/b{i}"), "main"]);
        assert!(ok, "push {i}: {said}");
    }
    assert!(tables(&repo) <= 5, "{} tables after 24 pushes", tables(&repo));
    assert_eq!(git_out(&repo, &["for-each-ref", "--format=%(refname)", "refs/heads/"]).lines().count(), 25);
    git(&repo, &["refs", "verify", "--strict"]);
    let leftovers: Vec<String> = std::fs::read_dir(repo.join("reftable"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock") || n.starts_with("tmp_"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(
        std::fs::read_dir(repo.join("reftable")).unwrap().count(),
        tables(&repo) + 1,
        "compacted tables are deleted (tables.list and the listed tables only)"
    );
}
