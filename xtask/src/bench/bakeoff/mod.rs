//! The bake-off: gixd against git http-backend (lighttpd, CGI), git daemon and JGit's daemon,
//! all real servers started here, each behind the same counting relay and in a cgroup of its own
//! (cpuacct: CPU of the whole process tree, exited children included; cpu/cpuset: the quota or
//! the pin the ramp runs under, read back from the kernel). Operations run one arm after the
//! other, the order swapped every round; every client's exit status and resulting tip are
//! checked, and a failure aborts the run rather than scoring it. Results append as JSON lines
//! (a `conditions` line, then one line per measurement) to `bench/results/bakeoff/<run>.jsonl`;
//! [`render`] writes `bench/bakeoff.md` and `bench/bakeoff.svg` from that file only (as part of
//! `cargo xtask report`).
//!
//! `cargo xtask bench bakeoff [--quick] [--rounds N] [--repo PATH]… [--label NAME] [--identical N [--split-cpus | --placements shared,split]]`

pub mod render;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench_support::relay::{Relay, Upstream};
use bench_support::run::{free_port, output, round_order, wait_for_port};

/// One file per run, `<run id>.jsonl`; a run that did not finish stays `.jsonl.partial` and is
/// removed by the next run, so only finished runs are ever rendered or committed.
pub const RESULTS: &str = "bench/results/bakeoff";
const CGROUP: &str = "gixd-bakeoff";

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    output(
        Command::new("git")
            .current_dir(dir)
            .env("GIT_TERMINAL_PROMPT", "0")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@gixd"])
            .args(args),
    )
}

/// Run a client command; its wall time, or the reason it failed (which aborts the run).
fn client(dir: &Path, args: &[&str]) -> Result<Duration> {
    let start = Instant::now();
    let out = Command::new("git").current_dir(dir).env("GIT_TERMINAL_PROMPT", "0").args(args).output()?;
    let wall = start.elapsed();
    if !out.status.success() {
        bail!("client failed: git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(wall)
}

/// `cargo xtask bench bakeoff`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    /// A few minutes: 2 rounds (unless `--rounds`), the ramp at 1 and 4 clients.
    #[arg(long)]
    quick: bool,
    /// Rounds (default 3, 2 with `--quick`).
    #[arg(long)]
    rounds: Option<usize>,
    /// Bare repositories to serve (default: the corpus's linear and wide).
    #[arg(long)]
    repo: Vec<PathBuf>,
    /// Runs with a label are rendered into their own report (`bench/bakeoff-<label>.md`):
    /// letters, digits and dashes.
    #[arg(long)]
    label: Option<String>,
    /// Instead of the operations and the ramp, N identical concurrent clones against one, for
    /// gixd with its pack cache, gixd without it and git daemon.
    #[arg(long, default_value_t = 0)]
    identical: usize,
    /// With `--identical`: servers on the first CPU, clients and relay on the others.
    #[arg(long, conflicts_with = "placements")]
    split_cpus: bool,
    /// With `--identical`: each round in every placement given (`shared`, `split`).
    #[arg(long)]
    placements: Option<String>,
}

struct Options {
    quick: bool,
    /// Runs with a label are rendered into their own report (`bench/bakeoff-<label>.md`).
    label: Option<String>,
    rounds: usize,
    repos: Vec<PathBuf>,
    rungs: Vec<usize>,
    /// `--identical N`: instead of the operations and the ramp, N identical concurrent clones
    /// against one, for gixd with its pack cache, gixd without it and git daemon.
    identical: usize,
    /// `--placements shared,split` (with `--identical`): where servers and clients run, each
    /// round in every placement given ([`Placement`]). `--split-cpus` is `--placements split`.
    placements: Vec<Placement>,
}

/// Where the identical-clones servers and their clients run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Placement {
    /// Servers, clients and the relay on every CPU (the default).
    Shared,
    /// Every server pinned to the first CPU, the clients and the relay to the others: a
    /// server's CPU is then not also what sharing its cores with the clients' `index-pack`s
    /// costs it.
    Split,
}

impl Placement {
    fn parse(list: &str) -> Result<Vec<Placement>> {
        list.split(',')
            .map(|p| match p {
                "shared" => Ok(Placement::Shared),
                "split" => Ok(Placement::Split),
                other => bail!("unknown placement {other:?} (shared, split)"),
            })
            .collect()
    }
}

