//! The inputs a client controls, each with its seeds and what must hold for every value of it,
//! against one small fixture: a repository with a hidden ref whose commit and blob no visible
//! ref reaches, and a second one to push into.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use gix_hash::ObjectId;
use gixd::config::{Config, Exports};
use gixd::protocol::pkt::{self, SectionRules};
use gixd::protocol::{self, Input, Mode, Version};
use gixd::repo::{Repos, Served};
use gixd::session::Context;
use gixd_tests::{commit_files, git, git_out};

use crate::Target;

/// Every target, in the order a pass runs them.
pub const ALL: &[Target] = &[
    Target { name: "pkt-section", seeds: upload_seeds, run: pkt_section, max_len: 4096 },
    Target { name: "upload-pack-v2", seeds: v2_seeds, run: upload_v2, max_len: 4096 },
    Target { name: "upload-pack-v2-connection", seeds: v2_seeds, run: upload_v2_connection, max_len: 4096 },
    Target { name: "upload-pack-v0", seeds: v0_seeds, run: upload_v0, max_len: 4096 },
    Target { name: "receive-pack", seeds: push_seeds, run: receive_pack, max_len: 1 << 16 },
    Target { name: "push-options", seeds: push_option_seeds, run: receive_pack, max_len: 1 << 16 },
    Target { name: "filter-spec", seeds: filter_seeds, run: filter_spec, max_len: 256 },
    Target { name: "lfs-transfer", seeds: lfs_transfer_seeds, run: lfs_transfer, max_len: 4096 },
    Target { name: "repo-path", seeds: path_seeds, run: repo_path, max_len: 256 },
    Target { name: "config-file", seeds: config_seeds, run: config_file, max_len: 2048 },
    Target { name: "http-request", seeds: http_seeds, run: http_request, max_len: 8192 },
    Target { name: "git-request-line", seeds: request_line_seeds, run: git_request_line, max_len: 1024 },
    Target { name: "authorization", seeds: authorization_seeds, run: authorization, max_len: 512 },
    Target { name: "grant-glob", seeds: glob_seeds, run: grant_glob, max_len: 256 },
    // Not a client's input but the repository's: files git writes beside gixd, damaged.
    Target { name: "pack-bitmap-file", seeds: pack_bitmap_seeds, run: pack_bitmap_file, max_len: 1 << 14 },
    Target { name: "multi-pack-index-file", seeds: midx_seeds, run: midx_file, max_len: 1 << 14 },
    Target { name: "midx-bitmap-file", seeds: midx_bitmap_seeds, run: midx_bitmap_file, max_len: 1 << 14 },
    Target { name: "commit-graph-file", seeds: commit_graph_seeds, run: commit_graph_file, max_len: 1 << 14 },
    Target { name: "reftable-file", seeds: reftable_seeds, run: reftable_file, max_len: 1 << 14 },
    Target { name: "reftable-tables-list", seeds: tables_list_seeds, run: tables_list, max_len: 1024 },
];

/// The target named `name`.
pub fn by_name(name: &str) -> Option<&'static Target> {
    ALL.iter().find(|t| t.name == name)
}

