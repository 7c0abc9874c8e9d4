//! `cargo xtask bench real --repo PATH…`: gixd against git upload-pack on real repositories
//! (issue 20's benchmark). Each repository is served in two variants, repacked by git with a
//! bitmap (`git repack -adb`) and without (`git repack -ad`), and five operations are run against
//! both arms: `clone --bare`, `clone --depth 1`, `clone --filter=blob:none`, a fetch by a client
//! 200 commits behind on the default branch, and a fetch by a client that has everything.
//!
//! gixd: the release build of the committed tree (or `--gixd BIN`), copied to a scratch
//! directory, serving HTTP with protocol v2, a fresh process per operation; its CPU is the sum of
//! its threads' schedstat across the operation. git: `git upload-pack` (and the pack-objects it
//! runs) per connection, started by `xtask rusage --git-request` behind the relay, which reads the
//! git:// request line as git daemon would and counts the whole process tree. One counting relay
//! in front of each arm gives the bytes server → client. After every operation the client's refs
//! (and shallow boundary) must be the same for both arms; the run is aborted otherwise.
//!
//! Repositories are never modified: each is copied (`git clone --bare --no-local`) into
//! `target/real-bench/repos/<name>/` once, with both variants and the two client templates, and
//! reused while the source's refs stay the same. Nothing here runs in CI (it needs the
//! repositories); `report` renders the committed results.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bench_support::relay::{Relay, Upstream};
use serde_json::{Value, json};

use super::table::*;
use crate::bench::{pack_bytes, proc_cpu_us};
use bench_support::run::git;
use bench_support::run::{output, round_order};

pub const REAL_RESULTS: &str = "bench/results/real-repos.json";

/// How far behind the default branch the fetching client is.
const BEHIND: u32 = 200;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Clone,
    Depth1,
    BlobNone,
    FetchBehind,
    NoopFetch,
}

/// The operations, in the order they run (and are named in the results).
const OPS: &[(&str, Op)] = &[
    ("clone --bare", Op::Clone),
    ("clone --depth 1", Op::Depth1),
    ("clone --filter=blob:none", Op::BlobNone),
    ("fetch, 200 commits behind", Op::FetchBehind),
    ("no-op fetch", Op::NoopFetch),
];

/// Served variants: name in the results, directory, and whether git writes a bitmap.
const VARIANTS: &[(&str, &str, bool)] = &[("bitmap", "bitmap", true), ("no bitmap", "no-bitmap", false)];

/// `gixd`: a fresh process that has answered one `git ls-remote` of the repository before the
/// operation (a serving daemon: its threads, heap and per-ref-state caches are in use, which a
/// per-connection `git upload-pack` never has). `gixd fresh`: the operation is the first request
/// the process ever sees. `git`: `git upload-pack` per connection.
const ARMS: [&str; 3] = ["gixd", "gixd fresh", "git"];

