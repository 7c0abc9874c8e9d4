//! Wants by object id with stock git (`git fetch URL <id>`), over HTTP and git://: protocol v2
//! serves any object reachable from a visible ref whatever the settings (gitprotocol-v2: "wants
//! can be anything"); over v0 git's client asks only when the server advertises
//! `allow-reachable-sha1-in-want` (`uploadpack.allowReachableSHA1InWant`, or allowAny, narrowed)
//! — and an object only a deleted or hidden ref reached is refused whatever the setting.

use gixd_tests::server::{git_client, git_ok, http, pkt_lines, serve_with};
use gixd_tests::{commit_files, git, git_out};

fn setup(config: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    for n in 0..4 {
        commit_files(&repo, &[("f.txt", format!("v{n}\n").as_bytes())], &format!("c{n}"));
    }
    let old = git_out(&repo, &["rev-parse", "HEAD~2"]);
    git(&repo, &["checkout", "-q", "-b", "gone"]);
    commit_files(&repo, &[("f.txt", b"unreachable soon\n")], "gone");
    let gone = git_out(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "main"]);
    git(&repo, &["branch", "-q", "-D", "gone"]);
    for (k, v) in config {
        git(&repo, &["config", k, v]);
    }
    (tmp, repo, old, gone)
}

static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn fetch_by_id(tmp: &std::path::Path, url: &str, id: &str, version: &str) -> std::process::Output {
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let client = tmp.join(format!("client-{version}-{}-{n}", &id[..8]));
    git_ok(tmp, &["init", "-q", client.to_str().unwrap()]);
    git_client(&client, &["-c", &format!("protocol.version={version}"), "fetch", "-q", url, id])
}

#[test]
fn an_inner_commit_is_served_over_v2_always_and_over_v0_when_reachable_wants_are_allowed() {
    for (config, allowed) in [
        (&[][..], false),
        (&[("uploadpack.allowReachableSHA1InWant", "true")][..], true),
        (&[("uploadpack.allowAnySHA1InWant", "true")][..], true),
    ] {
        let (tmp, repo, old, gone) = setup(config);
        let server = serve_with(tmp.path(), |c| c.git_listen = Some("127.0.0.1:0".parse().unwrap()));
        let git_url = format!("git://{}/repo", server.git_addr.unwrap());
        for url in [server.url("repo"), git_url] {
            for version in ["2", "0"] {
                let out = fetch_by_id(tmp.path(), &url, &old, version);
                assert_eq!(
                    out.status.success(),
                    allowed || version == "2",
                    "{config:?} {url} v{version}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                // The commit of the deleted branch is never served.
                let out = fetch_by_id(tmp.path(), &url, &gone, version);
                assert!(!out.status.success(), "{config:?} {url} v{version}: an unreachable commit was served");
            }
        }
        // The v0 advertisement says what git's would.
        let ours = http(server.addr, "GET", "/repo/info/refs?service=git-upload-pack", &[], b"").body;
        let first = String::from_utf8_lossy(pkt_lines(&ours)[2].as_deref().unwrap()).into_owned();
        assert_eq!(first.contains("allow-reachable-sha1-in-want"), allowed, "{first}");
        let _ = repo;
    }
}
