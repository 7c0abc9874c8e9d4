//! `cargo xtask bench patches`: build bench/patch-costs on stock crates and on vendor/, run the
//! two arms interleaved (order swapped every round) on one fixture, and store every run with its
//! conditions in bench/results/patch-costs.json; rendered into `upstream/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::table::*;
use super::{conditions, finish};
use crate::queue::Queue;
use bench_support::run::{output, round_order};
use serde_json::Value;

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

// The report.

/// The stock-vs-patched table of one measurement: counts (the same in every run of an arm) and
/// times in milliseconds (medians of microsecond fields).
fn stock_vs_patched(stock: &[&Value], patched: &[&Value], counts: &[(&str, &str)], times: &[(&str, &str)]) -> String {
    let mut out = String::from("| measure | stock crates | patched (vendor/) | patched ÷ stock |\n|---|---|---|---|\n");
    for (label, key) in counts {
        let (s, p) = (count(stock, key), count(patched, key));
        let r = match (s.parse::<f64>(), p.parse::<f64>()) {
            (Ok(s), Ok(p)) => ratio(s, p),
            _ => "—".into(),
        };
        out.push_str(&format!("| {label} | {s} | {p} | {r} |\n"));
    }
    let ms = |runs: &[&Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect()) / 1000.0;
    for (label, key) in times {
        let (s, p) = (ms(stock, key), ms(patched, key));
        out.push_str(&format!("| {label} | {s:.2} | {p:.2} | {} |\n", ratio(s, p)));
    }
    out
}

pub fn render_patch_costs(root: &Path) -> Result<String> {
    let doc = match load(root, RESULTS, "`cargo xtask bench patches`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let runs = doc["runs"].as_array().context("runs")?;
    let arm = |name: &str| runs.iter().filter(|r| r["arm"] == name).collect::<Vec<_>>();
    let (stock, patched) = (arm("stock"), arm("patched"));
    let c = &doc["conditions"];
    let mut out = conditions_line(c, "cargo xtask bench patches");
    out.push_str(&versions_line(c));
    out.push_str(&format!(
        " {}. Fixture: the deterministic `patch-costs` repository (bench/patch-costs), pack of `{}`'s objects with `thread_limit: Some(1)`.\n\n",
        c["rustc"].as_str().unwrap_or("?"),
        c["rev"].as_str().unwrap_or("?"),
    ));
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[
            ("threads started during generation", "threads_started"),
            ("objects selected", "selected_objects"),
            ("pack entries written", "pack_entries"),
            ("entries copied from the pack", "copied_from_pack"),
            ("entries decoded and re-deflated", "re_deflated"),
            ("pack bytes", "pack_bytes"),
        ],
        &[("process CPU per generation, median (ms)", "cpu_us"), ("wall per generation, median (ms)", "wall_us")],
    ));
    Ok(out)
}

/// The results of `cargo xtask bench patches` if they hold `key` (a measurement added after the
/// first runs): the document, or the NOT MEASURED text to render instead.
fn patch_results(root: &Path, key: &str, what: &str) -> Result<Result<Value, String>> {
    let doc = match load(root, RESULTS, "`cargo xtask bench patches`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(Err(not_measured)),
    };
    if doc["runs"].as_array().context("runs")?.iter().all(|r| r.get(key).is_none()) {
        return Ok(Err(format!(
            "NOT MEASURED: {} predates the {what} measurement. Run `cargo xtask bench patches`.\n",
            RESULTS
        )));
    }
    Ok(Ok(doc))
}

/// The stock and the patched arm's runs of a `cargo xtask bench patches` document.
fn stock_and_patched(doc: &Value) -> Result<(Vec<&Value>, Vec<&Value>)> {
    let runs = doc["runs"].as_array().context("runs")?;
    let arm = |name: &str| runs.iter().filter(|r| r["arm"] == name).collect::<Vec<_>>();
    Ok((arm("stock"), arm("patched")))
}