fn parse(args: Args) -> Result<Options> {
    let quick = args.quick;
    let mut o = Options {
        quick,
        label: None,
        rounds: args.rounds.unwrap_or(if quick { 2 } else { 3 }),
        repos: args.repo.iter().map(|r| r.canonicalize()).collect::<Result<_, _>>()?,
        rungs: if quick { vec![1, 4] } else { vec![1, 2, 4, 8, 16, 32] },
        identical: args.identical,
        placements: match (&args.placements, args.split_cpus) {
            (Some(list), _) => Placement::parse(list)?,
            (None, true) => vec![Placement::Split],
            (None, false) => vec![Placement::Shared],
        },
    };
    if let Some(label) = args.label {
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            bail!("--label takes letters, digits and dashes");
        }
        o.label = Some(label);
    }
    if o.placements != [Placement::Shared] && o.identical == 0 {
        bail!("--split-cpus and --placements go with --identical N");
    }
    if o.identical > 0 && o.label.is_none() {
        // Its own report: the default one shows the operations and the ramp.
        o.label = Some(
            match o.placements[..] {
                [Placement::Shared] => "identical",
                [Placement::Split] => "identical-split",
                _ => "identical-placements",
            }
            .into(),
        );
    }
    Ok(o)
}

/// A cgroup of one arm in the v1 hierarchies (cpuacct for CPU, cpu for the quota, cpuset for
/// the pin).
struct Group {
    name: String,
}

impl Group {
    fn dir(&self, hierarchy: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup").join(hierarchy).join(CGROUP).join(&self.name)
    }

