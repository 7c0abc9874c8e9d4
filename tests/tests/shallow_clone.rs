//! Shallow clones and fetches, stock git as the client, against stock git's upload-pack: after
//! every step (`--depth`, `--shallow-since`, `--shallow-exclude`, `--deepen`, `--depth` again,
//! `--unshallow`), over HTTP and git://, v2 and v0, the client's `shallow` file, refs and objects
//! equal those of the same client of `git upload-pack` (file://). Bad shallow requests get a clear
//! error and the server goes on serving.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gixd::server::Running;
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{all_objects, git_client, git_ok, refs, serve_with, v2_fetch_raw, v2_fetch_text};

/// (transport, protocol version)
const TRANSPORTS: [(&str, &str); 4] = [("http", "2"), ("http", "0"), ("git", "2"), ("git", "0")];

fn serve_corpus() -> Running {
    serve_with(&corpus::dir(), |c| c.git_listen = Some("127.0.0.1:0".parse().unwrap()))
}

fn url(server: &Running, transport: &str, repo: &Path) -> String {
    let name = repo.file_name().unwrap().to_str().unwrap();
    match transport {
        "http" => server.url(name),
        _ => format!("git://{}/{name}", server.git_addr.unwrap()),
    }
}

#[derive(Debug, PartialEq, Eq)]
struct ClientState {
    shallow: BTreeSet<String>,
    refs: BTreeMap<String, String>,
    objects: BTreeSet<String>,
}

fn state(client: &Path) -> ClientState {
    let shallow = std::fs::read_to_string(client.join("shallow")).unwrap_or_default();
    ClientState {
        shallow: shallow.lines().map(str::to_owned).collect(),
        refs: refs(client, "refs"),
        objects: all_objects(client),
    }
}

/// Run `steps` (each `clone <args…>` or `fetch <args…>`) as two clients, one of gixd and one of
/// git upload-pack, comparing their state after each step. Returns the shallow commit counts seen.
fn same_as_git(server: &Running, repo: &Path, steps: &[&[&str]]) -> Vec<usize> {
    let mut counts = Vec::new();
    for (transport, version) in TRANSPORTS {
        let tmp = tempfile::tempdir().unwrap();
        let v = format!("protocol.version={version}");
        let ours = tmp.path().join("ours");
        let theirs = tmp.path().join("theirs");
        for step in steps {
            let case = format!("{} {transport} v{version}: {step:?}", repo.file_name().unwrap().to_string_lossy());
            for (dest, url) in [(&ours, url(server, transport, repo)), (&theirs, format!("file://{}", repo.display()))]
            {
                let mut args = vec!["-c", v.as_str()];
                let out = match step[0] {
                    "clone" => {
                        args.extend(["clone", "-q", "--mirror"]);
                        args.extend(&step[1..]);
                        args.extend([url.as_str(), dest.to_str().unwrap()]);
                        git_client(tmp.path(), &args)
                    }
                    _ => {
                        args.extend(["fetch", "-q"]);
                        args.extend(&step[1..]);
                        git_client(dest, &args)
                    }
                };
                assert!(out.status.success(), "{case}: {}", String::from_utf8_lossy(&out.stderr));
            }
            let (o, t) = (state(&ours), state(&theirs));
            assert_eq!(o.shallow, t.shallow, "{case}: shallow commits differ from git's");
            assert_eq!(o.refs, t.refs, "{case}: refs differ from git's");
            let missing: Vec<_> = t.objects.difference(&o.objects).collect();
            let extra: Vec<_> = o.objects.difference(&t.objects).collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{case}: objects differ from git's: {} missing {missing:?}, {} extra {extra:?}",
                missing.len(),
                extra.len()
            );
            // fsck says the same of both (a shallow history can leave git's client a dangling
            // commit, and ours then has the same one).
            let fsck = |dir: &Path| {
                let out = git_client(dir, &["fsck", "--full", "--strict"]);
                (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
            };
            assert_eq!(fsck(&ours), fsck(&theirs), "{case}: fsck differs");
            counts.push(o.shallow.len());
        }
    }
    counts
}

#[test]
fn depth_then_deepen_then_depth_then_unshallow_leave_the_client_as_git_upload_pack_does() {
    let server = serve_corpus();
    for (name, hash) in [("merges", Hash::Sha1), ("merges", Hash::Sha256), ("linear", Hash::Sha1)] {
        let repo = corpus::ensure(name, hash);
        let counts = same_as_git(
            &server,
            &repo,
            &[&["clone", "--depth", "1"], &["fetch", "--deepen=2"], &["fetch", "--depth=4"], &["fetch", "--unshallow"]],
        );
        // The steps did something: shallow after the clone, not after --unshallow.
        assert!(counts[0] > 0 && counts[3] == 0, "{name}: {counts:?}");
    }
}

