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

use super::table::*;
use anyhow::{Context, Result, bail};
use serde_json::Value;

pub const BURSTS_RESULTS: &str = "bench/results/bursts.json";

/// The same over HTTPS and SSH (`--secure`).
pub const BURSTS_SECURE_RESULTS: &str = "bench/results/bursts-secure.json";

const CGROUP: &str = "gixd-bench-bursts";

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

    /// Give back the page cache charged to the group (v1 `memory.force_empty`; what its processes
    /// allocated stays): the host's proactive reclaim (DAMON `pageout` of pages idle for a minute)
    /// evicts pack pages this process warmed, the server that faults them in again is charged
    /// for them, and they stayed charged after its bursts of that repository ended (gixd's idle
    /// cgroup at 12-15 MiB of page cache, 2-3 MiB of its own).
    pub(crate) fn drop_page_cache(&self) -> Result<()> {
        Ok(std::fs::write(self.dir("memory").join("memory.force_empty"), "0")?)
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
        bench_support::run::wait_for_port(*port)?;
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

fn burst(server: &Server, url: &str, env: &[(String, String)], clients: usize, scratch: &Path) -> Result<Burst> {
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
                    .envs(env.iter().map(|(k, v)| (k, v)))
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

/// Read the servers' programs (gixd; git and its exec-path, lighttpd, sshd where present), so
/// their pages are cached and charged to us as the packs' are: a server's memory cgroup is
/// charged a program page by the first process that touches it, and stock git's pages are
/// touched by the cloning clients first, so without this gixd alone paid for its own code
/// (up to 18 MiB of an idle gixd's cgroup).
pub(crate) fn warm_programs(gixd: &Path) -> Result<()> {
    let exec_path = bench_support::run::output(Command::new("git").arg("--exec-path"))?;
    let mut programs = vec![gixd.to_owned(), PathBuf::from("/usr/sbin/lighttpd"), PathBuf::from("/usr/sbin/sshd")];
    for entry in std::fs::read_dir(exec_path.trim())? {
        programs.push(entry?.path());
    }
    for program in programs.iter().filter(|p| p.is_file()) {
        std::io::copy(&mut std::fs::File::open(program)?, &mut std::io::sink())?;
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
                bench_support::run::output(
                    Command::new("git").args(["clone", "-q", "--bare", "--no-local"]).arg(source).arg(&partial),
                )?;
                bench_support::run::output(
                    Command::new("git").current_dir(&partial).args(["remote", "remove", "origin"]),
                )?;
                bench_support::run::output(Command::new("git").current_dir(&partial).arg("repack").args(flags))?;
                std::fs::rename(&partial, &dest)?;
            }
            let count = ["rev-list", "--objects", "--all", "--count"];
            let objects: u64 =
                bench_support::run::output(Command::new("git").current_dir(&dest).args(count))?.parse()?;
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

/// `cargo xtask bench bursts`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Bare repositories to serve (copied and repacked under target/bench-bursts/); `PATH@8,32`
    /// gives that repository burst sizes of its own instead of `--clients`.
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64")]
    pub clients: Vec<usize>,
    /// Over HTTPS and SSH instead: gixd against git http-backend behind lighttpd with TLS and
    /// git behind OpenSSH's sshd (bench/results/bursts-secure.json).
    #[arg(long)]
    pub secure: bool,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, clients: sizes, secure, gixd } = args;
    if !bench_support::run::is_root() {
        bail!("each server goes into cgroups of its own: run as root");
    }
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    warm_programs(&gixd)?;
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

    let metrics = bench_support::run::free_port()?;
    let (servers, arms, describe) = if secure {
        secure_servers(&gixd, &base, &scratch.0, metrics)?
    } else {
        plain_servers(&gixd, &base, &scratch.0, metrics)?
    };
    let startup = std::fs::read_to_string(format!("/proc/{}/status", servers[0].child.id()))?;
    let threads = startup.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap_or("").trim().to_owned();
    let mut described = serde_json::json!({
        "rounds": rounds,
        "sizes": sizes,
        "arms": arms.iter().map(|a| a.name).collect::<Vec<_>>(),
        "effective_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "repos": served_repos.iter().zip(&sizes_of).map(|((n, s, _, o), sizes)| serde_json::json!({ "repo": n, "state": s, "objects": o, "sizes": sizes })).collect::<Vec<_>>(),
        "how": "each burst: `clients` stock git clones (protocol v2, --bare) started at once on this machine; refused = every clone that failed (gixd and http-backend say busy; git daemon resets connections past its --max-connections, 32 by default); CPU from each server's cpuacct cgroup; peak from its memory cgroup (reset before the burst, the page cache charged to it given back and the packs' and the servers' programs' page cache warmed beforehand) and the summed VmRSS of its processes sampled every 2 ms; idle = the memory cgroup's usage when the burst starts; gixd's spill and ranged bytes from its counters (gixd_transfer_spill_bytes_total, gixd_transfer_ranged_bytes_total) around the burst",
    });
    for (key, value) in describe {
        described[key] = value.into();
    }
    described["gixd"] = format!(
        "{described_gixd} {threads} threads at start",
        described_gixd = described["gixd"].as_str().unwrap_or("?")
    )
    .into();
    let conditions = crate::bench::conditions(root, described)?;

    let mut runs = Vec::new();
    for ((name, state, path, _), sizes) in served_repos.iter().zip(&sizes_of) {
        let dir_name = path.file_name().unwrap().to_string_lossy().into_owned();
        for &clients in sizes {
            for round in 0..rounds {
                for arm in bench_support::run::round_order(arms.len(), round).into_iter().map(|i| &arms[i]) {
                    let (server, url) = (&servers[arm.server], arm.url.replace("{repo}", &dir_name));
                    let arm_env = &arm.env;
                    let arm = arm.name;
                    server.group.drop_page_cache()?;
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
                    let b = burst(server, &url, arm_env, clients, &scratch.0)?;
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
    drop(servers);
    let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup/cpuacct").join(CGROUP));
    let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup/memory").join(CGROUP));
    crate::bench::finish(root, if secure { BURSTS_SECURE_RESULTS } else { BURSTS_RESULTS }, conditions, runs)
}

/// One arm of a burst: its name, which of the servers answers it, the URL of a repository
/// (`{repo}` stands for its directory's name) and what a client needs in its environment.
pub(crate) struct Arm {
    name: &'static str,
    server: usize,
    url: String,
    env: Vec<(String, String)>,
}

/// What the run's conditions say of the servers it started.
type Described = Vec<(&'static str, String)>;

/// gixd at its defaults over HTTP and git://, git daemon, git http-backend behind lighttpd.
fn plain_servers(gixd: &Path, base: &Path, scratch: &Path, metrics: u16) -> Result<(Vec<Server>, Vec<Arm>, Described)> {
    let (http, git_port) = (bench_support::run::free_port()?, bench_support::run::free_port()?);
    let mut cmd = Command::new(gixd);
    cmd.args(["serve", "--export-all", "--listen", &format!("127.0.0.1:{http}")])
        .args(["--git-listen", &format!("127.0.0.1:{git_port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .arg("--base-path")
        .arg(base)
        .env("GIXD_LOG", "warn");
    let mut gixd_server = start("gixd", cmd, &[http, git_port])?;
    gixd_server.version = bench_support::run::output(Command::new(gixd).arg("--version"))?;

    let daemon_port = bench_support::run::free_port()?;
    let exec_path = bench_support::run::output(Command::new("git").arg("--exec-path"))?;
    let mut cmd = Command::new(Path::new(&exec_path).join("git-daemon"));
    cmd.args(["--export-all", "--reuseaddr", "--listen=127.0.0.1", &format!("--port={daemon_port}")])
        .arg(format!("--base-path={}", base.display()));
    let mut daemon = start("git daemon", cmd, &[daemon_port])?;
    daemon.version = bench_support::run::output(Command::new("git").arg("--version"))?;

    let backend_port = bench_support::run::free_port()?;
    let conf = scratch.join("lighttpd.conf");
    let backend = Path::new(&exec_path).join("git-http-backend");
    std::fs::write(&conf, bench_support::http_backend_conf(scratch, base, &backend, backend_port, true))?;
    let mut cmd = Command::new("lighttpd");
    cmd.arg("-D").arg("-f").arg(&conf);
    let mut lighttpd = start("git http-backend", cmd, &[backend_port])?;
    lighttpd.version = bench_support::run::output(Command::new("lighttpd").arg("-v")).unwrap_or_default();

    let arm = |name, server, url: String| Arm { name, server, url, env: Vec::new() };
    let arms = vec![
        arm("gixd http", 0, format!("http://127.0.0.1:{http}/{{repo}}")),
        arm("gixd git://", 0, format!("git://127.0.0.1:{git_port}/{{repo}}")),
        arm("git http-backend", 2, format!("http://127.0.0.1:{backend_port}/git/{{repo}}")),
        arm("git daemon", 1, format!("git://127.0.0.1:{daemon_port}/{{repo}}")),
    ];
    let described = vec![
        (
            "gixd",
            format!(
                "{} (release build), `serve` at its defaults (no pack cache), HTTP and git:// listeners in one process;",
                gixd_server.version
            ),
        ),
        ("git_daemon", daemon.version.clone()),
        ("lighttpd", lighttpd.version.clone()),
    ];
    Ok((vec![gixd_server, daemon, lighttpd], arms, described))
}

/// git http-backend behind lighttpd with TLS (`cert`, `key`) on `port`, serving `base`, started
/// in a cgroup `name`.
pub(crate) fn http_backend_tls(
    name: &str,
    scratch: &Path,
    base: &Path,
    port: u16,
    (cert, key): (&Path, &Path),
) -> Result<Server> {
    let exec_path = bench_support::run::output(Command::new("git").arg("--exec-path"))?;
    let conf = scratch.join("lighttpd.conf");
    let backend = Path::new(&exec_path).join("git-http-backend");
    let mut text = bench_support::http_backend_conf(scratch, base, &backend, port, true);
    text = text.replacen("server.modules = (", "server.modules = (\"mod_openssl\", ", 1);
    text.push_str(&format!(
        "ssl.engine = \"enable\"\nssl.pemfile = \"{}\"\nssl.privkey = \"{}\"\n",
        cert.display(),
        key.display()
    ));
    std::fs::write(&conf, text)?;
    let mut cmd = Command::new("lighttpd");
    cmd.arg("-D").arg("-f").arg(&conf);
    let mut lighttpd = start(name, cmd, &[port])?;
    lighttpd.version = bench_support::run::output(Command::new("lighttpd").arg("-v")).unwrap_or_default();
    Ok(lighttpd)
}

/// gixd at its defaults over HTTPS and its in-process SSH, git http-backend behind lighttpd with
/// TLS, git behind Debian's OpenSSH sshd; the clients trust the run's self-signed certificate and
/// use a key of the run's.
fn secure_servers(
    gixd: &Path,
    base: &Path,
    scratch: &Path,
    metrics: u16,
) -> Result<(Vec<Server>, Vec<Arm>, Described)> {
    let (cert, key) = crate::bench::self_signed_cert(scratch)?;
    let keygen = |name: &str| crate::bench::ssh_key(scratch, name);
    let (client_key, host_key) = (keygen("client_key")?, keygen("ssh_host_ed25519_key")?);
    let tokens = scratch.join("tokens.toml");
    bench_support::run::output(
        Command::new(gixd)
            .args(["key", "add", "--user", "bench", "--key-file"])
            .arg(client_key.with_extension("pub"))
            .arg("--token-file")
            .arg(&tokens),
    )?;
    let config = scratch.join("gixd.toml");
    std::fs::write(
        &config,
        format!(
            "base_path = {:?}\ntoken_file = {:?}\nexport_all = true\n",
            base.display().to_string(),
            tokens.display().to_string()
        ),
    )?;
    let (http, https, ssh) =
        (bench_support::run::free_port()?, bench_support::run::free_port()?, bench_support::run::free_port()?);
    let mut cmd = Command::new(gixd);
    cmd.args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{http}"), "--https-listen", &format!("127.0.0.1:{https}")])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .args(["--ssh-listen", &format!("127.0.0.1:{ssh}"), "--ssh-host-key"])
        .arg(scratch.join("gixd_host_key"))
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .env("GIXD_LOG", "warn");
    let mut gixd_server = start("gixd", cmd, &[http, https, ssh])?;
    gixd_server.version = bench_support::run::output(Command::new(gixd).arg("--version"))?;

    let backend_port = bench_support::run::free_port()?;
    let lighttpd = http_backend_tls("git http-backend https", scratch, base, backend_port, (&cert, &key))?;

    std::fs::create_dir_all("/run/sshd")?;
    let sshd_port = bench_support::run::free_port()?;
    let authorized = scratch.join("authorized_keys");
    std::fs::write(&authorized, std::fs::read_to_string(client_key.with_extension("pub"))?)?;
    let sshd_config = scratch.join("sshd_config");
    std::fs::write(
        &sshd_config,
        format!(
            "Port {sshd_port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nAcceptEnv GIT_PROTOCOL\n\
             PermitRootLogin prohibit-password\nStrictModes no\nMaxStartups 100\n",
            host_key.display(),
            scratch.join("sshd.pid").display(),
            authorized.display(),
        ),
    )?;
    let mut cmd = Command::new("/usr/sbin/sshd");
    cmd.args(["-D", "-f"]).arg(&sshd_config);
    let mut sshd = start("git (sshd)", cmd, &[sshd_port])?;
    let version = Command::new("ssh").arg("-V").output()?;
    sshd.version = String::from_utf8_lossy(&version.stderr).trim().to_owned();

    let tls = vec![("GIT_SSL_CAINFO".to_owned(), cert.display().to_string())];
    let ssh_env = vec![("GIT_SSH_COMMAND".to_owned(), crate::bench::ssh_command(&client_key))];
    let arms = vec![
        Arm { name: "gixd https", server: 0, url: format!("https://127.0.0.1:{https}/{{repo}}"), env: tls.clone() },
        Arm { name: "gixd ssh", server: 0, url: format!("ssh://bench@127.0.0.1:{ssh}/{{repo}}"), env: ssh_env.clone() },
        Arm {
            name: "git http-backend https",
            server: 1,
            url: format!("https://127.0.0.1:{backend_port}/git/{{repo}}"),
            env: tls,
        },
        Arm {
            name: "git (sshd)",
            server: 2,
            url: format!("ssh://root@127.0.0.1:{sshd_port}{}/{{repo}}", base.display()),
            env: ssh_env,
        },
    ];
    let described = vec![
        (
            "gixd",
            format!(
                "{} (release build), `serve` at its defaults (no pack cache), HTTPS and SSH listeners in one process;",
                gixd_server.version
            ),
        ),
        ("lighttpd", lighttpd.version.clone()),
        ("sshd", sshd.version.clone()),
        ("git_daemon", bench_support::run::output(Command::new("git").arg("--version"))?),
    ];
    Ok((vec![gixd_server, lighttpd, sshd], arms, described))
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

// The report.

/// The bursts' arms side by side: gixd's, git's, and how the row names them.
pub const PLAIN_PAIRS: [(&str, &str, &str); 2] =
    [("gixd http", "git http-backend", "HTTP, http-backend"), ("gixd git://", "git daemon", "git://, git daemon")];

pub const SECURE_PAIRS: [(&str, &str, &str); 2] = [
    ("gixd https", "git http-backend https", "HTTPS, http-backend (lighttpd TLS)"),
    ("gixd ssh", "git (sshd)", "SSH, git behind OpenSSH"),
];

/// Bursts of distinct clones: gixd over each transport against git's server for it (HTTP: git
/// http-backend; git://: git daemon), a row per repository state, burst size and transport, the
/// row furthest from its goals first: any refused clone; CPU ≤ 1.0× git's (issue 45); the memory
/// cgroup's peak ≤ 0.3× git's for 8+ clones of a repository of 300 000 objects or more and for
/// 32+ clones of any, and in smaller rows the peak above gixd's idle footprint ≤ 0.3× git's peak
/// (issue 59); gixd's spill per clone beside it.
pub fn render(root: &Path, results: &str, flag: &str, pairs: &[(&str, &str, &str)]) -> Result<String> {
    let doc = match load(
        root,
        results,
        &format!(
            "`cargo xtask bench bursts{flag} --repo PATH…` (by hand, as root: it needs the repositories and cgroups)"
        ),
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, &format!("cargo xtask bench bursts{flag}"))?;
    out.push_str(&format!(
        " gixd: {}. git: {}. http-backend under {}.{} {} Most transfers holding a slot at once in gixd over the run: {}. Medians over rounds; refused clones summed.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_daemon"].as_str().unwrap_or("?"),
        c["lighttpd"].as_str().unwrap_or("?").lines().next().unwrap_or("?"),
        c["sshd"].as_str().map_or(String::new(), |v| format!(" sshd: {v}.")),
        c["how"].as_str().unwrap_or("?"),
        c["gixd_transfers_in_flight_max"].as_str().unwrap_or("?"),
    ));
    out.push_str("A clone that failed counts as refused, whatever it said (git daemon resets the connections past its `--max-connections`, 32 by default). CPU is per clone served, so a server that refused some is not credited for the work it did not do.\n\n");
    out.push_str("Peak goal (issue 59): the cgroup peak ≤ 0.3× git's for 8+ clones of 300 000+ objects and 32+ clones of any; in smaller rows the peak above gixd's idle footprint (its cgroup's use as the burst starts) ≤ 0.3× git's peak; one clone: bitmapped, of 300 000+ objects, CPU ≤ 0.2× git's; without a bitmap, peak ≤ 1.0× git's. Spill is what gixd wrote to its spill directory per clone served.\n\n");
    out.push_str("| repository | objects | bitmap | clones | gixd over, against | refused: gixd | git | CPU ms per served clone: gixd | git | ÷ | wall s: gixd | git | ÷ | cgroup peak MiB: gixd | git | ÷ | gixd idle MiB | peak goal | spill MiB per clone: gixd | RSS peak MiB: gixd | git | ÷ |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let (name, state) = (repo["repo"].as_str().context("repo")?, repo["state"].as_str().context("state")?);
        // A repository's own burst sizes, else the run's.
        let sizes = repo["sizes"].as_array().or_else(|| c["sizes"].as_array()).context("sizes")?;
        for clients in sizes.iter().filter_map(Value::as_u64) {
            for &(ours, theirs, transport) in pairs {
                let of = |arm: &str| -> Vec<&Value> {
                    runs.iter()
                        .filter(|r| {
                            r["repo"] == name && r["state"] == state && r["clients"] == clients && r["arm"] == arm
                        })
                        .collect()
                };
                let (a, b) = (of(ours), of(theirs));
                if a.is_empty() || b.is_empty() {
                    continue;
                }
                let med = |rs: &[&Value], key: &str| median(rs.iter().filter_map(|r| r[key].as_f64()).collect());
                let sum = |rs: &[&Value], key: &str| rs.iter().filter_map(|r| r[key].as_u64()).sum::<u64>();
                let (ra, rb) = (sum(&a, "refused"), sum(&b, "refused"));
                let per_served = |rs: &[&Value]| {
                    median(
                        rs.iter()
                            .filter_map(|r| Some(r["cpu_us"].as_f64()? / r["served"].as_f64().filter(|n| *n > 0.0)?))
                            .collect(),
                    ) / 1e3
                };
                let (ca, cb) = (per_served(&a), per_served(&b));
                let (wa, wb) = (med(&a, "wall_ms") / 1e3, med(&b, "wall_ms") / 1e3);
                let (ma, mb) = (med(&a, "cgroup_peak_bytes") / 1048576.0, med(&b, "cgroup_peak_bytes") / 1048576.0);
                let (pa, pb) = (med(&a, "peak_rss_kb") / 1024.0, med(&b, "peak_rss_kb") / 1024.0);
                // Older results lack the idle footprint and the spill: not measured.
                let idle = a.iter().all(|r| r["idle_bytes"].is_u64()).then(|| med(&a, "idle_bytes") / 1048576.0);
                let spill = a.iter().all(|r| r["spill_bytes"].is_u64()).then(|| {
                    median(
                        a.iter()
                            .filter_map(|r| {
                                Some(r["spill_bytes"].as_f64()? / r["served"].as_f64().filter(|n| *n > 0.0)?)
                            })
                            .collect(),
                    ) / 1048576.0
                });
                let whole_peak = clients >= 32 || (clients >= 8 && repo["objects"].as_u64().unwrap_or(0) >= 300_000);
                let judged = if whole_peak { Some(ma) } else { idle.map(|idle| (ma - idle).max(0.0)) };
                let met = |ok: bool| if ok { "met" } else { "**missed**" };
                let large = repo["objects"].as_u64().unwrap_or(0) >= 300_000;
                let peak_goal = match judged {
                    // One clone: a bitmapped one of a large repository costs ≤ 0.2× git's CPU, a
                    // clone without a bitmap peaks ≤ 1.0× git's.
                    _ if clients == 1 && state == "bitmap" && large => {
                        format!("{} (CPU {}, goal ≤ 0.2)", met(ca <= 0.2 * cb), ratio(cb, ca))
                    }
                    _ if clients == 1 && state != "bitmap" => {
                        format!("{} (peak {}, goal ≤ 1.0)", met(ma <= mb), ratio(mb, ma))
                    }
                    Some(peak) => format!(
                        "{} ({}{})",
                        met(peak <= 0.3 * mb),
                        if whole_peak { "peak " } else { "above idle " },
                        ratio(mb, peak)
                    ),
                    None => "not measured".into(),
                };
                let badness = if ra > 0 { f64::INFINITY } else { (ca / cb).max(judged.unwrap_or(ma) / mb / 0.3) };
                let row = format!(
                    "| {name} | {} | {} | {clients} | {transport} | {ra} | {rb} | {ca:.1} | {cb:.1} | {} | {wa:.1} | {wb:.1} | {} | {ma:.0} | {mb:.0} | {} | {} | {peak_goal} | {} | {pa:.0} | {pb:.0} | {} |\n",
                    repo["objects"],
                    if state == "bitmap" { "yes" } else { "no" },
                    ratio(cb, ca),
                    ratio(wb, wa),
                    ratio(mb, ma),
                    idle.map_or("not measured".into(), |i| format!("{i:.0}")),
                    spill.map_or("not measured".into(), |s| format!("{s:.1}")),
                    ratio(pb, pa),
                );
                rows.push((badness, row));
            }
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}
