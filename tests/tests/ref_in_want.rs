//! v2 `want-ref` (`uploadpack.allowRefInWant`): advertised and honoured only when the repository
//! allows it; the `wanted-refs` section names what each ref points at, byte for byte as git
//! upload-pack writes it; a hidden or unknown ref is refused, and stock git fetches through it.

use gixd_tests::server::{git_client, git_ok, http, pkt_lines, serve_with};
use gixd_tests::{commit_files, git};

fn request(hash: &str, args: &[&str]) -> Vec<u8> {
    gixd_tests::server::v2_fetch_request(hash, args)
}

/// The response up to the packfile section, as text lines (flush/delim as "----").
fn sections(body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for line in pkt_lines(body) {
        match line {
            None => out.push("----".to_owned()),
            Some(data) => {
                let text = String::from_utf8_lossy(&data).into_owned();
                let stop = text.starts_with("packfile");
                out.push(text.trim_end().to_owned());
                if stop {
                    break;
                }
            }
        }
    }
    out
}

#[test]
fn want_ref_is_answered_with_wanted_refs_as_git_does_and_only_when_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    commit_files(&repo, &[("a", b"1\n")], "one");
    git(&repo, &["branch", "topic"]);
    git(&repo, &["branch", "hidden"]);
    git(&repo, &["config", "uploadpack.hideRefs", "refs/heads/hidden"]);
    let server = serve_with(tmp.path(), |_| {});
    let post = |body: &[u8]| {
        http(
            server.addr,
            "POST",
            "/repo/git-upload-pack",
            &[("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")],
            body,
        )
        .body
    };
    let advertised = |server: &gixd::server::Running| {
        let body =
            http(server.addr, "GET", "/repo/info/refs?service=git-upload-pack", &[("Git-Protocol", "version=2")], b"")
                .body;
        String::from_utf8_lossy(&body).contains("ref-in-want")
    };
    let ask = request("sha1", &["want-ref refs/heads/topic", "done"]);

    // Off: not advertised, and the argument is refused like any unknown one.
    assert!(!advertised(&server));
    let text = sections(&post(&ask)).join("\n");
    assert!(text.contains("ERR unknown argument 'want-ref'"), "{text}");

    git(&repo, &["config", "uploadpack.allowRefInWant", "true"]);
    assert!(advertised(&server));
    let ours = sections(&post(&ask));
    let theirs = sections(&gixd_tests::git_upload_pack(&repo, &["--stateless-rpc"], true, &ask));
    assert_eq!(ours, theirs);
    assert!(ours.iter().any(|l| l == "wanted-refs"), "{ours:?}");

    for refused in ["refs/heads/hidden", "refs/heads/none"] {
        let text = sections(&post(&request("sha1", &[&format!("want-ref {refused}"), "done"]))).join("\n");
        assert!(text.contains(&format!("ERR unknown ref {refused}")), "{text}");
    }

    // Stock git fetches by ref name through it.
    let client = tmp.path().join("client");
    git_ok(tmp.path(), &["init", "-q", client.to_str().unwrap()]);
    let out = git_client(
        &client,
        &["-c", "protocol.version=2", "fetch", "-q", &server.url("repo"), "refs/heads/topic:refs/heads/got"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(git_ok(&client, &["rev-parse", "got"]), git_ok(&repo, &["rev-parse", "topic"]));
}
