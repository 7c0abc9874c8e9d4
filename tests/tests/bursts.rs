//! Bursts and slow readers: a transfer slot stands for CPU work (negotiating, selecting, writing
//! the pack), and what was written is sent from the transfer buffers without a slot. Counted,
//! not timed: the slot waits the metrics and the access log record, the generations at once.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{
    all_objects, clone, metric, objects_in_pack, parse_response, pkt, scrape, serve_with, sideband_pack,
};
use gixd_tests::{commit_files, git, git_out};

/// A repository whose clone is a pack of about `mib` MiB that does not compress (more than the
/// kernel's socket buffers hold, so a client that does not read stops a writer that writes to it).
fn incompressible(base: &Path, name: &str, mib: usize) -> PathBuf {
    let repo = base.join(name);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    let mut rng = corpus::Lcg(31);
    commit_files(&repo, &[("big.bin", &rng.bytes(mib << 20))], "big");
    git(&repo, &["repack", "-adq"]);
    repo
}

/// A v2 fetch of `want` as one raw HTTP request, sent on a connection whose receive buffer is
/// the kernel's default: the response is then read by the caller at its own pace.
fn fetch_request(addr: std::net::SocketAddr, repo: &str, want: &str) -> std::net::TcpStream {
    let mut body = pkt("command=fetch\n");
    body.extend(b"0001");
    body.extend(pkt(&format!("want {want}\n")));
    body.extend(pkt("ofs-delta\n"));
    body.extend(pkt("no-progress\n"));
    body.extend(pkt("done\n"));
    body.extend(b"0000");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /{repo}/git-upload-pack HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).unwrap();
    stream
}

/// Four clients read a 12 MiB pack each at 40 KiB/s while stock git clones another repository
/// beside them, one clone at a time, with two slots. The slow readers' packs are written into
/// the transfer buffers and their slots given back: the clones never find every slot taken
/// (the metrics' `transfers_waited` does not move, each clone's access-log `wait_ms` is 0), and
/// then the slow readers read the rest and have their whole packs. Red when a slot is held until
/// the response is sent: two slow readers hold both slots, the clones queue behind them.
#[test]
fn slow_readers_hold_no_slot_so_clones_beside_them_never_wait_and_the_slow_ones_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let slow_repo = incompressible(&base, "slow", 12);
    let fast_repo = corpus::ensure("merges", Hash::Sha1);
    let fast_name = "fast.git";
    git(&base, &["clone", "-q", "--bare", fast_repo.to_str().unwrap(), fast_name]);
    let log = tmp.path().join("access.log");
    let server = serve_with(&base, |c| {
        c.max_transfers = 2;
        // A clone that queues behind the slow readers fails after this, not after they finish.
        c.transfer_queue_wait = std::time::Duration::from_secs(10);
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.access_log = Some(log.clone());
    });
    let want = git_out(&slow_repo, &["rev-parse", "HEAD"]);
    let slow: Vec<std::net::TcpStream> = (0..4).map(|_| fetch_request(server.addr, "slow", &want)).collect();
    // Their packs are written (the generations end) while they read nothing yet; on a server
    // that holds a slot until the response is sent, two of them never get that far.
    let metrics_addr = server.metrics_addr.unwrap();
    let written = std::time::Instant::now();
    while written.elapsed() < std::time::Duration::from_secs(20) {
        let m = scrape(metrics_addr);
        if metric(&m, "gixd_pack_generations_total", &[]) >= 4.0 && metric(&m, "gixd_transfers_in_flight", &[]) == 0.0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let waited_before = metric(&scrape(metrics_addr), "gixd_transfers_waited_total", &[]);

    // The slow readers take 4 KiB every 100 ms while three clones run, one after another.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let taken: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let readers: Vec<_> = slow
            .into_iter()
            .map(|mut stream| {
                let stop = &stop;
                scope.spawn(move || {
                    let mut got = Vec::new();
                    let mut piece = [0u8; 4096];
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        match stream.read(&mut piece) {
                            Ok(0) | Err(_) => return got,
                            Ok(n) => got.extend_from_slice(&piece[..n]),
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    // The rest as fast as it comes.
                    stream.read_to_end(&mut got).unwrap();
                    got
                })
            })
            .collect();
        let origin = all_objects(&base.join(fast_name));
        for n in 0..3 {
            let dest = tmp.path().join(format!("clone{n}.git"));
            clone(&server.url(fast_name), &dest, 2, &["--bare"]);
            assert_eq!(all_objects(&dest), origin, "clone {n} is complete");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });

    let m = scrape(metrics_addr);
    assert_eq!(
        metric(&m, "gixd_transfers_waited_total", &[]),
        waited_before,
        "no clone beside the slow readers found every slot taken"
    );
    let records = gixd_tests::access_log_records(&log);
    let clones: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["repository"] == "fast.git" && r["service"] == "git-upload-pack").collect();
    assert!(clones.len() >= 6, "each clone's ls-refs and fetch: {clones:?}");
    for record in &clones {
        assert_eq!(record["wait_ms"], 0.0, "a clone waited for a slot: {record}");
        assert_eq!(record["status"], "ok");
    }
    // Every slow reader got its whole response: the pack's last packet, then the flush.
    let slow_records: Vec<&serde_json::Value> = records.iter().filter(|r| r["repository"] == "slow").collect();
    assert_eq!(slow_records.len(), 4);
    for (got, record) in taken.iter().zip(&slow_records) {
        let response = parse_response(got);
        assert_eq!(response.status, 200);
        let pack = sideband_pack(&response.body);
        assert_eq!(objects_in_pack(&pack, "sha1").len(), 3, "the whole pack: commit, tree, blob");
        assert!(response.body.ends_with(b"0000"), "the response ends with its flush");
        assert_eq!(record["status"], "ok", "{record}");
        assert!(["memory", "disk"].contains(&record["buffer"].as_str().unwrap()), "{record}");
    }
}

