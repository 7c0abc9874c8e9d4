//! git:// (git daemon's protocol): one TCP connection per request, opened by a pkt-line
//! `git-upload-pack /path\0host=…\0[\0version=2\0]`, then the stateful v0 conversation or v2
//! commands on the same connection (or a push, or an archive, when those services are enabled).
//! This module reads the request line, gives the pipeline ([`pipeline::connection`]) the socket
//! to read on a blocking thread and to send on, and says a refusal in an `ERR` line: a
//! connection waits for its transfer slot as long as its client stays, and a client reading
//! slowly holds neither the slot nor the thread.

use std::sync::Arc;

use bytes::Bytes;
use tokio::net::TcpStream;

use crate::error::RepoError;
use crate::protocol::{Version, pkt};
use crate::service::{self, pipeline};
use crate::session::State;

/// A parsed git:// request line.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestLine {
    pub service: String,
    pub path: String,
    pub host: Option<String>,
    /// The extra parameters after the empty field (`version=2`), joined with `:`.
    pub extra: String,
}

/// Parse `git-upload-pack /path\0host=h\0\0version=2\0`.
pub fn parse_request_line(line: &[u8]) -> Option<RequestLine> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut fields = line.split(|b| *b == 0);
    let first = std::str::from_utf8(fields.next()?).ok()?;
    let (service, path) = first.split_once(' ')?;
    let mut host = None;
    let mut extra = Vec::new();
    let mut after_empty = false;
    for field in fields {
        let field = std::str::from_utf8(field).ok()?;
        if field.is_empty() {
            after_empty = true;
        } else if after_empty {
            extra.push(field.to_owned());
        } else if let Some(h) = field.strip_prefix("host=") {
            host = Some(h.to_owned());
        }
    }
    Some(RequestLine { service: service.to_owned(), path: path.to_owned(), host, extra: extra.join(":") })
}

/// Read the request line (one pkt-line) off a new connection, before it takes a thread or a
/// transfer slot; the caller bounds the time. `None` for anything but a data line.
pub async fn read_request_line(stream: &mut tokio::net::TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let Some(len) = std::str::from_utf8(&len).ok().and_then(|l| usize::from_str_radix(l, 16).ok()) else {
        return Ok(None);
    };
    if !(5..=65520).contains(&len) {
        return Ok(None);
    }
    let mut line = vec![0u8; len - 4];
    stream.read_exact(&mut line).await?;
    Ok(Some(line))
}

/// Tell a client refused before its request was served why, and close gently (what it sent
/// is read and dropped first, or the close would reset the connection and lose the message);
/// async: no thread was taken for it.
pub async fn refuse(stream: &mut tokio::net::TcpStream, message: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut w = pkt::Writer::new();
    w.err(message);
    if stream.write_all(&w.buf).await.is_ok() && stream.shutdown().await.is_ok() {
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    }
}

/// Serve one git:// connection, whose request line was read, through the pipeline
/// ([`pipeline::connection`]) under git daemon's rule: its slot waited for in the queue while the
/// client keeps the connection, the conversation read on a blocking thread, what it wrote sent
/// from here; a refusal is an `ERR` line. The connection is closed gently after.
pub async fn serve(state: Arc<State>, tcp: TcpStream, line: Vec<u8>) {
    let origin = pipeline::Origin { transport: "git", peer: tcp.peer_addr().ok(), caller: pipeline::Caller::Daemon };
    let tcp = Arc::new(tcp);
    let Some(request) = parse_request_line(&line) else {
        let why = "malformed request line: expected 'git-upload-pack /path\\0host=…\\0'".to_owned();
        let ended = pipeline::unreadable(&state, &origin, "malformed", None, why);
        return told(&state, &tcp, ended, "").await;
    };
    let version = Version::from_params(&request.extra);
    let Some(service) = service::Service::from_name(&request.service) else {
        let asked = crate::error::quoted(&request.service, 64);
        let why = format!("service '{asked}' is not enabled");
        let ended = pipeline::unreadable(&state, &origin, &asked, Some(version), why);
        return told(&state, &tcp, ended, &request.path).await;
    };
    tracing::info!(path = %crate::error::quoted(&request.path, 256), host = ?request.host, "git://");
    let target = pipeline::Target { service, path: request.path.clone(), version };
    let input = {
        let (tcp, runtime, life) = (tcp.clone(), tokio::runtime::Handle::current(), state.life.clone());
        move |timeout| BlockingRead { tcp, runtime, timeout, life }
    };
    let outlet =
        Socket { sender: crate::transport::zero_copy::Sender::new(tcp.clone()), stall: state.config.io_timeout };
    // A client whose connection failed while queued (reset) is gone; one that closed its end may
    // have only half-closed after its request and still be reading, so it keeps its place (when
    // it is gone, its turn costs an advertisement that fails at its first write).
    let (ended, outlet) = pipeline::connection(&state, origin, target, input, outlet, hung_up(&tcp)).await;
    drop(outlet);
    told(&state, &tcp, ended, &request.path).await;
}

