//! The binary's life as a service manager sees it: SIGTERM drains (the listeners close at once,
//! a clone or a push in flight finishes within the grace, gixd exits 0; past the grace what is left is
//! cancelled, a push leaving nothing), SIGHUP re-reads tokens and the certificate while a clone
//! runs, systemd is told READY, RELOADING and STOPPING, and with socket activation a restart while
//! clones run back to back fails none of them.

mod common;
use common::{git, git_ok};

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Bytes that do not compress, the same every run.
fn noise(len: usize) -> Vec<u8> {
    bench_support::noise(0x9e37_79b9_7f4a_7c15, len)
}

/// A bare repository `name.git` below `base` whose clone is a pack of about `mib` MiB; and the
/// work repository it was made from.
fn big_repo(base: &Path, name: &str, mib: usize) -> PathBuf {
    let work = base.parent().unwrap().join(format!("{name}-work"));
    std::fs::create_dir_all(&work).unwrap();
    git_ok(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("big.bin"), noise(mib << 20)).unwrap();
    git_ok(&work, &["add", "."]);
    git_ok(&work, &["commit", "-q", "-m", "big"]);
    let bare = base.join(format!("{name}.git"));
    git_ok(base, &["clone", "-q", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()]);
    work
}

/// A running `gixd serve`, the addresses it printed, killed when dropped if still there.
struct Gixd {
    child: Child,
    http: SocketAddr,
    https: Option<SocketAddr>,
}

impl Drop for Gixd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gixd {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Gixd {
        Self::spawn(Command::new(env!("CARGO_BIN_EXE_gixd")).arg("serve").args(args).envs(env.iter().copied()), args)
    }

    fn spawn(command: &mut Command, args: &[&str]) -> Gixd {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut addr = |scheme: &str| -> SocketAddr {
            let line = lines.next().expect("gixd announces where it serves").unwrap();
            line.split(scheme).nth(1).unwrap().split('/').next().unwrap().parse().unwrap()
        };
        let http = addr("http://");
        let https = args.iter().any(|a| a.starts_with("--tls-cert")).then(|| addr("https://"));
        Gixd { child, http, https }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: a signal to our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, signal) }, 0);
    }

    /// Its exit status, waiting at most `limit`.
    fn exits_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

/// A datagram socket standing in for systemd's notify socket: what gixd tells it.
struct NotifySocket {
    path: PathBuf,
    socket: UnixDatagram,
}

impl NotifySocket {
    fn new(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        NotifySocket { path, socket }
    }

    /// Waits for a message with `line` in it, up to `limit`.
    fn expect(&self, line: &str, limit: Duration) {
        let start = Instant::now();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while start.elapsed() < limit {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let message = String::from_utf8_lossy(&buf[..n]).into_owned();
                if message.lines().any(|l| l == line) {
                    return;
                }
                seen.push(message);
            }
        }
        panic!("no {line} told to the notify socket; seen: {seen:?}");
    }
}

/// The clone of `url` into `dest` in a thread of its own.
fn clone_in_background(url: String, dest: PathBuf) -> std::thread::JoinHandle<std::process::Output> {
    std::thread::spawn(move || git(dest.parent().unwrap(), &["clone", "-q", "--bare", &url, dest.to_str().unwrap()]))
}

/// git trusting only the CA of `ca` for HTTPS (`GIT_SSL_CAINFO`: git 2.47 over GnuTLS ignores
/// `-c http.sslCAInfo`), sending the URL's credentials at once.
fn trusting(ca: &Path, dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_SSL_CAINFO", ca)
        // The repository is private: the token goes with the first request.
        .args(["-c", "http.proactiveAuth=basic"])
        .args(args)
        .output()
        .unwrap()
}