    fn create(name: &str) -> Result<Group> {
        let group = Group { name: name.to_owned() };
        for h in ["cpuacct", "cpu", "cpuset"] {
            std::fs::create_dir_all(group.dir(h)).with_context(|| {
                format!("creating cgroup {} (the bake-off needs root and cgroup v1)", group.dir(h).display())
            })?;
        }
        // A cpuset needs its CPUs and memory nodes before it takes a process.
        let parent = Path::new("/sys/fs/cgroup/cpuset");
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let value = std::fs::read_to_string(parent.join(file))?;
            std::fs::write(parent.join(CGROUP).join(file), value.trim())?;
            std::fs::write(group.dir("cpuset").join(file), value.trim())?;
        }
        Ok(group)
    }

    fn enter(&self, pid: u32) -> Result<()> {
        for h in ["cpuacct", "cpu", "cpuset"] {
            std::fs::write(self.dir(h).join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// CPU of every task that ever ran in the group, in µs.
    fn cpu_us(&self) -> Result<u64> {
        Ok(std::fs::read_to_string(self.dir("cpuacct").join("cpuacct.usage"))?.trim().parse::<u64>()? / 1000)
    }

    fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir("cpuacct").join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    }

    /// Limit to `cpus` CPUs of quota (None: no quota) and pin to `pinned` (None: all CPUs).
    fn limit(&self, quota_cpus: Option<f64>, pinned: Option<&str>) -> Result<()> {
        let period = 100_000u64;
        std::fs::write(self.dir("cpu").join("cpu.cfs_period_us"), period.to_string())?;
        let quota = quota_cpus.map_or(-1i64, |c| (c * period as f64) as i64);
        std::fs::write(self.dir("cpu").join("cpu.cfs_quota_us"), quota.to_string())?;
        let all = std::fs::read_to_string("/sys/fs/cgroup/cpuset/cpuset.cpus")?;
        std::fs::write(self.dir("cpuset").join("cpuset.cpus"), pinned.unwrap_or(all.trim()))?;
        Ok(())
    }

    /// The limits as the kernel has them.
    fn read_back(&self) -> Result<String> {
        let read = |h: &str, f: &str| std::fs::read_to_string(self.dir(h).join(f)).map(|s| s.trim().to_owned());
        Ok(format!(
            "quota {} per {} µs, cpus {}",
            read("cpu", "cpu.cfs_quota_us")?,
            read("cpu", "cpu.cfs_period_us")?,
            read("cpuset", "cpuset.cpus")?
        ))
    }
}

/// Peak RSS of the group's processes, sampled every 2 ms while an operation runs.
struct RssSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl RssSampler {
    fn start(pids_file: PathBuf) -> RssSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = 0u64;
            loop {
                peak = peak.max(bench_support::rss_kb_of(&pids_file));
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        RssSampler { stop, handle }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap_or(0)
    }
}

/// One server under test.
struct Arm {
    name: &'static str,
    version: String,
    child: Child,
    group: Group,
    relay: Relay,
    /// URL prefix through the relay; a repository's URL is `<prefix>/<name>`.
    prefix: String,
    base: PathBuf,
    /// gixd's access log (`--access-log`), for the arms with a pack cache: which requests
    /// generated a pack and the CPU each used.
    access_log: Option<PathBuf>,
}

impl Arm {
    /// Open a measurement: the relay's count reset; the CPU so far.
    fn begin(&self) -> Result<u64> {
        self.relay.take();
        self.group.cpu_us()
    }

    /// Close it: once the server's tree is back to the server alone (forking servers reap their
    /// children a moment after the client is done), the CPU used since `cpu0` and the bytes sent.
    fn end(&self, cpu0: u64) -> Result<(u64, u64)> {
        settle(&self.group, self.child.id());
        Ok((self.group.cpu_us()? - cpu0, self.relay.take()))
    }
}

impl Drop for Arm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private copy of every repository for one arm (pushes land there), set up for all
/// operations: filters allowed, pushes over HTTP allowed.
fn prepare_base(scratch: &Path, arm: &str, repos: &[PathBuf]) -> Result<PathBuf> {
    let base = scratch.join(arm);
    std::fs::create_dir_all(&base)?;
    for repo in repos {
        // A hand run's or an interrupted bench's refs would be copied into every arm and read by
        // every request (loose, one file each): the repository is not the one measured before.
        let left = git(repo, &["for-each-ref", "--format=%(refname)", "refs/bench/"])?;
        if !left.trim().is_empty() {
            bail!("{} has refs under refs/bench/ left from an earlier run; delete them first:\n{left}", repo.display());
        }
        let dest = base.join(repo.file_name().context("repo name")?);
        output(Command::new("cp").arg("-a").arg(repo).arg(&dest))?;
        git(&dest, &["config", "uploadpack.allowFilter", "true"])?;
        git(&dest, &["config", "http.receivepack", "true"])?;
    }
    Ok(base)
}

/// How an arm's gixd keeps its pack cache.
#[derive(Clone, Copy, PartialEq)]
enum Cache {
    Off,
    /// `--pack-cache`: entries in memory (anonymous windows) up to the default cap.
    Memory,
    /// `--pack-cache --pack-cache-memory 0 --pack-cache-dir D`: every entry a file in D on the
    /// disk's filesystem (target/, not the temp dir, which may be a tmpfs), read from the page
    /// cache.
    Disk,
}

fn start_gixd(root: &Path, base: &Path, group: Group, cache: Cache) -> Result<Arm> {
    let gixd = root.join("target/release/gixd");
    let tokens = base.join("tokens.toml");
    let secret =
        output(Command::new(&gixd).args(["token", "add", "--user", "bench", "--write", "--token-file"]).arg(&tokens))?;
    let port = free_port()?;
    // The peers queue without limit (lighttpd spawns a CGI per request, git daemon a process per
    // connection); gixd's transfer limit would answer part of a 32-client rung "busy, retry",
    // which stock git does not retry. So transfers wait up to 5 minutes here instead of 5 s.
    let cache_dir = root.join("target/bench-pack-cache").join(base.file_name().unwrap_or_default());
    if cache == Cache::Disk {
        std::fs::create_dir_all(&cache_dir)?;
    }
    let access_log = (cache != Cache::Off).then(|| base.with_extension("access.jsonl"));
    let child = Command::new(&gixd)
        .args(["serve", "--export-all", "--queue-wait", "300", "--listen", &format!("127.0.0.1:{port}"), "--base-path"])
        .arg(base)
        .arg("--token-file")
        .arg(&tokens)
        .args(match cache {
            Cache::Off => vec![],
            Cache::Memory => vec!["--pack-cache".into()],
            Cache::Disk => vec![
                "--pack-cache".into(),
                "--pack-cache-memory".into(),
                "0".into(),
                "--pack-cache-dir".into(),
                cache_dir.clone().into_os_string(),
            ],
        })
        .args(access_log.iter().flat_map(|log| [std::ffi::OsStr::new("--access-log"), log.as_os_str()]))
        .env("GIXD_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()?;
    group.enter(child.id())?;
    wait_for_port(port)?;
    let relay = Relay::start(Upstream::Tcp(([127, 0, 0, 1], port).into()))?;
    let prefix = format!("http://bench:{secret}@127.0.0.1:{}", relay.port);
    let version = output(Command::new(&gixd).arg("--version"))?;
    let (flags, name) = match cache {
        Cache::Off => ("", "gixd"),
        Cache::Memory => (" --pack-cache", "gixd --pack-cache"),
        Cache::Disk => (" --pack-cache --pack-cache-memory 0 --pack-cache-dir D", "gixd --pack-cache-dir"),
    };
    let version = format!("{version}; serve --queue-wait 300{flags}");
    Ok(Arm { name, version, child, group, relay, prefix, base: base.to_owned(), access_log })
}

fn start_http_backend(base: &Path, scratch: &Path, group: Group) -> Result<Arm> {
    let port = free_port()?;
    let conf = scratch.join("lighttpd.conf");
    let backend = Path::new(&output(Command::new("git").arg("--exec-path"))?).join("git-http-backend");
    std::fs::write(&conf, bench_support::http_backend_conf(scratch, base, &backend, port, true))?;
    let child = Command::new("lighttpd")
        .arg("-D")
        .arg("-f")
        .arg(&conf)
        .spawn()
        .context("lighttpd (apt-get install lighttpd)")?;
    group.enter(child.id())?;
    wait_for_port(port)?;
    let relay = Relay::start(Upstream::Tcp(([127, 0, 0, 1], port).into()))?;
    let version = format!(
        "{} + {}",
        output(Command::new("lighttpd").arg("-v"))?.lines().next().unwrap_or("lighttpd"),
        output(Command::new("git").arg("--version"))?
    );
    let prefix = format!("http://127.0.0.1:{}/git", relay.port);
    Ok(Arm { name: "git http-backend", version, child, group, relay, prefix, base: base.to_owned(), access_log: None })
}

fn start_git_daemon(base: &Path, group: Group) -> Result<Arm> {
    let port = free_port()?;
    let exec_path = output(Command::new("git").arg("--exec-path"))?;
    let child = Command::new(Path::new(&exec_path).join("git-daemon"))
        .args(["--export-all", "--reuseaddr", "--enable=receive-pack", "--listen=127.0.0.1", &format!("--port={port}")])
        .arg(format!("--base-path={}", base.display()))
        .stderr(Stdio::null())
        .spawn()?;
    group.enter(child.id())?;
    wait_for_port(port)?;
    let relay = Relay::start(Upstream::Tcp(([127, 0, 0, 1], port).into()))?;
    let prefix = format!("git://127.0.0.1:{}", relay.port);
    Ok(Arm {
        name: "git daemon",
        version: output(Command::new("git").arg("--version"))?,
        child,
        group,
        relay,
        prefix,
        base: base.to_owned(),
        access_log: None,
    })
}

/// JGit's daemon (org.eclipse.jgit.transport.Daemon) from Debian's libjgit-java, through a small
/// launcher compiled here. `Err` says plainly why it could not start.
fn start_jgit(root: &Path, base: &Path, group: Group) -> Result<Arm> {
    let jars = [
        "/usr/share/java/org.eclipse.jgit.jar",
        "/usr/share/java/slf4j-api.jar",
        "/usr/share/java/slf4j-nop.jar",
        "/usr/share/java/javaewah.jar",
    ];
    if !Path::new(jars[0]).is_file() {
        install(&["libjgit-java", "libslf4j-java", "default-jdk-headless"]);
    }
    for jar in &jars[..1] {
        if !Path::new(jar).is_file() {
            bail!("{jar} is missing (apt-get install libjgit-java)");
        }
    }
    let classpath: Vec<&str> = jars.iter().copied().filter(|j| Path::new(j).is_file()).collect();
    let classpath = classpath.join(":");
    let classes = root.join("target/bench/jgit");
    std::fs::create_dir_all(&classes)?;
    let source = root.join("bench/bakeoff/JGitDaemon.java");
    output(Command::new("javac").args(["-d"]).arg(&classes).args(["-cp", &classpath]).arg(&source))
        .context("javac (apt-get install default-jdk-headless)")?;
    let port = free_port()?;
    let child = Command::new("java")
        .args(["-cp", &format!("{classpath}:{}", classes.display()), "JGitDaemon", &port.to_string()])
        .arg(base)
        .stdout(Stdio::null())
        .spawn()?;
    group.enter(child.id())?;
    wait_for_port(port)?;
    let relay = Relay::start(Upstream::Tcp(([127, 0, 0, 1], port).into()))?;
    let prefix = format!("git://127.0.0.1:{}", relay.port);
    let version = std::fs::read_dir("/usr/share/java")?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("org.eclipse.jgit-") && n.ends_with(".jar"))
        .unwrap_or_else(|| "jgit".into());
    Ok(Arm { name: "jgit daemon", version, child, group, relay, prefix, base: base.to_owned(), access_log: None })
}

fn install(packages: &[&str]) {
    eprintln!("installing {packages:?}");
    let _ = Command::new("apt-get").args(["update", "-qq"]).status();
    let _ = Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status();
}

/// The operations, each prepared (outside the measurement) and run as one stock-git command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Clone,
    Fetch,
    NoopFetch,
    Push,
    Depth1,
    BlobNone,
}

