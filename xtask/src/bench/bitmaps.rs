//! `cargo xtask bench bitmaps`: server CPU per clone with and without pack bitmaps, gixd against
//! git upload-pack, on a generated ≥ 100 000-object repository and on the corpus's linear one,
//! each repacked by git into one pack with a bitmap (and a copy without). Arms alternate, order
//! swapped every round; gixd is a fresh process per clone (the bitmap is read on its first use,
//! so its loading is counted).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::table::*;
use anyhow::{Context, Result, bail};

pub const BITMAP_RESULTS: &str = "bench/results/bitmaps.json";

/// A deterministic history of about 100 000 objects: 50 directories of 40 files, 7 500 commits
/// each editing 6 files.
fn generate_big(dest: &Path) -> Result<()> {
    let scratch = dest.with_extension("building");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    bench_support::run::output(Command::new("git").args(["init", "-q", "--bare", "-b", "main"]).arg(&scratch))?;
    let mut child =
        Command::new("git").args(["fast-import", "--quiet"]).current_dir(&scratch).stdin(Stdio::piped()).spawn()?;
    let mut stdin = std::io::BufWriter::new(child.stdin.take().context("stdin")?);
    let mut state: u64 = 0x2545F4914F6CDD1D;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut versions = vec![0u32; 2000];
    let content = |file: usize, version: u32| -> String {
        let mut s = String::new();
        for line in 0..30 {
            // Most lines stay; a few move with the version: good deltas, like real edits.
            let v = if line % 10 == (version as usize % 10) { version } else { 0 };
            s.push_str(&format!("file {file} line {line} revision {v} lorem ipsum dolor sit amet\n"));
        }
        s
    };
    let mut time = 1_600_000_000u64;
    for commit in 0..7500u32 {
        let touched: Vec<usize> =
            if commit == 0 { (0..2000).collect() } else { (0..6).map(|_| (next() % 2000) as usize).collect() };
        write!(
            stdin,
            "commit refs/heads/main\ncommitter Bench <bench@gixd> {time} +0000\ndata <<EOT\ncommit {commit}\nEOT\n"
        )?;
        for file in touched {
            versions[file] += 1;
            let body = content(file, versions[file]);
            write!(stdin, "M 100644 inline d{:02}/f{:02}.txt\ndata {}\n{}\n", file / 40, file % 40, body.len(), body)?;
        }
        time += 60;
    }
    drop(stdin);
    if !child.wait()?.success() {
        bail!("fast-import failed");
    }
    bench_support::run::output(Command::new("git").current_dir(&scratch).args([
        "-c",
        "pack.writeReverseIndex=true",
        "repack",
        "-adq",
        "--write-bitmap-index",
    ]))?;
    std::fs::rename(&scratch, dest)?;
    Ok(())
}

