//! Hostile and careless clients, as an attacker or a bad network makes them: every input a
//! client controls is bounded before it is held, idle and trickling connections hold no transfer
//! slot and are dropped within a window, a private repository is "not found" on every transport,
//! error texts are clipped and carry no raw control bytes — and the server goes on serving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gixd::config::{Config, Exports};
use gixd_tests::server::{clone, http, pkt, pkt_lines, serve_with};
use gixd_tests::{commit_files, git, git_out};

fn fixture(base: &Path) -> PathBuf {
    let repo = base.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    for n in 0..3 {
        commit_files(&repo, &[("f.txt", format!("v{n}\n").as_bytes())], &format!("c{n}"));
    }
    repo
}

fn serve(base: &Path, adjust: impl FnOnce(&mut Config)) -> gixd::server::Running {
    serve_with(base, |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        adjust(c);
    })
}

/// Open git:// and send the request line for `path` (v2 when `extra` says so).
fn git_connect(server: &gixd::server::Running, path: &str, extra: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.git_addr.unwrap()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let line = if extra.is_empty() {
        format!("git-upload-pack {path}\0host=localhost\0")
    } else {
        format!("git-upload-pack {path}\0host=localhost\0\0{extra}\0")
    };
    stream.write_all(&pkt(&line)).unwrap();
    stream
}

/// Read pkt-lines until a flush; their payloads.
fn read_until_flush(stream: &mut TcpStream) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).is_err() {
            return lines;
        }
        let len = usize::from_str_radix(std::str::from_utf8(&len).unwrap(), 16).unwrap();
        if len < 4 {
            return lines;
        }
        let mut data = vec![0u8; len - 4];
        stream.read_exact(&mut data).unwrap();
        lines.push(data);
    }
}

/// Everything the server sends until it closes (bounded by the read timeout).
fn read_rest(stream: &mut TcpStream) -> String {
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    String::from_utf8_lossy(&rest).into_owned()
}

/// Send `bytes` one at a time, `delay` apart, until the server answers or closes; how long that
/// took (`None`: it was still listening after `limit`).
fn trickle(stream: &mut TcpStream, bytes: &[u8], delay: Duration, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    stream.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    let mut buf = [0u8; 4096];
    for byte in bytes {
        if start.elapsed() > limit {
            return None;
        }
        if stream.write_all(&[*byte]).is_err() {
            return Some(start.elapsed());
        }
        std::thread::sleep(delay);
        match stream.read(&mut buf) {
            Ok(_) => return Some(start.elapsed()), // an answer (ERR) or the close
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

fn assert_clone_works(server: &gixd::server::Running, tmp: &Path, name: &str) {
    clone(&server.url("repo"), &tmp.join(name), 2, &[]);
}

#[test]
fn an_endless_section_over_git_protocol_is_refused_at_the_request_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path(), |c| c.max_request_body = 64 * 1024);
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    // v0: an endless want section, and an endless have round.
    for haves in [false, true] {
        let mut stream = git_connect(&server, "/repo", "");
        read_until_flush(&mut stream);
        let mut request = pkt(&format!("want {head} multi_ack_detailed side-band-64k\n"));
        if haves {
            request.extend(b"0000");
        }
        let line = if haves { format!("have {head}\n") } else { format!("want {head}\n") };
        for _ in 0..(80 * 1024 / line.len()) {
            request.extend(pkt(&line));
        }
        let _ = stream.write_all(&request);
        let rest = read_rest(&mut stream);
        assert!(
            rest.contains("ERR request section larger than 65536 bytes before its flush"),
            "haves {haves}: {rest:.200}"
        );
    }
    // v2: an endless command.
    let mut stream = git_connect(&server, "/repo", "version=2");
    read_until_flush(&mut stream);
    let mut request = pkt("command=ls-refs\n");
    request.extend(b"0001");
    for n in 0..4000 {
        request.extend(pkt(&format!("ref-prefix refs/heads/{n:030}\n")));
    }
    let _ = stream.write_all(&request);
    assert!(read_rest(&mut stream).contains("ERR request section larger than 65536 bytes"));
    assert_clone_works(&server, tmp.path(), "after");
}

#[test]
fn idle_and_trickling_clients_hold_no_transfer_slot() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path(), |c| {
        c.max_transfers = 2;
        c.transfer_queue_wait = Duration::from_secs(1);
    });
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    // Four git:// connections that send nothing, and two upload-pack POSTs whose body never
    // finishes: with a slot each, every clone below would be told "busy".
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(server.git_addr.unwrap()).unwrap()).collect();
    let trickling: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            let body = pkt(&format!("want {head}\n"));
            let head = format!(
                "POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: {}\r\n\r\n",
                body.len() + 100
            );
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(&body[..4]).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for n in 0..3 {
        assert_clone_works(&server, tmp.path(), &format!("clone{n}"));
    }
    drop((idle, trickling));
}

