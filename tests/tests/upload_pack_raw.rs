//! gixd's upload-pack spoken to byte by byte: what stock git seldom or never sends (include-tag
//! for a tag it did not want, ofs-delta refused), and every kind of bad input — each gets a clear
//! error, and the server goes on serving.

use std::io::Write;
use std::path::{Path, PathBuf};

use gixd_tests::server::{
    HttpResponse, clone, http, objects_in_pack, pkt, pkt_lines, serve, serve_with, sideband_pack,
};
use gixd_tests::{commit_files, git, git_out};

const UPLOAD_REQUEST: (&str, &str) = ("Content-Type", "application/x-git-upload-pack-request");
const V2: (&str, &str) = ("Git-Protocol", "version=2");

fn fixture(base: &Path) -> PathBuf {
    let repo = base.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    let mut text: String = (0..200).map(|n| format!("shared line {n}\n")).collect();
    for n in 0..3 {
        text.push_str(&format!("change {n}\n"));
        commit_files(&repo, &[("file.txt", text.as_bytes())], &format!("c{n}"));
    }
    git(&repo, &["tag", "-a", "-m", "annotated", "v1", "HEAD~1"]);
    git(&repo, &["repack", "-adq"]);
    repo
}

fn post(addr: std::net::SocketAddr, body: &[u8], extra: &[(&str, &str)]) -> HttpResponse {
    post_to(addr, "repo", body, extra)
}

fn post_to(addr: std::net::SocketAddr, repo: &str, body: &[u8], extra: &[(&str, &str)]) -> HttpResponse {
    let mut headers = vec![UPLOAD_REQUEST];
    headers.extend_from_slice(extra);
    http(addr, "POST", &format!("/{repo}/git-upload-pack"), &headers, body)
}

fn v2_fetch(id_lines: &[String], args: &[&str]) -> Vec<u8> {
    let mut body = pkt("command=fetch\n");
    body.extend(pkt("object-format=sha1\n"));
    body.extend(b"0001");
    for l in id_lines {
        body.extend(pkt(l));
    }
    for a in args {
        body.extend(pkt(a));
    }
    body.extend(b"0000");
    body
}

/// The text of the first `ERR` line of a response, if any.
fn err_line(response: &HttpResponse) -> Option<String> {
    pkt_lines(&response.body)
        .into_iter()
        .flatten()
        .find(|l| l.starts_with(b"ERR "))
        .map(|l| String::from_utf8_lossy(&l[4..]).into_owned())
}

#[test]
fn include_tag_adds_the_annotated_tag_of_a_commit_being_sent_in_v2_and_v0() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path());
    let tagged = git_out(&repo, &["rev-parse", "HEAD~1"]);
    let tag = git_out(&repo, &["rev-parse", "v1"]);
    let head = git_out(&repo, &["rev-parse", "HEAD"]);

    for include_tag in [true, false] {
        let mut args = vec!["ofs-delta", "no-progress", "done"];
        if include_tag {
            args.push("include-tag");
        }
        let response = post(server.addr, &v2_fetch(&[format!("want {head}\n")], &args), &[V2]);
        assert_eq!(response.status, 200);
        let objects = objects_in_pack(&sideband_pack(&response.body), "sha1");
        assert!(objects.contains(&tagged));
        assert_eq!(objects.contains(&tag), include_tag, "v2, include-tag {include_tag}");

        let caps = if include_tag { " side-band-64k ofs-delta include-tag" } else { " side-band-64k ofs-delta" };
        let mut body = pkt(&format!("want {head}{caps}\n"));
        body.extend(b"0000");
        body.extend(pkt("done\n"));
        let response = post(server.addr, &body, &[]);
        let lines = pkt_lines(&response.body);
        assert_eq!(lines[0].as_deref(), Some(&b"NAK\n"[..]));
        let objects = objects_in_pack(&sideband_pack(&response.body), "sha1");
        assert_eq!(objects.contains(&tag), include_tag, "v0, include-tag {include_tag}");
    }
}

