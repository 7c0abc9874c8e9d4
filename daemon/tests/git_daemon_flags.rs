//! `gixd daemon` takes git daemon's command line: the binary is started with the flags, stock git
//! is the client. Each flag is shown doing what git daemon's does (and the default without it).

mod common;
use common::{git, git_ok};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `gixd daemon`, killed on drop.
struct Daemon {
    child: Child,
    git: String,
    http: Option<String>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Start `gixd daemon --listen 127.0.0.1 --port <free> <args>` and wait for its "serving" lines.
fn daemon(args: &[&str]) -> Daemon {
    daemon_with_files(args, None)
}

/// [`daemon`], the process allowed at most `open_files` descriptors when given.
fn daemon_with_files(args: &[&str], open_files: Option<u64>) -> Daemon {
    use std::os::unix::process::CommandExt;
    let port = free_port().to_string();
    let mut command = Command::new(env!("CARGO_BIN_EXE_gixd"));
    command
        .args(["daemon", "--listen", "127.0.0.1", "--port", &port])
        .args(args)
        .env("GIXD_WORKER_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(limit) = open_files {
        // SAFETY: setrlimit is async-signal-safe; it only lowers the child's own limit.
        unsafe {
            command.pre_exec(move || {
                let rlim = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &rlim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command.spawn().expect("gixd starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut git = None;
    let mut http = None;
    let wants_http = args.contains(&"--http-listen");
    while git.is_none() || (wants_http && http.is_none()) {
        let line = lines.next().expect("gixd prints where it serves").unwrap();
        if let Some(rest) = line.strip_prefix("gixd: serving git://") {
            git = Some(format!("git://{}", rest.trim_end_matches("/<repository>")));
        } else if let Some(rest) = line.strip_prefix("gixd: serving http://") {
            http = Some(format!("http://{}", rest.trim_end_matches("/<repository>")));
        }
    }
    Daemon { child, git: git.unwrap(), http }
}

/// A bare repository with one commit at `dir`.
fn bare_repo(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let work = dir.with_extension("work");
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("f"), "content\n").unwrap();
    git_ok(&work, &["add", "f"]);
    git_ok(&work, &["commit", "-q", "-m", "one"]);
    git_ok(dir.parent().unwrap(), &["clone", "-q", "--bare", work.to_str().unwrap(), dir.to_str().unwrap()]);
    dir.to_owned()
}

/// Clone `url`; Ok(()) or git's stderr.
fn clone(tmp: &Path, url: &str) -> Result<(), String> {
    // A fresh name per clone (a free port number, used before, could repeat).
    static CLONES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dest = tmp.join(format!("clone-{}", CLONES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let out = git(tmp, &["clone", "-q", url, dest.to_str().unwrap()]);
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

#[test]
fn without_export_all_only_repositories_with_git_daemon_export_ok_are_served_and_errors_say_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let repo = bare_repo(&base.join("r.git"));
    let d = daemon(&["--base-path", base.to_str().unwrap()]);
    let err = clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap_err();
    assert!(err.contains("access denied or repository not exported: /r.git"), "{err}");
    // A missing repository reads the same: a prober learns nothing.
    let err = clone(tmp.path(), &format!("{}/missing.git", d.git)).unwrap_err();
    assert!(err.contains("access denied or repository not exported: /missing.git"), "{err}");
    std::fs::write(repo.join("git-daemon-export-ok"), "").unwrap();
    clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap();
    // Without --strict-paths, .git may be left off.
    clone(tmp.path(), &format!("{}/r", d.git)).unwrap();
}

#[test]
fn export_all_and_informative_errors_do_what_git_daemon_does() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("r.git"));
    let d = daemon(&["--base-path", base.to_str().unwrap(), "--export-all", "--informative-errors"]);
    clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap();
    let err = clone(tmp.path(), &format!("{}/missing.git", d.git)).unwrap_err();
    assert!(err.contains("repository 'missing.git' not found"), "{err}");
}

#[test]
fn strict_paths_need_the_exact_git_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("r.git"));
    let d = daemon(&["--base-path", base.to_str().unwrap(), "--export-all", "--strict-paths", "--informative-errors"]);
    clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap();
    let err = clone(tmp.path(), &format!("{}/r", d.git)).unwrap_err();
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn a_directory_whitelist_limits_what_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("public/a.git"));
    bare_repo(&base.join("private/b.git"));
    let public = base.join("public");
    let d = daemon(&["--base-path", base.to_str().unwrap(), "--export-all", public.to_str().unwrap()]);
    clone(tmp.path(), &format!("{}/public/a.git", d.git)).unwrap();
    let err = clone(tmp.path(), &format!("{}/private/b.git", d.git)).unwrap_err();
    assert!(err.contains("access denied or repository not exported"), "{err}");
}

#[test]
fn enable_and_disable_switch_services() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("r.git"));
    let d = daemon(&[
        "--base-path",
        base.to_str().unwrap(),
        "--export-all",
        "--disable=upload-pack",
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let err = clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap_err();
    assert!(err.contains("service 'git-upload-pack' is not enabled"), "{err}");
    let err = clone(tmp.path(), &format!("{}/r.git", d.http.as_ref().unwrap())).unwrap_err();
    assert!(err.contains("403") || err.contains("not enabled"), "{err}");
    // An unknown service name is a startup error naming it.
    let out = Command::new(env!("CARGO_BIN_EXE_gixd"))
        .args(["daemon", "--base-path", ".", "--enable=frobnicate"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown service 'frobnicate'"));
}

#[test]
fn http_and_git_protocol_are_served_by_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("r.git"));
    let d = daemon(&["--base-path", base.to_str().unwrap(), "--export-all", "--http-listen", "127.0.0.1:0"]);
    clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap();
    clone(tmp.path(), &format!("{}/r.git", d.http.as_ref().unwrap())).unwrap();
}

#[test]
fn max_connections_turns_the_one_too_many_away_and_init_timeout_closes_silent_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("r.git"));
    let d = daemon(&["--base-path", base.to_str().unwrap(), "--export-all", "--max-connections=1", "--init-timeout=2"]);
    let addr = d.git.trim_start_matches("git://").to_owned();
    let started = std::time::Instant::now();
    let mut silent = TcpStream::connect(&addr).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let err = clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap_err();
    assert!(err.contains("too many connections"), "{err}");
    // The silent connection is closed by the init timeout, then the slot is free again.
    let mut got = Vec::new();
    silent.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    silent.read_to_end(&mut got).unwrap();
    assert!(String::from_utf8_lossy(&got).contains("ERR"), "told why");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    drop(silent);
    // The slot is free once the server has let go of that connection.
    let mut result = Err(String::new());
    for _ in 0..20 {
        result = clone(tmp.path(), &format!("{}/r.git", d.git));
        if result.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    result.unwrap();
}

#[test]
fn a_server_out_of_file_descriptors_refuses_no_one_for_good_and_serves_again_once_some_are_free() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("r.git"));
    let d = daemon_with_files(
        &["--base-path", base.to_str().unwrap(), "--export-all", "--http-listen", "127.0.0.1:0"],
        Some(48),
    );
    let git_addr = d.git.trim_start_matches("git://").to_owned();
    let http_addr = d.http.as_ref().unwrap().trim_start_matches("http://").to_owned();
    // More idle connections than the server has descriptors: its accepts fail with EMFILE
    // (the rest wait in the listen backlog) on both listeners.
    let mut idle = Vec::new();
    for addr in [&http_addr, &git_addr] {
        for _ in 0..40 {
            idle.push(TcpStream::connect(addr).unwrap());
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let fds = std::fs::read_dir(format!("/proc/{}/fd", d.child.id())).unwrap().count();
    assert!(fds >= 46, "the server ran out of descriptors ({fds} open)");
    drop(idle);
    // Once they are closed, both transports serve again, without a restart.
    for url in [&d.git, d.http.as_ref().unwrap()] {
        let mut result = Err(String::new());
        for _ in 0..40 {
            result = clone(tmp.path(), &format!("{url}/r.git"));
            if result.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        result.unwrap_or_else(|err| panic!("{url} serves again: {err}"));
    }
    assert!(
        d.child.id() > 0 && std::fs::metadata(format!("/proc/{}", d.child.id())).is_ok(),
        "the server is still running"
    );
}

#[test]
fn bad_request_lines_get_an_error_and_the_daemon_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    bare_repo(&base.join("r.git"));
    let d = daemon(&["--base-path", base.to_str().unwrap(), "--export-all", "--informative-errors"]);
    let addr = d.git.trim_start_matches("git://").to_owned();
    let exchange = |bytes: &[u8]| -> String {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let _ = s.write_all(bytes);
        // Nothing more comes from us: a request the server took ends at our end of file.
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    };
    let line = |text: &[u8]| {
        let mut v = format!("{:04x}", text.len() + 4).into_bytes();
        v.extend(text);
        v
    };
    // No NUL: no host field, the path runs to the end of the line; git daemon takes it, so do we.
    let no_nul = exchange(&line(b"git-upload-pack /r.git"));
    assert!(no_nul.contains("refs/heads/main"), "{no_nul}");
    // Too long for a pkt-line (length field past 65520), and not hex at all.
    assert!(exchange(b"ffffgit-upload-pack /r.git\0host=x\0").contains("ERR"));
    assert!(exchange(b"zzzzgit-upload-pack").contains("ERR"));
    // A path escaping the base.
    assert!(exchange(&line(b"git-upload-pack /../../etc\0host=x\0")).contains("ERR"));
    clone(tmp.path(), &format!("{}/r.git", d.git)).unwrap();
}

#[test]
fn user_path_serves_homes_below_the_base_path_only() {
    let tmp = tempfile::tempdir().unwrap();
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap().trim().to_owned();
    let home = String::from_utf8(
        Command::new("sh").args(["-c", &format!("getent passwd {user} | cut -d: -f6")]).output().unwrap().stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    let home = PathBuf::from(home);
    let sub = format!(".gixd-test-{}", std::process::id());
    let Ok(()) = std::fs::create_dir_all(home.join(&sub)) else {
        eprintln!("home {} not writable: the positive case is skipped", home.display());
        return;
    };
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(home.join(&sub));
    bare_repo(&home.join(&sub).join("r.git"));
    let parent = home.parent().unwrap();
    let d = daemon(&[
        "--base-path",
        parent.to_str().unwrap(),
        "--export-all",
        &format!("--user-path={sub}"),
        "--informative-errors",
    ]);
    clone(tmp.path(), &format!("{}/~{user}/r.git", d.git)).unwrap();
    // The same home, but a base path it is not below: refused.
    let elsewhere = tmp.path().join("base");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let d = daemon(&[
        "--base-path",
        elsewhere.to_str().unwrap(),
        "--export-all",
        &format!("--user-path={sub}"),
        "--informative-errors",
    ]);
    let err = clone(tmp.path(), &format!("{}/~{user}/r.git", d.git)).unwrap_err();
    assert!(err.contains("not found"), "{err}");
    // Without --user-path, ~user is not a path at all.
    let d = daemon(&["--base-path", parent.to_str().unwrap(), "--export-all", "--informative-errors"]);
    assert!(clone(tmp.path(), &format!("{}/~{user}/r.git", d.git)).is_err());
}
