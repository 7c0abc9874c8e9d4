//! `cargo xtask bench tls`: what TLS costs a clone. A full clone of a freshly repacked real
//! repository (with a bitmap, as `git gc` leaves a bare repository, and without; no pack cache),
//! one at a time, from gixd over plain HTTP, from the same
//! gixd over HTTPS, and from git http-backend behind lighttpd with TLS (mod_openssl), arms
//! alternated round by round, side by side in one run: the server's CPU (each server in a
//! cpuacct cgroup of its own: lighttpd, git-http-backend, upload-pack and pack-objects counted),
//! and the HTTP version git spoke. The certificate is made with openssl for 127.0.0.1 and trusted
//! by git through `GIT_SSL_CAINFO`. Run by hand, as root; not in CI. `report` renders it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::table::*;
use crate::bench::bursts::{Server, start, warm};
use serde_json::Value;

pub const TLS_RESULTS: &str = "bench/results/tls.json";

pub const ARMS: [&str; 3] = ["gixd http", "gixd https", "git http-backend https (lighttpd)"];

/// `cargo xtask bench tls`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Bare repositories to clone (copied and repacked under target/bench-tls/).
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, gixd } = args;
    if !bench_support::run::is_root() {
        bail!("each server goes into a cgroup of its own: run as root");
    }
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let scratch = crate::tree::Scratch::new("bench-tls")?;
    let base = root.join("target/bench-tls");
    std::fs::create_dir_all(&base)?;
    let (cert, key) = crate::bench::self_signed_cert(&scratch.0)?;
    let served = crate::bench::bursts::repacked_copies(&repos, &base)?;

    let (http, https) = (bench_support::run::free_port()?, bench_support::run::free_port()?);
    let mut cmd = Command::new(&gixd);
    cmd.args(["serve", "--export-all", "--listen", &format!("127.0.0.1:{http}")])
        .args(["--https-listen", &format!("127.0.0.1:{https}")])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .arg("--base-path")
        .arg(&base)
        .env("GIXD_LOG", "warn");
    let mut gixd_server = start("gixd-tls", cmd, &[http, https])?;
    gixd_server.version = bench_support::run::output(Command::new(&gixd).arg("--version"))?;

    let lighttpd_port = bench_support::run::free_port()?;
    let lighttpd =
        crate::bench::bursts::http_backend_tls("lighttpd-tls", &scratch.0, &base, lighttpd_port, (&cert, &key))?;

    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "gixd": format!("{} (release build), `serve` at its defaults (no pack cache), HTTP and HTTPS listeners in one process", gixd_server.version),
            "lighttpd": lighttpd.version,
            "repos": served.iter().map(|(n, s, _, o)| serde_json::json!({ "repo": n, "state": s, "objects": o })).collect::<Vec<_>>(),
            "how": "one stock git clone (protocol v2, --bare, git's default HTTP version) at a time; server CPU from each server's cpuacct cgroup; the certificate an openssl P-256 self-signed one for 127.0.0.1",
        }),
    )?;
    let mut runs = Vec::new();
    for (name, state, path, _) in &served {
        let dir_name = path.file_name().unwrap().to_string_lossy().into_owned();
        for round in 0..rounds {
            for arm in bench_support::run::round_order(ARMS.len(), round).into_iter().map(|i| ARMS[i]) {
                let (server, url): (&Server, String) = match arm {
                    "gixd http" => (&gixd_server, format!("http://127.0.0.1:{http}/{dir_name}")),
                    "gixd https" => (&gixd_server, format!("https://127.0.0.1:{https}/{dir_name}")),
                    _ => (&lighttpd, format!("https://127.0.0.1:{lighttpd_port}/git/{dir_name}")),
                };
                warm(path)?;
                let dest = scratch.0.join("clone.git");
                let _ = std::fs::remove_dir_all(&dest);
                let cpu0 = server.group.cpu_us()?;
                let started = std::time::Instant::now();
                let out = Command::new("git")
                    .args(["-c", "protocol.version=2", "clone", "-q", "--bare", &url])
                    .arg(&dest)
                    .env("GIT_SSL_CAINFO", &cert)
                    .env("GIT_TRACE_CURL", "1")
                    .env("GIT_TRACE_CURL_NO_DATA", "1")
                    .output()?;
                let wall = started.elapsed();
                if !out.status.success() {
                    bail!("{arm}: the clone of {dir_name} failed: {}", String::from_utf8_lossy(&out.stderr));
                }
                std::thread::sleep(std::time::Duration::from_millis(300));
                let cpu_us = server.group.cpu_us()? - cpu0;
                let trace = String::from_utf8_lossy(&out.stderr);
                let spoke = if trace.contains("HTTP/2 200") { "HTTP/2" } else { "HTTP/1.1" };
                runs.push(serde_json::json!({
                    "repo": name, "state": state, "arm": arm, "round": round, "cpu_us": cpu_us,
                    "wall_ms": wall.as_millis() as u64, "http": spoke,
                }));
                eprintln!("{name} {state} {arm} round {round}: cpu {} ms, wall {:?}, {spoke}", cpu_us / 1000, wall);
            }
        }
    }
    drop((gixd_server, lighttpd));
    crate::bench::finish(root, TLS_RESULTS, conditions, runs)
}

// The report.

/// What TLS costs a clone: per repository, the server CPU of each arm, gixd over HTTPS against
/// gixd over HTTP (issue 46's goal: ≤ 1.15) and against lighttpd + git http-backend over HTTPS
/// (goal: ≤ 0.5), the row furthest from its goals first.
pub fn render(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        TLS_RESULTS,
        "`cargo xtask bench tls --repo PATH…` (by hand, as root: it needs the repositories and cgroups)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench tls")?;
    out.push_str(&format!(
        " gixd: {}. lighttpd: {}. {} Medians.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["lighttpd"].as_str().unwrap_or("?").lines().next().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | objects | bitmap | server CPU ms: gixd http | gixd https | http-backend https | gixd https ÷ gixd http | gixd https ÷ http-backend https | HTTP spoken (gixd https, http-backend) |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        let state = repo["state"].as_str().unwrap_or("no-bitmap");
        let of = |arm: &str| -> Vec<&Value> {
            runs.iter()
                .filter(|r| r["repo"] == name && r["state"].as_str().unwrap_or("no-bitmap") == state && r["arm"] == arm)
                .collect()
        };
        let med = |arm: &str| median(of(arm).iter().filter_map(|r| r["cpu_us"].as_f64()).collect()) / 1000.0;
        let spoke = |arm: &str| of(arm).first().and_then(|r| r["http"].as_str()).unwrap_or("?").to_owned();
        let [plain, tls, peer] = ARMS.map(med);
        let badness = (tls / plain / 1.15).max(tls / peer / 0.5);
        rows.push((
            badness,
            format!(
                "| {name} | {} | {} | {plain:.0} | {tls:.0} | {peer:.0} | {} | {} | {}, {} |\n",
                repo["objects"],
                if state == "bitmap" { "yes" } else { "no" },
                ratio(plain, tls),
                ratio(peer, tls),
                spoke(ARMS[1]),
                spoke(ARMS[2]),
            ),
        ));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}