#[test]
fn without_ofs_delta_deltas_refer_to_their_base_by_id() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path());
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let mut body = pkt(&format!("want {head} side-band-64k\n"));
    body.extend(b"0000");
    body.extend(pkt("done\n"));
    let response = post(server.addr, &body, &[]);
    let pack = sideband_pack(&response.body);
    // git indexes it, its deltas are ref-deltas, and no entry is an ofs-delta.
    objects_in_pack(&pack, "sha1");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.pack"), &pack).unwrap();
    gixd_tests::git(dir.path(), &["index-pack", "p.pack"]);
    let verify = git_out(dir.path(), &["verify-pack", "-v", "p.idx"]);
    let deltas = verify.lines().filter(|l| l.split_whitespace().count() == 7).count();
    assert!(deltas > 0, "the fixture has deltas");
    assert_eq!(count_ofs_deltas(&pack), 0, "an ofs-delta was sent to a client that did not ask for ofs-delta");
}

/// Count the entries of a pack whose header is an ofs-delta, with gix-pack's pack reader.
fn count_ofs_deltas(pack: &[u8]) -> usize {
    let entries = gix_pack::data::input::BytesToEntriesIter::new_from_header(
        std::io::BufReader::new(pack),
        gix_pack::data::input::Mode::Verify,
        gix_pack::data::input::EntryDataMode::Ignore,
        gix_hash::Kind::Sha1,
    )
    .unwrap();
    entries.map(|e| e.unwrap()).filter(|e| matches!(e.header, gix_pack::data::entry::Header::OfsDelta { .. })).count()
}

#[test]
fn malformed_pkt_lines_get_an_err_line_naming_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let server = serve(tmp.path());
    for (body, expect) in [
        (b"00zzwant".to_vec(), "malformed pkt-line"),
        (b"fff1".to_vec(), "malformed pkt-line"),
        (b"0003".to_vec(), "malformed pkt-line"),
        (b"0032want 1234".to_vec(), "ended before"),
    ] {
        for extra in [&[][..], &[V2][..]] {
            let response = post(server.addr, &body, extra);
            assert_eq!(response.status, 200);
            let err = err_line(&response).unwrap_or_else(|| panic!("no ERR line for {body:?}: {}", response.text()));
            assert!(err.contains(expect), "{err}");
        }
    }
}

#[test]
fn unknown_commands_arguments_and_capabilities_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path());
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let mut body = pkt("command=frobnicate\n");
    body.extend(b"0000");
    assert!(err_line(&post(server.addr, &body, &[V2])).unwrap().contains("unknown command 'frobnicate'"));

    let response = post(server.addr, &v2_fetch(&[format!("want {head}\n")], &["frobnicate", "done"]), &[V2]);
    assert!(err_line(&response).unwrap().contains("unknown argument 'frobnicate'"));

    let mut body = pkt("command=ls-refs\n");
    body.extend(pkt("frobnicate=1\n"));
    body.extend(b"0000");
    assert!(err_line(&post(server.addr, &body, &[V2])).unwrap().contains("unsupported capability 'frobnicate'"));

    let mut body = pkt(&format!("want {head} side-band-64k frobnicate\n"));
    body.extend(b"0000");
    body.extend(pkt("done\n"));
    assert!(err_line(&post(server.addr, &body, &[])).unwrap().contains("unsupported capability 'frobnicate'"));
}

#[test]
fn a_want_that_is_not_an_object_id_is_refused() {
    // Wants of objects that are not reachable, or do not exist: tests/want_have_rules.rs.
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let server = serve(tmp.path());
    let response = post(server.addr, &v2_fetch(&["want nothex\n".to_owned()], &["done"]), &[V2]);
    assert!(err_line(&response).unwrap().contains("invalid object id"));
}

#[test]
fn too_many_haves_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve_with(tmp.path(), |c| c.max_haves = 10);
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let mut lines = vec![format!("want {head}\n")];
    lines.extend((0..11).map(|n| format!("have {:040x}\n", n + 1)));
    let response = post(server.addr, &v2_fetch(&lines, &[]), &[V2]);
    assert!(err_line(&response).unwrap().contains("too many have lines"));
}

