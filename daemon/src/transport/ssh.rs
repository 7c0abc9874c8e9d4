//! SSH: git over an in-process SSH server (russh on ring, the runtime's tasks, no thread per
//! connection). Public-key authentication only, against the users' keys in the token store
//! (`gixd key add`), each with the grant it was given; a session channel may run one exec of
//! `git-upload-pack '<path>'`, `git-receive-pack '<path>'` or `git-upload-archive '<path>'`
//! (also spelled `git upload-pack`), the path unquoted by git's shell-quoting rules and resolved
//! under the base path as the other transports resolve theirs, with `GIT_PROTOCOL` from an env
//! request. Everything else is refused: a shell, a pty, subsystems, other commands, other
//! variables, forwarding of ports and agents. Authentication must end within the init timeout,
//! a few connections may be unauthenticated at once, a connection has a few channels. The
//! conversation runs through the same service entry as git://: a transfer slot, a blocking
//! thread reading the channel, the transfer buffers sent by the runtime.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use russh::keys::{HashAlg, PrivateKey, PublicKey};
use russh::server::{Auth, ChannelOpenHandle, Handle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, ChannelOpenFailure, ChannelStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

use crate::auth::{Decision, Identity};
use crate::protocol::Version;
use crate::service;
use crate::session::State;
use crate::transport::pace::Paced;

/// Session channels one connection may open (git opens one).
pub const MAX_CHANNELS: usize = 4;
/// Authentication attempts one connection may make.
pub const MAX_AUTH_ATTEMPTS: usize = 6;
/// Connections that may be unauthenticated at once; one more is closed at once.
pub const MAX_UNAUTHENTICATED: usize = 64;

/// The host key at `path`: read, or made (Ed25519) and written with its `.pub` beside it when
/// there is none (so several replicas can be given one file).
pub fn host_key(path: &Path) -> std::io::Result<PrivateKey> {
    let invalid = |e: &dyn std::fmt::Display| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string());
    if path.exists() {
        return russh::keys::load_secret_key(path, None)
            .map_err(|e| invalid(&format!("SSH host key {}: {e}", path.display())));
    }
    let seed = crate::auth::random::<32>()?;
    let key = PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed));
    let text = key.to_openssh(russh::keys::ssh_key::LineEnding::LF).map_err(|e| invalid(&e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
    }
    let public = key.public_key().to_openssh().map_err(|e| invalid(&e))?;
    std::fs::write(path.with_extension("pub"), format!("{public}\n"))?;
    tracing::info!(path = %path.display(), "made an SSH host key");
    Ok(key)
}

/// The host key's SHA-256 fingerprint, as `ssh` shows it.
pub fn fingerprint(key: &PrivateKey) -> String {
    key.public_key().fingerprint(HashAlg::Sha256).to_string()
}

/// The server's SSH configuration: `key`, public keys only, bounded attempts; a connection idle
/// for `io_timeout` is closed.
pub fn config(key: PrivateKey, io_timeout: std::time::Duration) -> russh::server::Config {
    russh::server::Config {
        keys: vec![key],
        methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
        max_auth_attempts: MAX_AUTH_ATTEMPTS,
        auth_rejection_time: std::time::Duration::from_millis(300),
        auth_rejection_time_initial: Some(std::time::Duration::ZERO),
        inactivity_timeout: Some(io_timeout),
        nodelay: true,
        ..Default::default()
    }
}

/// Serve one SSH connection: closed at once past [`MAX_UNAUTHENTICATED`], and when it is not
/// authenticated within the init timeout.
pub async fn serve(
    state: Arc<State>,
    config: Arc<russh::server::Config>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    unauthenticated: Arc<AtomicUsize>,
) {
    if unauthenticated.fetch_add(1, Ordering::SeqCst) >= MAX_UNAUTHENTICATED {
        unauthenticated.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(%peer, "SSH connection closed: too many unauthenticated connections");
        return;
    }
    let pending = Pending { count: unauthenticated, done: Arc::new(AtomicBool::new(false)) };
    let handler = Connection {
        state: state.clone(),
        peer,
        identity: None,
        pending: pending.clone(),
        protocols: HashMap::new(),
        channels: HashMap::new(),
        opened: 0,
    };
    // The client's version line, the key exchange and the authentication, all within the init
    // timeout (a silent or trickling client is closed then).
    let started = tokio::time::Instant::now();
    let init = state.config.init_timeout;
    // A descriptor of our own for the socket, to shut it down whatever the session is doing (a
    // disconnect message waits for a key exchange that a stalled client never finishes).
    let socket = {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: dup of a descriptor this function owns; the copy is owned by the OwnedFd.
        let fd = unsafe { libc::dup(tcp.as_raw_fd()) };
        (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    };
    let Ok(Ok(running)) = tokio::time::timeout(init, russh::server::run_stream(config, tcp, handler)).await else {
        tracing::info!(%peer, "SSH connection closed before it said which version it speaks");
        return pending.end();
    };
    let handle = running.handle();
    let deadline = async {
        tokio::time::sleep_until(started + init).await;
        if pending.done.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    };
    let stopped = tokio::select! {
        _ = running => false,
        () = deadline => {
            tracing::info!(%peer, "SSH authentication did not end within the init timeout");
            true
        }
        () = state.life.reached(crate::lifecycle::Phase::Cancelled) => true,
    };
    if stopped {
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            handle.disconnect(russh::Disconnect::ByApplication, "closing".into(), String::new()),
        )
        .await;
        if let Some(socket) = &socket {
            // SAFETY: shutting down the socket through our own descriptor of it.
            unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(socket), libc::SHUT_RDWR) };
        }
    }
    pending.end();
}

