//! git:// (git daemon's protocol): one TCP connection per request, opened by a pkt-line
//! `git-upload-pack /path\0host=…\0[\0version=2\0]`, then the stateful v0 conversation or v2
//! commands on the same connection (or a push, or an archive, when those services are enabled).
//! A connection waits for a transfer slot in the server's queue (as long as its client stays),
//! then is served on one blocking thread from the pool it shares with HTTP, reading the socket
//! and writing into the transfer buffers, to its end or (upload-pack) to its pack; an async task
//! sends what it wrote, so a client reading slowly holds neither the slot nor the thread.

use std::sync::Arc;

use bytes::Bytes;
use tokio::net::TcpStream;

use crate::error::RepoError;
use crate::protocol::{Version, pkt};
use crate::service;
use crate::session::State;
use crate::transport::pace::Paced;

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

/// Serve one git:// connection, whose request line was read: a slot (waiting in the queue while
/// the client keeps the connection), the conversation on a blocking thread, and what it wrote
/// sent from here; the request's record is written once the last byte went.
pub async fn serve(state: Arc<State>, tcp: TcpStream, line: Vec<u8>) {
    let request = parse_request_line(&line);
    let service_name = request.as_ref().map_or("malformed", |r| r.service.as_str());
    let version = request.as_ref().map(|r| Version::from_params(&r.extra));
    let mut log = service::Request::new("git", tcp.peer_addr().ok(), &crate::error::quoted(service_name, 64), version);
    let tcp = Arc::new(tcp);
    // A client whose connection failed while queued (reset) is gone; one that closed its end may
    // have only half-closed after its request and still be reading, so it keeps its place (when
    // it is gone, its turn costs an advertisement that fails at its first write).
    let slot = tokio::select! {
        biased;
        slot = state.slot() => slot,
        () = hung_up(&tcp) => return log.finish(&state, service::Outcome::Disconnected),
    };
    let slot = match slot {
        Ok(slot) => slot,
        Err(refused) => {
            tracing::info!(peer = %log.record.peer, ?refused, "git:// transfer refused: busy");
            let mut w = pkt::Writer::new();
            w.err(service::busy_message(refused));
            close_gently(&tcp, Some(Bytes::from(w.buf))).await;
            return log.finish(&state, service::Outcome::Busy);
        }
    };
    log.record.wait_ms = Some(slot.waited.as_secs_f64() * 1e3);
    let (outbox, queue) = service::buffer::Outbox::new(state.clone());
    // Its own task (the conversation may end first), cancelled with the server's stop.
    let sending = {
        let (life, sent) = (state.life.clone(), send_then_close(tcp.clone(), queue, state.config.io_timeout));
        tokio::spawn(async move { life.unless_cancelled(sent).await })
    };
    let served = {
        let (state, tcp, runtime) = (state.clone(), tcp.clone(), tokio::runtime::Handle::current());
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            serve_blocking(
                &state,
                BlockingRead { tcp, runtime, timeout: state.config.io_timeout, life: state.life.clone() },
                request,
                outbox,
                log,
            )
        })
        .await
    };
    let sent = sending.await.ok().flatten();
    let Ok((mut log, outcome, share)) = served else { return };
    drop(share);
    if let Some(sent) = &sent {
        sent.record(&mut log.record);
    }
    let outcome = match outcome {
        service::Outcome::Ok if !sent.is_some_and(|s| s.complete) => service::Outcome::Disconnected,
        outcome => outcome,
    };
    log.finish(&state, outcome);
}

/// Returns once the connection failed (reset by the client); pending for ever otherwise
/// (what the client sends is read later, by whoever serves it).
async fn hung_up(tcp: &TcpStream) {
    let mut byte = [0u8; 1];
    if tcp.peek(&mut byte).await.is_ok() {
        std::future::pending::<()>().await;
    }
}

/// Send the queue's entries to the client, then close gently.
async fn send_then_close(
    tcp: Arc<TcpStream>,
    queue: service::buffer::Queue,
    stall: std::time::Duration,
) -> service::buffer::Sent {
    let mut outlet = Socket { sender: crate::transport::zero_copy::Sender::new(tcp.clone()), stall };
    let sent = service::buffer::send(queue, &mut outlet).await;
    close_gently(&tcp, None).await;
    sent
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

/// A request refused before it reached its service: told why (the sending side sends it and
/// closes), and its record handed back as refused.
fn refused(
    log: service::Request,
    out: &mut service::buffer::Outbox,
    message: &str,
) -> (service::Request, service::Outcome, Option<crate::session::Share>) {
    tracing::info!(peer = %log.record.peer, message, "git:// request refused");
    let mut w = pkt::Writer::new();
    w.err(message);
    let _ = std::io::Write::write_all(out, &w.buf);
    (log, service::Outcome::Refused, None)
}

/// Carry the connection to its service, on a blocking thread.
fn serve_blocking(
    state: &Arc<State>,
    input: BlockingRead,
    request: Option<RequestLine>,
    mut out: service::buffer::Outbox,
    mut log: service::Request,
) -> (service::Request, service::Outcome, Option<crate::session::Share>) {
    let Some(request) = request else {
        return refused(log, &mut out, "malformed request line: expected 'git-upload-pack /path\\0host=…\\0'");
    };
    let services = &state.config.services;
    // git daemon's push: no authentication on git://, so only with --enable=receive-pack.
    let enabled = |service: &service::Service| match service {
        service::Service::UploadPack => services.upload_pack,
        service::Service::UploadArchive => services.upload_archive,
        service::Service::ReceivePack => services.receive_pack,
    };
    let Some(service) = service::Service::from_name(&request.service).filter(enabled) else {
        let message = format!("service '{}' is not enabled", crate::error::quoted(&request.service, 64));
        return refused(log, &mut out, &message);
    };
    let served = match state.repos.resolve(&request.path) {
        Ok(served) => served,
        Err(err) => return refused(log, &mut out, &refusal(state, &request.path, err)),
    };
    tracing::info!(repo = %served.name, host = ?request.host, "git://");
    log = log.serving(&served, None);
    let client = input.tcp.peer_addr().ok().map(|peer| peer.ip());
    let share = match service::enter(state, &served, client) {
        Ok(share) => share,
        Err(busy) => {
            let (log, _, _) = refused(log, &mut out, busy.message());
            return (log, service::Outcome::Busy, None);
        }
    };
    // Reads are held to a minimum rate (a trickling client is dropped within a window), and a
    // silent one is noticed at the end of a window too.
    let pace = if service == service::Service::ReceivePack { state.config.push_pace() } else { state.config.pace() };
    let input = BlockingRead { timeout: pace.window.min(state.config.io_timeout), ..input };
    let asked = service::Asked { service, version: Version::from_params(&request.extra), pusher: None };
    let (log, outcome) = service::connection(state, &served, asked, Paced::new(input, pace), &mut out, log);
    (log, outcome, Some(share))
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
