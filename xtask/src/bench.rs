//! `cargo xtask bench patches`: build bench/patch-costs on stock crates and on vendor/, run the
//! two arms interleaved (order swapped every round) on one fixture, and store every run with its
//! conditions in bench/results/patch-costs.json. Nothing here interprets the numbers; `report` does.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::queue::Queue;
use bench_support::run::{free_port, output, round_order, wait_for_port};

pub const RESULTS: &str = "bench/results/patch-costs.json";

/// Build one arm of bench/patch-costs; returns the binary and, for each crate the queue patches,
/// the version the arm built (`gix-pack 0.78.0`, `+ patches/` for vendor/).
fn build_arm(root: &Path, arm: &str, queue: &Queue) -> Result<(PathBuf, Vec<String>)> {
    let dir = root.join("target/bench").join(arm);
    let src = dir.join("crate");
    crate::tree::replace_dir(&root.join("bench/patch-costs"), &src)?;
    // Start from the workspace's pinned versions so both arms build the same third-party code.
    std::fs::copy(root.join("Cargo.lock"), src.join("Cargo.lock"))?;
    let mut cmd = Command::new("cargo");
    cmd.args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(src.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(dir.join("target"));
    if arm == "patched" {
        cmd.args(["--features", "patched"]);
        for (krate, _) in queue.published_crates() {
            let path = root.join("vendor").join(&krate);
            cmd.arg("--config").arg(format!("patch.crates-io.{krate}.path={:?}", path.display().to_string()));
        }
    }
    let status = cmd.status().context("cargo build of bench/patch-costs")?;
    if !status.success() {
        bail!("building the {arm} arm failed");
    }
    // What the arm was really built on, from its lock file: the stock arm must be the release the
    // queue is made against, or the comparison is of two releases.
    let lock: toml_edit::DocumentMut = std::fs::read_to_string(src.join("Cargo.lock"))?.parse()?;
    let packages = lock["package"].as_array_of_tables().context("arm lock packages")?;
    let mut built = Vec::new();
    for (krate, version) in queue.published_crates() {
        let found: Vec<_> = packages.iter().filter(|p| p["name"].as_str() == Some(&krate)).collect();
        let [p] = found.as_slice() else {
            bail!("the {arm} arm holds {} versions of {krate}", found.len());
        };
        let (v, from_vendor) = (p["version"].as_str().unwrap_or("?"), p.get("source").is_none());
        if v != version || from_vendor != (arm == "patched") {
            bail!(
                "the {arm} arm built {krate} {v}{}, the queue is on {krate} {version}: {} (`cargo xtask patches check` names a stale requirement)",
                if from_vendor { " from vendor/" } else { "" },
                crate::sync::BENCH_MANIFEST
            );
        }
        built.push(if from_vendor { format!("{krate} {v} + patches/") } else { format!("{krate} {v}") });
    }
    Ok((dir.join("target/release/patch-costs"), built))
}

/// A self-signed certificate for 127.0.0.1 and its key (`cert.pem`, `key.pem` in `dir`), made by
/// `openssl`, for the HTTPS arms.
pub(crate) fn self_signed_cert(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    output(
        Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    )?;
    Ok((cert, key))
}

/// A new Ed25519 key pair `dir/name` (and `.pub`), no passphrase.
pub(crate) fn ssh_key(dir: &Path, name: &str) -> Result<PathBuf> {
    let key = dir.join(name);
    bench_support::sshd::keygen(&key, "ed25519", &[])?;
    Ok(key)
}

/// `GIT_SSH_COMMAND` for a bench client: only `key`, any loopback host key, no prompt.
pub(crate) fn ssh_command(key: &Path) -> String {
    format!(
        "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        key.display()
    )
}

/// What every benchmark records about the run: commit, date, CPUs, load at start, git.
/// `extra` adds the benchmark's own fields; `loadavg_end` is added by [`finish`].
pub(crate) fn conditions(root: &Path, extra: serde_json::Value) -> Result<serde_json::Value> {
    let mut c = serde_json::json!({
        "commit": output(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root))?,
        "date": crate::today()?,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_start": loadavg(),
        "git": output(Command::new("git").arg("--version"))?,
    });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    Ok(c)
}

