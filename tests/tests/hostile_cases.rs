//! The hostile-request table: a curated list of malformed and malicious requests over smart
//! HTTP, git:// and push — framing, lengths, encodings, path tricks, bad ids and ref names,
//! corrupt packs — each with its exact answer (status and the first line a client is shown),
//! kept as one snapshot (`snapshots/hostile_cases__answers.snap`): a changed answer is a
//! reviewed change. Every case must be refused (an HTTP error status, an `ERR`, an `ng` or an
//! `unpack` failure), none may carry pack data, the server must still serve a normal clone after
//! all of them, and its memory must stay bounded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use gixd::config::Exports;
use gixd_tests::server::{clone, parse_response, pkt, serve_with, v2_request as v2};
use gixd_tests::{commit_files, git};

const ZERO: &str = "0000000000000000000000000000000000000000";
const UNKNOWN: &str = "1111111111111111111111111111111111111111";

/// Payloads of the pkt-lines in `body` as far as they parse (`None` for flush, delim, end).
fn lines_of(mut body: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    while body.len() >= 4 {
        let Some(len) = std::str::from_utf8(&body[..4]).ok().and_then(|h| usize::from_str_radix(h, 16).ok()) else {
            break;
        };
        if len < 4 {
            out.push(None);
            body = &body[4..];
        } else if len <= body.len() {
            out.push(Some(body[4..len].to_vec()));
            body = &body[len..];
        } else {
            break;
        }
    }
    out
}

/// One line of an answer, printable and clipped, so the table stays readable.
fn clip(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let text: String = text.trim_end().chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    if text.chars().count() > 140 { format!("{}…", text.chars().take(140).collect::<String>()) } else { text }
}

/// What a client is shown of a pkt-line answer: its `ERR` line, else its first line; whether
/// pack data came with it.
fn pkt_answer(body: &[u8]) -> (String, bool) {
    let lines: Vec<Vec<u8>> = lines_of(body).into_iter().flatten().collect();
    let pack = lines.iter().any(|l| l.windows(4).any(|w| w == b"PACK"));
    let shown = lines.iter().find(|l| l.starts_with(b"ERR ")).or_else(|| lines.first());
    (shown.map_or_else(|| "(no pkt-line)".to_owned(), |l| clip(l)), pack)
}

/// Send raw HTTP, read until the server closes; "status: shown line".
fn http_raw(addr: SocketAddr, request: &[u8]) -> (String, bool) {
    http_send(addr, request, false)
}

/// As [`http_raw`]; `hang_up`: half-close after the request (one the server would otherwise
/// wait on to its timeout). A complete request is not half-closed: hyper may drop the answer
/// to a client that has hung up.
fn http_send(addr: SocketAddr, request: &[u8], hang_up: bool) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = stream.write_all(request);
    if hang_up {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    if !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        return (
            if raw.is_empty() { "closed without an answer".to_owned() } else { format!("not HTTP: {}", clip(&raw)) },
            false,
        );
    }
    let response = parse_response(&raw);
    let (shown, pack) = match response.header("content-type") {
        Some(t) if t.starts_with("application/x-git-") => pkt_answer(&response.body),
        _ => (clip(response.body.split(|b| *b == b'\n').next().unwrap_or(b"")), false),
    };
    let status = response.status;
    (format!("{status}: {shown}"), pack)
}

fn http_request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

const V2: (&str, &str) = ("Git-Protocol", "version=2");
const UPLOAD: (&str, &str) = ("Content-Type", "application/x-git-upload-pack-request");

fn v2_post(addr: SocketAddr, body: &[u8]) -> (String, bool) {
    http_raw(addr, &http_request("POST", "/repo/git-upload-pack", &[UPLOAD, V2], body))
}

fn v0_post(addr: SocketAddr, body: &[u8]) -> (String, bool) {
    http_raw(addr, &http_request("POST", "/repo/git-upload-pack", &[UPLOAD], body))
}

