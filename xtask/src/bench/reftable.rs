//! `cargo xtask bench reftable`: what a request that reads every ref costs gixd and git, with the
//! refs in packed-refs and in reftable, side by side in one run. Per repository (real ones given
//! with `--repo`, cloned with `--mirror`; and a synthetic one of `--refs` refs, annotated tags
//! among them) two copies: refs packed (`git pack-refs --all`) and refs migrated to reftable
//! (`git refs migrate`, then compacted). Requests, as stock git sends them over protocol v2: an
//! `ls-remote` (ls-refs with peel and symrefs) and a no-op fetch (ls-refs of `HEAD`,
//! `refs/heads/` and `refs/tags/`; nothing is wanted). Servers: gixd over HTTP (its CPU from
//! /proc) and `git upload-pack --stateless-rpc` (its CPU from getrusage of the child). States:
//! steady (the same refs request after request; gixd answers from its ref snapshot) and after an
//! update (a ref moved by `git update-ref` before each request, outside the measurement, so every
//! answer reads the refs anew). gixd's answer is checked byte for byte against git's first. Run
//! by hand; not in CI.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::table::*;
use anyhow::{Context, Result, bail};
use bench_support::run::git;

pub const REFTABLE_RESULTS: &str = "bench/results/reftable.json";

pub const FORMATS: [&str; 2] = ["files", "reftable"];
pub const SERVERS: [&str; 2] = ["gixd", "git upload-pack"];
pub const STATES: [&str; 2] = ["steady", "after an update"];
pub const REQUESTS: [&str; 2] = ["ls-remote", "no-op fetch"];

fn pkt(out: &mut Vec<u8>, line: &str) {
    out.extend_from_slice(format!("{:04x}{line}", line.len() + 4).as_bytes());
}

/// The v2 request body of `request`, as git 2.47 sends it.
fn body(request: &str, object_format: &str) -> Vec<u8> {
    let mut out = Vec::new();
    pkt(&mut out, "command=ls-refs\n");
    pkt(&mut out, "agent=git/2.47.3\n");
    pkt(&mut out, &format!("object-format={object_format}\n"));
    out.extend_from_slice(b"0001");
    pkt(&mut out, "peel\n");
    pkt(&mut out, "symrefs\n");
    if request == "no-op fetch" {
        for prefix in ["HEAD", "refs/heads/", "refs/tags/"] {
            pkt(&mut out, &format!("ref-prefix {prefix}\n"));
        }
    } else {
        pkt(&mut out, "unborn\n");
    }
    out.extend_from_slice(b"0000");
    out
}

/// git's answer: `git upload-pack --stateless-rpc` with `body` on stdin; (answer, its CPU µs).
fn git_answer(repo: &Path, body: &[u8]) -> Result<(Vec<u8>, i64)> {
    let before = crate::bench::children_cpu_us();
    let mut child = Command::new("git")
        .args(["upload-pack", "--stateless-rpc"])
        .arg(repo)
        .env("GIT_PROTOCOL", "version=2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child.stdin.take().context("stdin")?.write_all(body)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("git upload-pack failed on {}", repo.display());
    }
    Ok((out.stdout, crate::bench::children_cpu_us() - before))
}

/// gixd's answer to the same request over HTTP (the body of the response).
fn gixd_answer(addr: &str, name: &str, body: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr)?;
    let head = format!(
        "POST /{name}/git-upload-pack HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-git-upload-pack-request\r\nAccept: application/x-git-upload-pack-result\r\nGit-Protocol: version=2\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let at = response.windows(4).position(|w| w == b"\r\n\r\n").context("HTTP response head")? + 4;
    let (head, payload) = response.split_at(at);
    let head = String::from_utf8_lossy(head);
    if !head.starts_with("HTTP/1.1 200") {
        bail!("gixd answered {}", head.lines().next().unwrap_or_default());
    }
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Ok(dechunk(payload));
    }
    Ok(payload.to_vec())
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
    out
}

