//! Running what a benchmark drives: commands whose output it reads (git above all), the arms'
//! order in a round, and the loopback ports its servers listen on.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

/// What `cmd` printed (trimmed); its standard error in the error if it failed.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// `git` with `args` in `dir`, as [`output`].
pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    output(Command::new("git").current_dir(dir).args(args))
}

/// `git -c k=v … args` in `dir`: each of `config` as a `-c` setting before the command.
pub fn git_with(dir: &Path, config: &[&str], args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir);
    for setting in config {
        cmd.args(["-c", setting]);
    }
    output(cmd.args(args))
}

/// The arms' order in `round`: as given, reversed every other round.
pub fn round_order(arms: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..arms).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// A free TCP port on loopback (bound, then released).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Wait (up to ten seconds) until something accepts connections on loopback's `port`.
pub fn wait_for_port(port: u16) -> Result<()> {
    for _ in 0..400 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    bail!("nothing listens on port {port}")
}

/// Whether this process runs as root (the benchmarks that put servers in cgroups need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