/// Close the connection gently after it ended so: a refusal first told in an `ERR` line.
async fn told(state: &State, tcp: &Arc<TcpStream>, ended: pipeline::Ended, path: &str) {
    use pipeline::{Denied, Why};
    let why = match ended {
        pipeline::Ended::Gone => return,
        pipeline::Ended::Served(_) => return close_gently(tcp, None).await,
        pipeline::Ended::Refused(_, why) => why,
    };
    let message = match why {
        Why::Denied(Denied::NotEnabled(service)) => format!("service '{}' is not enabled", service.name()),
        Why::Denied(Denied::Unresolved(err)) => refusal(state, path, err),
        Why::Denied(_) => format!("access denied or repository not exported: {}", crate::error::quoted(path, 256)),
        Why::Busy(message) => message.to_owned(),
        Why::Malformed(message) | Why::Failed(message) => message,
    };
    let mut w = pkt::Writer::new();
    w.err(&message);
    close_gently(tcp, Some(Bytes::from(w.buf))).await;
}

/// Returns once the connection failed (reset by the client); pending for ever otherwise
/// (what the client sends is read later, by whoever serves it).
async fn hung_up(tcp: &TcpStream) {
    let mut byte = [0u8; 1];
    if tcp.peek(&mut byte).await.is_ok() {
        std::future::pending::<()>().await;
    }
}

/// The connection's socket as the sending side sees it: each chunk taken within `stall`.
struct Socket {
    sender: crate::transport::zero_copy::Sender,
    stall: std::time::Duration,
}

impl service::buffer::Outlet for Socket {
    async fn send(&mut self, chunk: Bytes) -> bool {
        matches!(tokio::time::timeout(self.stall, self.sender.send_all(&chunk)).await, Ok(Ok(())))
    }

    async fn send_many(&mut self, chunks: Vec<Bytes>) -> bool {
        let mut bufs: Vec<std::io::IoSlice<'_>> = chunks.iter().map(|c| std::io::IoSlice::new(c)).collect();
        matches!(tokio::time::timeout(self.stall, self.sender.send_all_vectored(&mut bufs)).await, Ok(Ok(())))
    }
}

/// Send `last` (an `ERR` line), then close gently: what the client sent and nobody read (a
/// refused request's arguments, a flush after its pack) is read and dropped first, or closing
/// with unread input would reset the connection and could destroy what was sent before git
/// reads it.
async fn close_gently(tcp: &Arc<TcpStream>, last: Option<Bytes>) {
    if let Some(last) = last {
        let mut sender = crate::transport::zero_copy::Sender::new(tcp.clone());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), sender.send_all(&last)).await;
    }
    // SAFETY: shutting down the writing half of a socket this task holds open.
    if unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&**tcp), libc::SHUT_WR) } != 0 {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut left = 1usize << 20;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        while left > 0 {
            match tcp.readable().await.and_then(|()| tcp.try_read(&mut sink)) {
                Ok(0) => break,
                Ok(n) => left -= n.min(left),
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break,
            }
        }
    })
    .await;
}

/// Reads of the connection for its blocking part: each within `timeout`.
struct BlockingRead {
    tcp: Arc<TcpStream>,
    runtime: tokio::runtime::Handle,
    timeout: std::time::Duration,
    /// A read fails once the server's stop cancelled what was in flight.
    life: Arc<crate::lifecycle::Life>,
}

