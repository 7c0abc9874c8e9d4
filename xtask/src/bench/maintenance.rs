//! `cargo xtask bench maintenance`: the pack a repository that only ever received pushes ends up
//! with. The default branch's first-parent history is pushed to a gixd in `--pushes` steps (each
//! a thin pack from stock git, completed by gixd as it is stored), then copies of that
//! repository are repacked by `gixd maintenance`, by `git repack -adf --window=10` (every delta
//! searched anew: what the issue compares against) and by `git repack -ad` (stored deltas reused,
//! git gc's default), and by `gixd maintenance --aggressive` (every delta searched anew, against
//! `-adf`): pack bytes, objects and CPU (of the repacking process and its children,
//! `xtask rusage`). With `--as-cloned` the repository is instead as `git clone --bare
//! --no-local` leaves it: one pack git wrote, without a bitmap (a repository brought in from
//! elsewhere). With `--loose-by-git` it is as a repository stock git's receive-pack keeps
//! pushing into: the history up to `--pushes` first-parent commits before the tip, repacked by
//! `git repack -adb`, then those commits pushed one at a time into the directory by stock git at
//! its defaults (`receive.unpackLimit` 100: small pushes stay loose objects); there the arms are
//! `gixd maintenance` and `git repack -adb` (CPU and peak memory). Run by hand on real
//! repositories; not in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::table::*;
use anyhow::{Context, Result, bail};
use serde_json::Value;

pub const MAINTENANCE_RESULTS: &str = "bench/results/maintenance.json";
pub const MAINTENANCE_AS_CLONED_RESULTS: &str = "bench/results/maintenance-as-cloned.json";
pub const MAINTENANCE_LOOSE_BY_GIT_RESULTS: &str = "bench/results/maintenance-loose-by-git.json";

/// The state the arms start from.
#[derive(Debug, Clone, Copy)]
pub enum State {
    /// The default branch's first-parent history pushed in this many pushes.
    Pushed(usize),
    /// One pack as git's clone writes it, no bitmap.
    AsCloned,
    /// A bitmapped base, then this many one-commit pushes written by stock git (small ones loose).
    LooseByGit(usize),
}

/// The repacking arms, by the name the report shows.
pub const ARMS: [&str; 4] =
    ["gixd maintenance", "git repack -adf --window=10", "git repack -ad", "gixd maintenance --aggressive"];

/// The arms of [`State::LooseByGit`].
pub const LOOSE_ARMS: [&str; 2] = ["gixd maintenance", "git repack -adb"];

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    bench_support::run::git_with(dir, &["pack.threads=1"], args)
}

/// Bytes of every `.pack` file of `repo`, how many there are, and its loose objects.
fn pack_bytes(repo: &Path) -> Result<(u64, usize, usize)> {
    let (mut bytes, mut packs) = (0, 0);
    for entry in std::fs::read_dir(repo.join("objects/pack"))? {
        let entry = entry?;
        // A pack gixd's run replaced goes after its grace (noted in objects/gixd-rolled): not counted.
        let rolled =
            repo.join("objects/gixd-rolled").join(entry.path().with_extension("idx").file_name().unwrap_or_default());
        if entry.path().extension().is_some_and(|e| e == "pack") && !rolled.exists() {
            bytes += entry.metadata()?.len();
            packs += 1;
        }
    }
    let loose: usize = git(repo, &["count-objects", "-v"])?
        .lines()
        .find_map(|l| l.strip_prefix("count: "))
        .context("count-objects")?
        .parse()?;
    Ok((bytes, packs, loose))
}

