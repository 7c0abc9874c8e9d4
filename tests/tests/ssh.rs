//! SSH: stock git over `ssh://` with Debian's OpenSSH client and a key of the test's own, against
//! gixd's in-process SSH server: clone (v0 and v2), shallow and partial clones, archive, push,
//! fetch with a user's key; an unknown key, a key without a grant, a read-only key pushing, a
//! shell, another command and paths out of the base path are refused; garbage, stalled and silent
//! connections are closed; floods of connections, keys and channels are cut off. (`gixd shell`
//! under Debian's sshd: `daemon/tests/openssh.rs`.)

use std::path::{Path, PathBuf};
use std::process::Output;

use gixd::config::Exports;
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, serve_with};
use gixd_tests::{commit_files, git, git_out};

struct Fixture {
    tmp: tempfile::TempDir,
    server: gixd::server::Running,
    tokens: PathBuf,
    known_hosts: PathBuf,
    log: PathBuf,
}

impl Fixture {
    /// A private repository `repo.git` (no export-ok), served over SSH.
    fn new() -> Fixture {
        Self::with(|_| {})
    }

    fn with(adjust: impl FnOnce(&mut gixd::config::Config)) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        let origin = corpus::ensure("merges", Hash::Sha1);
        git(&base, &["clone", "-q", "--bare", origin.to_str().unwrap(), "repo.git"]);
        git(&base.join("repo.git"), &["config", "uploadpack.allowFilter", "true"]);
        let (tokens, log, host_key) =
            (tmp.path().join("tokens.toml"), tmp.path().join("access.log"), tmp.path().join("host_key"));
        let server = serve_with(&base, |c| {
            c.exports = Exports::DaemonExportOk;
            c.token_file = Some(tokens.clone());
            c.ssh_listen = Some("127.0.0.1:0".parse().unwrap());
            c.ssh_host_key = Some(host_key.clone());
            c.access_log = Some(log.clone());
            c.services.upload_archive = true;
            adjust(c);
        });
        // The host key gixd made, as the user's known_hosts holds it.
        let public = std::fs::read_to_string(host_key.with_extension("pub")).unwrap();
        let known_hosts = tmp.path().join("known_hosts");
        let port = server.ssh_addr.unwrap().port();
        std::fs::write(&known_hosts, format!("[127.0.0.1]:{port} {public}")).unwrap();
        Fixture { tmp, server, tokens, known_hosts, log }
    }

    /// A new key pair of the test's own (`ssh-keygen`), added for `user` with `grant` when given.
    fn key(&self, name: &str, user: &str, grant: Option<(&str, bool)>) -> PathBuf {
        let key = self.tmp.path().join(name);
        bench_support::sshd::keygen(&key, "ed25519", &["-C", &format!("{user}@test")]).expect("ssh-keygen runs");
        if let Some((repos, write)) = grant {
            let mut store = gixd::auth::TokenStore::load(&self.tokens).unwrap();
            let line = std::fs::read_to_string(key.with_extension("pub")).unwrap();
            store.add_key(user, repos, write, line.trim()).unwrap();
            store.save().unwrap();
        }
        key
    }

    fn url(&self) -> String {
        format!("ssh://git@127.0.0.1:{}/repo.git", self.server.ssh_addr.unwrap().port())
    }

    /// Stock git with `key` as its SSH identity and only the test's known_hosts.
    fn git(&self, dir: &Path, key: &Path, args: &[&str]) -> Output {
        let ssh = gixd_tests::ssh_command(key, &self.known_hosts);
        gixd_tests::git_command(dir)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSH_COMMAND", ssh)
            .args(args)
            .output()
            .expect("git runs")
    }

    fn git_ok(&self, dir: &Path, key: &Path, args: &[&str]) {
        let out = self.git(dir, key, args);
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn records(&self) -> Vec<serde_json::Value> {
        gixd_tests::access_log_records(&self.log)
    }
}

