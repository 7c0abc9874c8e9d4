//! What an operator sees and what a fleet costs: identical concurrent clones share one pack
//! generation (the single-flight pack cache), the metrics listener is scraped with a real
//! Prometheus text parser, and the access log has a line with every field per request.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gixd_tests::server::{all_objects, assert_fsck_clean, clone, git_ok, http, metric, scrape, serve_with};
use gixd_tests::{commit_files, git};

fn fixture(base: &Path) -> PathBuf {
    let repo = base.join("repo.git");
    let work = base.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q"]);
    let mut rng = gixd_tests::corpus::Lcg(7);
    for n in 0..12 {
        let files: Vec<(String, Vec<u8>)> =
            (0..8).map(|f| (format!("d{}/f{f}.bin", f % 3), rng.bytes(16 << 10))).collect();
        let files: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
        commit_files(&work, &files, &format!("c{n}"));
    }
    git(&work, &["tag", "-a", "-m", "release", "v1", "HEAD~3"]);
    git(base, &["clone", "-q", "--bare", work.to_str().unwrap(), repo.to_str().unwrap()]);
    git(&repo, &["repack", "-adq"]);
    repo
}

/// `n` clones of `url` at once (each a stock git process), each checked complete.
fn clones_at_once(url: &str, into: &Path, n: usize, origin: &BTreeSet<String>) {
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|scope| {
        for i in 0..n {
            let (barrier, dest) = (&barrier, into.join(format!("c{i}.git")));
            scope.spawn(move || {
                barrier.wait();
                clone(url, &dest, 2, &["--bare"]);
                assert_eq!(&all_objects(&dest), origin, "clone {i} has every object");
                assert_fsck_clean(&dest);
            });
        }
    });
}

#[test]
fn sixteen_identical_concurrent_clones_cost_one_pack_generation_with_the_pack_cache_and_sixteen_without_on_every_transport()
 {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let origin = all_objects(&fixture(&base));
    let spill = tmp.path().join("cache");
    std::fs::create_dir_all(&spill).unwrap();
    let declared = &gixd::config::Settings::defaults().pack_cache;
    for (transport, cached) in [("http", true), ("http", false), ("git", true), ("git", false)] {
        let server = serve_with(&base, |c| {
            c.git_listen = Some("127.0.0.1:0".parse().unwrap());
            c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
            c.max_transfers = 4;
            c.transfer_queue_wait = std::time::Duration::from_secs(60);
            // Small enough that the pack moves to disk as it grows: readers read the file.
            c.pack_cache = cached.then(|| gixd::config::PackCache {
                memory_bytes: 64 << 10,
                dir: Some(spill.clone()),
                disk_bytes: declared.disk_bytes.expect("declared"),
                max_age: std::time::Duration::from_secs(declared.max_age_secs.expect("declared")),
            });
        });
        let into = tmp.path().join(format!("{transport}-{}", if cached { "cached" } else { "uncached" }));
        std::fs::create_dir_all(&into).unwrap();
        let url = match transport {
            "http" => server.url("repo.git"),
            _ => format!("git://{}/repo.git", server.git_addr.unwrap()),
        };
        clones_at_once(&url, &into, 16, &origin);
        let metrics = scrape(server.metrics_addr.unwrap());
        let generations = metric(&metrics, "gixd_pack_generations_total", &[]);
        let fetches = metric(&metrics, "gixd_requests_total", &[("service", "git-upload-pack"), ("status", "ok")]);
        assert!(fetches >= 16.0, "every clone's fetch is counted: {fetches}");
        if cached {
            assert_eq!(generations, 1.0, "{transport}: one generation for sixteen identical clones");
            assert_eq!(metric(&metrics, "gixd_pack_cache_total", &[("outcome", "miss")]), 1.0);
            let shared = metric(&metrics, "gixd_pack_cache_total", &[("outcome", "join")])
                + metric(&metrics, "gixd_pack_cache_total", &[("outcome", "hit")]);
            assert_eq!(shared, 15.0, "{transport}: the others joined it or read it back");
        } else {
            assert_eq!(generations, 16.0, "{transport}: without the cache each clone generates its own pack");
            assert_eq!(metric(&metrics, "gixd_pack_cache_total", &[]), 0.0);
        }
        assert!(metric(&metrics, "gixd_pack_generation_cpu_seconds_total", &[]) > 0.0);
        assert!(
            metric(&metrics, "gixd_bytes_out_total", &[("service", "git-upload-pack")]) > 16.0 * 100_000.0,
            "sixteen packs went out"
        );
        assert_eq!(metric(&metrics, "gixd_transfers_in_flight", &[]), 0.0, "every slot was given back");
    }
    assert!(std::fs::read_dir(&spill).unwrap().next().is_none(), "the cache's files are unlinked");
}