/// The refspecs both fetches use: every branch and tag, as a bare clone holds them.
const REFSPECS: &[&str] = &["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];

fn lines(text: &str) -> usize {
    text.lines().filter(|l| !l.is_empty()).count()
}

/// One repository, ready to serve: both variants and the client templates.
struct Prepared {
    name: String,
    /// Per variant (as in [`VARIANTS`]), the base path that holds `<name>.git`.
    bases: Vec<PathBuf>,
    /// A full bare clone (the no-op fetch's client).
    full: PathBuf,
    /// A bare clone whose default branch is `BEHIND` commits back, holding only the refs merged
    /// into it and the objects they reach (the fetch-behind client).
    behind: PathBuf,
    facts: Value,
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    output(Command::new("cp").arg("-a").arg(from).arg(to)).map(drop)
}

fn prepare(root: &Path, source: &Path) -> Result<Prepared> {
    let name = source.file_name().context("repository name")?.to_string_lossy().trim_end_matches(".git").to_owned();
    let work = root.join("target/real-bench/repos").join(&name);
    let stamp = format!(
        "{}\n{}\n",
        git(source, &["symbolic-ref", "HEAD"])?,
        git(source, &["for-each-ref", "--format=%(objectname) %(refname)"])?
    );
    let served = |dir: &str| work.join(dir).join(format!("{name}.git"));
    let (full, behind) = (work.join("clients/full.git"), work.join("clients/behind.git"));
    let walk = served("no-bitmap");
    let head = git(source, &["symbolic-ref", "HEAD"])?;
    let tip = git(source, &["rev-parse", "--verify", &format!("{head}~{BEHIND}^{{commit}}")])
        .with_context(|| format!("{name}: {head} has fewer than {BEHIND} commits"))?;
    if std::fs::read_to_string(work.join("stamp")).ok().as_deref() != Some(stamp.as_str()) {
        if work.exists() {
            std::fs::remove_dir_all(&work)?;
        }
        std::fs::create_dir_all(walk.parent().unwrap())?;
        std::fs::create_dir_all(full.parent().unwrap())?;
        eprintln!("{name}: copying {} (git clone --bare --no-local) and repacking both variants", source.display());
        output(Command::new("git").args(["clone", "-q", "--bare", "--no-local"]).arg(source).arg(&walk))?;
        let _ = git(&walk, &["remote", "remove", "origin"]);
        git(&walk, &["config", "uploadpack.allowFilter", "true"])?;
        git(&walk, &["-c", "pack.writeReverseIndex=true", "repack", "-adq", "--no-write-bitmap-index"])?;
        for (_, dir, bitmap) in VARIANTS.iter().filter(|v| v.2) {
            let dest = served(dir);
            std::fs::create_dir_all(dest.parent().unwrap())?;
            copy_dir(&walk, &dest)?;
            let flag = if *bitmap { "--write-bitmap-index" } else { "--no-write-bitmap-index" };
            git(&dest, &["-c", "pack.writeReverseIndex=true", "repack", "-adq", flag])?;
        }
        copy_dir(&walk, &full)?;
        copy_dir(&walk, &behind)?;
        // The behind client: default branch moved back, every ref not merged into it deleted,
        // and the objects only those refs reached dropped.
        let keep: HashSet<String> = git(&behind, &["for-each-ref", &format!("--merged={tip}"), "--format=%(refname)"])?
            .lines()
            .map(str::to_owned)
            .collect();
        let mut script = String::new();
        for r in git(&behind, &["for-each-ref", "--format=%(refname)"])?.lines() {
            if r != head && !keep.contains(r) {
                script.push_str(&format!("delete {r}\n"));
            }
        }
        script.push_str(&format!("update {head} {tip}\n"));
        let mut child =
            Command::new("git").current_dir(&behind).args(["update-ref", "--stdin"]).stdin(Stdio::piped()).spawn()?;
        child.stdin.take().context("stdin")?.write_all(script.as_bytes())?;
        if !child.wait()?.success() {
            bail!("{name}: git update-ref --stdin failed on the behind client");
        }
        git(&behind, &["-c", "pack.writeReverseIndex=true", "repack", "-adq"])?;
        git(&behind, &["prune", "--expire=now"])?;
        std::fs::write(work.join("stamp"), &stamp)?;
    }
    let bases: Vec<PathBuf> = VARIANTS.iter().map(|(_, dir, _)| work.join(dir)).collect();
    for ((variant, dir, bitmap), _) in VARIANTS.iter().zip(&bases) {
        let has = pack_files(&served(dir), "bitmap")? > 0;
        if has != *bitmap {
            bail!(
                "{name}, {variant}: a .bitmap is {} where it should {}",
                if has { "present" } else { "missing" },
                if *bitmap { "be" } else { "not be" }
            );
        }
        if pack_files(&served(dir), "pack")? != 1 {
            bail!("{name}, {variant}: not one pack after git repack -ad");
        }
    }
    let refs = git(&walk, &["for-each-ref", "--format=%(refname) %(objecttype)"])?;
    let count = |prefix: &str| refs.lines().filter(|l| l.starts_with(prefix)).count();
    let facts = json!({
        "name": name,
        "origin": git(source, &["config", "--get", "gixdbench.origin"]).unwrap_or_default(),
        "objects": git(&walk, &["rev-list", "--objects", "--all", "--count"])?.parse::<u64>()?,
        "refs": lines(&refs),
        "branches": count("refs/heads/"),
        "tags": count("refs/tags/"),
        "annotated_tags": refs.lines().filter(|l| l.starts_with("refs/tags/") && l.ends_with(" tag")).count(),
        "default_branch": head,
        "default_tip": git(&walk, &["rev-parse", &head])?,
        "default_commits": git(&walk, &["rev-list", "--count", &head])?.parse::<u64>()?,
        "pack_bytes": pack_bytes(&walk)?,
        "behind_tip": tip,
        "behind_refs": lines(&git(&behind, &["for-each-ref", "--format=%(refname)"])?),
        "behind_objects": client_objects(&behind)?,
    });
    Ok(Prepared { name, bases, full, behind, facts })
}

fn pack_files(repo: &Path, ext: &str) -> Result<usize> {
    Ok(std::fs::read_dir(repo.join("objects/pack"))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == ext))
        .count())
}