/// `cargo xtask bench maintenance`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Bare repositories whose history is pushed (read only, never modified).
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    /// How many pushes the history arrives in.
    #[arg(long, default_value_t = 40)]
    pub pushes: usize,
    /// Start from the repository as `git clone --bare --no-local` leaves it (one pack git
    /// wrote, no bitmap) instead of pushes; results in their own file.
    #[arg(long)]
    pub as_cloned: bool,
    /// Start from the history up to `--pushes` first-parent commits before the tip, repacked
    /// by `git repack -adb`, then those commits pushed one at a time by stock git into the
    /// directory (its receive-pack at its defaults: small pushes stored as loose objects), and
    /// compare with `git repack -adb`; results in their own file.
    #[arg(long, conflicts_with = "as_cloned")]
    pub loose_by_git: bool,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, pushes, as_cloned, loose_by_git, gixd } = args;
    let state = if as_cloned {
        State::AsCloned
    } else if loose_by_git {
        State::LooseByGit(pushes)
    } else {
        State::Pushed(pushes)
    };
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let xtask = std::env::current_exe()?;
    let scratch = crate::tree::Scratch::new("bench-maintenance")?;
    let mut conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "pushes": match state {
                State::Pushed(n) | State::LooseByGit(n) => serde_json::json!(n),
                State::AsCloned => serde_json::Value::Null,
            },
            "gixd": format!("release build {}", gixd.display()),
            "how": match state {
                State::Pushed(_) => "the default branch's first-parent history pushed to gixd over HTTP by stock git in equal steps (a thin pack each, completed as gixd stores it; its maintenance after pushes off, so one pack per push), then each arm on a fresh copy of that repository; git with pack.threads=1",
                State::AsCloned => "every branch and tag as `git clone --bare --no-local` of the repository leaves them (one pack git wrote, no bitmap), then each arm on a fresh copy of that repository; git with pack.threads=1",
                State::LooseByGit(_) => "the default branch's first-parent history up to that many commits before its tip, repacked by `git repack -adb`, then each of those commits pushed by stock git into the directory (git's own receive-pack at its defaults: a push of fewer than 100 objects is stored as loose objects), then each arm on a fresh copy of that repository; git with pack.threads=1",
            },
        }),
    )?;
    let mut repos_meta = Vec::new();
    let mut runs = Vec::new();
    for source in repos {
        // Named as given (a link named for the project), not as it resolves.
        let name = source.file_name().context("repository name")?.to_string_lossy().trim_end_matches(".git").to_owned();
        let source = source.canonicalize()?;
        let pushed = match state {
            State::Pushed(pushes) => push_history(&gixd, &source, &scratch.0.join(&name), pushes)?,
            State::LooseByGit(pushes) => push_loose_by_git(&source, &scratch.0.join(&name), pushes)?,
            State::AsCloned => {
                let to = scratch.0.join(&name).join("r.git");
                git(
                    &scratch.0,
                    &["clone", "-q", "--bare", "--no-local", &source.display().to_string(), &to.display().to_string()],
                )?;
                to
            }
        };
        let (bytes, packs, loose) = pack_bytes(&pushed)?;
        let objects: u64 = git(&pushed, &["rev-list", "--objects", "--all", "--count"])?.parse()?;
        eprintln!("{name}: {objects} objects ({state:?}): {packs} packs, {bytes} bytes, {loose} loose");
        repos_meta.push(serde_json::json!({ "repo": name, "objects": objects, "as_pushed": { "pack_bytes": bytes, "packs": packs, "loose": loose } }));
        let arms: &[&str] = if matches!(state, State::LooseByGit(_)) { &LOOSE_ARMS } else { &ARMS };
        for round in 0..rounds {
            for arm in bench_support::run::round_order(arms.len(), round).into_iter().map(|i| arms[i]) {
                let copy = scratch.0.join(format!("{name}-{round}-copy"));
                if copy.exists() {
                    std::fs::remove_dir_all(&copy)?;
                }
                let status = Command::new("cp").arg("-a").arg(&pushed).arg(&copy).status()?;
                if !status.success() {
                    bail!("copying {}", pushed.display());
                }
                let command: Vec<String> = match arm {
                    "gixd maintenance" => {
                        vec![gixd.display().to_string(), "maintenance".into(), copy.display().to_string()]
                    }
                    "gixd maintenance --aggressive" => vec![
                        gixd.display().to_string(),
                        "maintenance".into(),
                        "--aggressive".into(),
                        copy.display().to_string(),
                    ],
                    "git repack -adf --window=10" => [
                        "git",
                        "-C",
                        &copy.display().to_string(),
                        "-c",
                        "pack.threads=1",
                        "repack",
                        "-q",
                        "-adf",
                        "--window=10",
                    ]
                    .map(String::from)
                    .to_vec(),
                    "git repack -adb" => {
                        ["git", "-C", &copy.display().to_string(), "-c", "pack.threads=1", "repack", "-q", "-adb"]
                            .map(String::from)
                            .to_vec()
                    }
                    _ => ["git", "-C", &copy.display().to_string(), "-c", "pack.threads=1", "repack", "-q", "-ad"]
                        .map(String::from)
                        .to_vec(),
                };
                let usage = scratch.0.join("rusage.json");
                let out =
                    Command::new(&xtask).arg("rusage").arg("--out").arg(&usage).arg("--").args(&command).output()?;
                if !out.status.success() {
                    bail!("{arm} on {name} failed: {}", String::from_utf8_lossy(&out.stderr));
                }
                let row: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&usage)?)?;
                let after: u64 = git(&copy, &["rev-list", "--objects", "--all", "--count"])?.parse()?;
                if after != objects {
                    bail!("{arm} on {name}: {after} objects reachable after, {objects} before");
                }
                git(&copy, &["fsck", "--strict", "--no-dangling", "--connectivity-only"])
                    .with_context(|| format!("{arm} on {name}: fsck"))?;
                let (bytes, packs, loose) = pack_bytes(&copy)?;
                runs.push(serde_json::json!({
                    "repo": name, "arm": arm, "round": round,
                    "pack_bytes": bytes, "packs": packs, "loose": loose,
                    "cpu_us": row["cpu_us"], "peak_rss_kb": row["peak_rss_kb"],
                }));
                std::fs::remove_dir_all(&copy)?;
            }
            eprint!(".");
        }
        eprintln!();
    }
    conditions["repos"] = repos_meta.into();
    let results = match state {
        State::Pushed(_) => MAINTENANCE_RESULTS,
        State::AsCloned => MAINTENANCE_AS_CLONED_RESULTS,
        State::LooseByGit(_) => MAINTENANCE_LOOSE_BY_GIT_RESULTS,
    };
    crate::bench::finish(root, results, conditions, runs)
}

