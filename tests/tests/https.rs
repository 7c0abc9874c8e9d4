//! HTTPS: stock git over `https://` against a certificate of a CA made in the test (trusted by git
//! through `GIT_SSL_CAINFO`, `http.sslCAInfo`'s variable), HTTP/1.1 and HTTP/2, protocol v0 and v2 — clone, shallow and partial
//! clones, push, fetch — recorded as `https` in the access log; and what a hostile client does to
//! the TLS listener (garbage, half and silent handshakes, HTTP/2 stream floods and resets,
//! oversized header lists) ends its own connection only.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, serve_with};
use gixd_tests::tls::TestCa;
use gixd_tests::{commit_files, git, git_out};

struct Fixture {
    tmp: tempfile::TempDir,
    server: gixd::server::Running,
    ca: TestCa,
    log: PathBuf,
    secret: String,
}

impl Fixture {
    fn new(adjust: impl FnOnce(&mut gixd::config::Config)) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        let origin = corpus::ensure("merges", Hash::Sha1);
        git(&base, &["clone", "-q", "--bare", origin.to_str().unwrap(), "repo.git"]);
        git(&base.join("repo.git"), &["config", "uploadpack.allowFilter", "true"]);
        let ca = TestCa::new(tmp.path(), "gixd-test");
        let files = ca.server(tmp.path(), "server");
        let token_file = tmp.path().join("tokens.toml");
        let mut store = gixd::auth::TokenStore::load(&token_file).unwrap();
        let (_, secret) = store.add("alice", "*", true).unwrap();
        store.save().unwrap();
        let log = tmp.path().join("access.log");
        let server = serve_with(&base, |c| {
            c.https_listen = Some("127.0.0.1:0".parse().unwrap());
            (c.tls_cert, c.tls_key) = (Some(files.cert), Some(files.key));
            c.token_file = Some(token_file);
            c.services.receive_pack = true;
            c.access_log = Some(log.clone());
            adjust(c);
        });
        Fixture { tmp, server, ca, log, secret }
    }

    /// Requests the access log recorded as served `ok`, so far.
    fn server_requests_served_ok(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["status"] == "ok")
            .count()
    }

    fn url(&self) -> String {
        format!("https://alice:{}@{}/repo.git", self.secret, self.server.https_addr.unwrap())
    }

    /// Stock git trusting the test CA (only it), with `http.version` and `protocol.version` set; its
    /// libcurl trace kept, so the HTTP version spoken can be read back.
    fn git(&self, dir: &Path, http: &str, version: u8, args: &[&str]) -> std::process::Output {
        let (http, version) = (format!("http.version={http}"), format!("protocol.version={version}"));
        let mut all = vec!["-c", &http, "-c", &version];
        all.extend_from_slice(args);
        gixd_tests::git_command(dir)
            .env("GIT_TERMINAL_PROMPT", "0")
            // git 2.47 over GnuTLS ignores `-c http.sslCAInfo` (seen: it verifies against the
            // system's CAs); the variable that stands for it is honoured.
            .env("GIT_SSL_CAINFO", &self.ca.ca_pem)
            .env("GIT_TRACE_CURL", "1")
            .env("GIT_TRACE_CURL_NO_DATA", "1")
            .args(&all)
            .output()
            .expect("git runs")
    }

    fn git_ok(&self, dir: &Path, http: &str, version: u8, args: &[&str]) -> String {
        let out = self.git(dir, http, version, args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "git {args:?} over {http} v{version} failed:\n{stderr}");
        stderr
    }
}

