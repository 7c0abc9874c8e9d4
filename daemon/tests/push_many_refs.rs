//! A push of many refs into one history (`git push --mirror` of a real repository's heads and
//! tags into an empty gixd repository): the connectivity check walks each received object once,
//! a received object's miss in the repository does not rescan its pack directory, and the refs
//! move in one transaction (its locks noted for a kill once, not once per ref). Counted, not
//! timed: the server's file system calls during the push, under strace.

mod common;
use common::git_ok;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const COMMITS: usize = 60;
const TAGS: usize = 120;

#[test]
fn a_mirror_push_of_many_refs_walks_each_received_object_once() {
    if Command::new("strace").arg("-V").output().map(|o| !o.status.success()).unwrap_or(true) {
        assert!(std::env::var_os("CI").is_none(), "strace is required in CI (.ci/run installs it)");
        eprintln!("strace is not installed: not counted");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main"]);
    for i in 0..COMMITS {
        std::fs::write(work.join(format!("f{}", i % 7)), format!("version {i}\n")).unwrap();
        git_ok(&work, &["add", "-A"]);
        git_ok(&work, &["commit", "-q", "-m", &format!("c{i}")]);
    }
    let history: Vec<String> = git_ok(&work, &["rev-list", "--reverse", "HEAD"]).lines().map(str::to_owned).collect();
    for t in 0..TAGS {
        git_ok(&work, &["tag", &format!("t{t}"), &history[t * COMMITS / TAGS]]);
    }
    let base = tmp.path().join("base");
    let repo = base.join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    git_ok(&repo, &["init", "-q", "--bare", "-b", "main"]);

    // Port 0: the server binds its own, and says where (a port picked here and freed could be
    // taken by another test before the server binds it).
    let mut server = Command::new(env!("CARGO_BIN_EXE_gixd"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--git-listen",
            "127.0.0.1:0",
            "--export-all",
            "--enable",
            "receive-pack",
            "--base-path",
        ])
        .arg(&base)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let git_addr = BufReader::new(server.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.split("git://").nth(1).and_then(|rest| rest.split('/').next()).map(str::to_owned))
        .expect("the server says where git:// listens");
    let counts = tmp.path().join("strace.txt");
    let mut strace = Command::new("strace")
        .args([
            "-f",
            "-c",
            "-U",
            "name,calls",
            "-e",
            "trace=openat,statx,newfstatat,getdents64,readlink,rename,unlink",
            "-o",
        ])
        .arg(&counts)
        .args(["-p", &server.id().to_string()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pushed = common::git(&work, &["push", "-q", "--mirror", &format!("git://{git_addr}/r.git")]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let _ = Command::new("kill").args(["-INT", &strace.id().to_string()]).status();
    let _ = strace.wait();
    let _ = server.kill();
    let _ = server.wait();
    assert!(pushed.status.success(), "{}", String::from_utf8_lossy(&pushed.stderr));
    assert_eq!(git_ok(&repo, &["show-ref"]), git_ok(&work, &["show-ref"]), "every ref arrived");

    let text = std::fs::read_to_string(&counts).unwrap();
    let total: u64 =
        text.lines().find_map(|l| l.strip_prefix("total").and_then(|r| r.trim().parse().ok())).expect("strace total");
    let objects = git_ok(&repo, &["count-objects", "-v"]);
    // The ref locks a transaction takes are noted for a kill (a file written and renamed into
    // place, removed after): once for the push's one transaction, not once per ref (red when each
    // ref had its own: 2 renames and 2 removals per ref).
    let calls = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).filter(|r| r.starts_with(' ')).and_then(|r| r.trim().parse().ok()))
            .unwrap_or(0)
    };
    assert!(calls("rename") <= 10 && calls("unlink") <= 20, "the ref locks were noted per ref:\n{text}");
    // The push's own work (its pack, quarantine, refs, locks) is a few calls per ref.
    let bound = 20 * (TAGS + 1) as u64 + 500;
    assert!(
        total <= bound,
        "a mirror push of {} refs made {total} file system calls in the server (bound {bound}):\n{text}\n{objects}",
        TAGS + 1
    );
}
