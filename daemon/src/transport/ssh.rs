//! SSH: git over an in-process SSH server (russh on ring, the runtime's tasks, no thread per
//! connection). Public-key authentication only, against the users' keys in the token store
//! (`gixd key add`), each with the grant it was given; a session channel may run one exec of
//! `git-upload-pack '<path>'`, `git-receive-pack '<path>'` or `git-upload-archive '<path>'`
//! (also spelled `git upload-pack`), the path unquoted by git's shell-quoting rules and resolved
//! under the base path as the other transports resolve theirs, with `GIT_PROTOCOL` from an env
//! request. Everything else is refused: a shell, a pty, subsystems, other commands, other
//! variables, forwarding of ports and agents. Authentication must end within the init timeout,
//! a few connections may be unauthenticated at once, a connection has a few channels open at once. The
//! conversation runs through the same service entry as git://: a transfer slot, a blocking
//! thread reading the channel, the transfer buffers sent by the runtime.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use russh::keys::{Algorithm, EcdsaCurve, HashAlg, PrivateKey, PublicKey};
use russh::server::{Auth, ChannelOpenHandle, Handle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, ChannelOpenFailure, ChannelStream, cipher};
use tokio::io::WriteHalf;

use crate::auth::Identity;
use crate::protocol::Version;
use crate::service;
use crate::session::State;
use crate::transport::exec;

/// Session channels one connection may have open at once: git opens one; git-lfs, sharing one
/// OpenSSH connection (its `ControlMaster=auto`), opens one per transfer worker (eight) beside
/// its batch channel and git's own, one after another for every step of a push.
pub const MAX_CHANNELS: usize = 16;
/// Authentication attempts one connection may make.
pub const MAX_AUTH_ATTEMPTS: usize = 6;
/// Messages a connection's session queues from its handles ([`ChannelOutlet`]'s chunks of up
/// to 256 KiB among them): 2 MiB of a response waits per connection at most.
pub const QUEUED_CHUNKS: usize = 8;
/// Connections that may be unauthenticated at once; one more is closed at once.
pub const MAX_UNAUTHENTICATED: usize = 64;

/// The host keys: Ed25519 at `path`, and ECDSA P-256 beside it ([`ecdsa_path`]) for clients that
/// predate Ed25519 (JSch, in JGit up to 5). Each is read, or made and written with its `.pub`
/// beside it when there is none (so several replicas can be given the same files).
pub fn host_keys(path: &Path) -> std::io::Result<Vec<PrivateKey>> {
    Ok(vec![
        host_key(path, Algorithm::Ed25519)?,
        host_key(&ecdsa_path(path), Algorithm::Ecdsa { curve: EcdsaCurve::NistP256 })?,
    ])
}

/// Where the ECDSA host key lies beside the Ed25519 one at `path`: `ssh_host_ecdsa_key` beside
/// `ssh_host_ed25519_key` (OpenSSH's names), else `<name>_ecdsa`.
pub fn ecdsa_path(path: &Path) -> std::path::PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let ecdsa = if name.contains("ed25519") { name.replace("ed25519", "ecdsa") } else { format!("{name}_ecdsa") };
    path.with_file_name(ecdsa)
}

fn host_key(path: &Path, algorithm: Algorithm) -> std::io::Result<PrivateKey> {
    let invalid = |e: &dyn std::fmt::Display| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string());
    if path.exists() {
        return russh::keys::load_secret_key(path, None)
            .map_err(|e| invalid(&format!("SSH host key {}: {e}", path.display())));
    }
    let key = match algorithm {
        Algorithm::Ed25519 => {
            let seed = crate::auth::random::<32>()?;
            PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed))
        }
        other => PrivateKey::random(&mut russh::keys::key::safe_rng(), other).map_err(|e| invalid(&e))?,
    };
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