/// Store the runs with their conditions (and the load at the end) in `results`.
pub(crate) fn finish(
    root: &Path,
    results: &str,
    mut conditions: serde_json::Value,
    runs: Vec<serde_json::Value>,
) -> Result<()> {
    conditions["loadavg_end"] = loadavg().into();
    let doc = serde_json::json!({ "conditions": conditions, "runs": runs });
    std::fs::create_dir_all(root.join("bench/results"))?;
    std::fs::write(root.join(results), serde_json::to_string_pretty(&doc)? + "\n")?;
    println!("wrote {results} ({} runs); render with `cargo xtask report`", doc["runs"].as_array().map_or(0, Vec::len));
    Ok(())
}

/// The gixd a benchmark measures: `given`, or a release build of the committed tree.
pub(crate) fn gixd_or_build(root: &Path, given: Option<PathBuf>) -> Result<PathBuf> {
    match given {
        Some(gixd) => Ok(gixd.canonicalize()?),
        None => build_gixd(root),
    }
}

/// A fresh `gixd serve` of `base` (with `extra` flags) that takes pushes: a write token made for
/// it (in `base`), and the URL prefix that carries it (`http://bench:TOKEN@ADDR`).
pub(crate) fn serve_gixd_taking_pushes(
    gixd: &Path,
    base: &Path,
    extra: &[&std::ffi::OsStr],
) -> Result<(std::process::Child, String)> {
    let tokens = base.join("tokens.toml");
    let out = Command::new(gixd)
        .args(["token", "add", "--user", "bench", "--write", "--token-file"])
        .arg(&tokens)
        .output()?;
    let secret = String::from_utf8(out.stdout)?.trim().to_owned();
    let mut args = vec!["--token-file".as_ref(), tokens.as_os_str()];
    args.extend_from_slice(extra);
    let (child, addr) = serve_gixd(gixd, base, &args)?;
    Ok((child, format!("http://bench:{secret}@{addr}")))
}

pub(crate) fn build_gixd(root: &Path) -> Result<PathBuf> {
    let status =
        Command::new("cargo").args(["build", "--release", "--quiet", "-p", "gixd"]).current_dir(root).status()?;
    if !status.success() {
        bail!("building gixd failed");
    }
    Ok(root.join("target/release/gixd"))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn patches(root: &Path, rounds: usize) -> Result<()> {
    let queue = Queue::load(&root.join("patches"))?;
    let arms = ["stock", "patched"];
    let built: Vec<(PathBuf, Vec<String>)> = arms.iter().map(|a| build_arm(root, a, &queue)).collect::<Result<_>>()?;
    let bins: Vec<PathBuf> = built.iter().map(|(b, _)| b.clone()).collect();
    let fixture = root.join("target/bench/fixtures/patch-costs.git");
    if !fixture.join("objects/pack").is_dir() || std::fs::read_dir(fixture.join("objects/pack"))?.next().is_none() {
        if fixture.exists() {
            std::fs::remove_dir_all(&fixture)?;
        }
        let status = Command::new(&bins[0]).arg("fixture").arg(&fixture).status()?;
        if !status.success() {
            bail!("building the fixture failed");
        }
    }
    let conditions = conditions(
        root,
        serde_json::json!({
            "rustc": output(Command::new("rustc").arg("--version"))?,
            "queue": queue.patches.iter().map(|p| format!("{} ({} {})", p.file, p.krate, p.version)).collect::<Vec<_>>(),
            "arms": { "stock": built[0].1, "patched": built[1].1 },
            "rev": "main",
            "rounds": rounds,
        }),
    )?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for i in round_order(arms.len(), round) {
            let line = output(
                Command::new(&bins[i])
                    .args(["measure", "--repo"])
                    .arg(&fixture)
                    .args(["--rev", "main", "--arm", arms[i]]),
            )?;
            let mut row: serde_json::Value =
                serde_json::from_str(&line).with_context(|| format!("bench output: {line}"))?;
            row["round"] = round.into();
            runs.push(row);
        }
        eprint!(".");
    }
    eprintln!();
    finish(root, RESULTS, conditions, runs)
}

pub const CLONE_RESULTS: &str = "bench/results/clone-cost.json";

