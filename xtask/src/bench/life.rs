//! "A repository's life": `cargo xtask bench life` builds a repository's states under pushes and
//! measures four operations at each against stock git (by hand: it needs a real repository) into
//! `bench/results/life/<repository>-moments-<commit>.txt`, one line per moment and operation; the
//! report (`bench/life.md`, rendered by `cargo xtask report`) is made from those files only: every
//! row, the worst first, each against issue 43's goal for its moment.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use bench_support::run::{free_port, git, output, wait_for_port};

pub const RESULTS: &str = "bench/results/life";
pub const REPORT: &str = "bench/life.md";

/// `cargo xtask bench life`'s arguments ([`measure`] says what the states are).
#[derive(clap::Args)]
pub struct Args {
    /// The bare repository the states are made from (read only).
    src: PathBuf,
    /// Where the states and clients are made (removed first).
    out: PathBuf,
    /// The name its results go under: `bench/results/life/<NAME>-moments-<commit>.txt`
    /// (default: SRC's, without `.git`).
    #[arg(long)]
    name: Option<String>,
    /// Who writes the pushes: `gixd`, `git` (stock receive-pack on the directory) or `mixed`.
    #[arg(long, default_value = "gixd")]
    writer: String,
    /// git's `receive.unpackLimit` for its pushes (default: git's own, small pushes stay loose).
    #[arg(long)]
    unpack_limit: Option<u32>,
    /// First-parent commits back from main's tip the state starts at.
    #[arg(long, default_value_t = 2000)]
    back: usize,
    #[arg(long, default_value_t = 40)]
    pushes: usize,
    /// First-parent commits per push.
    #[arg(long, default_value_t = 50)]
    step: usize,
    /// Counted runs of each operation.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Stop after the pushes (OUT/base/repo.git is the state, for profiling by hand); no results.
    #[arg(long)]
    state_only: bool,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    gixd: Option<PathBuf>,
}

/// Build the states and measure the moments; the lines are the results file.
pub fn run(root: &Path, args: Args) -> Result<()> {
    let gixd = crate::bench::gixd_or_build(root, args.gixd.clone())?;
    let lines = measure(root, &args, &gixd)?;
    if args.state_only {
        return Ok(());
    }
    let name = match &args.name {
        Some(name) => name.clone(),
        None => {
            let src = args.src.canonicalize()?;
            let base = src.file_name().and_then(|n| n.to_str()).unwrap_or("repository");
            base.strip_suffix(".git").unwrap_or(base).to_owned()
        }
    };
    let commit = git(root, &["rev-parse", "--short", "HEAD"])?;
    let path = root.join(RESULTS).join(format!("{name}-moments-{commit}.txt"));
    std::fs::create_dir_all(root.join(RESULTS))?;
    std::fs::write(&path, lines)?;
    println!("wrote {}; render with `cargo xtask report`", path.display());
    Ok(())
}

/// The four operations a moment measures, each against gixd and git.
const OPS: [&str; 4] = ["fetch", "clone", "blob:none", "noop"];

