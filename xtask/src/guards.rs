//! `cargo xtask patches guards`: every patch's guard tests (its `Guard:` header) run twice —
//! without that patch (its crate rebuilt from pristine + the crate's other patches) they must
//! fail, with the whole queue they must pass. That is the proof that a guard still guards after a
//! rebase, on the exact release the queue is on.
//!
//! `[patch]` entries of a `--config` defer to the manifest's, so the run without a patch is a copy
//! of the workspace (target/guards/ws) whose `[patch.crates-io]` points at the rebuilt crate; it
//! builds into target/guards/target. The run with the queue is the workspace itself.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::queue::{Patch, Queue, header_field};
use crate::tree;

/// The test binaries (`tests/tests/<name>.rs`) a `Guard:` header names.
pub fn guard_tests(patch: &Patch) -> Vec<String> {
    header_field(&patch.header, "Guard")
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|w| {
            w.trim_matches(|c: char| c == ',' || c == ';')
                .strip_prefix("tests/tests/")?
                .strip_suffix(".rs")
                .map(str::to_owned)
        })
        .collect()
}

/// The lines of a test run that say why it failed: the panic and its message, compile errors, FAIL lines.
pub fn evidence(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim();
        if t.starts_with("FAIL [")
            || t.starts_with("error[E")
            || (t.starts_with("error:")
                && !t.starts_with("error: could not compile")
                && !t.starts_with("error: test run failed"))
        {
            out.push(t.to_owned());
        } else if t.contains("panicked at") {
            out.push(t.to_owned());
            // The message follows the location line; assertion messages run over a few lines.
            out.extend(
                lines[i + 1..]
                    .iter()
                    .take(4)
                    .map(|l| l.trim())
                    .take_while(|l| !l.is_empty() && !l.starts_with("note:"))
                    .map(str::to_owned),
            );
        } else if t.starts_with("Summary [") {
            out.push(t.to_owned());
        }
    }
    out.dedup();
    out
}

