//! `cargo xtask bench push`: server CPU of a one-commit push into a ≥ 10 000-object repository,
//! gixd over HTTP (with a token) vs git receive-pack (file://, under `xtask rusage`, so
//! receive-pack and what it runs — unpack-objects or index-pack, the connectivity check — are
//! counted). Each push goes into a fresh copy of the repository.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::table::*;
use anyhow::{Context, Result, bail};

pub const PUSH_RESULTS: &str = "bench/results/push.json";

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    bench_support::run::git_with(dir, &["user.name=bench", "user.email=bench@gixd"], args)
}

/// `cargo xtask bench push`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Bare repository to push into (default: the corpus's linear, ≥ 10 000 objects).
    #[arg(long)]
    pub repo: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo } = args;
    let gixd = crate::bench::build_gixd(root)?;
    let source = match repo {
        Some(r) => r.canonicalize()?,
        None => crate::bench::corpus_dir(root)?.join("linear-sha1.git"),
    };
    let objects: u64 = git(&source, &["rev-list", "--objects", "--all", "--count"])?.parse()?;
    let xtask = std::env::current_exe()?;
    let scratch = crate::tree::Scratch::new("bench-push")?;
    let work = scratch.0.join("work");
    git(&scratch.0, &["clone", "-q", "--no-local", &source.display().to_string(), work.to_str().context("utf-8")?])?;
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "repo": source.file_name().map(|n| n.to_string_lossy().into_owned()),
            "objects": objects,
            "gixd": "release build, HTTP push with a write token, fresh process and fresh repository copy per push",
            "git_arm": "git receive-pack over file:// with what it runs, fresh repository copy per push",
        }),
    )?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for arm in bench_support::run::round_order(2, round).into_iter().map(|i| ["gixd", "git"][i]) {
            // A fresh copy of the repository, and one new commit to push into it.
            let base = scratch.0.join(format!("base-{round}-{arm}"));
            let server_repo = base.join("r.git");
            std::fs::create_dir_all(&base)?;
            git(&base, &["clone", "-q", "--bare", "--no-local", &source.display().to_string(), "r.git"])?;
            std::fs::write(work.join("bench-push.txt"), format!("round {round} arm {arm}\n"))?;
            git(&work, &["add", "bench-push.txt"])?;
            git(&work, &["commit", "-q", "-m", &format!("push {round} {arm}")])?;
            let cpu_us = match arm {
                "gixd" => push_gixd(&gixd, &base, &work)?,
                _ => push_git(&xtask, &server_repo, &work, &scratch.0)?,
            };
            let tip = git(&server_repo, &["rev-parse", "HEAD"])?;
            if tip != git(&work, &["rev-parse", "HEAD"])? {
                bail!("{arm}: the push did not land");
            }
            std::fs::remove_dir_all(&base)?;
            git(&work, &["reset", "-q", "--hard", "HEAD~1"])?;
            runs.push(serde_json::json!({ "arm": arm, "round": round, "cpu_us": cpu_us }));
        }
        eprint!(".");
    }
    eprintln!();
    crate::bench::finish(root, PUSH_RESULTS, conditions, runs)
}

fn push_gixd(gixd: &Path, base: &Path, work: &Path) -> Result<i64> {
    let tokens = base.join("tokens.toml");
    let out = Command::new(gixd)
        .args(["token", "add", "--user", "bench", "--write", "--token-file"])
        .arg(&tokens)
        .output()?;
    let secret = String::from_utf8(out.stdout)?.trim().to_owned();
    let (mut child, addr) = crate::bench::serve_gixd(gixd, base, &["--token-file".as_ref(), tokens.as_os_str()])?;
    let pid = child.id();
    let before = crate::bench::proc_cpu_us(pid)?;
    let status = Command::new("git")
        .current_dir(work)
        .args(["push", "-q", &format!("http://bench:{secret}@{addr}/r.git"), "HEAD:refs/heads/main"])
        .status()?;
    let cpu = crate::bench::proc_cpu_us(pid)? - before;
    let _ = child.kill();
    let _ = child.wait();
    if !status.success() {
        bail!("push to gixd failed");
    }
    Ok(cpu)
}

fn push_git(xtask: &Path, repo: &Path, work: &Path, scratch: &Path) -> Result<i64> {
    let out = scratch.join("rusage.json");
    let _ = std::fs::remove_file(&out);
    let receive_pack = format!("{} rusage --out {} -- git-receive-pack", xtask.display(), out.display());
    let status = Command::new("git")
        .current_dir(work)
        .args([
            "push",
            "-q",
            &format!("--receive-pack={receive_pack}"),
            &format!("file://{}", repo.display()),
            "HEAD:refs/heads/main",
        ])
        .status()?;
    if !status.success() {
        bail!("push to git receive-pack failed");
    }
    let row: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    row["cpu_us"].as_i64().context("cpu_us")
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(root, PUSH_RESULTS, "`cargo xtask bench push`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench push")?;
    out.push_str(&format!(
        " Repository {} ({} objects), one new commit per push. gixd: {}. git: {}. Medians.\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["objects"],
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
    ));
    let med = |arm: &str| {
        median(runs.iter().filter(|r| r["arm"] == arm).filter_map(|r| r["cpu_us"].as_f64()).collect()) / 1000.0
    };
    let (g, t) = (med("gixd"), med("git"));
    out.push_str("| measure | gixd | git receive-pack | gixd ÷ git |\n|---|---|---|---|\n");
    out.push_str(&format!("| server CPU per push (ms) | {g:.1} | {t:.1} | {} |\n", ratio(t, g)));
    Ok(out)
}