/// `path` as an argument.
fn arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// The state, then every moment: from SRC, main's first-parent history `back` commits back,
/// repacked with a bitmap (`git repack -adb`), then `pushes` pushes of `step` first-parent
/// commits each, written by gixd (HTTP, thin packs stored as they come; its maintenance after
/// pushes off meanwhile), by stock git (`git push` to the directory: git's receive-pack and
/// `index-pack --fix-thin`, `receive.unpackLimit` as given: 1 a pack per push, git's default
/// small pushes loose) or alternately (`mixed`). Then the four operations after the pushes, after
/// `gixd maintenance --geometric`, after `gixd maintenance`, and a reference: gixd after its
/// geometric run against git on a copy of the pushed state after git's own `repack --geometric=2
/// -d --write-midx -b`. Each line as it comes on stdout too.
fn measure(root: &Path, args: &Args, gixd: &Path) -> Result<String> {
    let _ = std::fs::remove_dir_all(&args.out);
    std::fs::create_dir_all(args.out.join("base"))?;
    let out = args.out.canonicalize()?;
    let (full, base) = (out.join("full.git"), out.join("base/repo.git"));
    git(&out, &["clone", "-q", "--bare", "--no-local", arg(&args.src.canonicalize()?), arg(&full)])?;
    let first_parents: Vec<String> =
        git(&full, &["rev-list", "--first-parent", "HEAD"])?.lines().take(args.back + 1).map(str::to_owned).collect();
    let start = first_parents.get(args.back).context("main's first-parent history is shorter than --back")?;
    git(&out, &["init", "-q", "--bare", arg(&base)])?;
    git(&full, &["push", "-q", arg(&base), &format!("{start}:refs/heads/main")])?;
    git(&base, &["symbolic-ref", "HEAD", "refs/heads/main"])?;
    git(&base, &["repack", "-adbq"])?;
    git(&base, &["config", "uploadpack.allowFilter", "true"])?;
    if let Some(limit) = args.unpack_limit {
        git(&base, &["config", "receive.unpackLimit", &limit.to_string()])?;
    }
    let tokens = out.join("tokens.toml");
    let secret = output(
        Command::new(gixd)
            .args(["token", "add", "--user", "bench", "--write", "--token-file", arg(&tokens)])
            .stderr(Stdio::null()),
    )?;
    let port = free_port()?;
    let log = std::fs::File::create(out.join("gixd.log"))?;
    let access_log = out.join("access.log");
    let listen = format!("127.0.0.1:{port}");
    let server = Command::new(gixd)
        .args(["serve", "--base-path", arg(&out.join("base")), "--export-all", "--listen", &listen])
        .args(["--token-file", arg(&tokens), "--auto-maintenance", "false", "--access-log", arg(&access_log)])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("gixd serve")?;
    let _server = Stopped(server);
    wait_for_port(port)?;
    for i in 1..=args.pushes {
        let n = args.back.saturating_sub(i * args.step);
        let stock = args.writer == "git" || (args.writer == "mixed" && i % 2 == 0);
        let to = if stock { arg(&base).to_owned() } else { format!("http://bench:{secret}@{listen}/repo.git") };
        git(&full, &["push", "-q", &to, &format!("{}:refs/heads/main", first_parents[n])])?;
    }
    let mut lines = String::new();
    let mut say = |line: String| {
        println!("{line}");
        lines.push_str(&line);
        lines.push('\n');
    };
    say(format!(
        "params back={} pushes={} step={} reps={} writer={} unpack_limit={} git_pack_reuse=multi commit={} git={}",
        args.back,
        args.pushes,
        args.step,
        args.reps,
        args.writer,
        args.unpack_limit.map_or("default".to_owned(), |l| l.to_string()),
        git(root, &["rev-parse", "--short", "HEAD"])?,
        output(Command::new("git").arg("--version"))?,
    ));
    say(format!(
        "packs after pushes: {}, loose objects: {}",
        files_in(&base.join("objects/pack"), ".pack"),
        loose_objects(&base)
    ));
    if args.state_only {
        return Ok(lines);
    }
    let clients = Clients {
        out: out.clone(),
        full: full.clone(),
        behind: git(&base, &["rev-list", "--first-parent", "main"])?
            .lines()
            .nth(200)
            .context("fewer than 201 first-parent commits after the pushes")?
            .to_owned(),
        // git's side: upload-pack under `perf stat`, which adds its task-clock and its
        // children's (pack-objects) to git-cpu (getrusage's and `time`'s tick-based figures were
        // off by tens of ms per process on this machine). git's pack-objects with
        // `pack.allowPackReuse=multi` (its default reuses from one pack only): a multi-pack-index's
        // packs are copied verbatim as gixd's are.
        upload_pack: format!(
            "perf stat -x, -e task-clock --append -o {} git -c pack.allowPackReuse=multi upload-pack",
            arg(&out.join("git-cpu"))
        ),
    };
    let gixd_url = format!("http://{listen}/repo.git");
    let file_url = |repo: &Path| format!("file://{}", arg(repo));
    let moment = |name: &str, git_url: &str, say: &mut dyn FnMut(String)| -> Result<()> {
        for op in OPS {
            let label = op.replace(':', "-");
            // A warm-up (page cache, gixd's open packs), then `reps` counted runs: CPU is their
            // sum, bytes the last run's.
            clients.run(&format!("gixd-{label}"), &gixd_url, op)?;
            std::thread::sleep(std::time::Duration::from_secs(1));
            std::fs::write(&access_log, "")?;
            let mut ours = 0;
            for _ in 0..args.reps {
                ours = clients.run(&format!("gixd-{label}"), &gixd_url, op)?;
            }
            // A request's access-log line is written as it ends, maybe just after its client.
            std::thread::sleep(std::time::Duration::from_secs(1));
            let our_cpu = gixd_cpu(&access_log)?;
            clients.run(&format!("git-{label}"), git_url, op)?;
            std::fs::write(out.join("git-cpu"), "")?;
            let mut theirs = 0;
            for _ in 0..args.reps {
                theirs = clients.run(&format!("git-{label}"), git_url, op)?;
            }
            let their_cpu = git_cpu(&out.join("git-cpu"))?;
            let bytes_ratio = if theirs > 0 { format!("{:.3}", ours as f64 / theirs as f64) } else { "n/a".into() };
            let cpu_ratio = if their_cpu >= 1.0 { format!("{:.2}", our_cpu / their_cpu) } else { "n/a".into() };
            say(format!(
                "moment={name} op={op} bytes gixd={ours} git={theirs} ratio={bytes_ratio} cpu_ms gixd={our_cpu:.1} git={their_cpu:.1} ratio={cpu_ratio}"
            ));
        }
        Ok(())
    };
    moment("pushed", &file_url(&base), &mut say)?;
    // git's own geometric repack with a MIDX bitmap, on a copy of the pushed state: the reference.
    let reference = out.join("ref/repo.git");
    std::fs::create_dir_all(out.join("ref"))?;
    output(Command::new("cp").args(["-a", arg(&base), arg(&reference)]))?;
    git(&reference, &["repack", "-q", "--geometric=2", "-d", "--write-midx", "-b"])?;
    let report = output(Command::new(gixd).args(["maintenance", "--geometric", arg(&base)]))?;
    std::fs::write(out.join("geometric.txt"), report)?;
    // The packs a run replaced stay 60 s for transfers that started before it (noted in
    // objects/gixd-rolled/): counted apart.
    let retired = std::fs::read_dir(base.join("objects/gixd-rolled")).map_or(0, |d| d.count());
    say(format!(
        "packs after gixd's geometric maintenance: {}, of which retired: {retired}",
        files_in(&base.join("objects/pack"), ".pack")
    ));
    moment("geometric", &file_url(&base), &mut say)?;
    moment("reference-git-geometric-midx", &file_url(&reference), &mut say)?;
    let report = output(Command::new(gixd).args(["maintenance", arg(&base)]))?;
    std::fs::write(out.join("full.txt"), report)?;
    moment("full", &file_url(&base), &mut say)?;
    Ok(lines)
}