#[test]
fn a_request_after_a_ref_change_is_never_answered_from_the_pack_cached_before_it() {
    use gixd_tests::server::{objects_in_pack, pkt, sideband_pack};
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let repo = fixture(&base);
    let server = serve_with(&base, |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.pack_cache = Some(gixd::config::PackCache {
            memory_bytes: 64 << 20,
            dir: None,
            disk_bytes: 0,
            max_age: std::time::Duration::from_secs(300),
        });
    });
    let head = gixd_tests::git_out(&repo, &["rev-parse", "HEAD"]);
    let mut body = pkt("command=fetch\n");
    body.extend(pkt("object-format=sha1\n"));
    body.extend(b"0001");
    for line in [
        format!("want {head}\n"),
        "include-tag\n".into(),
        "ofs-delta\n".into(),
        "no-progress\n".into(),
        "done\n".into(),
    ] {
        body.extend(pkt(&line));
    }
    body.extend(b"0000");
    let fetch = || {
        let response = http(
            server.addr,
            "POST",
            "/repo.git/git-upload-pack",
            &[("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")],
            &body,
        );
        assert_eq!(response.status, 200);
        response.body
    };
    let first = fetch();
    assert_eq!(fetch(), first, "read back byte for byte");
    let metrics = scrape(server.metrics_addr.unwrap());
    assert_eq!(metric(&metrics, "gixd_pack_cache_total", &[("outcome", "hit")]), 1.0);
    // The same request once an annotated tag points at the wanted commit: include-tag must
    // bring the tag, so the answer cannot be the one cached for the refs before it.
    git(&repo, &["tag", "-a", "-m", "new", "v2", "HEAD"]);
    let tag = gixd_tests::git_out(&repo, &["rev-parse", "v2"]);
    let after = fetch();
    assert!(objects_in_pack(&sideband_pack(&after), "sha1").contains(&tag), "the new tag is sent");
    assert!(!objects_in_pack(&sideband_pack(&first), "sha1").contains(&tag));
    let metrics = scrape(server.metrics_addr.unwrap());
    assert_eq!(metric(&metrics, "gixd_pack_cache_total", &[("outcome", "miss")]), 2.0, "the new ref state missed");
    assert_eq!(metric(&metrics, "gixd_pack_generations_total", &[]), 2.0);
}

