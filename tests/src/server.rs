//! Running gixd for a test, and talking to it: as stock git does (a clone or fetch over HTTP) and
//! byte by byte (a minimal HTTP/1.1 client, for requests git would never send).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Output;

use gixd::config::{Config, Exports};
use gixd::server::Running;

use crate::git_command;

/// gixd serving every repository below `base` on a free port.
pub fn serve(base: &Path) -> Running {
    serve_with(base, |_| {})
}

/// gixd serving `base` with settings adjusted by `adjust` (exports default to all).
pub fn serve_with(base: &Path, adjust: impl FnOnce(&mut Config)) -> Running {
    serve_tapped(base, None, adjust)
}

/// [`serve_with`], every exchange observed by `tap`.
pub fn serve_tapped(
    base: &Path,
    tap: Option<std::sync::Arc<dyn gixd::tap::Tap>>,
    adjust: impl FnOnce(&mut Config),
) -> Running {
    let mut config = Config::new(base.to_owned());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.exports = Exports::All;
    adjust(&mut config);
    gixd::server::spawn_with(config, gixd::server::Options { tap }).expect("gixd starts")
}

/// Stock git run against a server: no credential prompts, no config but ours.
pub fn git_client(dir: &Path, args: &[&str]) -> Output {
    git_command(dir).env("GIT_TERMINAL_PROMPT", "0").args(args).output().expect("git runs")
}

/// Like [`git_client`] but the command must succeed.
pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git_client(dir, args);
    assert!(out.status.success(), "git {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `git clone` of `url` into `dest` with `protocol.version=<version>`; returns stderr.
pub fn clone(url: &str, dest: &Path, version: u8, extra: &[&str]) -> String {
    let parent = dest.parent().unwrap();
    let version = format!("protocol.version={version}");
    let mut args = vec!["-c", &version, "clone", "-q"];
    args.extend_from_slice(extra);
    args.push(url);
    let dest_str = dest.to_str().unwrap();
    args.push(dest_str);
    let out = git_client(parent, &args);
    assert!(out.status.success(), "clone {url} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `refname -> oid` for every ref of a repository (remote-tracking refs mapped to heads with
/// `remote_prefix`), from `git for-each-ref`.
pub fn refs(repo: &Path, pattern: &str) -> BTreeMap<String, String> {
    git_ok(repo, &["for-each-ref", "--format=%(refname) %(objectname)", pattern])
        .lines()
        .map(|l| {
            let (name, id) = l.split_once(' ').unwrap();
            (name.to_owned(), id.to_owned())
        })
        .collect()
}

/// Every object id a repository holds (loose and packed).
pub fn all_objects(repo: &Path) -> BTreeSet<String> {
    git_ok(repo, &["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `git rev-list --objects <args>` as a set of ids.
pub fn rev_list_objects(repo: &Path, args: &[&str]) -> BTreeSet<String> {
    let mut all = vec!["rev-list", "--objects"];
    all.extend_from_slice(args);
    git_ok(repo, &all).lines().map(|l| l.split(' ').next().unwrap().to_owned()).collect()
}

/// `git fsck --full` must be clean.
pub fn assert_fsck_clean(repo: &Path) {
    let out = git_client(repo, &["fsck", "--full", "--strict"]);
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "fsck found problems in {}:\n{}{}",
        repo.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ids in the pack files of `repo` created after `before` (a set of pack names).
pub fn packs(repo: &Path) -> BTreeSet<PathBuf> {
    let dir = git_dir(repo).join("objects/pack");
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "idx")).collect()
        })
        .unwrap_or_default()
}

/// Object ids listed in a pack index.
pub fn pack_ids(repo: &Path, idx: &Path, hash: &str) -> BTreeSet<String> {
    let out = git_command(repo)
        .args(["show-index", &format!("--object-format={hash}")])
        .stdin(std::fs::File::open(idx).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.split_whitespace().nth(1).unwrap().to_owned()).collect()
}

fn git_dir(repo: &Path) -> PathBuf {
    if repo.join(".git").is_dir() { repo.join(".git") } else { repo.to_owned() }
}

/// A raw HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Send one HTTP/1.1 request (`Connection: close`) and read the whole response.
pub fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) before reading everything; a failed write is then expected.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

/// A raw HTTP response (head, then the body, de-chunked) as read off the socket.
pub fn parse_response(raw: &[u8]) -> HttpResponse {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let end = rest.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap().trim(), 16).unwrap();
            rest = &rest[end + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        body = out;
    }
    HttpResponse { status, headers, body }
}

/// A pkt-line for building raw requests.
pub fn pkt(line: &str) -> Vec<u8> {
    format!("{:04x}{line}", line.len() + 4).into_bytes()
}

/// Split a response into pkt-line payloads (`None` for flush/delim/response-end).
pub fn pkt_lines(mut body: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    while body.len() >= 4 {
        let len = usize::from_str_radix(std::str::from_utf8(&body[..4]).unwrap(), 16).unwrap();
        if len < 4 {
            out.push(None);
            body = &body[4..];
        } else {
            out.push(Some(body[4..len].to_vec()));
            body = &body[len..];
        }
    }
    assert!(body.is_empty(), "trailing bytes after the last pkt-line");
    out
}

/// The pack carried on side-band 1 of a response, after the text lines before it.
pub fn sideband_pack(body: &[u8]) -> Vec<u8> {
    let mut pack = Vec::new();
    for line in pkt_lines(body).into_iter().flatten() {
        if line.first() == Some(&1) {
            pack.extend_from_slice(&line[1..]);
        }
    }
    pack
}

/// Index `pack` with stock git (`--strict`) and list its objects.
pub fn objects_in_pack(pack: &[u8], hash: &str) -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.pack");
    std::fs::write(&path, pack).unwrap();
    let out = git_command(dir.path())
        .args(["index-pack", "--strict", &format!("--object-format={hash}")])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "git index-pack refused the pack: {}", String::from_utf8_lossy(&out.stderr));
    pack_ids(dir.path(), &path.with_extension("idx"), hash)
}

