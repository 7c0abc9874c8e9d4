//! Unreachable objects expire as git's `gc.pruneExpire` says: a full maintenance run keeps what no
//! ref reaches in a cruft pack whose `.mtimes` git reads, leaves out what is older than the
//! expiry, and never what something live still reaches — a younger unreachable object, a push in
//! its quarantine, or a ref that a push moved onto a left-out object before the replaced packs
//! went.

use std::path::{Path, PathBuf};

use gixd_tests::server::{all_objects, git_client, git_ok};

const DAY: u64 = 86_400;

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Set the modification time of `path` to `days` days ago (`touch`: loose objects are read-only).
fn age(path: &Path, days: u64) {
    let stamp = format!("@{}", now() - days * DAY);
    let out = std::process::Command::new("touch").args(["-m", "-d", &stamp]).arg(path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn loose_path(repo: &Path, id: &str) -> PathBuf {
    repo.join("objects").join(&id[..2]).join(&id[2..])
}

fn has(repo: &Path, id: &str) -> bool {
    git_client(repo, &["cat-file", "-e", id]).status.success()
}

/// A bare repository `r.git` whose `main` (three commits) is in one pack, and a work tree that
/// pushes to it.
fn repository(tmp: &Path) -> (PathBuf, PathBuf) {
    let repo = tmp.join("r.git");
    let work = tmp.join("work");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    gixd_tests::git(&repo, &["init", "-q", "--bare", "-b", "main"]);
    gixd_tests::git(&work, &["init", "-q", "-b", "main"]);
    for i in 0..3 {
        gixd_tests::commit_files(&work, &[("file.txt", format!("main {i}\n").repeat(30).as_bytes())], &format!("m{i}"));
    }
    git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
    git_ok(&repo, &["repack", "-adq"]);
    (repo, work)
}

/// A branch `name` of one commit on `main` (a file of its own), pushed and then deleted on the
/// server: its commit, tree and blob are unreachable there (loose, as git's receive-pack keeps a
/// small push). Returns their ids, commit first.
fn deleted_branch(repo: &Path, work: &Path, name: &str) -> Vec<String> {
    git_ok(work, &["checkout", "-q", "-b", name, "main"]);
    gixd_tests::commit_files(work, &[(&format!("{name}.txt"), format!("only on {name}\n").as_bytes())], name);
    git_ok(work, &["push", "-q", repo.to_str().unwrap(), name]);
    git_ok(work, &["checkout", "-q", "main"]);
    let commit = git_ok(repo, &["rev-parse", name]).trim().to_owned();
    let mut ids: Vec<String> = git_ok(repo, &["rev-list", "--objects", &format!("main..{name}")])
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    ids.sort_by_key(|id| *id != commit);
    assert_eq!(ids.len(), 3, "{ids:?}");
    git_ok(repo, &["update-ref", "-d", &format!("refs/heads/{name}")]);
    ids
}

/// Move `ids` (loose in `repo`) into a pack of their own, `days` old.
fn into_old_pack(repo: &Path, ids: &[String], days: u64) -> PathBuf {
    let out = gixd_tests::output_with_input(
        {
            let mut cmd = gixd_tests::git_command(repo);
            cmd.args(["pack-objects", "-q", "objects/pack/pack"]);
            cmd
        },
        format!("{}\n", ids.join("\n")).as_bytes(),
    );
    let name = String::from_utf8(out).unwrap().trim().to_owned();
    for id in ids {
        std::fs::remove_file(loose_path(repo, id)).unwrap();
    }
    let pack = repo.join(format!("objects/pack/pack-{name}.pack"));
    age(&pack, days);
    pack
}

fn cruft_packs(repo: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "mtimes"))
        .collect()
}