/// Objects the client holds (each once, whatever pack it is in).
fn client_objects(repo: &Path) -> Result<u64> {
    let mut child = Command::new("git")
        .current_dir(repo)
        .args(["cat-file", "--batch-all-objects", "--unordered", "--batch-check=%(objectname)"])
        .stdout(Stdio::piped())
        // A partial clone's "uses promisor remotes" warning.
        .stderr(Stdio::null())
        .spawn()?;
    let n = std::io::BufReader::new(child.stdout.take().context("stdout")?).lines().count();
    if !child.wait()?.success() {
        bail!("git cat-file --batch-all-objects failed in {}", repo.display());
    }
    Ok(n as u64)
}

/// A client copy of `template` in `dest`: pack files hard-linked (git never writes them in place),
/// everything else copied.
fn client_copy(template: &Path, dest: &Path) -> Result<()> {
    fn walk(from: &Path, to: &Path, link: bool) -> Result<()> {
        std::fs::create_dir_all(to)?;
        for e in std::fs::read_dir(from)? {
            let e = e?;
            let (src, dst) = (e.path(), to.join(e.file_name()));
            if e.file_type()?.is_dir() {
                walk(&src, &dst, link || (e.file_name() == "pack" && from.ends_with("objects")))?;
            } else if link {
                std::fs::hard_link(&src, &dst)?;
            } else {
                std::fs::copy(&src, &dst)?;
            }
        }
        Ok(())
    }
    walk(template, dest, false)
}

/// What the client holds after an operation: the arms must agree on it.
#[derive(PartialEq)]
struct ClientState {
    refs: String,
    shallow: String,
}

fn client_state(dest: &Path) -> Result<ClientState> {
    let mut shallow: Vec<String> =
        std::fs::read_to_string(dest.join("shallow")).unwrap_or_default().lines().map(str::to_owned).collect();
    shallow.sort();
    Ok(ClientState {
        refs: git(dest, &["for-each-ref", "--format=%(objectname) %(refname)"])?,
        shallow: shallow.join("\n"),
    })
}

/// Run one client operation against `url` into `dest`.
fn client(op: Op, url: &str, repo: &Prepared, dest: &Path) -> Result<()> {
    let mut cmd = Command::new("git");
    if matches!(op, Op::FetchBehind | Op::NoopFetch) {
        client_copy(if op == Op::FetchBehind { &repo.behind } else { &repo.full }, dest)?;
        cmd.arg("-C").arg(dest);
    }
    cmd.args([
        "-c",
        "protocol.version=2",
        "-c",
        "gc.auto=0",
        "-c",
        "maintenance.auto=false",
        "-c",
        "fetch.writeCommitGraph=false",
    ])
    .env("GIT_TERMINAL_PROMPT", "0");
    match op {
        Op::Clone => cmd.args(["clone", "-q", "--bare", url]).arg(dest),
        Op::Depth1 => cmd.args(["clone", "-q", "--bare", "--depth", "1", url]).arg(dest),
        Op::BlobNone => cmd.args(["clone", "-q", "--bare", "--filter=blob:none", url]).arg(dest),
        Op::FetchBehind | Op::NoopFetch => cmd.args(["fetch", "-q", "--no-write-fetch-head", url]).args(REFSPECS),
    };
    let status = cmd.status()?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// The request a serving gixd has answered before the measured operation: the refs of the
/// repository, as `git ls-remote` asks for them.
fn warm_up(url: &str) -> Result<()> {
    let status = Command::new("git")
        .args(["-c", "protocol.version=2", "ls-remote", url])
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("git ls-remote {url} failed ({status})");
    }
    Ok(())
}

/// A fresh gixd serving `base` over HTTP, its log in `log`; returns it and its address.
fn start_gixd(gixd: &Path, base: &Path, log: &Path) -> Result<(std::process::Child, SocketAddr)> {
    let mut child = Command::new(gixd)
        .args(["serve", "--listen", "127.0.0.1:0", "--export-all", "--base-path"])
        .arg(base)
        .env("GIXD_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()?;
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut first)?;
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .with_context(|| format!("gixd's address line: {first:?}"))?;
    Ok((child, addr.parse()?))
}