/// The ciphers an operator may offer (`ssh_ciphers`): the AEADs and AES-CTR, as OpenSSH names them.
const OFFERABLE: [cipher::Name; 6] = [
    cipher::AES_256_GCM,
    cipher::AES_128_GCM,
    cipher::CHACHA20_POLY1305,
    cipher::AES_256_CTR,
    cipher::AES_192_CTR,
    cipher::AES_128_CTR,
];

/// The ciphers offered to a client that picks ([`Offers`]): `named` (`Config::ssh_ciphers`), or
/// without names the fastest this CPU has that every client can still use. The client picks the
/// first of its own list that is offered; OpenSSH's starts with chacha20-poly1305, whose Poly1305
/// (ring's portable code) and ChaCha20 were a third of gixd's CPU for a bitmapped clone
/// (rust-analyzer, 126 MB, by hand: 381-401 ms with chacha20-poly1305, 327-360 with aes128-ctr +
/// hmac-sha2-256-etm, 247-302 with aes128-gcm). So a CPU with AES and carry-less multiply
/// instructions offers AES-GCM and AES-CTR, not chacha20-poly1305; AES-GCM alone would refuse
/// clients that have only CTR (JGit's JSch 0.1.55 in the client matrix, libssh2 before 1.11,
/// PuTTY before 0.76). OpenSSH clients are offered one cipher of gixd's choosing instead.
pub fn ciphers(named: &[String]) -> std::io::Result<Vec<cipher::Name>> {
    if named.is_empty() {
        return Ok(match aes_instructions() {
            true => vec![
                cipher::AES_256_GCM,
                cipher::AES_128_GCM,
                cipher::AES_256_CTR,
                cipher::AES_192_CTR,
                cipher::AES_128_CTR,
            ],
            false => OFFERABLE[2..].iter().chain(&OFFERABLE[..2]).copied().collect(),
        });
    }
    named
        .iter()
        .map(|name| {
            OFFERABLE.iter().find(|c| c.as_ref() == name.as_str()).copied().ok_or_else(|| {
                let known = OFFERABLE.iter().map(|c| c.as_ref()).collect::<Vec<_>>().join(", ");
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("ssh_ciphers: unknown cipher '{name}' (known: {known})"),
                )
            })
        })
        .collect()
}

/// Whether this CPU has AES and carry-less multiplication instructions (what AES-GCM needs to
/// be fast).
fn aes_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq");
    #[cfg(target_arch = "aarch64")]
    return std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull");
    #[allow(unreachable_code)]
    false
}

/// The server's SSH configuration: `key`, public keys only, bounded attempts, `ciphers`
/// ([`ciphers`]); a connection idle for `io_timeout` is closed.
pub fn config(
    keys: Vec<PrivateKey>,
    io_timeout: std::time::Duration,
    ciphers: Vec<cipher::Name>,
) -> russh::server::Config {
    russh::server::Config {
        keys,
        methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
        max_auth_attempts: MAX_AUTH_ATTEMPTS,
        auth_rejection_time: std::time::Duration::from_millis(300),
        auth_rejection_time_initial: Some(std::time::Duration::ZERO),
        inactivity_timeout: Some(io_timeout),
        nodelay: true,
        channel_buffer_size: QUEUED_CHUNKS,
        preferred: russh::Preferred { cipher: std::borrow::Cow::Owned(ciphers), ..russh::Preferred::DEFAULT },
        ..Default::default()
    }
}

/// What a connection is offered. SSH lets the client pick: the first cipher of its own list that
/// the server offers. OpenSSH's list starts with chacha20-poly1305, then AES-CTR, then AES-GCM, so
/// offered AES-GCM and AES-CTR it takes AES-CTR (327-360 ms of gixd's CPU for a bitmapped
/// rust-analyzer clone, against 247-302 with AES-GCM). OpenSSH sends its first key-exchange
/// packet, with its cipher list, without waiting for the server's: from a client whose version
/// line says OpenSSH that packet is read first, and the connection is offered one cipher, the
/// first of `ranked` the client lists (AES-GCM wherever the client has it; a client that allows
/// only AES-CTR or only chacha20-poly1305 still gets that). Every other client, and an OpenSSH
/// client whose packet does not come within [`KEXINIT_WAIT`], is offered `offered` and picks.
pub struct Offers {
    offered: Arc<russh::server::Config>,
    ranked: Vec<(cipher::Name, Arc<russh::server::Config>)>,
    /// The version line the server sends, as russh sends it.
    id_line: Vec<u8>,
}

