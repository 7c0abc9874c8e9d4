//! Helpers shared by the integration tests: stock git run with a fixed identity and clock, the
//! process's own thread count, and syscall counts of a test re-run under strace.

pub mod corpus;
pub mod reftable_corpus;
pub mod server;
pub mod tls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Run stock git in `dir` with a fixed identity and dates, no user or system config, one thread
/// for packing: the same inputs give the same object ids and pack bytes on every machine.
pub fn git(dir: &Path, args: &[&str]) -> Output {
    let out = git_command(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?} in {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    out
}

/// `git` with the deterministic environment, for callers that need stdin or their own checks.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_AUTHOR_DATE", "1700000000 +0000")
        .env("GIT_COMMITTER_DATE", "1700000000 +0000")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .args(["-c", "pack.threads=1", "-c", "init.defaultBranch=main", "-c", "gc.auto=0"]);
    cmd
}

/// The access log at `log`, a JSON record a line (none if there is no log yet).
pub fn access_log_records(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `GIT_SSH_COMMAND` for stock git that offers only `key` and trusts only the hosts in
/// `known_hosts` (no user or system ssh configuration, never a prompt).
pub fn ssh_command(key: &Path, known_hosts: &Path) -> String {
    format!(
        "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null",
        key.display(),
        known_hosts.display()
    )
}

/// Standard output of a git command, trimmed.
pub fn git_out(dir: &Path, args: &[&str]) -> String {
    String::from_utf8(git(dir, args).stdout).expect("utf8").trim().to_owned()
}

/// The threads of this process now (entries of /proc/self/task).
pub fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").expect("linux /proc").count()
}

/// A fresh bare-or-not repository in a temp dir; keep the guard alive as long as it is used.
pub fn temp_repo(bare: bool) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join(if bare { "repo.git" } else { "repo" });
    std::fs::create_dir_all(&path).unwrap();
    if bare {
        git(&path, &["init", "-q", "--bare"]);
    } else {
        git(&path, &["init", "-q"]);
    }
    (tmp, path)
}

/// Write `files` (path, content) into the work tree, commit them with `message`, return the commit id.
pub fn commit_files(repo: &Path, files: &[(&str, &[u8])], message: &str) -> String {
    for (path, content) in files {
        let full = repo.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "--allow-empty", "-m", message]);
    git_out(repo, &["rev-parse", "HEAD"])
}

/// Counts of the syscalls named in `trace` (strace's `-e trace=` syntax) made by the test
/// `inner` of the current test binary and every thread it starts, run under `strace -f -c`.
/// `None` when strace is not installed (the caller decides whether that may pass).
///
/// The inner test must be `#[ignore]`d so that it only runs when asked for here.
pub fn syscall_counts_of_test(inner: &str, trace: &str) -> Option<BTreeMap<String, u64>> {
    let have_strace = Command::new("strace").arg("-V").output().map(|o| o.status.success()).unwrap_or(false);
    if !have_strace {
        return None;
    }
    let out_file = tempfile::NamedTempFile::new().unwrap();
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("strace")
        .args(["-f", "-c", "-U", "name,calls", "-e"])
        .arg(format!("trace={trace}"))
        .arg("-o")
        .arg(out_file.path())
        .arg("--")
        .arg(exe)
        .args(["--exact", inner, "--ignored", "--test-threads=1", "-q"])
        .status()
        .expect("strace runs");
    assert!(status.success(), "inner test {inner} failed under strace");
    let text = std::fs::read_to_string(out_file.path()).unwrap();
    Some(parse_strace_summary(&text))
}

/// Run `cmd` (a git command) with `stdin` fed to it; it must succeed; its stdout.
pub fn output_with_input(mut cmd: Command, stdin: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child =
        cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("git runs");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{cmd:?} failed");
    out.stdout
}

/// Stock `git upload-pack <args> <repo>` (v2 when asked) given `stdin`: git's answer to compare with.
pub fn git_upload_pack(repo: &Path, args: &[&str], v2: bool, stdin: &[u8]) -> Vec<u8> {
    let mut cmd = git_command(repo);
    cmd.arg("upload-pack").args(args).arg(repo);
    if v2 {
        cmd.env("GIT_PROTOCOL", "version=2");
    }
    output_with_input(cmd, stdin)
}

/// Run the `#[ignore]`d test `inner` of the current test binary under `strace -f`, with `envs`,
/// and return the thread creations between its two `<mark>()` calls (it must make exactly two
/// and pass). `None` when strace is not installed, which CI does not allow.
pub fn threads_created_by_inner_test(
    inner: &str,
    mark: &str,
    envs: &[(&str, &std::ffi::OsStr)],
) -> Option<Vec<String>> {
    let have_strace = Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success());
    if !have_strace {
        assert!(std::env::var_os("CI").is_none(), "strace is required in CI (.ci/run installs it)");
        eprintln!("strace is not installed: not counted");
        return None;
    }
    let log = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", &format!("trace=clone,clone3,{mark}"), "-o"])
        .arg(log.path())
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", inner, "--ignored", "--test-threads=1", "-q"])
        .envs(envs.iter().copied())
        .status()
        .expect("strace runs");
    assert!(status.success(), "inner test {inner} failed under strace");
    let log = std::fs::read_to_string(log.path()).unwrap();
    assert_eq!(log.matches(&format!("{mark}()")).count(), 2, "both window markers were seen");
    Some(threads_created_in_window(&log, mark))
}

