//! `cargo xtask bench narrow`: a `--depth 1` clone and a `--filter=blob:none` clone (and a full
//! clone, for scale) of one repository, served over git:// by gixd and by git daemon, each behind
//! the same counting relay: the objects the client ends with, the bytes server → client, and the
//! server's CPU (gixd: its threads' schedstat across the clone; git daemon: `--inetd` per
//! connection under `xtask rusage`, so git daemon, upload-pack and pack-objects are all counted).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::table::*;
use anyhow::{Context, Result, bail};
use bench_support::relay::{Relay, Upstream};
use serde_json::Value;

pub const NARROW_RESULTS: &str = "bench/results/narrow.json";

/// The clones compared: name and the flags that make it.
const OPERATIONS: &[(&str, &[&str])] =
    &[("depth 1", &["--depth", "1"]), ("blob:none", &["--filter=blob:none"]), ("full", &[])];

fn clone(url: &str, flags: &[&str], dest: &Path) -> Result<u64> {
    let status = Command::new("git")
        .args(["-c", "protocol.version=2", "clone", "-q", "--bare"])
        .args(flags)
        .arg(url)
        .arg(dest)
        .status()?;
    if !status.success() {
        bail!("git clone {flags:?} {url} failed");
    }
    let listing = bench_support::run::output(
        Command::new("git").args(["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"]).current_dir(dest),
    )?;
    Ok(listing.lines().count() as u64)
}

/// `cargo xtask bench narrow`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bare repository to clone (default: the corpus's linear, ≥ 10 000 objects).
    #[arg(long)]
    pub repo: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo } = args;
    let gixd = crate::bench::build_gixd(root)?;
    let repo = match repo {
        Some(r) => r.canonicalize()?,
        None => crate::bench::corpus_dir(root)?.join("linear-sha1.git"),
    };
    let base = repo.parent().context("repo parent")?.to_owned();
    let name = repo.file_name().context("repo name")?.to_string_lossy().into_owned();
    let objects: u64 = bench_support::run::output(
        Command::new("git").args(["rev-list", "--objects", "--all", "--count"]).current_dir(&repo),
    )?
    .parse()?;
    let filters = bench_support::run::output(
        Command::new("git").args(["config", "--get", "uploadpack.allowFilter"]).current_dir(&repo),
    )
    .unwrap_or_default();
    if filters != "true" {
        bail!("{} does not set uploadpack.allowFilter: the blob:none clones would be full clones", repo.display());
    }
    let xtask = std::env::current_exe()?;
    let scratch = crate::tree::Scratch::new("bench-narrow")?;
    let exec_path = bench_support::run::output(Command::new("git").arg("--exec-path"))?;
    let rusage_file = scratch.0.join("rusage.json");
    let git_daemon = Relay::start(Upstream::Spawn(vec![
        xtask.display().to_string(),
        "rusage".into(),
        "--out".into(),
        rusage_file.display().to_string(),
        "--".into(),
        Path::new(&exec_path).join("git-daemon").display().to_string(),
        "--inetd".into(),
        "--export-all".into(),
        format!("--base-path={}", base.display()),
    ]))?;
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "repo": name,
            "objects": objects,
            "gixd": "release build, git:// (gixd serve --git-listen), protocol v2, fresh process per clone",
            "git_arm": "git daemon --inetd per connection (git daemon, upload-pack, pack-objects), protocol v2",
            "bytes": "server → client through one counting TCP relay in front of both arms",
        }),
    )?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for (op, flags) in OPERATIONS {
            for arm in bench_support::run::round_order(2, round).into_iter().map(|i| ["gixd", "git daemon"][i]) {
                let dest = scratch.0.join(format!("{round}-{}", runs.len()));
                let (client_objects, cpu_us, bytes) = match arm {
                    "gixd" => {
                        let (git_port, pid, mut child) = start_gixd(&gixd, &base)?;
                        let relay = Relay::start(Upstream::Tcp(SocketAddr::from(([127, 0, 0, 1], git_port))))?;
                        let before = crate::bench::proc_cpu_us(pid)?;
                        let n = clone(&format!("git://127.0.0.1:{}/{name}", relay.port), flags, &dest)?;
                        let cpu = crate::bench::proc_cpu_us(pid)? - before;
                        let _ = child.kill();
                        let _ = child.wait();
                        (n, cpu, relay.take())
                    }
                    _ => {
                        let _ = std::fs::remove_file(&rusage_file);
                        git_daemon.take();
                        let n = clone(&format!("git://127.0.0.1:{}/{name}", git_daemon.port), flags, &dest)?;
                        let cpu = wait_for_rusage(&rusage_file)?;
                        (n, cpu, git_daemon.take())
                    }
                };
                std::fs::remove_dir_all(&dest)?;
                runs.push(serde_json::json!({
                    "op": op, "arm": arm, "round": round,
                    "client_objects": client_objects, "bytes": bytes, "cpu_us": cpu_us,
                }));
            }
        }
        eprint!(".");
    }
    eprintln!();
    crate::bench::finish(root, NARROW_RESULTS, conditions, runs)
}

fn start_gixd(gixd: &Path, base: &Path) -> Result<(u16, u32, std::process::Child)> {
    let git_port = bench_support::run::free_port()?;
    let child = Command::new(gixd)
        .args([
            "serve",
            "--export-all",
            "--listen",
            "127.0.0.1:0",
            "--git-listen",
            &format!("127.0.0.1:{git_port}"),
            "--base-path",
        ])
        .arg(base)
        .env("GIXD_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()?;
    bench_support::run::wait_for_port(git_port)?;
    let pid = child.id();
    Ok((git_port, pid, child))
}

/// The rusage row the git daemon arm's wrapper writes when git daemon exits.
pub(crate) fn wait_for_rusage(file: &Path) -> Result<i64> {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(row) = serde_json::from_str::<serde_json::Value>(&text)
        {
            return row["cpu_us"].as_i64().context("cpu_us");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    bail!("git daemon's rusage never arrived at {}", file.display())
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(root, NARROW_RESULTS, "`cargo xtask bench narrow`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench narrow")?;
    out.push_str(&format!(
        " Repository {} ({} objects). gixd: {}. git: {}. Bytes: {}. Objects: what the client holds after the clone. CPU: medians.\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["objects"],
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["bytes"].as_str().unwrap_or("?"),
    ));
    out.push_str("| clone | objects, gixd | git daemon | bytes, gixd | git daemon | gixd ÷ git | server CPU, gixd (ms) | git daemon (ms) | gixd ÷ git |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut ops: Vec<&str> = Vec::new();
    for r in runs {
        if let Some(op) = r["op"].as_str()
            && !ops.contains(&op)
        {
            ops.push(op);
        }
    }
    for op in ops {
        let arm = |name: &str| runs.iter().filter(|r| r["op"] == op && r["arm"] == name).collect::<Vec<_>>();
        let (g, t) = (arm("gixd"), arm("git daemon"));
        let med = |runs: &[&Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect());
        let (bg, bt) = (med(&g, "bytes"), med(&t, "bytes"));
        let (cg, ct) = (med(&g, "cpu_us") / 1000.0, med(&t, "cpu_us") / 1000.0);
        out.push_str(&format!(
            "| {op} | {} | {} | {bg:.0} | {bt:.0} | {} | {cg:.1} | {ct:.1} | {} |\n",
            count(&g, "client_objects"),
            count(&t, "client_objects"),
            ratio(bt, bg),
            ratio(ct, cg)
        ));
    }
    Ok(out)
}