/// A git:// exchange: `bytes` sent, then what the server says until it closes.
fn git_raw(addr: SocketAddr, bytes: &[u8], then: &[u8]) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = stream.write_all(bytes);
    if !then.is_empty() {
        // After the advertisement (or the refusal in its place).
        std::thread::sleep(Duration::from_millis(20));
        let _ = stream.write_all(then);
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    if raw.is_empty() {
        return ("closed without an answer".to_owned(), false);
    }
    pkt_answer(&raw)
}

/// A push over git:// (receive-pack, anonymous as git daemon's): the commands and pack after
/// the advertisement; the report's lines after `unpack ok`, or the refusal.
fn push_raw(addr: SocketAddr, request: &[u8]) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stream.write_all(&pkt("git-receive-pack /repo\0host=x\0")).unwrap();
    // The advertisement, to its flush.
    let mut adv = Vec::new();
    let mut byte = [0u8; 4096];
    while !lines_of(&adv).contains(&None) {
        match stream.read(&mut byte) {
            Ok(0) | Err(_) => break,
            Ok(n) => adv.extend_from_slice(&byte[..n]),
        }
    }
    let _ = stream.write_all(request);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let lines: Vec<String> = lines_of(&raw).into_iter().flatten().map(|l| clip(&l)).collect();
    if lines.is_empty() {
        return ("closed without a report".to_owned(), false);
    }
    (lines.join(" | "), false)
}

/// Commands (capabilities on the first), a flush, then `pack`.
fn push_request(commands: &[String], pack: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        body.extend(pkt(&if i == 0 { format!("{c}\0report-status\n") } else { format!("{c}\n") }));
    }
    body.extend(b"0000");
    body.extend_from_slice(pack);
    body
}

/// Odd requests that git answers without an error, and so does gixd (their answers are in the
/// table all the same): a body with no command or no want is a client hanging up; a prefix no
/// ref has lists nothing; a tree reachable from a ref may be wanted by id (v2, and
/// `uploadpack.allowReachableSHA1InWant` semantics); a repeated query parameter takes the first.
const SERVED: &[&str] = &[
    "http v2 framing: only a flush",
    "http v2 framing: empty body",
    "http v2: ls-refs argument with a NUL",
    "http v2: fetch with no want",
    "http v2: want of a tree (not advertised)",
    "http v0: no want",
    "http v0: want of a tree",
    "http GET: two services",
];

/// A refusal, as the answer shows it.
fn refused(answer: &str) -> bool {
    let status_refusal = answer.split(':').next().and_then(|s| s.parse::<u16>().ok()).is_some_and(|s| s >= 400);
    status_refusal
        || answer.contains("ERR ")
        || answer.contains("ng ")
        || (answer.contains("unpack ") && !answer.contains("unpack ok"))
        || answer.starts_with("closed")
}

