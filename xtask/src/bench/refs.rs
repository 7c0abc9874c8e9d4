//! `cargo xtask bench refs`: what a repository's refs cost each request while they are loose
//! (as pushes leave them: gixd, like git receive-pack, writes a loose file per pushed ref) and
//! after `gixd maintenance` moved them into packed-refs. Every ls-refs and fetch computes the
//! refs' state, which reads every loose ref. A real repository's heads and tags are pushed to a
//! gixd with `git push --mirror`; a copy is maintained; one gixd serves both. Per arm and round:
//! the system calls of the server for one `git ls-remote` (strace -c -f) and its CPU for
//! `--requests` of them in a row (utime + stime from /proc); and, once per repository, the
//! server's CPU for the mirror push itself. Run by hand; not in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::table::*;
use anyhow::{Context, Result, bail};
use bench_support::run::git;
use serde_json::Value;

pub const REFS_RESULTS: &str = "bench/results/refs.json";

/// The arms, by the name the report shows, and the repository each serves.
pub const ARMS: [(&str, &str); 2] = [("loose refs, as pushed", "loose.git"), ("after gixd maintenance", "packed.git")];

/// CPU of `pid` so far, in microseconds: utime + stime, which count its exited threads too
/// (`bench::proc_cpu_us` sums the live ones' schedstat), at the clock tick's resolution.
fn cpu_us(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    let hz: u64 = bench_support::run::output(Command::new("getconf").arg("CLK_TCK"))?.parse()?;
    Ok(ticks * 1_000_000 / hz)
}

fn ls_remote(url: &str) -> Result<()> {
    bench_support::run::output(Command::new("git").args(["-c", "protocol.version=2", "ls-remote", url])).map(|_| ())
}

/// The server's system calls for one `git ls-remote`.
fn syscalls_of_one(pid: u32, url: &str, scratch: &Path) -> Result<u64> {
    let out = scratch.join("strace.txt");
    let mut strace = Command::new("strace")
        .args(["-f", "-c", "-U", "name,calls", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("strace (apt-get install strace)")?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    ls_remote(url)?;
    std::thread::sleep(std::time::Duration::from_millis(100));
    Command::new("kill").args(["-INT", &strace.id().to_string()]).status()?;
    strace.wait()?;
    let text = std::fs::read_to_string(&out)?;
    text.lines()
        .find_map(|l| l.strip_prefix("total").map(|r| r.trim().parse::<u64>()))
        .context("strace total")?
        .map_err(Into::into)
}

/// `cargo xtask bench refs`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bare repositories whose heads and tags are pushed (read only, never modified).
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    /// `git ls-remote` requests per arm and round for the CPU figure.
    #[arg(long, default_value_t = 100)]
    pub requests: usize,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, requests, gixd } = args;
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let scratch = crate::tree::Scratch::new("bench-refs")?;
    let mut conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "requests": requests,
            "gixd": format!("release build {}", gixd.display()),
            "how": "the repository's heads and tags pushed to gixd over HTTP by `git push --mirror` (a loose file per ref), a copy maintained by `gixd maintenance`; one gixd serves both; per arm and round: the server's system calls for one `git ls-remote` (protocol v2: ls-refs) and its CPU for a run of them",
        }),
    )?;
    let mut repos_meta = Vec::new();
    let mut runs = Vec::new();
    for source in repos {
        let source = source.canonicalize()?;
        let name = source.file_name().context("repository name")?.to_string_lossy().trim_end_matches(".git").to_owned();
        let base = scratch.0.join(&name);
        std::fs::create_dir_all(&base)?;
        let push_cpu_us = push_mirror(&gixd, &source, &base)?;
        let loose = base.join("loose.git");
        let copied = Command::new("cp").arg("-a").arg(&loose).arg(base.join("packed.git")).status()?;
        if !copied.success() {
            bail!("copying {}", loose.display());
        }
        bench_support::run::output(Command::new(&gixd).arg("maintenance").arg(base.join("packed.git")))?;
        let count_files = |repo: &Path| -> Result<usize> {
            Ok(bench_support::run::output(Command::new("find").arg(repo.join("refs")).args(["-type", "f"]))?
                .lines()
                .count())
        };
        let refs = git(&loose, &["for-each-ref", "--format=x"])?.lines().count();
        let (loose_files, packed_files) = (count_files(&loose)?, count_files(&base.join("packed.git"))?);
        if git(&loose, &["show-ref", "-d"])? != git(&base.join("packed.git"), &["show-ref", "-d"])? {
            bail!("{name}: maintenance changed the refs");
        }
        eprintln!("{name}: {refs} refs; loose files {loose_files} as pushed, {packed_files} after maintenance");
        repos_meta.push(serde_json::json!({ "repo": name, "refs": refs, "loose_files": { ARMS[0].0: loose_files, ARMS[1].0: packed_files }, "push_cpu_us": push_cpu_us }));
        let (mut child, addr) = crate::bench::serve_gixd(&gixd, &base, &[])?;
        let result = (|| -> Result<()> {
            for round in 0..rounds {
                for (arm, dir) in bench_support::run::round_order(ARMS.len(), round).into_iter().map(|i| ARMS[i]) {
                    let url = format!("http://{addr}/{dir}");
                    ls_remote(&url)?; // the ref snapshot cached: what follows is the steady state
                    let syscalls = syscalls_of_one(child.id(), &url, &scratch.0)?;
                    let before = cpu_us(child.id())?;
                    for _ in 0..requests {
                        ls_remote(&url)?;
                    }
                    let cpu = cpu_us(child.id())? - before;
                    runs.push(serde_json::json!({ "repo": name, "arm": arm, "round": round, "syscalls": syscalls, "cpu_us": cpu, "requests": requests }));
                }
                eprint!(".");
            }
            Ok(())
        })();
        let _ = child.kill();
        let _ = child.wait();
        result?;
        eprintln!();
    }
    conditions["repos"] = repos_meta.into();
    crate::bench::finish(root, REFS_RESULTS, conditions, runs)
}

