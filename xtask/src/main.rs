//! Repository tooling. `cargo xtask patches …` maintains the patch queue on gitoxide crates:
//!
//! - `patches/series` lists the patches in apply order; each is a header plus a unified diff
//!   against the pristine published source of one exact crate version (`queue`).
//! - `vendor/<crate>/` is pristine + that crate's patches, reached through `[patch.crates-io]`.
//! - pristine sources come through cargo itself (`tree::pristine`), cached in `target/xtask/`.

mod appliance;
mod bench;
mod guards;
mod queue;
mod report;
mod sync;
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
        command: bench::Bench,
    },
    /// Build the deterministic corpus (target/corpus/) and list it with object counts.
    Corpus,
    /// Fuzz every input a client controls (fuzz/: seeded mutation, no coverage guidance) in a
    /// release build, for `--seconds` per target; failing inputs go to target/fuzz/failures/.
    Fuzz {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Repeat a run: the seed it printed.
        #[arg(long)]
        seed: Option<u64>,
        /// Targets (default: all).
        targets: Vec<String>,
    },
    /// Build gixd twice from the committed tree, check both binaries are identical, and pack the
    /// reproducible appliance tarball (target/appliance/).
    Appliance,
    /// Run a command and write the CPU and peak RSS of it and its descendants to a file
    /// (the git arm of `bench clone` wraps git-upload-pack with it).
    #[command(hide = true)]
    Rusage {
        #[arg(long)]
        out: PathBuf,
        /// Read a git:// request line from stdin first, as git daemon --inetd would, and append
        /// the repository it names below this base path to the command (`bench real`'s git arm).
        #[arg(long)]
        git_request: Option<PathBuf>,
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
enum PatchCmd {
    /// Rebuild vendor/ from pristine sources + patches/, and [patch.crates-io] to match.
    Apply,
    /// Fail with a diff when vendor/ differs by one byte from pristine + patches/.
    Check,
    /// Regenerate each named crate's last patch from its edited vendor/ tree (default: all), or
    /// with --patch one patch of the series wherever it is (the later ones on its crate are
    /// taken back off vendor/ first, then regenerated on top of it).
    Refresh {
        crates: Vec<String>,
        /// The patch to regenerate (as written in patches/series), e.g. gix-pack/0001-x.patch.
        #[arg(long, conflicts_with = "crates")]
        patch: Option<String>,
    },
    /// Prove each patch's guard tests: red on its crate without that patch (the other patches
    /// kept), green with the whole queue. Builds into target/guards.
    Guards {
        /// Only this patch (as written in patches/series).
        #[arg(long)]
        patch: Option<String>,
    },
    /// Move patched crates to new upstream versions and re-apply the series.
    Rebase {
        /// The crate to move (omit with --all).
        #[arg(long = "crate", required_unless_present = "all")]
        krate: Option<String>,
        /// The version to move it to.
        #[arg(long, required_unless_present = "all")]
        to: Option<String>,
        /// Move every patched crate to the version the workspace's requirements now resolve to.
        /// First every other gix-* requirement of [workspace.dependencies] (and of
        /// bench/patch-costs) is set to the version the `gix` requirement resolves it to.
        #[arg(long, conflicts_with_all = ["krate", "to"])]
        all: bool,
        /// With --all: set the `gix` requirement to this first (e.g. 0.92), so the whole family
        /// moves in one command.
        #[arg(long, requires = "all")]
        gix: Option<String>,
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
    if let Top::Rusage { out, git_request, command } = &cli.command {
        return match git_request {
            Some(base) => bench::real::rusage_git_request(out, base, command),
            None => bench::rusage(out, command),
        };
    }
    let root = repo_root();
    match cli.command {
        Top::Patches { command } => match command {
            PatchCmd::Apply => apply(&root),
            PatchCmd::Check => check(&root),
            PatchCmd::Refresh { crates, patch: None } => refresh(&root, &crates),
            PatchCmd::Refresh { patch: Some(file), .. } => refresh_patch(&root, &file),
            PatchCmd::Guards { patch } => guards::run(&root, patch.as_deref()),
            PatchCmd::Rebase { krate, to, all, gix, no_test } => {
                let moves = match (krate, to) {
                    (Some(k), Some(v)) => {
                        if let Some(change) = sync::require(&root, &k, &v)? {
                            println!("{change}");
                        }
                        for change in sync::bench_requirements(&root, true)? {
                            println!("{change}");
                        }
                        vec![(k, v)]
                    }
                    _ if all => {
                        for change in sync::align_gix_family(&root, gix.as_deref())? {
                            println!("{change}");
                        }
                        resolved_versions(&root)?
                    }
                    _ => bail!("give --crate and --to, or --all"),
                };
                rebase(&root, &moves, !no_test)
            }
        },
        Top::Bench { command } => bench::run(&root, command),
        Top::Rusage { .. } => unreachable!("handled above"),
        Top::Report { check } => report::run(&root, check),
        Top::Fuzz { seconds, seed, targets } => {
            let mut cmd = Command::new("cargo");
            cmd.args(["run", "--release", "--quiet", "-p", "gixd-fuzz", "--", "--seconds", &seconds.to_string()])
                .current_dir(&root);
            if let Some(seed) = seed {
                cmd.args(["--seed", &seed.to_string()]);
            }
            let status = cmd.args(&targets).status().context("cargo run -p gixd-fuzz")?;
            if !status.success() {
                bail!("fuzzing found failing inputs (or did not run): {status}");
            }
            Ok(())
        }
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
        "patch {} ('{}') does not apply to {krate} {version}.\n\ngit apply said:\n{}\nthe hunk:\n{}\nNothing was changed: vendor/ and patches/ are as they were. Port the patch by hand (edit vendor/{krate} on the new version, then `cargo xtask patches refresh --patch {}`).",
        p.file,
        p.subject(),
        failure.output.trim_end(),
        hunk,
        p.file
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
    sync_documents(root, &queue)?;
    Ok(())
}

/// Write what follows the queue: the series' version column, PATCH.md's table, bench/patch-costs'
/// requirements.
fn sync_documents(root: &Path, queue: &Queue) -> Result<()> {
    let series = root.join("patches/series");
    if std::fs::read_to_string(&series)? != queue.series_text() {
        std::fs::write(&series, queue.series_text())?;
        println!("patches/series: rewritten with each patch's crate version");
    }
    let patch_md = root.join("PATCH.md");
    let text = std::fs::read_to_string(&patch_md)?;
    let (new, problems) = sync::patch_md_table(&text, queue);
    if new != text {
        std::fs::write(&patch_md, new)?;
        println!("PATCH.md: table set to the series' versions");
    }
    for p in problems.iter().filter(|p| p.contains("has no row")) {
        println!("warning: {p}");
    }
    for change in sync::bench_requirements(root, true)? {
        println!("{change}");
    }
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
    if std::fs::read_to_string(root.join("patches/series"))? != queue.series_text() {
        problems.push(format!(
            "patches/series is not what the patches' headers say; it should read:\n{}(`cargo xtask patches apply` writes it)",
            queue.series_text()
        ));
    }
    let (_, table) = sync::patch_md_table(&std::fs::read_to_string(root.join("PATCH.md"))?, &queue);
    problems.extend(table);
    problems.extend(sync::bench_requirements(root, false)?);
    for dup in sync::duplicate_gix_versions(&root.join("Cargo.lock"))? {
        problems.push(format!(
            "Cargo.lock holds {dup}: align the gix-* requirements (`cargo xtask patches rebase --all` does)"
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

/// Regenerate one patch of the series from vendor/: the later patches of its crate are reverse-
/// applied to a copy of vendor/<crate>, what is left is diffed against pristine + the earlier
/// patches, and the later patches are regenerated on top of the new one.
fn refresh_patch(root: &Path, file: &str) -> Result<()> {
    let mut queue = Queue::load(&root.join("patches"))?;
    let Some(target) = queue.patches.iter().find(|p| p.file == file).cloned() else {
        bail!("{file} is not in patches/series");
    };
    let (krate, version) = (target.krate.clone(), target.version.clone());
    let patches: Vec<Patch> = queue.of_crate(&krate).cloned().collect();
    let at = patches.iter().position(|p| p.file == file).expect("the patch is of its crate");
    let (earlier, rest) = patches.split_at(at);
    let later = &rest[1..];
    let scratch = Scratch::new("refresh-patch")?;
    let base = scratch.0.join("base");
    build_tree(root, &krate, &version, &earlier.iter().collect::<Vec<_>>(), &base)?;
    let edited = scratch.0.join("edited");
    tree::replace_dir(&root.join("vendor").join(&krate), &edited)?;
    for p in later.iter().rev() {
        if let Err(failure) = tree::git_apply(&edited, &p.diff, true, false)? {
            bail!(
                "{} comes after {file} and cannot be taken back off vendor/{krate} (the edit touches its lines?):\n{}\nEdit so that it reverses cleanly, or refresh that patch instead.",
                p.file,
                failure.output.trim_end()
            );
        }
    }
    let mut regenerated = vec![(file.to_owned(), tree::git_diff(&base, &edited)?)];
    // `edited` is now pristine + earlier + this patch: put the later ones back, one by one.
    let before = scratch.0.join("before");
    for p in later {
        tree::replace_dir(&edited, &before)?;
        if let Err(failure) = tree::git_apply(&edited, &p.diff, false, false)? {
            bail!("{} no longer applies on top of the refreshed {file}:\n{}", p.file, failure.output.trim_end());
        }
        regenerated.push((p.file.clone(), tree::git_diff(&before, &edited)?));
    }
    for (f, diff) in regenerated {
        let slot = queue.patches.iter_mut().find(|p| p.file == f).expect("patch is in the queue");
        if slot.diff == diff {
            println!("{f}: unchanged");
        } else {
            slot.diff = diff;
            println!("{f}: regenerated from vendor/{krate}");
        }
    }
    queue.save()?;
    // The queue must rebuild vendor/ exactly as it is.
    let rebuilt = scratch.0.join("rebuilt");
    let patches: Vec<&Patch> = queue.of_crate(&krate).collect();
    build_tree(root, &krate, &version, &patches, &rebuilt)?;
    let diff = tree::git_diff(&rebuilt, &root.join("vendor").join(&krate))?;
    if !diff.is_empty() {
        bail!("the refreshed queue does not rebuild vendor/{krate} (a = queue, b = vendor/):\n{diff}");
    }
    Ok(())
}

/// What the rebase did to one patch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// The same diff, byte for byte, applies to the new version.
    Unchanged,
    /// The same changes at other lines (or in a changed file): regenerated; the hunks that moved.
    Offsets(Vec<String>),
    /// Its reverse applies to the new version: upstream has it.
    Landed,
}

/// Compare a patch's old and regenerated diffs.
fn fate_of(old: &str, new: &str) -> Fate {
    if old == new {
        return Fate::Unchanged;
    }
    let hunks = |d: &str| {
        d.lines()
            .filter(|l| l.starts_with("@@ "))
            .map(|l| l.split(" @@").next().unwrap_or(l).trim_start_matches("@@ ").to_owned())
            .collect::<Vec<_>>()
    };
    let moved =
        hunks(old).into_iter().zip(hunks(new)).filter(|(a, b)| a != b).map(|(a, b)| format!("{a} → {b}")).collect();
    Fate::Offsets(moved)
}

fn fate_line(file: &str, fate: &Fate, krate: &str, version: &str) -> String {
    match fate {
        Fate::Unchanged => format!("UNCHANGED {file}: the same diff applies to {krate} {version}"),
        Fate::Offsets(moved) if moved.is_empty() => format!(
            "OFFSETS   {file}: regenerated (the file it changes changed upstream; its hunks stand where they stood)"
        ),
        Fate::Offsets(moved) => format!("OFFSETS   {file}: regenerated, hunks moved {}", moved.join(", ")),
        Fate::Landed => format!("LANDED    {file}: already in {krate} {version}; moved to patches/landed/"),
    }
}

/// For each `(crate, version)`: re-apply that crate's patches on the new pristine source. A patch
/// whose reverse applies cleanly is already upstream: it leaves the series and is recorded in
/// `patches/landed.md`. Any conflict stops before anything is written. Then the workspace is
/// built (a patch can apply as text and still not compile on the new version), and the test
/// suite runs as the gate. A summary of all of it comes last.
fn rebase(root: &Path, moves: &[(String, String)], run_tests: bool) -> Result<()> {
    let mut queue = Queue::load(&root.join("patches"))?;
    let scratch = Scratch::new("rebase")?;
    let mut landed_rows = String::new();
    let date = today()?;
    let mut new_trees = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    let mut history: Vec<String> = Vec::new();
    for (krate, version) in moves {
        let Some(old_version) = queue.crates().into_iter().find(|(k, _)| k == krate).map(|(_, v)| v) else {
            bail!("{krate} is not patched by the series");
        };
        if &old_version == version {
            println!("{krate}: already at {version}");
            continue;
        }
        println!("{krate}: {old_version} -> {version}");
        summary.push(format!("{krate} {old_version} -> {version}"));
        let pristine = tree::pristine(&pristine_cache(root), krate, version)?;
        let work = scratch.0.join(krate);
        tree::replace_dir(&pristine, &work)?;
        let mut kept = Vec::new();
        let mut fates = Vec::new();
        for p in queue.of_crate(krate) {
            let fate = if tree::git_apply(&work, &p.diff, true, true)?.is_ok() {
                landed_rows.push_str(&queue::landed_row(p, version, &date));
                Fate::Landed
            } else {
                let before = scratch.0.join(format!("{krate}.before"));
                tree::replace_dir(&work, &before)?;
                if let Err(failure) = tree::git_apply(&work, &p.diff, false, false)? {
                    bail!(conflict_message(p, krate, version, &failure));
                }
                let diff = tree::git_diff(&before, &work)?;
                let fate = fate_of(&p.diff, &diff);
                kept.push(p.retarget(version, diff));
                fate
            };
            let line = fate_line(&p.file, &fate, krate, version);
            println!("  {line}");
            summary.push(format!("  {line}"));
            let name = p.file.rsplit('/').next().unwrap_or(&p.file).trim_end_matches(".patch");
            fates.push(format!(
                "{name}: {}",
                match &fate {
                    Fate::Unchanged => "unchanged",
                    Fate::Offsets(_) => "regenerated with offsets",
                    Fate::Landed => "landed",
                }
            ));
        }
        history.push(format!("{krate} {old_version} → {version} ({})", fates.join("; ")));
        new_trees.push((krate.clone(), work, kept));
    }
    if new_trees.is_empty() {
        println!("nothing to move: checking, building and testing the queue as it is");
        summary.push("nothing moved (every patched crate is at its version already)".to_owned());
    } else {
        write_rebase(root, &mut queue, new_trees, &landed_rows, moves)?;
        let gix = sync::lock_versions(&root.join("Cargo.lock"))?.get("gix").and_then(|v| v.first()).cloned();
        let entry = format!(
            "{date}: rebased{} — {}.",
            gix.map(|g| format!(" with the workspace on gix {g}")).unwrap_or_default(),
            history.join("; ")
        );
        let patch_md = root.join("PATCH.md");
        std::fs::write(&patch_md, sync::append_history(&std::fs::read_to_string(&patch_md)?, &entry))?;
        summary.push(format!("PATCH.md history: {entry}"));
    }
    let print_summary = |tail: &[String]| {
        println!("\n== rebase summary");
        for line in summary.iter().chain(tail) {
            println!("{line}");
        }
    };
    if let Err(err) = check(root) {
        print_summary(&[]);
        return Err(err);
    }
    println!("building the workspace on the new versions");
    if let Err(err) = build_gate(root, &queue, run_tests) {
        print_summary(&["the workspace does not build: see above".to_owned()]);
        return Err(err);
    }
    if !run_tests {
        print_summary(&["tests not run (--no-test)".to_owned()]);
        return Ok(());
    }
    println!("running the test suite, with the wire suite, as the rebase's gate");
    let status = Command::new("cargo")
        .args(["nextest", "run", "--workspace", "--no-fail-fast"])
        // Mismatching snapshots are written beside the reviewed ones, so they can be listed.
        .env("INSTA_UPDATE", "new")
        .current_dir(root)
        .status()
        .context("running cargo nextest")?;
    let moved = moved_snapshots(root)?;
    let mut tail: Vec<String> = if moved.is_empty() {
        vec!["wire snapshots: none moved".to_owned()]
    } else {
        moved.iter().map(|line| format!("SNAPSHOT MOVED  {line}")).collect()
    };
    tail.push(format!("test suite: {}", if status.success() { "passed" } else { "FAILED" }));
    tail.push(
        "next: `cargo xtask patches guards` (each guard red without its patch, green with it), `cargo xtask bench patches` \
         and `cargo xtask report` (the reports' numbers and versions), then review the upstream/ texts and commit"
            .to_owned(),
    );
    print_summary(&tail);
    if !status.success() {
        bail!(
            "the rebase applied, but the test suite failed ({} wire case(s) moved): read the failures before committing",
            moved.len()
        );
    }
    Ok(())
}

/// Write what a rebase decided: patches (landed ones to patches/landed/), vendor/, the landed
/// record, `[patch.crates-io]`, the lock file and the documents that follow the queue.
fn write_rebase(
    root: &Path,
    queue: &mut Queue,
    new_trees: Vec<(String, PathBuf, Vec<Patch>)>,
    landed_rows: &str,
    moves: &[(String, String)],
) -> Result<()> {
    for (krate, work, kept) in new_trees {
        let landed: Vec<Patch> =
            queue.of_crate(&krate).filter(|p| !kept.iter().any(|k| k.file == p.file)).cloned().collect();
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
        text.push_str(landed_rows);
        std::fs::write(&path, text)?;
    }
    sync_patch_table(root, queue)?;
    for (krate, version) in moves {
        // Point the lock file at the new version (patched from vendor/ or, if nothing is left, the registry's).
        let out = Command::new("cargo")
            .args(["update", "--quiet", "-p", krate, "--precise", version])
            .current_dir(root)
            .output()?;
        if !out.status.success() {
            println!(
                "note: `cargo update -p {krate} --precise {version}`: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    // Everything else of the family follows the new requirements (nothing outside it moves).
    let family: Vec<String> = sync::lock_versions(&root.join("Cargo.lock"))?
        .into_keys()
        .filter(|n| n == "gix" || n.starts_with("gix-"))
        .collect();
    let out = Command::new("cargo")
        .args(["update", "--quiet"])
        .args(family.iter().flat_map(|n| ["-p", n.as_str()]))
        .current_dir(root)
        .output()?;
    if !out.status.success() {
        bail!("cargo update of the gix family failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    sync_documents(root, queue)?;
    Ok(())
}

/// Build everything the test suite builds (or check it, without tests). A failure is told apart:
/// in vendor/ a patch applied as text but does not compile on the new version; elsewhere the
/// workspace meets API changes of the new release.
fn build_gate(root: &Path, queue: &Queue, tests: bool) -> Result<()> {
    let args: &[&str] =
        if tests { &["test", "--workspace", "--no-run"] } else { &["check", "--workspace", "--all-targets"] };
    let out = Command::new("cargo")
        .args(args)
        .args(["--message-format", "short"])
        .current_dir(root)
        .output()
        .context("running cargo")?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains(": error") || l.starts_with("error")).collect();
    let (in_vendor, elsewhere): (Vec<&str>, Vec<&str>) = errors
        .iter()
        .filter(|l| !l.starts_with("error: could not compile") && !l.starts_with("error: aborting"))
        .partition(|l| l.starts_with("vendor/"));
    let mut msg = format!("the queue applied, but `cargo {}` failed.\n", args.join(" "));
    if !in_vendor.is_empty() {
        msg.push_str("\nIn patched crates — a patch applied as text but does not compile on the new version. Port it: edit vendor/<crate>, then `cargo xtask patches refresh --patch <file>`:\n");
        for l in &in_vendor {
            let file = l.split(':').next().unwrap_or("");
            let touching: Vec<&str> = queue
                .patches
                .iter()
                .filter(|p| {
                    file.strip_prefix(&format!("vendor/{}/", p.krate))
                        .is_some_and(|rel| p.diff.contains(&format!(" b/{rel}\n")))
                })
                .map(|p| p.file.as_str())
                .collect();
            let by = if touching.is_empty() {
                "no patch changes this file".to_owned()
            } else {
                format!("changed by {}", touching.join(", "))
            };
            msg.push_str(&format!("  {l}  [{by}]\n"));
        }
    }
    if !elsewhere.is_empty() {
        msg.push_str(
            "\nIn the workspace — API changes of the new release: fix daemon/, tests/, bench/ (behaviour unchanged):\n",
        );
        for l in &elsewhere {
            msg.push_str(&format!("  {l}\n"));
        }
    }
    if in_vendor.is_empty() && elsewhere.is_empty() {
        msg.push_str(&stderr);
    }
    msg.push_str("\nvendor/, patches/ and Cargo.toml are written: review with `git diff`.");
    eprintln!("{msg}");
    bail!("the workspace does not build on the new versions")
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
    let mut v: Vec<_> = queue.published_crates().into_iter().map(|(k, _)| (k.clone(), format!("vendor/{k}"))).collect();
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
    let stale: Vec<String> =
        table.iter().map(|(k, _)| k.to_owned()).filter(|k| !wanted.iter().any(|(w, _)| w == k)).collect();
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
/// a throwaway manifest with `[workspace.dependencies]`'s gitoxide entries and no patches.
fn resolved_versions(root: &Path) -> Result<Vec<(String, String)>> {
    let queue = Queue::load(&root.join("patches"))?;
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(root.join("Cargo.toml"))?.parse()?;
    let deps = doc["workspace"]["dependencies"].as_table().context("[workspace.dependencies]")?;
    let entries: Vec<(String, String)> = deps
        .iter()
        .filter(|(k, v)| k.starts_with("gix") && v.get("path").is_none())
        .map(|(k, v)| (k.to_owned(), v.to_string().trim().to_owned()))
        .collect();
    let resolved = sync::resolve(&entries)?;
    let mut out = Vec::new();
    for (krate, _) in queue.published_crates() {
        match resolved.get(&krate).map(Vec::as_slice) {
            Some([v]) => out.push((krate.clone(), v.clone())),
            None | Some([]) => bail!("{krate} is not in the resolved graph any more: remove its patches by hand"),
            Some(many) => bail!("{krate} resolves to several versions {many:?}: align the requirements first"),
        }
    }
    Ok(out)
}
