//! The benchmark harness: `cargo xtask bench <name>` runs one benchmark, each a module here with
//! its arguments (`Args`), its run and its rendering (the generated blocks `cargo xtask report`
//! writes into the documents that quote it); what several share is below, and in the
//! `bench-support` crate (processes, ports, the counting relay).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use bench_support::run::{output, round_order};

pub mod bakeoff;
pub mod bitmaps;
pub mod bundles;
pub mod bursts;
pub mod clone;
pub mod ingest;
pub mod lfs;
pub mod life;
pub mod maintenance;
pub mod narrow;
pub mod patches;
pub mod push;
pub mod ramp;
pub mod real;
pub mod refs;
pub mod reftable;
pub mod ssh;
pub mod table;
pub mod tls;
pub mod writes;

/// Every generated block: the document that holds it (between `<!-- generated: NAME -->` and
/// `<!-- end generated -->`), its name, and what renders it from the committed results.
pub type Render = fn(&Path) -> Result<String>;
pub const BLOCKS: &[(&str, &str, Render)] = &[
    ("upstream/serial-stepwise.md", "patch-costs", patches::render_patch_costs),
    ("upstream/delta-base-inclusion.md", "patch-costs", patches::render_patch_costs),
    ("upstream/serial-delta-resolution.md", "index-costs", patches::render_index_costs),
    ("upstream/delta-chain-base-cache.md", "decode-costs", patches::render_decode_costs),
    ("upstream/deflate-stream-reuse.md", "loose-entry-costs", patches::render_loose_entry_costs),
    ("upstream/delta-search.md", "real-fetches", real::render_real_fetches),
    ("upstream/delta-search.md", "maintenance", |root| maintenance::render(root, maintenance::MAINTENANCE_RESULTS, "")),
    ("bench/README.md", "clone-cost", |root| clone::render(root, clone::CLONE_RESULTS, "cargo xtask bench clone")),
    ("bench/README.md", "clone-commit-graph", |root| {
        clone::render(
            root,
            clone::COMMIT_GRAPH_RESULTS,
            "cargo xtask bench clone --repo …; then move bench/results/clone-cost.json there",
        )
    }),
    ("bench/README.md", "writes", writes::render),
    ("bench/README.md", "ramp", ramp::render),
    ("bench/README.md", "narrow", narrow::render),
    ("bench/README.md", "push", push::render),
    ("bench/README.md", "ingest", ingest::render),
    ("bench/README.md", "maintenance", |root| maintenance::render(root, maintenance::MAINTENANCE_RESULTS, "")),
    ("bench/README.md", "maintenance-as-cloned", |root| {
        maintenance::render(root, maintenance::MAINTENANCE_AS_CLONED_RESULTS, " --as-cloned")
    }),
    ("bench/README.md", "maintenance-loose-by-git", maintenance::render_loose_by_git),
    ("bench/README.md", "refs", refs::render),
    ("bench/README.md", "bitmaps", bitmaps::render),
    ("bench/README.md", "real-repos", real::render_real_repos),
    ("bench/README.md", "bursts", |root| bursts::render(root, bursts::BURSTS_RESULTS, "", &bursts::PLAIN_PAIRS)),
    ("bench/README.md", "bursts-secure", |root| {
        bursts::render(root, bursts::BURSTS_SECURE_RESULTS, " --secure", &bursts::SECURE_PAIRS)
    }),
    ("bench/README.md", "tls", tls::render),
    ("bench/README.md", "ssh", ssh::render),
    ("bench/README.md", "reftable", reftable::render),
    ("bench/README.md", "bundles", bundles::render),
    ("bench/README.md", "lfs", lfs::render),
];