/// From a gixd log: the HTTP requests it answered, and the lines worth keeping with a run (what
/// it sent, and anything above INFO).
fn log_summary(log: &Path) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let requests = text.lines().filter(|l| l.contains(" http method=")).count();
    let kept = text
        .lines()
        .filter(|l| l.contains("pack sent") || l.contains("WARN") || l.contains("ERROR"))
        .map(|l| {
            // Drop the timestamp and the module path: keep the level and the message with its fields.
            let l = l.trim();
            match l.split_once(": ") {
                Some((head, rest)) => format!("{} {rest}", head.split_whitespace().nth(1).unwrap_or("")),
                None => l.to_owned(),
            }
        })
        .collect();
    (requests, kept)
}

fn sha256(path: &Path) -> Result<String> {
    Ok(output(Command::new("sha256sum").arg(path))?.split_whitespace().next().context("sha256sum")?.to_owned())
}

/// The gixd binary to measure, copied into `scratch`: `given`, or a release build of the
/// committed tree (`git archive HEAD`, so edits in the working tree are not measured).
fn gixd_binary(root: &Path, given: Option<PathBuf>, scratch: &Path) -> Result<(PathBuf, Value)> {
    let dest = scratch.join("gixd");
    let facts = match given {
        Some(bin) => {
            std::fs::copy(&bin, &dest).with_context(|| format!("copying {}", bin.display()))?;
            json!({ "built": format!("the given binary {}", bin.display()) })
        }
        None => {
            let commit = git(root, &["rev-parse", "HEAD"])?;
            let dir = root.join("target/real-bench");
            let src = dir.join(format!("src-{commit}"));
            if !src.join("Cargo.toml").is_file() {
                std::fs::create_dir_all(&dir)?;
                for e in std::fs::read_dir(&dir)? {
                    let p = e?.path();
                    if p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("src-")) {
                        std::fs::remove_dir_all(&p)?;
                    }
                }
                let tmp = dir.join("src-partial");
                let _ = std::fs::remove_dir_all(&tmp);
                std::fs::create_dir_all(&tmp)?;
                let status = Command::new("sh")
                    .arg("-c")
                    .arg(format!("git archive {commit} | tar -x -C '{}'", tmp.display()))
                    .current_dir(root)
                    .status()?;
                if !status.success() {
                    bail!("git archive {commit} failed");
                }
                std::fs::rename(&tmp, &src)?;
            }
            eprintln!("building gixd from the committed tree {commit} (target/real-bench/build)");
            let status = Command::new("cargo")
                .args(["build", "--release", "--locked", "--quiet", "-p", "gixd", "--target-dir"])
                .arg(dir.join("build"))
                .current_dir(&src)
                .status()?;
            if !status.success() {
                bail!("building gixd failed");
            }
            std::fs::copy(dir.join("build/release/gixd"), &dest)?;
            json!({ "built": format!("built from the committed tree (git archive) at {commit}"), "commit": commit })
        }
    };
    let mut facts = facts;
    facts["sha256"] = sha256(&dest)?.into();
    Ok((dest, facts))
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim())
        .unwrap_or("?");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let kernel = output(Command::new("uname").args(["-srm"])).unwrap_or_default();
    format!("{model}, {} GiB RAM, {kernel}", mem_kb / (1024 * 1024))
}

/// The local copy of the bare repository `src` the benchmark measures:
/// `target/real-repos/<name>.git`, made once (heads and tags, `git clone --bare --no-local`, so
/// `src` is never written to), named after the repository (`…/owner+name/repo`, as a fetched
/// snapshot lies, is `name`, its origin `owner/name`). A path below `target/real-repos/` is
/// taken as it is.
pub fn copied(root: &Path, src: &Path) -> Result<PathBuf> {
    let src = src.canonicalize().with_context(|| format!("{}", src.display()))?;
    let copies = root.join("target/real-repos");
    if src.starts_with(&copies) {
        return Ok(src);
    }
    let base = src.file_name().and_then(|n| n.to_str()).context("a repository path")?;
    let (name, origin) = match base {
        "repo" => {
            let parent = src.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).context("owner+name")?;
            let name = parent.split_once('+').map_or(parent, |(_, name)| name);
            (name.to_owned(), parent.replacen('+', "/", 1))
        }
        _ => {
            let name = base.strip_suffix(".git").unwrap_or(base);
            (name.to_owned(), name.to_owned())
        }
    };
    let dest = copies.join(format!("{name}.git"));
    if !dest.join("HEAD").is_file() {
        eprintln!("copying {} to {}", src.display(), dest.display());
        let partial = copies.join(format!("{name}.git.partial"));
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&copies)?;
        output(
            Command::new("nice")
                .args(["-n", "15", "git", "clone", "-q", "--bare", "--no-local"])
                .arg(&src)
                .arg(&partial),
        )?;
        git(&partial, &["remote", "remove", "origin"])?;
        git(&partial, &["config", "gixdbench.origin", &origin])?;
        std::fs::rename(&partial, &dest)?;
    }
    Ok(dest)
}