/// Every operation git has, over `https://` with HTTP/1.1 and with HTTP/2, v0 and v2: a clone
/// has every object, a `--depth 1` clone one commit, a `blob:none` clone no blob, a push lands and
/// a fetch brings it. libcurl's trace shows the HTTP version each arm spoke; the access log
/// records every request as `https`. Red before HTTPS: nothing listens.
#[test]
fn stock_git_clones_shallow_partial_pushes_and_fetches_over_https_with_http1_and_http2() {
    let f = Fixture::new(|_| {});
    let repo = f.tmp.path().join("base/repo.git");
    let url = f.url();
    for (http, spoken) in [("HTTP/1.1", "HTTP/1.1 200"), ("HTTP/2", "HTTP/2 200")] {
        for version in [0u8, 2] {
            let arm = f.tmp.path().join(format!("{}-v{version}", http.replace('/', "")));
            std::fs::create_dir_all(&arm).unwrap();
            let trace = f.git_ok(&arm, http, version, &["clone", "-q", "--bare", &url, "full.git"]);
            assert!(trace.contains(spoken), "{http} v{version}: libcurl did not speak {spoken}");
            assert_eq!(all_objects(&arm.join("full.git")), all_objects(&repo), "{http} v{version}: a whole clone");

            f.git_ok(&arm, http, version, &["clone", "-q", "--bare", "--depth", "1", &url, "shallow.git"]);
            let commits = git_out(&arm.join("shallow.git"), &["rev-list", "--count", "HEAD"]);
            assert_eq!(commits, "1", "{http} v{version}: --depth 1");

            f.git_ok(&arm, http, version, &["clone", "-q", "--bare", "--filter=blob:none", &url, "partial.git"]);
            let blobs =
                git_out(&arm.join("partial.git"), &["cat-file", "--batch-all-objects", "--batch-check=%(objecttype)"]);
            assert!(!blobs.lines().any(|t| t == "blob"), "{http} v{version}: blob:none sent a blob");

            // A push over this arm, then a fetch of it into the whole clone.
            let work = arm.join("work");
            f.git_ok(&arm, http, version, &["clone", "-q", &url, "work"]);
            let tip = commit_files(&work, &[(&format!("{http}-{version}.txt"), b"over TLS\n")], "pushed over https");
            f.git_ok(&work, http, version, &["push", "-q", "origin", "HEAD"]);
            assert_eq!(git_out(&repo, &["rev-parse", "HEAD"]), tip, "{http} v{version}: the push landed");
            f.git_ok(&arm.join("full.git"), http, version, &["fetch", "-q", &url, "+refs/heads/*:refs/heads/*"]);
            assert_eq!(git_out(&arm.join("full.git"), &["rev-parse", "HEAD"]), tip, "{http} v{version}: fetched");
        }
    }
    let log = std::fs::read_to_string(&f.log).unwrap();
    let records: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.len() >= 4 * 6, "{} records", records.len());
    for record in &records {
        assert_eq!(record["transport"], "https", "{record}");
    }
    assert!(records.iter().any(|r| r["service"] == "git-receive-pack" && r["status"] == "ok"));
}

/// Waits until the server closes `stream` (a read of 0 or an error); how long that took.
fn closed_within(stream: &mut std::net::TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// Garbage where a ClientHello belongs is dropped at once; a handshake that stops halfway and a
/// connection that sends nothing are dropped once the init timeout passed — while all three are
/// open, a clone over HTTPS is served.
#[test]
fn garbage_half_and_silent_tls_handshakes_are_dropped_and_a_clone_beside_them_is_served() {
    let f = Fixture::new(|c| c.init_timeout = Duration::from_secs(2));
    let addr = f.server.https_addr.unwrap();
    let mut garbage = std::net::TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0x47u8; 2048]).unwrap();
    // The first bytes of a TLS 1.2/1.3 ClientHello record header and handshake header, then nothing.
    let mut half = std::net::TcpStream::connect(addr).unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]).unwrap();
    let mut silent = std::net::TcpStream::connect(addr).unwrap();

    let dest = f.tmp.path().join("beside");
    std::fs::create_dir_all(&dest).unwrap();
    f.git_ok(&dest, "HTTP/2", 2, &["clone", "-q", "--bare", &f.url(), "c.git"]);

    assert!(closed_within(&mut garbage, Duration::from_secs(2)).is_some(), "garbage is dropped at once");
    for (name, stream) in [("half", &mut half), ("silent", &mut silent)] {
        let took = closed_within(stream, Duration::from_secs(10));
        assert!(took.is_some(), "a {name} handshake is dropped after the init timeout");
    }
    // And the server goes on.
    f.git_ok(&dest, "HTTP/1.1", 0, &["ls-remote", &f.url()]);
}