/// Every benchmark, by the name `cargo xtask bench` takes.
#[derive(clap::Subcommand)]
pub enum Bench {
    /// The bake-off: gixd against git http-backend (lighttpd), git daemon and JGit's daemon, each
    /// a real server in a cgroup of its own behind one counting relay (as root); its reports are
    /// `bench/bakeoff*.md` and `bench/bakeoff.svg`.
    Bakeoff(bakeoff::Args),
    /// A repository's life under pushes (`xtask/src/bench/life.rs`): states written by gixd, by stock
    /// git or both, and clone, blob:none, fetch 200 behind and no-op against git upload-pack on
    /// the same directory, after the pushes and after each maintenance; report `bench/life.md`.
    /// By hand, on a real repository.
    Life(life::Args),
    /// Pack generation on stock crates vs the patched vendor/ (threads, re-deflated objects, CPU).
    Patches(patches::Args),
    /// Server CPU and peak RSS of one clone: gixd over HTTP vs git upload-pack (file://).
    Clone(clone::Args),
    /// Write-family syscalls per clone: gixd over HTTP vs git http-backend (lighttpd) and git daemon.
    Writes(writes::Args),
    /// `--depth 1` and `--filter=blob:none` clones over git://: gixd vs git daemon, objects,
    /// bytes (one counting relay) and server CPU.
    Narrow(narrow::Args),
    /// Server CPU per clone with and without pack bitmaps: gixd vs git upload-pack, on a generated
    /// ≥ 100 000-object repository and the corpus's linear one.
    Bitmaps(bitmaps::Args),
    /// Real repositories, each repacked with and without a bitmap: clone, `--depth 1`,
    /// `blob:none`, a fetch 200 commits behind and a no-op fetch, gixd (HTTP) vs git upload-pack
    /// (server CPU, bytes, objects). Run by hand (it needs the repositories); not in CI.
    Real(real::Args),
    /// Server CPU of a one-commit push: gixd over HTTP vs git receive-pack.
    Push(push::Args),
    /// A whole history pushed into an empty repository: gixd over HTTP vs git receive-pack —
    /// server CPU, wall time, peak memory. Run by hand on real repositories; not in CI.
    Ingest(ingest::Args),
    /// Pack bytes and CPU of `gixd maintenance` on a repository that only received pushes
    /// (the default branch pushed in steps), vs `git repack -adf --window=10` and `git repack -ad`.
    /// Run by hand on real repositories; not in CI.
    Maintenance(maintenance::Args),
    /// What loose refs cost each request: a real repository's refs pushed to gixd (loose) and
    /// after `gixd maintenance` (packed): server syscalls and CPU of `git ls-remote`. By hand.
    Refs(refs::Args),
    /// What bundle-uri saves the server: plain clones against `--bundle-uri` clones of real
    /// repositories (server CPU, bytes, client wall), and maintenance with and without bundles.
    Bundles(bundles::Args),
    /// Requests that read every ref (ls-remote, a no-op fetch), gixd against git upload-pack,
    /// refs in packed-refs and in reftable, on a synthetic repository of `--refs` refs and real
    /// ones (`--repo`). By hand; not in CI.
    Reftable(reftable::Args),
    /// Bursts of concurrent distinct clones of real repositories (with and without a bitmap):
    /// gixd at its defaults (HTTP, git://) vs git http-backend and git daemon — refused clones,
    /// server CPU, wall, peak memory (cgroup and RSS). Run by hand, as root; not in CI.
    Bursts(bursts::Args),
    /// What TLS costs a clone: server CPU of a full clone from gixd over HTTP and over HTTPS,
    /// and from git http-backend behind lighttpd with TLS. Run by hand, as root; not in CI.
    Tls(tls::Args),
    /// What SSH costs: server CPU of a full clone and a whole-history push from gixd over HTTP,
    /// over its in-process SSH, behind sshd as `gixd shell`, and from git behind sshd. Run by
    /// hand, as root; not in CI.
    Ssh(ssh::Args),
    /// Server CPU per clone at 1…32 concurrent clients, under a CPU quota and pinned.
    Ramp(ramp::Args),
    /// Git LFS: server CPU per GiB uploaded and downloaded, gixd against giftless (PyPI, local
    /// storage), curl as the client, and a download's throughput against lighttpd's sendfile.
    /// By hand (it installs giftless with pip); not in CI.
    Lfs(lfs::Args),
}

/// Run the benchmark `bench` asks for.
pub fn run(root: &Path, bench: Bench) -> Result<()> {
    match bench {
        Bench::Bakeoff(args) => bakeoff::run(root, args),
        Bench::Life(args) => life::run(root, args),
        Bench::Patches(args) => patches::run(root, args),
        Bench::Clone(args) => clone::run(root, args),
        Bench::Writes(args) => writes::run(root, args),
        Bench::Narrow(args) => narrow::run(root, args),
        Bench::Bitmaps(args) => bitmaps::run(root, args),
        Bench::Real(args) => real::run(root, args),
        Bench::Push(args) => push::run(root, args),
        Bench::Ingest(args) => ingest::run(root, args),
        Bench::Maintenance(args) => maintenance::run(root, args),
        Bench::Refs(args) => refs::run(root, args),
        Bench::Bundles(args) => bundles::run(root, args),
        Bench::Reftable(args) => reftable::run(root, args),
        Bench::Bursts(args) => bursts::run(root, args),
        Bench::Tls(args) => tls::run(root, args),
        Bench::Ssh(args) => ssh::run(root, args),
        Bench::Ramp(args) => ramp::run(root, args),
        Bench::Lfs(args) => lfs::run(root, args),
    }
}