/// A bare repository under `dir` that received the first-parent history of `source`'s default
/// branch in `pushes` pushes to a gixd, and nothing else.
fn push_history(gixd: &Path, source: &Path, dir: &Path, pushes: usize) -> Result<PathBuf> {
    let (repo, history) = empty_repo_and_history(source, dir, pushes)?;
    let (mut child, server) =
        crate::bench::serve_gixd_taking_pushes(gixd, dir, &["--auto-maintenance=false".as_ref()])?;
    let url = format!("{server}/r.git");
    let result = (1..=pushes).try_for_each(|step| {
        let commit = &history[step * history.len() / pushes - 1];
        git(source, &["push", "-q", &url, &format!("{commit}:refs/heads/main")]).map(|_| ())
    });
    let _ = child.kill();
    let _ = child.wait();
    result?;
    Ok(repo)
}

/// A bare repository under `dir`: `source`'s default branch up to `pushes` first-parent commits
/// before its tip, repacked by `git repack -adb`, then each of those commits pushed into it by
/// stock git (a local push: git's own receive-pack, `receive.unpackLimit` at its default).
fn push_loose_by_git(source: &Path, dir: &Path, pushes: usize) -> Result<PathBuf> {
    let (repo, history) = empty_repo_and_history(source, dir, pushes + 1)?;
    let to = repo.display().to_string();
    let base = &history[history.len() - pushes - 1];
    git(source, &["push", "-q", &to, &format!("{base}:refs/heads/main")])?;
    git(&repo, &["repack", "-q", "-adb"])?;
    for commit in &history[history.len() - pushes..] {
        git(source, &["push", "-q", &to, &format!("{commit}:refs/heads/main")])?;
    }
    Ok(repo)
}

/// An empty bare repository `dir/r.git` (`dir` made anew), and the first-parent history of
/// `source`'s default branch, oldest first, which must hold at least `commits` commits.
fn empty_repo_and_history(source: &Path, dir: &Path, commits: usize) -> Result<(PathBuf, Vec<String>)> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let branch = git(source, &["symbolic-ref", "--short", "HEAD"])?;
    let history: Vec<String> =
        git(source, &["rev-list", "--first-parent", "--reverse", &branch])?.lines().map(str::to_owned).collect();
    if history.len() < commits {
        bail!("{}: {} commits on {branch}, fewer than {commits} needed", source.display(), history.len());
    }
    git(dir, &["init", "-q", "--bare", "-b", "main", "r.git"])?;
    Ok((dir.join("r.git"), history))
}

// The report.