#[test]
fn every_request_gets_an_access_log_line_with_every_field_and_the_metrics_count_it() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    fixture(&base);
    let log = tmp.path().join("access.log");
    let server = serve_with(&base, |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.access_log = Some(log.clone());
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
    });
    let git_url = format!("git://{}/repo.git", server.git_addr.unwrap());
    clone(&server.url("repo.git"), &tmp.path().join("over-http"), 2, &[]);
    let over_git = tmp.path().join("over-git");
    clone(&git_url, &over_git, 2, &[]);
    commit_files(&over_git, &[("pushed.txt", b"pushed")], "pushed");
    git_ok(&over_git, &["push", "-q", "origin", "HEAD"]);
    let _ = http(server.addr, "GET", "/nothing-here", &[], b"");
    drop(server); // every line is written when its request ends

    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let fields = [
        "time_ms",
        "peer",
        "transport",
        "repository",
        "service",
        "version",
        "user",
        "wants",
        "haves",
        "objects",
        "bytes",
        "cpu_ms",
        "duration_ms",
        "cache",
        "status",
        "http_status",
    ];
    for line in &lines {
        for field in fields {
            assert!(line.get(field).is_some(), "{field} missing: {line}");
        }
    }
    let find = |transport: &str, service: &str| {
        lines
            .iter()
            .find(|l| {
                l["transport"] == transport && l["service"] == service && l["objects"].as_u64().is_some_and(|n| n > 0)
            })
            .unwrap_or_else(|| panic!("a {transport} {service} line with a pack: {lines:?}"))
    };
    for transport in ["http", "git"] {
        let fetch = find(transport, "git-upload-pack");
        assert_eq!(fetch["repository"], "repo.git");
        assert_eq!(fetch["version"], 2);
        assert!(fetch["wants"].as_u64().unwrap() >= 1, "{fetch}");
        assert!(fetch["bytes"].as_u64().unwrap() > 100_000, "{fetch}");
        assert!(fetch["cpu_ms"].as_f64().unwrap() > 0.0 && fetch["duration_ms"].as_f64().unwrap() > 0.0, "{fetch}");
    }
    assert!(lines.iter().any(|l| l["transport"] == "http"
        && l["service"] == "info/refs"
        && l["status"] == "ok"
        && l["http_status"] == 200));
    assert!(
        lines.iter().any(|l| l["transport"] == "git" && l["service"] == "git-receive-pack" && l["status"] == "ok"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l["service"] == "other" && l["status"] == "refused" && l["http_status"] == 404));
    assert!(
        lines.iter().filter(|l| l["transport"] == "git").all(|l| l["http_status"].is_null()),
        "git:// lines carry no HTTP status: {lines:?}"
    );
}

#[test]
fn the_metrics_count_requests_by_service_version_and_status_and_pushes_by_outcome() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    fixture(&base);
    let server = serve_with(&base, |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.receive_pack = true;
    });
    let work = tmp.path().join("w");
    clone(&format!("git://{}/repo.git", server.git_addr.unwrap()), &work, 0, &[]);
    commit_files(&work, &[("x.txt", b"x")], "x");
    git_ok(&work, &["push", "-q", "origin", "HEAD"]);
    // Refused by the server (git refuses a non-fast-forward before it sends anything): the
    // branch HEAD names may not be deleted.
    let branch = git_ok(&work, &["rev-parse", "--abbrev-ref", "HEAD"]);
    assert!(
        !gixd_tests::server::git_client(&work, &["push", "-q", "origin", "--delete", branch.trim()]).status.success(),
        "deleting the current branch"
    );
    let _ =
        http(server.addr, "GET", "/repo.git/info/refs?service=git-upload-pack", &[("Git-Protocol", "version=2")], b"");
    let _ = http(server.addr, "GET", "/missing.git/info/refs?service=git-upload-pack", &[], b"");
    // A request is counted when the server is done with it, which may be just after its client
    // is (a push's report is sent before its record is written): read until all four are in.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let metrics = loop {
        let metrics = scrape(server.metrics_addr.unwrap());
        let counted = metric(&metrics, "gixd_repository_requests_total", &[("repository", "repo.git")]);
        if counted >= 4.0 || std::time::Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(
        metric(&metrics, "gixd_requests_total", &[("service", "git-upload-pack"), ("version", "0"), ("status", "ok")]),
        1.0
    );
    assert_eq!(
        metric(&metrics, "gixd_requests_total", &[("service", "info/refs"), ("version", "2"), ("status", "ok")]),
        1.0
    );
    assert_eq!(metric(&metrics, "gixd_requests_total", &[("service", "info/refs"), ("status", "refused")]), 1.0);
    assert_eq!(metric(&metrics, "gixd_pushes_total", &[("outcome", "ok")]), 1.0);
    assert_eq!(metric(&metrics, "gixd_pushes_total", &[("outcome", "refused")]), 1.0);
    assert_eq!(
        metric(&metrics, "gixd_repository_requests_total", &[("repository", "repo.git")]),
        4.0,
        "clone, two pushes, an advertisement"
    );
    assert_eq!(http(server.metrics_addr.unwrap(), "GET", "/other", &[], b"").status, 404);
}

