//! The binary's configuration and token commands, and a push cut short by kill -9: `gixd
//! check-config` says exactly what is wrong; `gixd token add|list|revoke` shows a secret once and
//! stores only its hash; `gixd serve --config` serves with it; a gixd killed mid-push leaves the
//! repository fsck-clean with the ref at its old value (or, killed after the update, its new one;
//! fifty kills at points spread over a push), and the next start removes the quarantine and the
//! ref locks that push held.

mod common;
use common::{Server, git, git_ok};

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn gixd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gixd")).args(args).output().unwrap()
}

#[test]
fn check_config_names_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("gixd.toml");
    std::fs::create_dir_all(tmp.path().join("repos")).unwrap();
    std::fs::write(&file, "listen = \"127.0.0.1:9000\"\nbase_path = \"repos\"\n[limits]\nmax_push_bytes = 1000000\n")
        .unwrap();
    let out = gixd(&["check-config", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(": ok (listen 127.0.0.1:9000"));
    for (text, expected) in [
        ("lisen = \"127.0.0.1:9000\"\n", "unknown field `lisen`"),
        ("listen = \"not an address\"\n", "invalid socket address"),
        ("base_path = \"nowhere\"\n", "base_path: "),
        ("enable = [\"frobnicate\"]\n", "unknown service 'frobnicate'"),
        ("[limits]\nmax_transfers = 0\n", "limits.max_transfers: must be at least 1"),
        ("stream_window = \"big\"\n", "invalid type"),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = gixd(&["check-config", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(expected), "{text}: {err}");
        assert!(err.contains("gixd.toml"), "names the file: {err}");
    }
}

#[test]
fn tokens_are_shown_once_stored_hashed_listed_and_revoked() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("state/tokens.toml");
    let store_arg = format!("--token-file={}", store.display());
    let out = gixd(&["token", "add", "--user", "alice", "--repo", "team/*", "--write", &store_arg]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let secret = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(secret.starts_with("gixd_") && secret.len() == 45, "{secret}");
    let stored = std::fs::read_to_string(&store).unwrap();
    assert!(!stored.contains(&secret), "the secret is not stored");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&store).unwrap().permissions().mode() & 0o777, 0o600);
    let list = String::from_utf8_lossy(&gixd(&["token", "list", &store_arg]).stdout).into_owned();
    assert!(
        list.contains("alice") && list.contains("write") && list.contains("team/*") && !list.contains(&secret),
        "{list}"
    );
    let id = list.lines().nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    assert!(gixd(&["token", "revoke", &id, &store_arg]).status.success());
    let list = String::from_utf8_lossy(&gixd(&["token", "list", &store_arg]).stdout).into_owned();
    assert!(!list.contains("alice"), "{list}");
    let out = gixd(&["token", "revoke", "nope", &store_arg]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no token with id nope"));
}

fn serve(config: &Path) -> Server {
    serve_with(config, &[])
}

fn serve_with(config: &Path, env: &[(&str, &str)]) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gixd"));
    command.args(["serve", "--config", config.to_str().unwrap()]).envs(env.iter().copied());
    common::start_serve(command)
}