#[test]
fn unreachable_objects_older_than_prune_expire_go_and_younger_ones_stay_in_a_cruft_pack_git_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, work) = repository(tmp.path());
    let old = deleted_branch(&repo, &work, "old");
    let young = deleted_branch(&repo, &work, "young");
    for id in &old {
        age(&loose_path(&repo, id), 30);
    }
    for id in &young {
        age(&loose_path(&repo, id), 3);
    }
    let reachable = gixd_tests::server::rev_list_objects(&repo, &["--all"]);

    // gc.pruneExpire unset: two weeks.
    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!((report.pruned, report.unreachable_kept), (3, 3), "{report:?}");
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert!(old.iter().all(|id| !has(&repo, id)), "the month-old branch is gone");
    assert!(young.iter().all(|id| has(&repo, id)), "the three-day-old one stays");
    assert_eq!(cruft_packs(&repo).len(), 1, "it stays in a cruft pack");
    assert_eq!(gixd_tests::server::rev_list_objects(&repo, &["--all"]), reachable);
    let fsck = git_client(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));

    // git reads each object's age from the `.mtimes` gixd wrote: the cruft pack itself is new, so
    // a two-day expiry drops the three-day-old objects only if git read their ages there.
    git_ok(&repo, &["repack", "-adq", "--cruft", "--cruft-expiration=5.days.ago"]);
    assert!(young.iter().all(|id| has(&repo, id)), "five days: git keeps them");
    git_ok(&repo, &["repack", "-adq", "--cruft", "--cruft-expiration=2.days.ago"]);
    assert!(young.iter().all(|id| !has(&repo, id)), "two days: git drops them, by the ages gixd recorded");

    // A second gixd run reads git's cruft pack as git wrote it: nothing unreachable is left.
    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!((report.pruned, report.unreachable_kept), (0, 0), "{report:?}");
    assert_eq!(gixd_tests::server::rev_list_objects(&repo, &["--all"]), reachable);
}

#[test]
fn prune_expire_never_keeps_everything_and_now_keeps_nothing_unreachable() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, work) = repository(tmp.path());
    let gone = deleted_branch(&repo, &work, "gone");
    git_ok(&repo, &["config", "gc.pruneExpire", "never"]);
    for id in &gone {
        age(&loose_path(&repo, id), 400);
    }
    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!((report.pruned, report.unreachable_kept), (0, 3), "{report:?}");
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert!(gone.iter().all(|id| has(&repo, id)));

    // The ages travel from the cruft pack into the next one: still 400 days, gone at "2.weeks.ago".
    git_ok(&repo, &["config", "gc.pruneExpire", "2.weeks.ago"]);
    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!((report.pruned, report.unreachable_kept), (3, 0), "{report:?}");
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert!(gone.iter().all(|id| !has(&repo, id)));

    let fresh = deleted_branch(&repo, &work, "fresh");
    git_ok(&repo, &["config", "gc.pruneExpire", "now"]);
    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!((report.pruned, report.unreachable_kept), (3, 0), "{report:?}");
    assert!(fresh.iter().all(|id| !has(&repo, id)), "loose objects go at once");
    assert!(cruft_packs(&repo).is_empty());

    git_ok(&repo, &["config", "gc.pruneExpire", "a fortnight, roughly"]);
    let err = gixd::maintenance::run(&repo).unwrap_err();
    assert!(err.to_string().contains("gc.pruneExpire"), "{err}");
}

#[test]
fn an_expired_object_a_younger_unreachable_one_or_a_quarantined_push_reaches_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, work) = repository(tmp.path());
    // `base` is a month old; `child` (written now) is a commit on it, also unreachable.
    let base = deleted_branch(&repo, &work, "base");
    git_ok(&work, &["checkout", "-q", "base"]);
    gixd_tests::commit_files(&work, &[("child.txt", b"child\n")], "child");
    git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "base:refs/heads/child"]);
    let child = git_ok(&repo, &["rev-parse", "child"]).trim().to_owned();
    git_ok(&repo, &["update-ref", "-d", "refs/heads/child"]);
    git_ok(&work, &["checkout", "-q", "main"]);
    // `held` is a month old too, and a push in its quarantine (gixd's, not yet in the
    // repository) builds on it.
    let held = deleted_branch(&repo, &work, "held");
    let tree = git_ok(&repo, &["rev-parse", &format!("{}^{{tree}}", held[0])]).trim().to_owned();
    let pushed = git_ok(&repo, &["commit-tree", "-p", &held[0], "-m", "in flight", &tree]).trim().to_owned();
    let quarantine = repo.join("objects/gixd-quarantine-1-1");
    std::fs::create_dir_all(quarantine.join(&pushed[..2])).unwrap();
    std::fs::rename(loose_path(&repo, &pushed), quarantine.join(&pushed[..2]).join(&pushed[2..])).unwrap();
    // And one nothing reaches: it goes.
    let lone = deleted_branch(&repo, &work, "lone");
    for id in base.iter().chain(&held).chain(&lone) {
        age(&loose_path(&repo, id), 30);
    }
    let report = gixd::maintenance::run(&repo).unwrap();
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert!(base.iter().all(|id| has(&repo, id)), "reached by the younger child: kept");
    assert!(has(&repo, &child));
    assert!(held.iter().all(|id| has(&repo, id)), "reached by the quarantined push: kept");
    assert!(lone.iter().all(|id| !has(&repo, id)), "reached by nothing: gone");
    assert_eq!(report.pruned, 3, "{report:?}");
}

