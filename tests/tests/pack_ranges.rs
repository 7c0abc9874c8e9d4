//! A clone sent from the pack files (issue 59): a bitmapped clone's pack goes out as ranges of
//! the pack file, so only the bytes gixd generates (packet headers, progress, the flush) pass
//! through the transfer buffers, and a pack deleted while it is being sent (a repack) takes
//! nothing from under the clone. Every transport: HTTP, git://, HTTPS and SSH, with stock git.
//! The transfer buffers are given no memory, so every byte they hold spills and is counted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gixd_tests::corpus;
use gixd_tests::server::{all_objects, metric, scrape, serve_with};
use gixd_tests::tls::TestCa;
use gixd_tests::{commit_files, git, git_command};

/// The pack's size: larger than the kernel's socket buffers on both ends hold, so a stopped
/// client leaves most of it unsent.
const PACK_MIB: usize = 24;

struct Fixture {
    tmp: tempfile::TempDir,
    server: gixd::server::Running,
    /// The repository as made, outside the base path: what every clone must hold.
    origin: PathBuf,
    base: PathBuf,
    ca_pem: PathBuf,
    key: PathBuf,
    known_hosts: PathBuf,
    log: PathBuf,
}

const TRANSPORTS: [&str; 4] = ["http", "git", "https", "ssh"];