/// A self-signed certificate for 127.0.0.1 and its key (`cert.pem`, `key.pem` in `dir`), made by
/// `openssl`, for the HTTPS arms.
pub(crate) fn self_signed_cert(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    output(
        Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    )?;
    Ok((cert, key))
}

/// A new Ed25519 key pair `dir/name` (and `.pub`), no passphrase.
pub(crate) fn ssh_key(dir: &Path, name: &str) -> Result<PathBuf> {
    let key = dir.join(name);
    bench_support::sshd::keygen(&key, "ed25519", &[])?;
    Ok(key)
}

/// `GIT_SSH_COMMAND` for a bench client: only `key`, any loopback host key, no prompt.
pub(crate) fn ssh_command(key: &Path) -> String {
    format!(
        "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        key.display()
    )
}

/// What every benchmark records about the run: commit, date, CPUs, load at start, git.
/// `extra` adds the benchmark's own fields; `loadavg_end` is added by [`finish`].
pub(crate) fn conditions(root: &Path, extra: serde_json::Value) -> Result<serde_json::Value> {
    let mut c = serde_json::json!({
        "commit": output(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root))?,
        "date": crate::today()?,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_start": loadavg(),
        "git": output(Command::new("git").arg("--version"))?,
    });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    Ok(c)
}

/// Store the runs with their conditions (and the load at the end) in `results`.
pub(crate) fn finish(
    root: &Path,
    results: &str,
    mut conditions: serde_json::Value,
    runs: Vec<serde_json::Value>,
) -> Result<()> {
    conditions["loadavg_end"] = loadavg().into();
    let doc = serde_json::json!({ "conditions": conditions, "runs": runs });
    std::fs::create_dir_all(root.join("bench/results"))?;
    std::fs::write(root.join(results), serde_json::to_string_pretty(&doc)? + "\n")?;
    println!("wrote {results} ({} runs); render with `cargo xtask report`", doc["runs"].as_array().map_or(0, Vec::len));
    Ok(())
}

/// The gixd a benchmark measures: `given`, or a release build of the committed tree.
pub(crate) fn gixd_or_build(root: &Path, given: Option<PathBuf>) -> Result<PathBuf> {
    match given {
        Some(gixd) => Ok(gixd.canonicalize()?),
        None => build_gixd(root),
    }
}

/// A fresh `gixd serve` of `base` (with `extra` flags) that takes pushes: a write token made for
/// it (in `base`), and the URL prefix that carries it (`http://bench:TOKEN@ADDR`).
pub(crate) fn serve_gixd_taking_pushes(
    gixd: &Path,
    base: &Path,
    extra: &[&std::ffi::OsStr],
) -> Result<(std::process::Child, String)> {
    let tokens = base.join("tokens.toml");
    let out = Command::new(gixd)
        .args(["token", "add", "--user", "bench", "--write", "--token-file"])
        .arg(&tokens)
        .output()?;
    let secret = String::from_utf8(out.stdout)?.trim().to_owned();
    let mut args = vec!["--token-file".as_ref(), tokens.as_os_str()];
    args.extend_from_slice(extra);
    let (child, addr) = serve_gixd(gixd, base, &args)?;
    Ok((child, format!("http://bench:{secret}@{addr}")))
}

pub(crate) fn build_gixd(root: &Path) -> Result<PathBuf> {
    let status =
        Command::new("cargo").args(["build", "--release", "--quiet", "-p", "gixd"]).current_dir(root).status()?;
    if !status.success() {
        bail!("building gixd failed");
    }
    Ok(root.join("target/release/gixd"))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `xtask rusage --out FILE -- cmd…`: run `cmd` with this process's stdio, then record the CPU
/// time and peak RSS of it and every descendant it waited for.
pub fn rusage(out: &Path, command: &[String]) -> Result<()> {
    let status = Command::new(&command[0]).args(&command[1..]).status().context("running the wrapped command")?;
    // SAFETY: `rusage` is plain data (integers), for which all zeroes is a value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    let row = serde_json::json!({
        "cpu_us": us(usage.ru_utime) + us(usage.ru_stime),
        "peak_rss_kb": usage.ru_maxrss,
    });
    std::fs::write(out, row.to_string())?;
    std::process::exit(status.code().unwrap_or(1));
}

/// CPU time of every thread of process `pid`, in µs, from each thread's schedstat (ns
/// resolution; /proc/<pid>/stat counts 10 ms ticks). The server's threads outlive a clone
/// (tokio keeps idle blocking threads for seconds), so none is lost between two readings.
pub(crate) fn proc_cpu_us(pid: u32) -> Result<i64> {
    let mut ns: i64 = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        if let Ok(text) = std::fs::read_to_string(path) {
            ns += text.split_whitespace().next().context("schedstat")?.parse::<i64>()?;
        }
    }
    Ok(ns / 1000)
}

