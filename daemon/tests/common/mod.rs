//! What the binary's integration tests share: stock git run with no config but a test identity,
//! and `gixd serve` started and its address read from the line it prints.

#![allow(dead_code, reason = "each test file uses what it needs of this module")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// `git <args>` in `dir`: no system or global config, no prompts, a fixed identity.
pub fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap()
}

/// Like [`git`], but it must succeed; its output, trimmed.
pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args);
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A `gixd serve` child, killed when dropped (unless it is gone already).
pub struct Server {
    pub child: Child,
    /// `host:port` of the URL it printed.
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `gixd serve` as `command` says (one worker thread; its stdout read, its stderr
/// dropped), once it printed the URL it serves.
pub fn start_serve(mut command: Command) -> Server {
    let mut child =
        command.env("GIXD_WORKER_THREADS", "1").stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    let addr = line.split("http://").nth(1).unwrap().split('/').next().unwrap().to_owned();
    Server { child, addr }
}
