//! Git LFS: Debian's `git-lfs` client against gixd over HTTP and HTTPS — track, push, clone,
//! fetch, pull, checkout of an old revision, lock and unlock, a push refused for size — and the
//! API byte by byte for what git-lfs never sends: oids with path tricks, size and hash
//! mismatches, uploads cut in the middle, another repository's object, a private repository,
//! wrong credentials, a download resumed with `Range`. Each a clear error, nothing stored, the
//! server serving everyone else.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use gixd_tests::server::{http, serve_with};
use gixd_tests::tls::TestCa;
use gixd_tests::{access_log_records, git, git_command};

struct Fixture {
    tmp: tempfile::TempDir,
    base: PathBuf,
    server: gixd::server::Running,
    ca: TestCa,
    /// alice writes everything; bob writes everything; reader only reads `private.git`.
    secrets: [String; 3],
    log: PathBuf,
    /// The git-lfs client's home and global config (`git lfs install` written there).
    home: PathBuf,
    tokens: PathBuf,
    known_hosts: PathBuf,
}

impl Fixture {
    fn new(adjust: impl FnOnce(&mut gixd::config::Config)) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        for repo in ["repo.git", "other.git", "private.git"] {
            git(&base, &["init", "-q", "--bare", repo]);
        }
        // Exported (readable anonymously): repo and other; private is not.
        for repo in ["repo.git", "other.git"] {
            std::fs::write(base.join(repo).join("git-daemon-export-ok"), "").unwrap();
        }
        let ca = TestCa::new(tmp.path(), "gixd-lfs");
        let files = ca.server(tmp.path(), "server");
        let token_file = tmp.path().join("tokens.toml");
        let mut store = gixd::auth::TokenStore::load(&token_file).unwrap();
        let (_, alice) = store.add("alice", "*", true).unwrap();
        let (_, bob) = store.add("bob", "*", true).unwrap();
        let (_, reader) = store.add("reader", "private", false).unwrap();
        store.save().unwrap();
        let log = tmp.path().join("access.log");
        let host_key = tmp.path().join("host_key");
        let tokens = token_file.clone();
        let server = serve_with(&base, |c| {
            c.ssh_listen = Some("127.0.0.1:0".parse().unwrap());
            c.ssh_host_key = Some(host_key.clone());
            c.exports = gixd::config::Exports::DaemonExportOk;
            c.anonymous_read = true;
            c.https_listen = Some("127.0.0.1:0".parse().unwrap());
            (c.tls_cert, c.tls_key) = (Some(files.cert), Some(files.key));
            c.token_file = Some(token_file);
            c.access_log = Some(log.clone());
            adjust(c);
        });
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let public = std::fs::read_to_string(host_key.with_extension("pub")).unwrap();
        let known_hosts = tmp.path().join("known_hosts");
        std::fs::write(&known_hosts, format!("[127.0.0.1]:{} {public}", server.ssh_addr.unwrap().port())).unwrap();
        let fixture = Fixture { tmp, base, server, ca, secrets: [alice, bob, reader], log, home, tokens, known_hosts };
        let out = fixture.client(&fixture.home).args(["lfs", "install", "--skip-repo"]).output().expect("git-lfs runs");
        assert!(
            out.status.success(),
            "git-lfs is installed (.ci/run installs it): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        fixture
    }

    /// Stock git with git-lfs's filters, trusting the test CA, never prompting.
    fn client(&self, dir: &Path) -> std::process::Command {
        let mut cmd = git_command(dir);
        cmd.env("HOME", &self.home)
            .env("GIT_CONFIG_GLOBAL", self.home.join(".gitconfig"))
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSL_CAINFO", &self.ca.ca_pem);
        cmd
    }

    /// A key pair of the test's own, added for `user` with a grant to `repos`.
    fn key(&self, user: &str, repos: &str, write: bool) -> PathBuf {
        let key = self.tmp.path().join(format!("{user}-key"));
        bench_support::sshd::keygen(&key, "ed25519", &["-C", &format!("{user}@test")]).expect("ssh-keygen runs");
        let mut store = gixd::auth::TokenStore::load(&self.tokens).unwrap();
        let line = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        store.add_key(user, repos, write, line.trim()).unwrap();
        store.save().unwrap();
        key
    }

    /// Stock git (and git-lfs) over SSH with `key`.
    fn ssh_client(&self, dir: &Path, key: &Path) -> std::process::Command {
        let mut cmd = self.client(dir);
        cmd.env("GIT_SSH_COMMAND", gixd_tests::ssh_command(key, &self.known_hosts));
        cmd
    }

    fn ssh_url(&self, repo: &str) -> String {
        format!("ssh://git@127.0.0.1:{}/{repo}", self.server.ssh_addr.unwrap().port())
    }

    fn run(&self, dir: &Path, args: &[&str]) -> Output {
        self.client(dir).args(args).output().expect("git runs")
    }

    fn ok(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.run(dir, args);
        assert!(out.status.success(), "git {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// `scheme://user:secret@host/repo` (user `None`: anonymous).
    fn url(&self, https: bool, user: Option<usize>, repo: &str) -> String {
        let (scheme, addr) =
            if https { ("https", self.server.https_addr.unwrap()) } else { ("http", self.server.addr) };
        let who = user.map(|u| format!("{}:{}@", ["alice", "bob", "reader"][u], self.secrets[u])).unwrap_or_default();
        format!("{scheme}://{who}{addr}/{repo}")
    }

    /// Every LFS object stored in `repo`, and every temporary file left.
    fn stored(&self, repo: &str) -> (Vec<String>, usize) {
        let lfs = self.base.join(repo).join("lfs");
        let mut objects = Vec::new();
        for a in std::fs::read_dir(lfs.join("objects")).into_iter().flatten().flatten() {
            for b in std::fs::read_dir(a.path()).unwrap().flatten() {
                for f in std::fs::read_dir(b.path()).unwrap().flatten() {
                    objects.push(f.file_name().into_string().unwrap());
                }
            }
        }
        objects.sort();
        let temporary = std::fs::read_dir(lfs.join("incomplete")).map_or(0, |d| d.count());
        (objects, temporary)
    }
}

fn sha256_hex(data: &[u8]) -> String {
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha256);
    hasher.update(data);
    hasher.try_finalize().unwrap().to_hex().to_string()
}

/// Bytes that do not compress, `len` of them, from `seed`.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut lcg = gixd_tests::corpus::Lcg(seed);
    lcg.bytes(len)
}