impl Op {
    const ALL: [Op; 6] = [Op::Clone, Op::Fetch, Op::NoopFetch, Op::Push, Op::Depth1, Op::BlobNone];

    fn name(self) -> &'static str {
        match self {
            Op::Clone => "clone",
            Op::Fetch => "negotiated fetch",
            Op::NoopFetch => "no-op fetch",
            Op::Push => "one-commit push",
            Op::Depth1 => "clone --depth 1",
            Op::BlobNone => "clone --filter=blob:none",
        }
    }
}

/// Prepare and run `op` against `arm` for `repo` in `work`; the wall time. Checks the result.
fn run_op(op: Op, arm: &Arm, repo: &Path, work: &Path, round: usize) -> Result<Duration> {
    let name = repo.file_name().context("name")?.to_string_lossy().into_owned();
    let url = format!("{}/{name}", arm.prefix);
    let server = arm.base.join(&name);
    let tip = git(&server, &["rev-parse", "HEAD"])?;
    let dest = work.join("dest");
    let _ = std::fs::remove_dir_all(&dest);
    let d = dest.to_str().context("utf-8")?.to_owned();
    let v2 = ["-c", "protocol.version=2"];
    let check_tip = |dir: &Path, rev: &str| -> Result<()> {
        let got = git(dir, &["rev-parse", rev])?;
        if got != tip {
            bail!("{} {}: client tip {got} is not the server's {tip}", arm.name, op.name());
        }
        Ok(())
    };
    let wall = match op {
        Op::Clone | Op::Depth1 | Op::BlobNone => {
            let extra: &[&str] = match op {
                Op::Depth1 => &["--depth", "1"],
                Op::BlobNone => &["--filter=blob:none"],
                _ => &[],
            };
            let wall = client(work, &[&v2[..], &["clone", "-q", "--mirror"], extra, &[&url, &d]].concat())?;
            check_tip(&dest, "HEAD")?;
            wall
        }
        Op::Fetch | Op::NoopFetch => {
            // A mirror from the server's own files, then (fetch) set back 20 commits.
            output(Command::new("git").args(["clone", "-q", "--mirror", "--no-local"]).arg(&server).arg(&dest))?;
            git(&dest, &["remote", "set-url", "origin", &url])?;
            if op == Op::Fetch {
                let branch = git(&server, &["symbolic-ref", "HEAD"])?;
                let count: usize = git(&server, &["rev-list", "--count", &branch])?.parse()?;
                let back = 20.min(count.saturating_sub(1));
                git(&dest, &["update-ref", &branch, &format!("{branch}~{back}")])?;
                git(&dest, &["reflog", "expire", "--expire=now", "--all"])?;
                git(&dest, &["gc", "-q", "--prune=now"])?;
            }
            let wall = client(&dest, &[&v2[..], &["fetch", "-q", "origin"]].concat())?;
            check_tip(&dest, "HEAD")?;
            wall
        }
        Op::Push => {
            output(Command::new("git").args(["clone", "-q", "--no-local"]).arg(&server).arg(&dest))?;
            std::fs::write(dest.join(format!("bench-{round}.txt")), format!("{} round {round}\n", arm.name))?;
            git(&dest, &["add", "-A"])?;
            git(&dest, &["commit", "-q", "-m", "bench push"])?;
            let new = git(&dest, &["rev-parse", "HEAD"])?;
            let branch = format!("refs/heads/bench-{round}-{}", std::process::id());
            let wall = client(&dest, &["push", "-q", &url, &format!("HEAD:{branch}")])?;
            if git(&server, &["rev-parse", &branch])? != new {
                bail!("{}: the pushed branch is not at the pushed commit", arm.name);
            }
            wall
        }
    };
    Ok(wall)
}