/// What every target runs against; built once per process.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub base: PathBuf,
    pub repos: Repos,
    pub caches: gixd::select::Caches,
    pub config: Config,
    /// `r.git`: main (three commits), an annotated tag, and refs/hidden/secret (hidden by
    /// `uploadpack.hideRefs`) at a commit with a blob of its own.
    pub served: Served,
    /// The requests' counts (a context needs one; nothing reads it here).
    tally: gixd::session::Tally,
    life: std::sync::Arc<gixd::lifecycle::Life>,
    /// `p.git`: a copy of r.git's visible history, to push into.
    pub push: Served,
    pub main: ObjectId,
    pub first: ObjectId,
    pub hidden: ObjectId,
    /// Every object a visible ref of r.git reaches: all a client may ever be sent.
    pub visible: HashSet<ObjectId>,
    /// r.git's visible history alone (no hidden ref, no hidden object): thin packs are completed
    /// here, so a thin base the client could not have had fails to resolve.
    visible_repo: PathBuf,
    /// A pack of one commit on top of main, and that commit.
    pub push_pack: Vec<u8>,
    pub pushed: ObjectId,
    server: OnceLock<gixd::server::Running>,
    recorded: OnceLock<Vec<(Version, Vec<u8>)>>,
    /// `m.git`: r.git's visible history in a bitmapped pack, c3 in a second pack, and a
    /// multi-pack-index over both with its bitmap: the files the on-disk targets damage.
    midx_repo: PathBuf,
    /// A fresh directory per on-disk case.
    scratch: std::sync::atomic::AtomicUsize,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path().canonicalize().expect("canonical");
        let work = base.join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q"]);
        let first = commit_files(&work, &[("f.txt", b"v0\n"), ("dir/a.txt", b"a\n")], "c0");
        git(&work, &["tag", "-a", "-m", "v0", "v0"]);
        commit_files(&work, &[("f.txt", b"v1\n")], "c1");
        let main = commit_files(&work, &[("f.txt", b"v2\n"), ("dir/b.txt", b"b\n")], "c2");
        git(&work, &["checkout", "-q", "-b", "secret"]);
        let hidden = commit_files(&work, &[("secret.txt", b"the secret\n")], "secret");
        git(&work, &["update-ref", "refs/hidden/secret", "secret"]);
        git(&work, &["checkout", "-q", "main"]);
        git(&work, &["branch", "-q", "-D", "secret"]);
        let pushed = commit_files(&work, &[("f.txt", b"v3\n"), ("new.txt", b"new\n")], "c3");
        let push_pack = pack_objects(&work, &format!("{pushed}\n^{main}\n"));
        git(&work, &["reset", "-q", "--hard", &main]);

        let r = base.join("r.git");
        git(&base, &["clone", "-q", "--mirror", work.to_str().unwrap(), r.to_str().unwrap()]);
        git(&r, &["config", "uploadpack.hideRefs", "refs/hidden"]);
        git(&r, &["config", "uploadpack.allowFilter", "true"]);
        git(&r, &["config", "transfer.advertiseObjectInfo", "true"]);
        let p = base.join("p.git");
        git(&base, &["clone", "-q", "--bare", "--no-local", r.to_str().unwrap(), p.to_str().unwrap()]);
        let visible_repo = base.join("visible.git");
        git(&base, &["clone", "-q", "--bare", "--no-local", r.to_str().unwrap(), visible_repo.to_str().unwrap()]);
        let visible = git_out(&r, &["rev-list", "--objects", "--exclude=refs/hidden/*", "--all"])
            .lines()
            .map(|l| ObjectId::from_hex(l.split(' ').next().unwrap().as_bytes()).unwrap())
            .collect();

        let midx_repo = base.join("m.git");
        git(&base, &["clone", "-q", "--bare", "--no-local", r.to_str().unwrap(), midx_repo.to_str().unwrap()]);
        git(&midx_repo, &["-c", "pack.writeReverseIndex=true", "repack", "-adqb"]);
        git(
            &midx_repo,
            &["-c", "fetch.unpackLimit=1", "fetch", "-q", work.to_str().unwrap(), &format!("{pushed}:refs/heads/c3")],
        );
        git(&midx_repo, &["multi-pack-index", "write", "--bitmap"]);

        let mut config = Config::new(base.clone());
        config.exports = Exports::All;
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.services.receive_pack = true;
        let repos = Repos::new(&base, Exports::All).expect("the base exists");
        let (served, _) = repos.locate("/r.git").expect("r.git is served");
        let (push, _) = repos.locate("/p.git").expect("p.git is served");
        let id = |hex: String| ObjectId::from_hex(hex.as_bytes()).unwrap();
        Fixture {
            _dir: dir,
            base,
            repos,
            caches: Default::default(),
            config,
            served,
            tally: Default::default(),
            life: gixd::lifecycle::Life::new(),
            push,
            main: id(main),
            first: id(first),
            hidden: id(hidden),
            visible,
            visible_repo,
            push_pack,
            pushed: id(pushed),
            server: OnceLock::new(),
            recorded: OnceLock::new(),
            midx_repo,
            scratch: Default::default(),
        }
    }

    /// The upload-pack requests stock git sends this fixture (recorded by a tap, once): clones
    /// plain, blob:none and depth 1, then a fetch that deepens, over v2 and over v0 — seeds as
    /// git writes them, capabilities, agent and order included.
    fn recorded(&self) -> &[(Version, Vec<u8>)] {
        self.recorded.get_or_init(|| {
            let recorder = std::sync::Arc::new(gixd::tap::Recorder::default());
            let server =
                gixd::server::spawn_with(self.config.clone(), gixd::server::Options { tap: Some(recorder.clone()) })
                    .expect("gixd starts");
            let url = server.url("r.git");
            let dir = tempfile::tempdir().expect("a temporary directory");
            for version in ["2", "0"] {
                let v = format!("protocol.version={version}");
                for (n, extra) in [&[][..], &["--filter=blob:none"][..], &["--depth", "1"][..]].iter().enumerate() {
                    let dest = dir.path().join(format!("v{version}-{n}"));
                    let mut args = vec!["-c", v.as_str(), "clone", "-q", "--bare"];
                    args.extend_from_slice(extra);
                    args.push(&url);
                    args.push(dest.to_str().expect("a UTF-8 path"));
                    gixd_tests::server::git_ok(dir.path(), &args);
                    if n == 2 {
                        gixd_tests::server::git_ok(
                            &dest,
                            &["-c", &v, "fetch", "-q", "--unshallow", &url, "+refs/heads/*:refs/heads/*"],
                        );
                    }
                }
            }
            let recorded: Vec<(Version, Vec<u8>)> = recorder
                .take()
                .into_iter()
                .filter(|e| e.service == "git-upload-pack" && !e.request.is_empty())
                .map(|e| (e.version, e.request))
                .collect();
            // Each v2 clone asks ls-refs and fetch, each v0 one fetches once: no fewer.
            let v2 = recorded.iter().filter(|(v, _)| *v == Version::V2).count();
            assert!(
                v2 >= 6 && recorded.len() - v2 >= 3,
                "git's requests were recorded ({v2} v2, {} v0)",
                recorded.len() - v2
            );
            recorded
        })
    }

    fn ctx<'a>(&'a self, served: &'a Served) -> Context<'a> {
        Context {
            repos: &self.repos,
            caches: &self.caches,
            served,
            config: &self.config,
            pusher: None,
            tally: &self.tally,
            life: &self.life,
            maintenance: None,
            lfs: &gixd::lfs::Backend::Files,
        }
    }

    /// A server for this fixture (HTTP), started on first use.
    fn server(&self) -> &gixd::server::Running {
        self.server.get_or_init(|| gixd::server::spawn(self.config.clone()).expect("gixd starts"))
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

fn pack_objects(repo: &Path, revs: &str) -> Vec<u8> {
    let mut child = gixd_tests::git_command(repo)
        .args(["pack-objects", "--revs", "--stdout", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("git runs");
    child.stdin.take().unwrap().write_all(revs.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

fn v2_request(command: &str, args: &[String]) -> Vec<u8> {
    let mut w = pkt::Writer::new();
    w.text(format!("command={command}"));
    w.text("agent=git/2.47.3");
    w.text("object-format=sha1");
    w.delim();
    for a in args {
        w.text(a);
    }
    w.flush();
    w.into_bytes()
}

fn v2_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        v2_request(
            "ls-refs",
            &s(&["peel", "symrefs", "ref-prefix HEAD", "ref-prefix refs/heads/", "ref-prefix refs/tags/"]),
        ),
        v2_request("fetch", &s(&["thin-pack", "ofs-delta", &format!("want {}", f.main), "done"])),
        v2_request(
            "fetch",
            &s(&["thin-pack", "ofs-delta", &format!("want {}", f.main), &format!("have {}", f.first), "done"]),
        ),
        v2_request("fetch", &s(&["thin-pack", "ofs-delta", &format!("want {}", f.main), &format!("have {}", f.first)])),
        v2_request("fetch", &s(&["ofs-delta", &format!("want {}", f.main), "filter blob:none", "done"])),
        v2_request("fetch", &s(&["ofs-delta", &format!("want {}", f.main), "deepen 1", "done"])),
        v2_request("fetch", &s(&["ofs-delta", "want-ref refs/heads/main", "done"])),
        v2_request("fetch", &s(&["thin-pack", &format!("want {}", f.hidden), "done"])),
        v2_request("fetch", &s(&["thin-pack", &format!("want {}", f.main), &format!("have {}", f.hidden), "done"])),
        v2_request("object-info", &s(&["size", &format!("oid {}", f.main)])),
        v2_request("object-info", &s(&["size", &format!("oid {}", f.hidden), &format!("oid {}", f.first)])),
    ]
    .into_iter()
    .chain(f.recorded().iter().filter(|(v, _)| *v == Version::V2).map(|(_, r)| r.clone()))
    .collect()
}

fn v0_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    let caps = "multi_ack_detailed side-band-64k thin-pack ofs-delta no-progress agent=git/2.47.3";
    let mut out = Vec::new();
    for (haves, done) in [(vec![], true), (vec![f.first], true), (vec![f.first], false), (vec![f.hidden], true)] {
        let mut w = pkt::Writer::new();
        w.text(format!("want {} {caps}", f.main));
        w.text(format!("want {}", f.main));
        w.flush();
        for h in haves {
            w.text(format!("have {h}"));
        }
        if done {
            w.text("done");
        } else {
            w.flush();
        }
        out.push(w.into_bytes());
    }
    let mut w = pkt::Writer::new();
    w.text(format!("want {} {caps}", f.main));
    w.text("deepen 1");
    w.flush();
    w.text("done");
    out.push(w.into_bytes());
    out.extend(f.recorded().iter().filter(|(v, _)| *v == Version::V0).map(|(_, r)| r.clone()));
    out
}

fn upload_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    v2_seeds(f).into_iter().chain(v0_seeds(f)).collect()
}

fn push_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    let zero = "0".repeat(40);
    let caps = "\0report-status side-band-64k quiet object-format=sha1 agent=git/2.47.3";
    let with_pack = |lines: &[String]| {
        let mut w = pkt::Writer::new();
        for (i, l) in lines.iter().enumerate() {
            w.text(if i == 0 { format!("{l}{caps}") } else { l.clone() });
        }
        w.flush();
        let mut body = w.into_bytes();
        body.extend_from_slice(&f.push_pack);
        body
    };
    vec![
        with_pack(&[format!("{} {} refs/heads/main", f.main, f.pushed)]),
        with_pack(&[format!("{zero} {} refs/heads/topic", f.pushed)]),
        with_pack(&[format!("{} {} refs/heads/main", f.first, f.pushed), format!("{zero} {} refs/tags/t", f.pushed)]),
        {
            let mut w = pkt::Writer::new();
            w.text(format!("{} {zero} refs/heads/gone{caps}", f.main));
            w.flush();
            w.into_bytes()
        },
        with_pack(&[format!("shallow {}", f.first), format!("{} {} refs/heads/main", f.main, f.pushed)]),
    ]
}