fn proc_peak_rss_kb(pid: u32) -> Result<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("VmHWM value")?.parse()?)
}

/// A fresh `gixd serve` of `base` (every repository exported) on a free port, with `extra`
/// arguments; the process and the address it listens on (from its first line).
pub(crate) fn serve_gixd(
    gixd: &Path,
    base: &Path,
    extra: &[&std::ffi::OsStr],
) -> Result<(std::process::Child, String)> {
    use std::io::BufRead;
    let mut child = Command::new(gixd)
        .args(["serve", "--listen", "127.0.0.1:0", "--export-all", "--base-path"])
        .arg(base)
        .args(extra)
        .env("GIXD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    // The HTTP line (a git:// line may come first).
    let mut lines = std::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
    let addr = lines
        .by_ref()
        .take(4)
        .map_while(Result::ok)
        .find_map(|line| line.split("http://").nth(1).and_then(|r| r.split('/').next()).map(str::to_owned));
    let Some(addr) = addr else {
        let _ = child.kill();
        let _ = child.wait();
        bail!("gixd printed no address line");
    };
    Ok((child, addr))
}

/// One clone served by a fresh gixd: its CPU during the clone and its peak RSS.
pub(crate) fn clone_gixd(gixd: &Path, base: &Path, repo: &str, dest: &Path) -> Result<(i64, i64)> {
    let (mut child, addr) = serve_gixd(gixd, base, &[])?;
    let pid = child.id();
    let before = proc_cpu_us(pid)?;
    let status = Command::new("git")
        .args(["-c", "protocol.version=2", "clone", "-q", "--mirror"])
        .arg(format!("http://{addr}/{repo}"))
        .arg(dest)
        .status()?;
    let cpu = proc_cpu_us(pid)? - before;
    let peak = proc_peak_rss_kb(pid)?;
    let _ = child.kill();
    let _ = child.wait();
    if !status.success() {
        bail!("clone from gixd failed");
    }
    Ok((cpu, peak))
}

/// One clone served by git upload-pack (file://, so the client starts it): CPU and peak RSS of
/// upload-pack and the pack-objects it runs.
pub(crate) fn clone_git(xtask: &Path, repo: &Path, dest: &Path, scratch: &Path) -> Result<(i64, i64)> {
    let out = scratch.join("rusage.json");
    let upload_pack = format!("{} rusage --out {} -- git-upload-pack", xtask.display(), out.display());
    let status = Command::new("git")
        .args(["-c", "protocol.version=2", "clone", "-q", "--mirror", "--no-local"])
        .arg(format!("--upload-pack={upload_pack}"))
        .arg(format!("file://{}", repo.display()))
        .arg(dest)
        .status()?;
    if !status.success() {
        bail!("clone from git upload-pack failed");
    }
    let row: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    Ok((row["cpu_us"].as_i64().context("cpu")?, row["peak_rss_kb"].as_i64().context("rss")?))
}

/// Bytes of every pack file of a git directory.
pub(crate) fn pack_bytes(clone: &Path) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(clone.join("objects/pack"))? {
        let p = e?.path();
        if p.extension().is_some_and(|e| e == "pack") {
            total += std::fs::metadata(&p)?.len();
        }
    }
    Ok(total)
}

pub(crate) fn corpus_dir(root: &Path) -> Result<PathBuf> {
    let listing = output(
        Command::new("cargo")
            .args(["run", "--release", "--quiet", "-p", "gixd-tests", "--bin", "corpus"])
            .current_dir(root),
    )?;
    Ok(PathBuf::from(listing.lines().next().and_then(|l| l.strip_prefix("corpus: ")).context("corpus dir")?))
}

/// A repository's name for results: its directory's, or for a `fetch` mirror (`owner+name/repo`)
/// the owner and name.
pub(crate) fn repo_name(repo: &Path) -> String {
    let name = repo.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A `fetch` mirror is `owner+name/repo`: the owner and name say more than `repo`.
    match repo.parent().and_then(Path::file_name) {
        Some(parent) if name == "repo" => parent.to_string_lossy().into_owned(),
        _ => name.trim_end_matches(".git").to_owned(),
    }
}

/// CPU of every child this process has reaped so far, in µs (getrusage).
pub(crate) fn children_cpu_us() -> i64 {
    // SAFETY: `rusage` is plain data (integers), for which all zeroes is a value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    us(usage.ru_utime) + us(usage.ru_stime)
}
