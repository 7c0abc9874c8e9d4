//! In-process maintenance: every corpus repository (SHA-1 and SHA-256) repacked by gixd into one
//! pack whose `.bitmap` and `.rev` stock git accepts (`git rev-list --test-bitmap HEAD`), refs and
//! reachable objects unchanged, fsck clean; a repository that only ever received pushes (a pack
//! per push) ends with one pack and serves clones from its bitmap, and its pushed refs in
//! packed-refs; nothing unreachable younger than `gc.pruneExpire` is deleted (`prune.rs`).

use std::path::Path;

use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, assert_fsck_clean, git_client, git_ok, refs, rev_list_objects, serve_with};

fn packs(repo: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn test_bitmap(repo: &Path) {
    test_bitmap_at(repo, "HEAD")
}

/// git accepts the bitmap of the commit `rev`.
fn test_bitmap_at(repo: &Path, rev: &str) {
    let out = git_client(repo, &["rev-list", "--test-bitmap", rev]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stderr).contains("OK!"),
        "{}: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
    );
}

/// A full run after pushes carries the closures of the bitmap it replaces over to the new pack's
/// (git's `rebuild_existing_bitmaps`): it walks the pushed commits, not the history again, and git
/// accepts the closures it carried (the old tip's) and the ones it walked (the new tip's). Red
/// before: every commit of the history walked again (160 for 40 pushed).
#[test]
fn a_full_run_carries_the_replaced_bitmaps_closures_over_and_walks_only_the_pushed_commits() {
    for hash in Hash::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("r.git");
        let source = corpus::ensure("loose-pushes", hash);
        // The history repacked with git's bitmap, then 40 pushes git stored loose.
        let status = std::process::Command::new("cp")
            .args(["-a", source.to_str().unwrap(), repo.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let pushed: usize = git_ok(&repo, &["rev-list", "--count", "main~40..main"]).trim().parse().unwrap();
        let old_tip = git_ok(&repo, &["rev-parse", "main~40"]).trim().to_owned();
        gixd::bitmap::write::COMMITS_WALKED.store(0, std::sync::atomic::Ordering::Relaxed);
        let report = gixd::maintenance::run(&repo).unwrap();
        let walked = gixd::bitmap::write::COMMITS_WALKED.load(std::sync::atomic::Ordering::Relaxed);
        assert!(report.bitmaps > 0, "{report:?}");
        assert!(walked <= pushed + 2, "[{}] {walked} commits walked for {pushed} pushed", hash.name());
        test_bitmap_at(&repo, "main");
        test_bitmap_at(&repo, &old_tip);
        assert_fsck_clean(&repo);
    }
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
            git_ok(
                tmp.path(),
                &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), repo.to_str().unwrap()],
            );
            let (refs_before, reachable_before) = (refs(&repo, "refs"), rev_list_objects(&repo, &["--all"]));
            let report = gixd::maintenance::run(&repo).unwrap();
            assert!(report.bitmaps > 0, "{}", spec.name);
            // The packs it replaced stay for the grace; a later run removes them.
            gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
            let names = packs(&repo);
            assert_eq!(
                names.iter().filter(|n| n.ends_with(".pack")).count(),
                1,
                "{} {}: {names:?}",
                spec.name,
                hash.name()
            );
            assert!(
                names.iter().any(|n| n.ends_with(".bitmap")) && names.iter().any(|n| n.ends_with(".rev")),
                "{names:?}"
            );
            test_bitmap(&repo);
            assert_eq!(refs(&repo, "refs"), refs_before);
            assert_eq!(rev_list_objects(&repo, &["--all"]), reachable_before);
            assert_fsck_clean(&repo);
            // The index gixd wrote from what its pack writer noted (no object decoded again) is
            // byte for byte the one git's index-pack makes of the same pack.
            let ours = report.pack.with_extension("idx");
            let theirs = tmp.path().join("theirs.idx");
            let format = format!("--object-format={}", hash.name());
            git_ok(&repo, &["index-pack", &format, "-o", theirs.to_str().unwrap(), report.pack.to_str().unwrap()]);
            assert!(
                std::fs::read(&ours).unwrap() == std::fs::read(&theirs).unwrap(),
                "{} {}: the index differs from git's",
                spec.name,
                hash.name()
            );
            let _ = std::fs::remove_file(theirs.with_extension("rev"));
            std::fs::remove_file(&theirs).unwrap();
            // The commit-graph it wrote holds every commit, and git verifies it (trees, parents,
            // generation numbers, dates, the EDGE list of the octopus in `merges`).
            let commits: usize = git_ok(&repo, &["rev-list", "--all", "--count"]).trim().parse().unwrap();
            assert_eq!(report.commit_graph, Some(commits), "{} {}", spec.name, hash.name());
            assert!(repo.join("objects/info/commit-graph").is_file());
            let verify = git_client(&repo, &["commit-graph", "verify"]);
            assert!(
                verify.status.success() && verify.stderr.is_empty(),
                "{} {}: {}",
                spec.name,
                hash.name(),
                String::from_utf8_lossy(&verify.stderr)
            );
            // Byte for byte what git writes for the same history when asked for the same
            // contents (generation numbers v1, no Bloom filters).
            let ours = std::fs::read(repo.join("objects/info/commit-graph")).unwrap();
            git_ok(
                &repo,
                &["-c", "commitGraph.generationVersion=1", "commit-graph", "write", "--reachable", "--no-progress"],
            );
            let theirs = std::fs::read(repo.join("objects/info/commit-graph")).unwrap();
            assert!(ours == theirs, "{} {}: the commit-graph differs from git's", spec.name, hash.name());
            // gixd's reader takes it (its checksum, its object format).
            let kind = if hash == Hash::Sha1 { gix_hash::Kind::Sha1 } else { gix_hash::Kind::Sha256 };
            let graph = gixd::repo::commit_graph::load(&repo.join("objects"), kind).unwrap().unwrap();
            assert_eq!(graph.num_commits() as usize, commits);
        }
    }
}