fn basic(user: &str, secret: &str) -> String {
    use std::fmt::Write as _;
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{secret}").into_bytes();
    let mut out = String::from("Basic ");
    for chunk in input.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                let _ = out.write_char('=');
            }
        }
    }
    out
}

#[test]
fn git_lfs_pushes_clones_fetches_pulls_and_checks_out_old_revisions_over_http_and_https() {
    let f = Fixture::new(|_| {});
    for https in [false, true] {
        let repo = if https { "other.git" } else { "repo.git" };
        let work = f.tmp.path().join(format!("work-{https}"));
        f.ok(f.tmp.path(), &["clone", "-q", &f.url(https, Some(0), repo), work.to_str().unwrap()]);
        f.ok(&work, &["checkout", "-q", "-b", "main"]);
        f.ok(&work, &["lfs", "track", "*.bin"]);
        let (v1, v2) = (noise(1, 3 << 20), noise(2, 1 << 20));
        std::fs::write(work.join("big.bin"), &v1).unwrap();
        f.ok(&work, &["add", ".gitattributes", "big.bin"]);
        f.ok(&work, &["commit", "-q", "-m", "v1"]);
        f.ok(&work, &["push", "-q", "origin", "main"]);
        assert_eq!(f.stored(repo), (vec![sha256_hex(&v1)], 0), "the object is stored, nothing temporary left");

        // Anonymous clone of an exported repository: its LFS objects come with it.
        let clone = f.tmp.path().join(format!("clone-{https}"));
        f.ok(f.tmp.path(), &["clone", "-q", "-b", "main", &f.url(https, None, repo), clone.to_str().unwrap()]);
        assert_eq!(std::fs::read(clone.join("big.bin")).unwrap(), v1);

        // A second revision, fetched and pulled; the old one checked out again.
        std::fs::write(work.join("big.bin"), &v2).unwrap();
        f.ok(&work, &["commit", "-q", "-am", "v2"]);
        f.ok(&work, &["push", "-q", "origin", "main"]);
        f.ok(&clone, &["fetch", "-q", "origin"]);
        f.ok(&clone, &["lfs", "fetch", "origin", "origin/main"]);
        f.ok(&clone, &["pull", "-q", "--ff-only", "origin", "main"]);
        assert_eq!(std::fs::read(clone.join("big.bin")).unwrap(), v2);
        f.ok(&clone, &["checkout", "-q", "HEAD~1"]);
        assert_eq!(std::fs::read(clone.join("big.bin")).unwrap(), v1);
        let mut both = vec![sha256_hex(&v1), sha256_hex(&v2)];
        both.sort();
        assert_eq!(f.stored(repo), (both, 0));
    }
    let records = access_log_records(&f.log);
    let lfs: Vec<_> = records.iter().filter(|r| r["service"] == "lfs").collect();
    assert!(lfs.iter().any(|r| r["transport"] == "https") && lfs.iter().any(|r| r["transport"] == "http"), "{lfs:?}");
    assert!(lfs.iter().all(|r| r["status"] == "ok"), "{lfs:?}");
    // Alice's pushes are hers in the log; the anonymous clones are nobody's.
    let users: std::collections::BTreeSet<_> = lfs.iter().map(|r| r["user"].as_str().unwrap_or("-")).collect();
    assert_eq!(users, ["-", "alice"].into(), "{lfs:?}");
}

#[test]
fn locks_are_made_listed_verified_and_only_their_owner_or_a_forced_writer_unlocks_them() {
    let f = Fixture::new(|_| {});
    let [alice, bob] = ["alice", "bob"].map(|who| f.tmp.path().join(who));
    for (i, dir) in [&alice, &bob].into_iter().enumerate() {
        f.ok(f.tmp.path(), &["clone", "-q", &f.url(false, Some(i), "repo.git"), dir.to_str().unwrap()]);
    }
    assert!(f.ok(&alice, &["lfs", "lock", "art/a.psd"]).contains("Locked art/a.psd"));
    let refused = f.run(&bob, &["lfs", "lock", "art/a.psd"]);
    assert!(!refused.status.success(), "a second lock of one path is refused");
    let listed = f.ok(&bob, &["lfs", "locks"]);
    assert!(listed.contains("art/a.psd") && listed.contains("alice"), "{listed}");
    let not_bobs = f.run(&bob, &["lfs", "unlock", "art/a.psd"]);
    assert!(!not_bobs.status.success(), "bob may not unlock alice's lock unforced");
    assert!(
        String::from_utf8_lossy(&not_bobs.stderr).contains("--force"),
        "{}",
        String::from_utf8_lossy(&not_bobs.stderr)
    );
    f.ok(&bob, &["lfs", "unlock", "--force", "art/a.psd"]);
    assert!(!f.ok(&alice, &["lfs", "locks"]).contains("art/a.psd"));
    f.ok(&alice, &["lfs", "lock", "b.bin"]);
    f.ok(&alice, &["lfs", "unlock", "b.bin"]);

    // Reading the locks needs read access; making one needs write.
    let (addr, reader) = (f.server.addr, basic("reader", &f.secrets[2]));
    let list = http(addr, "GET", "/private.git/info/lfs/locks", &[("Authorization", &reader)], b"");
    assert_eq!(list.status, 200, "{}", list.text());
    let body = br#"{"path":"x"}"#;
    let make = http(addr, "POST", "/private.git/info/lfs/locks", &[("Authorization", &reader)], body);
    assert_eq!(make.status, 403, "{}", make.text());
    let anonymous = http(addr, "GET", "/private.git/info/lfs/locks", &[], b"");
    assert_eq!(anonymous.status, 404, "a private repository is not found: {}", anonymous.text());
}