/// Connecting to `addr` is refused (nothing listens any more), tried for up to `limit`.
fn refused_within(addr: SocketAddr, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A token for `user` added to `token_file` by `gixd token add` (with `--write` when `write`): its
/// secret.
fn add_token(token_file: &Path, user: &str, write: bool) -> String {
    let mut add = Command::new(env!("CARGO_BIN_EXE_gixd"));
    add.args(["token", "add", "--user", user]);
    if write {
        add.arg("--write");
    }
    let out = add.arg("--token-file").arg(token_file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The push quarantines left in the repository at `repo`.
fn quarantines(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gixd-quarantine-"))
        .collect()
}

/// SIGTERM while a clone is being read (8 MiB at 2 MiB/s): the listener closes at once, systemd
/// is told STOPPING, the clone completes, and gixd exits 0. Red before the drain: SIGTERM ended
/// gixd at once, the clone with it.
#[test]
fn sigterm_drains_a_clone_in_flight_to_its_end_closes_the_listener_and_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    big_repo(&base, "repo", 8);
    let notify = NotifySocket::new(tmp.path());
    let notify_path = notify.path.to_str().unwrap().to_owned();
    let mut gixd = Gixd::start(
        &["--listen", "127.0.0.1:0", "--export-all", "--shutdown-grace", "60", "--base-path", base.to_str().unwrap()],
        &[("NOTIFY_SOCKET", &notify_path)],
    );
    notify.expect("READY=1", Duration::from_secs(10));
    let slow = bench_support::relay::slow_link(gixd.http, 2 << 20);
    let dest = tmp.path().join("clone.git");
    let cloning = clone_in_background(format!("http://{slow}/repo.git"), dest.clone());
    std::thread::sleep(Duration::from_millis(1500));
    gixd.signal(libc::SIGTERM);
    notify.expect("STOPPING=1", Duration::from_secs(5));
    assert!(refused_within(gixd.http, Duration::from_secs(5)), "the listener closes when the drain starts");
    let out = cloning.join().unwrap();
    assert!(out.status.success(), "the clone in flight completes: {}", String::from_utf8_lossy(&out.stderr));
    git_ok(&dest, &["fsck", "--no-progress"]);
    let status = gixd.exits_within(Duration::from_secs(30)).expect("gixd exits once drained");
    assert!(status.success(), "exit status {status}");
}

/// SIGTERM while a push is being sent (a new 4 MiB blob at 1 MiB/s) with a grace long enough: the
/// push lands whole (its ref moved, its objects there, fsck clean, no quarantine left) and gixd
/// exits 0 once it is done.
#[test]
fn sigterm_lets_a_push_in_flight_land_whole_within_the_grace_and_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let work = big_repo(&base, "repo", 1);
    let token_file = tmp.path().join("tokens.toml");
    let secret = add_token(&token_file, "alice", true);
    let base_arg = base.to_str().unwrap();
    let token_arg = token_file.to_str().unwrap();
    let mut gixd = Gixd::start(
        &["--listen", "127.0.0.1:0", "--shutdown-grace", "60", "--token-file", token_arg, "--base-path", base_arg],
        &[],
    );
    std::fs::write(work.join("more.bin"), noise(4 << 20).into_iter().rev().collect::<Vec<u8>>()).unwrap();
    git_ok(&work, &["add", "."]);
    git_ok(&work, &["commit", "-q", "-m", "more"]);
    let pushed = git_ok(&work, &["rev-parse", "main"]);
    let uphill = bench_support::relay::slow_both_ways(gixd.http, 1 << 20);
    let push_url = format!("http://alice:{secret}@{uphill}/repo.git");
    let pushing = {
        let work = work.clone();
        std::thread::spawn(move || git(&work, &["push", "-q", &push_url, "main"]))
    };
    std::thread::sleep(Duration::from_millis(1500));
    gixd.signal(libc::SIGTERM);
    let out = pushing.join().unwrap();
    assert!(out.status.success(), "the push in flight lands: {}", String::from_utf8_lossy(&out.stderr));
    let status = gixd.exits_within(Duration::from_secs(30)).expect("gixd exits once drained");
    assert!(status.success(), "exit status {status}");
    let repo = base.join("repo.git");
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), pushed, "the ref moved");
    git_ok(&repo, &["fsck", "--no-progress"]);
    assert_eq!(quarantines(&repo), Vec::<String>::new(), "no quarantine left");
}