/// The `remote:` lines git shows, from its stderr (progress is `\r`-separated as it updates).
fn remote_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .split(['\r', '\n'])
        .filter_map(|l| l.strip_prefix("remote: "))
        .map(|l| l.trim_end().to_owned())
        .collect()
}

#[test]
fn a_clone_and_a_fetch_show_gits_progress_phases_with_their_object_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let repo = fixture(&base);
    // Without a bitmap: objects are looked up one by one (git counts them), not sent as the
    // pack's bytes.
    for file in gixd_tests::pack_files(&repo.join("objects")) {
        if file.extension().is_some_and(|e| e == "bitmap") {
            std::fs::remove_file(file).unwrap();
        }
    }
    let objects = all_objects(&repo).len();
    let server = serve_with(&base, |_| {});
    let url = server.url("repo.git");

    let dest = tmp.path().join("clone.git");
    let out = gixd_tests::server::git_client(
        tmp.path(),
        &["-c", "protocol.version=2", "clone", "--progress", "--bare", &url, dest.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = remote_lines(&out.stderr);
    for expected in [
        format!("Enumerating objects: {objects}, done."),
        format!("Counting objects: 100% ({objects}/{objects}), done."),
    ] {
        assert!(lines.contains(&expected), "a clone shows '{expected}': {lines:?}");
    }

    // A client two commits behind: the objects going out whole are searched for deltas.
    let behind = tmp.path().join("behind.git");
    git_ok(tmp.path(), &["clone", "-q", "--bare", "--no-local", repo.to_str().unwrap(), behind.to_str().unwrap()]);
    git_ok(&behind, &["update-ref", "HEAD", "HEAD~2"]);
    git_ok(&behind, &["tag", "-d", "v1"]);
    git_ok(&behind, &["-c", "gc.auto=0", "reflog", "expire", "--expire=now", "--all"]);
    git_ok(&behind, &["gc", "-q", "--prune=now"]);
    let out = gixd_tests::server::git_client(
        &behind,
        &["-c", "protocol.version=2", "fetch", "--progress", &url, "+refs/heads/*:refs/heads/*"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = remote_lines(&out.stderr);
    let compressing = lines
        .iter()
        .find(|l| l.starts_with("Compressing objects: 100% ("))
        .unwrap_or_else(|| panic!("a fetch shows its delta search: {lines:?}"));
    let searched: usize =
        compressing["Compressing objects: 100% (".len()..].split('/').next().unwrap().parse().unwrap();
    assert!(searched > 0, "{compressing}");
    assert!(lines.iter().any(|l| l.starts_with("Counting objects: 100% (") && l.ends_with("), done.")), "{lines:?}");
}

/// The running counts of one phase: `Title: N` or `Title:  x% (a/b)` lines before its `done.`.
fn running_counts(lines: &[String], title: &str) -> Vec<usize> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(title))
        .filter(|l| !l.ends_with("done."))
        .map(|l| {
            l.rsplit_once('(')
                .map_or(l, |(_, n)| n.split('/').next().unwrap())
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("a count: {l}"))
        })
        .collect()
}