#[test]
fn a_push_of_an_object_over_the_size_limit_is_refused_with_the_limit_named_and_nothing_stored() {
    let f = Fixture::new(|c| c.lfs.max_object_bytes = 1 << 20);
    let work = f.tmp.path().join("work");
    f.ok(f.tmp.path(), &["clone", "-q", &f.url(false, Some(0), "repo.git"), work.to_str().unwrap()]);
    f.ok(&work, &["lfs", "track", "*.bin"]);
    std::fs::write(work.join("big.bin"), noise(3, 2 << 20)).unwrap();
    f.ok(&work, &["add", ".gitattributes", "big.bin"]);
    f.ok(&work, &["commit", "-q", "-m", "too big"]);
    let out = f.run(&work, &["push", "origin", "HEAD:main"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("larger than the 1048576 bytes allowed"), "{stderr}");
    assert_eq!(f.stored("repo.git"), (vec![], 0));
}

fn batch(f: &Fixture, repo: &str, auth: Option<&str>, operation: &str, objects: &[(&str, u64)]) -> serde_json::Value {
    let objects: Vec<_> = objects.iter().map(|(oid, size)| serde_json::json!({"oid": oid, "size": size})).collect();
    let body = serde_json::json!({"operation": operation, "transfers": ["basic"], "objects": objects}).to_string();
    let mut headers =
        vec![("Accept", "application/vnd.git-lfs+json"), ("Content-Type", "application/vnd.git-lfs+json")];
    if let Some(auth) = auth {
        headers.push(("Authorization", auth));
    }
    let response = http(f.server.addr, "POST", &format!("/{repo}/info/lfs/objects/batch"), &headers, body.as_bytes());
    let mut value: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
    value["status"] = response.status.into();
    value
}

/// PUT `data` as `oid`, declaring `declared` bytes, raw; `cut`: the client goes away after
/// `data` instead of reading the answer (its status is then 0).
fn put_as(f: &Fixture, repo: &str, oid: &str, declared: usize, data: &[u8], auth: &str, cut: bool) -> u16 {
    let mut stream = std::net::TcpStream::connect(f.server.addr).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let head = format!(
        "PUT /{repo}/info/lfs/objects/{oid} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(data);
    if cut {
        stream.shutdown(std::net::Shutdown::Both).unwrap();
        return 0;
    }
    let mut raw = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut raw);
    gixd_tests::server::parse_response(&raw).status
}

fn put(f: &Fixture, repo: &str, oid: &str, declared: usize, data: &[u8], auth: &str) -> u16 {
    put_as(f, repo, oid, declared, data, auth, false)
}

#[test]
fn hostile_lfs_requests_get_clear_errors_and_nothing_is_stored_or_leaked() {
    let f = Fixture::new(|c| c.lfs.max_object_bytes = 1 << 20);
    let alice = basic("alice", &f.secrets[0]);
    let data = noise(4, 100_000);
    let oid = sha256_hex(&data);

    // Oids that are not oids: refused per object in a batch, and as a path.
    let answer = batch(&f, "repo.git", Some(&alice), "upload", &[("../../HEAD", 1), (&oid[..63], 1)]);
    assert_eq!(answer["status"], 200);
    for object in answer["objects"].as_array().unwrap() {
        assert_eq!(object["error"]["code"], 422, "{object}");
    }
    for path in
        ["/repo.git/info/lfs/objects/..%2F..%2FHEAD".to_owned(), format!("/repo.git/info/lfs/objects/{}", &oid[..10])]
    {
        let got = http(f.server.addr, "GET", &path, &[("Authorization", &alice)], b"");
        assert!([404, 422].contains(&got.status), "{path}: {} {}", got.status, got.text());
    }
    // Declared over the limit: refused in the batch and at the PUT, before a byte is stored.
    let answer = batch(&f, "repo.git", Some(&alice), "upload", &[(&oid, 5 << 20)]);
    assert_eq!(answer["objects"][0]["error"]["code"], 422, "{answer}");
    assert!(answer["objects"][0]["error"]["message"].as_str().unwrap().contains("1048576"), "{answer}");
    assert_eq!(put(&f, "repo.git", &oid, 5 << 20, &[], &alice), 413);
    // Wrong bytes for the oid; a cut upload; neither leaves anything.
    assert_eq!(put(&f, "repo.git", &oid, data.len(), &noise(5, data.len()), &alice), 422);
    put_as(&f, "repo.git", &oid, data.len(), &data[..data.len() / 2], &alice, true);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(f.stored("repo.git"), (vec![], 0), "nothing stored, no temporary file left");
    // Without write access: anonymous is asked for credentials, a reader is refused.
    assert_eq!(put(&f, "repo.git", &oid, data.len(), &data, "Basic bm9ib2R5Ondyb25n"), 401);
    let reader = basic("reader", &f.secrets[2]);
    assert_eq!(put(&f, "private.git", &oid, data.len(), &data, &reader), 403);

    // Stored right in one repository: there and only there.
    assert_eq!(put(&f, "repo.git", &oid, data.len(), &data, &alice), 200);
    assert_eq!(f.stored("repo.git"), (vec![oid.clone()], 0));
    let answer = batch(&f, "other.git", None, "download", &[(&oid, data.len() as u64)]);
    assert_eq!(answer["objects"][0]["error"]["code"], 404, "another repository's object: {answer}");
    let got = http(f.server.addr, "GET", &format!("/other.git/info/lfs/objects/{oid}"), &[], b"");
    assert_eq!(got.status, 404);
    // A private repository is not found to whoever may not read it; wrong credentials get 401.
    let private = batch(&f, "private.git", None, "download", &[(&oid, 1)]);
    assert_eq!(private["status"], 404, "{private}");
    let wrong = batch(&f, "repo.git", Some("Basic bm9ib2R5Ondyb25n"), "download", &[(&oid, 1)]);
    assert_eq!(wrong["status"], 401, "{wrong}");
    let asks = http(
        f.server.addr,
        "POST",
        "/repo.git/info/lfs/objects/batch",
        &[("Authorization", "Basic bm9ib2R5Ondyb25n")],
        b"{}",
    );
    assert!(asks.header("lfs-authenticate").is_some_and(|h| h.starts_with("Basic")), "{:?}", asks.headers);
    // Not JSON: a clear 422.
    let garbage =
        http(f.server.addr, "POST", "/repo.git/info/lfs/objects/batch", &[("Authorization", &alice)], b"{not json");
    assert_eq!(garbage.status, 422);
    assert!(garbage.text().contains("not a valid LFS request"), "{}", garbage.text());

    // The verify callback: right size yes, wrong size no.
    let verify = |size: usize| {
        let body = format!(r#"{{"oid":"{oid}","size":{size}}}"#);
        http(f.server.addr, "POST", "/repo.git/info/lfs/verify", &[("Authorization", &alice)], body.as_bytes()).status
    };
    assert_eq!((verify(data.len()), verify(data.len() + 1)), (200, 422));
}

#[test]
fn an_interrupted_download_resumes_with_a_range_and_gets_exactly_the_rest() {
    let f = Fixture::new(|_| {});
    let alice = basic("alice", &f.secrets[0]);
    let data = noise(6, 3 << 20);
    let oid = sha256_hex(&data);
    assert_eq!(put(&f, "repo.git", &oid, data.len(), &data, &alice), 200);
    let path = format!("/repo.git/info/lfs/objects/{oid}");
    let whole = http(f.server.addr, "GET", &path, &[], b"");
    assert_eq!((whole.status, whole.header("accept-ranges")), (200, Some("bytes")));
    assert!(whole.body == data);
    let from = 1_234_567;
    let rest = http(f.server.addr, "GET", &path, &[("Range", &format!("bytes={from}-"))], b"");
    assert_eq!(rest.status, 206);
    assert_eq!(rest.header("content-range"), Some(format!("bytes {from}-{}/{}", data.len() - 1, data.len()).as_str()));
    assert!(rest.body == data[from..]);
    let past = http(f.server.addr, "GET", &path, &[("Range", &format!("bytes={}-", data.len()))], b"");
    assert_eq!(past.status, 416);
    // An empty object is stored and served as one.
    let empty = sha256_hex(b"");
    assert_eq!(put(&f, "repo.git", &empty, 0, b"", &alice), 200);
    let got = http(f.server.addr, "GET", &format!("/repo.git/info/lfs/objects/{empty}"), &[], b"");
    assert_eq!((got.status, got.body.len()), (200, 0), "{}", got.text());
}

fn ssh_ok(f: &Fixture, dir: &Path, key: &Path, args: &[&str]) -> String {
    let out = f.ssh_client(dir, key).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?} over ssh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `git-lfs-authenticate <path> <operation>` (what git-lfs runs over SSH when the pure-SSH
/// protocol is not there, and older clients always) gives an SSH user the repository's HTTP(S)
/// URL and a header good for ten minutes, for that repository and operation only: a download's
/// header cannot upload, one repository's cannot reach another, an expired one is refused as
/// expired, a forged one as invalid, an unknown repository is not found.
#[test]
fn git_lfs_authenticate_issues_an_ssh_user_a_short_lived_header_for_one_repository_and_operation() {
    let f = Fixture::new(|_| {});
    let key = f.key("alice", "*", true);
    let data = noise(7, 2 << 20);
    assert_eq!(put(&f, "repo.git", &sha256_hex(&data), data.len(), &data, &basic("alice", &f.secrets[0])), 200);

    // What the command answers, and what its header may do.
    let ssh = |args: &[&str]| {
        let mut cmd = std::process::Command::new("sh");
        let line = format!(
            "{} -p {} git@127.0.0.1 {}",
            gixd_tests::ssh_command(&key, &f.known_hosts),
            f.server.ssh_addr.unwrap().port(),
            args.join(" ")
        );
        cmd.args(["-c", &line]).output().unwrap()
    };
    let out = ssh(&["git-lfs-authenticate", "repo.git", "download"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer["href"],
        format!("https://{}/repo.git/info/lfs", f.server.https_addr.unwrap()),
        "HTTPS when served"
    );
    assert_eq!(answer["expires_in"], 600);
    let header = answer["header"]["Authorization"].as_str().unwrap().to_owned();
    let oid = sha256_hex(&data);
    let get = |repo: &str, auth: &str| {
        http(f.server.addr, "GET", &format!("/{repo}/info/lfs/objects/{oid}"), &[("Authorization", auth)], b"").status
    };
    assert_eq!(get("repo.git", &header), 200);
    assert_eq!(get("other.git", &header), 401, "one repository's header reaches no other");
    assert_eq!(put(&f, "repo.git", &oid, 1, b"x", &header), 403, "a download's header does not upload");
    let refused = ssh(&["git-lfs-authenticate", "private.git", "upload"]);
    assert!(refused.status.success(), "alice's grant is '*': {}", String::from_utf8_lossy(&refused.stderr));
    let unknown = ssh(&["git-lfs-authenticate", "nowhere.git", "download"]);
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );

    // Replayed after it expired; forged.
    let secret = gixd::lfs::token::secret(&gixd::lfs::token::secret_path(&f.tokens)).unwrap();
    let key_id = header.split('.').nth(3).unwrap();
    let key_id = String::from_utf8(
        (0..key_id.len()).step_by(2).map(|i| u8::from_str_radix(&key_id[i..i + 2], 16).unwrap()).collect(),
    )
    .unwrap();
    let expired = gixd::lfs::token::issue(
        &secret,
        &gixd::lfs::token::Claims {
            key_id,
            repo: "repo".into(),
            operation: gixd::lfs::api::Operation::Download,
            expires: 1,
        },
    );
    let response = http(
        f.server.addr,
        "GET",
        &format!("/repo.git/info/lfs/objects/{oid}"),
        &[("Authorization", &format!("Bearer {expired}"))],
        b"",
    );
    assert_eq!(response.status, 401);
    assert!(response.text().contains("expired"), "{}", response.text());
    let forged = header.replacen(".download.", ".upload.", 1);
    assert_eq!(put(&f, "repo.git", &oid, 1, b"x", &forged), 401);
}

/// `VmRSS` or `VmHWM` (the peak) of this process, KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A 2 GiB upload streams through: the server (in this process) holds a few buffers of it, never
/// the object — the process's peak resident memory stays within 64 MiB of what it was idle —
/// and the object is stored whole and right.
#[test]
fn a_two_gib_upload_is_stored_with_the_servers_memory_bounded() {
    let f = Fixture::new(|_| {});
    let alice = basic("alice", &f.secrets[0]);
    const BLOCK: usize = 1 << 20;
    const BLOCKS: usize = 2048;
    let block = noise(8, BLOCK);
    // Each block differs in its first bytes: no two MiB of the object are alike.
    let nth = |i: usize| {
        let mut b = block.clone();
        b[..8].copy_from_slice(&(i as u64).to_le_bytes());
        b
    };
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha256);
    for i in 0..BLOCKS {
        hasher.update(&nth(i));
    }
    let oid = hasher.try_finalize().unwrap().to_hex().to_string();
    // The peak is counted from here (`clear_refs` 5 resets it to the resident size now).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let idle = status_kib("VmRSS:");
    let mut stream = std::net::TcpStream::connect(f.server.addr).unwrap();
    let total = BLOCK * BLOCKS;
    let head = format!(
        "PUT /repo.git/info/lfs/objects/{oid} HTTP/1.1\r\nHost: x\r\nAuthorization: {alice}\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    for i in 0..BLOCKS {
        stream.write_all(&nth(i)).unwrap();
    }
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut stream, &mut raw).unwrap();
    assert_eq!(gixd_tests::server::parse_response(&raw).status, 200);
    let peak = status_kib("VmHWM:");
    assert_eq!(f.stored("repo.git"), (vec![oid.clone()], 0));
    let stored = f.base.join(format!("repo.git/lfs/objects/{}/{}/{oid}", &oid[..2], &oid[2..4]));
    assert_eq!(std::fs::metadata(stored).unwrap().len(), total as u64);
    let above = peak.saturating_sub(idle);
    println!("idle {idle} KiB, peak {peak} KiB, {above} KiB above idle");
    assert!(above < 64 << 10, "the upload held {above} KiB above idle");
}

/// A push whose pack holds LFS pointers naming objects the server does not hold is refused, each
/// ref with the reason (the first missing object); once the object is uploaded the same push
/// lands; a repository with `gixd.lfsPointerCheck=false` takes such a push. Red before: every
/// such push landed, and a clone of it could not check the file out.
#[test]
fn a_push_of_lfs_pointers_to_objects_the_server_lacks_is_refused_unless_the_repository_turns_the_check_off() {
    let f = Fixture::new(|_| {});
    let alice = basic("alice", &f.secrets[0]);
    // Plain git, no LFS filters or hooks: the pointer is committed as it is.
    let work = f.tmp.path().join("plain");
    git(f.tmp.path(), &["clone", "-q", &f.url(false, Some(0), "repo.git"), work.to_str().unwrap()]);
    let data = noise(9, 50_000);
    let oid = sha256_hex(&data);
    let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {}\n", data.len());
    gixd_tests::commit_files(&work, &[("asset.bin", pointer.as_bytes())], "a pointer");
    let push = |dir: &Path| {
        git_command(dir)
            .env("GIT_TERMINAL_PROMPT", "0")
            .args(["push", "origin", "HEAD:refs/heads/main"])
            .output()
            .unwrap()
    };
    let refused = push(&work);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("LFS object {oid}")) && stderr.contains("is not on the server"), "{stderr}");
    assert_eq!(put(&f, "repo.git", &oid, data.len(), &data, &alice), 200);
    let landed = push(&work);
    assert!(landed.status.success(), "{}", String::from_utf8_lossy(&landed.stderr));

    let other = noise(10, 1000);
    let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize 1000\n", sha256_hex(&other));
    gixd_tests::commit_files(&work, &[("other.bin", pointer.as_bytes())], "another pointer");
    assert!(!push(&work).status.success());
    git(&f.base.join("repo.git"), &["config", "gixd.lfsPointerCheck", "false"]);
    let unchecked = push(&work);
    assert!(unchecked.status.success(), "{}", String::from_utf8_lossy(&unchecked.stderr));

    // Maintenance reports an object no pointer names (uploaded, then never pushed), keeps it.
    let stray = noise(11, 4321);
    assert_eq!(put(&f, "repo.git", &sha256_hex(&stray), stray.len(), &stray, &alice), 200);
    let repo = f.base.join("repo.git");
    assert_eq!(gixd::maintenance::lfs::unreferenced(&repo).unwrap(), Some((1, 4321)));
    assert_eq!(f.stored("repo.git").0.len(), 2, "nothing is deleted");
}