fn row(kind: &str, fields: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({ "kind": kind });
    if let (Some(v), Some(f)) = (v.as_object_mut(), fields.as_object()) {
        v.extend(f.clone());
    }
    v
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let o = parse(args)?;
    let root = root.to_owned();
    if !bench_support::run::is_root() {
        bail!("the bake-off puts each server in a cgroup of its own: run it as root");
    }
    eprintln!("building gixd (release)");
    output(Command::new("cargo").args(["build", "--release", "--quiet", "-p", "gixd"]).current_dir(&root))?;
    if Command::new("lighttpd").arg("-v").output().is_err() {
        install(&["lighttpd"]);
    }
    let repos = if o.repos.is_empty() {
        let listing = output(
            Command::new("cargo")
                .args(["run", "--release", "--quiet", "-p", "gixd-tests", "--bin", "corpus"])
                .current_dir(&root),
        )?;
        let dir = PathBuf::from(listing.lines().next().and_then(|l| l.strip_prefix("corpus: ")).context("corpus dir")?);
        vec![dir.join("linear-sha1.git"), dir.join("wide-sha1.git")]
    } else {
        o.repos.clone()
    };
    let scratch = std::env::temp_dir().join(format!("gixd-bakeoff-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let run_id = format!(
        "{}-{}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
        if o.quick { "quick" } else { "full" }
    );

    // The arms; one that cannot start is reported NOT MEASURED, never skipped silently.
    let mut arms: Vec<Arm> = Vec::new();
    let mut not_measured: Vec<(String, String)> = Vec::new();
    type Starter<'a> = Box<dyn Fn(&Path, Group) -> Result<Arm> + 'a>;
    let starters: Vec<(&str, Starter)> = if o.identical > 0 {
        vec![
            ("gixd --pack-cache", Box::new(|base, g| start_gixd(&root, base, g, Cache::Memory))),
            ("gixd --pack-cache-dir", Box::new(|base, g| start_gixd(&root, base, g, Cache::Disk))),
            ("gixd", Box::new(|base, g| start_gixd(&root, base, g, Cache::Off))),
            ("git daemon", Box::new(start_git_daemon)),
        ]
    } else {
        vec![
            ("gixd", Box::new(|base, g| start_gixd(&root, base, g, Cache::Off))),
            ("git http-backend", Box::new(|base, g| start_http_backend(base, &scratch.join("http-backend-conf"), g))),
            ("git daemon", Box::new(start_git_daemon)),
            ("jgit daemon", Box::new(|base, g| start_jgit(&root, base, g))),
        ]
    };
    std::fs::create_dir_all(scratch.join("http-backend-conf"))?;
    for (name, start) in &starters {
        let slug = name.replace(' ', "-");
        let base = prepare_base(&scratch, &slug, &repos)?;
        let started = Group::create(&slug).and_then(|g| start(&base, g));
        match started {
            Ok(arm) => arms.push(arm),
            Err(err) => {
                eprintln!("NOT MEASURED: {name}: {err:#}");
                not_measured.push((name.to_string(), format!("{err:#}")));
            }
        }
    }
    if !arms.first().is_some_and(|a| a.name.starts_with("gixd")) {
        bail!("gixd itself did not start");
    }

    let dir = root.join(RESULTS);
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "partial") {
            eprintln!("removing an unfinished run: {}", path.display());
            std::fs::remove_file(&path)?;
        }
    }
    let results = dir.join(format!("{run_id}.jsonl"));
    let partial = dir.join(format!("{run_id}.jsonl.partial"));
    let mut out = std::fs::File::create(&partial)?;
    use std::io::Write;
    let conditions = row(
        "conditions",
        serde_json::json!({
            "run": run_id,
            "quick": o.quick,
            "label": o.label,
            "rounds": o.rounds,
            "commit": output(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(&root))?,
            "date": output(Command::new("date").arg("+%F"))?,
            "machine": output(Command::new("uname").args(["-srm"]))?,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "loadavg_start": loadavg(),
            "git": output(Command::new("git").arg("--version"))?,
            "arms": arms.iter().map(|a| serde_json::json!({ "arm": a.name, "version": a.version })).collect::<Vec<_>>(),
            "not_measured": not_measured.iter().map(|(a, why)| serde_json::json!({ "arm": a, "why": why })).collect::<Vec<_>>(),
            "repos": repos.iter().map(|r| r.file_name().unwrap().to_string_lossy().into_owned()).collect::<Vec<_>>(),
            "rungs": o.rungs,
            "identical": o.identical,
        }),
    );
    writeln!(out, "{conditions}")?;
    if o.identical > 0 {
        identical_clones(&o, &arms, &repos, &scratch.join("work"), &run_id, &mut out)?;
        return finish_run(out, &run_id, partial, results, arms, &scratch, &root);
    }

    // Operations, one at a time.
    let work = scratch.join("work");
    std::fs::create_dir_all(&work)?;
    for arm in &arms {
        arm.group.limit(None, None)?;
    }
    for repo in &repos {
        let repo_name = repo.file_name().unwrap().to_string_lossy().into_owned();
        let objects: u64 = git(repo, &["rev-list", "--objects", "--all", "--count"])?.parse()?;
        for op in Op::ALL {
            for round in 0..o.rounds {
                for i in round_order(arms.len(), round) {
                    let arm = &arms[i];
                    let cpu0 = arm.begin()?;
                    let sampler = RssSampler::start(arm.group.dir("cpuacct").join("cgroup.procs"));
                    let wall = run_op(op, arm, repo, &work, round)
                        .with_context(|| format!("{} {} on {repo_name}", arm.name, op.name()))?;
                    let (cpu_us, bytes) = arm.end(cpu0)?;
                    let peak_rss_kb = sampler.finish();
                    let r = row(
                        "op",
                        serde_json::json!({
                            "run": run_id, "repo": repo_name, "objects": objects, "op": op.name(), "arm": arm.name, "round": round,
                            "bytes_down": bytes, "cpu_us": cpu_us, "peak_rss_kb": peak_rss_kb, "wall_us": wall.as_micros() as u64,
                        }),
                    );
                    writeln!(out, "{r}")?;
                }
            }
            eprint!(".");
        }
    }
    eprintln!();

    // The ramp: concurrent clones under a quota of one CPU without a cpuset, and pinned to one CPU.
    let ramp_repo = &repos[0];
    let ramp_name = ramp_repo.file_name().unwrap().to_string_lossy().into_owned();
    for mode in ["quota", "pinned"] {
        for arm in &arms {
            match mode {
                "quota" => arm.group.limit(Some(1.0), None)?,
                _ => arm.group.limit(None, Some("0"))?,
            }
        }
        let limits: Vec<String> = arms.iter().map(|a| a.group.read_back()).collect::<Result<_>>()?;
        if limits.windows(2).any(|w| w[0] != w[1]) {
            bail!("the arms' limits differ: {limits:?}");
        }
        for &clients in &o.rungs {
            for round in 0..o.rounds {
                for i in round_order(arms.len(), round) {
                    let arm = &arms[i];
                    clear_burst(&work, "ramp")?;
                    let cpu0 = arm.begin()?;
                    let url = format!("{}/{ramp_name}", arm.prefix);
                    let (walls, elapsed) =
                        burst(&url, clients, &work, "ramp").with_context(|| format!("{} ramp {clients}", arm.name))?;
                    let (cpu_us, bytes) = arm.end(cpu0)?;
                    let mut sorted: Vec<u64> = walls.iter().map(|w| w.as_micros() as u64).collect();
                    sorted.sort();
                    let pct = |p: f64| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize];
                    let r = row(
                        "ramp",
                        serde_json::json!({
                            "run": run_id, "repo": ramp_name, "mode": mode, "limits": limits[0], "clients": clients, "arm": arm.name, "round": round,
                            "cpu_per_clone_us": cpu_us / clients as u64, "bytes_down": bytes,
                            "wall_p50_us": pct(0.5), "wall_p99_us": pct(0.99),
                            "clones_per_s": clients as f64 / elapsed.as_secs_f64(),
                        }),
                    );
                    writeln!(out, "{r}")?;
                }
            }
            eprint!(".");
        }
        eprintln!();
    }
    for arm in &arms {
        arm.group.limit(None, None)?;
    }
    finish_run(out, &run_id, partial, results, arms, &scratch, &root)
}

