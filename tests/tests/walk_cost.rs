//! What a whole-history walk pays for a tree entry: an entry unchanged from the version of its
//! tree walked before at the same path is not looked up among the objects met (a clone of
//! git.git meets 59 million entries, and each look-up missed the CPU cache), and the walk selects
//! what it selected before.

use std::fmt::Write as _;

use gixd::repo::RefSnapshot;
use gixd::select;
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::git_ok;

/// A history of `commits` commits over a root of `files` files and a directory `sub/` of 50:
/// each commit changes one root file, every fifth one file of `sub/` too. Written by `git
/// fast-import`.
fn history(dir: &std::path::Path, hash: Hash, commits: usize, files: usize) -> std::path::PathBuf {
    let path = dir.join(format!("history-{}.git", hash.name()));
    git_ok(dir, &["init", "-q", "--bare", &format!("--object-format={}", hash.name()), path.to_str().unwrap()]);
    let mut stream = String::new();
    for n in 0..commits {
        let _ = write!(
            stream,
            "commit refs/heads/main\ncommitter A <a@example.com> {} +0000\ndata 2\nc\n",
            1_700_000_000 + n
        );
        let mut changed = vec![(format!("f{}", if n == 0 { usize::MAX } else { n % files }), n)];
        if n == 0 {
            changed =
                (0..files).map(|f| (format!("f{f}"), n)).chain((0..50).map(|f| (format!("sub/s{f}"), n))).collect();
        } else if n % 5 == 0 {
            changed.push((format!("sub/s{}", n % 50), n));
        }
        for (file, version) in changed {
            let body = format!("{file} version {version}\n");
            let _ = write!(stream, "M 100644 inline {file}\ndata {}\n{body}", body.len());
        }
        stream.push('\n');
    }
    let mut cmd = gixd_tests::git_command(&path);
    cmd.args(["fast-import", "--quiet"]);
    gixd_tests::output_with_input(cmd, stream.as_bytes());
    path
}

#[test]
fn a_walk_looks_up_only_the_tree_entries_changed_since_the_version_walked_before() {
    use std::sync::atomic::Ordering::Relaxed;
    let looked_up = || select::ENTRIES_LOOKED_UP.load(Relaxed);
    let tmp = tempfile::tempdir().unwrap();
    let (commits, files) = (40, 200);
    for hash in Hash::ALL {
        let path = history(tmp.path(), hash, commits, files);
        let repo = gix::open(&path).unwrap();
        let refs = RefSnapshot::load(&repo).unwrap();
        let wants = refs.tips();
        let before = looked_up();
        let clone = select::select_by_walking(&repo, &gixd_tests::select_request(&wants, &[], &refs)).unwrap();
        assert_eq!(clone.commits, commits);
        let all = gixd_tests::server::rev_list_objects(&path, &["--all"]);
        assert_eq!(clone.objects.len(), all.len(), "every object selected");
        // Entries of new tree versions: a root of files + 1 per commit, `sub/`'s 50 every fifth.
        let met = commits * (files + 1) + commits / 5 * 50;
        // The newest tree and its `sub/` are looked up whole; after that, only what changed: a
        // file of the root, and every fifth commit `sub/` and a file in it.
        let expected = (files + 1 + 50) + (commits - 1) + 2 * (commits / 5);
        let n = looked_up() - before;
        assert!(n <= expected, "{n} of {met} entries met looked up (changed: {expected})");
    }
}

#[test]
fn a_walk_skipping_unchanged_entries_selects_what_git_lists_on_every_corpus_repository() {
    let tmp = tempfile::tempdir().unwrap();
    for spec in corpus::REPOS {
        for hash in Hash::ALL {
            let src = corpus::ensure(spec.name, hash);
            let path = tmp.path().join(format!("{}-{}.git", spec.name, hash.name()));
            git_ok(
                tmp.path(),
                &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), path.to_str().unwrap()],
            );
            let repo = gix::open(&path).unwrap();
            let refs = RefSnapshot::load(&repo).unwrap();
            let wants = refs.tips();
            if wants.is_empty() {
                continue;
            }
            let clone = select::select_by_walking(&repo, &gixd_tests::select_request(&wants, &[], &refs)).unwrap();
            let selected: std::collections::BTreeSet<String> = clone.objects.iter().map(|id| id.to_string()).collect();
            let listed = gixd_tests::server::rev_list_objects(&path, &["--all"]);
            assert_eq!(selected.len(), clone.objects.len(), "{}: each object once", spec.name);
            assert_eq!(selected, listed, "{} {}", spec.name, hash.name());
        }
    }
}