/// `cargo xtask bench real`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bare repositories to serve: each copied once into target/real-repos/ (heads and tags;
    /// the source is never written to), then repacked under target/real-bench/.
    #[arg(long, required = true)]
    pub repo: Vec<PathBuf>,
    /// Make the copies in target/real-repos/ and stop (other benchmarks take them as --repo).
    #[arg(long)]
    pub copy_only: bool,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, gixd, copy_only } = args;
    let repos: Vec<PathBuf> = repos.iter().map(|r| copied(root, r)).collect::<Result<_>>()?;
    if copy_only {
        return Ok(());
    }
    let started = Instant::now();
    let scratch = crate::tree::Scratch::new("bench-real")?;
    let mut prepared = Vec::new();
    for r in &repos {
        let r = r.canonicalize().with_context(|| format!("{}", r.display()))?;
        prepared.push(prepare(root, &r)?);
    }
    let (gixd, gixd_facts) = gixd_binary(root, gixd, &scratch.0)?;
    let xtask = std::env::current_exe()?;
    let logs = root.join("target/real-bench/logs");
    let conditions = crate::bench::conditions(
        root,
        json!({
            "rounds": rounds,
            "machine": machine(),
            "gixd": "release build, HTTP, protocol v2, a fresh process per operation: arm gixd after one unmeasured git ls-remote of the repository, arm gixd fresh with the operation as its first request",
            "gixd_binary": gixd_facts,
            "git_arm": "git upload-pack --strict --timeout=0 (protocol v2) with the pack-objects it runs, a process per git:// connection, the request line read as git daemon --inetd reads it (git daemon's own process not counted)",
            "bytes": "server → client through one counting TCP relay in front of each arm (gixd: HTTP, headers and chunking included; git: git://)",
            "variants": "bitmap: git repack -adb; no bitmap: git repack -ad; both one pack with pack.writeReverseIndex, no commit-graph, uploadpack.allowFilter=true",
            "fetches": format!("git fetch {} into a bare client: behind = a full clone with the default branch moved to ~{BEHIND} and every ref not merged into it deleted, repacked; no-op = a full clone", REFSPECS.join(" ")),
            "repos": prepared.iter().map(|p| p.facts.clone()).collect::<Vec<_>>(),
        }),
    )?;
    let mut runs = Vec::new();
    // What the first arm left the client with, per repository and operation.
    let mut reference: BTreeMap<(String, &str), (ClientState, String)> = BTreeMap::new();
    for repo in &prepared {
        let name = &repo.name;
        std::fs::create_dir_all(logs.join(name))?;
        let rusage_file = scratch.0.join("rusage.json");
        let git_relays: Vec<Relay> = repo
            .bases
            .iter()
            .map(|base| {
                Relay::start(Upstream::Spawn(vec![
                    xtask.display().to_string(),
                    "rusage".into(),
                    "--out".into(),
                    rusage_file.display().to_string(),
                    "--git-request".into(),
                    base.display().to_string(),
                    "--".into(),
                    "git".into(),
                    "upload-pack".into(),
                    "--strict".into(),
                    "--timeout=0".into(),
                ]))
            })
            .collect::<Result<_>>()?;
        for round in 0..rounds {
            for (v, (variant, dir, _)) in VARIANTS.iter().enumerate() {
                for (op_name, op) in OPS {
                    for arm in round_order(ARMS.len(), round).into_iter().map(|i| ARMS[i]) {
                        let dest = scratch.0.join(format!("client-{}", runs.len()));
                        let log = logs
                            .join(name)
                            .join(format!("{dir}-{}-{round}.log", op_name.replace([' ', ',', '='], "_")));
                        let wall = Instant::now();
                        let (cpu_us, bytes, log_lines) = match arm {
                            "gixd" | "gixd fresh" => {
                                let (mut child, addr) = start_gixd(&gixd, &repo.bases[v], &log)?;
                                let relay = Relay::start(Upstream::Tcp(addr))?;
                                let pid = child.id();
                                if arm == "gixd" {
                                    warm_up(&format!("http://127.0.0.1:{}/{name}.git", relay.port))?;
                                    std::thread::sleep(std::time::Duration::from_millis(20));
                                    relay.take();
                                }
                                let before = proc_cpu_us(pid)?;
                                let done =
                                    client(*op, &format!("http://127.0.0.1:{}/{name}.git", relay.port), repo, &dest);
                                let cpu = proc_cpu_us(pid)? - before;
                                let _ = child.kill();
                                let _ = child.wait();
                                done?;
                                std::thread::sleep(std::time::Duration::from_millis(20));
                                (cpu, relay.take(), Some(log_summary(&log)))
                            }
                            _ => {
                                let relay = &git_relays[v];
                                let _ = std::fs::remove_file(&rusage_file);
                                relay.take();
                                client(*op, &format!("git://127.0.0.1:{}/{name}.git", relay.port), repo, &dest)?;
                                let cpu = crate::bench::narrow::wait_for_rusage(&rusage_file)?;
                                std::thread::sleep(std::time::Duration::from_millis(20));
                                (cpu, relay.take(), None)
                            }
                        };
                        let wall_ms = wall.elapsed().as_millis() as u64;
                        let state = client_state(&dest)?;
                        let objects = client_objects(&dest)?;
                        let what = format!("{arm} ({variant}, round {round})");
                        match reference.get(&(name.clone(), *op_name)) {
                            None => {
                                reference.insert((name.clone(), op_name), (state, what));
                            }
                            Some((first, by)) if *first != state => {
                                bail!(
                                    "{name}, {op_name}: {what} left the client with other refs than {by} did ({} refs vs {}; shallow {} vs {}): the run is aborted, not scored. Client kept in {}",
                                    lines(&state.refs),
                                    lines(&first.refs),
                                    lines(&state.shallow),
                                    lines(&first.shallow),
                                    keep_for_inspection(&dest, root)?.display()
                                );
                            }
                            Some(_) => {}
                        }
                        std::fs::remove_dir_all(&dest)?;
                        eprintln!(
                            "{name} {variant} {op_name} [{round}] {arm}: {:.1} ms CPU, {bytes} bytes, {objects} objects, {:.1} s",
                            cpu_us as f64 / 1000.0,
                            wall_ms as f64 / 1000.0
                        );
                        let mut row = json!({
                            "repo": name, "variant": variant, "op": op_name, "arm": arm, "round": round,
                            "cpu_us": cpu_us, "bytes": bytes, "client_objects": objects,
                            "client_refs": lines(&reference[&(name.clone(), *op_name)].0.refs), "wall_ms": wall_ms,
                        });
                        if let Some((requests, kept)) = log_lines {
                            row["gixd_requests"] = requests.into();
                            row["gixd_log"] = kept.into();
                        }
                        runs.push(row);
                    }
                }
            }
        }
    }
    let mut conditions = conditions;
    conditions["duration_s"] = started.elapsed().as_secs().into();
    crate::bench::finish(root, REAL_RESULTS, conditions, runs)
}