/// The run's last row, its file renamed complete, the servers stopped, the reports rendered.
fn finish_run(
    mut out: std::fs::File,
    run_id: &str,
    partial: PathBuf,
    results: PathBuf,
    arms: Vec<Arm>,
    scratch: &Path,
    root: &Path,
) -> Result<()> {
    use std::io::Write;
    writeln!(out, "{}", row("end", serde_json::json!({ "run": run_id, "loadavg_end": loadavg() })))?;
    drop(out);
    std::fs::rename(&partial, &results)?;
    drop(arms);
    let _ = std::fs::remove_dir_all(scratch);
    eprintln!("wrote run {run_id} to {}; render with `cargo xtask report`", results.display());
    render::run(root, false)
}

/// `clients` clones of `url` at once; each client's wall time and the burst's.
fn burst(url: &str, clients: usize, work: &Path, tag: &str) -> Result<(Vec<Duration>, Duration)> {
    for c in 0..clients {
        let dest = work.join(format!("{tag}-{c}"));
        if dest.exists() {
            bail!("{} is left from an earlier step: clear_burst first", dest.display());
        }
    }
    let start = Instant::now();
    let walls: Vec<Result<Duration>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let dest = work.join(format!("{tag}-{c}"));
                s.spawn(move || {
                    client(
                        dest.parent().unwrap(),
                        &["-c", "protocol.version=2", "clone", "-q", "--bare", url, dest.to_str().unwrap()],
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client thread")).collect()
    });
    let elapsed = start.elapsed();
    Ok((walls.into_iter().collect::<Result<_>>()?, elapsed))
}

/// Remove what the clients of an earlier [`burst`] left, and wait until the kernel has written
/// back what they wrote: before a step's measurement starts, so the step's server does not share
/// the machine with deleting and writing back hundreds of megabytes of clones.
fn clear_burst(work: &Path, tag: &str) -> Result<()> {
    for entry in std::fs::read_dir(work)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.strip_prefix(tag).is_some_and(|rest| rest.starts_with('-')))
        {
            std::fs::remove_dir_all(&path)?;
        }
    }
    // SAFETY: no arguments; flushes every file system's dirty data.
    unsafe { libc::sync() };
    Ok(())
}