fn setup(tmp: &Path) -> (PathBuf, PathBuf, PathBuf, String) {
    let base = tmp.join("repos");
    let repo = base.join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    git_ok(&repo, &["init", "-q", "--bare", "-b", "main"]);
    std::fs::write(repo.join("git-daemon-export-ok"), "").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = tmp.join("gixd.toml");
    std::fs::write(&config, format!("listen = \"127.0.0.1:{port}\"\nbase_path = \"repos\"\n")).unwrap();
    let out = gixd(&["token", "add", "--user", "ci", "--write", "--config", config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(tmp.join("gixd-tokens.toml").is_file(), "the token file sits beside the config");
    let secret = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let work = tmp.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("a"), "a\n").unwrap();
    git_ok(&work, &["add", "a"]);
    git_ok(&work, &["commit", "-q", "-m", "one"]);
    (repo, config, work, secret)
}

#[test]
fn a_push_cut_by_kill_9_leaves_the_old_ref_and_the_next_start_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, config, work, secret) = setup(tmp.path());
    let server = serve(&config);
    let url = format!("http://ci:{secret}@{}/r.git", server.addr);
    git_ok(&work, &["push", "-q", &url, "main"]);
    let old = git_ok(&repo, &["rev-parse", "main"]);

    // A big commit; its pack goes out by hand, half of it, then gixd dies.
    let mut data = vec![0u8; 8 << 20];
    let mut x: u64 = 88172645463325252;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(work.join("big.bin"), &data).unwrap();
    git_ok(&work, &["add", "big.bin"]);
    git_ok(&work, &["commit", "-q", "-m", "big"]);
    let new = git_ok(&work, &["rev-parse", "main"]);
    let pack = {
        let mut child = Command::new("git")
            .current_dir(&work)
            .args(["pack-objects", "--revs", "--stdout", "-q"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(format!("{new}\n^{old}\n").as_bytes()).unwrap();
        child.wait_with_output().unwrap().stdout
    };
    let mut body = Vec::new();
    let command = format!("{old} {new} refs/heads/main\0report-status side-band-64k\n");
    body.extend(format!("{:04x}", command.len() + 4).as_bytes());
    body.extend(command.as_bytes());
    body.extend(b"0000");
    body.extend(&pack);
    let mut conn = TcpStream::connect(&server.addr).unwrap();
    write!(
        conn,
        "POST /r.git/git-receive-pack HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    conn.write_all(&body[..body.len() / 2]).unwrap();
    let quarantine = || -> Vec<PathBuf> {
        std::fs::read_dir(repo.join("objects"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("gixd-quarantine-"))
            .collect()
    };
    let started = std::time::Instant::now();
    while quarantine().is_empty() {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the push never reached its quarantine");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut server = server;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGKILL) };
    server.child.wait().unwrap();
    drop(conn);

    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), old, "the ref is at its old value");
    let fsck = git(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
    assert_eq!(quarantine().len(), 1, "the killed push's quarantine is there");

    let server = serve(&config);
    assert!(quarantine().is_empty(), "the next start removed it");
    let url = format!("http://ci:{secret}@{}/r.git", server.addr);
    git_ok(&work, &["push", "-q", &url, "main"]);
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), new);
}

/// gixd killed while it holds a push's ref locks (stopped there by its test hook, not by timing):
/// the ref stays old and the lock files stay, as they would after git's receive-pack; the next
/// start removes exactly the ones that push took (`<ref>.lock` and, with a `packed-refs`,
/// `packed-refs.lock`), and the same push then goes through. A lock file another process made
/// since, even at the same path, stays. Before, every later push to that ref was refused until
/// someone deleted the lock by hand.
#[test]
fn a_push_killed_holding_its_ref_locks_leaves_none_after_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, config, work, secret) = setup(tmp.path());
    let server = serve(&config);
    git_ok(&work, &["push", "-q", &format!("http://ci:{secret}@{}/r.git", server.addr), "main"]);
    drop(server);
    git_ok(&repo, &["pack-refs", "--all"]);
    let old = git_ok(&repo, &["rev-parse", "main"]);
    std::fs::write(work.join("b"), "b\n").unwrap();
    git_ok(&work, &["add", "b"]);
    git_ok(&work, &["commit", "-q", "-m", "two"]);
    let new = git_ok(&work, &["rev-parse", "main"]);
    let (ref_lock, packed_lock) = (repo.join("refs/heads/main.lock"), repo.join("packed-refs.lock"));
    let killed_push = || {
        let mut server = serve_with(&config, &[("GIXD_TEST_KILL_AT", "push-refs-locked")]);
        let pushed = git(&work, &["push", &format!("http://ci:{secret}@{}/r.git", server.addr), "main"]);
        assert!(!pushed.status.success(), "the server died inside the push");
        let status = server.child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "killed at its kill point: {status:?}");
        assert_eq!(git_ok(&repo, &["rev-parse", "main"]), old, "the ref did not move");
        for lock in [&ref_lock, &packed_lock] {
            assert!(lock.is_file(), "killed inside the lock window: {} is there", lock.display());
        }
    };

    killed_push();
    drop(serve(&config));
    for lock in [&ref_lock, &packed_lock] {
        assert!(!lock.exists(), "the next start removed the killed push's {}", lock.display());
    }

    killed_push();
    // The killed push's lock gone, and one at the same path from another writer since (a git
    // process still at work): a new file, whatever inode it gets.
    std::fs::remove_file(&ref_lock).unwrap();
    std::fs::write(&ref_lock, "").unwrap();
    let server = serve(&config);
    assert!(!packed_lock.exists(), "the killed push's packed-refs.lock is removed");
    assert!(ref_lock.is_file(), "the other writer's main.lock is left");
    std::fs::remove_file(&ref_lock).unwrap();

    git_ok(&work, &["push", "-q", &format!("http://ci:{secret}@{}/r.git", server.addr), "main"]);
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), new, "the push goes through");
    let fsck = git(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
}