#[test]
fn a_long_walk_count_and_delta_search_show_running_progress_lines_before_their_final_ones() {
    // 2500 commits, no bitmap: a walk of thousands of objects, counted one by one, and a fetch
    // far behind searched for deltas. git's pace (a line a second) is set to nothing, so every
    // running count gixd offers goes out.
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let repo = base.join("repo.git");
    let corpus = gixd_tests::corpus::ensure("linear", gixd_tests::corpus::Hash::Sha1);
    git(&base, &["clone", "-q", "--bare", "--no-local", corpus.to_str().unwrap(), repo.to_str().unwrap()]);
    for file in gixd_tests::pack_files(&repo.join("objects")) {
        if file.extension().is_some_and(|e| e == "bitmap") {
            std::fs::remove_file(file).unwrap();
        }
    }
    let objects = all_objects(&repo).len();
    let server = serve_with(&base, |c| c.progress_interval = std::time::Duration::ZERO);
    let dest = tmp.path().join("clone.git");
    let out = gixd_tests::server::git_client(
        tmp.path(),
        &["-c", "protocol.version=2", "clone", "--progress", "--bare", &server.url("repo.git"), dest.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = remote_lines(&out.stderr);
    for title in ["Enumerating objects: ", "Counting objects: "] {
        let counts = running_counts(&lines, title);
        assert!(counts.len() >= 2, "'{title}' runs before it is done: {lines:?}");
        assert!(
            counts.windows(2).all(|w| w[0] <= w[1]) && counts.iter().all(|n| *n <= objects) && counts[0] < objects,
            "'{title}' counts up to {objects}: {counts:?}"
        );
    }
    assert!(lines.contains(&format!("Enumerating objects: {objects}, done.")), "{lines:?}");
    assert!(lines.contains(&format!("Counting objects: 100% ({objects}/{objects}), done.")), "{lines:?}");

    let behind = tmp.path().join("behind.git");
    git_ok(tmp.path(), &["clone", "-q", "--bare", "--no-local", repo.to_str().unwrap(), behind.to_str().unwrap()]);
    git_ok(&behind, &["update-ref", "HEAD", "HEAD~100"]);
    git_ok(&behind, &["-c", "gc.auto=0", "reflog", "expire", "--expire=now", "--all"]);
    git_ok(&behind, &["gc", "-q", "--prune=now"]);
    let out = gixd_tests::server::git_client(
        &behind,
        &["-c", "protocol.version=2", "fetch", "--progress", &server.url("repo.git"), "+refs/heads/*:refs/heads/*"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = remote_lines(&out.stderr);
    let done = lines
        .iter()
        .find_map(|l| l.strip_prefix("Compressing objects: 100% (")?.strip_suffix("), done."))
        .unwrap_or_else(|| panic!("{lines:?}"));
    let searched: usize = done.split('/').next().unwrap().parse().unwrap();
    let counts = running_counts(&lines, "Compressing objects: ");
    assert!(counts.len() >= 2, "the search runs before it is done: {lines:?}");
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]) && counts.iter().all(|n| *n <= searched) && counts[0] < searched,
        "it counts up to {searched}: {counts:?}"
    );
}

#[test]
fn what_a_repository_keeps_cached_is_dropped_once_no_request_used_it_for_cache_idle() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    fixture(&base);
    let server = serve_with(&base, |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.cache_idle = std::time::Duration::from_secs(4);
    });
    let cached = || metric(&scrape(server.metrics_addr.unwrap()), "gixd_repository_cached_values", &[]);
    let until = |what: &str, done: &dyn Fn(f64) -> bool| {
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let now = cached();
            if done(now) {
                return now;
            }
            assert!(std::time::Instant::now() < give_up, "{what}: still {now} values kept");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    clone(&server.url("repo.git"), &tmp.path().join("clone.git"), 2, &["--bare"]);
    // The sweep every 2 s counts what the clone left (its refs, pack list, decoded commits…),
    // kept while it was used in the last 4 s.
    let kept = until("the clone's values are counted", &|n| n > 0.0);
    assert!(kept >= 2.0, "a clone leaves at least its ref snapshot and pack list: {kept}");
    until("every value goes once the repository is idle", &|n| n == 0.0);
}
