//! Debian's OpenSSH `sshd` for tests and benchmarks: started in the foreground on a loopback port
//! with a configuration of the caller's own (no PAM, no passwords, public keys only,
//! `GIT_PROTOCOL` accepted), host keys of both kinds a git client may need (Ed25519, and ECDSA
//! P-256 for clients that predate Ed25519 such as JSch), killed when dropped. sshd needs root (its
//! privilege separation) and `/usr/sbin/sshd` (package openssh-server).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// Whether an sshd can be started here: root, and the daemon installed.
pub fn available() -> bool {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
    root && Path::new("/usr/sbin/sshd").exists()
}

/// A new key pair made by `ssh-keygen` at `path` (the public half at `path.pub`): `kind` as
/// `-t` takes it, then any further arguments (`-b 256`, `-m PEM`, `-C comment`); no passphrase.
pub fn keygen(path: &Path, kind: &str, more: &[&str]) -> std::io::Result<()> {
    let out = Command::new("ssh-keygen").args(["-q", "-t", kind, "-N", ""]).args(more).arg("-f").arg(path).output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    Ok(())
}

/// A running sshd.
pub struct Sshd {
    child: Child,
    pub port: u16,
    /// The public host keys, as `known_hosts` lines for `[127.0.0.1]:port`.
    pub known_hosts: String,
}

impl Sshd {
    /// Start sshd with its files in `dir` and `extra` lines of configuration (which keys it takes:
    /// `AuthorizedKeysFile …`, `AuthorizedKeysCommand …`). Returns once it listens.
    pub fn start(dir: &Path, extra: &str) -> std::io::Result<Sshd> {
        std::fs::create_dir_all(dir)?;
        std::fs::create_dir_all("/run/sshd")?; // its privilege separation directory
        let mut host_keys = Vec::new();
        for (kind, bits) in [("ed25519", None), ("ecdsa", Some("256"))] {
            let key = dir.join(format!("ssh_host_{kind}_key"));
            if !key.exists() {
                keygen(&key, kind, bits.map(|b| vec!["-b", b]).as_deref().unwrap_or_default())?;
            }
            host_keys.push(key);
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut config = format!("Port {port}\nListenAddress 127.0.0.1\n");
        for key in &host_keys {
            config.push_str(&format!("HostKey {}\n", key.display()));
        }
        config.push_str(&format!(
            "PidFile {}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             AcceptEnv GIT_PROTOCOL\nPermitRootLogin prohibit-password\nStrictModes no\nLogLevel VERBOSE\n{extra}\n",
            dir.join("sshd.pid").display()
        ));
        let config_file = dir.join("sshd_config");
        std::fs::write(&config_file, config)?;
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&config_file)
            .stderr(std::fs::File::create(dir.join("sshd.log"))?)
            .spawn()?;
        let mut known_hosts = String::new();
        for key in &host_keys {
            let public = std::fs::read_to_string(key.with_extension("pub"))?;
            known_hosts.push_str(&format!("[127.0.0.1]:{port} {}\n", public.trim()));
        }
        let sshd = Sshd { child, port, known_hosts };
        let start = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if start.elapsed() > std::time::Duration::from_secs(10) {
                return Err(std::io::Error::other(format!(
                    "sshd did not listen: see {}",
                    dir.join("sshd.log").display()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        Ok(sshd)
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A copy of the executable `program` where sshd accepts to run it as an AuthorizedKeysCommand:
/// a directory root owns and nobody else may write to, up to `/` (`/run/<name>`). Removed when
/// dropped.
pub struct SafeCopy {
    dir: PathBuf,
    pub path: PathBuf,
}

impl SafeCopy {
    pub fn new(program: &Path, name: &str) -> std::io::Result<SafeCopy> {
        use std::os::unix::fs::PermissionsExt;
        let dir = PathBuf::from(format!("/run/{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let path = dir.join(program.file_name().unwrap_or_default());
        std::fs::copy(program, &path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(SafeCopy { dir, path })
    }
}

impl Drop for SafeCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