/// How long an OpenSSH client's first key-exchange packet is waited for (it comes right after
/// its version line; a client that waits for the server's instead is offered everything then).
pub const KEXINIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Offers {
    /// `offered`: [`ciphers`] of the named ones; `named`: whether an operator named them (then
    /// the ranking is theirs; otherwise, where the CPU has AES instructions, AES-GCM, then
    /// AES-CTR, then chacha20-poly1305 for an OpenSSH client that allows nothing else).
    pub fn new(
        keys: Vec<PrivateKey>,
        io_timeout: std::time::Duration,
        offered: Vec<cipher::Name>,
        named: bool,
    ) -> Offers {
        let ranked = match (named, aes_instructions()) {
            (false, true) => vec![
                cipher::AES_128_GCM,
                cipher::AES_256_GCM,
                cipher::AES_128_CTR,
                cipher::AES_192_CTR,
                cipher::AES_256_CTR,
                cipher::CHACHA20_POLY1305,
            ],
            _ => offered.clone(),
        };
        let ranked = ranked.into_iter().map(|c| (c, Arc::new(config(keys.clone(), io_timeout, vec![c])))).collect();
        let offered = Arc::new(config(keys, io_timeout, offered));
        let id_line = match &offered.server_id {
            russh::SshId::Standard(id) => format!("{id}\r\n").into_bytes(),
            russh::SshId::Raw(id) => id.as_bytes().to_vec(),
        };
        Offers { offered, ranked, id_line }
    }

    /// The ciphers an OpenSSH client is offered the first of that it lists, in that order.
    pub fn ranked(&self) -> String {
        self.ranked.iter().map(|(c, _)| c.as_ref()).collect::<Vec<_>>().join(", ")
    }

    /// The configuration for a client that lists `client` (its ciphers, both directions).
    fn for_client(&self, client: &[&str]) -> Option<&Arc<russh::server::Config>> {
        self.ranked.iter().find(|(c, _)| client.contains(&c.as_ref())).map(|(_, config)| config)
    }
}

/// The connection's first bytes, read before the session starts: the server's version line is
/// sent, the client's read, and from an OpenSSH client its first key-exchange packet; the
/// configuration chosen ([`Offers`]) and the socket with those bytes to be read again by the
/// session.
async fn offer(
    offers: &Offers,
    mut tcp: tokio::net::TcpStream,
) -> std::io::Result<(Arc<russh::server::Config>, Replayed)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(&offers.id_line).await?;
    let mut read = Vec::with_capacity(1024);
    let line_end = loop {
        if let Some(end) = read.iter().position(|&b| b == b'\n') {
            break end + 1;
        }
        if read.len() >= 255 || tcp.read_buf(&mut read).await? == 0 {
            // Not a version line: the session says so to the client.
            return Ok((offers.offered.clone(), Replayed::new(tcp, read, offers.id_line.len())));
        }
    };
    let mut config = offers.offered.clone();
    if read.starts_with(b"SSH-2.0-OpenSSH_") {
        let waited = tokio::time::timeout(KEXINIT_WAIT, async {
            loop {
                if let Some(len) = whole_packet(&read[line_end..]) {
                    return Ok(Some(len));
                }
                if read.len() - line_end > MAX_PACKET || tcp.read_buf(&mut read).await? == 0 {
                    return Ok::<_, std::io::Error>(None);
                }
            }
        })
        .await;
        let packet = match waited {
            Ok(read) => read?,
            Err(_elapsed) => None,
        };
        if let Some(len) = packet
            && let Some(client) = kexinit_ciphers(&read[line_end..line_end + len])
            && let Some(chosen) = offers.for_client(&client)
        {
            config = chosen.clone();
        }
    }
    Ok((config, Replayed::new(tcp, read, offers.id_line.len())))
}

