//! Serving a push creates no thread: the pack is indexed inline (one thread) on a blocking thread
//! started with the server, the objects checked and the refs moved there too. Counted under
//! strace: every clone/clone3 with CLONE_THREAD between the markers around one served push of a
//! history (the corpus's merges repository, pushed into an empty one).

use std::path::PathBuf;

use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{http, pkt, serve_with};
use gixd_tests::threads_created_by_inner_test;

const MARK: &str = "getppid";

#[test]
#[ignore = "runs under strace, started by serving_a_push_creates_no_thread"]
fn inner_serve_one_push() {
    let base = PathBuf::from(std::env::var("GIXD_TEST_BASE").unwrap());
    let body = std::fs::read(std::env::var("GIXD_TEST_BODY").unwrap()).unwrap();
    let secret = std::env::var("GIXD_TEST_SECRET").unwrap();
    let tokens = PathBuf::from(std::env::var("GIXD_TEST_TOKENS").unwrap());
    let server = serve_with(&base, move |c| c.token_file = Some(tokens));
    let auth = format!("Bearer {secret}");
    let _ = std::os::unix::process::parent_id(); // window opens
    let response = http(
        server.addr,
        "POST",
        "/target.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request"), ("Authorization", &auth)],
        &body,
    );
    let _ = std::os::unix::process::parent_id(); // window closes
    assert_eq!(response.status, 200);
    assert!(String::from_utf8_lossy(&response.body).contains("ok refs/heads/main"), "{}", response.text());
}

#[test]
fn serving_a_push_creates_no_thread() {
    let source = corpus::ensure("merges", Hash::Sha1);
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let target = base.join("target.git");
    std::fs::create_dir_all(&target).unwrap();
    gixd_tests::git(&target, &["init", "-q", "--bare", "-b", "main"]);
    let tip = gixd_tests::git_out(&source, &["rev-parse", "main"]);
    let pack = {
        let mut cmd = gixd_tests::git_command(&source);
        cmd.args(["pack-objects", "--revs", "--stdout", "-q"]);
        gixd_tests::output_with_input(cmd, format!("{tip}\n").as_bytes())
    };
    let mut body = pkt(&format!("{} {tip} refs/heads/main\0report-status\n", "0".repeat(40)));
    body.extend(b"0000");
    body.extend(&pack);
    let body_file = tmp.path().join("body");
    std::fs::write(&body_file, body).unwrap();
    let tokens = tmp.path().join("tokens.toml");
    let mut store = gixd::auth::TokenStore::load(&tokens).unwrap();
    let (_, secret) = store.add("t", "*", true).unwrap();
    store.save().unwrap();

    let envs = [
        ("GIXD_TEST_BASE", base.as_os_str()),
        ("GIXD_TEST_BODY", body_file.as_os_str()),
        ("GIXD_TEST_SECRET", std::ffi::OsStr::new(&secret)),
        ("GIXD_TEST_TOKENS", tokens.as_os_str()),
    ];
    let Some(created) = threads_created_by_inner_test("inner_serve_one_push", MARK, &envs) else { return };
    assert!(created.is_empty(), "serving one push created {} thread(s):\n{}", created.len(), created.join("\n"));
    assert_eq!(gixd_tests::git_out(&target, &["rev-parse", "main"]), tip);
}
