//! git:// (git daemon's protocol): one TCP connection per request, opened by a pkt-line
//! `git-upload-pack /path\0host=…\0[\0version=2\0]`, then the stateful v0 conversation or v2
//! commands on the same connection (or a push, or an archive, when those services are enabled).
//! A connection runs on one blocking thread from the pool it shares with HTTP, under the same
//! transfer limit; its writes are buffered to 128 KiB, so a pack leaves two side-band packets per
//! write.

use std::io::BufWriter;
use std::net::TcpStream;
use std::sync::Arc;

use crate::access_log::Record;
use crate::protocol::{self, Version, pkt};
use crate::session::{State, Tally};
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
    let peer = stream.peer_addr().ok();
    let started = std::time::Instant::now();
    let cpu = crate::metrics::thread_cpu_seconds();
    let mut seen = Seen {
        record: Record {
            transport: "git",
            peer: peer.map_or_else(String::new, |p| p.to_string()),
            status: "refused".into(),
            ..Record::default()
        },
        tally: Tally::default(),
        sent: std::cell::Cell::new(0),
    };
    let result = serve(&state, stream, &line, &mut seen);
    let mut record = seen.record;
    match &result {
        Ok(()) => {}
        Err(crate::error::ServeError::Disconnected) => {
            record.status = "disconnected".into();
            tracing::info!(?peer, "client went away")
        }
        // The same level as HTTP's failures: an operator filtering on WARN sees both.
        Err(err) => {
            record.status = "error".into();
            tracing::warn!(?peer, %err, "git:// request failed")
        }
    }
    (record.wants, record.haves) = seen.tally.counts();
    record.bytes = seen.sent.get();
    let cpu = crate::metrics::thread_cpu_seconds() - cpu;
    record.cpu_ms = cpu * 1e3;
    record.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    if record.objects.is_some() {
        state.metrics.generated(cpu);
    }
    state.finished(record);
}

/// What a connection's access-log line says, filled in as it is served.
struct Seen {
    record: Record,
    tally: Tally,
    /// Bytes written to the client after the refusals above.
    sent: std::cell::Cell<u64>,
}

/// The connection's writes, counted.
struct Counted<'a> {
    stream: &'a TcpStream,
    sent: &'a std::cell::Cell<u64>,
}

impl std::io::Write for Counted<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = (&mut &*self.stream).write(data)?;
        self.sent.set(self.sent.get() + n as u64);
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

fn serve(state: &State, stream: TcpStream, line: &[u8], seen: &mut Seen) -> Result<(), crate::error::ServeError> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(state.config.io_timeout))?;
    let Some(request) = parse_request_line(line) else {
        let _ = send_err(&stream, "malformed request line: expected 'git-upload-pack /path\\0host=…\\0'");
        return Ok(());
    };
    seen.record.service = request.service.chars().take(64).collect();
    seen.record.version = Some(Version::from_params(&request.extra).number());
    let services = &state.config.services;
    let enabled = match request.service.as_str() {
        "git-upload-pack" => services.upload_pack,
        "git-upload-archive" => services.upload_archive,
        "git-receive-pack" => services.receive_pack,
        _ => false,
    };
    if !enabled {
        let _ = send_err(
            &stream,
            &format!("service '{}' is not enabled", request.service.chars().take(64).collect::<String>()),
        );
        return Ok(());
    }
    let served = match state.repos.resolve(&request.path) {
        Ok(served) => served,
        Err(err) => {
            tracing::info!(path = %request.path, %err, "git:// request refused");
            let message = if let crate::error::RepoError::Unsupported { exported: true, .. } = &err {
                // A repository anyone may read that gixd cannot: never an empty answer, the reason.
                err.to_string()
            } else if state.config.informative_errors {
                // A private repository is "not found" as a missing one is: its existence is
                // nobody's business (HTTP answers both with the same 404).
                match err {
                    crate::error::RepoError::NotExported(path)
                    | crate::error::RepoError::Unsupported { path, exported: false, .. } => {
                        crate::error::RepoError::NotFound(path).to_string()
                    }
                    err => err.to_string(),
                }
            } else {
                format!(
                    "access denied or repository not exported: {}",
                    request.path.chars().take(256).collect::<String>()
                )
            };
            let _ = send_err(&stream, &message);
            return Ok(());
        }
    };
    tracing::info!(repo = %served.name, host = ?request.host, "git://");
    seen.record.repository = Some(served.name.clone());
    let _share = match state.shares.enter(&served.git_dir, stream.peer_addr().ok().map(|peer| peer.ip())) {
        Ok(share) => share,
        Err(refused) => {
            tracing::info!(repo = %served.name, ?refused, "git:// transfer refused: busy");
            let _ = send_err(&stream, refused.message());
            return Ok(());
        }
    };
    // Reads are held to a minimum rate (a trickling client is dropped within a window), and a
    // silent one is noticed at the end of a window too.
    let pace = if request.service == "git-receive-pack" { state.config.push_pace() } else { state.config.pace() };
    stream.set_read_timeout(Some(pace.window.min(state.config.io_timeout)))?;
    let input = Paced::new(&stream, pace);
    let ctx = state.context(&served, None, &seen.tally);
    seen.record.status = "ok".into();
    let out = BufWriter::with_capacity(WRITE_BUFFER, Counted { stream: &stream, sent: &seen.sent });
    if request.service == "git-upload-archive" {
        return protocol::archive::serve_stateful(&ctx, input, out);
    }
    let version = Version::from_params(&request.extra);
    if request.service == "git-receive-pack" {
        // git daemon's push: no authentication on git://, so only with --enable=receive-pack.
        let input = std::io::BufReader::with_capacity(64 * 1024, input);
        let outcome = match protocol::receive_pack(&ctx, version, protocol::Mode::Stateful, input, out) {
            Ok(Some(pushed)) => pushed.label(),
            Ok(None) => return Ok(()),
            Err(err) => {
                state.metrics.push("failed");
                return Err(err);
            }
        };
        state.metrics.push(outcome);
        seen.record.status = outcome.into();
        return Ok(());
    }
    // Only git-upload-pack is left: any other service was refused as not enabled above.
    let stats = protocol::upload_pack(&ctx, version, protocol::Input::Stateful(input), out)?;
    seen.record.objects = stats.map(|s| s.entries);
    Ok(())
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
