//! `cargo xtask bench patches`: build bench/patch-costs on stock crates and on vendor/, run the
//! two arms interleaved (order swapped every round) on one fixture, and store every run with its
//! conditions in bench/results/patch-costs.json. Nothing here interprets the numbers; `report` does.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::queue::Queue;

pub const RESULTS: &str = "bench/results/patch-costs.json";

/// Build one arm of bench/patch-costs; returns the binary.
fn build_arm(root: &Path, arm: &str, queue: &Queue) -> Result<PathBuf> {
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
        for (krate, _) in queue.crates() {
            let path = root.join("vendor").join(&krate);
            cmd.arg("--config").arg(format!("patch.crates-io.{krate}.path={:?}", path.display().to_string()));
        }
    }
    let status = cmd.status().context("cargo build of bench/patch-costs")?;
    if !status.success() {
        bail!("building the {arm} arm failed");
    }
    Ok(dir.join("target/release/patch-costs"))
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

pub fn patches(root: &Path, rounds: usize) -> Result<()> {
    let queue = Queue::load(&root.join("patches"))?;
    let arms = ["stock", "patched"];
    let bins: Vec<PathBuf> = arms.iter().map(|a| build_arm(root, a, &queue)).collect::<Result<_>>()?;
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
    let conditions = serde_json::json!({
        "commit": output(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root))?,
        "date": crate::today()?,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_start": loadavg(),
        "git": output(Command::new("git").arg("--version"))?,
        "rustc": output(Command::new("rustc").arg("--version"))?,
        "queue": queue.patches.iter().map(|p| format!("{} ({} {})", p.file, p.krate, p.version)).collect::<Vec<_>>(),
        "rev": "main",
        "rounds": rounds,
    });
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..arms.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let line = output(Command::new(&bins[i]).args(["measure", "--repo"]).arg(&fixture).args(["--rev", "main", "--arm", arms[i]]))?;
            let mut row: serde_json::Value = serde_json::from_str(&line).with_context(|| format!("bench output: {line}"))?;
            row["round"] = round.into();
            runs.push(row);
        }
        eprint!(".");
    }
    eprintln!();
    let mut conditions = conditions;
    conditions["loadavg_end"] = loadavg().into();
    let doc = serde_json::json!({ "conditions": conditions, "runs": runs });
    std::fs::create_dir_all(root.join("bench/results"))?;
    std::fs::write(root.join(RESULTS), serde_json::to_string_pretty(&doc)? + "\n")?;
    println!("wrote {RESULTS} ({} runs); render with `cargo xtask report`", runs.len());
    Ok(())
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
fn proc_cpu_us(pid: u32) -> Result<i64> {
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

/// One clone served by a fresh gixd: its CPU during the clone and its peak RSS.
fn clone_gixd(gixd: &Path, base: &Path, repo: &str, dest: &Path) -> Result<(i64, i64)> {
    use std::io::BufRead;
    let mut child = Command::new(gixd)
        .args(["serve", "--listen", "127.0.0.1:0", "--export-all", "--base-path"])
        .arg(base)
        .env("GIXD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut first)?;
    let addr = first.split("http://").nth(1).and_then(|r| r.split('/').next()).context("gixd's address line")?.to_owned();
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
fn clone_git(xtask: &Path, repo: &Path, dest: &Path, scratch: &Path) -> Result<(i64, i64)> {
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
    let status = Command::new("cargo").args(["build", "--release", "--quiet", "-p", "gixd"]).current_dir(root).status()?;
    if !status.success() {
        bail!("building gixd failed");
    }
    let gixd = root.join("target/release/gixd");
    let repos = if repos.is_empty() {
        let listing = output(Command::new("cargo").args(["run", "--release", "--quiet", "-p", "gixd-tests", "--bin", "corpus"]).current_dir(root))?;
        let dir = PathBuf::from(listing.lines().next().and_then(|l| l.strip_prefix("corpus: ")).context("corpus dir")?);
        vec![dir.join("linear-sha1.git"), dir.join("wide-sha1.git")]
    } else {
        repos.into_iter().map(|r| r.canonicalize()).collect::<std::io::Result<_>>()?
    };
    let xtask = std::env::current_exe()?;
    let scratch = crate::tree::Scratch::new("bench-clone")?;
    let conditions = serde_json::json!({
        "commit": output(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root))?,
        "date": crate::today()?,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_start": loadavg(),
        "git": output(Command::new("git").arg("--version"))?,
        "rounds": rounds,
        "gixd": "release build, HTTP, protocol v2, fresh process per clone",
        "git_arm": "git upload-pack over file:// (protocol v2), with the pack-objects it runs",
    });
    let mut runs = Vec::new();
    for repo in &repos {
        let base = repo.parent().context("repo parent")?;
        let name = repo.file_name().context("repo name")?.to_string_lossy().into_owned();
        let objects = output(Command::new("git").args(["rev-list", "--objects", "--all", "--count"]).current_dir(repo))?;
        for round in 0..rounds {
            let mut arms = vec!["gixd", "git"];
            if round % 2 == 1 {
                arms.reverse();
            }
            for arm in arms {
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
    let mut conditions = conditions;
    conditions["loadavg_end"] = loadavg().into();
    let doc = serde_json::json!({ "conditions": conditions, "runs": runs });
    std::fs::write(root.join(CLONE_RESULTS), serde_json::to_string_pretty(&doc)? + "\n")?;
    println!("wrote {CLONE_RESULTS} ({} runs); render with `cargo xtask report`", runs.len());
    Ok(())
}
