//! gixd over git:// (git daemon's protocol) to stock git: clone and negotiated fetch in v2 and
//! v0 (the stateful conversation: rounds of haves on one connection), refs equal the server's,
//! `git fsck --full` clean, and errors a git user can read.

use std::path::{Path, PathBuf};

use gixd::server::Running;
use gixd_tests::server::{assert_fsck_clean, git_client, git_ok, refs, serve_with};
use gixd_tests::{commit_files, git, git_out};

fn work_repo(base: &Path) -> PathBuf {
    let repo = base.join("work");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    for n in 0..5 {
        commit_files(&repo, &[("file.txt", format!("version {n}\n").repeat(50).as_bytes())], &format!("c{n}"));
    }
    git(&repo, &["tag", "-a", "-m", "v1", "v1", "HEAD~2"]);
    git(&repo, &["repack", "-adq"]);
    repo
}

fn serve_git(base: &Path) -> Running {
    serve_with(base, |c| c.git_listen = Some("127.0.0.1:0".parse().unwrap()))
}

fn url(server: &Running, repo: &str) -> String {
    format!("git://{}/{repo}", server.git_addr.expect("git:// is served"))
}

#[test]
fn clone_and_negotiated_fetch_over_git_protocol_v2_and_v0() {
    for version in ["2", "0"] {
        let tmp = tempfile::tempdir().unwrap();
        let work = work_repo(tmp.path());
        let server = serve_git(tmp.path());
        let v = format!("protocol.version={version}");
        let dest = tmp.path().join("client");
        git_ok(tmp.path(), &["-c", &v, "clone", "-q", &url(&server, "work"), dest.to_str().unwrap()]);
        assert_eq!(git_out(&dest, &["rev-parse", "HEAD"]), git_out(&work, &["rev-parse", "HEAD"]));
        assert_eq!(refs(&dest, "refs/tags"), refs(&work, "refs/tags"));
        assert_fsck_clean(&dest);

        // The client has many commits of its own: several rounds of haves on one connection.
        git(&dest, &["checkout", "-q", "-b", "local"]);
        for n in 0..70 {
            commit_files(&dest, &[("local.txt", format!("local {n}\n").as_bytes())], &format!("local {n}"));
        }
        commit_files(&work, &[("new.txt", b"new on the server\n")], "server moves");
        git_ok(&dest, &["-c", &v, "fetch", "-q", "origin"]);
        assert_eq!(git_out(&dest, &["rev-parse", "origin/main"]), git_out(&work, &["rev-parse", "HEAD"]), "v{version}");
        assert_fsck_clean(&dest);
        // Nothing new: still fine.
        git_ok(&dest, &["-c", &v, "fetch", "-q", "origin"]);
    }
}

#[test]
fn ls_remote_over_git_protocol_lists_what_git_daemon_would() {
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path());
    let server = serve_git(tmp.path());
    for version in ["2", "0"] {
        let v = format!("protocol.version={version}");
        let ours = git_ok(tmp.path(), &["-c", &v, "ls-remote", &url(&server, "work")]);
        let theirs = git_ok(tmp.path(), &["-c", &v, "ls-remote", work.to_str().unwrap()]);
        assert_eq!(ours, theirs, "v{version}");
    }
}

#[test]
fn an_unknown_repository_or_service_is_an_error_git_prints() {
    let tmp = tempfile::tempdir().unwrap();
    work_repo(tmp.path());
    let server = serve_git(tmp.path());
    let out = git_client(tmp.path(), &["clone", &url(&server, "nope.git"), tmp.path().join("x").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("remote error: repository 'nope.git' not found"));
    let out = git_client(&tmp.path().join("work"), &["push", &url(&server, "work"), "HEAD:refs/heads/x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("service 'git-receive-pack' is not enabled"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_connection_that_never_sends_its_request_line_is_closed_after_the_init_timeout() {
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    work_repo(tmp.path());
    let server = serve_with(tmp.path(), |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.init_timeout = std::time::Duration::from_millis(500);
    });
    let mut silent = std::net::TcpStream::connect(server.git_addr.unwrap()).unwrap();
    silent.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let n = silent.read_to_end(&mut got).expect("closed by the server, not by our timeout");
    assert!(String::from_utf8_lossy(&got[..n]).contains("ERR"), "told why");
}
