//! `cargo xtask bench ssh`: what SSH costs. On freshly repacked real repositories (with a bitmap,
//! as `git gc` leaves a bare repository, and without), side by side in one run, arms alternated
//! round by round: a full clone, and a whole-history push (every branch and tag into a fresh empty
//! repository), from
//! - gixd over plain HTTP (a write token for the push),
//! - the same gixd over its in-process SSH server (a user's key),
//! - git behind Debian's OpenSSH `sshd` (git-upload-pack / git-receive-pack and what they run),
//! - gixd behind the same `sshd`, as the forced command `gixd shell` (`AuthorizedKeysCommand gixd
//!   keys`).
//!
//! Server CPU from each server's cpuacct cgroup (sshd and every process it forks in one). The
//! client is stock git with OpenSSH's client, its default cipher. Run by hand, as root; not in
//! CI. `report` renders it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::table::*;
use crate::bench::bursts::{Server, start, warm};
use bench_support::run::git;

pub const SSH_RESULTS: &str = "bench/results/ssh.json";

pub const ARMS: [&str; 4] = ["gixd http", "gixd ssh", "git (sshd)", "gixd shell (sshd)"];

/// What a push sends: every branch and tag.
const REFSPECS: [&str; 2] = ["refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*"];

/// `cargo xtask bench ssh`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bare repositories to serve (copied and repacked under target/bench-ssh/).
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, gixd } = args;
    if !bench_support::run::is_root() {
        bail!("each server goes into a cgroup of its own, and sshd runs as root: run as root");
    }
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let scratch = crate::tree::Scratch::new("bench-ssh")?;
    let base = root.join("target/bench-ssh");
    std::fs::create_dir_all(&base)?;
    let served = crate::bench::bursts::repacked_copies(&repos, &base)?;

    // sshd runs an AuthorizedKeysCommand only from a root-owned path nobody else may write to.
    let safe = PathBuf::from("/run/gixd-bench");
    std::fs::create_dir_all(&safe)?;
    let safe_gixd = safe.join("gixd");
    std::fs::copy(&gixd, &safe_gixd)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&safe, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(&safe_gixd, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::create_dir_all("/run/sshd")?;

    // Two client keys: one for git behind sshd (a plain authorized_keys line), one that gixd knows
    // (its in-process server, and `gixd keys` forcing `gixd shell` behind sshd).
    let keygen = |name: &str| crate::bench::ssh_key(&scratch.0, name);
    let (git_key, gixd_key, host_key) = (keygen("git_key")?, keygen("gixd_key")?, keygen("ssh_host_ed25519_key")?);
    let tokens = scratch.0.join("tokens.toml");
    let token = bench_support::run::output(
        Command::new(&gixd).args(["token", "add", "--user", "bench", "--write", "--token-file"]).arg(&tokens),
    )?;
    bench_support::run::output(
        Command::new(&gixd)
            .args(["key", "add", "--user", "bench", "--write", "--key-file"])
            .arg(gixd_key.with_extension("pub"))
            .arg("--token-file")
            .arg(&tokens),
    )?;
    let config = scratch.0.join("gixd.toml");
    std::fs::write(
        &config,
        format!(
            "base_path = {:?}\ntoken_file = {:?}\nexport_all = true\nauto_maintenance = false\n",
            base.display().to_string(),
            tokens.display().to_string()
        ),
    )?;

    let (http, ssh) = (bench_support::run::free_port()?, bench_support::run::free_port()?);
    let mut cmd = Command::new(&gixd);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{http}"), "--ssh-listen", &format!("127.0.0.1:{ssh}")])
        .arg("--ssh-host-key")
        .arg(scratch.0.join("gixd_host_key"))
        .env("GIXD_LOG", "warn");
    let mut gixd_server = start("gixd-ssh", cmd, &[http, ssh])?;
    gixd_server.version = bench_support::run::output(Command::new(&gixd).arg("--version"))?;

    let sshd_port = bench_support::run::free_port()?;
    let authorized = scratch.0.join("authorized_keys");
    std::fs::write(&authorized, std::fs::read_to_string(git_key.with_extension("pub"))?)?;
    let sshd_config = scratch.0.join("sshd_config");
    std::fs::write(
        &sshd_config,
        format!(
            "Port {sshd_port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
             AuthorizedKeysCommand {} keys --config {} %t %k\nAuthorizedKeysCommandUser root\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nAcceptEnv GIT_PROTOCOL\n\
             PermitRootLogin prohibit-password\nStrictModes no\n",
            host_key.display(),
            scratch.0.join("sshd.pid").display(),
            authorized.display(),
            safe_gixd.display(),
            config.display()
        ),
    )?;
    let mut cmd = Command::new("/usr/sbin/sshd");
    cmd.args(["-D", "-f"]).arg(&sshd_config);
    let mut sshd = start("sshd-git", cmd, &[sshd_port])?;
    let version = Command::new("ssh").arg("-V").output()?;
    sshd.version = String::from_utf8_lossy(&version.stderr).trim().to_owned();

    // The cipher OpenSSH's client settles on with each server.
    let cipher = |port: u16, key: &Path, user: &str| -> String {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} -v -p {port} {user}@127.0.0.1 git-upload-pack /nonexistent </dev/null",
                crate::bench::ssh_command(key)
            ))
            .output();
        out.ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .find_map(|l| l.split_once("kex: server->client cipher: ").map(|(_, c)| c.to_owned()))
            })
            .unwrap_or_else(|| "?".into())
    };
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "gixd": format!("{} (release build), `serve` with HTTP and SSH listeners in one process, no pack cache, maintenance after pushes off", gixd_server.version),
            "openssh": sshd.version,
            "cipher": { "gixd ssh": cipher(ssh, &gixd_key, "git"), "sshd": cipher(sshd_port, &git_key, "root") },
            "repos": served.iter().map(|(n, s, _, o)| serde_json::json!({ "repo": n, "state": s, "objects": o })).collect::<Vec<_>>(),
            "how": "one stock git operation at a time (protocol v2): a full `clone --bare`, and a push of every branch and tag into a fresh empty repository from a mirror of the source; server CPU from each server's cpuacct cgroup (sshd with every process it forks)",
        }),
    )?;

    let mut runs = Vec::new();
    for (name, state, path, _) in &served {
        let dir_name = path.file_name().context("name")?.to_string_lossy().into_owned();
        // The pushing client: a mirror of the served copy.
        let client = scratch.0.join(format!("client-{dir_name}"));
        if !client.exists() {
            git(
                &scratch.0,
                &[
                    "clone",
                    "-q",
                    "--mirror",
                    "--no-local",
                    path.to_str().context("utf-8")?,
                    client.to_str().context("utf-8")?,
                ],
            )?;
        }
        for round in 0..rounds {
            for arm in bench_support::run::round_order(ARMS.len(), round).into_iter().map(|i| ARMS[i]) {
                let (server, key): (&Server, Option<&Path>) = match arm {
                    "gixd http" => (&gixd_server, None),
                    "gixd ssh" | "gixd shell (sshd)" => {
                        (if arm == "gixd ssh" { &gixd_server } else { &sshd }, Some(&gixd_key))
                    }
                    _ => (&sshd, Some(&git_key)),
                };
                let url = |repo: &str| match arm {
                    "gixd http" => format!("http://bench:{token}@127.0.0.1:{http}/{repo}"),
                    "gixd ssh" => format!("ssh://git@127.0.0.1:{ssh}/{repo}"),
                    "gixd shell (sshd)" => format!("ssh://root@127.0.0.1:{sshd_port}/{repo}"),
                    _ => format!("ssh://root@127.0.0.1:{sshd_port}{}", base.join(repo).display()),
                };
                let with_key = |cmd: &mut Command| {
                    if let Some(key) = key {
                        cmd.env("GIT_SSH_COMMAND", crate::bench::ssh_command(key));
                    }
                };
                // One git operation: the server's CPU and the wall time it took.
                let measured = |what: &str, cmd: &mut Command| -> Result<(u64, std::time::Duration)> {
                    with_key(cmd);
                    let cpu0 = server.group.cpu_us()?;
                    let started = std::time::Instant::now();
                    let out = cmd.output()?;
                    let wall = started.elapsed();
                    if !out.status.success() {
                        bail!("{arm}: the {what} of {dir_name} failed: {}", String::from_utf8_lossy(&out.stderr));
                    }
                    // The server's last processes (sshd's session) end and are counted.
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    Ok((server.group.cpu_us()? - cpu0, wall))
                };
                warm(path)?;
                let dest = scratch.0.join("clone.git");
                let _ = std::fs::remove_dir_all(&dest);
                let mut clone = Command::new("git");
                clone.args(["-c", "protocol.version=2", "clone", "-q", "--bare", &url(&dir_name)]).arg(&dest);
                let (clone_cpu, clone_wall) = measured("clone", &mut clone)?;
                // The push, into a fresh empty repository below the base path.
                let target = format!("push-{}.git", std::process::id());
                let target_dir = base.join(&target);
                let _ = std::fs::remove_dir_all(&target_dir);
                git(&base, &["init", "-q", "--bare", &target])?;
                let mut push = Command::new("git");
                push.current_dir(&client)
                    .args(["-c", "protocol.version=2", "push", "-q", &url(&target)])
                    .args(REFSPECS);
                let (push_cpu, push_wall) = measured("push", &mut push)?;
                let listing = |dir: &Path| {
                    git(dir, &["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags"])
                };
                if listing(&target_dir)? != listing(&client)? {
                    bail!("{arm} {dir_name}: the pushed refs differ from the client's");
                }
                std::fs::remove_dir_all(&target_dir)?;
                runs.push(serde_json::json!({
                    "repo": name, "state": state, "arm": arm, "round": round,
                    "clone_cpu_us": clone_cpu, "clone_wall_ms": clone_wall.as_millis() as u64,
                    "push_cpu_us": push_cpu, "push_wall_ms": push_wall.as_millis() as u64,
                }));
                eprintln!(
                    "{name} {state} {arm} round {round}: clone cpu {} ms wall {:?}; push cpu {} ms wall {:?}",
                    clone_cpu / 1000,
                    clone_wall,
                    push_cpu / 1000,
                    push_wall
                );
            }
        }
    }
    drop((gixd_server, sshd));
    let _ = std::fs::remove_dir_all(&safe);
    crate::bench::finish(root, SSH_RESULTS, conditions, runs)
}

