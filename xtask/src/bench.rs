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
