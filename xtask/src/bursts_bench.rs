//! `cargo xtask bench bursts`: bursts of concurrent *distinct* clones (no pack cache: each one
//! generates its own pack) of real repositories, each copied twice — repacked with a bitmap and
//! without — served by gixd at its default settings (over HTTP and over git://) beside git daemon
//! and git http-backend (lighttpd), side by side in one run. Each server runs in cgroups of its own
//! (v1 `cpuacct` for its CPU, `memory` for its peak: `memory.max_usage_in_bytes`, reset before
//! every burst, with the packs' page cache warmed by this process beforehand so that it is
//! charged elsewhere), and the RSS of its process tree is sampled every 2 ms. A clone that fails
//! is counted as refused, with what the first one said (a busy message; git daemon past its
//! default `--max-connections` of 32 resets the connection). Run by hand, as root;
//! not in CI. Nothing here interprets the numbers; `report` does.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub const BURSTS_RESULTS: &str = "bench/results/bursts.json";

const CGROUP: &str = "gixd-bench-bursts";

/// The arms, by the name the report shows.
pub const ARMS: [&str; 4] = ["gixd http", "gixd git://", "git http-backend", "git daemon"];

/// A server's cgroups (v1 `cpuacct` and `memory`).
pub(crate) struct Group(String);

impl Group {
    fn dir(&self, hierarchy: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup").join(hierarchy).join(CGROUP).join(&self.0)
    }

    fn create(name: &str) -> Result<Group> {
        let group = Group(name.replace([' ', '/', ':'], "-"));
        for h in ["cpuacct", "memory"] {
            std::fs::create_dir_all(group.dir(h))
                .with_context(|| format!("creating {} (run as root, cgroup v1)", group.dir(h).display()))?;
        }
        Ok(group)
    }