/// An empty bare repository `r.git` served by gixd over git:// with pushes on, and a work tree
/// to push from: a repository that will only ever receive pushes.
struct PushOnly {
    server: gixd::server::Running,
    base: std::path::PathBuf,
    repo: std::path::PathBuf,
    url: String,
    work: std::path::PathBuf,
}

fn push_only(tmp: &Path) -> PushOnly {
    let base = tmp.join("base");
    let repo = base.join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    gixd_tests::git(&repo, &["init", "-q", "--bare", "-b", "main"]);
    let server = serve_with(&base, |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
    });
    let url = format!("git://{}/r.git", server.git_addr.unwrap());
    let work = tmp.join("work");
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    PushOnly { server, base, repo, url, work }
}

#[test]
fn a_repository_that_only_received_pushes_ends_with_one_bitmapped_pack_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let PushOnly { server: _server, base, repo, url, work } = push_only(tmp.path());
    for i in 0..4 {
        gixd_tests::commit_files(
            &work,
            &[("file.txt", format!("version {i}\n").repeat(40).as_bytes())],
            &format!("c{i}"),
        );
        git_ok(&work, &["push", "-q", &url, "main"]);
    }
    // Something nobody references, in a pack of its own, younger than gc.pruneExpire: it must survive.
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
    assert_eq!(all_objects(&repo), before, "nothing was lost (the orphan is young: it stays, in a cruft pack)");
    assert!(all_objects(&repo).contains(&orphan));

    // Clones come from the bitmap now, and equal a clone from git.
    let ours = tmp.path().join("ours");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", &url, ours.to_str().unwrap()]);
    let theirs = tmp.path().join("theirs");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", "--no-local", repo.to_str().unwrap(), theirs.to_str().unwrap()]);
    assert_eq!(all_objects(&ours), all_objects(&theirs));
    let served = gixd::repo::Repos::new(&base, gixd::config::Exports::All).unwrap().resolve("/r.git").unwrap();
    let handle = served.repo.to_thread_local();
    let bitmap = gixd::bitmap::of(
        &Default::default(),
        &gixd::repo::Repos::new(&base, gixd::config::Exports::All).unwrap(),
        &served,
        &handle,
    );
    assert!(bitmap.is_some(), "the bitmap gixd wrote is one gixd uses");
}

