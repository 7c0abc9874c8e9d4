//! Hooks: `pre-receive`, `update`, `post-receive`, `post-update` from the repository's hooks
//! directory (`core.hooksPath`, or `hooks/`), run as git runs them (arguments, stdin lines, the
//! environment) when present and executable. No hook, no process. Their output (stdout and
//! stderr, in the order written) goes back to the pusher.

use std::io::{Read, Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The executable hook `name` of the repository at `git_dir`, if there is one.
pub fn find(repo: &gix::Repository, git_dir: &Path, name: &str) -> Option<PathBuf> {
    let config = repo.config_snapshot();
    let dir = match config.trusted_path("core.hooksPath") {
        Ok(Some(path)) if path.is_absolute() => path,
        Ok(Some(path)) => git_dir.join(path),
        _ => git_dir.join("hooks"),
    };
    let hook = dir.join(name);
    let meta = std::fs::metadata(&hook).ok()?;
    (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(hook)
}

/// What a hook run produced.
pub struct Ran {
    pub success: bool,
    /// stdout and stderr, interleaved as written.
    pub output: Vec<u8>,
}

/// Run `hook` with `args`, `stdin` and extra environment, in `cwd`.
pub fn run(hook: &Path, args: &[&str], stdin: &[u8], env: &[(String, String)], cwd: &Path) -> std::io::Result<Ran> {
    // stdin from an unlinked file: a hook that writes much before reading cannot deadlock us.
    let mut input = crate::unlinked_file(cwd, "hook-input")?;
    input.write_all(stdin)?;
    input.rewind()?;
    // One pipe for both stdout and stderr keeps their order.
    let (mut reader, writer) = pipe()?;
    let writer_err = writer.try_clone()?;
    let mut child = Command::new(hook)
        .args(args)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::from(input))
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_err))
        .spawn()?;
    let mut output = Vec::new();
    // The command holds the only write ends now; reading ends when the hook (and anything it
    // left running with the pipe) is done. Output beyond 1 MiB is read and dropped.
    let mut buf = [0u8; 8192];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if output.len() < 1 << 20 {
            output.extend_from_slice(&buf[..n]);
        }
    }
    let status = child.wait()?;
    Ok(Ran { success: status.success(), output })
}

fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two fds on success; each is owned by exactly one File below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are not owned elsewhere.
    Ok(unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) })
}
