//! In-process maintenance: every corpus repository (SHA-1 and SHA-256) repacked by gixd into one
//! pack whose `.bitmap` and `.rev` stock git accepts (`git rev-list --test-bitmap HEAD`), refs and
//! reachable objects unchanged, fsck clean; a repository that only ever received pushes (a pack
//! per push) ends with one pack and serves clones from its bitmap; nothing unreachable is deleted.

use std::path::Path;

use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, assert_fsck_clean, git_client, git_ok, refs, rev_list_objects, serve_with};

fn packs(repo: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.join("objects/pack")).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn test_bitmap(repo: &Path) {
    let out = git_client(repo, &["rev-list", "--test-bitmap", "HEAD"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stderr).contains("OK!"), "{}: {}", repo.display(), String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""));
}

#[test]
fn every_corpus_repository_gets_one_pack_with_a_bitmap_git_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    for spec in corpus::REPOS {
        if spec.name == "empty" {
            continue;
        }
        for hash in Hash::ALL {
            let src = corpus::ensure(spec.name, hash);
            let repo = tmp.path().join(format!("{}-{}.git", spec.name, hash.name()));
            git_ok(tmp.path(), &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), repo.to_str().unwrap()]);
            let (refs_before, reachable_before) = (refs(&repo, "refs"), rev_list_objects(&repo, &["--all"]));
            let report = gixd::maintenance::run(&repo).unwrap();
            assert!(report.bitmaps > 0, "{}", spec.name);
            let names = packs(&repo);
            assert_eq!(names.iter().filter(|n| n.ends_with(".pack")).count(), 1, "{} {}: {names:?}", spec.name, hash.name());
            assert!(names.iter().any(|n| n.ends_with(".bitmap")) && names.iter().any(|n| n.ends_with(".rev")), "{names:?}");
            test_bitmap(&repo);
            assert_eq!(refs(&repo, "refs"), refs_before);
            assert_eq!(rev_list_objects(&repo, &["--all"]), reachable_before);
            assert_fsck_clean(&repo);
        }
    }
}

#[test]
fn a_repository_that_only_received_pushes_ends_with_one_bitmapped_pack_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let repo = base.join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    gixd_tests::git(&repo, &["init", "-q", "--bare", "-b", "main"]);
    let server = serve_with(&base, |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
    });
    let url = format!("git://{}/r.git", server.git_addr.unwrap());
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    for i in 0..4 {
        gixd_tests::commit_files(&work, &[("file.txt", format!("version {i}\n").repeat(40).as_bytes())], &format!("c{i}"));
        git_ok(&work, &["push", "-q", &url, "main"]);
    }
    // Something nobody references, in a pack of its own: it must survive.
    gixd_tests::commit_files(&work, &[("orphan.txt", b"nobody points here\n")], "orphan");
    let orphan = gixd_tests::git_out(&work, &["rev-parse", "HEAD"]);
    git_ok(&work, &["push", "-q", &url, "HEAD:refs/heads/tmp"]);
    git_ok(&work, &["push", "-q", &url, ":refs/heads/tmp"]);
    let before = all_objects(&repo);
    assert!(packs(&repo).iter().filter(|n| n.ends_with(".pack")).count() >= 4, "a pack per push");

    let report = gixd::maintenance::run(&repo).unwrap();
    assert!(report.packs_removed >= 4, "{report:?}");
    test_bitmap(&repo);
    // Clean but for the orphan, which is dangling on purpose.
    let fsck = git_client(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
    assert_eq!(all_objects(&repo), before, "nothing was lost (the orphan's pack stays)");
    assert!(all_objects(&repo).contains(&orphan));

    // Clones come from the bitmap now, and equal a clone from git.
    let ours = tmp.path().join("ours");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", &url, ours.to_str().unwrap()]);
    let theirs = tmp.path().join("theirs");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", "--no-local", repo.to_str().unwrap(), theirs.to_str().unwrap()]);
    assert_eq!(all_objects(&ours), all_objects(&theirs));
    let served = gixd::repo::Repos::new(&base, gixd::config::Exports::All).unwrap().resolve("/r.git").unwrap();
    let handle = served.repo.to_thread_local();
    let bitmap = gixd::bitmap::of(&gixd::repo::Repos::new(&base, gixd::config::Exports::All).unwrap(), &served, &handle);
    assert!(bitmap.is_some(), "the bitmap gixd wrote is one gixd uses");
}

#[test]
fn the_opt_in_schedule_repacks_with_a_bitmap_while_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let repo = base.join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    gixd_tests::git(&repo, &["init", "-q", "--bare", "-b", "main"]);
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    gixd_tests::commit_files(&work, &[("a.txt", b"a\n")], "one");
    git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
    let _server = serve_with(&base, |c| c.maintenance_interval = Some(std::time::Duration::from_millis(200)));
    let started = std::time::Instant::now();
    while !packs(&repo).iter().any(|n| n.ends_with(".bitmap")) {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "no maintenance ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Written, then renamed into place: once there, git accepts it.
    std::thread::sleep(std::time::Duration::from_millis(100));
    test_bitmap(&repo);
}