/// `base/loose.git`: an empty repository that received `source`'s heads and tags in one
/// `git push --mirror` to a gixd; that gixd's CPU for it (microseconds).
fn push_mirror(gixd: &Path, source: &Path, base: &Path) -> Result<u64> {
    git(base, &["init", "-q", "--bare", "loose.git"])?;
    let (mut child, server) = crate::bench::serve_gixd_taking_pushes(gixd, base, &[])?;
    let url = format!("{server}/loose.git");
    let result = git(source, &["push", "-q", "--mirror", &url]).and_then(|_| cpu_us(child.id()));
    let _ = child.kill();
    let _ = child.wait();
    result
}

// The report.

/// What loose refs cost a request: a row per repository, the largest loose ÷ packed CPU first.
pub fn render(root: &Path) -> Result<String> {
    let doc =
        match load(root, REFS_RESULTS, "`cargo xtask bench refs --repo PATH…` (by hand: it needs the repositories)")?
        {
            Ok(doc) => doc,
            Err(not_measured) => return Ok(not_measured),
        };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench refs")?;
    out.push_str(&format!(" Setup: {}; {} requests per arm and round. gixd: {}. Syscalls: of one request (min–max over the rounds); CPU: medians per request.\n\n", c["how"].as_str().unwrap_or("?"), c["requests"], c["gixd"].as_str().unwrap_or("?")));
    out.push_str(&format!(
        "| repository | refs | mirror push: server CPU (ms) | loose files: {0} | {1} | syscalls per ls-remote: {0} | {1} | CPU µs per ls-remote: {0} | {1} | {1} ÷ {0} |\n|---|---|---|---|---|---|---|---|---|---|\n",
        ARMS[0].0, ARMS[1].0
    ));
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).collect() };
        let cpu = |arm: &str| {
            median(of(arm).iter().filter_map(|r| Some(r["cpu_us"].as_f64()? / r["requests"].as_f64()?)).collect())
        };
        let (loose, packed) = (cpu(ARMS[0].0), cpu(ARMS[1].0));
        let row = format!(
            "| {name} | {} | {:.0} | {} | {} | {} | {} | {loose:.0} | {packed:.0} | {} |\n",
            repo["refs"],
            repo["push_cpu_us"].as_f64().unwrap_or(f64::NAN) / 1000.0,
            repo["loose_files"][ARMS[0].0],
            repo["loose_files"][ARMS[1].0],
            count(&of(ARMS[0].0), "syscalls"),
            count(&of(ARMS[1].0), "syscalls"),
            ratio(loose, packed),
        );
        rows.push((loose / packed, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, row) in rows {
        out.push_str(&row);
    }
    Ok(out)
}