/// A user's key with a write grant: clones over v0 and v2 have every object, `--depth 1` one
/// commit, `blob:none` no blob, an archive of HEAD comes back, a push lands, a
/// fetch brings it; the access log records `ssh` and the key's user. Red before SSH: nothing
/// listens.
#[test]
fn stock_git_clones_shallow_partial_archives_pushes_and_fetches_over_ssh_with_a_users_key_v0_and_v2() {
    let f = Fixture::new();
    let key = f.key("alice", "alice", Some(("*", true)));
    let repo = f.tmp.path().join("base/repo.git");
    for version in ["0", "2"] {
        let dest = f.tmp.path().join(format!("v{version}.git"));
        let protocol = format!("protocol.version={version}");
        f.git_ok(f.tmp.path(), &key, &["-c", &protocol, "clone", "-q", "--bare", &f.url(), dest.to_str().unwrap()]);
        assert_eq!(all_objects(&dest), all_objects(&repo), "v{version}: a whole clone");
    }
    let shallow = f.tmp.path().join("shallow.git");
    f.git_ok(f.tmp.path(), &key, &["clone", "-q", "--bare", "--depth", "1", &f.url(), shallow.to_str().unwrap()]);
    assert_eq!(git_out(&shallow, &["rev-list", "--count", "HEAD"]), "1", "--depth 1");
    let partial = f.tmp.path().join("partial.git");
    f.git_ok(f.tmp.path(), &key, &["clone", "-q", "--bare", "--filter=blob:none", &f.url(), partial.to_str().unwrap()]);
    let types = git_out(&partial, &["cat-file", "--batch-all-objects", "--batch-check=%(objecttype)"]);
    assert!(!types.lines().any(|t| t == "blob"), "blob:none sent no blob");
    let archive = f.git(f.tmp.path(), &key, &["archive", "--remote", &f.url(), "--format=tar", "HEAD"]);
    assert!(archive.status.success(), "{}", String::from_utf8_lossy(&archive.stderr));
    assert!(archive.stdout.len() > 1024 && archive.stdout.len().is_multiple_of(512), "a tar of HEAD");
    let work = f.tmp.path().join("work");
    f.git_ok(f.tmp.path(), &key, &["clone", "-q", &f.url(), work.to_str().unwrap()]);
    let tip = commit_files(&work, &[("ssh.txt", b"over ssh\n")], "pushed over ssh");
    f.git_ok(&work, &key, &["push", "-q", "origin", "HEAD"]);
    assert_eq!(git_out(&repo, &["rev-parse", "HEAD"]), tip, "the push landed");
    let fetched = f.tmp.path().join("v2.git");
    f.git_ok(&fetched, &key, &["fetch", "-q", &f.url(), "+refs/heads/*:refs/heads/*"]);
    assert_eq!(git_out(&fetched, &["rev-parse", "HEAD"]), tip, "fetched");
    let records = f.records();
    assert!(records.len() >= 7, "{records:?}");
    for record in &records {
        assert_eq!(record["transport"], "ssh", "{record}");
        assert_eq!(record["user"], "alice", "{record}");
        assert_eq!(record["status"], "ok", "{record}");
    }
    assert!(records.iter().any(|r| r["service"] == "git-receive-pack"));
    // GIT_PROTOCOL came through the env request: the v2 clone spoke v2, the v0 one v0.
    assert_eq!(records[0]["version"], 0, "{}", records[0]);
    assert_eq!(records[1]["version"], 2, "{}", records[1]);
}