/// A copy of `repo` with (`bitmap`) or without a bitmap, in one pack.
fn variant(repo: &Path, dest: &Path, bitmap: bool) -> Result<()> {
    if dest.join("HEAD").is_file() {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(dest);
    bench_support::run::output(
        Command::new("git").args(["clone", "-q", "--mirror", "--no-local"]).arg(repo).arg(dest),
    )?;
    let flag = if bitmap { "--write-bitmap-index" } else { "--no-write-bitmap-index" };
    bench_support::run::output(Command::new("git").current_dir(dest).args([
        "-c",
        "pack.writeReverseIndex=true",
        "repack",
        "-adq",
        flag,
    ]))?;
    Ok(())
}

/// `cargo xtask bench bitmaps`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds } = args;
    let gixd = crate::bench::build_gixd(root)?;
    let fixtures = root.join("target/bench/fixtures");
    std::fs::create_dir_all(&fixtures)?;
    let big = fixtures.join("big-100k.git");
    if !big.join("HEAD").is_file() {
        eprintln!("generating {} (once)", big.display());
        generate_big(&big)?;
    }
    let linear = crate::bench::corpus_dir(root)?.join("linear-sha1.git");
    let xtask = std::env::current_exe()?;
    let scratch = crate::tree::Scratch::new("bench-bitmaps")?;
    let mut repos: Vec<(String, u64, PathBuf, PathBuf)> = Vec::new();
    for (name, source) in [("big-100k", &big), ("linear-sha1", &linear)] {
        let with = fixtures.join(format!("bitmaps/{name}-bitmap/{name}.git"));
        let without = fixtures.join(format!("bitmaps/{name}-walk/{name}.git"));
        std::fs::create_dir_all(with.parent().unwrap())?;
        std::fs::create_dir_all(without.parent().unwrap())?;
        variant(source, &with, true)?;
        variant(source, &without, false)?;
        let objects: u64 = bench_support::run::output(
            Command::new("git").args(["rev-list", "--objects", "--all", "--count"]).current_dir(&with),
        )?
        .parse()?;
        repos.push((name.to_owned(), objects, with, without));
    }
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "gixd": "release build, HTTP, protocol v2, fresh process per clone",
            "git_arm": "git upload-pack over file:// (protocol v2), with the pack-objects it runs",
            "repack": "git repack -ad (one pack) with and without --write-bitmap-index, pack.writeReverseIndex",
        }),
    )?;
    let arms = ["gixd bitmap", "git bitmap", "gixd walk", "git walk"];
    let mut runs = Vec::new();
    for (name, objects, with, without) in &repos {
        for round in 0..rounds {
            for i in bench_support::run::round_order(arms.len(), round) {
                let arm = arms[i];
                let repo = if arm.ends_with("bitmap") { with } else { without };
                let dest = scratch.0.join(format!("{round}-{i}"));
                let (cpu_us, peak_rss_kb) = if arm.starts_with("gixd") {
                    crate::bench::clone_gixd(&gixd, repo.parent().unwrap(), &format!("{name}.git"), &dest)?
                } else {
                    crate::bench::clone_git(&xtask, repo, &dest, &scratch.0)?
                };
                let got: u64 = bench_support::run::output(
                    Command::new("git").args(["rev-list", "--objects", "--all", "--count"]).current_dir(&dest),
                )?
                .parse()?;
                if got != *objects {
                    bail!("{arm} clone of {name} has {got} objects, not {objects}");
                }
                std::fs::remove_dir_all(&dest)?;
                runs.push(serde_json::json!({ "repo": name, "objects": objects, "arm": arm, "round": round, "cpu_us": cpu_us, "peak_rss_kb": peak_rss_kb }));
            }
            eprint!(".");
        }
    }
    eprintln!();
    crate::bench::finish(root, BITMAP_RESULTS, conditions, runs)
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(root, BITMAP_RESULTS, "`cargo xtask bench bitmaps`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench bitmaps")?;
    out.push_str(&format!(
        " gixd: {}. git: {}. Repacked by git: {}. Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["repack"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | gixd with bitmap (ms) | git with bitmap (ms) | gixd ÷ git, bitmaps | gixd walking (ms) | git walking (ms) | gixd ÷ git, walking |\n|---|---|---|---|---|---|---|---|\n");
    let mut repos: Vec<&str> = runs.iter().filter_map(|r| r["repo"].as_str()).collect();
    repos.dedup();
    for repo in repos {
        let of = |arm: &str| {
            median(
                runs.iter()
                    .filter(|r| r["repo"] == repo && r["arm"] == arm)
                    .filter_map(|r| r["cpu_us"].as_f64())
                    .collect(),
            ) / 1000.0
        };
        let objects = runs.iter().find(|r| r["repo"] == repo).and_then(|r| r["objects"].as_u64()).unwrap_or(0);
        let (gb, tb, gw, tw) = (of("gixd bitmap"), of("git bitmap"), of("gixd walk"), of("git walk"));
        out.push_str(&format!(
            "| {repo} | {objects} | {gb:.1} | {tb:.1} | {} | {gw:.1} | {tw:.1} | {} |\n",
            ratio(tb, gb),
            ratio(tw, gw)
        ));
    }
    Ok(out)
}