/// The longest packet before keys are exchanged (RFC 4253 §6.1's limit).
const MAX_PACKET: usize = 35_000;

/// The length of the binary packet (unencrypted: before keys are exchanged) `bytes` start with,
/// once it is wholly there.
fn whole_packet(bytes: &[u8]) -> Option<usize> {
    let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize + 4;
    (len <= MAX_PACKET && bytes.len() >= len).then_some(len)
}

/// The ciphers a client's KEXINIT packet (`packet`, as [`whole_packet`] found it) lists in both
/// directions, in its order; `None` when it is not a KEXINIT.
fn kexinit_ciphers(packet: &[u8]) -> Option<Vec<&str>> {
    let padding = *packet.get(4)? as usize;
    let payload = packet.get(5..packet.len().checked_sub(padding)?)?;
    const KEXINIT: u8 = 20;
    if payload.first() != Some(&KEXINIT) {
        return None;
    }
    let mut rest = payload.get(1 + 16..)?;
    let mut lists = Vec::new();
    for _ in 0..4 {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        lists.push(std::str::from_utf8(rest.get(4..4 + len)?).ok()?);
        rest = &rest[4 + len..];
    }
    let (to_server, to_client) = (lists[2], lists[3]);
    Some(to_client.split(',').filter(|c| to_server.split(',').any(|s| s == *c)).collect())
}

/// The socket as the session reads it after [`offer`]: the bytes read there first, and the
/// server's version line, already sent, not sent twice.
struct Replayed {
    tcp: tokio::net::TcpStream,
    read: Vec<u8>,
    at: usize,
    unsent_id: usize,
}

impl Replayed {
    fn new(tcp: tokio::net::TcpStream, read: Vec<u8>, id_line: usize) -> Replayed {
        Replayed { tcp, read, at: 0, unsent_id: id_line }
    }
}