/// Stock git clones, `n` at once, of `url`, each into its own directory below `into`; the
/// stderr of those that failed.
fn clone_burst(url: &str, into: &Path, n: usize, version: u8) -> Vec<String> {
    std::fs::create_dir_all(into).unwrap();
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|scope| {
        let clones: Vec<_> = (0..n)
            .map(|i| {
                let barrier = &barrier;
                let dest = into.join(format!("c{i}.git"));
                scope.spawn(move || {
                    barrier.wait();
                    let out = gixd_tests::server::git_client(
                        into,
                        &[
                            "-c",
                            &format!("protocol.version={version}"),
                            "clone",
                            "-q",
                            "--bare",
                            url,
                            dest.to_str().unwrap(),
                        ],
                    );
                    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
                })
            })
            .collect();
        clones.into_iter().filter_map(|c| c.join().unwrap()).collect()
    })
}

/// A burst of eight clones per CPU gixd finds, at the settings it chooses for this machine (no
/// pack cache, so each clone generates its own pack), over HTTP and over git:// (v2 and v0), each
/// client behind a link slower than the server: every clone is served — none is told "busy" —
/// and the metrics never saw more transfers holding a slot at once than there are slots. Red with
/// the old design and defaults (two slots per CPU held while clients read, a 5 s queue wait).
#[test]
fn a_burst_of_eight_clones_per_cpu_at_default_settings_is_served_over_http_and_git_with_no_more_packs_at_once_than_slots()
 {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let origin = corpus::ensure("linear", Hash::Sha1);
    git(&base, &["clone", "-q", "--bare", origin.to_str().unwrap(), "repo.git"]);
    let log = tmp.path().join("access.log");
    let cpus = gixd::budget::read().effective();
    let settings = gixd::config::Settings { base_path: Some(base.clone()), ..Default::default() };
    let mut config = settings.resolve(cpus).expect("the defaults resolve");
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.git_listen = Some("127.0.0.1:0".parse().unwrap());
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    config.access_log = Some(log.clone());
    config.exports = gixd::config::Exports::All;
    let slots = config.max_transfers;
    let server = gixd::server::spawn_with(config, gixd::server::Options { tap: None }).expect("gixd starts");
    let n = 8 * cpus;
    let objects = all_objects(&base.join("repo.git"));
    // Every client reads at 1 MiB/s, so a clone's pack (about 2 MiB) takes two seconds to read.
    let http_url = format!("http://{}/repo.git", bench_support::relay::slow_link(server.addr, 1 << 20));
    let git_url = format!("git://{}/repo.git", bench_support::relay::slow_link(server.git_addr.unwrap(), 1 << 20));
    for (name, url, version) in [("http", http_url, 2), ("git-v2", git_url.clone(), 2), ("git-v0", git_url, 0)] {
        let into = tmp.path().join(name);
        let failed = clone_burst(&url, &into, n, version);
        assert!(failed.is_empty(), "{name}: {} of {n} clones failed:\n{}", failed.len(), failed.join("\n"));
        for i in 0..n {
            assert_eq!(all_objects(&into.join(format!("c{i}.git"))), objects, "{name}: clone {i} is complete");
        }
    }
    let m = scrape(server.metrics_addr.unwrap());
    assert_eq!(metric(&m, "gixd_pack_generations_total", &[]), (3 * n) as f64, "each clone generated its pack");
    let most = metric(&m, "gixd_transfers_in_flight_max", &[]);
    assert!(most >= 1.0 && most <= slots as f64, "{most} transfers held a slot at once; there are {slots} slots");
    let busy = gixd_tests::access_log_records(&log).into_iter().filter(|r| r["status"] == "busy").count();
    assert_eq!(busy, 0, "no request was refused busy");
    assert_eq!(metric(&m, "gixd_transfers_queued", &[]), 0.0, "nothing is left queued");
}
