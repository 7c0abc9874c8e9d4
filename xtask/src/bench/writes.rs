//! `cargo xtask bench writes`: write-family system calls per clone, gixd over HTTP against git
//! http-backend (lighttpd) and git daemon.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::table::*;
use super::*;
use bench_support::run::{free_port, output, wait_for_port};

pub const WRITES_RESULTS: &str = "bench/results/writes.json";

/// Attach `strace -f -c` to `pid` (and every process it forks) counting write-family calls;
/// returns the strace child, once it is attached.
fn strace_writes(pid: u32, out: &Path) -> Result<std::process::Child> {
    let child = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-c",
            "-U",
            "name,calls",
            "-e",
            "trace=write,writev,pwrite64,pwritev,sendto,sendmsg,sendmmsg",
            "-o",
        ])
        .arg(out)
        .args(["-p", &pid.to_string()])
        .spawn()
        .context("strace (apt-get install strace)")?;
    for _ in 0..200 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        if status.lines().any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0")) {
            std::thread::sleep(std::time::Duration::from_millis(100)); // let -f reach every thread
            return Ok(child);
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    bail!("strace did not attach to {pid}")
}

fn stop_strace(mut child: std::process::Child, out: &Path) -> Result<u64> {
    // SAFETY: sending SIGINT to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait()?;
    let text = std::fs::read_to_string(out)?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next().map(str::parse::<u64>)) {
                (Some(name), Some(Ok(calls))) if name != "total" => Some(calls),
                _ => None,
            }
        })
        .sum())
}

/// One arm of the writes benchmark: a server process to attach to and the URL to clone.
struct Arm {
    name: &'static str,
    server: std::process::Child,
    url: String,
}

fn start_arms(root: &Path, base: &Path, repo: &str, scratch: &Path) -> Result<Vec<Arm>> {
    let mut arms = Vec::new();
    // One gixd per arm, so that each strace counts one transport only.
    for transport in ["http", "git://"] {
        let (http_port, git_port) = (free_port()?, free_port()?);
        let mut cmd = Command::new(root.join("target/release/gixd"));
        cmd.args(["serve", "--export-all", "--listen", &format!("127.0.0.1:{http_port}"), "--base-path"]).arg(base);
        if transport == "git://" {
            cmd.arg("--git-listen").arg(format!("127.0.0.1:{git_port}"));
        }
        let gixd = cmd.env("GIXD_LOG", "warn").stdout(std::process::Stdio::null()).spawn()?;
        wait_for_port(http_port)?;
        let (name, url) = match transport {
            "http" => ("gixd http", format!("http://127.0.0.1:{http_port}/{repo}")),
            _ => {
                wait_for_port(git_port)?;
                ("gixd git://", format!("git://127.0.0.1:{git_port}/{repo}"))
            }
        };
        arms.push(Arm { name, server: gixd, url });
    }

    let port = free_port()?;
    let conf = scratch.join("lighttpd.conf");
    std::fs::write(
        &conf,
        bench_support::http_backend_conf(scratch, base, Path::new("/usr/lib/git-core/git-http-backend"), port, false),
    )?;
    let lighttpd = Command::new("lighttpd")
        .arg("-D")
        .arg("-f")
        .arg(&conf)
        .spawn()
        .context("lighttpd (apt-get install lighttpd)")?;
    wait_for_port(port)?;
    arms.push(Arm {
        name: "git http-backend (lighttpd)",
        server: lighttpd,
        url: format!("http://127.0.0.1:{port}/git/{repo}"),
    });

    let port = free_port()?;
    // git-daemon itself, not the `git` wrapper: strace -p follows only processes forked after
    // it attaches, and a wrapper's existing child would go uncounted (seen: 0 calls).
    let exec_path = output(Command::new("git").arg("--exec-path"))?;
    let daemon = Command::new(Path::new(&exec_path).join("git-daemon"))
        .args(["--export-all", "--reuseaddr", "--listen=127.0.0.1", &format!("--port={port}")])
        .arg(format!("--base-path={}", base.display()))
        .spawn()?;
    wait_for_port(port)?;
    arms.push(Arm { name: "git daemon (git://)", server: daemon, url: format!("git://127.0.0.1:{port}/{repo}") });
    Ok(arms)
}

/// Write-family syscalls per clone, per arm: every process of the serving side counted.
/// `cargo xtask bench writes`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds } = args;
    build_gixd(root)?;
    let base = corpus_dir(root)?;
    let repo = "linear-sha1.git";
    let scratch = crate::tree::Scratch::new("bench-writes")?;
    let mut arms = start_arms(root, &base, repo, &scratch.0)?;
    let conditions = conditions(
        root,
        serde_json::json!({
            "lighttpd": output(Command::new("lighttpd").arg("-v")).unwrap_or_default(),
            "repo": repo,
            "objects": output(Command::new("git").args(["rev-list", "--objects", "--all", "--count"]).current_dir(base.join(repo)))?,
            "rounds": rounds,
        }),
    )?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for i in round_order(arms.len(), round) {
            let arm = &arms[i];
            let summary = scratch.0.join("strace.txt");
            let tracer = strace_writes(arm.server.id(), &summary)?;
            let dest = scratch.0.join(format!("clone-{round}-{i}"));
            let status = Command::new("git")
                .args(["-c", "protocol.version=2", "clone", "-q", "--mirror", &arm.url])
                .arg(&dest)
                .status()?;
            let calls = stop_strace(tracer, &summary)?;
            if !status.success() {
                bail!("clone from {} failed: the run is aborted, not scored", arm.name);
            }
            if calls == 0 {
                bail!("strace counted no write for {}: the instrument is blind, the run is aborted", arm.name);
            }
            let bytes = pack_bytes(&dest)?;
            std::fs::remove_dir_all(&dest)?;
            runs.push(
                serde_json::json!({ "arm": arm.name, "round": round, "write_calls": calls, "pack_bytes": bytes }),
            );
        }
        eprint!(".");
    }
    eprintln!();
    for arm in &mut arms {
        let _ = arm.server.kill();
        let _ = arm.server.wait();
    }
    finish(root, WRITES_RESULTS, conditions, runs)
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(root, WRITES_RESULTS, "`cargo xtask bench writes`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench writes")?;
    out.push_str(&format!(
        " Repository {} ({} objects); clone with protocol v2; every write-family syscall of the serving process tree (strace -f -c).\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["objects"].as_str().unwrap_or("?")
    ));
    out.push_str(
        "| arm | write calls per clone (median) | pack bytes | calls ÷ (bytes / 65516) |\n|---|---|---|---|\n",
    );
    let mut arms: Vec<&str> = runs.iter().filter_map(|r| r["arm"].as_str()).collect();
    arms.sort();
    arms.dedup();
    arms.sort_by_key(|a| !a.starts_with("gixd"));
    for arm in arms {
        let of = |key: &str| median(runs.iter().filter(|r| r["arm"] == arm).filter_map(|r| r[key].as_f64()).collect());
        let (calls, bytes) = (of("write_calls"), of("pack_bytes"));
        out.push_str(&format!("| {arm} | {calls:.0} | {bytes:.0} | {:.2} |\n", calls / (bytes / 65516.0)));
    }
    Ok(out)
}