/// A grace shorter than the transfer: at its end the clone is cancelled (the client sees its
/// connection end), gixd exits 0 within the grace and a few seconds, and a push cancelled the same
/// way moves no ref and leaves no quarantine.
#[test]
fn past_a_short_grace_a_clone_and_a_push_are_cancelled_cleanly_and_gixd_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let work = big_repo(&base, "repo", 8);
    let before = git_ok(&base.join("repo.git"), &["rev-parse", "main"]);
    let token_file = tmp.path().join("tokens.toml");
    let secret = add_token(&token_file, "alice", true);
    let mut gixd = Gixd::start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--export-all",
            "--shutdown-grace",
            "1",
            "--token-file",
            token_file.to_str().unwrap(),
            "--base-path",
            base.to_str().unwrap(),
        ],
        &[],
    );
    // A clone read at 256 KiB/s (half a minute), and a push of a new 8 MiB blob sent at 256 KiB/s.
    let slow = bench_support::relay::slow_link(gixd.http, 256 << 10);
    let cloning = clone_in_background(format!("http://{slow}/repo.git"), tmp.path().join("clone.git"));
    std::fs::write(work.join("more.bin"), noise(8 << 20).into_iter().rev().collect::<Vec<u8>>()).unwrap();
    git_ok(&work, &["add", "."]);
    git_ok(&work, &["commit", "-q", "-m", "more"]);
    let uphill = bench_support::relay::slow_both_ways(gixd.http, 256 << 10);
    let push_url = format!("http://alice:{secret}@{uphill}/repo.git");
    let pushing = {
        let work = work.clone();
        std::thread::spawn(move || git(&work, &["push", "-q", &push_url, "main"]))
    };
    std::thread::sleep(Duration::from_millis(2000));
    let stopped = Instant::now();
    gixd.signal(libc::SIGTERM);
    let status = gixd.exits_within(Duration::from_secs(20)).expect("gixd exits after the grace");
    assert!(status.success(), "exit status {status}");
    assert!(stopped.elapsed() < Duration::from_secs(15), "within the grace and the settling: {:?}", stopped.elapsed());
    assert!(!cloning.join().unwrap().status.success(), "the clone was cut off");
    assert!(!pushing.join().unwrap().status.success(), "the push was cut off");
    let repo = base.join("repo.git");
    assert_eq!(git_ok(&repo, &["rev-parse", "main"]), before, "no ref moved");
    let left = quarantines(&repo);
    assert!(left.is_empty(), "the quarantine went: {left:?}");
    git_ok(&repo, &["fsck", "--no-progress"]);
}

/// SIGHUP while a clone runs over HTTPS: systemd is told RELOADING then READY; the certificate of
/// a second CA is presented from the next handshake on (a client trusting only the new CA fails
/// before the reload and succeeds after); a new token file (a token added, one revoked) is what
/// the next request sees; a token file broken meanwhile keeps the tokens read before (the reload
/// says why); a configuration file that no longer parses keeps every setting;
/// the clone in flight completes. Red before the reload: SIGHUP ended gixd.
#[test]
fn sighup_reloads_the_certificate_and_keeps_what_does_not_parse_while_a_clone_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    big_repo(&base, "repo", 8);
    let (cert, key) = (tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
    let (old_ca, new_ca) = (tmp.path().join("old-ca.pem"), tmp.path().join("new-ca.pem"));
    let certificate = |ca_file: &Path| {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let ca = rcgen::CertifiedIssuer::self_signed(params, ca_key).unwrap();
        std::fs::write(ca_file, ca.pem()).unwrap();
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&server_key, &ca).unwrap();
        std::fs::write(&cert, server.pem()).unwrap();
        std::fs::write(&key, server_key.serialize_pem()).unwrap();
    };
    certificate(&old_ca);
    let token_file = tmp.path().join("gixd-tokens.toml");
    let secret = add_token(&token_file, "alice", false);
    // A private repository (no git-daemon-export-ok, no --export-all): the token reads it.
    let config = tmp.path().join("gixd.toml");
    let config_text = format!(
        "listen = \"127.0.0.1:0\"\nhttps_listen = \"127.0.0.1:0\"\nbase_path = {:?}\ntls_cert = {:?}\ntls_key = {:?}\n",
        base.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap()
    );
    std::fs::write(&config, &config_text).unwrap();
    let notify = NotifySocket::new(tmp.path());
    let notify_path = notify.path.to_str().unwrap().to_owned();
    let mut gixd = Gixd::spawn(
        Command::new(env!("CARGO_BIN_EXE_gixd"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .env("NOTIFY_SOCKET", &notify_path),
        &["--tls-cert"],
    );
    notify.expect("READY=1", Duration::from_secs(10));
    let https = gixd.https.unwrap();
    let url = |scheme: &str, addr: SocketAddr| format!("{scheme}://alice:{secret}@{addr}/repo.git");
    let ls = |ca: &Path| trusting(ca, tmp.path(), &["ls-remote", &url("https", https)]);
    assert!(ls(&old_ca).status.success(), "{}", String::from_utf8_lossy(&ls(&old_ca).stderr));

    // A clone in flight over HTTPS through a slow link (8 MiB at 2 MiB/s).
    let slow = bench_support::relay::slow_link(https, 2 << 20);
    let dest = tmp.path().join("clone.git");
    let cloning = {
        let (url, dest, ca) = (url("https", slow), dest.clone(), old_ca.clone());
        std::thread::spawn(move || {
            trusting(&ca, dest.parent().unwrap(), &["clone", "-q", "--bare", &url, dest.to_str().unwrap()])
        })
    };
    std::thread::sleep(Duration::from_millis(1000));

    // A new certificate of a new CA: not presented before the reload.
    certificate(&new_ca);
    assert!(!ls(&new_ca).status.success(), "the new certificate is not in use before SIGHUP");
    gixd.signal(libc::SIGHUP);
    notify.expect("RELOADING=1", Duration::from_secs(5));
    notify.expect("READY=1", Duration::from_secs(5));
    let after = ls(&new_ca);
    assert!(after.status.success(), "after SIGHUP: {}", String::from_utf8_lossy(&after.stderr));
    assert!(!ls(&old_ca).status.success(), "the old certificate is no longer presented");

    // A new token file: bob's token in, alice's revoked; after SIGHUP the next request sees it.
    let bob = add_token(&token_file, "bob", false);
    let alice_id = std::fs::read_to_string(&token_file)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("id = ").map(|id| id.trim_matches('"').to_owned()))
        .expect("alice's token id");
    let revoked = Command::new(env!("CARGO_BIN_EXE_gixd"))
        .args(["token", "revoke", &alice_id, "--token-file"])
        .arg(&token_file)
        .output()
        .unwrap();
    assert!(revoked.status.success(), "{}", String::from_utf8_lossy(&revoked.stderr));
    gixd.signal(libc::SIGHUP);
    notify.expect("READY=1", Duration::from_secs(5));
    assert!(!ls(&new_ca).status.success(), "alice's revoked token reads nothing");
    let as_bob = trusting(&new_ca, tmp.path(), &["ls-remote", &format!("https://bob:{bob}@{https}/repo.git")]);
    assert!(as_bob.status.success(), "bob's new token reads: {}", String::from_utf8_lossy(&as_bob.stderr));

    // A token file broken mid-edit and a configuration that does not parse: SIGHUP keeps both.
    std::fs::write(&token_file, "this is not toml [").unwrap();
    std::fs::write(&config, "listen = 'not an address'\n").unwrap();
    gixd.signal(libc::SIGHUP);
    notify.expect("READY=1", Duration::from_secs(5));
    let as_bob = trusting(&new_ca, tmp.path(), &["ls-remote", &format!("https://bob:{bob}@{https}/repo.git")]);
    assert!(as_bob.status.success(), "the tokens read before and the settings in use stay");

    let out = cloning.join().unwrap();
    assert!(out.status.success(), "the clone in flight is unharmed: {}", String::from_utf8_lossy(&out.stderr));
    git_ok(&dest, &["fsck", "--no-progress"]);
    assert!(gixd.child.try_wait().unwrap().is_none(), "gixd still serves");
}