/// A TLS client that trusts only the test CA and asks for `h2` by ALPN.
fn h2_client_config(f: &Fixture) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(&f.ca.ca_pem).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(gixd::transport::tls::provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

/// An HTTP/2 client over TLS with the test CA trusted and `h2` by ALPN.
async fn h2_connect(
    f: &Fixture,
) -> (h2::client::SendRequest<bytes::Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
    let config = h2_client_config(f);
    let tcp = tokio::net::TcpStream::connect(f.server.https_addr.unwrap()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap();
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    (send, tokio::spawn(conn))
}

/// An HTTP/2 connection over TLS whose frames are written by hand, as an abuser writes them.
struct RawH2 {
    tls: rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
}

impl RawH2 {
    fn connect(f: &Fixture) -> RawH2 {
        let config = h2_client_config(f);
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
        let tcp = std::net::TcpStream::connect(f.server.https_addr.unwrap()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let mut raw = RawH2 { tls: rustls::StreamOwned::new(conn, tcp) };
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend(frame(0x4, 0, 0, &[]));
        raw.tls.write_all(&hello).unwrap();
        assert_eq!(raw.tls.conn.alpn_protocol(), Some(&b"h2"[..]), "h2 by ALPN");
        raw
    }

    /// The frames the server sends (type, flags, stream) until it closes the connection or
    /// `limit` passes; and whether it closed.
    fn frames(&mut self, limit: Duration) -> (Vec<(u8, u8, u32)>, bool) {
        let (start, mut got, mut frames) = (Instant::now(), Vec::new(), Vec::new());
        let mut buf = [0u8; 16384];
        let closed = loop {
            if start.elapsed() > limit {
                break false;
            }
            match self.tls.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break true,
            }
            while got.len() >= 9 {
                let len = u32::from_be_bytes([0, got[0], got[1], got[2]]) as usize;
                if got.len() < 9 + len {
                    break;
                }
                let stream = u32::from_be_bytes([got[5], got[6], got[7], got[8]]) & 0x7fff_ffff;
                frames.push((got[3], got[4], stream));
                got.drain(..9 + len);
            }
        };
        (frames, closed)
    }
}

/// One HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A GET of `/` as an HPACK block from the static table: `:method GET`, `:scheme https`, `:path /`.
const GET_ROOT: [u8; 3] = [0x82, 0x87, 0x84];
const GOAWAY: u8 = 0x7;
const RST_STREAM: u8 = 0x3;
const HEADERS: u8 = 0x1;

/// HTTP/2's abuses, each on a connection of its own and written frame by frame: streams opened
/// and reset in a loop (rapid reset) are cut off with a GOAWAY and the connection closed; the
/// server allows a few streams at once and says so; a header list past the limit is refused, not
/// served — and after each, a clone over HTTPS is served.
#[test]
fn http2_rapid_reset_stream_limits_and_oversized_headers_are_cut_off_and_others_are_served() {
    let f = Fixture::new(|_| {});
    let before = gixd_tests::peak_rss_kb();

    // Rapid reset: 2000 streams opened and reset at once.
    let mut raw = RawH2::connect(&f);
    let mut flood = Vec::new();
    for i in 0..2000u32 {
        let stream = 2 * i + 1;
        flood.extend(frame(HEADERS, 0x5, stream, &GET_ROOT));
        flood.extend(frame(RST_STREAM, 0, stream, &8u32.to_be_bytes()));
    }
    let _ = raw.tls.write_all(&flood);
    let (frames, closed) = raw.frames(Duration::from_secs(10));
    assert!(frames.iter().any(|(kind, _, _)| *kind == GOAWAY), "a GOAWAY ends the rapid reset");
    assert!(closed, "and the connection closes");

    // The stream limit, as the server's SETTINGS state it (read by a real client).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (send, conn) = h2_connect(&f).await;
        let mut send = send.ready().await.unwrap();
        // One request answered: the server's SETTINGS have arrived by then.
        let root = f.server.https_addr.unwrap();
        let (response, _) =
            send.send_request(http::Request::get(format!("https://{root}/")).body(()).unwrap(), true).unwrap();
        assert_eq!(response.await.unwrap().status(), 404);
        assert_eq!(send.current_max_send_streams(), gixd::transport::tls::H2_MAX_STREAMS as usize);
        drop(send);
        conn.abort();
    });

    // A header list of 64 KiB (a HEADERS frame and CONTINUATIONs): refused, never answered 200.
    let mut raw = RawH2::connect(&f);
    let mut block = GET_ROOT.to_vec();
    for i in 0..64 {
        let name = format!("x-padding-{i:02}");
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend(name.as_bytes());
        // 1024 as an HPACK integer with a 7-bit prefix: 127, then 1024 - 127 = 897 in 7-bit groups.
        block.extend([0x7f, (897 % 128) as u8 | 0x80, (897 / 128) as u8]);
        block.extend([b'a'; 1024]);
    }
    let chunks: Vec<&[u8]> = block.chunks(16000).collect();
    let mut frames_out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = if i + 1 == chunks.len() { 0x4 } else { 0 };
        match i {
            0 => frames_out.extend(frame(HEADERS, 0x1 | last, 1, chunk)),
            _ => frames_out.extend(frame(0x9, last, 1, chunk)),
        }
    }
    let _ = raw.tls.write_all(&frames_out);
    let (frames, closed) = raw.frames(Duration::from_secs(5));
    let refused =
        closed || frames.iter().any(|(kind, _, stream)| (*kind == RST_STREAM && *stream == 1) || *kind == GOAWAY);
    let answered = frames.iter().any(|(kind, _, stream)| *kind == HEADERS && *stream == 1);
    assert!(refused || answered, "the oversized header list is ended: {frames:?}");
    assert_eq!(f.server_requests_served_ok(), 0, "nothing with an oversized header list was served");

    // The floods cost the server bounded memory (its peak, in this process, grows < 64 MiB).
    let grown = gixd_tests::peak_rss_kb().saturating_sub(before);
    assert!(grown < 64 << 10, "the floods grew the peak memory by {grown} KiB");

    let dest = f.tmp.path().join("after");
    std::fs::create_dir_all(&dest).unwrap();
    f.git_ok(&dest, "HTTP/2", 2, &["clone", "-q", "--bare", &f.url(), "c.git"]);
    assert_eq!(all_objects(&dest.join("c.git")), all_objects(&f.tmp.path().join("base/repo.git")));
}

