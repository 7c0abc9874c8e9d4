//! `cargo xtask bench clone`: server CPU and peak RSS of one clone, gixd over HTTP against git
//! upload-pack (file://), on the corpus's ≥ 10 000-object repositories or `--repo`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::table::*;
use super::*;
use bench_support::run::round_order;

pub const CLONE_RESULTS: &str = "bench/results/clone-cost.json";

/// `cargo xtask bench clone`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Bare repositories to clone (default: the corpus's linear and wide, ≥ 10 000 objects).
    #[arg(long)]
    pub repo: Vec<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos } = args;
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

// The report.

/// Clone cost rows, worst first (gixd's CPU over git's): of the corpus (`CLONE_RESULTS`), or of
/// real repositories without a bitmap, with and without a commit-graph (kept apart in
/// [`CLONE_COMMIT_GRAPH_RESULTS`]).
pub fn render(root: &Path, results: &str, command: &str) -> Result<String> {
    let doc = match load(root, results, &format!("`{command}`"))? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench clone")?;
    out.push_str(&format!(
        " gixd: {}. git: {}. Medians per repository, worst first.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | server CPU per clone, gixd (ms) | git (ms) | gixd ÷ git | peak RSS, gixd (MiB) | git (MiB) | gixd ÷ git |\n|---|---|---|---|---|---|---|---|\n");
    let mut repos: Vec<&str> = runs.iter().filter_map(|r| r["repo"].as_str()).collect();
    repos.sort();
    repos.dedup();
    let mut rows = Vec::new();
    for repo in repos {
        let of = |arm: &str, key: &str| {
            median(
                runs.iter().filter(|r| r["repo"] == repo && r["arm"] == arm).filter_map(|r| r[key].as_f64()).collect(),
            )
        };
        let objects = runs.iter().find(|r| r["repo"] == repo).and_then(|r| r["objects"].as_u64()).unwrap_or(0);
        let (cg, ct) = (of("gixd", "cpu_us") / 1000.0, of("git", "cpu_us") / 1000.0);
        let (rg, rt) = (of("gixd", "peak_rss_kb") / 1024.0, of("git", "peak_rss_kb") / 1024.0);
        let row = format!(
            "| {repo} | {objects} | {cg:.1} | {ct:.1} | {} | {rg:.1} | {rt:.1} | {} |\n",
            ratio(ct, cg),
            ratio(rt, rg)
        );
        rows.push((cg / ct, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

/// Where `cargo xtask bench clone --repo` results on real repositories without a bitmap are kept
/// (moved there by hand from `CLONE_RESULTS`, which holds the corpus's).
pub const COMMIT_GRAPH_RESULTS: &str = "bench/results/clone-commit-graph.json";