/// An upload that trickles (a few bytes at a time) is cut off once a window of waiting shows it
/// below the minimum rate, as a push is: its permit goes back, nothing is stored, and an upload
/// beside it is served. Red before: the trickle held its permit for as long as it kept sending.
#[test]
fn a_trickling_upload_is_cut_off_at_the_minimum_rate_and_leaves_nothing() {
    let f = Fixture::new(|c| {
        c.io_timeout = std::time::Duration::from_secs(2);
        c.min_receive_rate = 10_000;
        c.lfs.max_uploads = 1;
    });
    let alice = basic("alice", &f.secrets[0]);
    let data = noise(12, 100_000);
    let oid = sha256_hex(&data);
    let mut stream = std::net::TcpStream::connect(f.server.addr).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let head = format!(
        "PUT /repo.git/info/lfs/objects/{oid} HTTP/1.1\r\nHost: x\r\nAuthorization: {alice}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        data.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let started = std::time::Instant::now();
    let mut sent = 0;
    // 20 bytes every 100 ms: 200 bytes/s, far below 10 000; stop when the server answers.
    stream.set_nonblocking(true).unwrap();
    let mut answer = Vec::new();
    while started.elapsed() < std::time::Duration::from_secs(15) {
        let _ = stream.write_all(&data[sent..sent + 20]);
        sent += 20;
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut buf = [0u8; 4096];
        match std::io::Read::read(&mut stream, &mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if !answer.is_empty() {
            break;
        }
    }
    let elapsed = started.elapsed();
    assert!(elapsed < std::time::Duration::from_secs(10), "cut off within a few windows, not after {elapsed:?}");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("400") && text.contains("bytes/s"), "{text}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(f.stored("repo.git"), (vec![], 0), "nothing stored, nothing temporary left");
    // The permit went back: the next upload is served.
    assert_eq!(put(&f, "repo.git", &oid, data.len(), &data, &alice), 200);
}

/// An SSH-only user needs no HTTP at all: git-lfs speaks its pure-SSH protocol
/// (`git-lfs-transfer`) to gixd for the push, the clone, a lock and an unlock — the access log
/// holds those sessions and no LFS request over HTTP. Red before: gixd refused the command, and
/// git-lfs fell back to `git-lfs-authenticate` and HTTP.
#[test]
fn an_ssh_only_user_pushes_clones_and_locks_over_git_lfs_transfer_without_http() {
    let f = Fixture::new(|_| {});
    let key = f.key("alice", "*", true);
    let work = f.tmp.path().join("work");
    ssh_ok(&f, f.tmp.path(), &key, &["clone", "-q", &f.ssh_url("repo.git"), work.to_str().unwrap()]);
    ssh_ok(&f, &work, &key, &["checkout", "-q", "-b", "main"]);
    ssh_ok(&f, &work, &key, &["lfs", "track", "*.bin"]);
    let data = noise(13, 3 << 20);
    std::fs::write(work.join("big.bin"), &data).unwrap();
    ssh_ok(&f, &work, &key, &["add", ".gitattributes", "big.bin"]);
    ssh_ok(&f, &work, &key, &["commit", "-q", "-m", "pure ssh"]);
    ssh_ok(&f, &work, &key, &["push", "-q", "origin", "main"]);
    assert_eq!(f.stored("repo.git"), (vec![sha256_hex(&data)], 0));
    let clone = f.tmp.path().join("clone");
    ssh_ok(&f, f.tmp.path(), &key, &["clone", "-q", "-b", "main", &f.ssh_url("repo.git"), clone.to_str().unwrap()]);
    assert!(std::fs::read(clone.join("big.bin")).unwrap() == data);
    assert!(ssh_ok(&f, &work, &key, &["lfs", "lock", "big.bin"]).contains("big.bin"));
    let listed = ssh_ok(&f, &work, &key, &["lfs", "locks"]);
    assert!(listed.contains("big.bin") && listed.contains("alice"), "{listed}");
    ssh_ok(&f, &work, &key, &["lfs", "unlock", "big.bin"]);
    assert!(!ssh_ok(&f, &work, &key, &["lfs", "locks"]).contains("big.bin"));

    let records = access_log_records(&f.log);
    let sessions = records.iter().filter(|r| r["service"] == "git-lfs-transfer").count();
    assert!(sessions >= 2, "{records:?}");
    assert!(records.iter().filter(|r| r["service"] == "git-lfs-transfer").all(|r| r["status"] == "ok"), "{records:?}");
    assert!(!records.iter().any(|r| r["service"] == "lfs" || r["service"] == "git-lfs-authenticate"), "{records:?}");
}

/// A `git-lfs-transfer` session fed garbage, unknown commands, a path trick, a wrong hash and
/// another repository's object answers each with a status and goes on; nothing is stored.
#[test]
fn a_git_lfs_transfer_session_answers_bad_requests_with_a_status_and_stores_nothing_wrong() {
    let f = Fixture::new(|_| {});
    let key = f.key("alice", "*", true);
    let data = noise(14, 5000);
    let oid = sha256_hex(&data);
    let pkt = |s: &str| format!("{:04x}{s}", s.len() + 4).into_bytes();
    let mut input = Vec::new();
    for request in [
        vec![pkt("version 1\n"), b"0000".to_vec()],
        vec![pkt("shell\n"), b"0000".to_vec()],
        vec![pkt("get-object ../../../HEAD\n"), b"0000".to_vec()],
        vec![pkt(&format!("get-object {oid}\n")), b"0000".to_vec()],
        // Wrong bytes for the oid.
        vec![
            pkt(&format!("put-object {oid}\n")),
            pkt(&format!("size={}\n", data.len())),
            b"0001".to_vec(),
            {
                let wrong = noise(15, data.len());
                let mut p = format!("{:04x}", wrong.len() + 4).into_bytes();
                p.extend_from_slice(&wrong);
                p
            },
            b"0000".to_vec(),
        ],
        vec![pkt(&format!("verify-object {oid}\n")), pkt(&format!("size={}\n", data.len())), b"0000".to_vec()],
        vec![pkt("quit\n"), b"0000".to_vec()],
    ] {
        input.extend(request.concat());
    }
    let mut child = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "{} -p {} git@127.0.0.1 git-lfs-transfer repo.git upload",
                gixd_tests::ssh_command(&key, &f.known_hosts),
                f.server.ssh_addr.unwrap().port()
            ),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let statuses: Vec<&str> = text.match_indices("status ").map(|(i, _)| &text[i + 7..i + 10]).collect();
    assert_eq!(statuses, ["200", "400", "400", "404", "422", "404", "200"], "{text}");
    assert!(text.contains("version=1") && text.contains("unknown command"), "{text}");
    assert_eq!(f.stored("repo.git"), (vec![], 0));
}

// Object storage: the same API against an S3-compatible bucket (SeaweedFS, which .ci/run
// installs and starts through tests/s3/seaweedfs.sh), read back through its filer, not gixd.

/// The running SeaweedFS's S3 URL and filer address; `None` (the test says it is skipped) when
/// none runs outside CI. CI always starts one, so there a missing one fails.
fn seaweedfs() -> Option<(String, std::net::SocketAddr)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/seaweedfs");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok().map(|s| s.trim().to_owned());
    match (read("endpoint"), read("filer")) {
        (Some(endpoint), Some(filer)) => Some((endpoint, filer.trim_start_matches("http://").parse().unwrap())),
        _ if std::env::var_os("CI").is_some() => {
            panic!("no SeaweedFS running: .ci/run starts one (tests/s3/seaweedfs.sh)")
        }
        _ => {
            eprintln!("skipped: no SeaweedFS running (`bash tests/s3/seaweedfs.sh` starts one)");
            None
        }
    }
}

