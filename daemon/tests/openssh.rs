//! `gixd shell` under Debian's OpenSSH `sshd` (openssh-server, started by the test on a loopback
//! port with a configuration of its own): `gixd keys` is its AuthorizedKeysCommand and forces
//! `gixd shell` for each key added with `gixd key add`; stock git with OpenSSH's client clones,
//! pushes, fetches and archives through it, and what a key may not do is refused.

mod common;
use common::git_ok;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const GIXD: &str = env!("CARGO_BIN_EXE_gixd");

/// Every object id of the repository at `dir`, sorted.
fn all_objects(dir: &Path) -> String {
    git_ok(dir, &["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"])
}

/// A new key pair (`ssh-keygen`) at `dir/name`; added with `gixd key add` for `user` with
/// `grant` (repositories, write) when given.
fn key(dir: &Path, config: &Path, name: &str, user: &str, grant: Option<(&str, bool)>) -> PathBuf {
    let key = dir.join(name);
    bench_support::sshd::keygen(&key, "ed25519", &["-C", &format!("{user}@test")]).expect("ssh-keygen runs");
    if let Some((repos, write)) = grant {
        let mut add = Command::new(GIXD);
        add.args(["key", "add", "--user", user, "--repo", repos, "--config"]).arg(config);
        add.arg("--key-file").arg(key.with_extension("pub"));
        if write {
            add.arg("--write");
        }
        let out = add.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    key
}

/// The forced-command mode under a real `sshd` (Debian's openssh-server, `AuthorizedKeysCommand
/// gixd keys`): a key with a write grant clones over v0 and v2, shallow and partial, archives,
/// pushes and fetches through `gixd shell`; a read-only key may not push; a key nobody added is
/// refused by sshd itself; another command runs nothing; a login with no command is told there
/// is no shell; the access log records `ssh`, the key's user and the protocol version.
/// Red before `gixd shell` and `gixd keys` existed: sshd found no key.
#[test]
fn under_openssh_gixd_keys_authorizes_and_gixd_shell_serves_clone_push_fetch_archive_and_refuses_the_rest() {
    if !bench_support::sshd::available() {
        // `.ci/run` installs openssh-server and runs as root: there, this always runs.
        assert!(std::env::var_os("CI").is_none(), "CI runs this test as root with /usr/sbin/sshd");
        eprintln!("skipped: needs root and /usr/sbin/sshd (openssh-server)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A private repository (no export marker) of a few commits.
    let (base, work0) = (dir.join("base"), dir.join("origin"));
    std::fs::create_dir_all(&work0).unwrap();
    git_ok(&work0, &["init", "-q", "-b", "main"]);
    for i in 0..5 {
        std::fs::write(work0.join(format!("f{i}.txt")), format!("file {i}\n").repeat(100 + i)).unwrap();
        git_ok(&work0, &["add", "."]);
        git_ok(&work0, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    std::fs::create_dir_all(&base).unwrap();
    git_ok(&base, &["clone", "-q", "--bare", work0.to_str().unwrap(), "repo.git"]);
    git_ok(&base.join("repo.git"), &["config", "uploadpack.allowFilter", "true"]);
    let config = dir.join("gixd.toml");
    let log = dir.join("access.log");
    std::fs::write(
        &config,
        format!(
            "base_path = {:?}\ntoken_file = {:?}\naccess_log = {:?}\nenable = [\"upload-archive\"]\n",
            base,
            dir.join("tokens.toml"),
            log
        ),
    )
    .unwrap();
    // sshd runs an AuthorizedKeysCommand only from a path root owns and nobody else may write to.
    let gixd = bench_support::sshd::SafeCopy::new(Path::new(GIXD), "gixd-tests").unwrap();
    let extra = format!(
        "AuthorizedKeysFile none\nAuthorizedKeysCommand {} keys --config {} %t %k\nAuthorizedKeysCommandUser root",
        gixd.path.display(),
        config.display()
    );
    let openssh = bench_support::sshd::Sshd::start(&dir.join("sshd"), &extra).unwrap();
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, &openssh.known_hosts).unwrap();
    let writer = key(dir, &config, "writer", "alice", Some(("*", true)));
    let reader = key(dir, &config, "reader", "carol", Some(("*", false)));
    let stranger = key(dir, &config, "stranger", "mallory", None);
    let url = format!("ssh://root@127.0.0.1:{}/repo.git", openssh.port);
    let repo = base.join("repo.git");
    // Stock git over this sshd with `key`, no user or system config but `global`.
    let git_with = |cwd: &Path, key: &Path, global: &Path| {
        let ssh = format!(
            "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null",
            key.display(),
            known_hosts.display()
        );
        let mut cmd = Command::new("git");
        cmd.current_dir(cwd)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", global)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSH_COMMAND", ssh)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"]);
        cmd
    };
    let git = |cwd: &Path, key: &Path, args: &[&str]| {
        git_with(cwd, key, Path::new("/dev/null")).args(args).output().expect("git runs")
    };
    let ok = |out: Output, what: &str| {
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    for version in ["0", "2"] {
        let dest = dir.join(format!("openssh-v{version}.git"));
        let protocol = format!("protocol.version={version}");
        ok(git(dir, &writer, &["-c", &protocol, "clone", "-q", "--bare", &url, dest.to_str().unwrap()]), "clone");
        assert_eq!(all_objects(&dest), all_objects(&repo), "v{version}: a whole clone");
    }
    let shallow = dir.join("openssh-shallow.git");
    ok(git(dir, &writer, &["clone", "-q", "--bare", "--depth", "1", &url, shallow.to_str().unwrap()]), "shallow");
    assert_eq!(git_ok(&shallow, &["rev-list", "--count", "HEAD"]), "1", "--depth 1");
    let partial = dir.join("openssh-partial.git");
    ok(git(dir, &writer, &["clone", "-q", "--bare", "--filter=blob:none", &url, partial.to_str().unwrap()]), "partial");
    let types = git_ok(&partial, &["cat-file", "--batch-all-objects", "--batch-check=%(objecttype)"]);
    assert!(!types.lines().any(|t| t == "blob"), "blob:none sent no blob");
    let archive = ok(git(dir, &writer, &["archive", "--remote", &url, "--format=tar", "HEAD"]), "archive");
    assert!(archive.stdout.len() > 1024 && archive.stdout.len().is_multiple_of(512), "a tar of HEAD");
    let work = dir.join("openssh-work");
    ok(git(dir, &writer, &["clone", "-q", &url, work.to_str().unwrap()]), "clone a work tree");
    std::fs::write(work.join("openssh.txt"), "through sshd\n").unwrap();
    git_ok(&work, &["add", "."]);
    git_ok(&work, &["commit", "-q", "-m", "pushed through sshd"]);
    let tip = git_ok(&work, &["rev-parse", "HEAD"]);
    ok(git(&work, &writer, &["push", "-q", "origin", "HEAD"]), "push");
    assert_eq!(git_ok(&repo, &["rev-parse", "HEAD"]), tip, "the push landed");
    let fetched = dir.join("openssh-v2.git");
    ok(git(&fetched, &reader, &["fetch", "-q", &url, "+refs/heads/*:refs/heads/*"]), "fetch");
    assert_eq!(git_ok(&fetched, &["rev-parse", "HEAD"]), tip, "fetched");
    // git's scp-like form sends the path as written, relative: `git-upload-pack 'repo.git'`.
    let scp = Command::new("git")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env(
            "GIT_SSH_COMMAND",
            format!(
                "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={} -p {}",
                reader.display(),
                known_hosts.display(),
                openssh.port
            ),
        )
        .args(["ls-remote", "root@127.0.0.1:repo.git", "HEAD"])
        .output()
        .unwrap();
    let scp = ok(scp, "ls-remote, scp-like");
    assert!(String::from_utf8_lossy(&scp.stdout).starts_with(&tip), "{}", String::from_utf8_lossy(&scp.stdout));

    std::fs::write(work.join("no.txt"), "no\n").unwrap();
    git_ok(&work, &["add", "."]);
    git_ok(&work, &["commit", "-q", "-m", "not allowed"]);
    let refused = git(&work, &reader, &["push", "-q", "origin", "HEAD"]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("may not push"), "{}", stderr(&refused));
    let stranger_out = git(dir, &stranger, &["ls-remote", &url]);
    assert!(!stranger_out.status.success());
    assert!(stderr(&stranger_out).contains("Permission denied (publickey)"), "{}", stderr(&stranger_out));

    let port = openssh.port.to_string();
    let ssh = |command: Option<&str>| {
        let mut cmd = std::process::Command::new("ssh");
        cmd.args(["-F", "/dev/null", "-i"]).arg(&reader).args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]);
        cmd.args(["-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null", "-T", "-p", &port]);
        cmd.arg("-o").arg(format!("UserKnownHostsFile={}", known_hosts.display())).arg("root@127.0.0.1");
        cmd.args(command);
        cmd.stdin(std::process::Stdio::null()).output().unwrap()
    };
    let login = ssh(None);
    assert!(!login.status.success(), "no shell");
    assert!(stderr(&login).contains("Hi carol!") && stderr(&login).contains("no shell"), "{}", stderr(&login));
    let other = ssh(Some("id; cat /etc/passwd"));
    assert!(!other.status.success());
    assert!(stderr(&other).contains("gixd runs git-upload-pack"), "{}", stderr(&other));
    assert!(!String::from_utf8_lossy(&other.stdout).contains("root:"), "nothing ran");
    let escape = ssh(Some("git-upload-pack '/../../etc'"));
    assert!(!escape.status.success() && stderr(&escape).contains("not found"), "{}", stderr(&escape));

    let records: Vec<serde_json::Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let served: Vec<_> = records.iter().filter(|r| r["status"] == "ok").collect();
    assert_eq!(served.len(), 9, "{records:?}");
    for record in &served {
        assert_eq!(record["transport"], "ssh", "{record}");
        assert!(record["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{record}");
    }
    assert_eq!((served[0]["version"].as_i64(), served[1]["version"].as_i64()), (Some(0), Some(2)), "GIT_PROTOCOL");
    assert_eq!(served[6]["service"], "git-receive-pack");
    assert_eq!(served[6]["user"], "alice");
    assert_eq!(served[7]["user"], "carol");

    // Git LFS through sshd: git-lfs shares one OpenSSH connection and speaks git-lfs-transfer to
    // a `gixd shell` per session; the object lands in the repository's store and comes back.
    let home = dir.join("lfs-home");
    std::fs::create_dir_all(&home).unwrap();
    let lfs = |cwd: &Path, args: &[&str]| {
        let global = home.join(".gitconfig");
        git_with(cwd, &writer, &global).env("HOME", &home).args(args).output().expect("git runs")
    };
    ok(lfs(dir, &["lfs", "install", "--skip-repo"]), "git lfs install (.ci/run installs git-lfs)");
    ok(lfs(&work, &["lfs", "track", "*.bin"]), "track");
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(work.join("big.bin"), &big).unwrap();
    ok(lfs(&work, &["add", ".gitattributes", "big.bin"]), "add");
    ok(lfs(&work, &["commit", "-q", "-m", "lfs through sshd"]), "commit");
    ok(lfs(&work, &["push", "-q", "origin", "HEAD"]), "push with LFS through sshd");
    let stored = std::fs::read_dir(repo.join("lfs/objects")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(stored, 1, "the LFS object is in the repository's store");
    let again = dir.join("openssh-lfs-clone");
    ok(lfs(dir, &["clone", "-q", &url, again.to_str().unwrap()]), "clone with LFS through sshd");
    assert!(std::fs::read(again.join("big.bin")).unwrap() == big, "the LFS object came back");
    let records: Vec<serde_json::Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.iter().any(|r| r["service"] == "git-lfs-transfer" && r["status"] == "ok"), "{records:?}");
}