/// A repository of `n` refs: 200 commits, most refs branches spread over them, a tenth
/// lightweight tags, 500 annotated tags; made with `git fast-import` and `git update-ref --stdin`.
fn synthetic(dir: &Path, n: usize) -> Result<PathBuf> {
    let repo = dir.join(format!("synthetic-{n}.git"));
    git(dir, &["init", "-q", "--bare", "-b", "main", repo.to_str().unwrap()])?;
    let mut stream = String::new();
    for i in 0..200 {
        let content = format!("commit {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\nmark :{}\ncommitter B <b@example.com> {} +0000\ndata 3\nc{:01}\nM 644 inline f\ndata {}\n{content}\n",
            i + 1,
            1_700_000_000 + i,
            i % 10,
            content.len()
        ));
    }
    for i in 0..500 {
        stream.push_str(&format!(
            "tag a{i:04}\nfrom :{}\ntagger B <b@example.com> 1700000000 +0000\ndata 4\ntag\n\n",
            i % 200 + 1
        ));
    }
    let mut child =
        Command::new("git").current_dir(&repo).args(["fast-import", "--quiet"]).stdin(Stdio::piped()).spawn()?;
    child.stdin.take().context("stdin")?.write_all(stream.as_bytes())?;
    if !child.wait()?.success() {
        bail!("fast-import");
    }
    let commits: Vec<String> = git(&repo, &["rev-list", "main"])?.lines().map(str::to_owned).collect();
    let mut script = String::new();
    for i in 0..n.saturating_sub(501) {
        let id = &commits[i % commits.len()];
        if i % 10 == 9 {
            script.push_str(&format!("create refs/tags/t{i:07} {id}\n"));
        } else {
            script.push_str(&format!("create refs/heads/b/{i:07} {id}\n"));
        }
    }
    let mut child =
        Command::new("git").current_dir(&repo).args(["update-ref", "--stdin"]).stdin(Stdio::piped()).spawn()?;
    child.stdin.take().context("stdin")?.write_all(script.as_bytes())?;
    if !child.wait()?.success() {
        bail!("update-ref --stdin");
    }
    Ok(repo)
}

