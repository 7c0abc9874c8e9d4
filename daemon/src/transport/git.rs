//! git:// (git daemon's protocol): one TCP connection per request, opened by a pkt-line
//! `git-upload-pack /path\0host=…\0[\0version=2\0]`, then the stateful v0 conversation or v2
//! commands on the same connection (or a push, or an archive, when those services are enabled).
//! A connection runs on one blocking thread from the pool it shares with HTTP, under the same
//! transfer limit; its writes are buffered to 128 KiB, so a pack leaves two side-band packets per
//! write.

use std::io::BufWriter;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::RepoError;
use crate::protocol::{Version, pkt};
use crate::service;
use crate::session::State;
use crate::transport::pace::Paced;

/// Writes of at least this many bytes leave together: two full side-band packets and the short
/// lines before them (with exactly 64 KiB, the first packet pushed out the lines before it as a
/// write of their own).
pub const WRITE_BUFFER: usize = 128 * 1024;

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

/// Serve one git:// connection, whose request line was read, to the end.
pub fn serve_connection(state: Arc<State>, stream: TcpStream, line: Vec<u8>) {
    let request = parse_request_line(&line);
    let service_name = request.as_ref().map_or("malformed", |r| r.service.as_str());
    let version = request.as_ref().map(|r| Version::from_params(&r.extra));
    let log = service::Request::new("git", stream.peer_addr().ok(), &crate::error::quoted(service_name, 64), version);
    serve(&state, &stream, request, log);
}

/// A request refused before it reached its service: told why, and recorded.
fn refused(state: &State, stream: &TcpStream, log: service::Request, message: &str) {
    tracing::info!(peer = %log.record.peer, message, "git:// request refused");
    let _ = send_err(stream, message);
    log.finish(state, service::Outcome::Refused);
}

/// The connection's writes, counted.
struct Counted<'a> {
    stream: &'a TcpStream,
    sent: &'a AtomicU64,
}

impl std::io::Write for Counted<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = (&mut &*self.stream).write(data)?;
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&mut &*self.stream).flush()
    }
}

/// Tell the client why, then close gently: what it sent after its request line (archive
/// arguments, wants) is read and dropped first, or closing with unread input would reset the
/// connection and could destroy the message before git reads it.
fn send_err(stream: &TcpStream, message: &str) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut w = pkt::Writer::new();
    w.err(message);
    (&*stream).write_all(&w.buf)?;
    stream.shutdown(std::net::Shutdown::Write)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(2)))?;
    let mut sink = [0u8; 4096];
    let mut left = 1 << 20;
    while left > 0 {
        match (&*stream).read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left -= n.min(left),
        }
    }
    Ok(())
}

/// Carry the connection to its service.
fn serve(state: &Arc<State>, stream: &TcpStream, request: Option<RequestLine>, mut log: service::Request) {
    let setup = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
        .and_then(|()| stream.set_write_timeout(Some(state.config.io_timeout)));
    if let Err(err) = setup {
        return refused(state, stream, log, &err.to_string());
    }
    let Some(request) = request else {
        return refused(state, stream, log, "malformed request line: expected 'git-upload-pack /path\\0host=…\\0'");
    };
    let services = &state.config.services;
    let service = match request.service.as_str() {
        "git-upload-pack" if services.upload_pack => service::Service::UploadPack,
        "git-upload-archive" if services.upload_archive => service::Service::UploadArchive,
        // git daemon's push: no authentication on git://, so only with --enable=receive-pack.
        "git-receive-pack" if services.receive_pack => service::Service::ReceivePack,
        other => {
            let message = format!("service '{}' is not enabled", crate::error::quoted(other, 64));
            return refused(state, stream, log, &message);
        }
    };
    let served = match state.repos.resolve(&request.path) {
        Ok(served) => served,
        Err(err) => return refused(state, stream, log, &refusal(state, &request.path, err)),
    };
    tracing::info!(repo = %served.name, host = ?request.host, "git://");
    log = log.serving(&served, None);
    let _share = match service::enter(state, &served, stream.peer_addr().ok().map(|peer| peer.ip())) {
        Ok(share) => share,
        Err(busy) => {
            let _ = send_err(stream, busy.message());
            return log.finish(state, service::Outcome::Busy);
        }
    };
    // Reads are held to a minimum rate (a trickling client is dropped within a window), and a
    // silent one is noticed at the end of a window too.
    let pace = if service == service::Service::ReceivePack { state.config.push_pace() } else { state.config.pace() };
    if let Err(err) = stream.set_read_timeout(Some(pace.window.min(state.config.io_timeout))) {
        return refused(state, stream, log, &err.to_string());
    }
    let sent = AtomicU64::new(0);
    let input = Paced::new(stream, pace);
    let out = BufWriter::with_capacity(WRITE_BUFFER, Counted { stream, sent: &sent });
    let asked = service::Asked { service, version: Version::from_params(&request.extra), pusher: None };
    service::connection(state, &served, asked, input, out, log, &sent);
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
