//! The ref state (`gixd::repo::upload_ref_state`): the fingerprint every ls-refs and every
//! fetch computes to know whether the refs it cached are still the repository's, and the pack
//! cache's key. It must change with every loose ref update and cost few system calls: a
//! stateless clone computes it twice, a repository that only takes pushes keeps every ref loose.

use std::path::{Path, PathBuf};

use gixd_tests::{commit_files, git, syscall_counts_of_test, temp_repo};

/// Loose refs in the counted repository.
const LOOSE_REFS: usize = 300;
/// Times the inner test computes the state.
const ROUNDS: usize = 10;

fn state(repo: &Path) -> u64 {
    gixd::repo::upload_ref_state(&gix::open(repo).expect("opens")).expect("state")
}

/// A repository with one commit on `main`, in a work tree.
fn repo_with_a_commit() -> (tempfile::TempDir, PathBuf, String) {
    let (tmp, repo) = temp_repo(false);
    let id = commit_files(&repo, &[("a", b"a\n")], "one");
    (tmp, repo, id)
}

#[test]
fn the_ref_state_changes_with_every_loose_ref_change_and_not_with_a_lock_file() {
    let (_tmp, repo, first) = repo_with_a_commit();
    let second = commit_files(&repo, &[("a", b"b\n")], "two");
    git(&repo, &["update-ref", "refs/heads/topic/deep/x", &first]);
    let mut seen = vec![state(&repo)];
    let changed = |what: &str, seen: &mut Vec<u64>| {
        let now = state(&repo);
        assert!(!seen.contains(&now), "{what}: the state is one seen before");
        seen.push(now);
    };
    // Same length, same file name, nested: only the bytes differ.
    git(&repo, &["update-ref", "refs/heads/topic/deep/x", &second]);
    changed("a nested loose ref moved", &mut seen);
    git(&repo, &["update-ref", "refs/tags/new/dir/t", &first]);
    changed("a loose ref in a new directory", &mut seen);
    git(&repo, &["update-ref", "-d", "refs/tags/new/dir/t"]);
    let after_delete = state(&repo);
    assert_eq!(after_delete, seen[1], "deleting the ref again gives the state without it");
    git(&repo, &["symbolic-ref", "refs/heads/alias", "refs/heads/topic/deep/x"]);
    changed("a symbolic loose ref", &mut seen);

    let git_dir = repo.join(".git");
    let before = state(&repo);
    std::fs::write(git_dir.join("refs/heads/main.lock"), format!("{first}\n")).unwrap();
    assert_eq!(state(&repo), before, "a ref being written (its lock file) is not a ref yet");
    std::fs::remove_file(git_dir.join("refs/heads/main.lock")).unwrap();

    // A link loop below refs/ is not followed (the state is computed, and counts the link).
    std::os::unix::fs::symlink("..", git_dir.join("refs/heads/loop")).unwrap();
    changed("a link below refs/", &mut seen);
}

#[test]
fn the_ref_state_reads_each_loose_ref_with_three_system_calls() {
    let repo = counted_repo();
    let calls = "openat,open,read,pread64,close,statx,newfstatat,fstat,lseek,getdents64";
    let Some(counts) = syscall_counts_of_test("inner_compute_the_ref_state", calls) else {
        assert!(std::env::var_os("CI").is_none(), "strace is required in CI (.ci/run installs it)");
        eprintln!("strace is not installed: not counted");
        return;
    };
    let total: u64 = counts.values().sum();
    // Opening the repository, the test harness and one state without loose refs cost a few
    // hundred calls; each loose ref read costs openat, read and close.
    let bound = (3 * LOOSE_REFS * ROUNDS + 2000) as u64;
    assert!(
        total <= bound,
        "{ROUNDS} ref states of {LOOSE_REFS} loose refs made {total} file system calls (bound {bound}): {counts:?} \
         (gix-ref's loose iterator made about six per ref)"
    );
    assert!(state(&repo) != 0);
}

/// The repository the counted test reads: `LOOSE_REFS` loose refs, made outside the traced run.
fn counted_repo() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("ref-state").join(format!("loose-{LOOSE_REFS}.git"));
    if dir.join("ready").exists() {
        return dir;
    }
    let scratch = target.join("ref-state").join(format!("scratch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let work = scratch.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q"]);
    let id = commit_files(&work, &[("a", b"a\n")], "one");
    let mut stdin = String::new();
    for i in 0..LOOSE_REFS {
        stdin.push_str(&format!("create refs/heads/branch/{}/b{i} {id}\n", i % 10));
    }
    let out = gixd_tests::output_with_input(
        {
            let mut cmd = gixd_tests::git_command(&work);
            cmd.args(["update-ref", "--stdin"]);
            cmd
        },
        stdin.as_bytes(),
    );
    assert!(out.is_empty());
    std::fs::write(work.join(".git/ready"), "").unwrap();
    match std::fs::rename(work.join(".git"), &dir) {
        Ok(()) => {}
        Err(_) if dir.join("ready").exists() => {}
        Err(err) => panic!("{err}"),
    }
    let _ = std::fs::remove_dir_all(&scratch);
    dir
}

#[test]
#[ignore = "runs under strace, started by the_ref_state_reads_each_loose_ref_with_three_system_calls"]
fn inner_compute_the_ref_state() {
    let repo = gix::open(counted_repo()).expect("opens");
    let loose = std::fs::read_dir(repo.common_dir().join("refs/heads/branch/0")).unwrap().count();
    assert_eq!(loose, LOOSE_REFS / 10);
    let first = gixd::repo::upload_ref_state(&repo).unwrap();
    for _ in 1..ROUNDS {
        assert_eq!(gixd::repo::upload_ref_state(&repo).unwrap(), first);
    }
}

/// Stock git packs refs (`git pack-refs --all`: packed-refs rewritten, then the loose files
/// deleted) while gixd reads them, between its read of packed-refs and its listing of the loose
/// files: that read shows a branch where packed-refs had it before, older than the refs were
/// when the request began, and a fetch of its new tip was refused as "not our ref" (the soak's
/// 1 in 2 252). The refs are read again when their state moved under the read.
#[test]
fn refs_packed_by_git_while_gixd_reads_them_are_served_as_they_are_after_not_before() {
    let (_tmp, repo, first) = repo_with_a_commit();
    let second = commit_files(&repo, &[("a", b"b\n")], "two");
    git(&repo, &["update-ref", "refs/heads/moving", &first]);
    git(&repo, &["pack-refs", "--all"]);
    git(&repo, &["update-ref", "refs/heads/moving", &second]);
    let repos = gixd::repo::Repos::new(repo.parent().unwrap(), gixd::config::Exports::All).unwrap();
    let served = repos.resolve("/repo").unwrap();
    let packer = repo.clone();
    let mut packed = false;
    *gixd::repo::ref_store::BETWEEN_PACKED_AND_LOOSE.lock().unwrap() = Some(Box::new(move || {
        if !std::mem::replace(&mut packed, true) {
            git(&packer, &["pack-refs", "--all"]);
        }
    }));
    let (refs, _) = repos.upload_refs(&served, &served.repo.to_thread_local()).unwrap();
    let at = refs.refs.iter().find(|r| r.name == "refs/heads/moving").map(|r| r.id.to_string());
    assert_eq!(at.as_deref(), Some(second.as_str()), "the branch where it is, not where packed-refs had it");
}