/// Identical clones (issue 18's fleet): the server CPU of `o.identical` concurrent clones of the
/// largest repository against one clone's, per arm. Before every step each arm's copy gets a new
/// ref (the same commit), so no step reads a pack the cache kept from the step before. Each round
/// measures every arm in every placement in `o.placements`, their orders swapped every round.
fn identical_clones(
    o: &Options,
    arms: &[Arm],
    repos: &[PathBuf],
    work: &Path,
    run_id: &str,
    out: &mut std::fs::File,
) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(work)?;
    let mut largest = (0u64, &repos[0]);
    for repo in repos {
        let objects: u64 = git(repo, &["rev-list", "--objects", "--all", "--count"])?.parse()?;
        if objects > largest.0 {
            largest = (objects, repo);
        }
    }
    let (objects, repo) = largest;
    let name = repo.file_name().unwrap().to_string_lossy().into_owned();
    let cpus = std::thread::available_parallelism()?.get();
    let rest = if cpus == 2 { "1".to_owned() } else { format!("1-{}", cpus.saturating_sub(1)) };
    let all = format!("0-{}", cpus - 1);
    // This process (its relay threads) and every client it starts, in a group of their own.
    let client_group = if o.placements.contains(&Placement::Split) {
        if cpus < 2 {
            bail!("the split placement needs two CPUs, this machine has {cpus}");
        }
        let group = Group::create("clients")?;
        group.limit(None, None)?;
        group.enter(std::process::id())?;
        Some(group)
    } else {
        None
    };
    let place = |placement: Placement| -> Result<String> {
        match placement {
            Placement::Shared => {
                for arm in arms {
                    arm.group.limit(None, None)?;
                }
                if let Some(group) = &client_group {
                    group.limit(None, None)?;
                }
                Ok(format!("shared: servers, clients and relay on every CPU ({all})"))
            }
            Placement::Split => {
                for arm in arms {
                    arm.group.limit(None, Some("0"))?;
                }
                client_group.as_ref().expect("made for the split placement").limit(None, Some(&rest))?;
                Ok(format!("split: servers on CPU 0, clients and relay on CPU {rest}"))
            }
        }
    };
    let mut step = 0;
    for round in 0..o.rounds {
        for p in round_order(o.placements.len(), round) {
            let placement = place(o.placements[p])?;
            for i in round_order(arms.len(), round) {
                let arm = &arms[i];
                for clients in [1, o.identical] {
                    step += 1;
                    git(&arm.base.join(&name), &["update-ref", &format!("refs/bench/step-{step}"), "HEAD"])?;
                    clear_burst(work, "identical")?;
                    let logged =
                        arm.access_log.as_ref().map(|log| std::fs::metadata(log).map(|m| m.len()).unwrap_or(0));
                    let cpu0 = arm.begin()?;
                    let (walls, _) = burst(&format!("{}/{name}", arm.prefix), clients, work, "identical")
                        .with_context(|| format!("{} {clients} identical clones", arm.name))?;
                    let (cpu_us, bytes) = arm.end(cpu0)?;
                    let fetches = match (&arm.access_log, logged) {
                        (Some(log), Some(from)) => Some(
                            cache_outcomes(log, from, clients).with_context(|| format!("{} access log", arm.name))?,
                        ),
                        _ => None,
                    };
                    let mut sorted: Vec<u64> = walls.iter().map(|w| w.as_micros() as u64).collect();
                    sorted.sort();
                    let r = row(
                        "identical",
                        serde_json::json!({
                            "run": run_id, "repo": name, "objects": objects, "arm": arm.name, "round": round, "clients": clients,
                            "placement": placement, "cpu_us": cpu_us, "bytes_down": bytes, "wall_p50_us": sorted[sorted.len() / 2],
                            "generations": fetches.as_ref().map(|f| f.generations),
                            "generator_cpu_us": fetches.as_ref().map(|f| f.generator_cpu_us),
                            "read_back": fetches.as_ref().map(|f| f.read_back),
                        }),
                    );
                    writeln!(out, "{r}")?;
                }
                eprint!(".");
            }
        }
    }
    eprintln!();
    Ok(())
}