/// The same on a reftable repository: the one lock of a reftable transaction is
/// `reftable/tables.list.lock`; killed while holding it, the next start removes it (and only a
/// lock that is still the killed push's), the stack is as before, and the push then lands as
/// one more table that git verifies.
#[test]
fn a_push_to_a_reftable_repository_killed_holding_tables_list_lock_leaves_none_after_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, config, work, secret) = setup(tmp.path());
    git_ok(&repo, &["refs", "migrate", "--ref-format=reftable"]);
    let server = serve(&config);
    git_ok(&work, &["push", "-q", &format!("http://ci:{secret}@{}/r.git", server.addr), "main"]);
    drop(server);
    let old = git_ok(&repo, &["rev-parse", "main"]);
    let list = std::fs::read(repo.join("reftable/tables.list")).unwrap();
    std::fs::write(work.join("b"), "b\n").unwrap();
    git_ok(&work, &["add", "b"]);
    git_ok(&work, &["commit", "-q", "-m", "two"]);
    let new = git_ok(&work, &["rev-parse", "main"]);
    let lock = repo.join("reftable/tables.list.lock");

    let mut server = serve_with(&config, &[("GIXD_TEST_KILL_AT", "push-refs-locked")]);
    let pushed = git(&work, &["push", &format!("http://ci:{secret}@{}/r.git", server.addr), "main"]);
    assert!(!pushed.status.success(), "the server died inside the push");
    let status = server.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "killed at its kill point: {status:?}");
    assert!(lock.is_file(), "killed inside the lock window: tables.list.lock is there");
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), old, "the ref did not move");
    assert_eq!(std::fs::read(repo.join("reftable/tables.list")).unwrap(), list, "no table was added");

    let server = serve(&config);
    assert!(!lock.exists(), "the next start removed the killed push's tables.list.lock");
    git_ok(&work, &["push", "-q", &format!("http://ci:{secret}@{}/r.git", server.addr), "main"]);
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), new, "the push goes through");
    git_ok(&repo, &["refs", "verify", "--strict"]);
    let fsck = git(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(fsck.status.success() && fsck.stdout.is_empty(), "{}", String::from_utf8_lossy(&fsck.stdout));
}

