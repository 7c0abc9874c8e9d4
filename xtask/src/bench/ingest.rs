//! `cargo xtask bench ingest --repo PATH…`: a whole history pushed into an empty repository, as a
//! new user's first push is — gixd over HTTP (a fresh process, a write token, maintenance after
//! pushes off so only the push is measured), and the same gixd over git:// (`--enable
//! receive-pack`: git's client then pushes as it does over file://, where over HTTP its
//! stateless send-pack first spends time on every local ref), against git receive-pack over
//! file:// under `xtask rusage` (receive-pack and the index-pack it runs, its connectivity check),
//! and git's own smart HTTP (git http-backend behind lighttpd, `http.receivepack`: the wall time a
//! push over HTTP takes with git's server, the client's stateless send-pack included). Per push:
//! the server's CPU, the push's wall time and the server's peak memory (the http-backend arm: wall
//! time only). Every branch and tag is
//! pushed, each push into a fresh empty repository. Run by hand on real repositories; not in CI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::table::*;
use anyhow::{Context, Result, bail};
use bench_support::run::git;

pub const INGEST_RESULTS: &str = "bench/results/ingest.json";

/// The arms, in the order a round starts from.
const ARMS: [&str; 4] = ["gixd", "gixd git://", "git", "git http-backend"];

/// What every arm pushes: every branch and tag.
const REFSPECS: [&str; 2] = ["refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*"];

/// `cargo xtask bench ingest`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Bare repositories whose branches and tags are pushed (read only, never modified).
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, gixd } = args;
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let xtask = std::env::current_exe()?;
    let scratch = crate::tree::Scratch::new("bench-ingest")?;
    let mut described = Vec::new();
    let mut sources = Vec::new();
    for repo in &repos {
        let name = crate::bench::repo_name(repo);
        // The client: a bare copy holding every branch and tag (the source is never written).
        let client = scratch.0.join(format!("client-{name}.git"));
        git(
            &scratch.0,
            &["clone", "-q", "--mirror", "--no-local", &repo.display().to_string(), client.to_str().context("utf-8")?],
        )?;
        let objects: u64 = git(&client, &["rev-list", "--objects", "--all", "--count"])?.parse()?;
        let refs = git(&client, &["for-each-ref", "--format=%(refname)", "refs/heads", "refs/tags"])?.lines().count();
        described.push(serde_json::json!({ "repo": name, "objects": objects, "refs": refs }));
        sources.push((name, client));
    }
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "repos": described,
            "gixd": format!("{} serve over HTTP with a write token (arm `gixd`) and over git:// with --enable receive-pack (arm `gixd git://`, the client's native push as over file://), --auto-maintenance=false, a fresh process and a fresh empty repository per push; CPU of every thread of the process, peak memory its VmHWM", gixd.display()),
            "git_arm": "git receive-pack over file:// with what it runs (index-pack, the connectivity check), a fresh empty repository per push; CPU and peak memory from getrusage of its process tree; and git http-backend behind lighttpd with http.receivepack (arm `git http-backend`, wall time only)",
            "pushed": "every branch and tag (git push URL 'refs/heads/*:refs/heads/*' 'refs/tags/*:refs/tags/*')",
        }),
    )?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for (name, client) in &sources {
            for arm in bench_support::run::round_order(ARMS.len(), round).into_iter().map(|i| ARMS[i]) {
                let base = scratch.0.join(format!("base-{name}-{round}-{}", arm.replace([' ', ':', '/'], "")));
                std::fs::create_dir_all(&base)?;
                git(&base, &["init", "-q", "--bare", "r.git"])?;
                let (cpu_us, wall_ms, peak_kb) = match arm {
                    "gixd" => push_gixd(&gixd, &base, client, false)?,
                    "gixd git://" => push_gixd(&gixd, &base, client, true)?,
                    "git http-backend" => push_http_backend(&base, client, &scratch.0)?,
                    _ => push_git(&xtask, &base.join("r.git"), client, &scratch.0)?,
                };
                let listing = |dir: &Path| {
                    git(dir, &["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags"])
                };
                if listing(&base.join("r.git"))? != listing(client)? {
                    bail!("{arm} {name}: the pushed refs differ from the client's");
                }
                std::fs::remove_dir_all(&base)?;
                runs.push(serde_json::json!({
                    "repo": name, "arm": arm, "round": round,
                    "cpu_us": cpu_us, "wall_ms": wall_ms, "peak_kb": peak_kb,
                }));
                eprint!(".");
            }
        }
    }
    eprintln!();
    crate::bench::finish(root, INGEST_RESULTS, conditions, runs)
}

fn push_args(url: &str) -> Vec<String> {
    let mut args = vec!["push".to_owned(), "-q".to_owned(), url.to_owned()];
    args.extend(REFSPECS.iter().map(|s| s.to_string()));
    args
}

/// Peak resident memory of process `pid` so far (its VmHWM), in KiB.
fn peak_kb(pid: u32) -> Result<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("VmHWM value")?.parse()?)
}