/// `xtask rusage --out FILE -- cmd…`: run `cmd` with this process's stdio, then record the CPU
/// time and peak RSS of it and every descendant it waited for.
pub fn rusage(out: &Path, command: &[String]) -> Result<()> {
    let status = Command::new(&command[0]).args(&command[1..]).status().context("running the wrapped command")?;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    let row = serde_json::json!({
        "cpu_us": us(usage.ru_utime) + us(usage.ru_stime),
        "peak_rss_kb": usage.ru_maxrss,
    });
    std::fs::write(out, row.to_string())?;
    std::process::exit(status.code().unwrap_or(1));
}

/// CPU time of every thread of process `pid`, in µs, from each thread's schedstat (ns
/// resolution; /proc/<pid>/stat counts 10 ms ticks). The server's threads outlive a clone
/// (tokio keeps idle blocking threads for seconds), so none is lost between two readings.
pub(crate) fn proc_cpu_us(pid: u32) -> Result<i64> {
    let mut ns: i64 = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        if let Ok(text) = std::fs::read_to_string(path) {
            ns += text.split_whitespace().next().context("schedstat")?.parse::<i64>()?;
        }
    }
    Ok(ns / 1000)
}

fn proc_peak_rss_kb(pid: u32) -> Result<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("VmHWM value")?.parse()?)
}

/// A fresh `gixd serve` of `base` (every repository exported) on a free port, with `extra`
/// arguments; the process and the address it listens on (from its first line).
pub(crate) fn serve_gixd(
    gixd: &Path,
    base: &Path,
    extra: &[&std::ffi::OsStr],
) -> Result<(std::process::Child, String)> {
    use std::io::BufRead;
    let mut child = Command::new(gixd)
        .args(["serve", "--listen", "127.0.0.1:0", "--export-all", "--base-path"])
        .arg(base)
        .args(extra)
        .env("GIXD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    // The HTTP line (a git:// line may come first).
    let mut lines = std::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
    let addr = lines
        .by_ref()
        .take(4)
        .map_while(Result::ok)
        .find_map(|line| line.split("http://").nth(1).and_then(|r| r.split('/').next()).map(str::to_owned));
    let Some(addr) = addr else {
        let _ = child.kill();
        let _ = child.wait();
        bail!("gixd printed no address line");
    };
    Ok((child, addr))
}

/// One clone served by a fresh gixd: its CPU during the clone and its peak RSS.
pub(crate) fn clone_gixd(gixd: &Path, base: &Path, repo: &str, dest: &Path) -> Result<(i64, i64)> {
    let (mut child, addr) = serve_gixd(gixd, base, &[])?;
    let pid = child.id();
    let before = proc_cpu_us(pid)?;
    let status = Command::new("git")
        .args(["-c", "protocol.version=2", "clone", "-q", "--mirror"])
        .arg(format!("http://{addr}/{repo}"))
        .arg(dest)
        .status()?;
    let cpu = proc_cpu_us(pid)? - before;
    let peak = proc_peak_rss_kb(pid)?;
    let _ = child.kill();
    let _ = child.wait();
    if !status.success() {
        bail!("clone from gixd failed");
    }
    Ok((cpu, peak))
}

/// One clone served by git upload-pack (file://, so the client starts it): CPU and peak RSS of
/// upload-pack and the pack-objects it runs.
pub(crate) fn clone_git(xtask: &Path, repo: &Path, dest: &Path, scratch: &Path) -> Result<(i64, i64)> {
    let out = scratch.join("rusage.json");
    let upload_pack = format!("{} rusage --out {} -- git-upload-pack", xtask.display(), out.display());
    let status = Command::new("git")
        .args(["-c", "protocol.version=2", "clone", "-q", "--mirror", "--no-local"])
        .arg(format!("--upload-pack={upload_pack}"))
        .arg(format!("file://{}", repo.display()))
        .arg(dest)
        .status()?;
    if !status.success() {
        bail!("clone from git upload-pack failed");
    }
    let row: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    Ok((row["cpu_us"].as_i64().context("cpu")?, row["peak_rss_kb"].as_i64().context("rss")?))
}

pub fn clone(root: &Path, rounds: usize, repos: Vec<PathBuf>) -> Result<()> {
    let gixd = build_gixd(root)?;
    let repos = if repos.is_empty() {
        let dir = corpus_dir(root)?;
        vec![dir.join("linear-sha1.git"), dir.join("wide-sha1.git")]
    } else {
        repos.into_iter().map(|r| r.canonicalize()).collect::<std::io::Result<_>>()?
    };
    let xtask = std::env::current_exe()?;
    let scratch = crate::tree::Scratch::new("bench-clone")?;
    let conditions = conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "gixd": "release build, HTTP, protocol v2, fresh process per clone",
            "git_arm": "git upload-pack over file:// (protocol v2), with the pack-objects it runs",
        }),
    )?;
    let mut runs = Vec::new();
    for repo in &repos {
        let base = repo.parent().context("repo parent")?;
        let name = repo.file_name().context("repo name")?.to_string_lossy().into_owned();
        let objects =
            output(Command::new("git").args(["rev-list", "--objects", "--all", "--count"]).current_dir(repo))?;
        for round in 0..rounds {
            for arm in round_order(2, round).into_iter().map(|i| ["gixd", "git"][i]) {
                let dest = scratch.0.join(format!("{arm}-{round}"));
                let (cpu_us, peak_rss_kb) = match arm {
                    "gixd" => clone_gixd(&gixd, base, &name, &dest)?,
                    _ => clone_git(&xtask, repo, &dest, &scratch.0)?,
                };
                std::fs::remove_dir_all(&dest)?;
                runs.push(serde_json::json!({
                    "repo": name, "objects": objects.parse::<u64>().unwrap_or(0), "arm": arm, "round": round,
                    "cpu_us": cpu_us, "peak_rss_kb": peak_rss_kb,
                }));
            }
            eprint!(".");
        }
    }
    eprintln!();
    finish(root, CLONE_RESULTS, conditions, runs)
}