#[test]
fn oversized_bodies_and_gzip_bombs_are_refused_with_413() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let server = serve_with(tmp.path(), |c| {
        c.max_request_body = 64 * 1024;
        c.max_inflated_body = 1024 * 1024;
    });
    let response = post(server.addr, &vec![b'0'; 65 * 1024], &[]);
    assert_eq!(response.status, 413);
    assert!(response.text().contains("larger than"));

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![b'0'; 50 * 1024 * 1024]).unwrap();
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 64 * 1024, "the bomb itself fits the body limit");
    let response = post(server.addr, &bomb, &[("Content-Encoding", "gzip")]);
    assert_eq!(response.status, 413);
    assert!(response.text().contains("inflates to more than"));

    let response = post(server.addr, b"not gzip at all", &[("Content-Encoding", "gzip")]);
    assert_eq!(response.status, 400);
}

#[test]
fn a_gzip_body_from_git_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path());
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&v2_fetch(&[format!("want {head}\n")], &["ofs-delta", "done"])).unwrap();
    let response = post(server.addr, &gz.finish().unwrap(), &[V2, ("Content-Encoding", "gzip")]);
    assert_eq!(response.status, 200);
    assert!(objects_in_pack(&sideband_pack(&response.body), "sha1").contains(&head));
}

#[test]
fn path_tricks_and_unexported_repositories_are_not_found() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    fixture(&base);
    // A repository outside the base path, reachable only through a symlink or `..`.
    let outside = fixture(tmp.path());
    std::os::unix::fs::symlink(&outside, base.join("escape")).unwrap();
    let hidden = base.join("hidden");
    std::fs::create_dir_all(&hidden).unwrap();
    git(&hidden, &["init", "-q"]);
    std::fs::write(base.join("repo/.git/git-daemon-export-ok"), "").unwrap();

    let server = serve_with(&base, |c| c.exports = gixd::config::Exports::DaemonExportOk);
    let info = |path: &str| http(server.addr, "GET", &format!("{path}/info/refs?service=git-upload-pack"), &[], b"");
    assert_eq!(info("/repo").status, 200, "exported");
    for path in
        ["/../repo", "/%2e%2e/repo", "/repo/../../repo", "/escape", "/escape/.git", "/hidden", "//etc", "/repo%00"]
    {
        let response = info(path);
        assert_eq!(response.status, 404, "{path}: {}", response.text());
        assert!(response.text().contains("not found"));
    }
    let _ = outside;
}

#[test]
fn dumb_http_requests_get_a_clear_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let server = serve(tmp.path());
    for path in ["/repo/info/refs", "/repo/HEAD", "/repo/objects/info/packs"] {
        let response = http(server.addr, "GET", path, &[], b"");
        assert_eq!(response.status, 403, "{path}");
        assert!(response.text().contains("dumb HTTP is not supported"), "{path}");
    }
    // Pushing needs a token: without one, 401 asks for credentials.
    let response = http(server.addr, "GET", "/repo/info/refs?service=git-receive-pack", &[], b"");
    assert_eq!(response.status, 401);
    assert!(response.header("www-authenticate").is_some());
}

#[test]
fn the_advertisement_has_git_http_backends_content_type_and_no_cache_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve(tmp.path());
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let v0 = http(server.addr, "GET", "/repo/info/refs?service=git-upload-pack", &[], b"");
    assert_eq!(v0.header("content-type"), Some("application/x-git-upload-pack-advertisement"));
    assert!(v0.header("cache-control").unwrap().contains("no-cache"));
    let lines = pkt_lines(&v0.body);
    assert_eq!(lines[0].as_deref(), Some(&b"# service=git-upload-pack\n"[..]));
    assert_eq!(lines[1], None);
    let first = String::from_utf8(lines[2].clone().unwrap()).unwrap();
    assert!(first.starts_with(&format!("{head} HEAD\0")), "{first}");
    for cap in [
        "multi_ack_detailed",
        "side-band-64k",
        "no-done",
        "symref=HEAD:refs/heads/main",
        "object-format=sha1",
        "agent=gixd/",
    ] {
        assert!(first.contains(cap), "{cap} in {first}");
    }
    let v1 = http(server.addr, "GET", "/repo/info/refs?service=git-upload-pack", &[("Git-Protocol", "version=1")], b"");
    let lines = pkt_lines(&v1.body);
    assert_eq!(lines[2].as_deref(), Some(&b"version 1\n"[..]), "v1: the version line, then the v0 advertisement");
    assert!(String::from_utf8_lossy(lines[3].as_deref().unwrap()).starts_with(&format!("{head} HEAD\0")));
    let v2 = http(server.addr, "GET", "/repo/info/refs?service=git-upload-pack", &[V2], b"");
    let lines = pkt_lines(&v2.body);
    assert_eq!(lines[0].as_deref(), Some(&b"version 2\n"[..]), "no service preamble in v2");
    let text: Vec<String> = lines.iter().flatten().map(|l| String::from_utf8_lossy(l).into_owned()).collect();
    assert!(text.iter().any(|l| l.starts_with("ls-refs=unborn")));
    assert!(text.iter().any(|l| l.starts_with("fetch=")));
    assert!(text.iter().any(|l| l == "object-format=sha1\n"));
}