/// Loose refs below `refs/` (files), by name.
fn loose_refs(repo: &Path) -> Vec<String> {
    fn walk(dir: &Path, name: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let child = format!("{name}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &child, out);
            } else {
                out.push(child);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo.join("refs"), "refs", &mut out);
    out.sort();
    out
}

#[test]
fn pushed_refs_end_in_packed_refs_with_their_values_and_peeled_tags_and_symbolic_refs_stay_loose() {
    let tmp = tempfile::tempdir().unwrap();
    let PushOnly { server: _server, repo, url, work, .. } = push_only(tmp.path());
    gixd_tests::commit_files(&work, &[("a", b"a\n")], "one");
    git_ok(&work, &["tag", "-a", "-m", "annotated", "v1"]);
    git_ok(&work, &["branch", "topic/deep/x"]);
    git_ok(&work, &["push", "-q", &url, "main", "v1", "topic/deep/x"]);
    gixd_tests::git(&repo, &["symbolic-ref", "refs/heads/alias", "refs/heads/main"]);
    let refs_before = gixd_tests::git_out(&repo, &["show-ref", "-d"]);
    assert_eq!(loose_refs(&repo).len(), 4, "the pushed refs and the symbolic one are loose: {:?}", loose_refs(&repo));

    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!(report.refs_packed, 3, "{report:?}");
    assert_eq!(loose_refs(&repo), ["refs/heads/alias"], "only the symbolic ref is loose");
    assert_eq!(
        gixd_tests::git_out(&repo, &["show-ref", "-d"]),
        refs_before,
        "every ref (and the tag's peeled value) reads the same"
    );
    let packed = std::fs::read_to_string(repo.join("packed-refs")).unwrap();
    let tag = gixd_tests::git_out(&repo, &["rev-parse", "v1^{}"]);
    assert!(packed.contains(&format!("^{tag}")), "packed-refs holds the tag's peeled value:\n{packed}");
    assert_fsck_clean(&repo);
    // Served from packed-refs: a clone gets every ref.
    let clone = tmp.path().join("clone");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", &url, clone.to_str().unwrap()]);
    assert_eq!(refs(&clone, "refs"), refs(&repo, "refs"));
}

#[test]
fn a_ref_locked_by_a_push_leaves_the_loose_refs_as_they_were() {
    let tmp = tempfile::tempdir().unwrap();
    let PushOnly { server: _server, repo, url, work, .. } = push_only(tmp.path());
    gixd_tests::commit_files(&work, &[("a", b"a\n")], "one");
    git_ok(&work, &["branch", "other"]);
    git_ok(&work, &["push", "-q", &url, "main", "other"]);
    let refs_before = gixd_tests::git_out(&repo, &["show-ref"]);
    // A push is moving `other` (git's lock file is there): packing must not touch any ref.
    let lock = repo.join("refs/heads/other.lock");
    std::fs::write(&lock, "").unwrap();
    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!(report.refs_packed, 0, "{report:?}");
    assert_eq!(loose_refs(&repo), ["refs/heads/main", "refs/heads/other", "refs/heads/other.lock"]);
    assert!(
        !repo.join("packed-refs").exists()
            || !std::fs::read_to_string(repo.join("packed-refs")).unwrap().contains("refs/heads/")
    );
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(gixd_tests::git_out(&repo, &["show-ref"]), refs_before);
    // The next run packs them.
    assert_eq!(gixd::maintenance::run(&repo).unwrap().refs_packed, 2);
    assert_eq!(gixd_tests::git_out(&repo, &["show-ref"]), refs_before);
}

#[test]
fn versions_of_a_file_pushed_whole_in_separate_pushes_become_deltas_of_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let PushOnly { server: _server, repo, url, work, .. } = push_only(tmp.path());
    // Three versions of a 64 KiB file, each edited a little, pushed by a client that makes no
    // deltas (pack.window=0): every version arrives and is stored whole.
    let mut content = gixd_tests::noise(17, 64 << 10);
    let mut blobs = Vec::new();
    for i in 0..3 {
        content[i * 20_000..i * 20_000 + 32].copy_from_slice(&[b'x' + i as u8; 32]);
        gixd_tests::commit_files(&work, &[("data.bin", &content)], &format!("v{i}"));
        blobs.push(gixd_tests::git_out(&work, &["rev-parse", "HEAD:data.bin"]));
        git_ok(&work, &["-c", "pack.window=0", "push", "-q", &url, "main"]);
    }
    let before = all_objects(&repo);

    let report = gixd::maintenance::run(&repo).unwrap();
    // The pushed packs it replaced go (else the first pack by name may be one of them).
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    let (_, rows) = gixd_tests::verify_pack(&repo.join("objects"));
    let deltas: Vec<&Vec<String>> = rows.iter().filter(|r| blobs.contains(&r[0]) && r.len() == 7).collect();
    assert_eq!(deltas.len(), 2, "two of the three versions are deltas (verify-pack rows: {rows:?})");
    assert!(deltas.iter().all(|r| r[3].parse::<usize>().unwrap() < 1024), "each delta is small: {deltas:?}");
    assert_eq!(report.deltas_computed, 2, "{report:?}");
    assert_eq!(all_objects(&repo), before);
    assert_fsck_clean(&repo);
    test_bitmap(&repo);
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

/// Maintenance in a process of its own, so that it can be killed: this test binary again,
/// running only [`inner_maintenance_of_the_named_repository`].
fn maintain_in_child(repo: &Path) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "inner_maintenance_of_the_named_repository", "--ignored", "--test-threads=1", "-q"])
        .env("GIXD_MAINTAIN", repo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
#[ignore = "run in a child process by maintenance_killed_at_any_point_loses_nothing_and_the_next_run_clears_what_it_left"]
fn inner_maintenance_of_the_named_repository() {
    let repo = std::env::var_os("GIXD_MAINTAIN").expect("GIXD_MAINTAIN names the repository");
    gixd::maintenance::run(Path::new(&repo)).unwrap();
}

/// Maintenance of the real-shapes repository (tags, hidden refs, partial bitmap) killed (SIGKILL) at sixteen points spread from its start to past its end (as long
/// as an uninterrupted run takes, measured first): after each, the refs and every reachable
/// object are as before and fsck is clean; the next run removes what the killed ones left
/// (scratch directory, temporary pack, index, `.rev` and `.bitmap` files) and ends with one pack
/// git's bitmap test accepts and no garbage.
#[test]
fn maintenance_killed_at_any_point_loses_nothing_and_the_next_run_clears_what_it_left() {
    let tmp = tempfile::tempdir().unwrap();
    let src = corpus::ensure("real-shapes", Hash::Sha1);
    let repo = tmp.path().join("r.git");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), repo.to_str().unwrap()]);
    let (refs_before, reachable_before) = (refs(&repo, "refs"), rev_list_objects(&repo, &["--all"]));
    let probe = tmp.path().join("probe.git");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), probe.to_str().unwrap()]);
    let started = std::time::Instant::now();
    assert!(maintain_in_child(&probe).wait().unwrap().success(), "an uninterrupted run succeeds");
    let whole = started.elapsed();

    let garbage = |repo: &Path| -> usize {
        let objects = std::fs::read_dir(repo.join("objects"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("gixd-maintenance-"))
            .count();
        let temporary = std::fs::read_dir(repo.join("objects/pack")).unwrap().flatten().filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(".tmp") || name.ends_with(".tmp")
        });
        objects + temporary.count()
    };
    let mut left_something = 0;
    for round in 1..=16u32 {
        let mut child = maintain_in_child(&repo);
        std::thread::sleep(whole.mul_f64(1.2 * f64::from(round) / 16.0));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        left_something += usize::from(garbage(&repo) > 0);
        assert_eq!(refs(&repo, "refs"), refs_before, "round {round}: refs");
        assert_eq!(rev_list_objects(&repo, &["--all"]), reachable_before, "round {round}: reachable objects");
        assert_fsck_clean(&repo);
    }
    assert!(maintain_in_child(&repo).wait().unwrap().success(), "a run after the killed ones succeeds");
    assert_eq!(garbage(&repo), 0, "the run removed what the killed ones left");
    let count = git_ok(&repo, &["count-objects", "-v"]);
    assert!(count.lines().any(|l| l == "garbage: 0"), "{count}");
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert_eq!(packs(&repo).iter().filter(|n| n.ends_with(".pack")).count(), 1, "{:?}", packs(&repo));
    test_bitmap(&repo);
    assert_eq!(rev_list_objects(&repo, &["--all"]), reachable_before);
    println!(
        "16 maintenance runs killed over {whole:?} each; {left_something} left files behind, all removed by the next run"
    );
}