#[test]
fn shallow_since_and_shallow_exclude_leave_the_client_as_git_upload_pack_does() {
    let server = serve_corpus();
    for hash in Hash::ALL {
        let repo = corpus::ensure("merges", hash);
        let date = |rev: &str| git_ok(&repo, &["log", "-1", "--format=%cI", rev]).trim().to_owned();
        let (newer, older) = (date("main~1"), date("topic1~3"));
        same_as_git(
            &server,
            &repo,
            &[&["clone", &format!("--shallow-since={newer}")], &["fetch", &format!("--shallow-since={older}")]],
        );
        same_as_git(&server, &repo, &[&["clone", "--shallow-exclude=topic1"], &["fetch", "--shallow-exclude=topic2"]]);
    }
}

#[test]
fn bad_shallow_requests_get_a_clear_error_and_the_server_keeps_serving() {
    let server = serve_corpus();
    let repo = corpus::ensure("merges", Hash::Sha1);
    let name = repo.file_name().unwrap().to_str().unwrap();
    let head = git_ok(&repo, &["rev-parse", "main"]).trim().to_owned();
    for (args, expected) in [
        (&["deepen 0"][..], "invalid deepen: 0"),
        (&["deepen -3"][..], "invalid deepen: -3"),
        (&["deepen many"][..], "invalid deepen: many"),
        (&["deepen-since yesterday"][..], "invalid deepen-since: yesterday"),
        (&["deepen-not refs/heads/no-such-branch"][..], "deepen-not is not a ref: refs/heads/no-such-branch"),
        (&["deepen 2", "deepen-not topic1"][..], "deepen and deepen-since (or deepen-not) cannot be used together"),
        (&["deepen-since 1"][..], ""), // every commit is newer: nothing is shallow, no error
        (&["deepen-since 99999999999"][..], "no commits selected for shallow requests"),
    ] {
        let text = v2_fetch_text(server.addr, name, &head, args);
        if expected.is_empty() {
            assert!(!text.contains("ERR"), "{args:?}: {text}");
        } else {
            assert!(text.contains(&format!("ERR {expected}")), "{args:?}: expected '{expected}', got {text:?}");
        }
    }
    // A shallow line naming a tree is refused, as git does.
    let tree = git_ok(&repo, &["rev-parse", "main^{tree}"]).trim().to_owned();
    let text = v2_fetch_text(server.addr, name, &head, &[&format!("shallow {tree}"), "deepen 1"]);
    assert!(text.contains(&format!("ERR invalid shallow object {tree}")), "{text}");
    // And everyone else is still served.
    let tmp = tempfile::tempdir().unwrap();
    git_ok(tmp.path(), &["clone", "-q", "--depth", "1", &server.url(name), tmp.path().join("c").to_str().unwrap()]);
}

#[test]
fn a_shallow_line_naming_a_commit_no_visible_ref_reaches_does_not_unshallow_it() {
    // A client claiming to be shallow at a commit only a hidden ref reaches would, unshallowed,
    // be sent that commit's parents: the claim is ignored instead.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    gixd_tests::git(&repo, &["init", "-q"]);
    gixd_tests::commit_files(&repo, &[("a", b"1\n")], "one");
    gixd_tests::git(&repo, &["checkout", "-q", "-b", "secret"]);
    gixd_tests::commit_files(&repo, &[("s", b"secret parent\n")], "secret parent");
    gixd_tests::commit_files(&repo, &[("s", b"secret child\n")], "secret child");
    let secret_child = git_ok(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let secret_parent = git_ok(&repo, &["rev-parse", "HEAD~1"]).trim().to_owned();
    gixd_tests::git(&repo, &["checkout", "-q", "main"]);
    gixd_tests::git(&repo, &["config", "uploadpack.hideRefs", "refs/heads/secret"]);
    let server = serve_with(tmp.path(), |_| {});
    let main = git_ok(&repo, &["rev-parse", "main"]).trim().to_owned();
    // Both ways a client's shallow commit gets unshallowed: --unshallow, and --deepen (relative
    // to the client's shallow commits).
    for deepen in [&["deepen 2147483647"][..], &["deepen 1", "deepen-relative"][..]] {
        let mut args = vec![format!("shallow {secret_child}")];
        args.extend(deepen.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = v2_fetch_text(server.addr, "repo", &main, &args);
        assert!(!text.contains(&format!("unshallow {secret_child}")), "{deepen:?}: {text}");
        assert!(!text.contains("ERR"), "{text}");
        let pack = gixd_tests::server::sideband_pack(&http_fetch_body(&server, &main, &args));
        let sent = gixd_tests::server::objects_in_pack(&pack, "sha1");
        assert!(!sent.contains(&secret_parent), "{deepen:?}: the hidden commit's parent was sent");
    }
}

fn http_fetch_body(server: &Running, want: &str, args: &[&str]) -> Vec<u8> {
    let body = v2_fetch_raw(server.addr, "repo", want, args);
    // Skip to the packfile section.
    let at = body.windows(b"packfile\n".len()).position(|w| w == b"packfile\n").expect("a packfile section");
    body[at + b"packfile\n".len()..].to_vec()
}
