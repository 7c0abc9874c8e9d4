//! Repository tooling. `cargo xtask patches …` maintains the patch queue on gitoxide crates:
//!
//! - `patches/series` lists the patches in apply order; each is a header plus a unified diff
//!   against the pristine published source of one exact crate version (`queue`).
//! - `vendor/<crate>/` is pristine + that crate's patches, reached through `[patch.crates-io]`.
//! - pristine sources come through cargo itself (`tree::pristine`), cached in `target/xtask/`.

mod appliance;
mod bench;
mod bitmaps_bench;
mod narrow;
mod relay;
mod push_bench;
mod queue;
mod report;
mod tree;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use queue::{Patch, Queue};
use std::path::{Path, PathBuf};
use std::process::Command;
use tree::Scratch;

#[derive(Parser)]
#[command(name = "xtask", about = "gixd's repository tooling")]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand)]
enum Top {
    /// The patch queue on gitoxide crates (see PATCH.md).
    Patches {
        #[command(subcommand)]
        command: PatchCmd,
    },
    /// Benchmarks that compare arms side by side in one run and store their results.
    Bench {
        #[command(subcommand)]
        command: BenchCmd,
    },
    /// Build the deterministic corpus (target/corpus/) and list it with object counts.
    Corpus,
    /// Build gixd twice from the committed tree, check both binaries are identical, and pack the
    /// reproducible appliance tarball (target/appliance/).
    Appliance,
    /// Run a command and write the CPU and peak RSS of it and its descendants to a file
    /// (the git arm of `bench clone` wraps git-upload-pack with it).
    #[command(hide = true)]
    Rusage {
        #[arg(long)]
        out: PathBuf,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// List the wire-suite cases whose snapshot moved in the last test run (from insta's
    /// pending `.snap.new` files).
    Moved,
    /// Render result files into the documents that quote them (upstream/ reports).
    Report {
        /// Only verify that the documents match the results.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Pack generation on stock crates vs the patched vendor/ (threads, re-deflated objects, CPU).
    Patches {
        #[arg(long, default_value_t = 9)]
        rounds: usize,
    },
    /// Server CPU and peak RSS of one clone: gixd over HTTP vs git upload-pack (file://).
    Clone {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Bare repositories to clone (default: the corpus's linear and wide, ≥ 10 000 objects).
        #[arg(long)]
        repo: Vec<PathBuf>,
    },
    /// Write-family syscalls per clone: gixd over HTTP vs git http-backend (lighttpd) and git daemon.
    Writes {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// `--depth 1` and `--filter=blob:none` clones over git://: gixd vs git daemon, objects,
    /// bytes (one counting relay) and server CPU.
    Narrow {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Bare repository to clone (default: the corpus's linear, ≥ 10 000 objects).
        #[arg(long)]
        repo: Option<PathBuf>,
    },
    /// Server CPU per clone with and without pack bitmaps: gixd vs git upload-pack, on a generated
    /// ≥ 100 000-object repository and the corpus's linear one.
    Bitmaps {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Server CPU of a one-commit push: gixd over HTTP vs git receive-pack.
    Push {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Bare repository to push into (default: the corpus's linear, ≥ 10 000 objects).
        #[arg(long)]
        repo: Option<PathBuf>,
    },
    /// Server CPU per clone at 1…32 concurrent clients, under a CPU quota and pinned.
    Ramp {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
        clients: Vec<usize>,
    },
}

#[derive(Subcommand)]
enum PatchCmd {
    /// Rebuild vendor/ from pristine sources + patches/, and [patch.crates-io] to match.
    Apply,
    /// Fail with a diff when vendor/ differs by one byte from pristine + patches/.
    Check,
    /// Regenerate each named crate's last patch from its edited vendor/ tree (default: all).
    Refresh { crates: Vec<String> },
    /// Move patched crates to new upstream versions and re-apply the series.
    Rebase {
        /// The crate to move (omit with --all).
        #[arg(long = "crate", required_unless_present = "all")]
        krate: Option<String>,
        /// The version to move it to.
        #[arg(long, required_unless_present = "all")]
        to: Option<String>,
        /// Move every patched crate to the version the workspace's requirements now resolve to
        /// (bump gix in Cargo.toml first to move the whole family).
        #[arg(long, conflicts_with_all = ["krate", "to"])]
        all: bool,
        /// Skip the test suite that runs after a successful rebase.
        #[arg(long)]
        no_test: bool,
    },
}

fn main() {
    if let Err(err) = run(Cli::parse()) {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    // `rusage` wraps a server command wherever git starts it: it needs no checkout.
    if let Top::Rusage { out, command } = &cli.command {
        return bench::rusage(out, command);
    }
    let root = repo_root();
    match cli.command {
        Top::Patches { command } => match command {
            PatchCmd::Apply => apply(&root),
            PatchCmd::Check => check(&root),
            PatchCmd::Refresh { crates } => refresh(&root, &crates),
            PatchCmd::Rebase { krate, to, all, no_test } => {
                let moves = match (krate, to) {
                    (Some(k), Some(v)) => vec![(k, v)],
                    _ if all => resolved_versions(&root)?,
                    _ => bail!("give --crate and --to, or --all"),
                };
                rebase(&root, &moves, !no_test)
            }
        },
        Top::Bench { command: BenchCmd::Patches { rounds } } => bench::patches(&root, rounds),
        Top::Bench { command: BenchCmd::Clone { rounds, repo } } => bench::clone(&root, rounds, repo),
        Top::Rusage { .. } => unreachable!("handled above"),
        Top::Bench { command: BenchCmd::Writes { rounds } } => bench::writes(&root, rounds),
        Top::Bench { command: BenchCmd::Ramp { rounds, clients } } => bench::ramp(&root, rounds, clients),
        Top::Bench { command: BenchCmd::Narrow { rounds, repo } } => narrow::run(&root, rounds, repo),
        Top::Bench { command: BenchCmd::Push { rounds, repo } } => push_bench::run(&root, rounds, repo),
        Top::Bench { command: BenchCmd::Bitmaps { rounds } } => bitmaps_bench::run(&root, rounds),
        Top::Report { check } => report::run(&root, check),
        Top::Moved => {
            let moved = moved_snapshots(&root)?;
            if moved.is_empty() {
                println!("no snapshot moved");
            }
            for line in moved {
                println!("{line}");
            }
            Ok(())
        }
        Top::Appliance => appliance::build(&root),
        Top::Corpus => {
            let status = Command::new("cargo")
                .args(["run", "--release", "--quiet", "-p", "gixd-tests", "--bin", "corpus"])
                .current_dir(&root)
                .status()?;
            if !status.success() {
                bail!("building the corpus failed");
            }
            Ok(())
        }
    }
}

/// The checkout this runs in: the nearest directory, from the current one upwards, that holds
/// `patches/series` (found at run time, so a binary built in another checkout cannot act here).
fn repo_root() -> PathBuf {
    let cwd = std::env::current_dir().expect("a current directory");
    cwd.ancestors()
        .find(|d| d.join("patches/series").is_file() && d.join("Cargo.toml").is_file())
        .unwrap_or_else(|| panic!("no gixd checkout (patches/series) at or above {}", cwd.display()))
        .to_owned()
}

fn pristine_cache(root: &Path) -> PathBuf {
    root.join("target/xtask/pristine")
}

/// Pristine source of `krate` at `version` with `patches` applied in order, built in `out`.
/// A patch that does not apply stops everything with the hunk that failed.
fn build_tree(root: &Path, krate: &str, version: &str, patches: &[&Patch], out: &Path) -> Result<()> {
    let pristine = tree::pristine(&pristine_cache(root), krate, version)?;
    tree::replace_dir(&pristine, out)?;
    for p in patches {
        if let Err(failure) = tree::git_apply(out, &p.diff, false, false)? {
            bail!(conflict_message(p, krate, version, &failure));
        }
    }
    Ok(())
}

fn conflict_message(p: &Patch, krate: &str, version: &str, failure: &tree::ApplyFailure) -> String {
    let hunk = tree::failing_hunk(&p.diff, &failure.output).unwrap_or_else(|| "(hunk not identified)\n".into());
    format!(
        "patch {} ('{}') does not apply to {krate} {version}.\n\ngit apply said:\n{}\nthe hunk:\n{}\nNothing was changed: vendor/ and patches/ are as they were. Port the patch by hand (edit vendor/{krate} on the new version, then `cargo xtask patches refresh {krate}`).",
        p.file,
        p.subject(),
        failure.output.trim_end(),
        hunk
    )
}

fn apply(root: &Path) -> Result<()> {
    let queue = Queue::load(&root.join("patches"))?;
    let scratch = Scratch::new("apply")?;
    for (krate, version) in queue.crates() {
        let patches: Vec<&Patch> = queue.of_crate(&krate).collect();
        let out = scratch.0.join(&krate);
        build_tree(root, &krate, &version, &patches, &out)?;
        tree::replace_dir(&out, &root.join("vendor").join(&krate))?;
        println!("vendor/{krate}: {krate} {version} + {} patch(es)", patches.len());
    }
    for stray in stray_vendor_dirs(root, &queue)? {
        std::fs::remove_dir_all(root.join("vendor").join(&stray))?;
        println!("vendor/{stray}: removed (no patch in the series)");
    }
    sync_patch_table(root, &queue)?;
    Ok(())
}

fn check(root: &Path) -> Result<()> {
    let queue = Queue::load(&root.join("patches"))?;
    let scratch = Scratch::new("check")?;
    let mut problems = Vec::new();
    for (krate, version) in queue.crates() {
        let patches: Vec<&Patch> = queue.of_crate(&krate).collect();
        let expected = scratch.0.join(&krate);
        build_tree(root, &krate, &version, &patches, &expected)?;
        let vendored = root.join("vendor").join(&krate);
        if !vendored.is_dir() {
            problems.push(format!("vendor/{krate} is missing: run `cargo xtask patches apply`"));
            continue;
        }
        let diff = tree::git_diff(&expected, &vendored)?;
        if diff.is_empty() {
            println!("vendor/{krate}: identical to {krate} {version} + {} patch(es)", patches.len());
        } else {
            problems.push(format!(
                "vendor/{krate} differs from {krate} {version} + patches/ (a = expected, b = vendor/{krate}):\n{diff}\n\
                 Either `cargo xtask patches refresh {krate}` to keep the edit as a patch, or `cargo xtask patches apply` to drop it."
            ));
        }
    }
    for stray in stray_vendor_dirs(root, &queue)? {
        problems.push(format!("vendor/{stray} is not patched by the series: remove it (`cargo xtask patches apply`)"));
    }
    let want = patch_table_wanted(&queue);
    let have = patch_table(root)?;
    if want != have {
        problems.push(format!(
            "[patch.crates-io] in Cargo.toml lists {have:?}, the series patches {want:?}: run `cargo xtask patches apply`"
        ));
    }
    if problems.is_empty() {
        println!("patch queue: ok ({} patch(es) on {} crate(s))", queue.patches.len(), queue.crates().len());
        Ok(())
    } else {
        for p in &problems {
            eprintln!("{p}");
        }
        bail!("patch queue check failed: {} problem(s)", problems.len())
    }
}

fn refresh(root: &Path, only: &[String]) -> Result<()> {
    let mut queue = Queue::load(&root.join("patches"))?;
    let scratch = Scratch::new("refresh")?;
    for (krate, version) in queue.crates() {
        if !only.is_empty() && !only.contains(&krate) {
            continue;
        }
        let patches: Vec<&Patch> = queue.of_crate(&krate).collect();
        let (last, earlier) = patches.split_last().expect("a crate in the queue has a patch");
        let base = scratch.0.join(&krate);
        build_tree(root, &krate, &version, earlier, &base)?;
        let diff = tree::git_diff(&base, &root.join("vendor").join(&krate))?;
        let file = last.file.clone();
        let slot = queue.patches.iter_mut().find(|p| p.file == file).expect("patch is in the queue");
        if slot.diff == diff {
            println!("{file}: unchanged");
        } else {
            slot.diff = diff;
            println!("{file}: regenerated from vendor/{krate}");
        }
    }
    queue.save()
}

/// For each `(crate, version)`: re-apply that crate's patches on the new pristine source. A patch
/// whose reverse applies cleanly is already upstream: it leaves the series and is recorded in
/// `patches/landed.md`. Any conflict stops before anything is written.
fn rebase(root: &Path, moves: &[(String, String)], run_tests: bool) -> Result<()> {
    let mut queue = Queue::load(&root.join("patches"))?;
    let scratch = Scratch::new("rebase")?;
    let mut landed_rows = String::new();
    let date = today()?;
    let mut new_trees = Vec::new();
    for (krate, version) in moves {
        let Some(old_version) = queue.crates().into_iter().find(|(k, _)| k == krate).map(|(_, v)| v) else {
            bail!("{krate} is not patched by the series");
        };
        if &old_version == version {
            println!("{krate}: already at {version}");
            continue;
        }
        println!("{krate}: {old_version} -> {version}");
        let pristine = tree::pristine(&pristine_cache(root), krate, version)?;
        let work = scratch.0.join(krate);
        tree::replace_dir(&pristine, &work)?;
        let mut kept = Vec::new();
        for p in queue.of_crate(krate) {
            if tree::git_apply(&work, &p.diff, true, true)?.is_ok() {
                println!("  LANDED   {} ('{}'): already in {krate} {version}; leaving the series", p.file, p.subject());
                landed_rows.push_str(&queue::landed_row(p, version, &date));
                continue;
            }
            let before = scratch.0.join(format!("{krate}.before"));
            tree::replace_dir(&work, &before)?;
            if let Err(failure) = tree::git_apply(&work, &p.diff, false, false)? {
                bail!(conflict_message(p, krate, version, &failure));
            }
            let diff = tree::git_diff(&before, &work)?;
            println!("  APPLIED  {} ('{}')", p.file, p.subject());
            kept.push(p.retarget(version, diff));
        }
        new_trees.push((krate.clone(), work, kept));
    }
    // Everything applied: now write the queue, vendor/ and the landed record.
    for (krate, work, kept) in new_trees {
        let landed: Vec<Patch> = queue
            .of_crate(&krate)
            .filter(|p| !kept.iter().any(|k| k.file == p.file))
            .cloned()
            .collect();
        for p in &landed {
            let from = queue.dir.join(&p.file);
            let to = queue.dir.join("landed").join(&p.file);
            std::fs::create_dir_all(to.parent().expect("has a parent"))?;
            std::fs::rename(&from, &to).with_context(|| format!("moving {} to landed/", p.file))?;
        }
        queue.patches.retain(|p| p.krate != krate || kept.iter().any(|k| k.file == p.file));
        for k in kept {
            let slot = queue.patches.iter_mut().find(|p| p.file == k.file).expect("kept patch is in the queue");
            *slot = k;
        }
        let vendored = root.join("vendor").join(&krate);
        if queue.of_crate(&krate).next().is_some() {
            tree::replace_dir(&work, &vendored)?;
        } else if vendored.exists() {
            std::fs::remove_dir_all(&vendored)?;
            println!("  vendor/{krate} removed: nothing of ours is left on it");
        }
    }
    queue.save()?;
    if !landed_rows.is_empty() {
        let path = queue.dir.join("landed.md");
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|_| LANDED_PREAMBLE.to_owned());
        text.push_str(&landed_rows);
        std::fs::write(&path, text)?;
    }
    sync_patch_table(root, &queue)?;
    for (krate, version) in moves {
        // Point the lock file at the new version (patched from vendor/ or, if nothing is left, the registry's).
        let _ = Command::new("cargo").args(["update", "--quiet", "-p", krate, "--precise", version]).current_dir(root).status();
    }
    check(root)?;
    if run_tests {
        println!("running the test suite, with the wire suite, as the rebase's gate");
        let status = Command::new("cargo")
            .args(["nextest", "run", "--workspace", "--no-fail-fast"])
            // Mismatching snapshots are written beside the reviewed ones, so they can be listed.
            .env("INSTA_UPDATE", "new")
            .current_dir(root)
            .status()
            .context("running cargo nextest")?;
        let moved = moved_snapshots(root)?;
        for line in &moved {
            println!("  SNAPSHOT MOVED  {line}");
        }
        if !status.success() {
            bail!(
                "the rebase applied, but the test suite failed ({} wire case(s) moved): read the failures before committing",
                moved.len()
            );
        }
    }
    Ok(())
}

/// The wire-suite cases whose pending snapshot (`.snap.new`) differs from the reviewed one, as
/// `<snapshot>: <case line>` (the line as it is now).
fn moved_snapshots(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("tests/tests/snapshots");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    let mut pending: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "new"))
        .collect();
    pending.sort();
    for new in pending {
        let old = new.with_extension("");
        let name = old.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let new_text = std::fs::read_to_string(&new)?;
        let old_text = std::fs::read_to_string(&old).unwrap_or_default();
        let body = |t: &str| t.splitn(3, "---").nth(2).unwrap_or("").lines().map(str::to_owned).collect::<Vec<_>>();
        let (old_lines, new_lines) = (body(&old_text), body(&new_text));
        for line in new_lines.iter().filter(|l| !l.trim().is_empty() && !old_lines.contains(l)) {
            out.push(format!("{name}: {line}"));
        }
    }
    Ok(out)
}

const LANDED_PREAMBLE: &str = "# Patches upstream shipped\n\n\
Written by `cargo xtask patches rebase` when a patch's reverse applies cleanly to a new release.\n\
The patch files themselves are kept in `patches/landed/`.\n\n\
| patch | file | carried on | shipped in | recorded |\n|---|---|---|---|---|\n";

fn today() -> Result<String> {
    let out = Command::new("date").args(["-u", "+%Y-%m-%d"]).output()?;
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

fn stray_vendor_dirs(root: &Path, queue: &Queue) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join("vendor")) else {
        return Ok(out);
    };
    for e in entries {
        let name = e?.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && !queue.crates().iter().any(|(k, _)| *k == name) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

fn patch_table_wanted(queue: &Queue) -> Vec<(String, String)> {
    let mut v: Vec<_> = queue.crates().into_iter().map(|(k, _)| (k.clone(), format!("vendor/{k}"))).collect();
    v.sort();
    v
}

/// `[patch.crates-io]` of the root manifest as (crate, path) pairs.
fn patch_table(root: &Path) -> Result<Vec<(String, String)>> {
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(root.join("Cargo.toml"))?.parse()?;
    let mut v = Vec::new();
    if let Some(t) = doc.get("patch").and_then(|p| p.get("crates-io")).and_then(|t| t.as_table_like()) {
        for (k, item) in t.iter() {
            let path = item.get("path").and_then(|p| p.as_str()).unwrap_or_default().to_owned();
            v.push((k.to_owned(), path));
        }
    }
    v.sort();
    Ok(v)
}

/// Make `[patch.crates-io]` name exactly the vendored crates, keeping its comments.
fn sync_patch_table(root: &Path, queue: &Queue) -> Result<()> {
    if patch_table(root)? == patch_table_wanted(queue) {
        return Ok(());
    }
    let path = root.join("Cargo.toml");
    let mut doc: toml_edit::DocumentMut = std::fs::read_to_string(&path)?.parse()?;
    let table = doc["patch"]["crates-io"].or_insert(toml_edit::table());
    let table = table.as_table_mut().context("[patch.crates-io] is a table")?;
    let wanted = patch_table_wanted(queue);
    let stale: Vec<String> = table.iter().map(|(k, _)| k.to_owned()).filter(|k| !wanted.iter().any(|(w, _)| w == k)).collect();
    for k in stale {
        table.remove(&k);
    }
    for (k, p) in wanted {
        let mut inline = toml_edit::InlineTable::new();
        inline.insert("path", p.into());
        table.insert(&k, toml_edit::value(inline));
    }
    std::fs::write(&path, doc.to_string())?;
    println!("Cargo.toml: [patch.crates-io] updated");
    Ok(())
}

/// The versions the workspace's own requirements resolve to today, for each patched crate:
/// a throwaway manifest with `[workspace.dependencies]` as its dependencies and no patches.
fn resolved_versions(root: &Path) -> Result<Vec<(String, String)>> {
    let queue = Queue::load(&root.join("patches"))?;
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(root.join("Cargo.toml"))?.parse()?;
    let deps = doc["workspace"]["dependencies"].as_table().context("[workspace.dependencies]")?;
    let scratch = Scratch::new("resolve")?;
    std::fs::create_dir_all(scratch.0.join("src"))?;
    std::fs::write(scratch.0.join("src/lib.rs"), "")?;
    let mut manifest = String::from("[package]\nname = \"resolve\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n[dependencies]\n");
    for (k, v) in deps.iter() {
        if k.starts_with("gix") {
            manifest.push_str(&format!("{k} = {}\n", v.to_string().trim()));
        }
    }
    std::fs::write(scratch.0.join("Cargo.toml"), manifest)?;
    let status = Command::new("cargo").args(["generate-lockfile", "--quiet"]).current_dir(&scratch.0).status()?;
    if !status.success() {
        bail!("could not resolve the workspace's gix requirements");
    }
    let lock: toml_edit::DocumentMut = std::fs::read_to_string(scratch.0.join("Cargo.lock"))?.parse()?;
    let mut out = Vec::new();
    for (krate, _) in queue.crates() {
        let packages = lock["package"].as_array_of_tables().context("lock packages")?;
        let versions: Vec<&str> = packages
            .iter()
            .filter(|p| p["name"].as_str() == Some(&krate))
            .filter_map(|p| p["version"].as_str())
            .collect();
        match versions.as_slice() {
            [v] => out.push((krate.clone(), (*v).to_owned())),
            [] => bail!("{krate} is not in the resolved graph any more: remove its patches by hand"),
            many => bail!("{krate} resolves to several versions {many:?}: align the requirements first"),
        }
    }
    Ok(out)
}