// The report.

/// What SSH costs: per repository, the server CPU of a clone and of a whole-history push from each
/// arm; gixd over SSH against gixd over HTTP (issue 47's goal on the clone: ≤ 1.15) and against
/// git behind sshd (goal: ≤ 0.5), the row furthest from its goals first.
pub fn render(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        SSH_RESULTS,
        "`cargo xtask bench ssh --repo PATH…` (by hand, as root: it needs the repositories, sshd and cgroups)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench ssh")?;
    out.push_str(&format!(
        " gixd: {}. {}; ciphers: gixd ssh {}, sshd {}. {} Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["openssh"].as_str().unwrap_or("?"),
        c["cipher"]["gixd ssh"].as_str().unwrap_or("?"),
        c["cipher"]["sshd"].as_str().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | bitmap | operation | server CPU ms: gixd http | gixd ssh | git (sshd) | gixd shell (sshd) | gixd ssh ÷ gixd http | gixd ssh ÷ git (sshd) | gixd shell ÷ git (sshd) |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let state = repo["state"].as_str().unwrap_or("no-bitmap");
        for (operation, field) in [("clone", "clone_cpu_us"), ("push", "push_cpu_us")] {
            let med = |arm: &str| {
                median(
                    runs.iter()
                        .filter(|r| r["repo"] == name && r["state"] == state && r["arm"] == arm)
                        .filter_map(|r| r[field].as_f64())
                        .collect(),
                ) / 1000.0
            };
            let [http, ssh, git, shell] = ARMS.map(med);
            let badness = (ssh / http / 1.15).max(ssh / git / 0.5);
            rows.push((
                badness,
                format!(
                    "| {name} | {} | {} | {operation} | {http:.0} | {ssh:.0} | {git:.0} | {shell:.0} | {} | {} | {} |\n",
                    repo["objects"],
                    if state == "bitmap" { "yes" } else { "no" },
                    ratio(http, ssh),
                    ratio(git, ssh),
                    ratio(git, shell),
                ),
            ));
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}