/// The conditions and crate versions of a `cargo xtask bench patches` run, as a sentence.
fn patch_conditions(doc: &Value) -> String {
    let c = &doc["conditions"];
    let mut out = conditions_line(c, "cargo xtask bench patches");
    out.push_str(&versions_line(c));
    out
}

/// Indexing a pack as a push is indexed, from the same run as `patch-costs`.
pub fn render_index_costs(root: &Path) -> Result<String> {
    let doc = match patch_results(root, "index_threads_started", "indexing")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (stock, patched) = stock_and_patched(&doc)?;
    let mut out = patch_conditions(&doc);
    out.push_str(" Fixture: the `patch-costs` repository's pack, indexed by `Bundle::write_to_directory` with `thread_limit: Some(1)` (threads seen by a sampler of /proc/self/task during the call).\n\n");
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[("objects indexed", "index_objects"), ("threads started during indexing", "index_threads_started")],
        &[
            ("process CPU per indexing, median (ms)", "index_cpu_us"),
            ("wall per indexing, median (ms)", "index_wall_us"),
        ],
    ));
    Ok(out)
}

pub fn render_decode_costs(root: &Path) -> Result<String> {
    let doc = match patch_results(root, "decode_capped_reversed_deltas_applied", "decoding")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (stock, patched) = stock_and_patched(&doc)?;
    let c = &doc["conditions"];
    let mut out = patch_conditions(&doc);
    out.push_str(&format!(
        " Fixture: the `patch-costs` repository's pack (`git repack -adf --window=50 --depth=50`); every object of `{}`, in `git rev-list --objects` order, decoded by `File::decode_entry` through each of gix's delta caches: the list of 64 objects a repository gets by default, and the cache capped by bytes (96 MiB here, git's default) it gets with `core.deltaBaseCacheLimit` set — the one that asks for chain bases; with it also in the opposite order (oldest versions first, as a walk from old tags meets the deep end of chains first).\n\n",
        c["rev"].as_str().unwrap_or("?"),
    ));
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[
            ("objects decoded", "decode_objects"),
            ("deltas applied, `StaticLinkedList<64>`", "decode_deltas_applied"),
            ("deltas applied, `MemoryCappedHashmap`", "decode_capped_deltas_applied"),
            ("deltas applied, `MemoryCappedHashmap`, opposite order", "decode_capped_reversed_deltas_applied"),
        ],
        &[
            ("process CPU per pass, `StaticLinkedList<64>`, median (ms)", "decode_cpu_us"),
            ("process CPU per pass, `MemoryCappedHashmap`, median (ms)", "decode_capped_cpu_us"),
            (
                "process CPU per pass, `MemoryCappedHashmap`, opposite order, median (ms)",
                "decode_capped_reversed_cpu_us",
            ),
        ],
    ));
    Ok(out)
}

/// Pack entries made of loose objects, from the same run as `patch-costs`.
pub fn render_loose_entry_costs(root: &Path) -> Result<String> {
    let doc = match patch_results(root, "loose_stored_cpu_us", "loose entries")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (stock, patched) = stock_and_patched(&doc)?;
    let mut out = patch_conditions(&doc);
    out.push_str(" Fixture: every object of the `patch-costs` repository's pack written loose by `git unpack-objects` into a scratch repository, then made into pack entries by `iter_from_counts` with `thread_limit: Some(1)` at the default compression, then at level 0 (stored, as a writer that searches deltas next asks for): each read, inflated and deflated again by `Entry::from_data`; the entries' bytes summed.\n\n");
    out.push_str(&stock_vs_patched(
        &stock,
        &patched,
        &[
            ("loose objects", "loose_objects"),
            ("entries deflated from the object's data", "loose_re_deflated"),
            ("entries' compressed bytes", "loose_entry_bytes"),
            ("entries' bytes, level 0", "loose_stored_entry_bytes"),
        ],
        &[
            ("process CPU per pass, median (ms)", "loose_cpu_us"),
            ("process CPU per pass, level 0, median (ms)", "loose_stored_cpu_us"),
        ],
    ));
    Ok(out)
}