pub const WRITES_RESULTS: &str = "bench/results/writes.json";
pub const RAMP_RESULTS: &str = "bench/results/ramp.json";

/// Attach `strace -f -c` to `pid` (and every process it forks) counting write-family calls;
/// returns the strace child, once it is attached.
fn strace_writes(pid: u32, out: &Path) -> Result<std::process::Child> {
    let child = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-c",
            "-U",
            "name,calls",
            "-e",
            "trace=write,writev,pwrite64,pwritev,sendto,sendmsg,sendmmsg",
            "-o",
        ])
        .arg(out)
        .args(["-p", &pid.to_string()])
        .spawn()
        .context("strace (apt-get install strace)")?;
    for _ in 0..200 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        if status.lines().any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0")) {
            std::thread::sleep(std::time::Duration::from_millis(100)); // let -f reach every thread
            return Ok(child);
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    bail!("strace did not attach to {pid}")
}

fn stop_strace(mut child: std::process::Child, out: &Path) -> Result<u64> {
    // SAFETY: sending SIGINT to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait()?;
    let text = std::fs::read_to_string(out)?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next().map(str::parse::<u64>)) {
                (Some(name), Some(Ok(calls))) if name != "total" => Some(calls),
                _ => None,
            }
        })
        .sum())
}

/// Bytes of every pack file of a git directory.
pub(crate) fn pack_bytes(clone: &Path) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(clone.join("objects/pack"))? {
        let p = e?.path();
        if p.extension().is_some_and(|e| e == "pack") {
            total += std::fs::metadata(&p)?.len();
        }
    }
    Ok(total)
}

pub(crate) fn corpus_dir(root: &Path) -> Result<PathBuf> {
    let listing = output(
        Command::new("cargo")
            .args(["run", "--release", "--quiet", "-p", "gixd-tests", "--bin", "corpus"])
            .current_dir(root),
    )?;
    Ok(PathBuf::from(listing.lines().next().and_then(|l| l.strip_prefix("corpus: ")).context("corpus dir")?))
}

/// One arm of the writes benchmark: a server process to attach to and the URL to clone.
struct Arm {
    name: &'static str,
    server: std::process::Child,
    url: String,
}

