//! `gixd shell`: one git command under OpenSSH, for operators who keep their `sshd` (the
//! gitolite and gitlab-shell arrangement). sshd authenticates the key and runs this as the key's
//! forced command — `command="gixd shell --config … --key <id>"` in `authorized_keys`, or the
//! line `gixd keys` prints for `AuthorizedKeysCommand` ([`authorized_key_line`]). The command the
//! client asked for is in `SSH_ORIGINAL_COMMAND`, `GIT_PROTOCOL` in the environment (sshd passes
//! it with `AcceptEnv GIT_PROTOCOL`); the key's id names its user and grant in the token store,
//! read now (a key revoked since is refused). The command is served on stdin and stdout by the
//! same runner as the in-process server ([`super::exec`]); a refusal goes to stderr; the exit
//! status is the process's. A push's maintenance runs before the process ends, as git's
//! receive-pack runs `gc --auto`.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;

use crate::auth::Identity;
use crate::config::Config;
use crate::protocol::Version;
use crate::service;
use crate::transport::exec;

/// What made `gixd shell` stop before it served anything.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("could not start: {0}")]
    Start(#[from] std::io::Error),
}

/// The line of an `authorized_keys` file (what `AuthorizedKeysCommand` prints) that lets `key`
/// (`ssh-ed25519 AAAA…`, its id `id`) run git through `gixd shell` and nothing else: `restrict`
/// (no pty, no forwarding of any kind) and the forced command, its arguments quoted for the shell
/// sshd runs it with.
pub fn authorized_key_line(gixd: &std::path::Path, config: &std::path::Path, id: &str, key: &str) -> String {
    let words = [
        exec::sq_quote(&gixd.to_string_lossy()),
        "shell".into(),
        "--config".into(),
        exec::sq_quote(&config.to_string_lossy()),
        "--key".into(),
        exec::sq_quote(id),
    ];
    // Inside authorized_keys' double quotes sshd reads `\"` as `"` and nothing else as an escape.
    let command = words.join(" ").replace('"', "\\\"");
    format!("command=\"{command}\",restrict {key}")
}

/// What `gixd keys` prints: the authorized_keys line of each key in `store` (or only of `wanted`,
/// `type base64` as sshd's `%t %k` give it), forcing `gixd shell --config config` for it. A key
/// nobody added gets no line, and sshd refuses it.
pub fn authorized_keys(
    store: &crate::auth::TokenStore,
    gixd: &std::path::Path,
    config: &std::path::Path,
    wanted: Option<&str>,
) -> String {
    let mut out = String::new();
    for key in store.keys.iter().filter(|k| wanted.is_none_or(|w| w == k.key)) {
        out.push_str(&authorized_key_line(gixd, config, &key.id, &key.key));
        out.push('\n');
    }
    out
}

/// Serve the command sshd was asked for, for the key `key_id`, on stdin and stdout; returns the
/// exit status.
pub fn run(mut config: Config, key_id: &str) -> Result<u8, ShellError> {
    // Standard output is the client's: an access log there would be written into the protocol.
    if config.access_log.as_deref() == Some(std::path::Path::new("-")) {
        config.access_log = None;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(4)
        .thread_name("gixd-shell")
        .enable_all()
        .build()?;
    let repos = crate::repo::Repos::new(&config.base_path, config.exports.clone())?.with_rules(config.paths.clone())?;
    let auto_maintenance = config.auto_maintenance;
    let (asks, mut asked) = service::maintenance::channel();
    let state = Arc::new(crate::session::State::new(config, repos, None, auto_maintenance.then_some(asks))?);
    let identity = state.access.identify_key_id(key_id);
    let user = identity.user().map(str::to_owned);
    let Some(line) = std::env::var_os("SSH_ORIGINAL_COMMAND") else {
        // `ssh git@host` with no command: who the key is, and that there is nothing else here.
        let who = user.as_deref().unwrap_or("unknown key");
        eprintln!("Hi {who}! gixd serves git over SSH (clone, fetch, push, archive); there is no shell.");
        return Ok(1);
    };
    let line = line.to_string_lossy().into_owned();
    if !matches!(identity, Identity::User(_)) {
        tracing::info!(key = key_id, "gixd shell: no such key (revoked?)");
        eprintln!("fatal: this key is not known to gixd (revoked?)");
        return Ok(128);
    }
    let origin = exec::Origin {
        transport: "ssh",
        peer: std::env::var("SSH_CONNECTION").ok().as_deref().and_then(peer),
        identity,
        version: Version::from_params(&std::env::var("GIT_PROTOCOL").unwrap_or_default()),
    };
    let ended = rt.block_on({
        let state = state.clone();
        async move {
            let outlet = Stdout { stdout: tokio::io::stdout(), stall: state.config.io_timeout };
            let (ended, mut outlet) = exec::run(state, origin, &line, tokio::io::stdin(), outlet).await;
            let _ = outlet.stdout.shutdown().await;
            ended
        }
    });
    if let Some(refusal) = &ended.refusal {
        eprintln!("{refusal}");
    }
    // What the push asked for (its repository's geometric roll-up, or a full run), now.
    while let Ok(git_dir) = asked.try_recv() {
        service::maintenance::due(&state, &git_dir);
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    Ok(u8::try_from(ended.status).unwrap_or(128))
}

/// The client's address in `SSH_CONNECTION` (`client port server port`).
fn peer(connection: &str) -> Option<SocketAddr> {
    let mut fields = connection.split_whitespace();
    let ip: std::net::IpAddr = fields.next()?.parse().ok()?;
    Some(SocketAddr::new(ip, fields.next()?.parse().ok()?))
}

/// stdout, as the sending side sees it: each chunk taken within `stall`.
struct Stdout {
    stdout: tokio::io::Stdout,
    stall: std::time::Duration,
}

impl service::buffer::Outlet for Stdout {
    async fn send(&mut self, chunk: Bytes) -> bool {
        let sent = async {
            self.stdout.write_all(&chunk).await?;
            self.stdout.flush().await
        };
        matches!(tokio::time::timeout(self.stall, sent).await, Ok(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authorized_keys_line_forces_the_shell_for_that_key_and_restricts_everything_else() {
        let line = authorized_key_line(
            std::path::Path::new("/usr/bin/gixd"),
            std::path::Path::new("/etc/gixd/it's \"here\".toml"),
            "k1",
            "ssh-ed25519 AAAAC3Nz",
        );
        assert_eq!(
            line,
            r#"command="'/usr/bin/gixd' shell --config '/etc/gixd/it'\''s \"here\".toml' --key 'k1'",restrict ssh-ed25519 AAAAC3Nz"#
        );
    }

    #[test]
    fn the_peer_is_read_from_ssh_connection() {
        assert_eq!(peer("192.0.2.7 51234 192.0.2.1 22"), Some("192.0.2.7:51234".parse().unwrap()));
        assert_eq!(peer("::1 40000 ::1 22"), Some("[::1]:40000".parse().unwrap()));
        assert_eq!(peer("garbage"), None);
    }
}
