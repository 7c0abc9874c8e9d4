//! `cargo xtask bench patches`: build bench/patch-costs on stock crates and on vendor/, run the
//! two arms interleaved (order swapped every round) on one fixture, and store every run with its
//! conditions in bench/results/patch-costs.json; rendered into `upstream/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::{conditions, finish};
use crate::queue::Queue;
use bench_support::run::{output, round_order};

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

/// `cargo xtask bench patches`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 9)]
    pub rounds: usize,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds } = args;
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