fn start_arms(root: &Path, base: &Path, repo: &str, scratch: &Path) -> Result<Vec<Arm>> {
    let mut arms = Vec::new();
    // One gixd per arm, so that each strace counts one transport only.
    for transport in ["http", "git://"] {
        let (http_port, git_port) = (free_port()?, free_port()?);
        let mut cmd = Command::new(root.join("target/release/gixd"));
        cmd.args(["serve", "--export-all", "--listen", &format!("127.0.0.1:{http_port}"), "--base-path"]).arg(base);
        if transport == "git://" {
            cmd.arg("--git-listen").arg(format!("127.0.0.1:{git_port}"));
        }
        let gixd = cmd.env("GIXD_LOG", "warn").stdout(std::process::Stdio::null()).spawn()?;
        wait_for_port(http_port)?;
        let (name, url) = match transport {
            "http" => ("gixd http", format!("http://127.0.0.1:{http_port}/{repo}")),
            _ => {
                wait_for_port(git_port)?;
                ("gixd git://", format!("git://127.0.0.1:{git_port}/{repo}"))
            }
        };
        arms.push(Arm { name, server: gixd, url });
    }

    let port = free_port()?;
    let conf = scratch.join("lighttpd.conf");
    std::fs::write(
        &conf,
        bench_support::http_backend_conf(scratch, base, Path::new("/usr/lib/git-core/git-http-backend"), port, false),
    )?;
    let lighttpd = Command::new("lighttpd")
        .arg("-D")
        .arg("-f")
        .arg(&conf)
        .spawn()
        .context("lighttpd (apt-get install lighttpd)")?;
    wait_for_port(port)?;
    arms.push(Arm {
        name: "git http-backend (lighttpd)",
        server: lighttpd,
        url: format!("http://127.0.0.1:{port}/git/{repo}"),
    });

    let port = free_port()?;
    // git-daemon itself, not the `git` wrapper: strace -p follows only processes forked after
    // it attaches, and a wrapper's existing child would go uncounted (seen: 0 calls).
    let exec_path = output(Command::new("git").arg("--exec-path"))?;
    let daemon = Command::new(Path::new(&exec_path).join("git-daemon"))
        .args(["--export-all", "--reuseaddr", "--listen=127.0.0.1", &format!("--port={port}")])
        .arg(format!("--base-path={}", base.display()))
        .spawn()?;
    wait_for_port(port)?;
    arms.push(Arm { name: "git daemon (git://)", server: daemon, url: format!("git://127.0.0.1:{port}/{repo}") });
    Ok(arms)
}

/// Write-family syscalls per clone, per arm: every process of the serving side counted.
pub fn writes(root: &Path, rounds: usize) -> Result<()> {
    build_gixd(root)?;
    let base = corpus_dir(root)?;
    let repo = "linear-sha1.git";
    let scratch = crate::tree::Scratch::new("bench-writes")?;
    let mut arms = start_arms(root, &base, repo, &scratch.0)?;
    let conditions = conditions(
        root,
        serde_json::json!({
            "lighttpd": output(Command::new("lighttpd").arg("-v")).unwrap_or_default(),
            "repo": repo,
            "objects": output(Command::new("git").args(["rev-list", "--objects", "--all", "--count"]).current_dir(base.join(repo)))?,
            "rounds": rounds,
        }),
    )?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for i in round_order(arms.len(), round) {
            let arm = &arms[i];
            let summary = scratch.0.join("strace.txt");
            let tracer = strace_writes(arm.server.id(), &summary)?;
            let dest = scratch.0.join(format!("clone-{round}-{i}"));
            let status = Command::new("git")
                .args(["-c", "protocol.version=2", "clone", "-q", "--mirror", &arm.url])
                .arg(&dest)
                .status()?;
            let calls = stop_strace(tracer, &summary)?;
            if !status.success() {
                bail!("clone from {} failed: the run is aborted, not scored", arm.name);
            }
            if calls == 0 {
                bail!("strace counted no write for {}: the instrument is blind, the run is aborted", arm.name);
            }
            let bytes = pack_bytes(&dest)?;
            std::fs::remove_dir_all(&dest)?;
            runs.push(
                serde_json::json!({ "arm": arm.name, "round": round, "write_calls": calls, "pack_bytes": bytes }),
            );
        }
        eprint!(".");
    }
    eprintln!();
    for arm in &mut arms {
        let _ = arm.server.kill();
        let _ = arm.server.wait();
    }
    finish(root, WRITES_RESULTS, conditions, runs)
}