/// The server, stopped when the measurement ends however it ends.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Files in `dir` whose names end with `suffix`.
fn files_in(dir: &Path, suffix: &str) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(suffix)).count())
        .unwrap_or(0)
}

/// Loose objects of the repository `repo` (files in `objects/??/`).
fn loose_objects(repo: &Path) -> usize {
    let Ok(dirs) = std::fs::read_dir(repo.join("objects")) else { return 0 };
    dirs.flatten()
        .filter(|d| {
            let name = d.file_name();
            let name = name.to_string_lossy();
            name.len() == 2 && name.chars().all(|c| c.is_ascii_hexdigit())
        })
        .map(|d| std::fs::read_dir(d.path()).map_or(0, |f| f.count()))
        .sum()
}

/// gixd's CPU (ms) for what its access log holds now: its upload-pack requests' `cpu_ms`.
fn gixd_cpu(access_log: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(access_log)?;
    let mut sum = 0.0;
    for line in text.lines().filter(|l| l.contains("upload-pack")) {
        let record: serde_json::Value = serde_json::from_str(line)?;
        sum += record["cpu_ms"].as_f64().context("an access-log line without cpu_ms")?;
    }
    Ok(sum)
}

/// git's CPU (ms) from `perf stat`'s task-clock lines.
fn git_cpu(perf: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(perf)?;
    let mut sum = 0.0;
    for line in text.lines().filter(|l| l.contains("task-clock")) {
        sum += line.split(',').next().unwrap_or("").parse::<f64>().context("perf stat's task-clock")?;
    }
    Ok(sum)
}

/// The clients of a measurement: where they live, the history they start from, and git's
/// upload-pack as they run it.
struct Clients {
    out: PathBuf,
    full: PathBuf,
    /// main, 200 first-parent commits behind the pushed tip: what a fetching client has.
    behind: String,
    upload_pack: String,
}