fn push_gixd(gixd: &Path, base: &Path, client: &Path, git_protocol: bool) -> Result<(i64, i64, i64)> {
    let port = bench_support::run::free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let mut extra: Vec<&std::ffi::OsStr> = vec!["--auto-maintenance=false".as_ref()];
    if git_protocol {
        let more: [&std::ffi::OsStr; 4] =
            ["--git-listen".as_ref(), listen.as_ref(), "--enable".as_ref(), "receive-pack".as_ref()];
        extra.extend(more);
    }
    let (mut child, http) = crate::bench::serve_gixd_taking_pushes(gixd, base, &extra)?;
    let server = if git_protocol { format!("git://{listen}") } else { http };
    let pid = child.id();
    let before = crate::bench::proc_cpu_us(pid)?;
    let started = Instant::now();
    let status = Command::new("git").current_dir(client).args(push_args(&format!("{server}/r.git"))).status()?;
    let wall = started.elapsed().as_millis() as i64;
    let cpu = crate::bench::proc_cpu_us(pid)? - before;
    let peak = peak_kb(pid)?;
    let _ = child.kill();
    let _ = child.wait();
    if !status.success() {
        bail!("push to gixd failed");
    }
    Ok((cpu, wall, peak))
}

fn push_git(xtask: &Path, repo: &Path, client: &Path, scratch: &Path) -> Result<(i64, i64, i64)> {
    let out = scratch.join("rusage.json");
    let _ = std::fs::remove_file(&out);
    let receive_pack = format!("{} rusage --out {} -- git-receive-pack", xtask.display(), out.display());
    let mut args = push_args(&format!("file://{}", repo.display()));
    args.insert(2, format!("--receive-pack={receive_pack}"));
    let started = Instant::now();
    let status = Command::new("git").current_dir(client).args(&args).status()?;
    let wall = started.elapsed().as_millis() as i64;
    if !status.success() {
        bail!("push to git receive-pack failed");
    }
    let row: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    Ok((row["cpu_us"].as_i64().context("cpu_us")?, wall, row["peak_rss_kb"].as_i64().context("peak_rss_kb")?))
}

/// A push through git's own smart HTTP: git http-backend under lighttpd (CGI), receive-pack
/// allowed by the repository's `http.receivepack`. Wall time only (CPU and memory: -1, the CGI
/// processes are not followed).
fn push_http_backend(base: &Path, client: &Path, scratch: &Path) -> Result<(i64, i64, i64)> {
    git(&base.join("r.git"), &["config", "http.receivepack", "true"])?;
    let port = bench_support::run::free_port()?;
    let dir = scratch.join(format!("lighttpd-{port}"));
    std::fs::create_dir_all(&dir)?;
    let conf = dir.join("lighttpd.conf");
    let backend = Path::new("/usr/lib/git-core/git-http-backend");
    std::fs::write(&conf, bench_support::http_backend_conf(&dir, base, backend, port, false))?;
    let mut child = Command::new("lighttpd").arg("-D").arg("-f").arg(&conf).spawn().context("lighttpd")?;
    let result = (|| {
        bench_support::run::wait_for_port(port)?;
        let started = Instant::now();
        let status = Command::new("git")
            .current_dir(client)
            .args(push_args(&format!("http://127.0.0.1:{port}/git/r.git")))
            .status()?;
        let wall = started.elapsed().as_millis() as i64;
        if !status.success() {
            bail!("push to git http-backend failed");
        }
        Ok((-1, wall, -1))
    })();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

// The report.

/// A whole history pushed into an empty repository: a row per repository, the worst CPU ratio
/// (gixd ÷ git receive-pack) first.
pub fn render(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        INGEST_RESULTS,
        "`cargo xtask bench ingest --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench ingest")?;
    out.push_str(&format!(
        " Pushed: {}. gixd: {}. git: {}. Medians.\n\n",
        c["pushed"].as_str().unwrap_or("?"),
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | refs | CPU s: gixd | git | ÷ | wall s: gixd | git | ÷ | wall s: gixd git:// | ÷ | wall s: git http-backend | gixd ÷ it | peak MiB: gixd | git | ÷ |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let med = |arm: &str, key: &str| {
            median(
                runs.iter().filter(|r| r["repo"] == name && r["arm"] == arm).filter_map(|r| r[key].as_f64()).collect(),
            )
        };
        let (cg, ct) = (med("gixd", "cpu_us") / 1e6, med("git", "cpu_us") / 1e6);
        let (wg, wt) = (med("gixd", "wall_ms") / 1e3, med("git", "wall_ms") / 1e3);
        let (pg, pt) = (med("gixd", "peak_kb") / 1024.0, med("git", "peak_kb") / 1024.0);
        // Runs of before the git:// arm have none: a dash.
        let wn = med("gixd git://", "wall_ms") / 1e3;
        let wh = med("git http-backend", "wall_ms") / 1e3;
        let seconds = |s: f64| if s.is_finite() { format!("{s:.1}") } else { "—".into() };
        let row = format!(
            "| {name} | {} | {} | {cg:.1} | {ct:.1} | {} | {wg:.1} | {wt:.1} | {} | {} | {} | {} | {} | {pg:.0} | {pt:.0} | {} |\n",
            repo["objects"],
            repo["refs"],
            ratio(ct, cg),
            ratio(wt, wg),
            seconds(wn),
            ratio(wt, wn),
            seconds(wh),
            ratio(wh, wg),
            ratio(pt, pg)
        );
        rows.push((cg / ct, row));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}
