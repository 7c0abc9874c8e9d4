//! `cargo xtask bench bundles`: what bundle-uri saves the server. Per repository (cloned with
//! `--mirror`, one copy repacked by `gixd maintenance` without bundles and one with
//! `gixd.bundles`: the maintenance CPU of each, from getrusage), one gixd serves the copy with
//! bundles, and in alternating rounds a stock git clone takes it plainly and with
//! `--bundle-uri=<list>`: the server's CPU (schedstat of its threads), the bytes gixd sent
//! (its access log's `bytes`, bundles included) and the client's wall time. Run by hand.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::table::*;
use anyhow::{Context, Result, bail};
use bench_support::run::git;

pub const BUNDLE_RESULTS: &str = "bench/results/bundles.json";
pub const ARMS: [&str; 2] = ["plain clone", "bundle-uri clone"];

/// CPU of `gixd maintenance <repo>` (µs, from getrusage of the child).
fn maintenance_cpu_us(gixd: &Path, repo: &Path) -> Result<i64> {
    let before = crate::bench::children_cpu_us();
    bench_support::run::output(Command::new(gixd).arg("maintenance").arg(repo))?;
    Ok(crate::bench::children_cpu_us() - before)
}

/// The bytes gixd's access log records after line `from`.
fn logged_bytes(log: &Path, from: usize) -> Result<(u64, usize)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut bytes = 0;
    for line in &lines[from.min(lines.len())..] {
        let record: serde_json::Value = serde_json::from_str(line)?;
        bytes += record["bytes"].as_u64().unwrap_or(0);
    }
    Ok((bytes, lines.len()))
}