#[test]
fn after_every_kind_of_bad_input_the_server_still_serves_clones() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture(tmp.path());
    let server = serve_with(tmp.path(), |c| c.max_request_body = 64 * 1024);
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let bad: Vec<Vec<u8>> = vec![
        b"00zz".to_vec(),
        b"fff1".to_vec(),
        vec![b'0'; 70_000],
        v2_fetch(&["want 1234567890123456789012345678901234567890\n".into()], &["done"]),
        v2_fetch(&[format!("want {head}\n")], &["frobnicate"]),
    ];
    for body in &bad {
        post(server.addr, body, &[]);
        post(server.addr, body, &[V2]);
    }
    // A client that disconnects mid-response does not hurt either.
    {
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        let body = v2_fetch(&[format!("want {head}\n")], &["done"]);
        let head = format!(
            "POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body).unwrap();
    }
    let dest = tmp.path().join("client");
    clone(&server.url("repo"), &dest, 2, &[]);
    assert_eq!(git_out(&dest, &["rev-parse", "HEAD"]), head);
}

/// A repository whose pack is far bigger than what socket buffers hold.
fn big_fixture(base: &Path) -> PathBuf {
    let repo = base.join("big");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    let mut rng = gixd_tests::corpus::Lcg(99);
    commit_files(&repo, &[("big.bin", &rng.bytes(16 << 20))], "big");
    git(&repo, &["repack", "-adq"]);
    repo
}