/// Files of 1000 random bytes beside the big one: 3 MB of entries each under a range's minimum.
const SMALL_FILES: usize = 3000;

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin.git");
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q"]);
        let mut rng = corpus::Lcg(59);
        commit_files(&work, &[("small.txt", b"a small file\n")], "first");
        commit_files(&work, &[("big.bin", &rng.bytes(PACK_MIB << 20))], "big");
        // Entries far smaller than a range is worth alone: a run of them goes out as one range.
        let small: Vec<(String, Vec<u8>)> = (0..SMALL_FILES).map(|i| (format!("s/{i}.bin"), rng.bytes(1000))).collect();
        let small: Vec<(&str, &[u8])> = small.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
        commit_files(&work, &small, "small files");
        git(tmp.path(), &["clone", "-q", "--bare", "work", "origin.git"]);
        // One pack and its bitmap, as `git gc` leaves a bare repository.
        git(&origin, &["repack", "-adbq"]);
        let base = tmp.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        let ca = TestCa::new(tmp.path(), "gixd-test");
        let files = ca.server(tmp.path(), "server");
        let tokens = tmp.path().join("tokens.toml");
        let key = tmp.path().join("id");
        bench_support::sshd::keygen(&key, "ed25519", &["-C", "reader@test"]).expect("ssh-keygen runs");
        let mut store = gixd::auth::TokenStore::load(&tokens).unwrap();
        let line = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        store.add_key("reader", "*", false, line.trim()).unwrap();
        store.save().unwrap();
        let (log, host_key) = (tmp.path().join("access.log"), tmp.path().join("host_key"));
        let server = serve_with(&base, |c| {
            c.git_listen = Some("127.0.0.1:0".parse().unwrap());
            c.https_listen = Some("127.0.0.1:0".parse().unwrap());
            (c.tls_cert, c.tls_key) = (Some(files.cert), Some(files.key));
            c.ssh_listen = Some("127.0.0.1:0".parse().unwrap());
            c.ssh_host_key = Some(host_key.clone());
            c.token_file = Some(tokens);
            c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
            c.access_log = Some(log.clone());
            // No memory for the transfer buffers: every byte they hold goes to the spill
            // directory, where it is counted.
            c.buffer_memory_bytes = 0;
            c.spill_dir = tmp.path().to_owned();
        });
        let public = std::fs::read_to_string(host_key.with_extension("pub")).unwrap();
        let known_hosts = tmp.path().join("known_hosts");
        std::fs::write(&known_hosts, format!("[127.0.0.1]:{} {public}", server.ssh_addr.unwrap().port())).unwrap();
        Fixture { ca_pem: ca.ca_pem, tmp, server, origin, base, key, known_hosts, log }
    }

    /// A copy of the origin served as `<name>.git`, its bitmap kept or not (a clone by walking).
    fn served_copy(&self, name: &str, bitmap: bool) -> PathBuf {
        let dest = self.base.join(format!("{name}.git"));
        let out = Command::new("cp").arg("-a").arg(&self.origin).arg(&dest).output().unwrap();
        assert!(out.status.success());
        for entry in std::fs::read_dir(dest.join("objects/pack")).unwrap().flatten() {
            if !bitmap && entry.path().extension().is_some_and(|x| x == "bitmap") {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
        dest
    }

    fn url(&self, transport: &str, repo: &str) -> String {
        match transport {
            "http" => format!("http://{}/{repo}.git", self.server.addr),
            "git" => format!("git://{}/{repo}.git", self.server.git_addr.unwrap()),
            "https" => format!("https://127.0.0.1:{}/{repo}.git", self.server.https_addr.unwrap().port()),
            _ => format!("ssh://git@127.0.0.1:{}/{repo}.git", self.server.ssh_addr.unwrap().port()),
        }
    }

    /// `git clone --bare` of `repo` over `transport` into `dest`, as a process of its own group.
    fn clone(&self, transport: &str, repo: &str, dest: &Path) -> std::process::Child {
        let ssh = gixd_tests::ssh_command(&self.key, &self.known_hosts);
        let url = self.url(transport, repo);
        let mut cmd = git_command(self.tmp.path());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSH_COMMAND", ssh)
            // git 2.47 over GnuTLS ignores `-c http.sslCAInfo`; the variable is honoured.
            .env("GIT_SSL_CAINFO", &self.ca_pem)
            .args(["-c", "protocol.version=2", "clone", "-q", "--bare", &url])
            .arg(dest)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn records(&self) -> Vec<serde_json::Value> {
        gixd_tests::access_log_records(&self.log)
    }

    /// The access log's record of the pack `repo` was sent (its `git-upload-pack` request that
    /// sent objects).
    fn pack_record(&self, repo: &str) -> Option<serde_json::Value> {
        self.records().into_iter().find(|r| {
            r["repository"].as_str().is_some_and(|n| n.trim_end_matches(".git") == repo)
                && r["service"] == "git-upload-pack"
                && r["objects"].as_u64().is_some_and(|n| n > 0)
        })
    }

    fn ranged_total(&self) -> f64 {
        metric(&scrape(self.server.metrics_addr.unwrap()), "gixd_transfer_ranged_bytes_total", &[])
    }

    fn pack_size(&self) -> u64 {
        let pack_dir = self.origin.join("objects/pack");
        std::fs::read_dir(pack_dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    }
}

fn finished(child: std::process::Child, what: &str) {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A clone on every transport, bitmapped (the pack file sent as it is) or walked (gix-pack's
/// entries, sent as the stored bytes they were copied from), spills no more than the bytes gixd
/// generated itself (the response less the pack file's ranges) and 1 MiB, while nearly the whole
/// pack went out as ranges of the file. Red with every slice copied into the transfer buffers
/// (ranges never recognised): each clone spilled the whole 27 MiB pack; red for the walked clone
/// while its entries went out as gix-pack's copies (27 MiB spilled), and while each entry went
/// out as a range of its own (the 3 000 small ones, 3 MB, copied).
#[test]
fn a_clone_spills_only_what_it_generated_with_a_bitmap_or_without_on_every_transport() {
    let f = Fixture::new();
    let pack = f.pack_size();
    for (transport, bitmap) in TRANSPORTS.into_iter().flat_map(|t| [(t, true), (t, false)]) {
        let transport_and_way = format!("{transport}, {}", if bitmap { "bitmapped" } else { "walked" });
        let transport = transport_and_way.as_str();
        let repo = format!("spill-{}", transport.replace(", ", "-"));
        f.served_copy(&repo, bitmap);
        let dest = f.tmp.path().join(format!("{repo}-clone.git"));
        finished(f.clone(transport.split(',').next().unwrap(), &repo, &dest), transport);
        assert_eq!(all_objects(&dest), all_objects(&f.origin), "{transport}: the clone holds every object");
        let record = f.pack_record(&repo).unwrap_or_else(|| panic!("{transport}: no record of the pack"));
        let field = |name: &str| record[name].as_u64().unwrap_or_else(|| panic!("{transport}: {name} in {record}"));
        let (bytes, spilled, ranged) = (field("bytes"), field("spill_bytes"), field("ranged_bytes"));
        assert!(
            spilled <= bytes - ranged + (1 << 20),
            "{transport}: spilled {spilled} bytes; generated {} (sent {bytes}, {ranged} as ranges)",
            bytes - ranged
        );
        assert!(spilled < 1 << 20, "{transport}: spilled {spilled} bytes of a {pack}-byte pack");
        assert!(ranged >= pack - (1 << 20), "{transport}: {ranged} bytes sent as ranges of a {pack}-byte pack");
    }
}

/// A clone whose pack files are deleted (as a repack deletes them) after its pack was chosen and
/// before most of it was sent completes with every object, on every transport, bitmapped or
/// walked (gix-pack reading the packs still when the files go): its ranges hold
/// the map and the descriptor taken with them, nothing is opened again by path. The client is
/// stopped once gixd has chosen the ranges, and the files are deleted while the access log
/// still has no record of the response (it is not sent yet).
#[test]
fn a_pack_deleted_mid_send_does_not_break_the_clone_with_a_bitmap_or_without_on_any_transport() {
    let f = Fixture::new();
    for (transport, bitmap) in TRANSPORTS.into_iter().flat_map(|t| [(t, true), (t, false)]) {
        let repo = format!("deleted-{transport}-{}", if bitmap { "bitmapped" } else { "walked" });
        let served = f.served_copy(&repo, bitmap);
        let dest = f.tmp.path().join(format!("{repo}-clone.git"));
        let before = f.ranged_total();
        let child = f.clone(transport, &repo, &dest);
        let deadline = Instant::now() + Duration::from_secs(60);
        while f.ranged_total() == before {
            assert!(Instant::now() < deadline, "{transport}: no pack was sent as ranges");
            std::thread::sleep(Duration::from_millis(1));
        }
        let group = child.id() as i32;
        // SAFETY: signalling the clone's own process group.
        unsafe { libc::kill(-group, libc::SIGSTOP) };
        assert!(f.pack_record(&repo).is_none(), "{transport}: the response was sent before the client stopped");
        for entry in std::fs::read_dir(served.join("objects/pack")).unwrap().flatten() {
            std::fs::remove_file(entry.path()).unwrap();
        }
        // SAFETY: signalling the clone's own process group, as above.
        unsafe { libc::kill(-group, libc::SIGCONT) };
        finished(child, transport);
        assert_eq!(all_objects(&dest), all_objects(&f.origin), "{transport}: the clone holds every object");
        let record = f.pack_record(&repo).expect("sent");
        assert_eq!(record["status"], "ok", "{transport}: {record}");
    }
}