/// `cargo xtask bench bundles`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, gixd } = args;
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let scratch = crate::tree::Scratch::new("bench-bundles")?;
    let base = scratch.0.join("base");
    std::fs::create_dir_all(&base)?;
    let mut repos_meta = Vec::new();
    let mut names = Vec::new();
    for source in &repos {
        let source = source.canonicalize()?;
        // Named in URLs and directories: `+` of a mirror's name becomes `-`.
        let name = crate::bench::repo_name(&source).replace('+', "-");
        let with = base.join(format!("{name}.git"));
        let without = scratch.0.join(format!("{name}-without.git"));
        for dest in [&with, &without] {
            git(
                &scratch.0,
                &["clone", "-q", "--mirror", "--no-local", source.to_str().unwrap(), dest.to_str().unwrap()],
            )?;
        }
        git(&with, &["config", "gixd.bundles", "true"])?;
        // Alternated: the page cache favours neither.
        let cpu_without = maintenance_cpu_us(&gixd, &without)?;
        let cpu_with = maintenance_cpu_us(&gixd, &with)?;
        let bundle_bytes: u64 = std::fs::read_dir(with.join("gixd-bundles"))?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".bundle"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum();
        let objects = git(&with, &["count-objects", "-v"])?
            .lines()
            .find_map(|l| l.strip_prefix("in-pack: ").map(str::to_owned))
            .unwrap_or_default();
        eprintln!(
            "{name}: maintenance {cpu_without} µs without bundles, {cpu_with} µs with; bundle {bundle_bytes} bytes"
        );
        repos_meta.push(serde_json::json!({
            "repo": name, "objects": objects, "bundle_bytes": bundle_bytes,
            "maintenance_cpu_us": { "without bundles": cpu_without, "with bundles": cpu_with },
        }));
        names.push(name);
    }
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "gixd": format!("release build {}", gixd.display()),
            "how": "a mirror repacked by `gixd maintenance` with `gixd.bundles` (one full bundle); stock git clones it over HTTP plainly and with `--bundle-uri=<repo>/gixd-bundles/list`, one at a time; server CPU from the schedstat of gixd's threads, bytes from gixd's access log (bundle downloads included), client wall time; maintenance CPU with and without bundles from getrusage",
            "repos": repos_meta,
        }),
    )?;
    let log = scratch.0.join("access.log");
    let log_arg = format!("--access-log={}", log.display());
    let (mut child, addr) = crate::bench::serve_gixd(&gixd, &base, &[log_arg.as_ref()])?;
    let mut runs = Vec::new();
    let result = (|| -> Result<()> {
        for round in 0..rounds {
            for name in &names {
                for i in bench_support::run::round_order(ARMS.len(), round) {
                    let arm = ARMS[i];
                    let url = format!("http://{addr}/{name}.git");
                    let dest = scratch.0.join(format!("clone-{name}-{round}-{i}"));
                    let mut args = vec!["clone".to_owned(), "-q".to_owned(), "--bare".to_owned()];
                    if arm == "bundle-uri clone" {
                        args.push(format!("--bundle-uri={url}/gixd-bundles/list"));
                    }
                    args.extend([url.clone(), dest.display().to_string()]);
                    let (_, from) = logged_bytes(&log, usize::MAX)?;
                    let cpu_before = crate::bench::proc_cpu_us(child.id())?;
                    let started = Instant::now();
                    let status = Command::new("git").args(&args).status()?;
                    let wall_us = started.elapsed().as_micros() as u64;
                    let cpu_us = crate::bench::proc_cpu_us(child.id())? - cpu_before;
                    if !status.success() {
                        bail!("{arm} of {name} failed");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200)); // the log line lands
                    let (bytes, _) = logged_bytes(&log, from)?;
                    let bundles = git(&dest, &["for-each-ref", "refs/bundles/"])?.lines().count();
                    if arm == "bundle-uri clone" && bundles == 0 {
                        bail!("{name}: the bundle-uri clone did not use the bundle");
                    }
                    std::fs::remove_dir_all(&dest)?;
                    runs.push(serde_json::json!({
                        "repo": name, "arm": arm, "round": round, "cpu_us": cpu_us, "bytes": bytes, "wall_us": wall_us,
                    }));
                }
            }
            eprint!(".");
        }
        eprintln!();
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result?;
    crate::bench::finish(root, BUNDLE_RESULTS, conditions, runs)
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        BUNDLE_RESULTS,
        "`cargo xtask bench bundles --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench bundles")?;
    out.push_str(&format!(
        " gixd: {}. {} Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?")
    ));
    out.push_str("| repository | objects | bundle MiB | server CPU ms: plain | bundle-uri | bundle-uri ÷ plain | MiB sent: plain | bundle-uri | client wall s: plain | bundle-uri | bundle-uri ÷ plain | maintenance CPU with ÷ without bundles |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let med = |arm: &str, field: &str| {
            median(
                runs.iter()
                    .filter(|r| r["repo"] == name && r["arm"] == arm)
                    .filter_map(|r| r[field].as_f64())
                    .collect(),
            )
        };
        let [plain, bundled] = ARMS;
        let (cpu_p, cpu_b) = (med(plain, "cpu_us") / 1000.0, med(bundled, "cpu_us") / 1000.0);
        let (mib_p, mib_b) = (med(plain, "bytes") / 1048576.0, med(bundled, "bytes") / 1048576.0);
        let (wall_p, wall_b) = (med(plain, "wall_us") / 1e6, med(bundled, "wall_us") / 1e6);
        let m = &repo["maintenance_cpu_us"];
        let maintenance =
            ratio(m["without bundles"].as_f64().unwrap_or(f64::NAN), m["with bundles"].as_f64().unwrap_or(f64::NAN));
        rows.push((
            cpu_b / cpu_p,
            format!(
                "| {name} | {} | {:.1} | {cpu_p:.0} | {cpu_b:.0} | {} | {mib_p:.1} | {mib_b:.1} | {wall_p:.2} | {wall_b:.2} | {} | {maintenance} |\n",
                repo["objects"].as_str().unwrap_or("?"),
                repo["bundle_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                ratio(cpu_p, cpu_b),
                ratio(wall_p, wall_b),
            ),
        ));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}