impl Clients {
    /// One client operation (`op`, one of [`OPS`]) labelled `label` against `url`: the bytes of
    /// the pack it received (`GIT_TRACE_PACKFILE`; 0: none). Its repository is checked by git.
    fn run(&self, label: &str, url: &str, op: &str) -> Result<u64> {
        let dir = self.out.join(format!("c-{label}"));
        let trace = self.out.join(format!("pack-{label}"));
        let _ = std::fs::remove_file(&trace);
        let upload_pack = format!("--upload-pack={}", self.upload_pack);
        let client = |cwd: &Path, traced: bool, args: &[&str]| -> Result<()> {
            let mut cmd = Command::new("git");
            cmd.current_dir(cwd).args(["-c", "protocol.version=2"]).args(args).stderr(Stdio::null());
            if traced {
                cmd.env("GIT_TRACE_PACKFILE", &trace);
            }
            output(&mut cmd).map(drop)
        };
        let fetch = ["fetch", "-q", &upload_pack, url, "main:refs/heads/main"];
        match op {
            "fetch" | "noop" => {
                if op == "fetch" || !dir.is_dir() {
                    let _ = std::fs::remove_dir_all(&dir);
                    git(&self.out, &["init", "-q", "--bare", arg(&dir)])?;
                    git(&dir, &["fetch", "-q", arg(&self.full), &format!("{}:refs/heads/main", self.behind)])?;
                }
                if op == "noop" {
                    client(&dir, false, &fetch)?;
                }
                client(&dir, true, &fetch)?;
            }
            "clone" | "blob:none" => {
                let _ = std::fs::remove_dir_all(&dir);
                let filter = if op == "blob:none" { &["--filter=blob:none"][..] } else { &[] };
                let clone = [&["clone", "-q", "--bare"][..], filter, &[&upload_pack, url, arg(&dir)]].concat();
                client(&self.out, true, &clone)?;
            }
            _ => bail!("unknown operation {op}"),
        }
        if git(&dir, &["fsck", "--connectivity-only"]).is_err() {
            bail!("client {label}: fsck failed");
        }
        Ok(std::fs::metadata(&trace).map_or(0, |m| m.len()))
    }
}

/// Write `bench/life.md` from the results; with `check`, write nothing and fail when the
/// committed one is not what they render to.
pub fn render(root: &Path, check: bool) -> Result<()> {
    let Some(text) = report(root)? else { return Ok(()) };
    let path = root.join(REPORT);
    if !check {
        std::fs::write(&path, text)?;
    } else if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
        bail!("not what {RESULTS} renders to (run `cargo xtask report`): {REPORT}");
    }
    Ok(())
}

/// One line of a result file.
struct Row {
    repository: String,
    commit: String,
    moment: String,
    op: String,
    bytes: (u64, u64),
    cpu: (f64, f64),
}

impl Row {
    fn bytes_ratio(&self) -> Option<f64> {
        (self.bytes.1 > 0).then(|| self.bytes.0 as f64 / self.bytes.1 as f64)
    }

    /// Below 1 ms of git's CPU (a no-op fetch: no pack at all) a ratio says nothing.
    fn cpu_ratio(&self) -> Option<f64> {
        (self.cpu.1 >= 1.0).then(|| self.cpu.0 / self.cpu.1)
    }

    /// The bar for this row's CPU (issues 43 and 60): ≤ 1.0 of git's in every state and
    /// operation, a clone after gixd's geometric maintenance ≤ 0.5; the reference row (git on
    /// another directory) has none.
    fn cpu_goal(&self) -> Option<f64> {
        match (self.moment.as_str(), self.op.as_str()) {
            ("reference-git-geometric-midx", _) => None,
            ("geometric", "clone") => Some(0.5),
            _ => Some(1.0),
        }
    }

    /// Bytes ≤ 1.05 of git's at the moments the issue binds (not the reference row, which is
    /// another directory).
    fn bytes_goal(&self) -> Option<f64> {
        (self.moment != "reference-git-geometric-midx").then_some(1.05)
    }

    /// How far the row is from its goals (above 1: missed), for the order; a row without a
    /// goal is measured against parity with git (bytes 1.05, CPU 1.0), so the worst comes first
    /// whether or not a goal binds it.
    fn badness(&self) -> f64 {
        let b = self.bytes_ratio().map_or(0.0, |r| r / self.bytes_goal().unwrap_or(1.05));
        let c = self.cpu_ratio().map_or(0.0, |r| r / self.cpu_goal().unwrap_or(1.0));
        b.max(c)
    }
}

fn field<'a>(line: &'a str, after: &str, key: &str) -> Option<&'a str> {
    let rest = &line[line.find(after)? + after.len()..];
    let start = rest.find(&format!("{key}="))? + key.len() + 1;
    rest[start..].split_whitespace().next()
}

fn parse(repository: &str, commit: &str, line: &str) -> Option<Row> {
    Some(Row {
        repository: repository.to_owned(),
        commit: commit.to_owned(),
        moment: field(line, "", "moment")?.to_owned(),
        op: field(line, "", "op")?.to_owned(),
        bytes: (field(line, "bytes", "gixd")?.parse().ok()?, field(line, "bytes", "git")?.parse().ok()?),
        cpu: (field(line, "cpu_ms", "gixd")?.parse().ok()?, field(line, "cpu_ms", "git")?.parse().ok()?),
    })
}