fn keep_for_inspection(dest: &Path, root: &Path) -> Result<PathBuf> {
    let kept = root.join("target/real-bench/mismatch");
    let _ = std::fs::remove_dir_all(&kept);
    std::fs::create_dir_all(kept.parent().unwrap())?;
    std::fs::rename(dest, &kept).or_else(|_| copy_dir(dest, &kept))?;
    Ok(kept)
}

/// `xtask rusage --git-request BASE --out FILE -- git upload-pack …`: play git daemon's part for
/// one connection — read the git:// request line from stdin (exactly its bytes), take the
/// repository below BASE and the protocol version from it — then run the command with the
/// repository appended, as [`crate::bench::rusage`] does. git daemon's own process is not counted.
pub fn rusage_git_request(out: &Path, base: &Path, command: &[String]) -> Result<()> {
    use std::os::fd::FromRawFd;
    // Unbuffered: the bytes after the request line belong to upload-pack.
    // SAFETY: fd 0 is open for the life of the process; ManuallyDrop keeps it open.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let mut len = [0u8; 4];
    stdin.read_exact(&mut len)?;
    let n = usize::from_str_radix(std::str::from_utf8(&len)?, 16)?;
    let mut body = vec![0u8; n.checked_sub(4).context("short git:// request")?];
    stdin.read_exact(&mut body)?;
    let (path, protocol) = parse_git_request(&body)?;
    if let Some(p) = protocol {
        // SAFETY: single-threaded here; the variable is for the command started next.
        unsafe { std::env::set_var("GIT_PROTOCOL", p) };
    }
    let mut command = command.to_vec();
    command.push(base.join(&path).display().to_string());
    crate::bench::rusage(out, &command)
}