/// gixd maintenance, killed holding the ref locks of the loose refs it packs (stopped there by
/// its test hook): the refs are as before; a gixd started then removes exactly those locks (and
/// the run's scratch), so a push to one of those refs goes through, and the next run packs them.
/// Before, every push to any of those refs failed until someone deleted the locks by hand.
#[test]
fn maintenance_killed_holding_ref_locks_leaves_none_after_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let PushOnly { server, base, repo, url, work } = push_only(tmp.path());
    gixd_tests::commit_files(&work, &[("a", b"a\n")], "one");
    git_ok(&work, &["branch", "other"]);
    git_ok(&work, &["push", "-q", &url, "main", "other"]);
    drop(server);
    // No packed-refs yet: packing locks `packed-refs.lock` all the same, to create it.
    assert!(!repo.join("packed-refs").exists());
    let refs_before = gixd_tests::git_out(&repo, &["show-ref"]);

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "inner_maintenance_of_the_named_repository", "--ignored", "--test-threads=1", "-q"])
        .env("GIXD_MAINTAIN", &repo)
        .env("GIXD_TEST_KILL_AT", "maintenance-refs-locked")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "killed (SIGKILL) at its kill point: {status:?}");
    let locks = ["refs/heads/main.lock", "refs/heads/other.lock", "packed-refs.lock"].map(|l| repo.join(l));
    for lock in &locks {
        assert!(lock.is_file(), "killed inside the lock window: {} is there", lock.display());
    }
    assert_eq!(gixd_tests::git_out(&repo, &["show-ref"]), refs_before);

    let server = serve_with(&base, |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
    });
    for lock in &locks {
        assert!(!lock.exists(), "the start removed the killed run's {}", lock.display());
    }
    let scratch = std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gixd-maintenance-"))
        .count();
    assert_eq!(scratch, 0, "and its scratch");
    gixd_tests::commit_files(&work, &[("b", b"b\n")], "two");
    let url = format!("git://{}/r.git", server.git_addr.unwrap());
    git_ok(&work, &["push", "-q", &url, "main"]);
    assert_eq!(gixd_tests::git_out(&repo, &["rev-parse", "main"]), gixd_tests::git_out(&work, &["rev-parse", "main"]));
    assert_eq!(gixd::maintenance::run(&repo).unwrap().refs_packed, 2);
    assert_fsck_clean(&repo);
}

/// A pack being written by git beside gixd's maintenance (`git repack` names its files
/// `objects/pack/.tmp-<pid>-pack-…`) is not taken for a killed run's leftover: maintenance
/// removes only its own temporary names (gix-tempfile's `.tmpXXXXXX`, `pack-*.tmp`).
#[test]
fn maintenance_leaves_a_pack_git_is_writing_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let PushOnly { server: _server, repo, url, work, .. } = push_only(tmp.path());
    gixd_tests::commit_files(&work, &[("a", b"a\n")], "one");
    git_ok(&work, &["push", "-q", &url, "main"]);
    let gits = repo.join("objects/pack/.tmp-4242-pack-0123456789abcdef0123456789abcdef01234567.pack");
    std::fs::write(&gits, b"PACK").unwrap();
    let ours = repo.join("objects/pack/.tmpAb3dE9");
    std::fs::write(&ours, b"").unwrap();
    let report = gixd::maintenance::run(&repo).unwrap();
    assert!(gits.is_file(), "git's pack in the making is left: {report:?}");
    assert!(!ours.exists(), "a temporary file of a killed gixd run is removed");
}

/// `.pack` files of `repo`, by name.
fn pack_files(repo: &Path) -> Vec<String> {
    packs(repo).into_iter().filter(|n| n.ends_with(".pack")).collect()
}

/// A repository with a big bitmapped pack (what a full repack left) and then `pushes` small
/// pushes through gixd, one pack each; returns it with its server, work tree and URL.
fn big_pack_then_pushes(tmp: &Path, pushes: usize, auto: bool) -> (PushOnly, String) {
    let base = tmp.join("base");
    let repo = base.join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    gixd_tests::git(&repo, &["init", "-q", "--bare", "-b", "main"]);
    let work = tmp.join("work");
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    for i in 0..30 {
        let files: Vec<(String, String)> =
            (0..10).map(|f| (format!("d{f}/file{f}.txt"), format!("{i} {f}\n").repeat(30 + f))).collect();
        let files: Vec<(&str, &[u8])> = files.iter().map(|(p, t)| (p.as_str(), t.as_bytes())).collect();
        gixd_tests::commit_files(&work, &files, &format!("base {i}"));
    }
    git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
    gixd::maintenance::run(&repo).unwrap();
    let big = pack_files(&repo).pop().unwrap();
    let server = serve_with(&base, |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
        c.auto_maintenance = auto;
    });
    let url = format!("git://{}/r.git", server.git_addr.unwrap());
    for i in 0..pushes {
        gixd_tests::commit_files(
            &work,
            &[
                ("d1/file1.txt", format!("pushed {i}\n").repeat(40).as_bytes()),
                ("new.txt", format!("{i}\n").as_bytes()),
            ],
            &format!("push {i}"),
        );
        git_ok(&work, &["push", "-q", &url, "main"]);
    }
    (PushOnly { server, base, repo, url, work }, big)
}

#[test]
fn geometric_maintenance_rolls_the_pushed_packs_into_one_and_leaves_the_big_pack_and_its_bitmap() {
    let tmp = tempfile::tempdir().unwrap();
    let (PushOnly { server: _server, repo, url, .. }, big) = big_pack_then_pushes(tmp.path(), 6, false);
    assert_eq!(pack_files(&repo).len(), 7, "the big pack and a pack per push: {:?}", packs(&repo));
    let before = all_objects(&repo);
    let bitmap_before = std::fs::read(repo.join("objects/pack").join(big.replace(".pack", ".bitmap"))).unwrap();

    let report = gixd::maintenance::geometric::run(&repo).unwrap().expect("the pushed packs are rolled up");
    assert_eq!(report.packs_removed, 6, "{report:?}");
    // The rolled packs stay for readers that started before, out of the geometry.
    assert_eq!(pack_files(&repo).len(), 8, "{:?}", packs(&repo));
    assert_eq!(gixd::maintenance::geometric::packs(&repo.join("objects/pack")).len(), 2);
    assert_fsck_clean(&repo);
    // A later run past the grace removes them.
    assert_eq!(gixd::maintenance::expire(&repo, std::time::Duration::ZERO), 6);
    let after = pack_files(&repo);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.contains(&big), "the big pack stays: {after:?}");
    let bitmap_after = std::fs::read(repo.join("objects/pack").join(big.replace(".pack", ".bitmap"))).unwrap();
    assert_eq!(bitmap_after, bitmap_before, "its bitmap untouched");
    assert_eq!(all_objects(&repo), before, "nothing lost");
    assert_fsck_clean(&repo);
    // A multi-pack-index over the two, the big pack preferred, and its bitmap, which git reads
    // (it prefers a MIDX's bitmap) and gixd serves from: the newest history is covered too.
    assert!(report.bitmaps > 0, "{report:?}");
    git_ok(&repo, &["multi-pack-index", "verify"]);
    test_bitmap_at(&repo, "main");
    let base = repo.parent().unwrap();
    let repos = gixd::repo::Repos::new(base, gixd::config::Exports::All).unwrap();
    let served = repos.resolve(&format!("/{}", repo.file_name().unwrap().to_str().unwrap())).unwrap();
    let bitmap =
        gixd::bitmap::of(&Default::default(), &repos, &served, &served.repo.to_thread_local()).expect("a bitmap");
    assert!(!bitmap.is_one_pack(), "the MIDX's: {bitmap:?}");
    assert_eq!(bitmap.pack.file_name().unwrap().to_str().unwrap(), big, "the big pack preferred");
    assert_eq!(bitmap.len(), before.len(), "over every object");
    // In progression now: a second run has nothing to do.
    assert!(gixd::maintenance::geometric::run(&repo).unwrap().is_none());
    assert_eq!(gixd::maintenance::geometric::due(&repo), gixd::maintenance::geometric::Due::Nothing);

    let ours = tmp.path().join("ours");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", &url, ours.to_str().unwrap()]);
    assert_eq!(all_objects(&ours), rev_list_objects(&repo, &["--all"]));
}