/// What the configuration file says stands unless a flag says otherwise: a boolean flag that is
/// not given (`--strict-paths`) or an optional one (`--user-path`) must not reset the file's
/// value to the flag's default.
#[test]
fn a_config_file_setting_holds_when_its_flag_is_not_given() {
    let tmp = tempfile::tempdir().unwrap();
    let (_repo, config, _work, _secret) = setup(tmp.path());
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}strict_paths = true\n")).unwrap();
    let server = serve(&config);
    let ls = |path: &str| git(tmp.path(), &["ls-remote", &format!("http://{}/{path}", server.addr)]);
    assert!(ls("r.git").status.success(), "the exact git directory is served");
    let out = ls("r");
    assert!(
        !out.status.success(),
        "strict_paths = true: 'r' must not find r.git ({})",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Fifty pushes, each with gixd killed (SIGKILL) at another point of it, spread from its start
/// to twice as long as an uninterrupted push takes (measured first): before the pack is
/// in, while it is indexed, while its objects move, around the ref update. After every one the
/// repository is fsck-clean and its ref is either the old or the new commit, never anything
/// else; the next start removes what the killed push left in quarantine.
#[test]
fn fifty_pushes_killed_at_different_points_leave_every_ref_old_or_new_and_the_repository_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, config, work, secret) = setup(tmp.path());
    let quarantines = || -> usize {
        std::fs::read_dir(repo.join("objects"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("gixd-quarantine-"))
            .count()
    };
    let main_now =
        || String::from_utf8_lossy(&git(&repo, &["rev-parse", "--verify", "-q", "main"]).stdout).trim().to_owned();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    // On the server's main, a new commit with a file that takes a while to index.
    let mut next_commit = |round: u64, base: &str| -> String {
        if !base.is_empty() {
            git_ok(&work, &["reset", "-q", "--hard", base]);
        }
        std::fs::write(work.join("data.bin"), incompressible(&mut x, 256 << 10)).unwrap();
        git_ok(&work, &["add", "data.bin"]);
        git_ok(&work, &["commit", "-q", "-m", &format!("round {round}")]);
        git_ok(&work, &["rev-parse", "main"])
    };
    let push = |addr: &str| {
        Command::new("git")
            .current_dir(&work)
            .args(["push", "-q", &format!("http://ci:{secret}@{addr}/r.git"), "main"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // How long one push takes when nothing interrupts it: the longest of three, on servers
    // started as each round's is (one sample was at times a quarter under the rounds' pushes,
    // and no kill point then reached past the end).
    let mut whole = std::time::Duration::ZERO;
    for k in 0..3 {
        let server = serve(&config);
        let base = if k == 0 { String::new() } else { main_now() };
        next_commit(100 + k, &base);
        let started = std::time::Instant::now();
        assert!(push(&server.addr).wait().unwrap().success());
        whole = whole.max(started.elapsed());
        drop(server);
    }

    let (mut stayed_old, mut became_new) = (0, 0);
    // Whether the push killed after `delay` (None: once the client is done) had moved the ref.
    let mut killed_round = |round: u64, delay: Option<std::time::Duration>| -> bool {
        let mut server = serve(&config);
        assert_eq!(quarantines(), 0, "round {round}: the start removed the last killed push's quarantine");
        assert!(
            !repo.join("refs/heads/main.lock").exists(),
            "round {round}: the start removed the ref lock the last killed push held"
        );
        let old = main_now();
        let new = next_commit(round, &old);
        let mut client = push(&server.addr);
        match delay {
            Some(delay) => std::thread::sleep(delay),
            None => {
                let started = std::time::Instant::now();
                let status = loop {
                    if let Some(status) = client.try_wait().unwrap() {
                        break status;
                    }
                    assert!(started.elapsed() < std::time::Duration::from_secs(120), "round {round}: the push ends");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                };
                assert!(status.success(), "round {round}: the push succeeds when nothing kills it");
            }
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(server.child.id() as i32, libc::SIGKILL) };
        server.child.wait().unwrap();
        let _ = client.wait();
        drop(server);
        let now = main_now();
        assert!(now == new || now == old, "round {round}: the ref is the old or the new commit, nothing else");
        let fsck = git(&repo, &["fsck", "--full", "--strict", "--no-dangling"]);
        assert!(
            fsck.status.success() && fsck.stdout.is_empty(),
            "round {round}: fsck: {}{}",
            String::from_utf8_lossy(&fsck.stdout),
            String::from_utf8_lossy(&fsck.stderr)
        );
        now == new
    };
    for round in 1..=50u64 {
        let became = killed_round(round, Some(whole.mul_f64(2.0 * round as f64 / 50.0)));
        if became { became_new += 1 } else { stayed_old += 1 }
    }
    // On a loaded machine (the whole suite at once) a push can take longer than every sample
    // (once all 60 of an earlier version's kill points, up to 12 samples, fell inside pushes):
    // then the last kill point is the latest one, just after the client is done.
    let mut extra = 0;
    if became_new == 0 {
        extra += 1;
        let became = killed_round(50 + extra, None);
        if became { became_new += 1 } else { stayed_old += 1 }
    }
    let server = serve(&config);
    assert_eq!(quarantines(), 0);
    drop(server);
    println!(
        "{} pushes killed over {whole:?} each: {stayed_old} left the ref old, {became_new} made it new; every one fsck-clean",
        50 + extra
    );
    assert!(stayed_old > 0 && became_new > 0, "the kill points span the push: {stayed_old} old, {became_new} new");
}

/// `len` bytes that do not compress (xorshift from `x`, which moves on).
fn incompressible(x: &mut u64, len: usize) -> Vec<u8> {
    (0..len / 8)
        .flat_map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            x.to_le_bytes()
        })
        .collect()
}

/// A temporary directory whose `repos/` is a tmpfs mounted with `options`, or None (with a
/// SKIP note) where mounting is not possible: not root, or root without the capability (some
/// containers).
fn repositories_on_tmpfs(options: &str) -> Option<(tempfile::TempDir, PathBuf, Mounted)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: mounting a tmpfs needs root");
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repos = tmp.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(&repos).output().unwrap();
    if !mounted.status.success() {
        eprintln!("SKIP: cannot mount a tmpfs here: {}", String::from_utf8_lossy(&mounted.stderr).trim());
        return None;
    }
    let mount = Mounted(repos.clone());
    Some((tmp, repos, mount))
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The filesystem under the repositories has no inodes left (a tmpfs with 256, used up): a
/// push cannot even make its quarantine directory, and git shows why (the `unpack` reason, not
/// "the remote end hung up"); the ref stays, nothing of the push is left, and once inodes are
/// freed the same push goes through. Needs to mount a tmpfs; skipped with a note otherwise.
#[test]
fn a_push_with_no_inodes_left_fails_with_the_reason_and_goes_through_once_some_are_freed() {
    let Some((tmp, repos, _mount)) = repositories_on_tmpfs("size=8m,nr_inodes=256") else { return };
    let (repo, config, work, secret) = setup(tmp.path());
    let server = serve(&config);
    let url = format!("http://ci:{secret}@{}/r.git", server.addr);
    git_ok(&work, &["push", "-q", &url, "main"]);
    let old = git_ok(&repo, &["rev-parse", "main"]);
    std::fs::write(work.join("b"), "b\n").unwrap();
    git_ok(&work, &["add", "b"]);
    git_ok(&work, &["commit", "-q", "-m", "two"]);
    let new = git_ok(&work, &["rev-parse", "main"]);

    let fillers = repos.join("fillers");
    std::fs::create_dir(&fillers).unwrap();
    for i in 0.. {
        match std::fs::File::create(fillers.join(i.to_string())) {
            Ok(_) => {}
            Err(err) => {
                assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "out of inodes, not something else: {err}");
                break;
            }
        }
    }
    let refused = git(&work, &["push", &url, "main"]);
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("No space left on device"), "git shows why: {said}");
    assert!(!said.contains(repos.to_str().unwrap()), "and no server path: {said}");
    println!("git said: {}", said.trim());
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), old, "the ref did not move");
    let left = std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gixd-quarantine-"))
        .count();
    assert_eq!(left, 0, "nothing of the refused push is left");

    std::fs::remove_dir_all(&fillers).unwrap();
    git_ok(&work, &["push", "-q", &url, "main"]);
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), new, "with inodes again the push goes through, no restart");
}