/// Server CPU per clone at 1…32 concurrent clients, with gixd under a CFS quota without a
/// cpuset (cgroup v1 `cpu`, 1 CPU of quota over all CPUs) and pinned to one CPU with no quota.
pub fn ramp(root: &Path, rounds: usize, rungs: Vec<usize>) -> Result<()> {
    let gixd = build_gixd(root)?;
    let base = corpus_dir(root)?;
    let repo = "linear-sha1.git";
    let cgroup = PathBuf::from("/sys/fs/cgroup/cpu/gixd-bench-ramp");
    std::fs::create_dir_all(&cgroup).context("a writable cgroup v1 cpu controller (root, /sys/fs/cgroup/cpu)")?;
    std::fs::write(cgroup.join("cpu.cfs_period_us"), "100000")?;
    std::fs::write(cgroup.join("cpu.cfs_quota_us"), "100000")?;
    let start = |arm: &str| -> Result<(std::process::Child, u16)> {
        let port = free_port()?;
        let serve = format!(
            "exec {} serve --export-all --listen 127.0.0.1:{port} --queue-wait 600 --base-path {}",
            gixd.display(),
            base.display()
        );
        let script = match arm {
            // The cgroup's quota, every CPU of the machine: the deployment this is about.
            "quota" => format!("echo $$ > {}/cgroup.procs && {serve}", cgroup.display()),
            _ => format!("exec taskset -c 0 sh -c '{serve}'"),
        };
        let child = Command::new("sh")
            .args(["-c", &script])
            .env("GIXD_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?;
        wait_for_port(port)?;
        Ok((child, port))
    };
    // Limits read back from the kernel, not from what was asked.
    let readback = serde_json::json!({
        "quota_us": std::fs::read_to_string(cgroup.join("cpu.cfs_quota_us"))?.trim(),
        "period_us": std::fs::read_to_string(cgroup.join("cpu.cfs_period_us"))?.trim(),
    });
    let mut servers = Vec::new();
    for arm in ["quota", "pinned"] {
        let (child, port) = start(arm)?;
        let pid = child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let allowed = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap_or("").to_owned();
        servers.push((arm, child, port, allowed));
    }
    let conditions = conditions(
        root,
        serde_json::json!({
            "repo": repo,
            "cgroup_readback": readback,
            "affinity": servers.iter().map(|(a, _, _, allowed)| format!("{a}: {allowed}")).collect::<Vec<_>>(),
            "rounds": rounds,
        }),
    )?;
    let scratch = crate::tree::Scratch::new("bench-ramp")?;
    let mut runs = Vec::new();
    for &clients in &rungs {
        for round in 0..rounds {
            for i in round_order(servers.len(), round) {
                let (arm, child, port, _) = &servers[i];
                let pid = child.id();
                // The pinned arm's `sh` execs taskset, which execs gixd: same pid throughout.
                let before = proc_cpu_us(pid)?;
                let started = std::time::Instant::now();
                let clones: Vec<_> = (0..clients)
                    .map(|c| {
                        let dest = scratch.0.join(format!("{arm}-{clients}-{round}-{c}"));
                        Command::new("git")
                            .args(["-c", "protocol.version=2", "clone", "-q", "--mirror"])
                            .arg(format!("http://127.0.0.1:{port}/{repo}"))
                            .arg(&dest)
                            .spawn()
                            .map(|child| (child, dest))
                    })
                    .collect::<std::io::Result<_>>()?;
                for (mut child, dest) in clones {
                    if !child.wait()?.success() {
                        bail!("a client failed ({arm}, {clients} clients): the run is aborted, not scored");
                    }
                    std::fs::remove_dir_all(dest)?;
                }
                let wall = started.elapsed();
                let cpu = proc_cpu_us(pid)? - before;
                runs.push(serde_json::json!({
                    "arm": arm, "clients": clients, "round": round,
                    "server_cpu_us": cpu, "cpu_per_clone_us": cpu / clients as i64, "wall_ms": wall.as_millis() as u64,
                }));
            }
        }
        eprint!("{clients} ");
    }
    eprintln!();
    for (_, child, _, _) in &mut servers {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir(&cgroup);
    finish(root, RAMP_RESULTS, conditions, runs)
}

/// A repository's name for results: its directory's, or for a `fetch` mirror (`owner+name/repo`)
/// the owner and name.
pub(crate) fn repo_name(repo: &Path) -> String {
    let name = repo.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A `fetch` mirror is `owner+name/repo`: the owner and name say more than `repo`.
    match repo.parent().and_then(Path::file_name) {
        Some(parent) if name == "repo" => parent.to_string_lossy().into_owned(),
        _ => name.trim_end_matches(".git").to_owned(),
    }
}

/// CPU of every child this process has reaped so far, in µs (getrusage).
pub(crate) fn children_cpu_us() -> i64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    us(usage.ru_utime) + us(usage.ru_stime)
}