/// A connection counted as unauthenticated until it authenticates or ends.
#[derive(Clone)]
struct Pending {
    count: Arc<AtomicUsize>,
    done: Arc<AtomicBool>,
}

impl Pending {
    fn end(&self) {
        if !self.done.swap(true, Ordering::SeqCst) {
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One SSH connection, as russh calls it.
struct Connection {
    state: Arc<State>,
    peer: SocketAddr,
    /// The key's user and grant, once authenticated.
    identity: Option<Identity>,
    pending: Pending,
    /// `GIT_PROTOCOL` of each channel that sent it.
    protocols: HashMap<ChannelId, String>,
    /// Channels opened and not yet running a command.
    channels: HashMap<ChannelId, Channel<Msg>>,
    opened: usize,
}

impl Connection {
    fn identify(&self, key: &PublicKey) -> Identity {
        match key.to_openssh().ok().and_then(|line| crate::auth::openssh_key(&line)) {
            Some((key, _)) => self.state.access.identify_key(&key),
            None => Identity::Invalid,
        }
    }
}

impl russh::server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_publickey_offered(&mut self, _user: &str, offer: PublicKeyOffer<'_>) -> Result<Auth, Self::Error> {
        // No signature is asked for a key nobody added.
        Ok(match self.identify(offer.public_key) {
            Identity::User(_) => Auth::Accept,
            _ => Auth::reject(),
        })
    }

    async fn auth_publickey(&mut self, _user: &str, key: VerifiedPublicKey<'_>) -> Result<Auth, Self::Error> {
        match self.identify(key.public_key) {
            identity @ Identity::User(_) => {
                self.identity = Some(identity);
                self.pending.end();
                Ok(Auth::Accept)
            }
            _ => Ok(Auth::reject()),
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if self.opened >= MAX_CHANNELS {
            reply.reject(ChannelOpenFailure::ResourceShortage).await;
            return Ok(());
        }
        self.opened += 1;
        self.channels.insert(channel.id(), channel);
        reply.accept().await;
        Ok(())
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        if name == "GIT_PROTOCOL" && value.len() <= 256 {
            self.protocols.insert(channel, value.to_owned());
            session.channel_success(channel)
        } else {
            session.channel_failure(channel)
        }
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let (Some(open), Some(identity)) = (self.channels.remove(&channel), self.identity.clone()) else {
            return session.channel_failure(channel);
        };
        session.channel_success(channel)?;
        let command = String::from_utf8_lossy(&data[..data.len().min(4096)]).into_owned();
        let version = Version::from_params(self.protocols.get(&channel).map_or("", String::as_str));
        let (state, peer, handle) = (self.state.clone(), self.peer, session.handle());
        tokio::spawn(async move {
            let (_busy, life) = (state.life.busy(), state.life.clone());
            life.unless_cancelled(exec(state, peer, identity, open, handle, &command, version)).await;
        });
        Ok(())
    }

    async fn shell_request(&mut self, channel: ChannelId, session: &mut Session) -> Result<(), Self::Error> {
        refuse_request(channel, session, "gixd serves git over SSH: no shell")
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        _name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        refuse_request(channel, session, "gixd serves git over SSH: no subsystems")
    }

    #[allow(clippy::too_many_arguments, reason = "russh's signature")]
    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        _col_width: u32,
        _row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(channel)
    }
}

/// Refuse a channel request, saying why on the channel's stderr.
fn refuse_request(channel: ChannelId, session: &mut Session, why: &str) -> Result<(), russh::Error> {
    session.channel_failure(channel)?;
    session.extended_data(channel, 1, Bytes::from(format!("{why}\r\n")))?;
    session.exit_status_request(channel, 1)?;
    session.close(channel)
}

/// A command an exec request may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub service: service::Service,
    pub path: String,
}

/// `git-upload-pack '<path>'` (or `git upload-pack …`, and receive-pack, upload-archive), the
/// path unquoted as git's `sq_quote` writes it; `None` for anything else.
pub fn parse_command(line: &str) -> Option<Command> {
    let line = line.trim_end_matches(['\n', '\r']);
    let (program, argument) = line.split_once(' ')?;
    let (program, argument) = match (program, argument.split_once(' ')) {
        ("git", Some((sub, rest))) => (format!("git-{sub}"), rest),
        _ => (program.to_owned(), argument),
    };
    let service = match program.as_str() {
        "git-upload-pack" => service::Service::UploadPack,
        "git-receive-pack" => service::Service::ReceivePack,
        "git-upload-archive" => service::Service::UploadArchive,
        _ => return None,
    };
    let path = dequote(argument.trim())?;
    (!path.is_empty() && !path.contains('\0')).then_some(Command { service, path })
}

/// One shell word as git quotes it: single-quoted runs, between them `\'` or `\!` (git's
/// `sq_dequote`); or a bare word with no quoting or escaping characters in it.
fn dequote(word: &str) -> Option<String> {
    if !word.starts_with('\'') {
        let plain = !word.chars().any(|c| c.is_whitespace() || "'\"\\$`;&|<>(){}*?[]!#~".contains(c));
        return plain.then(|| word.to_owned());
    }
    let mut out = String::new();
    let mut chars = word.chars();
    chars.next(); // the opening quote
    loop {
        // Inside quotes: everything up to the closing one.
        loop {
            match chars.next()? {
                '\'' => break,
                c => out.push(c),
            }
        }
        match chars.next() {
            None => return Some(out),
            Some('\\') => match (chars.next()?, chars.next()?) {
                (c @ ('\'' | '!'), '\'') => out.push(c),
                _ => return None,
            },
            Some(_) => return None,
        }
    }
}

/// Run one exec on its channel: authorize, a transfer slot, the conversation on a blocking thread,
/// what it wrote sent from the transfer buffers; then the exit status, EOF and close.
async fn exec(
    state: Arc<State>,
    peer: SocketAddr,
    identity: Identity,
    channel: Channel<Msg>,
    handle: Handle,
    command: &str,
    version: Version,
) {
    let id = channel.id();
    let parsed = parse_command(command);
    let name = match parsed.as_ref().map(|c| c.service) {
        Some(service::Service::UploadPack) => "git-upload-pack",
        Some(service::Service::ReceivePack) => "git-receive-pack",
        Some(service::Service::UploadArchive) => "git-upload-archive",
        None => "malformed",
    };
    let mut log = service::Request::new("ssh", Some(peer), name, Some(version));
    log.record.user = identity.user().map(str::to_owned);
    let fail = |message: String, status: u32| {
        let handle = handle.clone();
        async move {
            let _ = handle.extended_data(id, 1, Bytes::from(format!("fatal: {message}\n"))).await;
            let _ = handle.exit_status_request(id, status).await;
            let _ = handle.eof(id).await;
            let _ = handle.close(id).await;
        }
    };
    let Some(command) = parsed else {
        tracing::info!(%peer, command = %crate::error::quoted(command, 128), "SSH command refused");
        fail("gixd runs git-upload-pack, git-receive-pack and git-upload-archive only".into(), 128).await;
        return log.finish(&state, service::Outcome::Refused);
    };
    if command.service == service::Service::UploadArchive && !state.config.services.upload_archive {
        fail("git-upload-archive is not enabled on this server".into(), 128).await;
        return log.finish(&state, service::Outcome::Refused);
    }
    // Who may do what: the key's grant, as a token's; a repository it may not read is not found,
    // exactly as a missing one.
    let write = command.service == service::Service::ReceivePack;
    let decided = {
        let (state, identity, path) = (state.clone(), identity.clone(), command.path.clone());
        tokio::task::spawn_blocking(move || {
            let (served, exported) = state.repos.locate(&path).map_err(|_| Decision::NotFound)?;
            let key = crate::auth::repo_key(&served.name);
            match crate::auth::decide(&identity, &key, exported, state.access.anonymous_read, write) {
                Decision::Allow => Ok(served),
                other => Err(other),
            }
        })
        .await
    };
    let served = match decided {
        Ok(Ok(served)) => served,
        Ok(Err(Decision::Forbidden)) => {
            fail(format!("your key may not push to '{}'", crate::error::quoted(&command.path, 256)), 128).await;
            return log.finish(&state, service::Outcome::Refused);
        }
        _ => {
            fail(format!("repository '{}' not found", crate::error::quoted(&command.path, 256)), 128).await;
            return log.finish(&state, service::Outcome::Refused);
        }
    };
    log = log.serving(&served, identity.user());
    let slot = match state.slot().await {
        Ok(slot) => slot,
        Err(refused) => {
            fail(service::busy_message(refused).into(), 128).await;
            return log.finish(&state, service::Outcome::Busy);
        }
    };
    log.record.wait_ms = Some(slot.waited.as_secs_f64() * 1e3);
    let (read, write_half) = tokio::io::split(channel.into_stream());
    let (outbox, queue) = service::buffer::Outbox::new(state.clone());
    // The outlet comes back with what was sent: dropping the channel's stream closes the channel,
    // which must wait until the exit status went.
    let sending = {
        let mut outlet = ChannelOutlet { write: write_half, stall: state.config.io_timeout };
        tokio::spawn(async move { (service::buffer::send(queue, &mut outlet).await, outlet) })
    };
    let served = {
        let (state, runtime) = (state.clone(), tokio::runtime::Handle::current());
        let pusher = identity.user().map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let mut out = outbox;
            let share = match service::enter(&state, &served, Some(peer.ip())) {
                Ok(share) => share,
                Err(busy) => {
                    let mut w = crate::protocol::pkt::Writer::new();
                    w.err(busy.message());
                    let _ = std::io::Write::write_all(&mut out, &w.buf);
                    return (log, service::Outcome::Busy);
                }
            };
            let pace = if command.service == service::Service::ReceivePack {
                state.config.push_pace()
            } else {
                state.config.pace()
            };
            let input = ChannelRead {
                read,
                runtime,
                timeout: pace.window.min(state.config.io_timeout),
                life: state.life.clone(),
            };
            let asked = service::Asked { service: command.service, version, pusher: pusher.as_deref() };
            let (log, outcome) = service::connection(&state, &served, asked, Paced::new(input, pace), &mut out, log);
            drop(share);
            (log, outcome)
        })
        .await
    };
    let (sent, outlet) = match sending.await {
        Ok((sent, outlet)) => (Some(sent), Some(outlet)),
        Err(_) => (None, None),
    };
    let Ok((mut log, outcome)) = served else { return };
    log.record.bytes = sent.map_or(0, |s| s.bytes);
    log.record.buffer = sent.map(|s| s.held);
    let outcome = match outcome {
        service::Outcome::Ok if !sent.is_some_and(|s| s.complete) => service::Outcome::Disconnected,
        outcome => outcome,
    };
    let status = if outcome == service::Outcome::Ok { 0 } else { 128 };
    let _ = handle.exit_status_request(id, status).await;
    let _ = handle.eof(id).await;
    drop(outlet);
    let _ = handle.close(id).await;
    log.finish(&state, outcome);
}