#[test]
fn pushes_are_followed_by_geometric_maintenance_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let (PushOnly { server: _server, repo, url, work, .. }, big) = big_pack_then_pushes(tmp.path(), 6, true);
    let started = std::time::Instant::now();
    while gixd::maintenance::geometric::packs(&repo.join("objects/pack")).len() > 2 {
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "no roll-up: {:?}", packs(&repo));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(pack_files(&repo).contains(&big), "the big pack stays");
    assert_fsck_clean(&repo);
    // Serving and pushing go on over the rolled-up pack.
    gixd_tests::commit_files(&work, &[("after.txt", b"after the roll-up\n")], "after");
    git_ok(&work, &["push", "-q", &url, "main"]);
    let ours = tmp.path().join("ours");
    git_ok(tmp.path(), &["clone", "-q", "--mirror", &url, ours.to_str().unwrap()]);
    assert_eq!(all_objects(&ours), rev_list_objects(&repo, &["--all"]));
}

#[test]
fn a_repository_of_one_pushed_pack_gets_its_bitmap_without_a_repack() {
    let tmp = tempfile::tempdir().unwrap();
    let PushOnly { server: _server, repo, url, work, .. } = push_only(tmp.path());
    for i in 0..20 {
        gixd_tests::commit_files(&work, &[(&format!("f{}.txt", i % 5), format!("{i}\n").repeat(50).as_bytes())], "c");
    }
    // A branch pushed with it and then deleted (a deletion brings no pack): the pack also holds
    // an object nothing reaches, which a repack would leave behind in the old pack.
    git_ok(&work, &["checkout", "-q", "-b", "tmp"]);
    gixd_tests::commit_files(&work, &[("orphan.txt", b"nobody points here\n")], "orphan");
    git_ok(&work, &["checkout", "-q", "main"]);
    git_ok(&work, &["push", "-q", &url, "main", "tmp"]);
    git_ok(&work, &["push", "-q", &url, ":tmp"]);
    use std::os::unix::fs::MetadataExt;
    let before = pack_files(&repo);
    assert_eq!(before.len(), 1, "the whole history in one pushed pack: {:?}", packs(&repo));
    let inode = |name: &str| std::fs::metadata(repo.join("objects/pack").join(name)).unwrap().ino();
    let inode_before = inode(&before[0]);
    let report = gixd::maintenance::full(&repo, gixd::maintenance::Bases::Keep).unwrap();
    assert!(report.bitmaps > 0, "{report:?}");
    // A repack that kept every stored entry can write the same bytes under the same name: the
    // file itself must be the one the push wrote.
    assert_eq!(pack_files(&repo), before, "one pack, the one pushed: not repacked beside it");
    assert_eq!(inode(&before[0]), inode_before, "the pack is the one pushed, not rewritten");
    test_bitmap(&repo);
    // Clean but for the orphan, which is dangling on purpose.
    let fsck = git_client(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
}

#[test]
fn by_hand_one_pack_holding_only_reachable_objects_gets_its_bitmap_in_place_and_one_holding_more_is_repacked() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    for hash in Hash::ALL {
        let src = corpus::ensure("merges", hash);
        let mirror = |arm: &str| {
            let to = tmp.path().join(format!("{}-{arm}.git", hash.name()));
            git_ok(tmp.path(), &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), to.to_str().unwrap()]);
            // One pack as git writes it, with its bitmap, and a ref left loose.
            git_ok(&to, &["-c", "pack.threads=1", "repack", "-q", "-adb"]);
            let head = gixd_tests::git_out(&to, &["rev-parse", "HEAD"]);
            git_ok(&to, &["update-ref", "refs/heads/loose", &head]);
            to
        };
        let inode = |repo: &Path| {
            let pack = &pack_files(repo)[0];
            std::fs::metadata(repo.join("objects/pack").join(pack)).unwrap().ino()
        };

        // Everything in it reachable: a repack would write the same objects; the pack stays the
        // one git wrote, its bitmap is rewritten for today's tips, the loose ref is packed.
        let whole = mirror("reachable");
        let (before, inode_before) = (pack_files(&whole), inode(&whole));
        let report = gixd::maintenance::run(&whole).unwrap();
        assert!(report.bitmaps > 0 && report.refs_packed > 0, "{report:?}");
        assert_eq!((pack_files(&whole), inode(&whole)), (before, inode_before), "the pack is not rewritten");
        test_bitmap(&whole);
        test_bitmap_at(&whole, "refs/heads/loose");
        assert!(report.commit_graph.is_some(), "{report:?}");
        git_ok(&whole, &["commit-graph", "verify"]);
        assert_fsck_clean(&whole);

        // A commit and blob only a since-deleted branch reached, inside the one pack: the run
        // repacks, and they leave the pack that serves (kept apart as cruft: they are young).
        let more = mirror("unreachable");
        let work = tmp.path().join(format!("{}-work", hash.name()));
        git_ok(tmp.path(), &["clone", "-q", more.to_str().unwrap(), work.to_str().unwrap()]);
        gixd_tests::commit_files(&work, &[("orphan.txt", b"only a deleted branch reached this\n")], "orphan");
        let orphan = gixd_tests::git_out(&work, &["rev-parse", "HEAD"]);
        git_ok(&work, &["push", "-q", "origin", "HEAD:refs/heads/doomed"]);
        git_ok(&more, &["-c", "pack.threads=1", "repack", "-q", "-adb"]);
        git_ok(&more, &["update-ref", "-d", "refs/heads/doomed"]);
        assert_eq!(pack_files(&more).len(), 1);
        let report = gixd::maintenance::run(&more).unwrap();
        assert!(report.unreachable_kept >= 2, "the orphan commit and blob kept as cruft: {report:?}");
        let serving: Vec<String> = packs(&more)
            .into_iter()
            .filter(|n| n.ends_with(".idx") && more.join("objects/pack").join(n).with_extension("bitmap").exists())
            .collect();
        assert_eq!(
            serving.len(),
            1,
            "one bitmapped pack serves (the replaced one goes after a grace): {:?}",
            packs(&more)
        );
        let index = more.join("objects/pack").join(&serving[0]);
        let ids = gixd_tests::git_out(&more, &["verify-pack", "-v", index.to_str().unwrap()]);
        assert!(!ids.contains(&orphan), "the unreachable commit is not in the pack that serves");
        test_bitmap(&more);
        // Clean but for the orphan, which is dangling on purpose.
        let fsck = git_client(&more, &["fsck", "--full", "--strict", "--no-dangling"]);
        assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
    }
}