impl tokio::io::AsyncRead for Replayed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at < this.read.len() {
            let n = buf.remaining().min(this.read.len() - this.at);
            buf.put_slice(&this.read[this.at..this.at + n]);
            this.at += n;
            if this.at == this.read.len() {
                this.read = Vec::new();
                this.at = 0;
            }
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Replayed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if this.unsent_id > 0 {
            // The session's version line: the same bytes `offer` sent.
            let n = buf.len().min(this.unsent_id);
            this.unsent_id -= n;
            return std::task::Poll::Ready(Ok(n));
        }
        std::pin::Pin::new(&mut this.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.unsent_id > 0 {
            let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &**b);
            return self.poll_write(cx, first);
        }
        std::pin::Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Serve one SSH connection: closed at once past [`MAX_UNAUTHENTICATED`], and when it is not
/// authenticated within the init timeout.
pub async fn serve(
    state: Arc<State>,
    offers: Arc<Offers>,
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
        opened: Arc::new(AtomicUsize::new(0)),
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
        // SAFETY: `fd`, when dup gave one, is a new descriptor nothing else owns.
        (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    };
    let session = async {
        let (config, stream) = offer(&offers, tcp).await.map_err(russh::Error::from)?;
        russh::server::run_stream(config, stream, handler).await
    };
    let Ok(Ok(running)) = tokio::time::timeout(init, session).await else {
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
    /// Channels open now: opened, and neither closed by the client nor ended by their command
    /// (a command's task gives its place back when it ends).
    opened: Arc<AtomicUsize>,
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
        if self.opened.load(Ordering::SeqCst) >= MAX_CHANNELS {
            reply.reject(ChannelOpenFailure::ResourceShortage).await;
            return Ok(());
        }
        self.opened.fetch_add(1, Ordering::SeqCst);
        self.channels.insert(channel.id(), channel);
        reply.accept().await;
        Ok(())
    }

    /// A channel the client closed before it ran a command gives its place back (one that ran
    /// a command gives it back when the command ends).
    async fn channel_close(&mut self, channel: ChannelId, _session: &mut Session) -> Result<(), Self::Error> {
        self.protocols.remove(&channel);
        if self.channels.remove(&channel).is_some() {
            self.opened.fetch_sub(1, Ordering::SeqCst);
        }
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
        let Some(identity) = self.identity.clone() else { return session.channel_failure(channel) };
        let Some(open) = self.channels.remove(&channel) else { return session.channel_failure(channel) };
        session.channel_success(channel)?;
        let command = String::from_utf8_lossy(&data[..data.len().min(4096)]).into_owned();
        let version = Version::from_params(self.protocols.get(&channel).map_or("", String::as_str));
        let origin = exec::Origin { transport: "ssh", peer: Some(self.peer), identity, version };
        let (state, handle, opened) = (self.state.clone(), session.handle(), self.opened.clone());
        tokio::spawn(async move {
            let (_busy, life) = (state.life.busy(), state.life.clone());
            life.unless_cancelled(run_exec(state, origin, open, handle, &command)).await;
            opened.fetch_sub(1, Ordering::SeqCst);
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

/// Run one exec on its channel ([`exec::run`]): the client's bytes read off the channel, what
/// is sent back written to it; then a refusal on stderr, the exit status, EOF and close.
async fn run_exec(state: Arc<State>, origin: exec::Origin, channel: Channel<Msg>, handle: Handle, command: &str) {
    let id = channel.id();
    let (read, open) = tokio::io::split(channel.into_stream());
    let outlet = ChannelOutlet { handle: handle.clone(), id, _open: open, stall: state.config.io_timeout };
    // The outlet comes back with what was sent: dropping the channel's stream closes the channel,
    // which must wait until the exit status went.
    let (ended, outlet) = exec::run(state, origin, command, read, outlet).await;
    if let Some(refusal) = ended.refusal {
        let _ = handle.extended_data(id, 1, Bytes::from(format!("{refusal}\n"))).await;
    }
    let _ = handle.exit_status_request(id, ended.status).await;
    let _ = handle.eof(id).await;
    drop(outlet);
    let _ = handle.close(id).await;
}

/// The channel as the sending side sees it: each chunk handed to the session whole (the session
/// cuts it into packets as the client's window allows, straight into its encryption buffer)
/// within `stall`. The channel's own writer copied every packet's worth into a message of its
/// own first and took a lock and a queue permit for each: 3 900 of each for a 126 MB clone.
/// The session stops taking messages while it holds data the window does not allow yet, so at
/// most [`QUEUED_CHUNKS`] chunks wait per connection.
struct ChannelOutlet {
    handle: Handle,
    id: ChannelId,
    /// The channel's stream, held until the exit status went: dropped, it closes the channel.
    _open: WriteHalf<ChannelStream<Msg>>,
    stall: std::time::Duration,
}

impl service::buffer::Outlet for ChannelOutlet {
    async fn send(&mut self, chunk: Bytes) -> bool {
        matches!(tokio::time::timeout(self.stall, self.handle.data(self.id, chunk)).await, Ok(Ok(())))
    }

    fn max_chunk(&self) -> usize {
        // The session splits what it is given into packets of the channel's size.
        256 << 10
    }
}

/// Serve SSH on `listener`, a task per connection ([`crate::transport::ssh`]).
pub async fn accept(listener: tokio::net::TcpListener, state: Arc<State>, offers: Arc<Offers>) {
    let unauthenticated = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while let Some((stream, peer)) = super::accept(&listener, "ssh", &state.life).await {
        let (state, offers, unauthenticated) = (state.clone(), offers.clone(), unauthenticated.clone());
        tokio::spawn(async move {
            let _busy = state.life.busy();
            serve(state, offers, stream, peer, unauthenticated).await;
        });
    }
}