    /// Put `pid` (before it forks anything) into the group.
    fn enter(&self, pid: u32) -> Result<()> {
        for h in ["cpuacct", "memory"] {
            std::fs::write(self.dir(h).join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    pub(crate) fn cpu_us(&self) -> Result<u64> {
        Ok(std::fs::read_to_string(self.dir("cpuacct").join("cpuacct.usage"))?.trim().parse::<u64>()? / 1000)
    }

    pub(crate) fn reset_peak(&self) -> Result<()> {
        Ok(std::fs::write(self.dir("memory").join("memory.max_usage_in_bytes"), "0")?)
    }

    /// What the group's processes hold now (memory cgroup usage, page cache charged to it too).
    pub(crate) fn usage_bytes(&self) -> Result<u64> {
        Ok(std::fs::read_to_string(self.dir("memory").join("memory.usage_in_bytes"))?.trim().parse()?)
    }

    pub(crate) fn peak_bytes(&self) -> Result<u64> {
        Ok(std::fs::read_to_string(self.dir("memory").join("memory.max_usage_in_bytes"))?.trim().parse()?)
    }

    /// The peak RSS of the group's processes, summed, sampled every 2 ms until `stop` is set.
    pub(crate) fn sample_rss(&self, stop: &std::sync::atomic::AtomicBool) -> u64 {
        let procs = self.dir("memory").join("cgroup.procs");
        let mut peak = 0u64;
        loop {
            peak = peak.max(bench_support::rss_kb_of(&procs));
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return peak;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A running server and the URL prefix of each arm it serves.
pub(crate) struct Server {
    pub(crate) child: std::process::Child,
    pub(crate) group: Group,
    pub(crate) version: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Forking servers' children go with their connections; give them a moment.
        std::thread::sleep(Duration::from_millis(200));
        for h in ["cpuacct", "memory"] {
            let _ = std::fs::remove_dir(self.group.dir(h));
        }
    }
}

pub(crate) fn start(name: &str, mut cmd: Command, ports: &[u16]) -> Result<Server> {
    let group = Group::create(name)?;
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().with_context(|| format!("starting {name}"))?;
    // Before it serves anything (and forks for it): everything it forks later is counted too.
    group.enter(child.id())?;
    for port in ports {
        crate::bench::wait_for_port(*port)?;
    }
    Ok(Server { child, group, version: String::new() })
}

/// What happened to one burst: each clone's outcome and the burst's figures.
struct Burst {
    served: usize,
    /// What each clone that was not served said (git daemon past its `--max-connections`, 32 by
    /// default, resets the connection; gixd and http-backend say busy).
    refused: Vec<String>,
    wall: Duration,
    cpu_us: u64,
    peak_rss_kb: u64,
    cgroup_peak_bytes: u64,
    /// The group's memory use when the burst started (the server idle).
    idle_bytes: u64,
}

fn burst(server: &Server, url: &str, clients: usize, scratch: &Path) -> Result<Burst> {
    let dir = scratch.join("clones");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    // SAFETY: no arguments; writes back what earlier clones wrote before this one is measured.
    unsafe { libc::sync() };
    let idle_bytes = server.group.usage_bytes()?;
    server.group.reset_peak()?;
    let cpu0 = server.group.cpu_us()?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let started = Instant::now();
    let (outcomes, peak_rss_kb) = std::thread::scope(|s| {
        let sampler = s.spawn(|| server.group.sample_rss(&stop));
        let clones = (0..clients)
            .map(|c| {
                Command::new("git")
                    .args(["-c", "protocol.version=2", "clone", "-q", "--bare", url])
                    .arg(dir.join(format!("c{c}.git")))
                    .env("GIT_TERMINAL_PROMPT", "0")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .collect::<std::io::Result<Vec<_>>>();
        let outcomes: std::io::Result<Vec<_>> =
            clones.and_then(|clones| clones.into_iter().map(|c| c.wait_with_output()).collect());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (outcomes, sampler.join().unwrap_or(0))
    });
    let wall = started.elapsed();
    let outcomes: Vec<std::process::Output> = outcomes?;
    // Forking servers reap their children a moment after the client is done.
    std::thread::sleep(Duration::from_millis(300));
    let cpu_us = server.group.cpu_us()? - cpu0;
    let cgroup_peak_bytes = server.group.peak_bytes()?;
    let (mut served, mut refused) = (0, Vec::new());
    for out in &outcomes {
        if out.status.success() {
            served += 1;
        } else {
            refused.push(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(Burst { served, refused, wall, cpu_us, peak_rss_kb, cgroup_peak_bytes, idle_bytes })
}

/// Read every file of `repo`'s pack directory, so its pages are cached (and charged to us).
pub(crate) fn warm(repo: &Path) -> Result<()> {
    for entry in std::fs::read_dir(repo.join("objects/pack"))? {
        let path = entry?.path();
        if path.is_file() {
            std::io::copy(&mut std::fs::File::open(&path)?, &mut std::io::sink())?;
        }
    }
    Ok(())
}

/// One served copy of a real repository: its name, `bitmap` or `no-bitmap`, where it is, and
/// how many objects it holds.
pub(crate) type Copy = (String, &'static str, PathBuf, u64);

/// Each of `repos` copied below `base` twice (heads and tags, `git clone --bare --no-local`, the
/// source never written to), freshly repacked with a bitmap (as `git gc` leaves a bare
/// repository) and without; copies made by an earlier run are reused.
pub(crate) fn repacked_copies(repos: &[PathBuf], base: &Path) -> Result<Vec<Copy>> {
    let mut copies = Vec::new();
    for source in repos {
        // A snapshot laid out as …/owner+name/repo is named after the repository.
        let named = match source.file_name().and_then(|n| n.to_str()) {
            Some("repo") => source.parent().and_then(|p| p.file_name()),
            _ => source.file_name(),
        };
        let named = named.context("repository name")?.to_string_lossy();
        let name = named.rsplit('+').next().unwrap_or(&named).trim_end_matches(".git").to_owned();
        for (state, flags) in [("bitmap", &["-adbq"][..]), ("no-bitmap", &["-adq", "--no-write-bitmap-index"][..])] {
            let dest = base.join(format!("{name}-{state}.git"));
            if !dest.join("HEAD").is_file() {
                let partial = base.join(format!("{name}-{state}.partial"));
                let _ = std::fs::remove_dir_all(&partial);
                crate::bench::output(
                    Command::new("git").args(["clone", "-q", "--bare", "--no-local"]).arg(source).arg(&partial),
                )?;
                crate::bench::output(Command::new("git").current_dir(&partial).args(["remote", "remove", "origin"]))?;
                crate::bench::output(Command::new("git").current_dir(&partial).arg("repack").args(flags))?;
                std::fs::rename(&partial, &dest)?;
            }
            let count = ["rev-list", "--objects", "--all", "--count"];
            let objects: u64 = crate::bench::output(Command::new("git").current_dir(&dest).args(count))?.parse()?;
            copies.push((name.clone(), state, dest, objects));
        }
    }
    Ok(copies)
}

/// A `--repo` argument: a path, and after `@` the burst sizes for that repository alone (`@8`,
/// `@8,32`): a 400 000-object repository's 64 clones take the clients' machine most of an hour.
fn repo_and_sizes(arg: &Path, sizes: &[usize]) -> Result<(PathBuf, Vec<usize>)> {
    let text = arg.to_string_lossy();
    match text.rsplit_once('@') {
        Some((path, own)) => {
            let own = own.split(',').map(|n| n.parse::<usize>()).collect::<Result<Vec<_>, _>>();
            Ok((PathBuf::from(path), own.with_context(|| format!("burst sizes in {text}"))?))
        }
        None => Ok((arg.to_owned(), sizes.to_vec())),
    }
}

pub fn run(root: &Path, rounds: usize, repos: Vec<PathBuf>, sizes: Vec<usize>, gixd: Option<PathBuf>) -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("each server goes into cgroups of its own: run as root");
    }
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let scratch = crate::tree::Scratch::new("bench-bursts")?;
    let base = root.join("target/bench-bursts");
    std::fs::create_dir_all(&base)?;
    let repos = repos.iter().map(|r| repo_and_sizes(r, &sizes)).collect::<Result<Vec<_>>>()?;
    let mut served_repos = Vec::new();
    let mut sizes_of = Vec::new();
    for (repo, own) in &repos {
        for copy in repacked_copies(std::slice::from_ref(repo), &base)? {
            sizes_of.push(own.clone());
            served_repos.push(copy);
        }
    }

    let (http, git_port, metrics) =
        (crate::bench::free_port()?, crate::bench::free_port()?, crate::bench::free_port()?);
    let mut cmd = Command::new(&gixd);
    cmd.args(["serve", "--export-all", "--listen", &format!("127.0.0.1:{http}")])
        .args(["--git-listen", &format!("127.0.0.1:{git_port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .arg("--base-path")
        .arg(&base)
        .env("GIXD_LOG", "warn");
    let mut gixd_server = start("gixd", cmd, &[http, git_port])?;
    gixd_server.version = crate::bench::output(Command::new(&gixd).arg("--version"))?;

    let daemon_port = crate::bench::free_port()?;
    let exec_path = crate::bench::output(Command::new("git").arg("--exec-path"))?;
    let mut cmd = Command::new(Path::new(&exec_path).join("git-daemon"));
    cmd.args(["--export-all", "--reuseaddr", "--listen=127.0.0.1", &format!("--port={daemon_port}")])
        .arg(format!("--base-path={}", base.display()));
    let mut daemon = start("git daemon", cmd, &[daemon_port])?;
    daemon.version = crate::bench::output(Command::new("git").arg("--version"))?;

    let backend_port = crate::bench::free_port()?;
    let conf = scratch.0.join("lighttpd.conf");
    let backend = Path::new(&exec_path).join("git-http-backend");
    std::fs::write(&conf, bench_support::http_backend_conf(&scratch.0, &base, &backend, backend_port, true))?;
    let mut cmd = Command::new("lighttpd");
    cmd.arg("-D").arg("-f").arg(&conf);
    let mut lighttpd = start("git http-backend", cmd, &[backend_port])?;
    lighttpd.version = crate::bench::output(Command::new("lighttpd").arg("-v")).unwrap_or_default();

    let startup = std::fs::read_to_string(format!("/proc/{}/status", gixd_server.child.id()))?;
    let threads = startup.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap_or("").trim().to_owned();
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "sizes": sizes,
            "gixd": format!("{} (release build), `serve` at its defaults (no pack cache), HTTP and git:// listeners in one process; {threads} threads at start", gixd_server.version),
            "git_daemon": daemon.version,
            "lighttpd": lighttpd.version,
            "effective_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "repos": served_repos.iter().zip(&sizes_of).map(|((n, s, _, o), sizes)| serde_json::json!({ "repo": n, "state": s, "objects": o, "sizes": sizes })).collect::<Vec<_>>(),
            "how": "each burst: `clients` stock git clones (protocol v2, --bare) started at once on this machine; refused = every clone that failed (gixd and http-backend say busy; git daemon resets connections past its --max-connections, 32 by default); CPU from each server's cpuacct cgroup; peak from its memory cgroup (reset before the burst, packs' page cache warmed beforehand) and the summed VmRSS of its processes sampled every 2 ms; idle = the memory cgroup's usage when the burst starts; gixd's spill and ranged bytes from its counters (gixd_transfer_spill_bytes_total, gixd_transfer_ranged_bytes_total) around the burst",
        }),
    )?;

    let mut runs = Vec::new();
    for ((name, state, path, _), sizes) in served_repos.iter().zip(&sizes_of) {
        let dir_name = path.file_name().unwrap().to_string_lossy().into_owned();
        for &clients in sizes {
            for round in 0..rounds {
                for arm in crate::bench::round_order(ARMS.len(), round).into_iter().map(|i| ARMS[i]) {
                    let (server, url) = match arm {
                        "gixd http" => (&gixd_server, format!("http://127.0.0.1:{http}/{dir_name}")),
                        "gixd git://" => (&gixd_server, format!("git://127.0.0.1:{git_port}/{dir_name}")),
                        "git http-backend" => (&lighttpd, format!("http://127.0.0.1:{backend_port}/git/{dir_name}")),
                        _ => (&daemon, format!("git://127.0.0.1:{daemon_port}/{dir_name}")),
                    };
                    warm(path)?;
                    // gixd's spill and ranges, from its counters around the burst.
                    let counters = || -> Result<(u64, u64)> {
                        let text = metrics_text(metrics)?;
                        let read = |name: &str| {
                            text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
                                as u64
                        };
                        Ok((read("gixd_transfer_spill_bytes_total "), read("gixd_transfer_ranged_bytes_total ")))
                    };
                    let before = counters()?;
                    let b = burst(server, &url, clients, &scratch.0)?;
                    let after = counters()?;
                    let (spill, ranged) = match arm.starts_with("gixd") {
                        true => (Some(after.0 - before.0), Some(after.1 - before.1)),
                        false => (None, None),
                    };
                    runs.push(serde_json::json!({
                        "repo": name, "state": state, "clients": clients, "arm": arm, "round": round,
                        "served": b.served, "refused": b.refused.len(), "refused_said": b.refused.first(), "wall_ms": b.wall.as_millis() as u64,
                        "cpu_us": b.cpu_us, "peak_rss_kb": b.peak_rss_kb, "cgroup_peak_bytes": b.cgroup_peak_bytes,
                        "idle_bytes": b.idle_bytes, "spill_bytes": spill, "ranged_bytes": ranged,
                    }));
                    eprintln!(
                        "{name} {state} {clients} {arm}: served {} refused {} wall {:?} cpu {} ms rss {} MiB cgroup {} MiB (idle {} MiB) spill {:?}",
                        b.served,
                        b.refused.len(),
                        b.wall,
                        b.cpu_us / 1000,
                        b.peak_rss_kb / 1024,
                        b.cgroup_peak_bytes >> 20,
                        b.idle_bytes >> 20,
                        spill
                    );
                }
            }
        }
    }
    // The most transfers that held a slot at once, from gixd's metrics.
    let scraped = metrics_text(metrics)?;
    let most =
        scraped.lines().find_map(|l| l.strip_prefix("gixd_transfers_in_flight_max ")).unwrap_or("?").trim().to_owned();
    let mut conditions = conditions;
    conditions["gixd_transfers_in_flight_max"] = most.into();
    drop((gixd_server, daemon, lighttpd));
    let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup/cpuacct").join(CGROUP));
    let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup/memory").join(CGROUP));
    crate::bench::finish(root, BURSTS_RESULTS, conditions, runs)
}

/// `GET /metrics` on loopback `port`, over a plain socket.
fn metrics_text(port: u16) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}
