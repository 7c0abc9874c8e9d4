//! The v2 `object-info` command: advertised and served only where `transfer.advertiseObjectInfo`
//! turns it on (as git), its answer byte-identical to `git upload-pack`'s for objects a client
//! may read and for missing ones, and an object only a hidden ref reaches answered exactly as a
//! missing one (git itself would give its size away).

use std::path::Path;

use gixd::config::Exports;
use gixd_tests::server::{http, pkt, serve_with};
use gixd_tests::{commit_files, git, git_out, git_upload_pack};

fn request(oids: &[&str]) -> Vec<u8> {
    let mut body = pkt("command=object-info\n");
    body.extend_from_slice(b"0001");
    body.extend(pkt("size\n"));
    for oid in oids {
        body.extend(pkt(&format!("oid {oid}\n")));
    }
    body.extend_from_slice(b"0000");
    body
}

fn gixd_answer(addr: std::net::SocketAddr, body: &[u8]) -> Vec<u8> {
    let response = http(
        addr,
        "POST",
        "/repo.git/git-upload-pack",
        &[("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")],
        body,
    );
    assert_eq!(response.status, 200);
    response.body
}

fn advertisement(addr: std::net::SocketAddr) -> Vec<u8> {
    http(addr, "GET", "/repo.git/info/refs?service=git-upload-pack", &[("Git-Protocol", "version=2")], b"").body
}

/// A repository with main (a commit, a blob) and `refs/hidden/secret` (a commit with a blob of
/// its own), hidden by `uploadpack.hideRefs`; the ids of (main's blob, main's commit, the secret
/// blob, the secret commit).
fn repository(dir: &Path) -> [String; 4] {
    git(dir, &["init", "-q", "-b", "main"]);
    let main = commit_files(dir, &[("file.txt", b"visible\n")], "visible");
    let blob = git_out(dir, &["rev-parse", "HEAD:file.txt"]);
    git(dir, &["checkout", "-q", "-b", "secret"]);
    let secret = commit_files(dir, &[("secret.txt", b"only a hidden ref reaches this\n")], "secret");
    let secret_blob = git_out(dir, &["rev-parse", "HEAD:secret.txt"]);
    git(dir, &["update-ref", "refs/hidden/secret", "secret"]);
    git(dir, &["checkout", "-q", "main"]);
    git(dir, &["branch", "-D", "secret"]);
    [blob, main, secret_blob, secret]
}

#[test]
fn object_info_answers_sizes_as_git_does_and_an_unreadable_object_as_a_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&base).unwrap();
    let [blob, commit, secret_blob, secret] = repository(&work);
    let repo = base.join("repo.git");
    git(tmp.path(), &["clone", "-q", "--mirror", work.to_str().unwrap(), repo.to_str().unwrap()]);
    git(&repo, &["config", "uploadpack.hideRefs", "refs/hidden"]);
    let server = serve_with(&base, |c| c.exports = Exports::All);
    let missing = "1".repeat(40);

    // Off by default, as in git: not advertised, and refused when asked for anyway.
    let advertised = advertisement(server.addr);
    assert!(!String::from_utf8_lossy(&advertised).contains("object-info"));
    let refused = gixd_answer(server.addr, &request(&[&blob]));
    assert!(String::from_utf8_lossy(&refused).contains("ERR"), "{}", String::from_utf8_lossy(&refused));

    git(&repo, &["config", "transfer.advertiseObjectInfo", "true"]);
    let ours = String::from_utf8_lossy(&advertisement(server.addr)).into_owned();
    let theirs =
        String::from_utf8(git_upload_pack(&repo, &["--stateless-rpc", "--advertise-refs"], true, b"")).unwrap();
    let normalize = |s: &str| s.lines().filter(|l| !l.contains("agent=")).map(str::to_owned).collect::<Vec<_>>();
    let ours_caps: Vec<String> = normalize(&ours).into_iter().skip_while(|l| !l.contains("version 2")).collect();
    assert_eq!(ours_caps, normalize(&theirs), "the advertisement as git's, object-info included");

    // Readable and missing objects: byte for byte git's answer (a bad id too).
    let asked = [blob.as_str(), commit.as_str(), missing.as_str(), "not-an-id"];
    let body = request(&asked);
    let expected = git_upload_pack(&repo, &["--stateless-rpc"], true, &body);
    assert_eq!(
        String::from_utf8_lossy(&gixd_answer(server.addr, &body)),
        String::from_utf8_lossy(&expected),
        "gixd answers object-info as git does"
    );
    assert!(String::from_utf8_lossy(&expected).contains(&format!("{blob} 8")), "git gives the blob's size");

    // What only the hidden ref reaches: git would give its size; gixd answers as for a missing
    // object, in git's own words for one.
    for hidden in [&secret_blob, &secret] {
        let ours = gixd_answer(server.addr, &request(&[hidden]));
        let as_missing =
            String::from_utf8_lossy(&git_upload_pack(&repo, &["--stateless-rpc"], true, &request(&[&missing])))
                .replace(&missing, hidden);
        assert_eq!(String::from_utf8_lossy(&ours), as_missing, "an unreadable object is answered as a missing one");
        let git_says =
            String::from_utf8_lossy(&git_upload_pack(&repo, &["--stateless-rpc"], true, &request(&[hidden])))
                .into_owned();
        assert_ne!(git_says, as_missing, "git itself answers with the size (the case is real)");
    }
}