/// Socket activation without systemd: the test holds the listening socket and starts gixd with it
/// as fd 3 (`LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES=http`). While 8 clones run back to back,
/// gixd is stopped (SIGTERM, a drain) and a new one started on the same socket: connections made
/// in between wait in its backlog, and no clone fails.
#[test]
fn with_socket_activation_a_restart_while_clones_run_back_to_back_fails_none() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    big_repo(&base, "repo", 2);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let activated = || {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = listener.as_raw_fd();
        let mut command = Command::new("sh");
        command
            .args(["-c", "export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=http; exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_gixd"))
            .args(["serve", "--export-all", "--shutdown-grace", "30", "--base-path", base.to_str().unwrap()]);
        // SAFETY: dup2 and fcntl are async-signal-safe. The listening socket becomes fd 3 of
        // the child, kept across exec (dup2 onto itself would keep its close-on-exec flag).
        unsafe {
            command.pre_exec(move || {
                let kept = if fd == 3 { libc::fcntl(3, libc::F_SETFD, 0) } else { libc::dup2(fd, 3) };
                if kept < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
            });
        }
        let gixd = Gixd::spawn(&mut command, &[]);
        assert_eq!(gixd.http, addr, "gixd serves the socket it was passed");
        gixd
    };
    let mut first = activated();
    let url = format!("http://{addr}/repo.git");
    let clones = {
        let (url, dir) = (url.clone(), tmp.path().to_owned());
        std::thread::spawn(move || {
            (0..8)
                .map(|i| {
                    let out = git(&dir, &["clone", "-q", "--bare", &url, &format!("c{i}.git")]);
                    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
                })
                .collect::<Vec<_>>()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    first.signal(libc::SIGTERM);
    let status = first.exits_within(Duration::from_secs(30)).expect("the first gixd drains and exits");
    assert!(status.success(), "exit status {status}");
    let _second = activated();
    let results = clones.join().unwrap();
    let failed: Vec<&String> = results.iter().filter(|(ok, _)| !ok).map(|(_, err)| err).collect();
    assert!(failed.is_empty(), "{} of 8 clones failed: {failed:?}", failed.len());
}