/// The fetches of one identical-clones step, from gixd's access log past byte `from`.
struct CacheOutcomes {
    /// Requests that generated their pack (`"cache": "miss"`): one, if the step shared it.
    generations: u64,
    /// Their CPU, as the access log has it (the generating request's thread).
    generator_cpu_us: u64,
    /// Requests that read a pack another request generated (`join`, `hit`).
    read_back: u64,
}

/// Read the fetches `clients` clones logged past byte `from` of `log`. A request's line is
/// written when its response ends, a moment after its client may have exited, so this waits
/// (at most 10 s) until every clone's fetch is there.
fn cache_outcomes(log: &Path, from: u64, clients: usize) -> Result<CacheOutcomes> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read(log)?;
        let tail = text.get(from as usize..).unwrap_or_default();
        let mut outcomes = CacheOutcomes { generations: 0, generator_cpu_us: 0, read_back: 0 };
        for line in tail.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let record: serde_json::Value = serde_json::from_slice(line).context("an access-log line")?;
            match record["cache"].as_str() {
                Some("miss") => {
                    outcomes.generations += 1;
                    outcomes.generator_cpu_us += (record["cpu_ms"].as_f64().unwrap_or(0.0) * 1000.0) as u64;
                }
                Some("join" | "hit") => outcomes.read_back += 1,
                _ => {}
            }
        }
        if outcomes.generations + outcomes.read_back >= clients as u64 {
            return Ok(outcomes);
        }
        if Instant::now() > deadline {
            bail!("{} fetches logged after 10 s, {clients} expected", outcomes.generations + outcomes.read_back);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the server's process tree is back to the server alone (children reaped), at most
/// a second.
fn settle(group: &Group, server: u32) {
    for _ in 0..200 {
        let pids = group.pids();
        if pids.iter().all(|p| *p == server) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