/// Fill the filesystem holding `dir` until a write fails for want of space; the filler file.
fn fill_disk(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0x5au8; 16 << 10];
    loop {
        match file.write_all(&chunk) {
            Ok(()) => {}
            Err(err) => {
                assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "the disk is full, not something else: {err}");
                return filler;
            }
        }
    }
}

/// The disk under the repositories runs full (a 4 MiB tmpfs, filled): a push that needs space
/// fails with a reason git shows, its ref stays where it was, fsck is clean, nothing of the
/// push is left, and the server goes on serving clones; once space is freed the same push
/// goes through without a restart; maintenance on the full disk fails with the reason and loses
/// nothing, and runs once there is room. Needs to mount a tmpfs (root with the capability);
/// skipped with a note otherwise.
#[test]
fn a_push_and_maintenance_on_a_full_disk_fail_with_the_reason_and_recover_when_space_is_freed() {
    let Some((tmp, repos, _mount)) = repositories_on_tmpfs("size=4m") else { return };
    let (repo, config, work, secret) = setup(tmp.path());
    let server = serve(&config);
    let url = format!("http://ci:{secret}@{}/r.git", server.addr);
    git_ok(&work, &["push", "-q", &url, "main"]);
    let old = git_ok(&repo, &["rev-parse", "main"]);

    // A commit with 1 MiB that does not compress, pushed onto a full disk.
    std::fs::write(work.join("big.bin"), incompressible(&mut 0x9e37_79b9_7f4a_7c15, 1 << 20)).unwrap();
    git_ok(&work, &["add", "big.bin"]);
    git_ok(&work, &["commit", "-q", "-m", "big"]);
    let new = git_ok(&work, &["rev-parse", "main"]);
    let filler = fill_disk(&repos);
    let refused = git(&work, &["push", &url, "main"]);
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "the push cannot succeed on a full disk: {said}");
    assert!(said.contains("no storage space") || said.contains("No space left on device"), "git shows why: {said}");
    assert!(!said.contains(repos.to_str().unwrap()), "and no server path: {said}");
    println!("git said: {}", said.trim());
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), old, "the ref did not move");
    let fsck = git(&repo, &["fsck", "--full", "--strict"]);
    assert!(
        fsck.status.success() && fsck.stdout.is_empty(),
        "fsck: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    let quarantines = std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gixd-quarantine-"))
        .count();
    assert_eq!(quarantines, 0, "nothing of the refused push is left");
    let clone = tmp.path().join("clone.git");
    git_ok(tmp.path(), &["clone", "-q", "--bare", &format!("http://{}/r.git", server.addr), clone.to_str().unwrap()]);
    assert_eq!(git_ok(&clone, &["rev-parse", "main"]), old, "clones are served from the full disk");

    // Maintenance on the full disk: refused with the reason, nothing lost, nothing left.
    let refs_before = git_ok(&repo, &["for-each-ref"]);
    let err = gixd::maintenance::run(&repo).expect_err("no room for the new pack");
    assert!(err.to_string().contains("space"), "maintenance says why: {err}");
    assert_eq!(git_ok(&repo, &["for-each-ref"]), refs_before);
    let fsck = git(&repo, &["fsck", "--full", "--strict"]);
    assert!(
        fsck.status.success() && fsck.stdout.is_empty(),
        "fsck after maintenance on a full disk: {}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    let pack_dir_files = |repo: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(repo.join("objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert!(
        !pack_dir_files(&repo).iter().any(|n| n.starts_with(".tmp") || n.ends_with(".tmp")),
        "{:?}",
        pack_dir_files(&repo)
    );
    println!("maintenance said: {err}");

    std::fs::remove_file(filler).unwrap();
    git_ok(&work, &["push", "-q", &url, "main"]);
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), new, "with space again the push goes through, no restart");
    let fsck = git(&repo, &["fsck", "--full", "--strict"]);
    assert!(fsck.status.success(), "{}", String::from_utf8_lossy(&fsck.stderr));
    let report = gixd::maintenance::run(&repo).expect("with space again, maintenance runs");
    // The packs it replaced stay for the grace; a later run removes them.
    gixd::maintenance::expire(&repo, std::time::Duration::ZERO);
    assert_eq!(pack_dir_files(&repo).iter().filter(|n| n.ends_with(".pack")).count(), 1, "{report:?}");
    drop(server);
}