fn nextest(dir: &Path, tests: &[String], target: Option<&Path>) -> Result<(bool, String)> {
    let mut cmd = Command::new("cargo");
    cmd.args(["nextest", "run", "-p", "gixd-tests", "--no-fail-fast", "--color", "never"]);
    for t in tests {
        cmd.args(["--test", t]);
    }
    if let Some(target) = target {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let out = cmd.current_dir(dir).output().context("running cargo nextest")?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

/// A copy of the workspace (no target/) whose `[patch.crates-io]` takes `krate` from `tree`.
/// Every workspace member is copied (as the root manifest lists them), and vendor/.
fn workspace_without(root: &Path, ws: &Path, krate: &str, unpublished: bool, tree_dir: &Path) -> Result<()> {
    let mut doc: toml_edit::DocumentMut = std::fs::read_to_string(root.join("Cargo.toml"))?.parse()?;
    let members: Vec<String> = doc["workspace"]["members"]
        .as_array()
        .context("[workspace] members in Cargo.toml")?
        .iter()
        .filter_map(|m| m.as_str().map(str::to_owned))
        .collect();
    for entry in members.iter().map(String::as_str).chain(["vendor"]) {
        let dest = ws.join(entry);
        if dest.exists() {
            std::fs::remove_dir_all(&dest)?;
        }
        tree::copy_dir(&root.join(entry), &dest)?;
    }
    std::fs::copy(root.join("Cargo.lock"), ws.join("Cargo.lock"))?;
    let mut inline = toml_edit::InlineTable::new();
    inline.insert("path", tree_dir.display().to_string().into());
    if unpublished {
        // Not a patch of a registry crate: the workspace's own path dependency moves.
        doc["workspace"]["dependencies"][krate] = toml_edit::value(inline);
    } else {
        doc["patch"]["crates-io"][krate] = toml_edit::value(inline);
    }
    std::fs::write(ws.join("Cargo.toml"), doc.to_string())?;
    Ok(())
}

pub fn run(root: &Path, only: Option<&str>) -> Result<()> {
    let queue = Queue::load(&root.join("patches"))?;
    if let Some(file) = only
        && !queue.patches.iter().any(|p| p.file == file)
    {
        bail!("{file} is not in patches/series");
    }
    let base = root.join("target/guards");
    let ws = base.join("ws");
    std::fs::create_dir_all(&ws)?;
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for p in queue.patches.iter().filter(|p| only.is_none_or(|f| f == p.file)) {
        let tests = guard_tests(p);
        if tests.is_empty() {
            failures.push(format!("{}: its Guard: header names no tests/tests/<name>.rs", p.file));
            continue;
        }
        let mut others: Vec<&Patch> = queue.of_crate(&p.krate).filter(|o| o.file != p.file).collect();
        let without = base.join("without").join(&p.krate);
        // A later patch of the crate that builds on this one (its hunks need this one's code)
        // cannot stay without it: then the crate's patches before it only, and the label says so.
        let mut dropped = Vec::new();
        if let Err(err) = crate::build_tree(root, &p.krate, &p.version, &others, &without) {
            let position = |file: &str| queue.patches.iter().position(|q| q.file == file);
            let earlier: Vec<&Patch> =
                others.iter().copied().filter(|o| position(&o.file) < position(&p.file)).collect();
            if earlier.len() == others.len()
                || crate::build_tree(root, &p.krate, &p.version, &earlier, &without).is_err()
            {
                failures.push(format!("{}: the queue without it does not apply ({err:#}); not proven red", p.file));
                continue;
            }
            dropped = others.iter().filter(|o| position(&o.file) > position(&p.file)).map(|o| o.file.clone()).collect();
            others = earlier;
        }
        let mut label = if others.is_empty() {
            format!("stock {} {}", p.krate, p.version)
        } else {
            format!(
                "{} {} + {}",
                p.krate,
                p.version,
                others.iter().map(|o| o.file.as_str()).collect::<Vec<_>>().join(" + ")
            )
        };
        if !dropped.is_empty() {
            let verb = if dropped.len() == 1 { "builds" } else { "build" };
            label.push_str(&format!(" (also without {}, which {verb} on it)", dropped.join(", ")));
        }
        workspace_without(root, &ws, &p.krate, p.version == crate::queue::UNPUBLISHED, &without)?;
        println!("{}: guard {} on {label} (without the patch)…", p.file, tests.join(", "));
        let (ok, text) = nextest(&ws, &tests, Some(&base.join("target")))?;
        let lines = evidence(&text);
        let compiled = !lines.iter().any(|l| l.starts_with("error[E") || l.starts_with("error:"));
        if ok {
            failures.push(format!(
                "{}: its guard passes without it, on {label}: the patch or the guard is not needed any more",
                p.file
            ));
            report.push(format!("NOT RED  {} on {label}", p.file));
        } else {
            let how = if compiled { "fails" } else { "does not compile (the API is the patch's)" };
            report.push(format!("RED      {} — {} {how} on {label}:", p.file, tests.join(", ")));
            report.extend(lines.iter().map(|l| format!("           {l}")));
        }
        println!("{}: guard {} with the whole queue…", p.file, tests.join(", "));
        let (ok, text) = nextest(root, &tests, None)?;
        let lines = evidence(&text);
        if ok {
            report.push(format!("GREEN    {} — {} pass with the queue:", p.file, tests.join(", ")));
        } else {
            failures.push(format!("{}: its guard fails with the whole queue", p.file));
            report.push(format!("NOT GREEN {} with the queue:", p.file));
        }
        report.extend(lines.iter().map(|l| format!("           {l}")));
    }
    println!("\n== guards");
    for l in &report {
        println!("{l}");
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("{f}");
        }
        bail!("{} guard problem(s)", failures.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_header_names_test_binaries() {
        let p = Patch::parse(
            "x",
            "Crate: a 1.0.0\nGuard: tests/tests/serial_stepwise.rs (stepwise_with_thread_limit_one_spawns_no_thread)\n",
        )
        .unwrap();
        assert_eq!(guard_tests(&p), vec!["serial_stepwise"]);
        let p = Patch::parse("x", "Crate: a 1.0.0\nGuard: tests/tests/a.rs, tests/tests/b.rs\n").unwrap();
        assert_eq!(guard_tests(&p), vec!["a", "b"]);
    }

    #[test]
    fn evidence_keeps_the_panic_and_its_message() {
        let out = "   Compiling x\n        FAIL [   0.1s] gixd-tests::t a_test\nthread 'a_test' panicked at tests/tests/t.rs:5:3:\nassertion `left == right` failed: started threads\n  left: 2\n right: 0\nnote: run with `RUST_BACKTRACE=1`\n     Summary [   0.2s] 1 test run: 0 passed, 1 failed\n";
        assert_eq!(
            evidence(out),
            vec![
                "FAIL [   0.1s] gixd-tests::t a_test",
                "thread 'a_test' panicked at tests/tests/t.rs:5:3:",
                "assertion `left == right` failed: started threads",
                "left: 2",
                "right: 0",
                "Summary [   0.2s] 1 test run: 0 passed, 1 failed",
            ]
        );
    }
}
