//! upload-archive over git://, stock `git archive --remote` as the client: tar, tgz and zip
//! archives unpack to the same files (content, mode, symlinks) as `git archive` run in the
//! repository itself, also with a prefix, a `<ref>:<dir>` and a `<ref> <dir>`; the service is off
//! until enabled; only visible refs can be archived; bad arguments are refused with a reason.

use std::path::Path;
use std::process::{Command, Stdio};

use gixd::server::Running;
use gixd_tests::corpus::{self, Hash};
use gixd_tests::server::{git_client, git_ok, serve_with};

fn serve(base: &Path, enabled: bool) -> Running {
    serve_with(base, |c| {
        c.git_listen = Some("127.0.0.1:0".parse().unwrap());
        c.services.upload_archive = enabled;
    })
}

/// Run `git archive <args>` in `dir`, unpack its output with `unpack` into `dest`.
fn archive_into(dir: &Path, args: &[&str], format: &str, dest: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dest).unwrap();
    let file = dest.with_extension(format);
    let out = git_client(
        dir,
        &[&["archive", &format!("--format={format}"), "-o", file.to_str().unwrap()][..], args].concat(),
    );
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let status = match format {
        "zip" => Command::new("unzip")
            .args(["-q", file.to_str().unwrap(), "-d", dest.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status(),
        "tgz" => Command::new("tar").args(["-xzf", file.to_str().unwrap(), "-C", dest.to_str().unwrap()]).status(),
        _ => Command::new("tar").args(["-xf", file.to_str().unwrap(), "-C", dest.to_str().unwrap()]).status(),
    };
    // unzip exits 1 for warnings (a backslash in a file name reads to it like a separator).
    let code = status.unwrap().code();
    assert!(code == Some(0) || (format == "zip" && code == Some(1)), "unpacking the {format} archive: {code:?}");
    Ok(())
}

/// Every file below `dir`: path, kind, executable bit, content (or link target).
fn listing(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push((rel, format!("link -> {}", std::fs::read_link(&path).unwrap().display())));
            } else if meta.is_dir() {
                stack.push(path);
            } else {
                use std::os::unix::fs::PermissionsExt;
                let exec = meta.permissions().mode() & 0o111 != 0;
                let content = std::fs::read(&path).unwrap();
                let digest = gix_hash::hasher(gix_hash::Kind::Sha1);
                let mut digest = digest;
                digest.update(&content);
                out.push((rel, format!("file exec={exec} {}", digest.try_finalize().unwrap().to_hex())));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn archives_unpack_to_what_git_archive_writes_in_the_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let base = corpus::dir();
    let server = serve(&base, true);
    for (name, hash, dir) in [("one-commit", Hash::Sha1, "src"), ("odd-paths", Hash::Sha256, "UPPER")] {
        let repo = corpus::ensure(name, hash);
        let remote =
            format!("--remote=git://{}/{}", server.git_addr.unwrap(), repo.file_name().unwrap().to_str().unwrap());
        let cases: Vec<Vec<String>> = vec![
            vec!["main".into()],
            vec!["--prefix=top/".into(), "main".into()],
            vec![format!("main:{dir}")],
            vec!["main".into(), format!("{dir}/")],
        ];
        // unzip reads a backslash in a name as a separator or not depending on the archive's
        // writer: odd-paths (it has one) is compared as tar and tgz only.
        let formats: &[&str] = if name == "odd-paths" { &["tar", "tgz"] } else { &["tar", "tgz", "zip"] };
        for &format in formats {
            for (i, case) in cases.iter().enumerate() {
                let args: Vec<&str> = case.iter().map(String::as_str).collect();
                let ours = tmp.path().join(format!("{name}-{format}-{i}-ours"));
                let theirs = tmp.path().join(format!("{name}-{format}-{i}-theirs"));
                archive_into(tmp.path(), &[&[remote.as_str()][..], &args].concat(), format, &ours).unwrap();
                archive_into(&repo, &args, format, &theirs).unwrap();
                let (o, t) = (listing(&ours), listing(&theirs));
                assert!(!t.is_empty());
                assert_eq!(o, t, "{name} {format} {case:?}");
            }
        }
    }
}

#[test]
fn upload_archive_is_off_until_enabled() {
    let repo = corpus::ensure("wide", Hash::Sha1);
    let server = serve(&corpus::dir(), false);
    let tmp = tempfile::tempdir().unwrap();
    let remote = format!("--remote=git://{}/{}", server.git_addr.unwrap(), repo.file_name().unwrap().to_str().unwrap());
    let err = archive_into(tmp.path(), &[&remote, "main"], "tar", &tmp.path().join("x")).unwrap_err();
    assert!(err.contains("service 'git-upload-archive' is not enabled"), "{err}");
}

#[test]
fn only_visible_refs_are_archived_and_bad_arguments_get_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    gixd_tests::git(&repo, &["init", "-q"]);
    gixd_tests::commit_files(&repo, &[("a.txt", b"public\n")], "public");
    gixd_tests::git(&repo, &["checkout", "-q", "-b", "secret"]);
    gixd_tests::commit_files(&repo, &[("s.txt", b"secret\n")], "secret");
    let secret = git_ok(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    gixd_tests::git(&repo, &["checkout", "-q", "main"]);
    gixd_tests::git(&repo, &["config", "uploadpack.hideRefs", "refs/heads/secret"]);
    let server = serve(tmp.path(), true);
    let remote = format!("--remote=git://{}/repo", server.git_addr.unwrap());
    let attempt = |args: &[&str]| {
        archive_into(tmp.path(), &[&[remote.as_str()][..], args].concat(), "tar", &tmp.path().join("out"))
    };
    attempt(&["main"]).unwrap();
    for (args, expected) in [
        (&["secret"][..], "no such ref: secret"),
        (&[secret.as_str()][..], "no such ref"),
        (&["main~1"][..], "no such ref: main~1"),
        (&["main", "no/such/dir"][..], "pathspec 'no/such/dir' did not match any files"),
        (&["--mtime=2020-01-01", "main"][..], "unsupported option '--mtime=2020-01-01'"),
    ] {
        let err = attempt(args).unwrap_err();
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // And the server is still there.
    attempt(&["main"]).unwrap();
}