#[test]
fn every_hostile_request_gets_its_exact_refusal_and_the_server_serves_on() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for n in 0..3 {
        commit_files(&repo, &[("f.txt", format!("v{n}\n").as_bytes()), ("d/g.txt", b"g\n")], &format!("c{n}"));
    }
    std::fs::write(repo.join(".git/git-daemon-export-ok"), "").unwrap();
    // Filter specs are parsed only where filters are allowed; `side` is a branch that is not
    // checked out (main is: pushes to it meet receive.denyCurrentBranch first).
    git(&repo, &["config", "uploadpack.allowFilter", "true"]);
    git(&repo, &["branch", "side", "HEAD~1"]);
    let private = tmp.path().join("private");
    std::fs::create_dir_all(&private).unwrap();
    git(&private, &["init", "-q", "-b", "main"]);
    commit_files(&private, &[("s.txt", b"secret\n")], "secret");
    let head = gixd_tests::git_out(&repo, &["rev-parse", "HEAD"]);
    let tree = gixd_tests::git_out(&repo, &["rev-parse", "HEAD^{tree}"]);
    let secret = gixd_tests::git_out(&private, &["rev-parse", "HEAD"]);
    let server = serve_with(tmp.path(), |c| {
        c.exports = Exports::DaemonExportOk;
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
        c.services.upload_archive = true;
        // Below the gzip case's 24 MiB (the default is 64 MiB).
        c.max_inflated_body = 16 << 20;
    });
    let (addr, git_addr) = (server.addr, server.git_addr.unwrap());
    let hwm = || -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .unwrap()
            .trim()
            .trim_end_matches(" kB")
            .parse()
            .unwrap()
    };
    let start_hwm = hwm();

    /// A case: what the client saw, and whether the server behaved.
    type Case = Box<dyn Fn() -> (String, bool)>;
    let mut cases: Vec<(String, Case)> = Vec::new();
    let mut case = |name: String, f: Case| cases.push((name, f));

    // pkt-line framing over HTTP, v2.
    for (name, bytes) in [
        ("not hex", b"zzzzcommand=fetch\n0000".to_vec()),
        ("length 1", b"0001".to_vec()),
        ("length 3", b"0003".to_vec()),
        ("length past the body", b"00ffcommand=fetch\n".to_vec()),
        ("cut inside the length", b"00".to_vec()),
        ("only a flush", b"0000".to_vec()),
        ("only a delimiter", b"0001".to_vec()),
        ("response-end first", b"0002".to_vec()),
        ("empty body", Vec::new()),
        ("NUL in the command", pkt("command=fe\0tch\n").into_iter().chain(*b"0000").collect()),
        ("uppercase hex length", b"000Acommand".to_vec()),
        ("length with a sign", b"+00acommand=\n".to_vec()),
        ("65520-byte line", {
            let mut b = format!("{:04x}", 65520).into_bytes();
            b.extend(vec![b'a'; 65516]);
            b
        }),
        ("no command", [pkt("agent=x\n"), b"0000".to_vec()].concat()),
        ("two commands", [pkt("command=fetch\n"), pkt("command=ls-refs\n"), b"0000".to_vec()].concat()),
    ] {
        case(format!("http v2 framing: {name}"), Box::new(move || v2_post(addr, &bytes)));
    }
    // v2 commands and capabilities.
    for (name, body) in [
        ("unknown command", v2("frobnicate", &[], &[])),
        ("empty command", v2("", &[], &[])),
        ("command with a space", v2("fetch now", &[], &[])),
        ("object-format sha256 on a sha1 repository", v2("ls-refs", &["object-format=sha256"], &[])),
        ("unknown object-format", v2("fetch", &["object-format=md5"], &["done"])),
        ("unknown ls-refs argument", v2("ls-refs", &[], &["frob"])),
        ("ls-refs argument with a NUL", v2("ls-refs", &[], &["ref-prefix refs/\0x"])),
        ("unknown fetch argument", v2("fetch", &[], &["frob", "done"])),
        ("fetch with no want", v2("fetch", &[], &["done"])),
        ("want without an id", v2("fetch", &[], &["want", "done"])),
        ("want of short hex", v2("fetch", &[], &["want 1234", "done"])),
        ("want of non-hex", v2("fetch", &[], &[&format!("want {}", "g".repeat(40)), "done"])),
        ("want of 41 hex", v2("fetch", &[], &[&format!("want {UNKNOWN}1"), "done"])),
        ("want of an unknown id", v2("fetch", &[], &[&format!("want {UNKNOWN}"), "done"])),
        ("want of the zero id", v2("fetch", &[], &[&format!("want {ZERO}"), "done"])),
        ("want of another repository's commit", v2("fetch", &[], &[&format!("want {secret}"), "done"])),
        ("want of a tree (not advertised)", v2("fetch", &[], &[&format!("want {tree}"), "done"])),
        ("want with trailing junk", v2("fetch", &[], &[&format!("want {head} extra"), "done"])),
        ("have of non-hex", v2("fetch", &[], &[&format!("want {head}"), "have xyz", "done"])),
        ("shallow of non-hex", v2("fetch", &[], &[&format!("want {head}"), "shallow nothex", "done"])),
        ("deepen 0", v2("fetch", &[], &[&format!("want {head}"), "deepen 0", "done"])),
        ("deepen negative", v2("fetch", &[], &[&format!("want {head}"), "deepen -1", "done"])),
        ("deepen not a number", v2("fetch", &[], &[&format!("want {head}"), "deepen many", "done"])),
        ("deepen past u64", v2("fetch", &[], &[&format!("want {head}"), "deepen 99999999999999999999999", "done"])),
        (
            "deepen and deepen-since",
            v2("fetch", &[], &[&format!("want {head}"), "deepen 1", "deepen-since 10", "done"]),
        ),
        ("deepen-since not a time", v2("fetch", &[], &[&format!("want {head}"), "deepen-since yesterday", "done"])),
        (
            "deepen-not of a missing ref",
            v2("fetch", &[], &[&format!("want {head}"), "deepen-not refs/heads/nothing", "done"]),
        ),
        ("want-ref of a missing ref", v2("fetch", &[], &["want-ref refs/heads/nothing", "done"])),
        ("want-ref with dot-dot", v2("fetch", &[], &["want-ref refs/heads/../../config", "done"])),
        ("packfile-uris asked", v2("fetch", &[], &[&format!("want {head}"), "packfile-uris https", "done"])),
        ("done twice then more", v2("fetch", &[], &[&format!("want {head}"), "done", "done", "want x"])),
        ("object-info of non-hex", v2("object-info", &[], &["size", "oid xyz"])),
        ("object-info of the secret", v2("object-info", &[], &["size", &format!("oid {secret}")])),
        ("bundle-uri asked", v2("bundle-uri", &[], &[])),
    ] {
        case(format!("http v2: {name}"), Box::new(move || v2_post(addr, &body)));
    }
    // Filter specs (partial clone on: allowed by the default uploadpack.allowFilter).
    for filter in [
        "",
        "blob:",
        "blob:limit=",
        "blob:limit=-1",
        "blob:limit=1x",
        "blob:limit=99999999999999999999g",
        "tree:",
        "tree:-1",
        "tree:x",
        "sparse:oid=",
        "sparse:path=/etc/passwd",
        "combine:",
        "combine:blob:none+",
        "combine:blob%zz",
        "object:type=",
        "object:type=dog",
        "frob",
        "blob:none\0",
        "combine:tree:0+blob:nonex",
    ] {
        let body = v2("fetch", &[], &[&format!("want {head}"), &format!("filter {filter}"), "done"]);
        case(format!("http v2 filter {filter:?}"), Box::new(move || v2_post(addr, &body)));
    }
    // v0 over HTTP.
    for (name, body) in [
        ("no want", [b"0000".to_vec(), pkt("done\n")].concat()),
        ("want of non-hex", [pkt("want zzzz\n"), b"0000".to_vec(), pkt("done\n")].concat()),
        (
            "want of an unknown id",
            [pkt(&format!("want {UNKNOWN} multi_ack\n")), b"0000".to_vec(), pkt("done\n")].concat(),
        ),
        (
            "want of another repository's commit",
            [pkt(&format!("want {secret}\n")), b"0000".to_vec(), pkt("done\n")].concat(),
        ),
        ("want of a tree", [pkt(&format!("want {tree}\n")), b"0000".to_vec(), pkt("done\n")].concat()),
        ("a have before any want", [pkt(&format!("have {head}\n")), b"0000".to_vec(), pkt("done\n")].concat()),
        (
            "deepen of non-number",
            [pkt(&format!("want {head}\n")), pkt("deepen x\n"), b"0000".to_vec(), pkt("done\n")].concat(),
        ),
        (
            "shallow of non-hex",
            [pkt(&format!("want {head}\n")), pkt("shallow nothex\n"), b"0000".to_vec(), pkt("done\n")].concat(),
        ),
        ("unknown line", [pkt(&format!("want {head}\n")), pkt("frob\n"), b"0000".to_vec(), pkt("done\n")].concat()),
        (
            "bad filter",
            [pkt(&format!("want {head} filter\n")), pkt("filter blob:limit=x\n"), b"0000".to_vec(), pkt("done\n")]
                .concat(),
        ),
        ("broken framing", b"00zzwant".to_vec()),
        ("cut in the first line", pkt(&format!("want {head}\n"))[..20].to_vec()),
    ] {
        case(format!("http v0: {name}"), Box::new(move || v0_post(addr, &body)));
    }
    // HTTP heads, paths, methods and bodies.
    for (name, path) in [
        ("dot-dot", "/../repo/info/refs?service=git-upload-pack"),
        ("encoded dot-dot", "/%2e%2e/repo/info/refs?service=git-upload-pack"),
        ("double-encoded dot-dot", "/%252e%252e/repo/info/refs?service=git-upload-pack"),
        ("dot-dot inside", "/repo/../private/info/refs?service=git-upload-pack"),
        ("encoded slash", "/repo%2f..%2fprivate/info/refs?service=git-upload-pack"),
        ("a NUL", "/repo%00/info/refs?service=git-upload-pack"),
        ("backslashes", "/..\\private/info/refs?service=git-upload-pack"),
        ("absolute path", "//etc/info/refs?service=git-upload-pack"),
        ("private repository", "/private/info/refs?service=git-upload-pack"),
        ("missing repository", "/nothing/info/refs?service=git-upload-pack"),
        ("two services", "/repo/info/refs?service=git-upload-pack&service=git-receive-pack"),
        ("trailing dot-dot", "/repo/../info/refs?service=git-upload-pack"),
        ("encoded NUL in the service", "/repo/info/refs?service=git-upload-pack%00"),
        ("tilde user", "/~root/info/refs?service=git-upload-pack"),
        ("the .git directory and dot-dot", "/repo/.git/../../private/info/refs?service=git-upload-pack"),
        ("a GET of a service", "/repo/git-upload-pack"),
        ("unknown service", "/repo/info/refs?service=git-frobnicate"),
        ("no service (dumb http)", "/repo/info/refs"),
        ("empty service", "/repo/info/refs?service="),
        ("receive-pack anonymously", "/repo/info/refs?service=git-receive-pack"),
        ("a loose object by path", "/repo/objects/info/packs"),
        ("HEAD file", "/repo/HEAD"),
        ("config file", "/repo/config"),
        ("overlong path", &format!("/{}/info/refs?service=git-upload-pack", "a".repeat(9000))),
        ("bad percent escape", "/re%zzpo/info/refs?service=git-upload-pack"),
    ] {
        let request = http_request("GET", path, &[], b"");
        case(format!("http GET: {name}"), Box::new(move || http_raw(addr, &request)));
    }
    let body = v2("ls-refs", &[], &[]);
    for (name, method, path, headers) in [
        ("PUT", "PUT", "/repo/git-upload-pack", vec![UPLOAD]),
        ("DELETE", "DELETE", "/repo/git-upload-pack", vec![UPLOAD]),
        ("GET of the service", "GET", "/repo/git-upload-pack", vec![UPLOAD]),
        ("no content type", "POST", "/repo/git-upload-pack", vec![]),
        ("wrong content type", "POST", "/repo/git-upload-pack", vec![("Content-Type", "text/plain")]),
        (
            "receive-pack content type to upload-pack",
            "POST",
            "/repo/git-upload-pack",
            vec![("Content-Type", "application/x-git-receive-pack-request")],
        ),
        ("gzip that is not gzip", "POST", "/repo/git-upload-pack", vec![UPLOAD, V2, ("Content-Encoding", "gzip")]),
        ("unknown content encoding", "POST", "/repo/git-upload-pack", vec![UPLOAD, V2, ("Content-Encoding", "br")]),
        ("upload-pack of a private repository", "POST", "/private/git-upload-pack", vec![UPLOAD, V2]),
        ("upload-pack of a missing repository", "POST", "/nothing/git-upload-pack", vec![UPLOAD, V2]),
        (
            "receive-pack without credentials",
            "POST",
            "/repo/git-receive-pack",
            vec![("Content-Type", "application/x-git-receive-pack-request")],
        ),
        (
            "bad basic credentials",
            "POST",
            "/repo/git-receive-pack",
            vec![("Content-Type", "application/x-git-receive-pack-request"), ("Authorization", "Basic !!!!")],
        ),
        (
            "unknown token",
            "POST",
            "/repo/git-receive-pack",
            vec![("Content-Type", "application/x-git-receive-pack-request"), ("Authorization", "Bearer nope")],
        ),
        ("unknown protocol version", "POST", "/repo/git-upload-pack", vec![UPLOAD, ("Git-Protocol", "version=9")]),
    ] {
        let request = http_request(method, path, &headers, &body);
        case(format!("http {name}"), Box::new(move || http_raw(addr, &request)));
    }
    for (name, request) in [
        ("not HTTP at all", b"hello\r\n\r\n".to_vec()),
        ("HTTP/0.9", b"GET /repo/info/refs\r\n\r\n".to_vec()),
        ("a header without a colon", b"GET /repo/info/refs?service=git-upload-pack HTTP/1.1\r\nHost x\r\n\r\n".to_vec()),
        ("huge content length", b"POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: 99999999999\r\n\r\n0000".to_vec()),
        ("two content lengths", b"POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: 4\r\nContent-Length: 8\r\n\r\n0000".to_vec()),
        ("bad chunk size", b"POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n0000\r\n0\r\n\r\n".to_vec()),
        ("a body over the limit", {
            let mut r = b"POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nContent-Length: 20000000\r\n\r\n".to_vec();
            r.extend(std::iter::repeat_n(b'0', 20_000_000));
            r
        }),
        ("a gzip bomb", {
            use flate2::write::GzEncoder;
            // 24 MiB of have lines in a small body: past the 16 MiB this server inflates a body to.
            let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let mut pkts = v2("fetch", &[], &[]);
            pkts.truncate(pkts.len() - 4);
            gz.write_all(&pkts).unwrap();
            for _ in 0..(24 << 20) / 65536 {
                gz.write_all(&pkt(&format!("have {}\n", "0".repeat(40))).repeat(65536 / 50)).unwrap();
            }
            let gz = gz.finish().unwrap();
            let mut r = format!("POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n", gz.len()).into_bytes();
            r.extend(gz);
            r
        }),
    ] {
        // A body shorter than its length is waited for: the client hangs up instead.
        let hang_up = name == "huge content length";
        case(format!("http raw: {name}"), Box::new(move || http_send(addr, &request, hang_up)));
    }
    // git:// request lines.
    for (name, line) in [
        ("unknown service", pkt("git-frobnicate /repo\0host=x\0")),
        ("no path", pkt("git-upload-pack\0host=x\0")),
        ("empty path", pkt("git-upload-pack \0host=x\0")),
        ("dot-dot", pkt("git-upload-pack /../repo\0host=x\0")),
        ("dot-dot inside", pkt("git-upload-pack /repo/../private\0host=x\0")),
        ("private repository", pkt("git-upload-pack /private\0host=x\0")),
        ("missing repository", pkt("git-upload-pack /nothing\0host=x\0")),
        ("private repository, archive", pkt("git-upload-archive /private\0host=x\0")),
        ("tilde user", pkt("git-upload-pack ~root/repo\0host=x\0")),
        ("a NUL inside the path", pkt("git-upload-pack /re\0po\0host=x\0")),
        ("no NUL and dot-dot", pkt("git-upload-pack /repo/..")),
        ("not a pkt-line", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        ("length 0004", b"0004".to_vec()),
        ("flush only", b"0000".to_vec()),
        ("overlong path", pkt(&format!("git-upload-pack /{}\0host=x\0", "a".repeat(60_000)))),
        ("missing repository, v2", pkt("git-upload-pack /nothing\0host=x\0\0version=2\0")),
        ("receive-pack of a private repository", pkt("git-receive-pack /private\0host=x\0")),
        ("the .git directory by name", pkt("git-upload-pack /repo/.git/..\0host=x\0")),
    ] {
        case(format!("git:// request: {name}"), Box::new(move || git_raw(git_addr, &line, b"")));
    }
    // git:// upload-pack requests after the advertisement (v0).
    let ask = pkt("git-upload-pack /repo\0host=x\0");
    for (name, then) in [
        ("want of an unknown id", [pkt(&format!("want {UNKNOWN}\n")), b"0000".to_vec(), pkt("done\n")].concat()),
        (
            "want of another repository's commit",
            [pkt(&format!("want {secret}\n")), b"0000".to_vec(), pkt("done\n")].concat(),
        ),
        ("want of non-hex", [pkt("want nothex\n"), b"0000".to_vec()].concat()),
        ("framing broken after the advertisement", b"zzzz".to_vec()),
        ("a have before any want", [pkt(&format!("have {head}\n")), b"0000".to_vec()].concat()),
    ] {
        let ask = ask.clone();
        case(format!("git:// v0: {name}"), Box::new(move || git_raw(git_addr, &ask, &then)));
    }
    // git:// v2 commands.
    let ask2 = pkt("git-upload-pack /repo\0host=x\0\0version=2\0");
    for (name, then) in [
        ("unknown command", v2("frobnicate", &[], &[])),
        ("want of an unknown id", v2("fetch", &[], &[&format!("want {UNKNOWN}"), "done"])),
        ("want of another repository's commit", v2("fetch", &[], &[&format!("want {secret}"), "done"])),
        ("bad filter", v2("fetch", &[], &[&format!("want {head}"), "filter blob:limit=x", "done"])),
    ] {
        let ask2 = ask2.clone();
        case(format!("git:// v2: {name}"), Box::new(move || git_raw(git_addr, &ask2, &then)));
    }
    // Pushes: ref names git refuses (check-ref-format), old ids that do not match, bad lines,
    // corrupt packs.
    let empty_pack =
        b"PACK\0\0\0\x02\0\0\0\0\x02\x9d\x08\x82\x3b\xd8\xa8\xea\xb5\x10\xad\x6a\xc7\x5c\x82\x3c\xfd\x3e\xd3\x1e"
            .to_vec();
    for bad in [
        "refs/heads/a..b",
        "refs/heads/a b",
        "refs/heads/a~b",
        "refs/heads/a^b",
        "refs/heads/a:b",
        "refs/heads/a?b",
        "refs/heads/a*b",
        "refs/heads/a[b",
        "refs/heads/a\\b",
        "refs/heads/.hidden",
        "refs/heads/a.lock",
        "refs/heads/a/",
        "refs/heads//a",
        "refs/heads/a@{b",
        "refs/heads/a.",
        "refs/heads/\x7f",
        "refs/heads/\x01",
        "HEAD",
        "main",
        "refs/../config",
        "/refs/heads/x",
        "refs/heads/x/.lock/y",
        "refs/heads/a/.b",
    ] {
        let request = push_request(&[format!("{ZERO} {head} {bad}")], &empty_pack);
        case(format!("push: ref name {bad:?}"), Box::new(move || push_raw(git_addr, &request)));
    }
    for (name, commands) in [
        ("update with a wrong old id", vec![format!("{UNKNOWN} {head} refs/heads/side")]),
        ("create an existing ref", vec![format!("{ZERO} {head} refs/heads/side")]),
        ("delete with a wrong old id", vec![format!("{UNKNOWN} {ZERO} refs/heads/side")]),
        ("update of the checked-out branch", vec![format!("{head} {tree} refs/heads/main")]),
        ("delete a missing ref", vec![format!("{UNKNOWN} {ZERO} refs/heads/nothing")]),
        ("new id missing from the pack", vec![format!("{ZERO} {UNKNOWN} refs/heads/new")]),
        ("the other repository's commit", vec![format!("{ZERO} {secret} refs/heads/stolen")]),
        ("a tree as a branch tip", vec![format!("{ZERO} {tree} refs/heads/treeish")]),
        ("directory/file conflict", vec![format!("{ZERO} {head} refs/heads/side/sub")]),
        (
            "the same ref twice",
            vec![format!("{ZERO} {head} refs/heads/twice"), format!("{ZERO} {head} refs/heads/twice")],
        ),
        ("short old id", vec![format!("1234 {head} refs/heads/x")]),
        ("non-hex new id", vec![format!("{ZERO} {} refs/heads/x", "z".repeat(40))]),
        ("no ref name", vec![format!("{ZERO} {head}")]),
        ("only one id", vec![format!("{head} refs/heads/x")]),
        ("a shallow line only", vec![format!("shallow {head}")]),
        ("a shallow line of non-hex", vec!["shallow nothex".to_owned(), format!("{ZERO} {head} refs/heads/x")]),
    ] {
        let request = push_request(&commands, &empty_pack);
        case(format!("push: {name}"), Box::new(move || push_raw(git_addr, &request)));
    }
    let create = format!("{ZERO} {UNKNOWN} refs/heads/from-pack");
    let mut bad_trailer = empty_pack.clone();
    *bad_trailer.last_mut().unwrap() ^= 1;
    for (name, pack) in [
        ("no pack at all", Vec::new()),
        ("not a pack", b"JUNKJUNKJUNKJUNK".to_vec()),
        ("pack version 9", b"PACK\0\0\0\x09\0\0\0\0".to_vec()),
        ("pack cut in its header", b"PACK\0\0".to_vec()),
        ("a pack that announces objects it lacks", b"PACK\0\0\0\x02\0\0\0\x05".to_vec()),
        ("an empty pack with a wrong trailer", bad_trailer),
        ("a one-object pack with a wrong trailer", {
            let blob = gixd_tests::git_out(&repo, &["rev-parse", "HEAD:f.txt"]);
            let out = std::process::Command::new("git")
                .current_dir(&repo)
                .args(["pack-objects", "-q", "--stdout"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            out.stdin.as_ref().unwrap().write_all(format!("{blob}\n").as_bytes()).unwrap();
            let mut pack = out.wait_with_output().unwrap().stdout;
            *pack.last_mut().unwrap() ^= 1;
            pack
        }),
        ("an entry of type 0", b"PACK\0\0\0\x02\0\0\0\x01\x00\x78\x9c\x03\0\0\0\0\x01".to_vec()),
        ("a blob whose zlib is garbage", b"PACK\0\0\0\x02\0\0\0\x01\x35garbagegarbage".to_vec()),
        ("a ref-delta against an unknown base", {
            let mut p = b"PACK\0\0\0\x02\0\0\0\x01\x75".to_vec();
            p.extend([0x11u8; 20]);
            p.extend(b"\x78\x9c\x63\x60\x60\0\0\0\x04\0\x01");
            p
        }),
        ("an object declared 4 GiB", b"PACK\0\0\0\x02\0\0\0\x01\xb0\xff\xff\xff\x7f\x78\x9c\x03\0\0\0\0\x01".to_vec()),
    ] {
        let request = push_request(std::slice::from_ref(&create), &pack);
        case(format!("push pack: {name}"), Box::new(move || push_raw(git_addr, &request)));
    }

    let mut table = String::new();
    let mut failures = Vec::new();
    for (name, run) in &cases {
        let started = std::time::Instant::now();
        let (answer, pack) = run();
        if started.elapsed() > Duration::from_secs(2) {
            println!("{name}: {:?}", started.elapsed());
        }
        table.push_str(&format!("{name} => {answer}\n"));
        if pack && !SERVED.contains(&name.as_str()) {
            failures.push(format!("{name}: pack data in the answer"));
        }
        if !SERVED.contains(&name.as_str()) && !refused(&answer) {
            failures.push(format!("{name}: not refused: {answer}"));
        }
    }
    let grown_mib = (hwm().saturating_sub(start_hwm)) / 1024;
    // After all of them: a normal clone.
    clone(&server.url("repo"), &tmp.path().join("after"), 2, &[]);
    assert!(cases.len() >= 200, "{} cases", cases.len());
    assert!(failures.is_empty(), "{} of {} cases:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert!(grown_mib < 128, "peak memory grew {grown_mib} MiB over the cases");
    let table = table.replace(&head, "<head>").replace(&tree, "<tree>").replace(&secret, "<secret>");
    insta::assert_snapshot!("answers", table);
    println!(
        "{} hostile cases: {} refused, {} answered as git answers them; peak memory grew {grown_mib} MiB; a clone works after them",
        cases.len(),
        cases.len() - SERVED.len(),
        SERVED.len()
    );
}