/// A fixture whose LFS objects go to the bucket below a prefix of this test's own; the filer's
/// address and the prefix.
fn s3_fixture(endpoint: &str, prefix: &str) -> Fixture {
    let secret = std::env::temp_dir().join(format!("gixd-s3-secret-{}", std::process::id()));
    std::fs::write(&secret, "gixd-test-secret\n").unwrap();
    let (endpoint, prefix) = (endpoint.to_owned(), prefix.to_owned());
    Fixture::new(move |c| {
        c.lfs.s3 = gixd::config::LfsS3 {
            bucket: Some("gixd-test".into()),
            endpoint: Some(endpoint),
            region: "us-east-1".into(),
            prefix,
            path_style: true,
            access_key_id: Some("gixd-test-key".into()),
            secret_access_key_file: Some(secret),
        };
    })
}

/// A prefix no other test (or earlier run) used.
fn unique_prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{test}-{}-{nanos}", std::process::id())
}

/// The size of the bucket's object `key` as the filer sees it, `None` if there is none.
fn in_bucket(filer: std::net::SocketAddr, key: &str) -> Option<u64> {
    let got = http(filer, "HEAD", &format!("/buckets/gixd-test/{key}"), &[], b"");
    (got.status == 200).then(|| got.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// Multipart uploads to `key` the bucket holds unfinished (SeaweedFS keeps each under
/// `.uploads/<sha1 of the key>_<upload id>`).
fn unfinished_uploads(filer: std::net::SocketAddr, key: &str) -> usize {
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
    hasher.update(key.as_bytes());
    let named = format!("/buckets/gixd-test/.uploads/{}_", hasher.try_finalize().unwrap().to_hex());
    let got = http(filer, "GET", "/buckets/gixd-test/.uploads/?limit=10000", &[("Accept", "application/json")], b"");
    let listing: serde_json::Value = serde_json::from_slice(&got.body).unwrap_or_default();
    let entries = listing["Entries"].as_array().cloned().unwrap_or_default();
    entries.iter().filter(|e| e["FullPath"].as_str().is_some_and(|p| p.starts_with(&named))).count()
}

fn object_key(prefix: &str, repo: &str, oid: &str) -> String {
    format!("{prefix}/{repo}/lfs/objects/{}/{}/{oid}", &oid[..2], &oid[2..4])
}

/// With a bucket configured, git-lfs's push puts the objects in the bucket (a large one in
/// parts), nothing in the repository's `lfs/`; clones over HTTPS and over SSH (the pure-SSH
/// transfer) get them back whole, a ranged GET gets exactly the part asked, and the verify
/// callback and the batch see what the bucket holds.
#[test]
fn lfs_objects_live_in_the_s3_bucket_and_come_back_whole_over_https_and_ssh_and_by_range() {
    let Some((endpoint, filer)) = seaweedfs() else { return };
    let prefix = unique_prefix("roundtrip");
    let f = s3_fixture(&endpoint, &prefix);
    let work = f.tmp.path().join("work");
    f.ok(f.tmp.path(), &["clone", "-q", &f.url(false, Some(0), "repo.git"), work.to_str().unwrap()]);
    f.ok(&work, &["checkout", "-q", "-b", "main"]);
    f.ok(&work, &["lfs", "track", "*.bin"]);
    // More than two parts (8 MiB each), and one object of a single request.
    let (big, small) = (noise(21, 19 << 20), noise(22, 5000));
    std::fs::write(work.join("big.bin"), &big).unwrap();
    std::fs::write(work.join("small.bin"), &small).unwrap();
    f.ok(&work, &["add", ".gitattributes", "big.bin", "small.bin"]);
    f.ok(&work, &["commit", "-q", "-m", "v1"]);
    f.ok(&work, &["push", "-q", "origin", "main"]);
    for data in [&big, &small] {
        let key = object_key(&prefix, "repo.git", &sha256_hex(data));
        assert_eq!(in_bucket(filer, &key), Some(data.len() as u64), "{key} is in the bucket");
    }
    assert_eq!(f.stored("repo.git"), (vec![], 0), "nothing in the repository's lfs/");
    let big_key = object_key(&prefix, "repo.git", &sha256_hex(&big));
    assert_eq!(unfinished_uploads(filer, &big_key), 0, "the multipart upload was completed");

    let clone = f.tmp.path().join("clone");
    f.ok(f.tmp.path(), &["clone", "-q", "-b", "main", &f.url(true, Some(1), "repo.git"), clone.to_str().unwrap()]);
    assert!(std::fs::read(clone.join("big.bin")).unwrap() == big, "the large object came back whole over HTTPS");
    assert_eq!(std::fs::read(clone.join("small.bin")).unwrap(), small);

    let key = f.key("alice", "*", true);
    let by_ssh = f.tmp.path().join("by-ssh");
    ssh_ok(&f, f.tmp.path(), &key, &["clone", "-q", "-b", "main", &f.ssh_url("repo.git"), by_ssh.to_str().unwrap()]);
    assert!(std::fs::read(by_ssh.join("big.bin")).unwrap() == big, "and over SSH");

    let oid = sha256_hex(&big);
    let auth = basic("bob", &f.secrets[1]);
    let path = format!("/repo.git/info/lfs/objects/{oid}");
    let part = http(f.server.addr, "GET", &path, &[("Authorization", &auth), ("Range", "bytes=9000000-9000099")], b"");
    assert_eq!(part.status, 206, "{}", part.text());
    assert_eq!(part.body, big[9_000_000..9_000_100]);
    assert_eq!(part.header("content-range"), Some(format!("bytes 9000000-9000099/{}", big.len()).as_str()));
    let answer = batch(&f, "repo.git", Some(&auth), "download", &[(&oid, big.len() as u64)]);
    assert!(answer["objects"][0]["actions"]["download"].is_object(), "{answer}");
    let verify = serde_json::json!({"oid": oid, "size": big.len()}).to_string();
    let headers = [("Authorization", auth.as_str()), ("Content-Type", "application/vnd.git-lfs+json")];
    let verified = http(f.server.addr, "POST", "/repo.git/info/lfs/verify", &headers, verify.as_bytes());
    assert_eq!(verified.status, 200, "{}", verified.text());
}

/// An upload to the bucket whose bytes are wrong, or that is cut in the middle, leaves no
/// object and no unfinished multipart upload behind (its parts are aborted); the next right
/// upload of the same object is stored.
#[test]
fn a_wrong_or_cut_upload_to_the_s3_bucket_leaves_no_object_and_no_parts() {
    let Some((endpoint, filer)) = seaweedfs() else { return };
    let prefix = unique_prefix("refused");
    let f = s3_fixture(&endpoint, &prefix);
    let auth = basic("alice", &f.secrets[0]);
    let data = noise(23, 17 << 20);
    let oid = sha256_hex(&data);
    let key = object_key(&prefix, "repo.git", &oid);
    let mut wrong = data.clone();
    wrong[16 << 20] ^= 1;
    assert_eq!(put_as(&f, "repo.git", &oid, data.len(), &wrong, &auth, false), 422, "a hash mismatch is refused");
    assert_eq!(in_bucket(filer, &key), None);
    assert_eq!(unfinished_uploads(filer, &key), 0, "the refused upload's parts were aborted");

    assert_eq!(put_as(&f, "repo.git", &oid, data.len(), &data[..12 << 20], &auth, true), 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while unfinished_uploads(filer, &key) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(unfinished_uploads(filer, &key), 0, "the cut upload's parts were aborted");
    assert_eq!(in_bucket(filer, &key), None);

    assert_eq!(put_as(&f, "repo.git", &oid, data.len(), &data, &auth, false), 200);
    assert_eq!(in_bucket(filer, &key), Some(data.len() as u64));
}

/// A bucket that cannot be reached is a clear error to the client that needed it (502, naming
/// the object storage), and the server serves everyone else: git itself, and the next request.
#[test]
fn an_unreachable_object_storage_is_a_clear_error_and_the_server_serves_on() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let f = s3_fixture(&format!("http://{unused}"), "nowhere");
    let auth = basic("alice", &f.secrets[0]);
    let data = noise(24, 1000);
    let oid = sha256_hex(&data);
    let stored =
        http(f.server.addr, "PUT", &format!("/repo.git/info/lfs/objects/{oid}"), &[("Authorization", &auth)], &data);
    assert_eq!(stored.status, 502, "{}", stored.text());
    assert!(stored.text().contains("object storage"), "{}", stored.text());
    let got =
        http(f.server.addr, "GET", &format!("/repo.git/info/lfs/objects/{oid}"), &[("Authorization", &auth)], b"");
    assert_eq!(got.status, 502, "not known to be there or not: {}", got.text());
    let clone = f.tmp.path().join("clone");
    f.ok(f.tmp.path(), &["clone", "-q", &f.url(false, Some(0), "repo.git"), clone.to_str().unwrap()]);
}