/// Pushes with `push-options`: the options section after the commands' flush (none, one, many,
/// long, with a NUL or a newline inside), then the pack.
fn push_option_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    let caps = "\0report-status push-options atomic object-format=sha1 agent=git/2.47.3";
    let with_options = |options: &[&str]| {
        let mut w = pkt::Writer::new();
        w.text(format!("{} {} refs/heads/main{caps}", f.main, f.pushed));
        w.flush();
        for option in options {
            w.text(option);
        }
        w.flush();
        let mut body = w.into_bytes();
        body.extend_from_slice(&f.push_pack);
        body
    };
    let long = "o".repeat(4000);
    vec![
        with_options(&[]),
        with_options(&["ci.skip"]),
        with_options(&["a", "b=c", "merge_request.create", "x\0y", "two\nlines"]),
        with_options(&[long.as_str(), long.as_str()]),
        with_options(&["=", "==", "\u{7f}\u{1}"]),
    ]
}

fn filter_seeds(_: &Fixture) -> Vec<Vec<u8>> {
    [
        "blob:none",
        "blob:limit=1k",
        "blob:limit=0",
        "tree:0",
        "tree:3",
        "combine:blob:none+tree:2",
        "combine:blob%3Anone+tree:1",
        "object:type=blob",
        "sparse:oid=main:x",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn path_seeds(_: &Fixture) -> Vec<Vec<u8>> {
    [
        "/r.git",
        "/r",
        "r.git/",
        "/p.git",
        "/../r.git",
        "/%2e%2e/r.git",
        "/work/.git",
        "/r.git/../p.git",
        "/~root/x",
        "/r.git%00",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn config_seeds(_: &Fixture) -> Vec<Vec<u8>> {
    vec![
        b"listen = \"127.0.0.1:8080\"\nexport_all = true\nenable = [\"receive-pack\"]\n\n[limits]\nmax_request_body = 1048576\nmax_haves = 100\nworker_threads = 2\nio_timeout_secs = 30\n".to_vec(),
        b"base_path = \"/srv/git\"\nstrict_paths = true\nuser_path = \"public_git\"\nmax_connections = 10\n[limits]\nmax_transfers = 0\nblocking_threads = 1\nmin_receive_rate = 1\n".to_vec(),
        b"git_listen = \"[::1]:9418\"\ndisable = [\"upload-pack\"]\nmaintenance_interval_secs = 0\ninformative_errors = false\n".to_vec(),
    ]
}

fn http_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    let post = |path: &str, kind: &str, extra: &str, body: &[u8]| {
        let mut r = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-{kind}-request\r\nAccept: application/x-{kind}-result\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let v2 = v2_seeds(f);
    let chunked = {
        let body = &v2[1];
        let mut r = b"POST /r.git/git-upload-pack HTTP/1.1\r\nHost: x\r\nGit-Protocol: version=2\r\nContent-Type: application/x-git-upload-pack-request\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        r.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(b"\r\n0\r\n\r\n");
        r
    };
    vec![
        b"GET /r.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\nGit-Protocol: version=2\r\n\r\n".to_vec(),
        b"GET /r.git/info/refs?service=git-receive-pack HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        b"GET /r.git/HEAD HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        post("/r.git/git-upload-pack", "git-upload-pack", "Git-Protocol: version=2\r\n", &v2[0]),
        post("/r.git/git-upload-pack", "git-upload-pack", "Git-Protocol: version=2\r\n", &v2[2]),
        post("/r.git/git-upload-pack", "git-upload-pack", "", &v0_seeds(f)[1]),
        post(
            "/r.git/git-upload-pack",
            "git-upload-pack",
            "Content-Encoding: gzip\r\n",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
        ),
        post("/p.git/git-receive-pack", "git-receive-pack", "", &push_seeds(f)[3]),
        chunked,
    ]
}

fn request_line_seeds(_: &Fixture) -> Vec<Vec<u8>> {
    vec![
        b"git-upload-pack /r.git\0host=localhost\0\0version=2\0".to_vec(),
        b"git-upload-pack /r.git\0host=localhost:9418\0".to_vec(),
        b"git-receive-pack /p.git\0host=x\0\0version=1\0".to_vec(),
        b"git-upload-archive /r.git\0".to_vec(),
        b"git-upload-pack ~user/r.git\0host=h\0\0object-format=sha1\0version=2\0".to_vec(),
    ]
}

fn authorization_seeds(_: &Fixture) -> Vec<Vec<u8>> {
    [
        "Basic YWxpY2U6c2VjcmV0",
        "basic YTpi",
        "Bearer 0123456789abcdef",
        "bearer  x ",
        "Basic Og==",
        "Basic ====",
        "Basic YWxpY2U",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn glob_seeds(_: &Fixture) -> Vec<Vec<u8>> {
    ["r*\0r.git", "*\0anything/at/all", "a*b*c\0aXbYc", "team/*\0team/x/y", "exact\0exact", "**a**\0bab"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect()
}

// ---- the targets ----

fn pkt_section(_: &Fixture, input: &[u8]) -> Result<(), String> {
    let _ = pkt::read_all(input);
    for rules in [SectionRules { delim: true, done_ends: false }, SectionRules { delim: false, done_ends: true }] {
        let mut lines = pkt::stream(input);
        let mut held = 0;
        for _ in 0..64 {
            match pkt::read_section(&mut lines, 1 << 12, rules) {
                Ok((section, end)) => {
                    held += section
                        .iter()
                        .map(|l| match l {
                            pkt::Owned::Data(d) => d.len(),
                            pkt::Owned::Delim => 0,
                        })
                        .sum::<usize>();
                    if held > input.len() {
                        return Err(format!("sections hold {held} bytes of a {}-byte input", input.len()));
                    }
                    if matches!(end, pkt::End::HungUp) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
    Ok(())
}

/// upload-pack of r.git answering `input`, the answer checked by [`check_answer`].
fn upload(f: &Fixture, version: Version, input: Input<'_, &[u8]>) -> Result<(), String> {
    let mut out = Vec::new();
    let _ = gixd::service::upload::run(&f.ctx(&f.served), version, input, &mut out);
    // object-info gives no size of what only the hidden ref reaches: no packet of the answer is
    // `<hidden commit> <size>`.
    let hidden = format!("{} ", f.hidden);
    let mut rest = &out[..];
    while rest.len() >= 4 {
        let Some(len) = std::str::from_utf8(&rest[..4]).ok().and_then(|h| usize::from_str_radix(h, 16).ok()) else {
            break;
        };
        let end = len.max(4).min(rest.len());
        let payload = &rest[4..end];
        if let Some(size) = payload.strip_prefix(hidden.as_bytes())
            && !size.is_empty()
            && size.iter().all(u8::is_ascii_digit)
        {
            return Err("object-info gave the size of an object only a hidden ref reaches".into());
        }
        rest = &rest[end..];
    }
    check_answer(f, &out)
}

fn upload_v2(f: &Fixture, input: &[u8]) -> Result<(), String> {
    upload(f, Version::V2, Input::Stateless(input))
}

fn upload_v2_connection(f: &Fixture, input: &[u8]) -> Result<(), String> {
    upload(f, Version::V2, Input::Stateful(input))
}

fn upload_v0(f: &Fixture, input: &[u8]) -> Result<(), String> {
    upload(f, Version::V0, Input::Stateless(input))
}

fn receive_pack(f: &Fixture, input: &[u8]) -> Result<(), String> {
    let mut out = Vec::new();
    let ctx = f.ctx(&f.push);
    let _ = protocol::receive_pack(
        &ctx.bounds(),
        &mut gixd::service::receive::Push::open(&ctx),
        Version::V0,
        Mode::Stateless,
        input,
        &mut out,
    );
    check_framing(&out)?;
    // Never a ref before its objects: every ref of p.git names an object p.git holds, and a
    // commit's tree too.
    let repo = f.push.repo.to_thread_local();
    let refs = repo.references().map_err(|e| e.to_string())?;
    for r in refs.all().map_err(|e| e.to_string())?.flatten() {
        let Some(id) = r.target().try_id().map(|id| id.to_owned()) else { continue };
        let object = repo
            .find_object(id)
            .map_err(|_| format!("{} names {id}, which p.git does not hold", r.name().as_bstr()))?;
        if let Ok(commit) = object.try_into_commit() {
            let tree = commit.tree_id().map_err(|e| e.to_string())?;
            repo.find_object(tree)
                .map_err(|_| format!("{} is at {id}, whose tree {tree} p.git does not hold", r.name().as_bstr()))?;
        }
    }
    Ok(())
}

fn lfs_transfer_seeds(_: &Fixture) -> Vec<Vec<u8>> {
    let oid = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";
    let requests: [&[&str]; 6] = [
        &["version 1"],
        &["batch", "transfer=ssh", "hash-algo=sha256", "refname=refs/heads/main", "\u{1}", &format!("{oid} 12345")],
        &[&format!("get-object {oid}"), "size=12345"],
        &[&format!("verify-object {oid}"), "size=12345"],
        &["lock", "path=art/big.psd", "refname=refs/heads/main"],
        &["list-locks", "cursor=a", "limit=100"],
    ];
    requests
        .iter()
        .map(|lines| {
            let mut w = pkt::Writer::new();
            for line in lines.iter() {
                if *line == "\u{1}" {
                    w.delim();
                } else {
                    w.text(line);
                }
            }
            w.flush();
            w.into_bytes()
        })
        .collect()
}

/// git-lfs-transfer requests: whatever the bytes, reading them never panics, and an oid that is
/// read is 64 lowercase hex digits (it becomes a path below `lfs/objects`).
fn lfs_transfer(_: &Fixture, input: &[u8]) -> Result<(), String> {
    use gixd::lfs::transfer::{Command, arguments, command, objects};
    use gixd::protocol::pkt::Line;
    let Ok(lines) = pkt::read_all(input) else { return Ok(()) };
    let (mut header, mut after, mut delimited) = (Vec::new(), Vec::new(), false);
    let check = |header: &[String], after: &[String]| -> Result<(), String> {
        let Some((first, rest)) = header.split_first() else { return Ok(()) };
        if let Ok(Command::GetObject(oid) | Command::PutObject(oid) | Command::VerifyObject(oid)) = command(first) {
            let text = oid.as_str();
            if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(format!("{first:?} was read as the oid {text:?}"));
            }
        }
        let _ = arguments(rest.iter().map(String::as_str));
        let _ = objects(after.iter().map(String::as_str));
        Ok(())
    };
    for line in lines {
        match line {
            Line::Data(d) => {
                let text = String::from_utf8_lossy(d).into_owned();
                if delimited { after.push(text) } else { header.push(text) }
            }
            Line::Delim => delimited = true,
            Line::Flush | Line::ResponseEnd => {
                check(&header, &after)?;
                (header, after, delimited) = (Vec::new(), Vec::new(), false);
            }
        }
    }
    check(&header, &after)
}

fn filter_spec(_: &Fixture, input: &[u8]) -> Result<(), String> {
    let _ = gixd::filter::Filter::parse(&String::from_utf8_lossy(input));
    Ok(())
}

fn repo_path(f: &Fixture, input: &[u8]) -> Result<(), String> {
    if let Ok((served, _)) = f.repos.locate(&String::from_utf8_lossy(input)) {
        let dir = served.git_dir.canonicalize().map_err(|e| e.to_string())?;
        if !dir.starts_with(&f.base) {
            return Err(format!(
                "{:?} resolved outside the base directory, to {}",
                String::from_utf8_lossy(input),
                dir.display()
            ));
        }
    }
    Ok(())
}

fn config_file(f: &Fixture, input: &[u8]) -> Result<(), String> {
    if let Ok(file) = toml::from_str::<gixd::config::Settings>(&String::from_utf8_lossy(input)) {
        let _ = file.problems();
        let _ = file.over(&gixd::config::Settings { base_path: Some(f.base.clone()), ..Default::default() }).resolve(2);
    }
    Ok(())
}

fn http_request(f: &Fixture, input: &[u8]) -> Result<(), String> {
    let server = f.server();
    let mut stream = TcpStream::connect(server.addr).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = stream.write_all(input);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut answer = Vec::new();
    let started = std::time::Instant::now();
    if let Err(err) = stream.read_to_end(&mut answer)
        && matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    {
        return Err(format!("no answer and no close after {:?}", started.elapsed()));
    }
    if !answer.is_empty() && !answer.starts_with(b"HTTP/1.") {
        return Err(format!(
            "an answer that is not HTTP: {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(80)])
        ));
    }
    // The server goes on serving everyone else.
    let probe = gixd_tests::server::http(server.addr, "GET", "/r.git/info/refs?service=git-upload-pack", &[], b"");
    if probe.status != 200 {
        return Err(format!("after this input the server answers a ref advertisement with {}", probe.status));
    }
    Ok(())
}

fn git_request_line(_: &Fixture, input: &[u8]) -> Result<(), String> {
    if let Some(line) = gixd::transport::git::parse_request_line(input)
        && line.path.contains('\0')
    {
        return Err(format!("a path with a NUL: {:?}", line.path));
    }
    Ok(())
}

fn authorization(_: &Fixture, input: &[u8]) -> Result<(), String> {
    let _ = gixd::auth::credentials(Some(&String::from_utf8_lossy(input)));
    Ok(())
}

/// A pattern without `*` matches exactly itself; `*` alone matches everything.
fn grant_glob(_: &Fixture, input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    let (pattern, subject) = text.split_once('\0').unwrap_or((&text, ""));
    let matched = gixd::auth::glob_match(pattern, subject);
    if !pattern.contains('*') && matched != (pattern == subject) {
        return Err(format!("{pattern:?} against {subject:?}: {matched}"));
    }
    if !gixd::auth::glob_match("*", subject) || !gixd::auth::glob_match(subject, subject) && !subject.contains('*') {
        return Err(format!("* or the text itself does not match {subject:?}"));
    }
    Ok(())
}

// ---- invariants on an upload-pack answer ----

/// The answer is pkt-lines, and a v0 answer without side-band may end in a raw pack.
fn check_framing(out: &[u8]) -> Result<(), String> {
    let mut at = 0;
    while at < out.len() {
        if out[at..].starts_with(b"PACK") {
            return Ok(());
        }
        let len = std::str::from_utf8(out.get(at..at + 4).unwrap_or(&[]))
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or_else(|| {
                format!(
                    "the answer is not pkt-lines at byte {at}: {:?}",
                    String::from_utf8_lossy(&out[at..out.len().min(at + 16)])
                )
            })?;
        at += if len < 4 { 4 } else { len };
        if at > out.len() {
            return Err(format!("a pkt-line runs past the end of the answer ({} bytes)", out.len()));
        }
    }
    Ok(())
}

/// The pack in an answer: side-band 1 payloads, or the bytes after the pkt-lines.
fn pack_of(out: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0;
    let mut banded = Vec::new();
    while at + 4 <= out.len() {
        if out[at..].starts_with(b"PACK") {
            return Some(out[at..].to_vec());
        }
        let len = usize::from_str_radix(std::str::from_utf8(&out[at..at + 4]).ok()?, 16).ok()?;
        if len < 4 {
            at += 4;
            continue;
        }
        let payload = out.get(at + 4..at + len)?;
        if payload.first() == Some(&1) {
            banded.extend_from_slice(&payload[1..]);
        }
        at += len;
    }
    banded.starts_with(b"PACK").then_some(banded)
}

/// How many packs [`check_answer`] indexed and checked, over the process: a pass that never
/// produced a pack would check the confidentiality rule on nothing.
pub static PACKS_CHECKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Framing, and the confidentiality rule: every object of a pack sent (and every thin base it
/// needs) is one a visible ref reaches — git index-pack --fix-thin completes it in a repository
/// holding only the visible history, and each object it indexed is in the visible set.
fn check_answer(f: &Fixture, out: &[u8]) -> Result<(), String> {
    check_framing(out)?;
    let Some(pack) = pack_of(out) else { return Ok(()) };
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let pack_path = scratch.path().join("in.pack");
    let mut child = Command::new("git")
        .current_dir(&f.visible_repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["index-pack", "--stdin", "--fix-thin", "--strict"])
        .arg(&pack_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let _ = child.stdin.take().unwrap().write_all(&pack);
    let done = child.wait_with_output().map_err(|e| e.to_string())?;
    if !done.status.success() {
        return Err(format!(
            "git index-pack --fix-thin refuses the pack sent: {}",
            String::from_utf8_lossy(&done.stderr).trim()
        ));
    }
    let index =
        gix_pack::index::File::at(pack_path.with_extension("idx"), gix_hash::Kind::Sha1).map_err(|e| e.to_string())?;
    for entry in index.iter() {
        if !f.visible.contains(&entry.oid) {
            return Err(format!("sent {}, which no visible ref reaches", entry.oid));
        }
    }
    PACKS_CHECKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// m.git's pack directory file whose name starts with `prefix` and ends with `suffix`.
fn midx_repo_file(f: &Fixture, prefix: &str, suffix: &str) -> PathBuf {
    std::fs::read_dir(f.midx_repo.join("objects/pack"))
        .expect("m.git has packs")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .min()
        .unwrap_or_else(|| panic!("m.git has a {prefix}*{suffix}"))
}

fn pack_bitmap_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    vec![std::fs::read(midx_repo_file(f, "pack-", ".bitmap")).unwrap()]
}

fn midx_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    vec![std::fs::read(f.midx_repo.join("objects/pack/multi-pack-index")).unwrap()]
}

fn midx_bitmap_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    vec![std::fs::read(midx_repo_file(f, "multi-pack-index-", ".bitmap")).unwrap()]
}

/// A copy of m.git in a fresh directory with `input` written over its file `replaced` (a pack
/// directory file name).
fn damaged_copy(f: &Fixture, replaced: &str, input: &[u8]) -> Result<PathBuf, String> {
    let n = f.scratch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dest = f.base.join(format!("damaged-{n}.git"));
    let status = Command::new("cp")
        .args(["-a", f.midx_repo.to_str().unwrap(), dest.to_str().unwrap()])
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("copying m.git failed".into());
    }
    let pack_dir = dest.join("objects/pack");
    let path = pack_dir.join(replaced);
    let _ = std::fs::remove_file(&path); // git writes them read-only
    std::fs::write(&path, input).map_err(|e| e.to_string())?;
    Ok(dest)
}

/// Open what `repo` has (the MIDX check, the MIDX's bitmap, a pack's own) and, where a bitmap
/// opened, reach main through it: damage is an error or a walk, never a panic.
fn open_and_reach(f: &Fixture, repo: &Path) -> Result<(), String> {
    let midx = gixd::repo::midx::check(repo);
    let hash = gix_hash::Kind::Sha1;
    let mut bitmaps = Vec::new();
    if let Ok(Some(bitmap)) = gixd::bitmap::PackBitmap::open_midx(&repo.join("objects/pack"), hash) {
        bitmaps.push(bitmap);
    }
    let idx = midx_repo_file(f, "pack-", ".bitmap").with_extension("idx");
    if let Ok(Some(bitmap)) =
        gixd::bitmap::PackBitmap::open(&repo.join("objects/pack").join(idx.file_name().unwrap()), hash)
    {
        bitmaps.push(bitmap);
    }
    if bitmaps.is_empty() {
        return Ok(());
    }
    let handle = gix::open_opts(repo, gixd::repo::open_options(&midx)).map_err(|e| format!("opening the copy: {e}"))?;
    // From the intact m.git: git itself dies on some damaged MIDXs ("bad pack-int-id").
    let expected: HashSet<ObjectId> = git_out(&f.midx_repo, &["rev-list", "--objects", &f.main.to_string()])
        .lines()
        .map(|l| ObjectId::from_hex(l.split(' ').next().unwrap().as_bytes()).unwrap())
        .collect();
    for bitmap in bitmaps {
        // Every reusable entry's place and size, as a clone would copy them.
        for pos in (0..bitmap.len()).filter(|pos| bitmap.is_reusable(*pos)) {
            let _ = bitmap.entry_at(pos);
        }
        // A file opens only when its checksums hold, so when it does it is git's own: its reach
        // of main is all of main's history.
        let reach = bitmap.reachable(&handle, &[f.main], None).map_err(|e| format!("reach failed: {e}"))?;
        let reached: HashSet<ObjectId> =
            reach.bits.ones().map(|pos| bitmap.oid_at(pos)).chain(reach.extra.keys().copied()).collect();
        if !expected.is_subset(&reached) {
            return Err(format!(
                "{bitmap:?} opened but reaches {} of main's {} objects",
                reached.len(),
                expected.len()
            ));
        }
    }
    let _ = std::fs::remove_dir_all(repo);
    Ok(())
}

fn pack_bitmap_file(f: &Fixture, input: &[u8]) -> Result<(), String> {
    let name = midx_repo_file(f, "pack-", ".bitmap");
    let repo = damaged_copy(f, &name.file_name().unwrap().to_string_lossy(), input)?;
    // Without the MIDX, the pack's own bitmap is the one read.
    let _ = std::fs::remove_file(repo.join("objects/pack/multi-pack-index"));
    open_and_reach(f, &repo)
}

fn midx_file(f: &Fixture, input: &[u8]) -> Result<(), String> {
    // The MIDX bitmap renamed after the checksum the damaged MIDX ends in, so it is read too.
    let bitmap = midx_repo_file(f, "multi-pack-index-", ".bitmap");
    let repo = damaged_copy(f, "multi-pack-index", input)?;
    if input.len() >= 20 {
        let checksum: String = input[input.len() - 20..].iter().map(|b| format!("{b:02x}")).collect();
        let _ = std::fs::copy(&bitmap, repo.join(format!("objects/pack/multi-pack-index-{checksum}.bitmap")));
    }
    open_and_reach(f, &repo)
}

fn midx_bitmap_file(f: &Fixture, input: &[u8]) -> Result<(), String> {
    let name = midx_repo_file(f, "multi-pack-index-", ".bitmap");
    let repo = damaged_copy(f, &name.file_name().unwrap().to_string_lossy(), input)?;
    open_and_reach(f, &repo)
}

/// r.git's commit-graph as git writes it.
fn commit_graph_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    let n = f.scratch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let copy = f.base.join(format!("graph-seed-{n}.git"));
    let copied = Command::new("cp").args(["-a"]).arg(&f.served.git_dir).arg(&copy).status();
    let written = Command::new("git").arg("-C").arg(&copy).args(["commit-graph", "write", "--reachable"]).status();
    assert!(copied.is_ok_and(|s| s.success()) && written.is_ok_and(|s| s.success()), "a commit-graph of r.git");
    vec![std::fs::read(copy.join("objects/info/commit-graph")).unwrap()]
}

/// `input` as a commit-graph file with its trailer made right (so the parser, not the checksum,
/// meets the damage), read as gixd reads one and, if it reads, every commit of it looked at and
/// r.git walked with it: damage is an error or a walk that fails, never a panic.
fn commit_graph_file(f: &Fixture, input: &[u8]) -> Result<(), String> {
    let n = f.scratch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let objects = f.base.join(format!("graph-{n}/objects"));
    std::fs::create_dir_all(objects.join("info")).map_err(|e| e.to_string())?;
    let mut data = input.to_vec();
    if data.len() >= 20 {
        let body = data.len() - 20;
        let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
        hasher.update(&data[..body]);
        let digest = hasher.try_finalize().map_err(|e| e.to_string())?;
        data[body..].copy_from_slice(digest.as_bytes());
    }
    std::fs::write(objects.join("info/commit-graph"), &data).map_err(|e| e.to_string())?;
    if let Ok(Some(graph)) = gixd::repo::commit_graph::load(&objects, gix_hash::Kind::Sha1) {
        for commit in graph.iter_commits() {
            let _ = (commit.root_tree_id(), commit.committer_timestamp(), commit.generation());
            for parent in commit.iter_parents().flatten() {
                let _ = graph.id_at(parent);
            }
        }
        let repo = f.served.repo.to_thread_local();
        let refs = gixd::repo::RefSnapshot::load(&repo).map_err(|e| e.to_string())?;
        let request = gixd::select::Request {
            wants: &refs.tips(),
            common: &[],
            include_tag: false,
            refs: &refs,
            filter: gixd::filter::Filter::default(),
            boundary: None,
            progress: None,
            commit_graph: Some(&graph),
        };
        let _ = gixd::select::select_by_walking(&repo, &request);
    }
    let _ = std::fs::remove_dir_all(objects.parent().unwrap_or(&objects));
    Ok(())
}

/// A copy of r.git with its refs migrated to reftable by git, made once per process; its
/// `tables.list` and the one table it names (after `git pack-refs`).
fn reftable_copy(f: &Fixture) -> &'static (PathBuf, PathBuf) {
    static COPY: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    COPY.get_or_init(|| {
        let copy = f.base.join("reftable-r.git");
        let copied = Command::new("cp").args(["-a"]).arg(&f.served.git_dir).arg(&copy).status();
        assert!(copied.is_ok_and(|s| s.success()), "a copy of r.git");
        git(&copy, &["refs", "migrate", "--ref-format=reftable"]);
        git(&copy, &["pack-refs"]);
        let list = std::fs::read_to_string(copy.join("reftable/tables.list")).unwrap();
        let table = copy.join("reftable").join(list.lines().next().expect("one table"));
        (copy, table)
    })
}

/// r.git's refs as one reftable table git wrote (HEAD, main, an annotated tag, a hidden ref).
fn reftable_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    vec![std::fs::read(&reftable_copy(f).1).unwrap()]
}

/// `input` as the reftable copy's one table, its footer CRC made right (so the parser, not the
/// checksum, meets damaged block lengths, restart offsets, varints and truncations): read by
/// gix-reftable and served as gixd serves refs. An error or refs, never a panic or an unbounded
/// read; whatever the table says, a hidden ref stays hidden.
fn reftable_file(f: &Fixture, input: &[u8]) -> Result<(), String> {
    let (copy, table) = reftable_copy(f);
    let mut data = input.to_vec();
    let footer = match data.get(4) {
        Some(1) => 68,
        _ => 72,
    };
    if data.len() >= footer {
        let at = data.len() - footer;
        let crc = crc32fast::hash(&data[at..data.len() - 4]);
        let end = data.len();
        data[end - 4..].copy_from_slice(&crc.to_be_bytes());
    }
    std::fs::write(table, &data).map_err(|e| e.to_string())?;
    if let Ok(t) = gix_reftable::Table::from_bytes(data) {
        let _ = t.refs();
        let _ = t.logs();
    }
    // A fresh repository object: no cached ref state between cases.
    let repo = gix::open(copy).map_err(|e| e.to_string())?;
    if let Ok(refs) = gixd::repo::RefSnapshot::load(&repo)
        && refs.refs.iter().any(|r| r.name.starts_with(b"refs/hidden/"))
    {
        return Err("a hidden ref was advertised".into());
    }
    Ok(())
}

/// The reftable copy's `tables.list`, and one naming what is not there or is not a table name.
fn tables_list_seeds(f: &Fixture) -> Vec<Vec<u8>> {
    let list = std::fs::read(reftable_copy(f).0.join("reftable/tables.list")).unwrap();
    vec![list, b"0x000000000001-0x000000000001-00000000.ref\n../../config\n".to_vec()]
}

/// `input` as a `tables.list` beside r.git's table: names that are missing (read again a
/// bounded number of times, then an error), that climb out of the directory (refused), or that
/// name the table twice, never a panic, a hang or a read outside the stack's directory.
fn tables_list(f: &Fixture, input: &[u8]) -> Result<(), String> {
    let n = f.scratch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = f.base.join(format!("tables-{n}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let table = &reftable_copy(f).1;
    std::fs::copy(table, dir.join(table.file_name().unwrap())).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("tables.list"), input).map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    if let Ok(stack) = gix_reftable::Stack::open(&dir) {
        let _ = stack.refs();
        if stack.names().iter().any(|name| name.contains('/')) {
            return Err(format!("a table name with a path in it was read: {:?}", stack.names()));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if started.elapsed() > Duration::from_secs(2) {
        return Err(format!("reading the stack took {:?}", started.elapsed()));
    }
    Ok(())
}