/// The body of a protocol-v2 `fetch` in `hash` (`sha1`, `sha256`): the command, then `lines`
/// as its arguments (one pkt-line each, a newline added), then a flush.
pub fn v2_fetch_request(hash: &str, lines: &[&str]) -> Vec<u8> {
    v2_request("fetch", &[&format!("object-format={hash}")], lines)
}

/// The body of a protocol-v2 `command=<command>`: `caps` before the delimiter, `args` after
/// it (one pkt-line each, a newline added), then a flush.
pub fn v2_request(command: &str, caps: &[&str], args: &[&str]) -> Vec<u8> {
    let mut body = pkt(&format!("command={command}\n"));
    for cap in caps {
        body.extend(pkt(&format!("{cap}\n")));
    }
    body.extend(b"0001");
    for arg in args {
        body.extend(pkt(&format!("{arg}\n")));
    }
    body.extend(b"0000");
    body
}

/// POST one protocol-v2 `fetch` to `repo`'s upload-pack: `want <want>`, then `args` (one line
/// each), then `done`. The raw response body.
pub fn v2_fetch_raw(addr: std::net::SocketAddr, repo: &str, want: &str, args: &[&str]) -> Vec<u8> {
    let mut body = pkt("command=fetch\n");
    body.extend(b"0001");
    body.extend(pkt(&format!("want {want}\n")));
    for a in args {
        body.extend(pkt(&format!("{a}\n")));
    }
    body.extend(pkt("done\n"));
    body.extend(b"0000");
    http(
        addr,
        "POST",
        &format!("/{repo}/git-upload-pack"),
        &[("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")],
        &body,
    )
    .body
}

/// [`v2_fetch_raw`]'s response as text: its pkt-lines' payloads, concatenated.
pub fn v2_fetch_text(addr: std::net::SocketAddr, repo: &str, want: &str, args: &[&str]) -> String {
    pkt_lines(&v2_fetch_raw(addr, repo, want, args))
        .into_iter()
        .flatten()
        .map(|l| String::from_utf8_lossy(&l).into_owned())
        .collect()
}

/// The base of every delta in a SHA-1 `pack` that names its base by id (a thin base when the
/// base is not in the pack), in pack order, read with gix-pack's pack reader.
pub fn ref_delta_bases(pack: &[u8]) -> Vec<String> {
    gix_pack::data::input::BytesToEntriesIter::new_from_header(
        std::io::BufReader::new(pack),
        gix_pack::data::input::Mode::Verify,
        gix_pack::data::input::EntryDataMode::Ignore,
        gix_hash::Kind::Sha1,
    )
    .expect("a pack header")
    .map(|e| e.expect("a valid pack entry"))
    .filter_map(|e| match e.header {
        gix_pack::data::entry::Header::RefDelta { base_id } => Some(base_id.to_string()),
        _ => None,
    })
    .collect()
}

/// The metrics, parsed as Prometheus parses them.
pub fn scrape(addr: std::net::SocketAddr) -> prometheus_parse::Scrape {
    let response = http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(response.status, 200);
    let text = response.text();
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("the exposition parses")
}

/// The sum of a metric's samples whose labels include every pair of `labels`.
pub fn metric(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{metric} is not a number"),
        })
        .sum()
}