/// Bytes of the repository's one `.pack` file (after the replaced ones expired).
fn pack_bytes(repo: &Path) -> u64 {
    let packs: Vec<u64> = std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    assert_eq!(packs.len(), 1, "{}: one pack", repo.display());
    packs[0]
}

#[test]
fn an_aggressive_run_searches_every_delta_anew_and_its_pack_is_within_five_percent_of_git_repack_adf() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["linear", "real-shapes", "merges"] {
        for hash in Hash::ALL {
            let src = corpus::ensure(name, hash);
            // Stored as a careless packer left it: deltas against one neighbour, chains of one.
            let poor = tmp.path().join(format!("{name}-{}-poor.git", hash.name()));
            git_ok(
                tmp.path(),
                &["clone", "-q", "--mirror", "--no-local", src.to_str().unwrap(), poor.to_str().unwrap()],
            );
            git_ok(&poor, &["-c", "pack.threads=1", "repack", "-q", "-adf", "--window=1", "--depth=1"]);
            let copy = |arm: &str| {
                let to = tmp.path().join(format!("{name}-{}-{arm}.git", hash.name()));
                git_ok(
                    tmp.path(),
                    &["clone", "-q", "--mirror", "--no-hardlinks", poor.to_str().unwrap(), to.to_str().unwrap()],
                );
                git_ok(&to, &["-c", "pack.threads=1", "repack", "-q", "-ad"]);
                to
            };
            let (plain, aggressive, git) = (copy("plain"), copy("aggressive"), copy("git"));
            let reachable = rev_list_objects(&poor, &["--all"]);

            gixd::maintenance::run(&plain).unwrap();
            let report = gixd::maintenance::aggressive(&aggressive).unwrap();
            git_ok(&git, &["-c", "pack.threads=1", "repack", "-q", "-adf", "--window=10"]);
            for repo in [&plain, &aggressive] {
                gixd::maintenance::expire(repo, std::time::Duration::ZERO);
            }
            let (plain_bytes, ours, theirs) = (pack_bytes(&plain), pack_bytes(&aggressive), pack_bytes(&git));
            eprintln!(
                "{name} {}: plain {plain_bytes} aggressive {ours} git -adf {theirs} ({:.3})",
                hash.name(),
                ours as f64 / theirs as f64
            );
            assert!(
                ours as f64 <= theirs as f64 * 1.05,
                "{name} {}: aggressive {ours} bytes, git repack -adf --window=10 {theirs}",
                hash.name()
            );
            assert!(
                ours < plain_bytes,
                "{name} {}: the stored deltas were searched anew ({ours} vs {plain_bytes})",
                hash.name()
            );
            assert!(report.deltas_computed > 0, "{report:?}");
            assert_eq!(rev_list_objects(&aggressive, &["--all"]), reachable, "{name}");
            assert_fsck_clean(&aggressive);
            test_bitmap(&aggressive);
        }
    }
}

/// A repository stock git pushes into while gixd serves it (git's own receive-pack, small pushes
/// stored loose) is maintained by gixd as after its own pushes: a fetch that finds the refs moved
/// since gixd last served them asks for what the repository is due, which rolls the loose
/// objects into a pack. Red while only pushes through gixd asked: the loose objects stayed.
#[test]
fn loose_objects_stock_git_pushed_are_rolled_up_once_a_fetch_finds_the_refs_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let base = t.join("base");
    std::fs::create_dir_all(&base).unwrap();
    let (repo, work, client) = (base.join("r.git"), t.join("work"), t.join("client.git"));
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    gixd_tests::commit_files(&work, &[("a.txt", b"first\n")], "first");
    git_ok(t, &["clone", "-q", "--bare", work.to_str().unwrap(), repo.to_str().unwrap()]);
    git_ok(&repo, &["repack", "-adbq"]);
    let server = serve_with(&base, |c| c.auto_maintenance = true);
    git_ok(t, &["clone", "-q", "--bare", &server.url("r.git"), client.to_str().unwrap()]);
    // Pushes of three objects each, under git's receive.unpackLimit: stored loose.
    for i in 0..40 {
        gixd_tests::commit_files(&work, &[(&format!("f{i}.txt"), format!("{i}\n").as_bytes())], &format!("push {i}"));
        git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
    }
    let loose = || {
        let count = git_ok(&repo, &["count-objects", "-v"]);
        count.lines().find_map(|l| l.strip_prefix("count: ")).unwrap().parse::<u64>().unwrap()
    };
    assert!(loose() >= gixd::maintenance::geometric::LOOSE_MIN_OBJECTS, "{} loose objects", loose());
    git_ok(&client, &["fetch", "-q", &server.url("r.git"), "main:main"]);
    // Maintenance runs once the asks have settled (2 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while loose() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(loose(), 0, "the loose objects stock git wrote are rolled into a pack");
    assert_fsck_clean(&repo);
    assert_eq!(all_objects(&client), rev_list_objects(&repo, &["--all"]), "the fetch carried every object");
}