/// The channel as the sending side sees it: each chunk taken within `stall`.
struct ChannelOutlet {
    write: WriteHalf<ChannelStream<Msg>>,
    stall: std::time::Duration,
}

impl service::buffer::Outlet for ChannelOutlet {
    async fn send(&mut self, chunk: Bytes) -> bool {
        matches!(tokio::time::timeout(self.stall, self.write.write_all(&chunk)).await, Ok(Ok(())))
    }

    fn max_chunk(&self) -> usize {
        // russh splits what it is given into packets of the channel's size anyway.
        256 << 10
    }
}

/// Reads of the channel for the blocking part: each within `timeout`, failing once the server's
/// stop cancelled what was in flight.
struct ChannelRead {
    read: ReadHalf<ChannelStream<Msg>>,
    runtime: tokio::runtime::Handle,
    timeout: std::time::Duration,
    life: Arc<crate::lifecycle::Life>,
}

impl std::io::Read for ChannelRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let (read, life) = (&mut self.read, &self.life);
        self.runtime.block_on(async {
            match life.unless_cancelled(tokio::time::timeout(self.timeout, read.read(buf))).await {
                Some(Ok(read)) => read,
                Some(Err(_)) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client sent nothing within the I/O timeout",
                )),
                None => Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the server is shutting down")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_as_git_quotes_them_and_nothing_else_runs() {
        let c = parse_command("git-upload-pack '/team/app.git'").unwrap();
        assert_eq!((c.service, c.path.as_str()), (service::Service::UploadPack, "/team/app.git"));
        let c = parse_command("git receive-pack 'it'\\''s.git'").unwrap();
        assert_eq!((c.service, c.path.as_str()), (service::Service::ReceivePack, "it's.git"));
        let c = parse_command("git-upload-archive 'a'\\!'b'").unwrap();
        assert_eq!(c.path, "a!b");
        assert_eq!(parse_command("git-upload-pack repo.git").unwrap().path, "repo.git");
        for refused in [
            "sh -c 'id'",
            "git-upload-pack",
            "git-upload-pack 'unterminated",
            "git-upload-pack 'a'b'",
            "git-upload-pack 'a' 'b'",
            "git-upload-pack $(id)",
            "git-upload-pack ''",
            "git-http-backend '/x'",
            "git upload-pack; id",
        ] {
            assert_eq!(parse_command(refused), None, "{refused}");
        }
    }
}