/// The repository path (relative) and the `GIT_PROTOCOL` value of a git:// request line
/// (`git-upload-pack /repo.git\0host=…\0\0version=2\0`).
fn parse_git_request(body: &[u8]) -> Result<(String, Option<String>)> {
    let text = std::str::from_utf8(body)?;
    let mut fields = text.split('\0');
    let first = fields.next().unwrap_or("");
    let path =
        first.strip_prefix("git-upload-pack ").with_context(|| format!("not an upload-pack request: {first:?}"))?;
    let path = path.trim_start_matches('/');
    if path.split('/').any(|c| c == "..") {
        bail!("refused path {path:?}");
    }
    let mut extra = Vec::new();
    let mut after_empty = false;
    for f in fields {
        if f.is_empty() {
            after_empty = true;
        } else if after_empty {
            extra.push(f);
        }
    }
    Ok((path.to_owned(), (!extra.is_empty()).then(|| extra.join(":"))))
}

// The report.

/// The real-repository results (both reports read them), or how to make them.
fn real_results(root: &Path) -> Result<Result<Value, String>> {
    load(root, REAL_RESULTS, "`cargo xtask bench real --repo PATH…` (by hand: it needs the repositories)")
}

/// One row of the real-repository table: medians of both arms for a repository × variant × operation.
struct RealRow {
    repo: String,
    variant: String,
    op: String,
    cpu: (f64, f64),
    /// gixd's CPU when the operation is the first request of its process (NaN if not measured).
    fresh_cpu: f64,
    bytes: (f64, f64),
    objects: (String, String),
}

impl RealRow {
    fn cpu_ratio(&self) -> f64 {
        if self.cpu.1 > 0.0 { self.cpu.0 / self.cpu.1 } else { f64::NAN }
    }
}

/// Rows with the worst CPU ratio (gixd ÷ git) first; a row without a ratio goes last.
fn worst_first(rows: &mut [RealRow]) {
    rows.sort_by(|a, b| {
        let key = |r: &RealRow| if r.cpu_ratio().is_finite() { r.cpu_ratio() } else { f64::NEG_INFINITY };
        key(b).total_cmp(&key(a)).then_with(|| (&a.repo, &a.variant, &a.op).cmp(&(&b.repo, &b.variant, &b.op)))
    });
}

pub fn render_real_repos(root: &Path) -> Result<String> {
    let doc = match real_results(root)? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench real")?;
    let repos: Vec<String> = c["repos"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    let origin =
                        r["origin"].as_str().filter(|o| !o.is_empty()).map(|o| format!(" ({o})")).unwrap_or_default();
                    format!(
                        "{}{origin}: {} objects, {} refs ({} branches, {} tags of which {} annotated), {} at {}",
                        r["name"].as_str().unwrap_or("?"),
                        r["objects"],
                        r["refs"],
                        r["branches"],
                        r["tags"],
                        r["annotated_tags"],
                        r["default_branch"].as_str().unwrap_or("?").trim_start_matches("refs/heads/"),
                        r["default_tip"].as_str().unwrap_or("?").get(..10).unwrap_or("?"),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&format!(
        " Machine: {}. gixd: {}, {}. git: {}. Variants: {}. Fetches: {}. Bytes: {}. Objects: what the client holds afterwards (both arms leave it the same refs, or the run is aborted). Repositories: {}. The run took {} min. Medians; rows sorted by the CPU ratio, worst first.\n\n",
        c["machine"].as_str().unwrap_or("?"),
        c["gixd"].as_str().unwrap_or("?"),
        c["gixd_binary"]["built"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["variants"].as_str().unwrap_or("?"),
        c["fetches"].as_str().unwrap_or("?"),
        c["bytes"].as_str().unwrap_or("?"),
        repos.join("; "),
        c["duration_s"].as_u64().map_or("?".to_owned(), |s| s.div_ceil(60).to_string()),
    ));
    out.push_str("Arm `gixd` is a serving process: it answered one `git ls-remote` of the repository before the operation (not counted), as a daemon has; `gixd fresh` is a process whose first request the operation is (its thread stacks, heap and ref snapshot are cold). `git upload-pack` starts per connection either way.\n\n");
    out.push_str("| repository | variant | operation | server CPU, gixd (ms) | git (ms) | gixd ÷ git | gixd fresh (ms) | fresh ÷ git | bytes, gixd | git | gixd ÷ git | client objects, gixd | git |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = real_rows(runs);
    worst_first(&mut rows);
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | `{}` | {:.1} | {:.1} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} |\n",
            r.repo,
            r.variant,
            r.op,
            r.cpu.0,
            r.cpu.1,
            ratio(r.cpu.1, r.cpu.0),
            if r.fresh_cpu.is_finite() { format!("{:.1}", r.fresh_cpu) } else { "–".to_owned() },
            if r.fresh_cpu.is_finite() { ratio(r.cpu.1, r.fresh_cpu) } else { "–".to_owned() },
            r.bytes.0,
            r.bytes.1,
            ratio(r.bytes.1, r.bytes.0),
            r.objects.0,
            r.objects.1,
        ));
    }
    Ok(out)
}