/// An HTTP/2 connection that starts no request for the I/O timeout is closed by the server (a
/// GOAWAY, then the end of the connection): idle connections do not pile up.
#[test]
fn an_idle_http2_connection_is_closed_after_the_io_timeout() {
    let f = Fixture::new(|c| c.io_timeout = Duration::from_secs(2));
    let mut raw = RawH2::connect(&f);
    let started = Instant::now();
    let (frames, closed) = raw.frames(Duration::from_secs(10));
    assert!(closed, "the idle connection was closed");
    assert!(frames.iter().any(|(kind, _, _)| *kind == GOAWAY), "with a GOAWAY: {frames:?}");
    assert!(started.elapsed() >= Duration::from_secs(1), "not before the timeout: {:?}", started.elapsed());
}

/// The idle close counts a response still being sent as activity: an HTTP/2 clone read for three
/// I/O timeouts (12 MiB at 1 MiB/s, a 4 s timeout) completes. Were the response not counted, the
/// connection would be told to close (GOAWAY) after one timeout and dropped after the next, at
/// 8 s, mid-pack: seen so with the in-flight count ignored. (A 2 s timeout was once too tight for
/// the fresh-clone CI's load.)
#[test]
fn an_http2_response_longer_than_the_io_timeout_is_not_taken_for_idleness() {
    let f = Fixture::new(|c| c.io_timeout = Duration::from_secs(4));
    let work = f.tmp.path().join("big-work");
    f.git_ok(f.tmp.path(), "HTTP/2", 2, &["clone", "-q", &f.url(), "big-work"]);
    commit_files(&work, &[("big.bin", &gixd_tests::noise(7, 12 << 20))], "big");
    // Into the served directory by stock git, not through the server: the slow clone is what is
    // tested, and a 12 MiB push over HTTP/2 with this short timeout once hung git's client on a
    // loaded machine (its remote helper and send-pack each waiting for the other once the
    // connection had gone).
    let served = f.tmp.path().join("base/repo.git");
    git(&work, &["push", "-q", served.to_str().unwrap(), "HEAD"]);
    let slow = bench_support::relay::slow_link(f.server.https_addr.unwrap(), 1 << 20);
    let url = format!("https://alice:{}@127.0.0.1:{}/repo.git", f.secret, slow.port());
    let started = Instant::now();
    let dest = f.tmp.path().join("slow");
    std::fs::create_dir_all(&dest).unwrap();
    // A transfer that stalls fails within a minute rather than waiting for ever (the clone hung
    // once, with two whole test suites running at once on the machine).
    let stall = ["-c", "http.lowSpeedLimit=1024", "-c", "http.lowSpeedTime=60"];
    f.git_ok(&dest, "HTTP/2", 2, &[&stall[..], &["clone", "-q", "--bare", &url, "c.git"]].concat());
    assert!(started.elapsed() > Duration::from_secs(6), "the clone outlasted the I/O timeout: {:?}", started.elapsed());
    assert_eq!(all_objects(&dest.join("c.git")), all_objects(&f.tmp.path().join("base/repo.git")));
}