#[test]
fn a_client_that_stops_reading_is_dropped_after_the_io_timeout_and_others_are_served() {
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    let repo = big_fixture(tmp.path());
    let server = serve_with(tmp.path(), |c| {
        c.io_timeout = std::time::Duration::from_secs(1);
        c.stream_window = 64 * 1024;
    });
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let body = v2_fetch(&[format!("want {head}\n")], &["ofs-delta", "no-progress", "done"]);
    let request = |stream: &mut std::net::TcpStream| {
        let head = format!(
            "POST /big/git-upload-pack HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body).unwrap();
    };
    let full = post_to(server.addr, "big", &body, &[V2]).body.len();
    assert!(full > 16 << 20, "full response: {full} bytes");

    let mut stalled = std::net::TcpStream::connect(server.addr).unwrap();
    request(&mut stalled);
    // While it stalls, another client is served in full.
    let dest = tmp.path().join("other-client");
    clone(&server.url("big"), &dest, 2, &[]);
    std::thread::sleep(std::time::Duration::from_secs(4));
    let mut got = Vec::new();
    stalled.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let _ = stalled.read_to_end(&mut got);
    assert!(got.len() < full, "the stalled transfer was not abandoned ({} of {full} bytes)", got.len());
}

#[test]
fn a_body_that_never_arrives_gets_408_after_the_io_timeout() {
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let server = serve_with(tmp.path(), |c| c.io_timeout = std::time::Duration::from_secs(1));
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(b"POST /repo/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: 100\r\n\r\n0009done\n")
        .unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let mut got = vec![0u8; 4096];
    let n = stream.read(&mut got).unwrap();
    let head = String::from_utf8_lossy(&got[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
}

/// With no room left in the transfer buffers (memory and spill budgets of 0 here), a writer
/// waits for its client as it would for a socket, in its slot: a client that does not read then
/// holds the only slot, and with no place in the queue the next request is told 503 busy.
#[test]
fn past_both_buffer_budgets_a_reader_that_stops_holds_its_slot_and_a_full_queue_gets_503_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = big_fixture(tmp.path());
    let server = serve_with(tmp.path(), |c| {
        c.max_transfers = 1;
        c.max_queued = 0;
        c.buffer_memory_bytes = 0;
        c.spill_bytes = 0;
        c.io_timeout = std::time::Duration::from_secs(2);
        c.stream_window = 64 * 1024;
    });
    let head = git_out(&repo, &["rev-parse", "HEAD"]);
    let body = v2_fetch(&[format!("want {head}\n")], &["ofs-delta", "no-progress", "done"]);
    // Hold the only slot: a client that asks for the big pack and does not read it.
    let mut holder = std::net::TcpStream::connect(server.addr).unwrap();
    let request = format!(
        "POST /big/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    holder.write_all(request.as_bytes()).unwrap();
    holder.write_all(&body).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let busy = post_to(server.addr, "big", &body, &[V2]);
    assert_eq!(busy.status, 503, "{}", busy.text());
    assert!(busy.text().contains("server busy: the queue of transfers waiting for a slot is full"), "{}", busy.text());
    assert_eq!(busy.header("retry-after"), Some("5"));
    // The stalled holder is dropped after the I/O timeout; then the slot serves again.
    let started = std::time::Instant::now();
    let served = loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let response = post_to(server.addr, "big", &body, &[V2]);
        if response.status != 503 || started.elapsed() > std::time::Duration::from_secs(20) {
            break response;
        }
    };
    assert_eq!(served.status, 200, "{}", served.text());
    assert!(served.body.len() > 16 << 20);
    drop(holder);
}

/// A client that asks `server` for the big pack and does not read it: it holds a transfer of
/// `big` from 127.0.0.1 until the I/O timeout.
fn hold_a_transfer(addr: std::net::SocketAddr, body: &[u8]) -> std::net::TcpStream {
    let mut holder = std::net::TcpStream::connect(addr).unwrap();
    let request = format!(
        "POST /big/git-upload-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    holder.write_all(request.as_bytes()).unwrap();
    holder.write_all(body).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    holder
}

#[test]
fn a_repository_or_a_client_address_past_its_own_transfer_limit_gets_503_busy_naming_that_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let big = big_fixture(tmp.path());
    let small = fixture(tmp.path());
    let big_body =
        v2_fetch(&[format!("want {}\n", git_out(&big, &["rev-parse", "HEAD"]))], &["ofs-delta", "no-progress", "done"]);
    let small_body = v2_fetch(
        &[format!("want {}\n", git_out(&small, &["rev-parse", "HEAD"]))],
        &["ofs-delta", "no-progress", "done"],
    );
    let limited = |per_repository: usize, per_client: usize| {
        serve_with(tmp.path(), move |c| {
            c.max_transfers = 4;
            c.max_transfers_per_repository = per_repository;
            c.max_transfers_per_client = per_client;
            c.io_timeout = std::time::Duration::from_secs(2);
            c.stream_window = 64 * 1024;
            c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        })
    };
    let assert_busy = |response: &HttpResponse, limit: &str| {
        assert_eq!(response.status, 503, "{}", response.text());
        assert!(response.text().contains(limit), "{}", response.text());
        assert_eq!(response.header("retry-after"), Some("5"));
    };

    // One transfer per repository: a second of `big` is refused, `repo` is served beside it.
    let server = limited(1, 0);
    let holder = hold_a_transfer(server.addr, &big_body);
    assert_busy(&post_to(server.addr, "big", &big_body, &[V2]), "too many transfers of this repository");
    assert_eq!(post(server.addr, &small_body, &[V2]).status, 200, "another repository is served");
    drop(holder);
    // Its place is given back when the transfer ends.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(post_to(server.addr, "big", &big_body, &[V2]).status, 200);

    // One transfer per client address: this address gets nothing more, of any repository.
    let server = limited(0, 1);
    let holder = hold_a_transfer(server.addr, &big_body);
    assert_busy(&post(server.addr, &small_body, &[V2]), "too many transfers from your address");
    let over_git = std::process::Command::new("git")
        .args(["ls-remote", &format!("git://{}/repo", server.git_addr.unwrap())])
        .output()
        .unwrap();
    assert!(!over_git.status.success());
    let said = String::from_utf8_lossy(&over_git.stderr);
    assert!(
        said.contains("remote error: server busy: too many transfers from your address"),
        "git:// says which limit: {said}"
    );
    drop(holder);
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(post(server.addr, &small_body, &[V2]).status, 200);
}