impl std::io::Read for BlockingRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let tcp = &self.tcp;
        let read = async {
            loop {
                tcp.readable().await?;
                match tcp.try_read(buf) {
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
                    done => return done,
                }
            }
        };
        crate::transport::read_within(&self.runtime, &self.life, self.timeout, read)
    }
}

/// What a client whose repository could not be resolved is told: git daemon's terse line unless
/// `--informative-errors`; a private repository is "not found" as a missing one is (its existence
/// is nobody's business; HTTP answers both with the same 404); a public one gixd cannot read,
/// the reason, always (never an empty answer).
fn refusal(state: &State, path: &str, err: RepoError) -> String {
    match err {
        err @ RepoError::Unsupported { exported: true, .. } => err.to_string(),
        RepoError::NotExported(path) | RepoError::Unsupported { path, exported: false, .. }
            if state.config.informative_errors =>
        {
            RepoError::NotFound(path).to_string()
        }
        err if state.config.informative_errors => err.to_string(),
        _ => format!("access denied or repository not exported: {}", crate::error::quoted(path, 256)),
    }
}

/// git:// connections: past `max_connections` one is told so and closed; each takes a transfer
/// slot (or is told the server is busy) and runs on a blocking thread of the pool.
pub async fn accept(listener: tokio::net::TcpListener, state: Arc<State>) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while let Some((stream, peer)) = super::accept(&listener, "git://", &state.life).await {
        let state = state.clone();
        let limit = state.config.max_connections;
        let guard = ConnectionCount::enter(&open);
        if limit > 0 && guard.count > limit {
            tracing::warn!(%peer, limit, "git:// connection refused: too many connections");
            // Told why, then closed gently: the request line it already sent is read and dropped
            // first, or the close would reset the connection and lose the message.
            tokio::spawn(async move {
                let _guard = guard;
                let mut stream = stream;
                refuse(&mut stream, "too many connections, try again later").await;
            });
            continue;
        }
        tokio::spawn(async move {
            let _guard = guard;
            let (_busy, life) = (state.life.busy(), state.life.clone());
            life.unless_cancelled(serve_git(state, stream, peer)).await;
        });
    }
}

/// One git:// connection: its request line, then the service it asks for.
async fn serve_git(state: Arc<State>, stream: tokio::net::TcpStream, peer: std::net::SocketAddr) {
    let mut stream = stream;
    // The request line arrives whole within init_timeout, before the connection takes a
    // thread or a transfer slot: idle or trickling connections cost neither.
    let line = match tokio::time::timeout(state.config.init_timeout, read_request_line(&mut stream)).await {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) => {
            return refuse(&mut stream, "expected a request line: git-upload-pack /path").await;
        }
        Ok(Err(_)) => return, // hung up
        Err(_) => {
            tracing::info!(%peer, "git:// request line did not arrive in time");
            return refuse(&mut stream, "timed out waiting for a request line: git-upload-pack /path").await;
        }
    };
    serve(state, stream, line).await;
}

/// One open git:// connection, counted while it lives.
struct ConnectionCount {
    open: Arc<std::sync::atomic::AtomicUsize>,
    /// Connections open with this one.
    count: usize,
}

impl ConnectionCount {
    fn enter(open: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        let count = open.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        ConnectionCount { open: open.clone(), count }
    }
}

impl Drop for ConnectionCount {
    fn drop(&mut self) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_give_service_path_host_and_extra_parameters() {
        let line = parse_request_line(b"git-upload-pack /a/b.git\0host=example.com:9418\0\0version=2\0").unwrap();
        assert_eq!(line.service, "git-upload-pack");
        assert_eq!(line.path, "/a/b.git");
        assert_eq!(line.host.as_deref(), Some("example.com:9418"));
        assert_eq!(line.extra, "version=2");
        let old = parse_request_line(b"git-upload-pack /r\0host=h\0").unwrap();
        assert_eq!(old.extra, "");
        assert!(parse_request_line(b"nonsense").is_none());
    }
}