/// A xorshift generator: test data that is the same on every run.
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// Commit everything in `work` (a work tree).
fn commit_all(work: &Path, message: &str) {
    git_ok(work, &["add", "."]);
    git_ok(work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message]);
}

/// A repository whose one commit holds 120 loose blobs made by `blob`: its git directory and the
/// blobs' bytes.
fn loose_blobs(tmp: &Path, mut blob: impl FnMut() -> Vec<u8>) -> (std::path::PathBuf, usize) {
    let work = tmp.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main"]);
    let mut blob_bytes = 0;
    for n in 0..120 {
        let data = blob();
        blob_bytes += data.len();
        std::fs::write(work.join(format!("f{n}.txt")), data).unwrap();
    }
    commit_all(&work, "blobs");
    let repo = work.join(".git");
    assert!(std::fs::read_dir(repo.join("objects/pack")).unwrap().next().is_none(), "every object loose");
    (repo, blob_bytes)
}

/// `gixd maintenance` of `repo`, checked (every object kept, fsck clean): the most bytes of
/// object data its repack held at once.
fn bytes_held_by_maintenance(repo: &Path) -> usize {
    let before = rev_list_objects(repo, &["--all"]);
    gixd::pack::REPACK_BYTES_HELD.store(0, std::sync::atomic::Ordering::Relaxed);
    gixd::maintenance::run(repo).unwrap();
    let held = gixd::pack::REPACK_BYTES_HELD.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(rev_list_objects(repo, &["--all"]), before);
    assert_fsck_clean(repo);
    held
}

/// A repack holds no copy of the stored entries it keeps: they are written from their pack
/// files (git's pack-objects reads each entry as it writes it), and what it holds at once is the
/// whole objects its search looks at. Red before: every stored entry's data was copied and held
/// until the pack was written (rust-analyzer after 300 pushes stored loose: 98 MB of its peak).
#[test]
fn a_repack_holds_no_copy_of_the_stored_deltas_it_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main"]);
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    // 120 versions of a 100 KB file, each with 2 000 letters changed: deltas of some KB each,
    // one chain (the first version whole).
    let mut data: Vec<u8> = (0..100_000).map(|_| b'a' + (next() % 26) as u8).collect();
    for n in 0..120 {
        for _ in 0..2_000 {
            let at = (next() % data.len() as u64) as usize;
            data[at] = b'a' + (next() % 26) as u8;
        }
        std::fs::write(work.join("file.txt"), &data).unwrap();
        commit_all(&work, &format!("v{n}"));
    }
    let repo = work.join(".git");
    git_ok(&repo, &["-c", "pack.depth=200", "repack", "-adq"]);
    let pack = std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .unwrap();
    // `git verify-pack -v`: id, kind, size, size in the pack, offset[, depth, base] per entry.
    let delta_bytes: usize = git_ok(&repo, &["verify-pack", "-v", pack.to_str().unwrap()])
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 7)
        .map(|f| f[3].parse::<usize>().unwrap())
        .sum();
    // One more version, loose: the repack has something to search.
    data[0] = b'#';
    std::fs::write(work.join("file.txt"), &data).unwrap();
    commit_all(&work, "v120");
    let held = bytes_held_by_maintenance(&repo);
    // The whole objects searched (two versions of the file, inflated); the deltas, many times
    // that, not.
    assert!(held > 0 && held < delta_bytes / 2, "held {held} bytes at once; the stored deltas are {delta_bytes} bytes");
}

/// A repack too large for the search (past its entry limit: half a million objects) writes
/// every entry as gix-pack made it, its stored entries copied: nothing it writes is a mark of
/// data left in a pack map. Red before: the entries were left hollow whether or not the search
/// ran, and the pack was written with the marks in place of their data.
#[test]
fn a_repack_past_the_search_limit_writes_every_entrys_data() {
    let tmp = tempfile::tempdir().unwrap();
    let mut next = xorshift(0x0123_4567_89ab_cdef);
    let (repo, _) = loose_blobs(tmp.path(), || (0..2_000).map(|_| b'a' + (next() % 26) as u8).collect());
    git_ok(&repo, &["repack", "-adq"]);
    std::fs::write(repo.join("../one-more.txt"), "loose\n").unwrap();
    commit_all(&repo.join(".."), "one more");
    gixd::pack::SEARCHED_ENTRIES_MOST.store(1, std::sync::atomic::Ordering::Relaxed);
    bytes_held_by_maintenance(&repo);
}

/// A repack holds a loose object's data only while its batch is searched, as git's pack-objects
/// reads each object for its window: what waits for a later batch is read from the object
/// database then. Red before: gix-pack made an entry of every loose object's data (stored, to be
/// deflated once the search was done) before the first batch (rust-analyzer after 300 pushes
/// stored loose: 72 MB of its peak).
#[test]
fn a_repack_reads_each_loose_object_when_its_batch_is_searched() {
    let tmp = tempfile::tempdir().unwrap();
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let words = ["tree", "blob", "commit", "delta", "pack", "base", "window", "depth"];
    // Blobs of some 20 KB, each its own sequence of a few words: they deflate well and are poor
    // deltas of each other.
    let (repo, blob_bytes) = loose_blobs(tmp.path(), || {
        let mut data = String::new();
        while data.len() < 20_000 {
            data.push_str(words[(next() % words.len() as u64) as usize]);
            data.push(' ');
        }
        data.into_bytes()
    });
    // Batches of a window's worth (ten objects) instead of 16 MiB.
    gixd::pack::REPACK_BATCH_BYTES.store(1, std::sync::atomic::Ordering::Relaxed);
    let held = bytes_held_by_maintenance(&repo);
    // A batch's objects inflated and what the batches before it deflated to; every blob's data at
    // once would be more than all of them.
    assert!(held > 0 && held < blob_bytes / 2, "held {held} bytes at once for {blob_bytes} bytes of blobs");
}

