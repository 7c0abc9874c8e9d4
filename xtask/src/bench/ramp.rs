//! `cargo xtask bench ramp`: server CPU per clone at 1…32 concurrent clients, under a CPU quota
//! and pinned.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::table::*;
use super::*;
use bench_support::run::{free_port, wait_for_port};

pub const RAMP_RESULTS: &str = "bench/results/ramp.json";

/// Server CPU per clone at 1…32 concurrent clients, with gixd under a CFS quota without a
/// cpuset (cgroup v1 `cpu`, 1 CPU of quota over all CPUs) and pinned to one CPU with no quota.
/// `cargo xtask bench ramp`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    pub clients: Vec<usize>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, clients: rungs } = args;
    let gixd = build_gixd(root)?;
    let base = corpus_dir(root)?;
    let repo = "linear-sha1.git";
    let cgroup = PathBuf::from("/sys/fs/cgroup/cpu/gixd-bench-ramp");
    std::fs::create_dir_all(&cgroup).context("a writable cgroup v1 cpu controller (root, /sys/fs/cgroup/cpu)")?;
    std::fs::write(cgroup.join("cpu.cfs_period_us"), "100000")?;
    std::fs::write(cgroup.join("cpu.cfs_quota_us"), "100000")?;
    let start = |arm: &str| -> Result<(std::process::Child, u16)> {
        let port = free_port()?;
        let serve = format!(
            "exec {} serve --export-all --listen 127.0.0.1:{port} --queue-wait 600 --base-path {}",
            gixd.display(),
            base.display()
        );
        let script = match arm {
            // The cgroup's quota, every CPU of the machine: the deployment this is about.
            "quota" => format!("echo $$ > {}/cgroup.procs && {serve}", cgroup.display()),
            _ => format!("exec taskset -c 0 sh -c '{serve}'"),
        };
        let child = Command::new("sh")
            .args(["-c", &script])
            .env("GIXD_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?;
        wait_for_port(port)?;
        Ok((child, port))
    };
    // Limits read back from the kernel, not from what was asked.
    let readback = serde_json::json!({
        "quota_us": std::fs::read_to_string(cgroup.join("cpu.cfs_quota_us"))?.trim(),
        "period_us": std::fs::read_to_string(cgroup.join("cpu.cfs_period_us"))?.trim(),
    });
    let mut servers = Vec::new();
    for arm in ["quota", "pinned"] {
        let (child, port) = start(arm)?;
        let pid = child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let allowed = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap_or("").to_owned();
        servers.push((arm, child, port, allowed));
    }
    let conditions = conditions(
        root,
        serde_json::json!({
            "repo": repo,
            "cgroup_readback": readback,
            "affinity": servers.iter().map(|(a, _, _, allowed)| format!("{a}: {allowed}")).collect::<Vec<_>>(),
            "rounds": rounds,
        }),
    )?;
    let scratch = crate::tree::Scratch::new("bench-ramp")?;
    let mut runs = Vec::new();
    for &clients in &rungs {
        for round in 0..rounds {
            for i in round_order(servers.len(), round) {
                let (arm, child, port, _) = &servers[i];
                let pid = child.id();
                // The pinned arm's `sh` execs taskset, which execs gixd: same pid throughout.
                let before = proc_cpu_us(pid)?;
                let started = std::time::Instant::now();
                let clones: Vec<_> = (0..clients)
                    .map(|c| {
                        let dest = scratch.0.join(format!("{arm}-{clients}-{round}-{c}"));
                        Command::new("git")
                            .args(["-c", "protocol.version=2", "clone", "-q", "--mirror"])
                            .arg(format!("http://127.0.0.1:{port}/{repo}"))
                            .arg(&dest)
                            .spawn()
                            .map(|child| (child, dest))
                    })
                    .collect::<std::io::Result<_>>()?;
                for (mut child, dest) in clones {
                    if !child.wait()?.success() {
                        bail!("a client failed ({arm}, {clients} clients): the run is aborted, not scored");
                    }
                    std::fs::remove_dir_all(dest)?;
                }
                let wall = started.elapsed();
                let cpu = proc_cpu_us(pid)? - before;
                runs.push(serde_json::json!({
                    "arm": arm, "clients": clients, "round": round,
                    "server_cpu_us": cpu, "cpu_per_clone_us": cpu / clients as i64, "wall_ms": wall.as_millis() as u64,
                }));
            }
        }
        eprint!("{clients} ");
    }
    eprintln!();
    for (_, child, _, _) in &mut servers {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir(&cgroup);
    finish(root, RAMP_RESULTS, conditions, runs)
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(root, RAMP_RESULTS, "`cargo xtask bench ramp` (root, cgroup v1 cpu)")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench ramp")?;
    out.push_str(&format!(
        " Repository {}; clones with protocol v2 over HTTP. Kernel read-back: quota {} µs per {} µs; {}.\n\n",
        c["repo"].as_str().unwrap_or("?"),
        c["cgroup_readback"]["quota_us"].as_str().unwrap_or("?"),
        c["cgroup_readback"]["period_us"].as_str().unwrap_or("?"),
        c["affinity"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join("; "))
            .unwrap_or_default(),
    ));
    out.push_str("| concurrent clients | server CPU per clone, quota without cpuset (ms) | ÷ 1 client | pinned to 1 CPU (ms) | ÷ 1 client |\n|---|---|---|---|---|\n");
    let mut rungs: Vec<u64> = runs.iter().filter_map(|r| r["clients"].as_u64()).collect();
    rungs.sort();
    rungs.dedup();
    let per = |arm: &str, n: u64| {
        median(
            runs.iter()
                .filter(|r| r["arm"] == arm && r["clients"] == n)
                .filter_map(|r| r["cpu_per_clone_us"].as_f64())
                .collect(),
        ) / 1000.0
    };
    let first = rungs.first().copied().unwrap_or(1);
    for n in &rungs {
        let (q, p) = (per("quota", *n), per("pinned", *n));
        out.push_str(&format!(
            "| {n} | {q:.1} | {} | {p:.1} | {} |\n",
            ratio(per("quota", first), q),
            ratio(per("pinned", first), p)
        ));
    }
    Ok(out)
}
