//! Refs hidden by `transfer.hideRefs` / `uploadpack.hideRefs` are not served: not advertised
//! (byte-identical to git upload-pack under the same config), not wantable, and what only they
//! reach is never sent, not even as a delta base. Files and reftable ref storage alike.

use std::collections::BTreeSet;

use gixd_tests::server::{all_objects, clone, http, pkt, pkt_lines, refs, serve};
use gixd_tests::{commit_files, git, git_command, git_out};

fn git_upload_pack(repo: &std::path::Path, args: &[&str], v2: bool, stdin: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut cmd = git_command(repo);
    cmd.arg("upload-pack").args(args).arg(repo);
    if v2 {
        cmd.env("GIT_PROTOCOL", "version=2");
    }
    let mut child = cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap().stdout
}

#[test]
fn hidden_refs_are_neither_advertised_nor_wantable_nor_sent() {
    hidden_refs("files");
}

/// The same with the refs in reftable: hiding is decided above the ref storage.
#[test]
fn hidden_refs_of_a_reftable_repository_are_neither_advertised_nor_wantable_nor_sent() {
    hidden_refs("reftable");
}

fn hidden_refs(ref_format: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", &format!("--ref-format={ref_format}")]);
    let shared: String = (0..200).map(|n| format!("shared line {n}\n")).collect();
    commit_files(&repo, &[("data.txt", shared.as_bytes())], "public");
    git(&repo, &["checkout", "-q", "-b", "secret"]);
    let mut secret = shared.clone();
    secret.push_str(&"password=hunter2\n".repeat(40));
    commit_files(&repo, &[("data.txt", secret.as_bytes())], "secret");
    let secret_tip = git_out(&repo, &["rev-parse", "secret"]);
    let secret_blob = git_out(&repo, &["rev-parse", "secret:data.txt"]);
    git(&repo, &["checkout", "-q", "main"]);
    git(&repo, &["branch", "-q", "other"]);
    git(&repo, &["repack", "-adfq"]);
    git(&repo, &["config", "transfer.hideRefs", "refs/heads/"]);
    git(&repo, &["config", "--add", "uploadpack.hideRefs", "!refs/heads/main"]);
    git(&repo, &["config", "--add", "uploadpack.hideRefs", "!refs/heads/other"]);

    let server = serve(tmp.path());
    // The advertisement and ls-refs are git's, byte for byte.
    let ours_v0 = http(server.addr, "GET", "/repo/info/refs?service=git-upload-pack", &[], b"").body;
    let ours_v0_lines: Vec<String> =
        pkt_lines(&ours_v0)[2..].iter().flatten().map(|l| String::from_utf8_lossy(l).into_owned()).collect();
    let git_v0 = git_upload_pack(&repo.join(".git"), &["--stateless-rpc", "--advertise-refs"], false, b"");
    let git_v0_lines: Vec<String> =
        pkt_lines(&git_v0).iter().flatten().map(|l| String::from_utf8_lossy(l).into_owned()).collect();
    let names =
        |lines: &[String]| lines.iter().map(|l| l.split(['\0', '\n']).next().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(&ours_v0_lines), names(&git_v0_lines), "v0 advertised refs");
    assert!(!ours_v0_lines.iter().any(|l| l.contains("refs/heads/secret")));

    let mut ls_refs = pkt("command=ls-refs\n");
    ls_refs.extend(b"0001");
    for a in ["peel\n", "symrefs\n", "ref-prefix refs/heads/\n", "ref-prefix HEAD\n"] {
        ls_refs.extend(pkt(a));
    }
    ls_refs.extend(b"0000");
    let headers = [("Content-Type", "application/x-git-upload-pack-request"), ("Git-Protocol", "version=2")];
    let ours = http(server.addr, "POST", "/repo/git-upload-pack", &headers, &ls_refs).body;
    let theirs = git_upload_pack(&repo.join(".git"), &["--stateless-rpc"], true, &ls_refs);
    assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&theirs), "ls-refs");

    // Wanting the hidden tip is refused.
    let mut fetch = pkt("command=fetch\n");
    fetch.extend(b"0001");
    fetch.extend(pkt(&format!("want {secret_tip}\n")));
    fetch.extend(pkt("done\n"));
    fetch.extend(b"0000");
    let response = http(server.addr, "POST", "/repo/git-upload-pack", &headers, &fetch);
    assert!(response.text().contains("is not our ref"), "{}", response.text());

    // A mirror clone gets the visible branches only, and never the secret blob, which is the
    // delta base of main's data.txt in the server's pack.
    for version in [2, 0] {
        let dest = tmp.path().join(format!("client{version}"));
        clone(&server.url("repo"), &dest, version, &["--mirror"]);
        let got: BTreeSet<String> = refs(&dest, "refs").into_keys().collect();
        assert_eq!(got, BTreeSet::from(["refs/heads/main".to_owned(), "refs/heads/other".to_owned()]));
        assert!(!all_objects(&dest).contains(&secret_blob), "the hidden branch's blob was sent over v{version}");
    }
}