/// What is refused, and how: a key nobody added (no authentication), a key whose grant does not
/// cover the private repository (not found, exactly as a missing one), a read-only key pushing
/// (may not push), a shell and any other command (refused; nothing runs).
#[test]
fn unknown_keys_ungranted_repositories_read_only_pushes_shells_and_other_commands_are_refused() {
    let f = Fixture::new();
    let stranger = f.key("stranger", "stranger", None);
    let elsewhere = f.key("elsewhere", "bob", Some(("other/*", true)));
    let reader = f.key("reader", "carol", Some(("*", false)));
    let dir = f.tmp.path();
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    let out = f.git(dir, &stranger, &["ls-remote", &f.url()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("Permission denied (publickey)"), "{}", stderr(&out));

    let out = f.git(dir, &elsewhere, &["ls-remote", &f.url()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("repository '/repo.git' not found"), "{}", stderr(&out));
    let missing = f.git(dir, &elsewhere, &["ls-remote", &f.url().replace("repo.git", "missing.git")]);
    assert!(
        stderr(&missing).contains("repository '/missing.git' not found"),
        "the same as missing: {}",
        stderr(&missing)
    );

    let work = dir.join("work");
    f.git_ok(dir, &reader, &["clone", "-q", &f.url(), work.to_str().unwrap()]);
    commit_files(&work, &[("no.txt", b"no\n")], "not allowed");
    let out = f.git(&work, &reader, &["push", "-q", "origin", "HEAD"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("may not push"), "{}", stderr(&out));

    let port = f.server.ssh_addr.unwrap().port().to_string();
    let ssh = |command: Option<&str>| {
        let mut cmd = std::process::Command::new("ssh");
        cmd.args(["-F", "/dev/null", "-i"]).arg(&reader).args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]);
        cmd.args(["-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null", "-T", "-p", &port]);
        cmd.arg("-o").arg(format!("UserKnownHostsFile={}", f.known_hosts.display())).arg("git@127.0.0.1");
        if let Some(command) = command {
            cmd.arg(command);
        }
        cmd.stdin(std::process::Stdio::null()).output().unwrap()
    };
    let shell = ssh(None);
    assert!(!shell.status.success(), "no shell");
    let other = ssh(Some("id; cat /etc/passwd"));
    assert!(!other.status.success());
    assert!(stderr(&other).contains("gixd runs git-upload-pack"), "{}", stderr(&other));
    assert!(!String::from_utf8_lossy(&other.stdout).contains("root:"), "nothing ran");
    for escape in ["git-upload-pack '/../../etc'", "git-upload-pack '/repo.git/../../../etc'"] {
        let out = ssh(Some(escape));
        assert!(!out.status.success(), "{escape}");
        assert!(stderr(&out).contains("not found"), "{escape}: {}", stderr(&out));
    }
}

/// Waits until the server closes `stream` (a read of 0 or an error), reading what it sends.
/// A push whose client asks the server for something while the push waits for its commands —
/// git-lfs's pre-push hook lists the remote's refs over a second connection — is served on a
/// server of one transfer slot: the push takes its slot when its pack comes, not while its
/// client decides. Red before: the push held the only slot, the hook's ls-remote waited for it
/// until the queue wait ran out, and the push failed.
#[test]
fn a_push_whose_pre_push_hook_asks_the_server_again_is_served_on_a_server_of_one_slot() {
    let f = Fixture::with(|c| {
        c.max_transfers = 1;
        c.transfer_queue_wait = std::time::Duration::from_secs(5);
    });
    let key = f.key("writer", "alice", Some(("*", true)));
    let work = f.tmp.path().join("work");
    f.git_ok(f.tmp.path(), &key, &["clone", "-q", &f.url(), work.to_str().unwrap()]);
    let hook = work.join(".git/hooks/pre-push");
    std::fs::write(&hook, "#!/bin/sh\ngit ls-remote origin >/dev/null || exit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    commit_files(&work, &[("hooked.txt", b"asked again\n")], "hooked");
    let started = std::time::Instant::now();
    f.git_ok(&work, &key, &["push", "-q", "origin", "HEAD:refs/heads/hooked"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "served without waiting out the queue");
    let pushed = git_out(&work, &["rev-parse", "HEAD"]);
    let base = f.tmp.path().join("base/repo.git");
    assert_eq!(git_out(&base, &["rev-parse", "refs/heads/hooked"]), pushed);
}

fn closed_within(stream: &mut std::net::TcpStream, limit: std::time::Duration) -> bool {
    use std::io::Read;
    let start = std::time::Instant::now();
    stream.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

/// Garbage where a version line belongs, a client that stops after its version line, one that
/// sends nothing: each closed (the last two once the init timeout passed); a password is never
/// asked for or taken; a clone beside them is served.
#[test]
fn garbage_silent_and_half_connections_are_closed_passwords_refused_and_others_served() {
    use std::io::Write;
    let f = Fixture::with(|c| c.init_timeout = std::time::Duration::from_secs(2));
    let key = f.key("alice", "alice", Some(("*", false)));
    let addr = f.server.ssh_addr.unwrap();
    let mut garbage = std::net::TcpStream::connect(addr).unwrap();
    let _ = garbage.write_all(&[0x47u8; 4096]);
    let mut half = std::net::TcpStream::connect(addr).unwrap();
    half.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").unwrap();
    let mut silent = std::net::TcpStream::connect(addr).unwrap();

    let dest = f.tmp.path().join("beside.git");
    f.git_ok(f.tmp.path(), &key, &["clone", "-q", "--bare", &f.url(), dest.to_str().unwrap()]);
    for (name, stream) in [("garbage", &mut garbage), ("half", &mut half), ("silent", &mut silent)] {
        assert!(closed_within(stream, std::time::Duration::from_secs(10)), "the {name} connection is closed");
    }
    let port = addr.port().to_string();
    let password = std::process::Command::new("ssh")
        .args([
            "-F",
            "/dev/null",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "BatchMode=yes",
        ])
        .args(["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-p", &port, "git@127.0.0.1"])
        .arg("git-upload-pack '/repo.git'")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!password.status.success());
    assert!(String::from_utf8_lossy(&password.stderr).contains("Permission denied (publickey)"));
}

/// Floods, each cut off where the server says: 200 connections that stop after their version line
/// (past 64 unauthenticated at once the rest are closed at once, and all within the init
/// timeout); a client offering ten keys nobody added (disconnected after six attempts); one
/// connection opening channel after channel (each served, as git-lfs's shared connection needs;
/// past sixteen open at once, refused). Memory stays bounded (the
/// server's peak grows by less than 64 MiB), and once the half connections are gone a clone is
/// served. Red with the limits off: the flood's connections all stay open until the init
/// timeout, and a seventh key is still tried.
#[test]
fn connection_auth_and_channel_floods_are_cut_off_with_memory_bounded_and_others_served_after() {
    use std::io::Write;
    let f = Fixture::with(|c| c.init_timeout = std::time::Duration::from_secs(3));
    let key = f.key("alice", "alice", Some(("*", false)));
    let addr = f.server.ssh_addr.unwrap();
    let before = gixd_tests::peak_rss_kb();

    let mut flood: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let _ = s.write_all(b"SSH-2.0-flood\r\n");
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    // How many the server closed by now (a read of 0 or an error; what it sent is read away).
    let closed_by = |flood: &mut Vec<std::net::TcpStream>, until: std::time::Instant| {
        use std::io::Read;
        let mut closed = vec![false; flood.len()];
        let mut buf = [0u8; 4096];
        while std::time::Instant::now() < until {
            for (s, closed) in flood.iter_mut().zip(closed.iter_mut()).filter(|(_, c)| !**c) {
                match s.read(&mut buf) {
                    Ok(0) => *closed = true,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Ok(_) => {}
                    Err(_) => *closed = true,
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        closed.iter().filter(|c| **c).count()
    };
    let now = std::time::Instant::now();
    let quick = closed_by(&mut flood, now + std::time::Duration::from_secs(1));
    assert!(
        (200 - 64..200).contains(&quick),
        "past 64 unauthenticated connections the rest are closed at once: {quick} were"
    );
    let all = closed_by(&mut flood, now + std::time::Duration::from_secs(10));
    assert_eq!(all, 200, "the others are closed once the init timeout passed");
    drop(flood);

    let port = addr.port().to_string();
    let base_ssh = |cmd: &mut std::process::Command| {
        cmd.args(["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-T", "-p", &port]);
        cmd.args(["-o", "GlobalKnownHostsFile=/dev/null"]);
        cmd.arg("-o").arg(format!("UserKnownHostsFile={}", f.known_hosts.display()));
    };
    let strangers: Vec<PathBuf> = (0..10).map(|i| f.key(&format!("stranger{i}"), "stranger", None)).collect();
    let mut cmd = std::process::Command::new("ssh");
    base_ssh(&mut cmd);
    cmd.args(["-o", "IdentitiesOnly=yes", "-v"]);
    for stranger in &strangers {
        cmd.arg("-i").arg(stranger);
    }
    let out = cmd
        .arg("git@127.0.0.1")
        .arg("git-upload-pack '/repo.git'")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let offered = said.matches("Offering public key").count();
    assert!(offered <= 6, "at most six keys are tried on one connection, {offered} were: {said}");

    // One connection, channel after channel (OpenSSH's connection sharing).
    let control = f.tmp.path().join("control");
    let mut master = std::process::Command::new("ssh");
    base_ssh(&mut master);
    master.arg("-i").arg(&key).args(["-o", "IdentitiesOnly=yes", "-M", "-N", "-S"]).arg(&control);
    let mut master = master.arg("git@127.0.0.1").stdin(std::process::Stdio::null()).spawn().unwrap();
    let start = std::time::Instant::now();
    while !control.exists() {
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "the shared connection is up");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let channel = || {
        let mut cmd = std::process::Command::new("ssh");
        base_ssh(&mut cmd);
        cmd.arg("-S").arg(&control).arg("git@127.0.0.1").arg("git-upload-pack '/repo.git'");
        cmd.stdin(std::process::Stdio::null()).output().unwrap()
    };
    // One after another, as git-lfs opens them over its shared connection: each is served.
    let outcomes: Vec<bool> = (0..20).map(|_| channel().stdout.starts_with(b"0")).collect();
    assert!(outcomes.iter().all(|served| *served), "channels one after another are served: {outcomes:?}");
    // At once: sessions that hold their channel without a transfer slot (git-lfs's, waiting for
    // their next request) fill the sixteen places; the seventeenth channel is refused.
    let session = || {
        let mut cmd = std::process::Command::new("ssh");
        base_ssh(&mut cmd);
        cmd.arg("-S").arg(&control).arg("git@127.0.0.1").arg("git-lfs-transfer repo.git download");
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        cmd.spawn().unwrap()
    };
    let mut open = Vec::new();
    for _ in 0..gixd::transport::ssh::MAX_CHANNELS {
        let mut child = session();
        let mut first = [0u8; 4];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
        open.push(child);
    }
    let mut over = session();
    let mut first = Vec::new();
    let _ = std::io::Read::read_to_end(over.stdout.as_mut().unwrap(), &mut first);
    let _ = over.wait();
    for mut child in open {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = master.kill();
    let _ = master.wait();
    assert!(first.is_empty(), "the seventeenth channel at once is refused: {:?}", String::from_utf8_lossy(&first));

    let grown = gixd_tests::peak_rss_kb().saturating_sub(before);
    assert!(grown < 64 << 10, "the floods grew the server's peak memory by {grown} KiB");
    let dest = f.tmp.path().join("after.git");
    f.git_ok(f.tmp.path(), &key, &["clone", "-q", "--bare", &f.url(), dest.to_str().unwrap()]);
}

/// The ciphers offered: at the defaults, on a CPU with AES instructions, AES-GCM and AES-CTR and
/// not chacha20-poly1305, so that OpenSSH (which prefers chacha20-poly1305, then AES-CTR) takes
/// AES-CTR and a client with AES-CTR only is served; named, AES-GCM alone is what OpenSSH takes
/// and the AES-CTR-only client is refused. Red with russh's own list: OpenSSH took
/// chacha20-poly1305.
#[test]
fn openssh_is_served_aes_gcm_at_the_defaults_whatever_it_prefers_and_only_the_named_ciphers_are_offered() {
    let aes = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" aes") && c.contains(" pclmulqdq"));
    let cipher_of = |f: &Fixture, key: &Path, extra: &str| {
        let ssh = format!("{} -v {extra}", gixd_tests::ssh_command(key, &f.known_hosts));
        let out = gixd_tests::git_command(f.tmp.path())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSH_COMMAND", ssh)
            .args(["ls-remote", &f.url()])
            .output()
            .expect("git runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let cipher = stderr
            .lines()
            .find_map(|l| l.split("kex: server->client cipher: ").nth(1))
            .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned());
        (out.status.success(), cipher, stderr)
    };
    let f = Fixture::new();
    let key = f.key("id", "alice", Some(("*", false)));
    let (ok, cipher, stderr) = cipher_of(&f, &key, "");
    assert!(ok, "{stderr}");
    let expected = if aes { "aes128-gcm@openssh.com" } else { "chacha20-poly1305@openssh.com" };
    assert_eq!(cipher.as_deref(), Some(expected), "gixd's pick among what OpenSSH lists");
    for only in ["aes128-ctr", "aes256-ctr", "chacha20-poly1305@openssh.com"] {
        let (ok, cipher, stderr) = cipher_of(&f, &key, &format!("-o Ciphers={only}"));
        assert!(ok, "a client allowing {only} alone is served at the defaults: {stderr}");
        assert_eq!(cipher.as_deref(), Some(only));
    }

    let f = Fixture::with(|c| c.ssh_ciphers = vec!["aes256-gcm@openssh.com".into(), "aes128-gcm@openssh.com".into()]);
    let key = f.key("id", "alice", Some(("*", false)));
    let (ok, cipher, stderr) = cipher_of(&f, &key, "");
    assert!(ok, "{stderr}");
    assert_eq!(cipher.as_deref(), Some("aes256-gcm@openssh.com"), "named: the operator's order ranks");
    let (ok, _, stderr) = cipher_of(&f, &key, "-o Ciphers=aes128-ctr");
    assert!(!ok && stderr.contains("no matching cipher"), "named, only AES-GCM is offered: {stderr}");
    let refused = gixd::transport::ssh::ciphers(&["none".into()]).unwrap_err().to_string();
    assert!(refused.contains("unknown cipher 'none'"), "{refused}");
}

/// The cipher lists of the server's KEXINIT, as a client that says `version` and sends `kexinit`
/// (a KEXINIT listing those ciphers) right after its version line is offered them.
fn offered_to(addr: std::net::SocketAddr, version: &str, kexinit: Option<&str>) -> Vec<String> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut hello = format!("{version}\r\n").into_bytes();
    if let Some(ciphers) = kexinit {
        let mut payload = vec![20u8];
        payload.extend_from_slice(&[7u8; 16]);
        let lists = ["curve25519-sha256", "ssh-ed25519", ciphers, ciphers, "hmac-sha2-256", "hmac-sha2-256"];
        for list in lists.iter().chain(&["none", "none", "", ""]) {
            payload.extend_from_slice(&(list.len() as u32).to_be_bytes());
            payload.extend_from_slice(list.as_bytes());
        }
        payload.extend_from_slice(&[0, 0, 0, 0, 0]);
        let padding = 8 - (payload.len() + 5) % 8 + 8;
        hello.extend_from_slice(&((payload.len() + padding + 1) as u32).to_be_bytes());
        hello.push(padding as u8);
        hello.extend_from_slice(&payload);
        hello.extend_from_slice(&vec![0u8; padding]);
    }
    tcp.write_all(&hello).unwrap();
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = read.iter().position(|&b| b == b'\n') {
            let packet = &read[end + 1..];
            if packet.len() >= 4 && packet.len() >= 4 + u32::from_be_bytes(packet[..4].try_into().unwrap()) as usize {
                let mut rest = &packet[4 + 1 + 1 + 16..];
                let mut lists = Vec::new();
                for _ in 0..4 {
                    let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                    lists.push(String::from_utf8(rest[4..4 + len].to_vec()).unwrap());
                    rest = &rest[4 + len..];
                }
                assert_eq!(lists[2], lists[3], "one list both ways");
                return lists[3].split(',').map(str::to_owned).collect();
            }
        }
        let n = tcp.read(&mut buf).expect("the server's KEXINIT comes");
        assert!(n > 0, "closed before its KEXINIT");
        read.extend_from_slice(&buf[..n]);
    }
}

/// Offered only what it lists first among gixd's fastest, an OpenSSH client cannot pick a slower
/// cipher it prefers (chacha20-poly1305, AES-CTR): AES-GCM where the CPU has AES instructions; a
/// client allowing AES-CTR alone is offered that. A client of any other kind (which may wait for
/// the server's KEXINIT before sending its own) is offered the whole list at once and picks.
/// Red before the offer followed the client: every client was offered the whole list.
#[test]
fn an_openssh_client_is_offered_the_fastest_cipher_it_lists_and_other_clients_the_whole_list() {
    let aes = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" aes") && c.contains(" pclmulqdq"));
    let f = Fixture::new();
    let addr = f.server.ssh_addr.unwrap();
    let openssh =
        "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr,aes128-gcm@openssh.com,aes256-gcm@openssh.com";
    let fastest = if aes { "aes128-gcm@openssh.com" } else { "chacha20-poly1305@openssh.com" };
    assert_eq!(offered_to(addr, "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3", Some(openssh)), [fastest]);
    assert_eq!(offered_to(addr, "SSH-2.0-OpenSSH_9.2p1", Some("aes256-ctr,3des-cbc")), ["aes256-ctr"]);
    let whole = offered_to(addr, "SSH-2.0-JSCH-0.1.55", None);
    assert!(whole.len() >= 4 && whole.iter().any(|c| c == "aes128-ctr"), "{whole:?}");
    assert!(whole.iter().any(|c| c == "aes128-gcm@openssh.com"), "{whole:?}");
    let fell_back = offered_to(addr, "SSH-2.0-OpenSSH_9.2p1", Some("3des-cbc"));
    assert_eq!(fell_back, whole, "nothing in common: the whole list, and the client says so");
}