/// One row per repository, variant and operation of the real-repository results: medians of each arm.
fn real_rows(runs: &[Value]) -> Vec<RealRow> {
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    for r in runs {
        if let (Some(repo), Some(variant), Some(op)) = (r["repo"].as_str(), r["variant"].as_str(), r["op"].as_str())
            && !keys.contains(&(repo, variant, op))
        {
            keys.push((repo, variant, op));
        }
    }
    keys.into_iter()
        .map(|(repo, variant, op)| {
            let arm = |name: &str| {
                runs.iter()
                    .filter(|r| r["repo"] == repo && r["variant"] == variant && r["op"] == op && r["arm"] == name)
                    .collect::<Vec<_>>()
            };
            let (g, f, t) = (arm("gixd"), arm("gixd fresh"), arm("git"));
            let med = |runs: &[&Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect());
            RealRow {
                repo: repo.to_owned(),
                variant: variant.to_owned(),
                op: op.to_owned(),
                cpu: (med(&g, "cpu_us") / 1000.0, med(&t, "cpu_us") / 1000.0),
                fresh_cpu: if f.is_empty() { f64::NAN } else { med(&f, "cpu_us") / 1000.0 },
                bytes: (med(&g, "bytes"), med(&t, "bytes")),
                objects: (count(&g, "client_objects"), count(&t, "client_objects")),
            }
        })
        .collect()
}

/// The fetch rows of the real-repository benchmark, for the delta-search report: what a fetch
/// costs in bytes and server CPU against git's, every repository and variant, worst bytes first.
pub fn render_real_fetches(root: &Path) -> Result<String> {
    let doc = match real_results(root)? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench real")?;
    out.push_str(&format!(
        " gixd: {}, arm `gixd` (a serving process). git: {}. Fetches: {}. Bytes: {}. The whole table, with clones and no-op fetches, is in bench/README.md.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["git_arm"].as_str().unwrap_or("?"),
        c["fetches"].as_str().unwrap_or("?"),
        c["bytes"].as_str().unwrap_or("?"),
    ));
    out.push_str("| repository | variant | bytes, gixd | git | gixd ÷ git | server CPU, gixd (ms) | git (ms) | gixd ÷ git |\n|---|---|---|---|---|---|---|---|\n");
    let mut rows: Vec<RealRow> = real_rows(runs).into_iter().filter(|r| r.op.starts_with("fetch")).collect();
    rows.sort_by(|a, b| (b.bytes.0 / b.bytes.1).total_cmp(&(a.bytes.0 / a.bytes.1)));
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} | {:.1} | {:.1} | {} |\n",
            r.repo,
            r.variant,
            r.bytes.0,
            r.bytes.1,
            ratio(r.bytes.1, r.bytes.0),
            r.cpu.0,
            r.cpu.1,
            ratio(r.cpu.1, r.cpu.0),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_request_gives_the_path_and_the_protocol() {
        let (p, v) = super::parse_git_request(b"git-upload-pack /cargo.git\0host=127.0.0.1:9\0\0version=2\0").unwrap();
        assert_eq!((p.as_str(), v.as_deref()), ("cargo.git", Some("version=2")));
        let (p, v) = super::parse_git_request(b"git-upload-pack /a.git\0host=h\0").unwrap();
        assert_eq!((p.as_str(), v), ("a.git", None));
        assert!(super::parse_git_request(b"git-receive-pack /a.git\0").is_err());
        assert!(super::parse_git_request(b"git-upload-pack /../a.git\0").is_err());
    }

    #[test]
    fn real_repository_rows_come_worst_ratio_first() {
        let row = |op: &str, g: f64, t: f64| RealRow {
            repo: "r".into(),
            variant: "bitmap".into(),
            op: op.into(),
            cpu: (g, t),
            fresh_cpu: f64::NAN,
            bytes: (0.0, 0.0),
            objects: (String::new(), String::new()),
        };
        let mut rows = vec![row("a", 1.0, 2.0), row("b", 9.0, 0.0), row("c", 30.0, 1.0), row("d", 3.0, 2.0)];
        worst_first(&mut rows);
        assert_eq!(rows.iter().map(|r| r.op.as_str()).collect::<Vec<_>>(), ["c", "d", "a", "b"]);
    }
}