/// `cargo xtask bench reftable`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bare repositories to copy (each twice: packed refs, reftable).
    #[arg(long)]
    pub repo: Vec<PathBuf>,
    /// Refs of the synthetic repository.
    #[arg(long, default_value_t = 100_000)]
    pub refs: usize,
    /// Requests per arm and round.
    #[arg(long, default_value_t = 20)]
    pub requests: usize,
    /// Measure this gixd binary instead of a release build of the committed tree.
    #[arg(long)]
    pub gixd: Option<PathBuf>,
}

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, repo: repos, refs, requests, gixd } = args;
    let gixd = crate::bench::gixd_or_build(root, gixd)?;
    let scratch = crate::tree::Scratch::new("bench-reftable")?;
    let base = scratch.0.join("base");
    std::fs::create_dir_all(&base)?;
    let mut sources = vec![synthetic(&scratch.0, refs)?];
    for repo in repos {
        sources.push(repo.canonicalize()?);
    }
    let mut repos_meta = Vec::new();
    let mut names = Vec::new();
    for source in &sources {
        // Named in URLs and directories: `+` of a mirror's name becomes `-`.
        let name = crate::bench::repo_name(source).replace('+', "-");
        for format in FORMATS {
            let dest = base.join(format!("{name}-{format}.git"));
            git(
                &scratch.0,
                &["clone", "-q", "--mirror", "--no-local", source.to_str().unwrap(), dest.to_str().unwrap()],
            )?;
            git(&dest, &["pack-refs", "--all"])?;
            if format == "reftable" {
                git(&dest, &["refs", "migrate", "--ref-format=reftable"])?;
                git(&dest, &["pack-refs"])?;
            }
        }
        let files = base.join(format!("{name}-files.git"));
        let count = git(&files, &["for-each-ref", "--format=x"])?.lines().count();
        let object_format = git(&files, &["rev-parse", "--show-object-format"])?;
        let tip = git(&files, &["rev-parse", "HEAD"])?;
        let parent = git(&files, &["rev-parse", "HEAD~1"]).unwrap_or_else(|_| tip.clone());
        eprintln!("{name}: {count} refs");
        repos_meta.push(serde_json::json!({ "repo": name, "refs": count }));
        names.push((name, object_format, [tip, parent]));
    }
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "requests": requests,
            "gixd": format!("release build {}", gixd.display()),
            "how": "per repository a copy with packed refs and one migrated to reftable (both compacted); protocol v2 ls-refs as `git ls-remote` and a no-op `git fetch` send it; gixd over HTTP (CPU from /proc) against `git upload-pack --stateless-rpc` (CPU from getrusage); steady: the same refs each request; after an update: `git update-ref` moved a ref before each request (not measured)",
            "repos": repos_meta,
        }),
    )?;
    let (mut child, addr) = crate::bench::serve_gixd(&gixd, &base, &[])?;
    let mut runs = Vec::new();
    let result = (|| -> Result<()> {
        for (name, object_format, ticks) in &names {
            for format in FORMATS {
                let repo_name = format!("{name}-{format}.git");
                let repo = base.join(&repo_name);
                for request in REQUESTS {
                    let body = body(request, object_format);
                    let (theirs, _) = git_answer(&repo, &body)?;
                    let ours = gixd_answer(&addr, &repo_name, &body)?;
                    if ours != theirs {
                        bail!(
                            "{repo_name} {request}: gixd's answer differs from git's ({} vs {} bytes)",
                            ours.len(),
                            theirs.len()
                        );
                    }
                }
            }
            for round in 0..rounds {
                let arms: Vec<(&str, &str, &str, &str)> = FORMATS
                    .iter()
                    .flat_map(|f| {
                        SERVERS.iter().flat_map(move |s| {
                            STATES.iter().flat_map(move |st| REQUESTS.iter().map(move |r| (*f, *s, *st, *r)))
                        })
                    })
                    .collect();
                for i in bench_support::run::round_order(arms.len(), round) {
                    let (format, server, state, request) = arms[i];
                    let repo_name = format!("{name}-{format}.git");
                    let repo = base.join(&repo_name);
                    let body = body(request, object_format);
                    let mut cpu_us = 0i64;
                    for n in 0..requests {
                        if state == "after an update" {
                            git(&repo, &["update-ref", "refs/bench/tick", &ticks[n % 2]])?;
                        }
                        if server == "gixd" {
                            let before = crate::bench::proc_cpu_us(child.id())?;
                            gixd_answer(&addr, &repo_name, &body)?;
                            cpu_us += crate::bench::proc_cpu_us(child.id())? - before;
                        } else {
                            cpu_us += git_answer(&repo, &body)?.1;
                        }
                    }
                    runs.push(serde_json::json!({
                        "repo": name, "format": format, "server": server, "state": state, "request": request,
                        "round": round, "requests": requests, "cpu_us": cpu_us,
                    }));
                }
                eprint!(".");
            }
            eprintln!(" {name}");
        }
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result?;
    crate::bench::finish(root, REFTABLE_RESULTS, conditions, runs)
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(
        root,
        REFTABLE_RESULTS,
        "`cargo xtask bench reftable --repo PATH…` (by hand: it needs the repositories)",
    )? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench reftable")?;
    out.push_str(&format!(
        " gixd: {}. {} Medians of the rounds, per request.\n\n",
        c["gixd"].as_str().unwrap_or("?"),
        c["how"].as_str().unwrap_or("?")
    ));
    out.push_str("| repository | refs | request | state | refs in | server CPU ms: gixd | git | gixd ÷ git | reftable ÷ files (gixd) |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for repo in c["repos"].as_array().context("repos")? {
        let name = repo["repo"].as_str().context("repo")?;
        for request in REQUESTS {
            for state in STATES {
                let med = |format: &str, server: &str| {
                    median(
                        runs.iter()
                            .filter(|r| r["repo"] == name && r["request"] == request && r["state"] == state)
                            .filter(|r| r["format"] == format && r["server"] == server)
                            .filter_map(|r| Some(r["cpu_us"].as_f64()? / r["requests"].as_f64()?))
                            .collect(),
                    ) / 1000.0
                };
                for format in FORMATS {
                    let (ours, theirs) = (med(format, "gixd"), med(format, "git upload-pack"));
                    let vs_files = if format == "reftable" { ratio(med("files", "gixd"), ours) } else { "—".into() };
                    rows.push((
                        ours / theirs,
                        format!(
                            "| {name} | {} | {request} | {state} | {format} | {ours:.2} | {theirs:.2} | {} | {vs_files} |\n",
                            repo["refs"],
                            ratio(theirs, ours),
                        ),
                    ));
                }
            }
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().for_each(|(_, row)| out.push_str(&row));
    Ok(out)
}