#[test]
fn trickling_senders_are_dropped_within_a_window() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path(), |c| {
        c.init_timeout = Duration::from_secs(2);
    });
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    // A request line at a byte every 500 ms: dropped at the init timeout (2 s).
    let mut stream = TcpStream::connect(server.git_addr.unwrap()).unwrap();
    let line = pkt("git-upload-pack /repo\0host=x\0");
    let dropped = trickle(&mut stream, &line, Duration::from_millis(500), Duration::from_secs(20));
    assert!(dropped.is_some_and(|t| t < Duration::from_secs(6)), "request line: dropped after {dropped:?}");

    // A want section at a byte every 200 ms after a good request line: dropped within about a
    // window (2 s of waiting, 1 KiB/s required).
    let mut stream = git_connect(&server, "/repo", "");
    read_until_flush(&mut stream);
    let want = pkt(&format!("want {head} side-band-64k\n")).repeat(10);
    let dropped = trickle(&mut stream, &want, Duration::from_millis(200), Duration::from_secs(30));
    assert!(dropped.is_some_and(|t| t < Duration::from_secs(8)), "want section: dropped after {dropped:?}");
    assert_clone_works(&server, tmp.path(), "after");
}

#[test]
fn a_private_repository_is_not_found_over_git_protocol_like_a_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path()); // no git-daemon-export-ok: private
    let server = serve(tmp.path(), |c| {
        c.exports = Exports::DaemonExportOk;
        c.informative_errors = true;
        c.services.upload_archive = true;
    });
    let message = |path: &str, service: &str| {
        let mut stream = TcpStream::connect(server.git_addr.unwrap()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        stream.write_all(&pkt(&format!("{service} {path}\0host=x\0"))).unwrap();
        // The text after the pkt-line length, the repository's name masked.
        read_rest(&mut stream)
            .get(4..)
            .unwrap_or("")
            .replace(&format!("'{}'", path.trim_start_matches('/')), "'<name>'")
    };
    for service in ["git-upload-pack", "git-upload-archive"] {
        let private = message("/repo", service);
        let missing = message("/nothing-here", service);
        assert!(private.contains("not found"), "{private}");
        assert_eq!(private, missing, "{service}: a private repository answers as a missing one");
    }
}

#[test]
fn error_texts_are_clipped_and_carry_no_raw_control_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let server = serve(tmp.path(), |_| {});
    let mut body = pkt("command=fetch\n");
    body.extend(b"0001");
    body.extend(pkt(&format!("frob\0nicate{}\n", "x".repeat(60_000))));
    body.extend(b"0000");
    let response = http(
        server.addr,
        "POST",
        "/repo/git-upload-pack",
        &[("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")],
        &body,
    );
    let err = pkt_lines(&response.body).into_iter().flatten().find(|l| l.starts_with(b"ERR ")).expect("an ERR line");
    assert!(err.len() <= 1100, "ERR of {} bytes", err.len());
    assert!(!err.contains(&0), "a raw NUL in the ERR line");
    assert!(String::from_utf8_lossy(&err).contains("frob\\x00nicate"), "{}", String::from_utf8_lossy(&err[..80]));
    // An HTTP refusal that quotes a header is clipped too.
    let long = "y".repeat(20_000);
    let response = http(server.addr, "POST", "/repo/git-upload-pack", &[("Content-Type", &long)], b"");
    assert_eq!(response.status, 415);
    assert!(response.body.len() < 4200, "{} bytes", response.body.len());
}

#[test]
fn an_archive_prefix_that_climbs_out_is_refused_before_the_archive_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path(), |c| c.services.upload_archive = true);
    let url = format!("git://{}/repo", server.git_addr.unwrap());
    for prefix in ["../../", "/abs/", "a/../../b/"] {
        let out = gixd_tests::git_command(&repo)
            .args(["archive", &format!("--remote={url}"), &format!("--prefix={prefix}"), "--format=tar", "HEAD"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("may not be absolute or contain '..'"), "{prefix}: {err}");
    }
    let out = gixd_tests::git_command(&repo)
        .args(["archive", &format!("--remote={url}"), "--prefix=ok/", "--format=tar", "HEAD"])
        .output()
        .unwrap();
    assert!(out.status.success() && !out.stdout.is_empty());
}

#[test]
fn a_push_refused_before_its_body_is_read_closes_the_connection() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let server = serve(tmp.path(), |_| {});
    // No credentials: 401 before the body is read. The connection must not be kept alive with
    // the unread body in it (the next request on it would wait for the I/O timeout).
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = vec![b'0'; 4096];
    let head = format!(
        "POST /repo/git-receive-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len() * 4
    );
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(&body);
    let start = Instant::now();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_lowercase();
    assert!(text.starts_with("http/1.1 401"), "{text:.200}");
    assert!(text.contains("connection: close"), "{text:.400}");
    assert!(start.elapsed() < Duration::from_secs(5), "the connection stayed open {:?}", start.elapsed());
}