/// Thread creations (clone/clone3 with CLONE_THREAD) between the two `<mark>()` calls of an
/// `strace -f` log: the window a test opens and closes around the work it measures.
pub fn threads_created_in_window(log: &str, mark: &str) -> Vec<String> {
    let mut inside = false;
    let mut created = Vec::new();
    for line in log.lines() {
        if line.contains(&format!("{mark}()")) {
            inside = !inside;
            continue;
        }
        let is_clone = line.contains("clone(") || line.contains("clone3(");
        if inside && is_clone && line.contains("CLONE_THREAD") {
            created.push(line.to_owned());
        }
    }
    created
}

/// Parse the table `strace -c -U name,calls` writes: a header, dashes, `name calls` rows, a total.
pub fn parse_strace_summary(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if let (Some(name), Some(calls), None) = (words.next(), words.next(), words.next())
            && let Ok(calls) = calls.parse::<u64>()
            && name != "total"
        {
            out.insert(name.to_owned(), calls);
        }
    }
    out
}

pub use bench_support::noise;

/// This process's peak resident memory so far (`VmHWM`), in KiB: a test's in-process server
/// counts in it.
pub fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        })
        .expect("VmHWM in /proc/self/status")
}

/// The files of `objects/pack` (`objects`: an objects directory), sorted.
pub fn pack_files(objects: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(objects.join("pack"))
        .expect("a pack directory")
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    files
}

/// The index of the one pack in `objects` (an objects directory) and the object rows of
/// `git verify-pack -v` on it, split into words: `id type size size-in-pack offset` and, for a
/// delta, `depth base-id` after them.
pub fn verify_pack(objects: &Path) -> (PathBuf, Vec<Vec<String>>) {
    let idx = pack_files(objects).into_iter().find(|p| p.extension().is_some_and(|e| e == "idx")).expect("one pack");
    let rows = verify_pack_file(&idx);
    (idx, rows)
}

/// `git verify-pack -v` of one pack's index: a row per object (id, kind, size, size in pack,
/// offset, and for a delta its depth and base).
pub fn verify_pack_file(idx: &Path) -> Vec<Vec<String>> {
    let out = git_out(idx.parent().expect("in a directory"), &["verify-pack", "-v", idx.to_str().expect("utf8 path")]);
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|w| (w.len() == 5 || w.len() == 7) && w[1] != "chain")
        .collect()
}

/// A selection request for `wants` by a client that has `common`: no tags included, no filter,
/// no shallow boundary, no progress, no commit-graph (set the others by struct update).
pub fn select_request<'a>(
    wants: &'a [gix_hash::ObjectId],
    common: &'a [gix_hash::ObjectId],
    refs: &'a gixd::repo::RefSnapshot,
) -> gixd::select::Request<'a> {
    gixd::select::Request {
        wants,
        common,
        include_tag: false,
        refs,
        filter: gixd::filter::Filter::default(),
        boundary: None,
        progress: None,
        commit_graph: None,
    }
}

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where stock git keeps its programs (`git --exec-path`).
pub fn git_exec_path() -> PathBuf {
    let out = Command::new("git").arg("--exec-path").output().expect("git runs");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Stock git-daemon itself (not `git daemon`, which runs it as a child a kill leaves running)
/// serving every repository below `base` on a free loopback port, with `extra` flags; and the port.
pub fn git_daemon(base: &Path, extra: &[&str]) -> (Killed, u16) {
    let port = bench_support::run::free_port().expect("a free port");
    let child = Command::new(git_exec_path().join("git-daemon"))
        .args(["--reuseaddr", "--export-all", "--listen=127.0.0.1"])
        .args(extra)
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", base.display()))
        .arg(base)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("git daemon starts");
    bench_support::run::wait_for_port(port).expect("git daemon listens");
    (Killed(child), port)
}

#[cfg(test)]
mod tests {
    #[test]
    fn strace_summary_rows_are_read_and_the_total_is_not() {
        let text = "syscall            calls\n------------------ -----\nclone3                 2\nclock_nanosleep        1\n------------------ -----\ntotal                  3\n";
        let got = super::parse_strace_summary(text);
        assert_eq!(got.get("clone3"), Some(&2));
        assert_eq!(got.get("clock_nanosleep"), Some(&1));
        assert_eq!(got.len(), 2);
    }
}