#[test]
fn a_push_that_builds_on_a_left_out_object_before_the_replaced_packs_go_keeps_their_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, work) = repository(tmp.path());
    // Two deleted branches, each in a month-old pack of its own.
    let revived = deleted_branch(&repo, &work, "revived");
    let dropped = deleted_branch(&repo, &work, "dropped");
    let revived_pack = into_old_pack(&repo, &revived, 30);
    let dropped_pack = into_old_pack(&repo, &dropped, 30);

    let report = gixd::maintenance::run(&repo).unwrap();
    assert_eq!(report.pruned, 6, "{report:?}");
    // Within the grace the replaced packs still serve lookups: a push whose client read the refs
    // before `revived` was deleted lands a commit on it (receive-pack's connectivity check
    // passes against the old pack) and moves a ref there.
    assert!(has(&repo, &revived[0]));
    let tree = git_ok(&repo, &["rev-parse", &format!("{}^{{tree}}", revived[0])]).trim().to_owned();
    let landed = git_ok(&repo, &["commit-tree", "-p", &revived[0], "-m", "landed", &tree]).trim().to_owned();
    git_ok(&repo, &["update-ref", "refs/heads/landed", &landed]);

    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert!(revived_pack.exists(), "the pack the push built on is kept");
    assert!(!dropped_pack.exists(), "the other one goes");
    assert!(revived.iter().all(|id| has(&repo, id)));
    assert!(dropped.iter().all(|id| !has(&repo, id)));
    gixd_tests::server::assert_fsck_clean(&repo);

    // The next run takes the revived objects into the repository's pack, and then the kept
    // pack goes too; the refs are whole.
    gixd::maintenance::run(&repo).unwrap();
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert!(!revived_pack.exists());
    gixd_tests::server::assert_fsck_clean(&repo);
    let before = all_objects(&repo);
    assert!(revived.iter().all(|id| before.contains(id)));
}

#[test]
fn a_cruft_pack_stays_out_of_the_geometric_roll_up_and_the_repository_stays_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, work) = repository(tmp.path());
    let young = deleted_branch(&repo, &work, "young");
    gixd::maintenance::run(&repo).unwrap();
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    let cruft = cruft_packs(&repo);
    assert_eq!(cruft.len(), 1, "the unreachable young objects are in a cruft pack");
    // Pushes after it, each a pack of its own (unpackLimit 1), rolled up geometrically.
    git_ok(&repo, &["config", "receive.unpackLimit", "1"]);
    for i in 0..3 {
        gixd_tests::commit_files(
            &work,
            &[("more.txt", format!("more {i}\n").repeat(20).as_bytes())],
            &format!("more {i}"),
        );
        git_ok(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
    }
    assert!(matches!(gixd::maintenance::geometric::due(&repo), gixd::maintenance::geometric::Due::Geometric));
    gixd::maintenance::geometric::run(&repo).unwrap().expect("a roll-up");
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert_eq!(cruft_packs(&repo), cruft, "the cruft pack is neither rolled up nor replaced");
    assert!(young.iter().all(|id| has(&repo, id)));
    let fsck = git_client(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
    if repo.join("objects/pack/multi-pack-index").exists() {
        git_ok(&repo, &["multi-pack-index", "verify"]);
    }
    let bitmap = git_client(&repo, &["rev-list", "--test-bitmap", "HEAD"]);
    assert!(String::from_utf8_lossy(&bitmap.stderr).contains("OK!"), "{}", String::from_utf8_lossy(&bitmap.stderr));
    // Nothing more is due: a cruft pack is not "outside the bitmap" for the full-repack rule.
    assert!(matches!(gixd::maintenance::geometric::due(&repo), gixd::maintenance::geometric::Due::Nothing));
}