/// Pack bytes after repacking a push-only repository: gixd maintenance against git's two
/// repacks, a row per repository, the worst bytes ratio (gixd's aggressive repack ÷ `git repack -adf`)
/// first.
/// `gixd maintenance` against `git repack -adb` on a repository stock git pushed into (small
/// pushes loose): bytes, CPU and peak memory, worst first by CPU or peak.
pub fn render_loose_by_git(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        MAINTENANCE_LOOSE_BY_GIT_RESULTS,
        "`cargo xtask bench maintenance --loose-by-git --pushes 300 --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench maintenance --loose-by-git")?;
    out.push_str(&format!(" Setup: {}; {} pushes. gixd: {}. Bytes: every `.pack` file after the repack; CPU and peak memory (maximum resident set) of the repacking process and its children: medians; ÷ is gixd's over git's.\n\n", c["how"].as_str().unwrap_or("?"), c["pushes"], c["gixd"].as_str().unwrap_or("?")));
    out.push_str(&format!(
        "| repository | objects | before: packs, loose | {} bytes | {} bytes | ÷ | CPU ms: gixd | git | ÷ | peak MB: gixd | git | ÷ |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        LOOSE_ARMS[0], LOOSE_ARMS[1]
    ));
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).collect() };
        let (b, c, p) = arm_medians(runs, name, LOOSE_ARMS);
        let row = format!(
            "| {name} | {} | {}, {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.1} | {:.1} | {} |\n",
            repo["objects"],
            repo["as_pushed"]["packs"],
            repo["as_pushed"]["loose"],
            count(&of(LOOSE_ARMS[0]), "pack_bytes"),
            count(&of(LOOSE_ARMS[1]), "pack_bytes"),
            ratio(b[1], b[0]),
            c[0],
            c[1],
            ratio(c[1], c[0]),
            p[0],
            p[1],
            ratio(p[1], p[0]),
        );
        rows.push(((c[0] / c[1]).max(p[0] / p[1]), row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}

pub fn render(root: &Path, results: &str, flag: &str) -> Result<String> {
    let doc = match load(
        root,
        results,
        &format!("`cargo xtask bench maintenance{flag} --repo PATH…` (by hand: it needs the repositories)"),
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, &format!("cargo xtask bench maintenance{flag}"))?;
    let as_cloned = c["pushes"].is_null();
    let pushes = if as_cloned { String::new() } else { format!("; {} pushes", c["pushes"]) };
    out.push_str(&format!(" Setup: {}{pushes}. gixd: {}. Bytes: every `.pack` file after the repack (the same every round); CPU and peak memory (maximum resident set): medians; ÷ is gixd's over git's.\n\n", c["how"].as_str().unwrap_or("?"), c["gixd"].as_str().unwrap_or("?")));
    out.push_str(&format!(
        "| repository | objects | before: packs, bytes | {} bytes | {} bytes | ÷ | {} bytes | ÷ | CPU ms: gixd | -adf | ÷ | -ad | ÷ | peak MB: gixd | -adf | ÷ | -ad | ÷ | {} bytes | ÷ -adf | CPU ms | ÷ -adf | peak MB | ÷ -adf |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        ARMS[0], ARMS[1], ARMS[2], ARMS[3]
    ));
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).collect() };
        let (b, c, p) = arm_medians(runs, name, ARMS);
        let row = format!(
            "| {name} | {} | {}, {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.0} | {} | {:.0} | {:.0} | {} | {:.0} | {} | {} | {} | {:.0} | {} | {:.0} | {} |\n",
            repo["objects"],
            repo["as_pushed"]["packs"],
            repo["as_pushed"]["pack_bytes"],
            count(&of(ARMS[0]), "pack_bytes"),
            count(&of(ARMS[1]), "pack_bytes"),
            ratio(b[1], b[0]),
            count(&of(ARMS[2]), "pack_bytes"),
            ratio(b[2], b[0]),
            c[0],
            c[1],
            ratio(c[1], c[0]),
            c[2],
            ratio(c[2], c[0]),
            p[0],
            p[1],
            ratio(p[1], p[0]),
            p[2],
            ratio(p[2], p[0]),
            count(&of(ARMS[3]), "pack_bytes"),
            ratio(b[1], b[3]),
            c[3],
            ratio(c[1], c[3]),
            p[3],
            ratio(p[1], p[3]),
        );
        // Worst first: after pushes by the aggressive repack's bytes against git's -adf (what the
        // two compare); as cloned, by plain maintenance's CPU or peak against -ad (the bytes are
        // git's own pack's).
        let worst = if as_cloned {
            (c[0] / c[2]).max(p[0] / p[2])
        } else if b[3].is_finite() {
            b[3] / b[1]
        } else {
            b[0] / b[1]
        };
        rows.push((worst, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, row) in rows {
        out.push_str(&row);
    }
    Ok(out)
}