/// A full run writes its commit-graph from the commits its walk decoded (each commit's tree,
/// parents and committer time noted as it was read), not by decoding every commit again: the
/// graph git verifies, and no object decoded for it. Red before: the writer decoded every commit
/// a second time (git.git: 4 % of the run's CPU).
#[test]
fn a_full_run_writes_the_commit_graph_from_the_commits_its_walk_decoded() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main"]);
    for n in 0..30 {
        std::fs::write(work.join("file.txt"), format!("version {n}\n")).unwrap();
        commit_all(&work, &format!("v{n}"));
        if n % 10 == 0 {
            git_ok(&work, &["branch", &format!("b{n}")]);
            git_ok(&work, &["tag", "-a", "-m", "t", &format!("t{n}")]);
        }
    }
    let repo = work.join(".git");
    assert!(!repo.join("objects/info/commit-graph").exists());
    gixd::maintenance::commit_graph::OBJECTS_DECODED.store(0, std::sync::atomic::Ordering::Relaxed);
    let report = gixd::maintenance::run(&repo).unwrap();
    let decoded = gixd::maintenance::commit_graph::OBJECTS_DECODED.load(std::sync::atomic::Ordering::Relaxed);
    git_ok(&repo, &["commit-graph", "verify"]);
    let commits = git_ok(&repo, &["rev-list", "--all", "--count"]).trim().parse::<usize>().unwrap();
    assert_eq!(report.commit_graph, Some(commits), "every commit in the graph");
    assert_eq!(decoded, 0, "the commit-graph writer decoded {decoded} objects of its own");
}

#[test]
fn a_repack_holds_each_loose_objects_data_once_while_it_searches() {
    // Blobs of 20 KB that deflate poorly (git stores them loose; the repack's search takes them
    // whole, in one batch).
    let tmp = tempfile::tempdir().unwrap();
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let (repo, blob_bytes) = loose_blobs(tmp.path(), || (0..20_000).map(|_| b'a' + (next() % 26) as u8).collect());
    let held = bytes_held_by_maintenance(&repo);
    // Once: the blobs' data and what little else the entries hold; twice would be 2 x.
    assert!(held > 0 && held <= blob_bytes * 5 / 4, "held {held} bytes at once for {blob_bytes} bytes of blobs");
}

/// A bare repository of three packs and a multi-pack-index over them, then `git repack -ad`,
/// and the MIDX put back as another repacker leaves it: naming packs that are gone.
fn stale_multi_pack_index(tmp: &Path) -> std::path::PathBuf {
    let (repo, work) = (tmp.join("repo.git"), tmp.join("work"));
    git_ok(tmp, &["init", "-q", "--bare", repo.to_str().unwrap()]);
    git_ok(tmp, &["init", "-q", work.to_str().unwrap()]);
    for i in 0..3 {
        std::fs::write(work.join(format!("f{i}")), format!("{i}\n")).unwrap();
        git_ok(&work, &["add", "."]);
        git_ok(&work, &["commit", "-qm", &format!("c{i}")]);
        git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"]);
        git_ok(&repo, &["repack", "-dq"]);
    }
    git_ok(&repo, &["multi-pack-index", "write"]);
    let midx = repo.join("objects/pack/multi-pack-index");
    let bytes = std::fs::read(&midx).unwrap();
    git_ok(&repo, &["repack", "-adq"]);
    std::fs::write(&midx, bytes).unwrap();
    repo
}

/// A multi-pack-index another repacker left naming deleted packs (git fsck fails on it) makes
/// the repository due, and the next run removes it: fsck clean, every object served.
#[test]
fn a_multi_pack_index_naming_packs_another_repacker_deleted_is_removed_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = stale_multi_pack_index(tmp.path());
    assert!(!git_client(&repo, &["fsck", "--full"]).status.success(), "git fsck fails on a stale multi-pack-index");
    assert!(
        matches!(gixd::maintenance::geometric::due(&repo), gixd::maintenance::geometric::Due::Geometric),
        "a stale multi-pack-index makes the repository due"
    );
    gixd::maintenance::geometric::run(&repo).unwrap();
    assert!(!gixd::repo::midx::names_a_missing_pack(&repo));
    assert_fsck_clean(&repo);
}

/// While stock git holds `gc.pid` (a `git gc` or `git repack` of this host that is running),
/// gixd's maintenance is refused as busy: the two would each delete packs the other's
/// multi-pack-index names. Once git is done, it runs.
#[test]
fn maintenance_is_busy_while_stock_git_repacks_the_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = stale_multi_pack_index(tmp.path());
    let mut git_gc = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let host = {
        let out = std::process::Command::new("hostname").output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    std::fs::write(repo.join("gc.pid"), format!("{} {host}", git_gc.id())).unwrap();
    let busy = |result: Result<_, gixd::maintenance::MaintenanceError>| {
        matches!(result, Err(gixd::maintenance::MaintenanceError::Busy))
    };
    assert!(busy(gixd::maintenance::geometric::run(&repo).map(|_| ())), "geometric run while git repacks");
    assert!(busy(gixd::maintenance::run(&repo).map(|_| ())), "full run while git repacks");
    git_gc.kill().unwrap();
    git_gc.wait().unwrap();
    // git's process is gone and its gc.pid left behind (killed): no longer held.
    gixd::maintenance::geometric::run(&repo).unwrap();
    assert_fsck_clean(&repo);
}