/// `bench/life.md`'s text, from the newest result file of each repository.
pub fn report(root: &Path) -> Result<Option<String>> {
    let dir = root.join(RESULTS);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(None) };
    let mut files: Vec<(String, String, std::path::PathBuf)> = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let Some(stem) = name.strip_suffix(".txt") else { continue };
        let Some((repository, commit)) = stem.split_once("-moments-") else { continue };
        files.push((repository.to_owned(), commit.to_owned(), path));
    }
    if files.is_empty() {
        return Ok(None);
    }
    // The newest file per repository: of the commit committed last (its commit time in this
    // repository's history; name order among commits git does not know), and the report names
    // its commit. A commit's short hash says nothing of its age.
    let committed = |commit: &str| {
        std::process::Command::new("git")
            .args(["show", "-s", "--format=%ct", commit])
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    files.sort_by_cached_key(|(repository, commit, _)| (repository.clone(), committed(commit), commit.clone()));
    let mut rows = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for (repository, commit, path) in &files {
        seen.insert(repository.clone(), (commit.clone(), path.clone()));
    }
    for (repository, (commit, path)) in &seen {
        let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
        rows.extend(text.lines().filter(|l| l.starts_with("moment=")).filter_map(|l| parse(repository, commit, l)));
    }
    rows.sort_by(|a, b| b.badness().total_cmp(&a.badness()));
    let ratio = |r: Option<f64>| r.map_or("n/a".to_owned(), |r| format!("{r:.3}"));
    let goal = |r: Option<f64>, g: Option<f64>| match (r, g) {
        (Some(r), Some(g)) if r <= g => format!("≤ {g} met"),
        (Some(_), Some(g)) => format!("**≤ {g} missed**"),
        _ => "—".to_owned(),
    };
    let mut md = String::new();
    writeln!(md, "# A repository's life under pushes").ok();
    writeln!(
        md,
        "\nGenerated by `cargo xtask report` from `{RESULTS}/<repository>-moments-<commit>.txt` \
         (written by `cargo xtask bench life SRC OUT`, run by hand: it needs real repositories); nothing here is typed by hand. \
         Each repository state: main BACK first-parent commits back with `git repack -adb`, then PUSHES pushes of STEP \
         first-parent commits, through gixd (`writer=gixd`: one pack each, thin bases stored whole) or through stock git \
         (`writer=git`: git's receive-pack and `index-pack --fix-thin`; with `unpack_limit=1` one pack each, at git's \
         default small pushes stay loose objects); each file's `params` line gives them (below, per state). \
         Moments: `pushed` (that state), `geometric` (after `gixd maintenance --geometric`), `full` (after `gixd maintenance`); \
         each against `git upload-pack` on the same directory (its pack-objects at git's defaults, but with \
         `pack.allowPackReuse=multi` where the params line says `git_pack_reuse=multi`). `reference-git-geometric-midx` compares gixd after its \
         geometric run with git on a copy of the pushed state after `git repack --geometric=2 -d --write-midx -b`. \
         Bytes: the pack the client received. CPU: the sum over the counted runs, gixd's request threads against \
         upload-pack and pack-objects under `perf stat`. Every row, the furthest from its goal first.\n"
    )
    .ok();
    for (repository, (commit, path)) in &seen {
        let text = std::fs::read_to_string(path)?;
        let params = text.lines().find_map(|l| l.strip_prefix("params ")).unwrap_or("(not recorded)");
        let packs = text.lines().find_map(|l| l.strip_prefix("packs after pushes: ")).unwrap_or("?");
        writeln!(md, "- {repository} at {commit}: {params}; after the pushes: packs {packs}").ok();
    }
    writeln!(md).ok();
    writeln!(
        md,
        "| repository | commit | moment | operation | bytes gixd ÷ git | bytes goal | CPU gixd ÷ git | CPU goal | gixd bytes | git bytes | gixd CPU ms | git CPU ms |"
    )
    .ok();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|").ok();
    for r in &rows {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r.repository,
            r.commit,
            r.moment,
            r.op,
            ratio(r.bytes_ratio()),
            goal(r.bytes_ratio(), r.bytes_goal()),
            ratio(r.cpu_ratio()),
            goal(r.cpu_ratio(), r.cpu_goal()),
            r.bytes.0,
            r.bytes.1,
            r.cpu.0,
            r.cpu.1
        )
        .ok();
    }
    Ok(Some(md))
}
